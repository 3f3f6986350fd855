// anvil's ANE simulator: the neural-network kernels (conv, matmul, linear, softmax, norms, pooling,
// upsampling), plain loops that document the MIL semantics of mil_ops.json. Float accumulation; the caller
// rounds results to fp16. 1-D spatial ops (rank-3 x) run as 2-D ones with height 1.
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>

#include "mil_executor.hpp"

namespace anvil_sim::mil {

namespace {

using shape_t = std::vector<std::int64_t>;

std::size_t at(std::int64_t i) {
    return static_cast<std::size_t>(i);
}

// Spatial parameters of conv and pooling, with 1-D ops lifted to 2-D (height 1).
struct window {
    std::int64_t in_h = 1, in_w = 1, k_h = 1, k_w = 1, s_h = 1, s_w = 1, d_h = 1, d_w = 1;
    std::int64_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0, out_h = 1, out_w = 1;
};

window make_window(const op_context& c, const shape_t& x, const shape_t& kernel, bool pooling) {
    const std::size_t spatial = x.size() - 2;
    if (x.size() < 3 || x.size() > 4)
        c.fail("x must be rank 3 or 4 [N, C, (H,) W] here, got rank " + std::to_string(x.size()));
    if (kernel.size() != spatial)
        c.fail("the kernel has " + std::to_string(kernel.size()) + " spatial dims, x has " +
               std::to_string(spatial));
    auto per_axis = [&](std::string_view name) {
        shape_t v = c.integers(name);
        if (v.empty()) v.assign(spatial, 1);
        if (v.size() != spatial) c.fail(std::string(name) + " needs " + std::to_string(spatial) + " entries");
        for (std::int64_t e : v)
            if (e < 1) c.fail(std::string(name) + " entries must be positive");
        return v;
    };
    const shape_t strides = per_axis("strides");
    const shape_t dilations = pooling ? shape_t(spatial, 1) : per_axis("dilations");
    window w;
    const bool two_d = spatial == 2;
    w.in_h = two_d ? x[2] : 1;
    w.in_w = x.back();
    w.k_h = two_d ? kernel[0] : 1;
    w.k_w = kernel.back();
    w.s_h = two_d ? strides[0] : 1;
    w.s_w = strides.back();
    w.d_h = two_d ? dilations[0] : 1;
    w.d_w = dilations.back();
    const std::string pad_type = c.text("pad_type", "valid");
    shape_t pads(2 * spatial, 0);
    const bool ceil_mode = pooling && c.boolean("ceil_mode", false);
    auto extent = [](std::int64_t k, std::int64_t d) { return (k - 1) * d + 1; };
    auto out_size = [&](std::int64_t in, std::int64_t pad, std::int64_t k, std::int64_t d, std::int64_t s) {
        const std::int64_t span = in + pad - extent(k, d);
        if (span < 0) c.fail("the kernel is larger than the padded input");
        return (ceil_mode ? (span + s - 1) / s : span / s) + 1;
    };
    if (pad_type == "custom") {
        const shape_t p = c.integers("pad");
        if (!p.empty()) {
            if (p.size() != 2 * spatial) c.fail("pad needs " + std::to_string(2 * spatial) + " entries");
            pads = p;
        }
    } else if (pad_type == "same" || pad_type == "same_lower") {
        const shape_t in = two_d ? shape_t{w.in_h, w.in_w} : shape_t{w.in_w};
        const shape_t k = two_d ? shape_t{w.k_h, w.k_w} : shape_t{w.k_w};
        const shape_t s = two_d ? shape_t{w.s_h, w.s_w} : shape_t{w.s_w};
        const shape_t d = two_d ? shape_t{w.d_h, w.d_w} : shape_t{w.d_w};
        for (std::size_t i = 0; i < spatial; ++i) {
            const std::int64_t out = (in[i] + s[i] - 1) / s[i];
            const std::int64_t total =
                std::max<std::int64_t>(0, (out - 1) * s[i] + extent(k[i], d[i]) - in[i]);
            const std::int64_t small = total / 2;
            pads[2 * i] = pad_type == "same" ? small : total - small;
            pads[2 * i + 1] = total - pads[2 * i];
        }
    } else if (pad_type != "valid") {
        c.fail("pad_type '" + pad_type + "' is not valid, same, same_lower or custom");
    }
    for (std::int64_t p : pads)
        if (p < 0) c.fail("negative padding");
    if (two_d) {
        w.pad_top = pads[0];
        w.pad_bottom = pads[1];
    }
    w.pad_left = pads[2 * spatial - 2];
    w.pad_right = pads[2 * spatial - 1];
    w.out_h = out_size(w.in_h, w.pad_top + w.pad_bottom, w.k_h, w.d_h, w.s_h);
    w.out_w = out_size(w.in_w, w.pad_left + w.pad_right, w.k_w, w.d_w, w.s_w);
    return w;
}

shape_t spatial_shape(const shape_t& x, std::int64_t channels, const window& w) {
    shape_t out = {x[0], channels};
    if (x.size() == 4) out.push_back(w.out_h);
    out.push_back(w.out_w);
    return out;
}

}  // namespace

void run_conv(op_context& c) {
    const tensor& x = c.in("x");
    const tensor& weight = c.in("weight");
    const std::int64_t groups = c.integer("groups", 1);
    if (x.shape.size() < 3 || x.shape.size() > 4) c.fail("x must be rank 3 or 4 [N, C, (H,) W] here");
    if (weight.shape.size() != x.shape.size())
        c.fail("weight rank " + std::to_string(weight.shape.size()) + " differs from x rank " +
               std::to_string(x.shape.size()));
    const shape_t kernel(weight.shape.begin() + 2, weight.shape.end());
    const window w = make_window(c, x.shape, kernel, false);
    const std::int64_t c_in = x.shape[1], c_out = weight.shape[0];
    if (groups < 1 || c_in % groups != 0 || c_out % groups != 0 || weight.shape[1] != c_in / groups)
        c.fail("weight " + type_text({weight.type, weight.shape, false}) + " does not fit x with " +
               std::to_string(c_in) + " channels and groups = " + std::to_string(groups));
    const tensor* bias = c.has("bias") ? &c.in("bias") : nullptr;
    if (bias && (bias->shape.size() != 1 || bias->shape[0] != c_out))
        c.fail("bias must have shape [" + std::to_string(c_out) + "]");
    tensor& out = c.output(0, x.type, spatial_shape(x.shape, c_out, w));
    if (c.shape_only()) return;
    const auto& xd = c.data(x);
    const auto& wd = c.data(weight);
    const std::int64_t per_group_in = c_in / groups, per_group_out = c_out / groups;
    const std::int64_t in_plane = w.in_h * w.in_w, out_plane = w.out_h * w.out_w;
    for (std::int64_t n = 0; n < x.shape[0]; ++n)
        for (std::int64_t oc = 0; oc < c_out; ++oc) {
            const std::int64_t g = oc / per_group_out;
            float* o = &out.data[at((n * c_out + oc) * out_plane)];
            const float b = bias ? c.data(*bias)[at(oc)] : 0.0f;
            std::fill(o, o + out_plane, b);
            for (std::int64_t ic = 0; ic < per_group_in; ++ic) {
                const float* in = &xd[at((n * c_in + g * per_group_in + ic) * in_plane)];
                const float* k = &wd[at((oc * per_group_in + ic) * w.k_h * w.k_w)];
                for (std::int64_t kh = 0; kh < w.k_h; ++kh)
                    for (std::int64_t kw = 0; kw < w.k_w; ++kw) {
                        const float kv = k[kh * w.k_w + kw];
                        for (std::int64_t oh = 0; oh < w.out_h; ++oh) {
                            const std::int64_t ih = oh * w.s_h + kh * w.d_h - w.pad_top;
                            if (ih < 0 || ih >= w.in_h) continue;
                            for (std::int64_t ow = 0; ow < w.out_w; ++ow) {
                                const std::int64_t iw = ow * w.s_w + kw * w.d_w - w.pad_left;
                                if (iw < 0 || iw >= w.in_w) continue;
                                o[oh * w.out_w + ow] += kv * in[ih * w.in_w + iw];
                            }
                        }
                    }
            }
        }
}

void run_matmul(op_context& c) {
    const tensor& x = c.in("x");
    const tensor& y = c.in("y");
    if (x.shape.empty() || y.shape.empty()) c.fail("x and y must have rank >= 1");
    shape_t xs = x.shape, ys = y.shape;
    const bool x_vector = xs.size() == 1, y_vector = ys.size() == 1;
    if (x_vector) xs.insert(xs.begin(), 1);
    if (y_vector) ys.push_back(1);
    const bool tx = c.boolean("transpose_x", false), ty = c.boolean("transpose_y", false);
    if (tx && !x_vector) std::swap(xs[xs.size() - 1], xs[xs.size() - 2]);
    if (ty && !y_vector) std::swap(ys[ys.size() - 1], ys[ys.size() - 2]);
    const std::int64_t m = xs[xs.size() - 2], k = xs.back(), n = ys.back();
    if (ys[ys.size() - 2] != k)
        c.fail("inner dimensions differ: x gives " + std::to_string(k) + ", y gives " +
               std::to_string(ys[ys.size() - 2]));
    const shape_t xb(xs.begin(), xs.end() - 2), yb(ys.begin(), ys.end() - 2);
    shape_t batch(std::max(xb.size(), yb.size()), 1);
    for (std::size_t i = 0; i < batch.size(); ++i) {
        const std::int64_t a = i < batch.size() - xb.size() ? 1 : xb[i - (batch.size() - xb.size())];
        const std::int64_t b = i < batch.size() - yb.size() ? 1 : yb[i - (batch.size() - yb.size())];
        if (a != b && a != 1 && b != 1) c.fail("batch dimensions do not broadcast");
        batch[i] = a == 1 ? b : a;
    }
    shape_t result = batch;
    if (!x_vector) result.push_back(m);
    if (!y_vector) result.push_back(n);
    const bool x_const = x.has_data && c.shape_only();
    tensor& out = c.output(0, x_const && !y.has_data ? y.type : x.type, result);
    if (c.shape_only()) return;
    const auto &xd = c.data(x), &yd = c.data(y);
    const std::int64_t batches = element_count(batch);
    // batch index -> offsets into x and y, broadcasting size-1 batch dims
    for (std::int64_t bi = 0; bi < batches; ++bi) {
        std::int64_t rest = bi, xo = 0, yo = 0, xstride = m * k, ystride = k * n;
        for (std::size_t d = batch.size(); d-- > 0;) {
            const std::int64_t i = rest % batch[d];
            rest /= batch[d];
            const std::size_t xoff = batch.size() - xb.size(), yoff = batch.size() - yb.size();
            if (d >= xoff) {
                if (xb[d - xoff] != 1) xo += i * xstride;
                xstride *= xb[d - xoff];
            }
            if (d >= yoff) {
                if (yb[d - yoff] != 1) yo += i * ystride;
                ystride *= yb[d - yoff];
            }
        }
        for (std::int64_t r = 0; r < m; ++r)
            for (std::int64_t col = 0; col < n; ++col) {
                float sum = 0.0f;
                for (std::int64_t j = 0; j < k; ++j) {
                    const float a = tx && !x_vector ? xd[at(xo + j * m + r)] : xd[at(xo + r * k + j)];
                    const float b = ty && !y_vector ? yd[at(yo + col * k + j)] : yd[at(yo + j * n + col)];
                    sum += a * b;
                }
                out.data[at((bi * m + r) * n + col)] = sum;
            }
    }
}

// einsum in the one form MIL has (mil_ops.json): "nchw,nwhu->nchu", or "chw,whr->chr" at rank 3, under
// any relabelling of the letters: out[n, c, h, u] = sum over w of x[n, c, h, w] * y[n, w, h, u]. The h axis
// is a batch that both operands share; split-einsum attention sets it to 1 and slices heads on c.
void run_einsum(op_context& c) {
    const auto values = c.tuple("values");
    if (values.size() != 2) c.fail("values must hold exactly two tensors");
    const std::string equation = c.text("equation", "");
    const std::size_t comma = equation.find(','), arrow = equation.find("->");
    if (comma == std::string::npos || arrow == std::string::npos || arrow < comma)
        c.fail("equation '" + equation + "' is not of the form 'xs,ys->zs'");
    const std::string xs = equation.substr(0, comma), ys = equation.substr(comma + 1, arrow - comma - 1),
                      zs = equation.substr(arrow + 2);
    const tensor& x = *values[0];
    const tensor& y = *values[1];
    const std::size_t rank = xs.size();
    const bool distinct =
        std::set<char>(xs.begin(), xs.end()).size() == rank &&
        (rank == 3 ? std::set<char>{xs[0], xs[1], xs[2], ys[2]}.size() == 4
                   : rank == 4 && std::set<char>{xs[0], xs[1], xs[2], xs[3], ys[3]}.size() == 5);
    // Rank 4: x = n c h w, y = n w h u, out = n c h u. Rank 3 drops n.
    const std::size_t o = rank == 4 ? 1 : 0;  // where c starts
    const bool pattern = distinct && ys.size() == rank && zs.size() == rank &&
                         (rank == 3 || (ys[0] == xs[0] && zs[0] == xs[0])) && ys[o] == xs[o + 2] &&
                         ys[o + 1] == xs[o + 1] && zs[o] == xs[o] && zs[o + 1] == xs[o + 1] &&
                         zs[o + 2] == ys[o + 2];
    if (!pattern)
        c.fail("equation '" + equation +
               "' is not MIL's einsum form 'nchw,nwhu->nchu' (or 'chw,whr->chr') under a relabelling");
    if (x.shape.size() != rank || y.shape.size() != rank)
        c.fail("the equation has rank " + std::to_string(rank) + " but the values are " +
               shape_text(x.shape) + " and " + shape_text(y.shape));
    if (x.type != y.type) c.fail("the values differ in dtype");
    const std::int64_t batch = rank == 4 ? x.shape[0] : 1;
    const std::int64_t channels = x.shape[o], heads = x.shape[o + 1], inner = x.shape[o + 2];
    const std::int64_t width = y.shape[o + 2];
    if ((rank == 4 && y.shape[0] != batch) || y.shape[o] != inner || y.shape[o + 1] != heads)
        c.fail("the values " + shape_text(x.shape) + " and " + shape_text(y.shape) + " do not fit '" +
               equation + "'");
    shape_t result = rank == 4 ? shape_t{batch, channels, heads, width} : shape_t{channels, heads, width};
    tensor& out = c.output(0, x.type, result);
    if (c.shape_only()) return;
    const auto &xd = c.data(x), &yd = c.data(y);
    for (std::int64_t n = 0; n < batch; ++n)
        for (std::int64_t ch = 0; ch < channels; ++ch)
            for (std::int64_t h = 0; h < heads; ++h) {
                float* row = &out.data[at(((n * channels + ch) * heads + h) * width)];
                std::fill(row, row + width, 0.0f);
                for (std::int64_t w = 0; w < inner; ++w) {
                    const float a = xd[at(((n * channels + ch) * heads + h) * inner + w)];
                    const float* b = &yd[at(((n * inner + w) * heads + h) * width)];
                    for (std::int64_t u = 0; u < width; ++u)
                        row[u] += a * b[u];
                }
            }
}

void run_linear(op_context& c) {
    const tensor& x = c.in("x");
    const tensor& weight = c.in("weight");
    if (x.shape.empty() || weight.shape.size() != 2 || weight.shape[1] != x.shape.back())
        c.fail("weight must be [D_out, " +
               (x.shape.empty() ? std::string("?") : std::to_string(x.shape.back())) + "]");
    const std::int64_t d_in = weight.shape[1], d_out = weight.shape[0];
    const tensor* bias = c.has("bias") ? &c.in("bias") : nullptr;
    if (bias && (bias->shape.size() != 1 || bias->shape[0] != d_out))
        c.fail("bias must have shape [" + std::to_string(d_out) + "]");
    shape_t shape = x.shape;
    shape.back() = d_out;
    tensor& out = c.output(0, x.type, shape);
    if (c.shape_only()) return;
    const auto &xd = c.data(x), &wd = c.data(weight);
    const std::int64_t rows = element_count(x.shape) / std::max<std::int64_t>(d_in, 1);
    for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t o = 0; o < d_out; ++o) {
            float sum = bias ? c.data(*bias)[at(o)] : 0.0f;
            for (std::int64_t j = 0; j < d_in; ++j)
                sum += xd[at(r * d_in + j)] * wd[at(o * d_in + j)];
            out.data[at(r * d_out + o)] = sum;
        }
}

void run_softmax(op_context& c) {
    const tensor& x = c.in("x");
    const auto axis = normalize_axis(c, c.integer("axis", -1), x.shape.size());
    tensor& out = c.output(0, x.type, x.shape);
    if (c.shape_only()) return;
    const auto& xd = c.data(x);
    const std::int64_t n = x.shape[at(axis)];
    std::int64_t inner = 1;
    for (std::size_t d = at(axis) + 1; d < x.shape.size(); ++d)
        inner *= x.shape[d];
    const std::int64_t outer = element_count(x.shape) / std::max<std::int64_t>(n * inner, 1);
    const float minus_infinity = -std::numeric_limits<float>::infinity();
    for (std::int64_t o = 0; o < outer; ++o)
        for (std::int64_t i = 0; i < inner; ++i) {
            const std::int64_t base = o * n * inner + i;
            float peak = minus_infinity;
            bool holds_infinity = false;
            for (std::int64_t j = 0; j < n; ++j) {
                peak = std::max(peak, xd[at(base + j * inner)]);
                holds_infinity = holds_infinity || xd[at(base + j * inner)] == minus_infinity;
            }
            // RUNTIME.md §0b #24: the Neural Engine's softmax returns NaN for a row that holds -inf (the
            // program reports it, mil_program.cpp).
            if (holds_infinity && c.neural_engine()) {
                for (std::int64_t j = 0; j < n; ++j)
                    out.data[at(base + j * inner)] = std::numeric_limits<float>::quiet_NaN();
                continue;
            }
            float sum = 0.0f;
            for (std::int64_t j = 0; j < n; ++j) {
                const float e = std::exp(xd[at(base + j * inner)] - peak);
                out.data[at(base + j * inner)] = e;
                sum += e;
            }
            for (std::int64_t j = 0; j < n; ++j)
                out.data[at(base + j * inner)] /= sum;
        }
}

namespace {

// Normalizes x over the `reduced` axes: out = (x - mean) / sqrt(var + eps) * scale(e) + shift(e), where e
// indexes the element within the reduced axes (layer_norm) or its channel (instance_norm).
template <class Scale>
void normalize(const op_context& c, const tensor& x, tensor& out, const std::vector<bool>& reduced, float eps,
               Scale&& affine) {
    const auto& xd = c.data(x);
    const std::size_t rank = x.shape.size();
    shape_t group_shape(rank), group_strides(rank, 0), inner_strides(rank, 0);
    std::int64_t groups = 1, inner = 1;
    for (std::size_t d = rank; d-- > 0;) {
        if (reduced[d]) {
            inner_strides[d] = inner;
            inner *= x.shape[d];
        } else {
            group_strides[d] = groups;
            groups *= x.shape[d];
        }
    }
    std::vector<std::int64_t> group_of(xd.size()), inner_of(xd.size());
    shape_t index(rank, 0);
    for (std::size_t linear = 0; linear < xd.size(); ++linear) {
        std::int64_t g = 0, e = 0;
        for (std::size_t d = 0; d < rank; ++d) {
            g += index[d] * group_strides[d];
            e += index[d] * inner_strides[d];
        }
        group_of[linear] = g;
        inner_of[linear] = e;
        for (std::size_t d = rank; d-- > 0;) {
            if (++index[d] < x.shape[d]) break;
            index[d] = 0;
        }
    }
    std::vector<double> mean(at(groups), 0.0), var(at(groups), 0.0);
    for (std::size_t i = 0; i < xd.size(); ++i)
        mean[at(group_of[i])] += xd[i];
    for (auto& m : mean)
        m /= static_cast<double>(std::max<std::int64_t>(inner, 1));
    for (std::size_t i = 0; i < xd.size(); ++i) {
        const double d = xd[i] - mean[at(group_of[i])];
        var[at(group_of[i])] += d * d;
    }
    for (auto& v : var)
        v /= static_cast<double>(std::max<std::int64_t>(inner, 1));
    for (std::size_t i = 0; i < xd.size(); ++i) {
        const auto g = at(group_of[i]);
        const float normalized = static_cast<float>((xd[i] - mean[g]) / std::sqrt(var[g] + eps));
        out.data[i] = affine(normalized, inner_of[i], static_cast<std::int64_t>(i));
    }
}

const std::vector<float>* optional_data(const op_context& c, std::string_view name, std::int64_t expected) {
    if (!c.has(name)) return nullptr;
    const tensor& t = c.in(name);
    if (element_count(t.shape) != expected)
        c.fail(std::string(name) + " has " + std::to_string(element_count(t.shape)) + " elements, expected " +
               std::to_string(expected));
    return c.shape_only() ? nullptr : &c.data(t);
}

}  // namespace

void run_layer_norm(op_context& c) {
    const tensor& x = c.in("x");
    std::vector<bool> reduced(x.shape.size(), !c.has("axes"));
    std::int64_t inner = 1;
    for (std::int64_t a : c.integers("axes"))
        reduced[at(normalize_axis(c, a, x.shape.size()))] = true;
    for (std::size_t d = 0; d < x.shape.size(); ++d)
        if (reduced[d]) inner *= x.shape[d];
    const auto* gamma = optional_data(c, "gamma", inner);
    const auto* beta = optional_data(c, "beta", inner);
    const auto eps = static_cast<float>(c.number("epsilon", 1e-5));
    tensor& out = c.output(0, x.type, x.shape);
    if (c.shape_only()) return;
    normalize(c, x, out, reduced, eps, [&](float v, std::int64_t e, std::int64_t) {
        return v * (gamma ? (*gamma)[at(e)] : 1.0f) + (beta ? (*beta)[at(e)] : 0.0f);
    });
}

void run_instance_norm(op_context& c) {
    const tensor& x = c.in("x");
    if (x.shape.size() < 3) c.fail("x must be rank >= 3 [N, C, ...]");
    std::vector<bool> reduced(x.shape.size(), true);
    reduced[0] = reduced[1] = false;
    const std::int64_t channels = x.shape[1];
    const std::int64_t plane = element_count(x.shape) / std::max<std::int64_t>(x.shape[0] * channels, 1);
    const auto* gamma = optional_data(c, "gamma", channels);
    const auto* beta = optional_data(c, "beta", channels);
    const auto eps = static_cast<float>(c.number("epsilon", 1e-5));
    tensor& out = c.output(0, x.type, x.shape);
    if (c.shape_only()) return;
    normalize(c, x, out, reduced, eps, [&](float v, std::int64_t, std::int64_t linear) {
        const auto ch = at((linear / plane) % channels);
        return v * (gamma ? (*gamma)[ch] : 1.0f) + (beta ? (*beta)[ch] : 0.0f);
    });
}

void run_batch_norm(op_context& c) {
    const tensor& x = c.in("x");
    if (x.shape.size() < 2) c.fail("x must be rank >= 2 [N, C, ...]");
    const std::int64_t channels = x.shape[1];
    const auto* mean = optional_data(c, "mean", channels);
    const auto* variance = optional_data(c, "variance", channels);
    const auto* gamma = optional_data(c, "gamma", channels);
    const auto* beta = optional_data(c, "beta", channels);
    const auto eps = static_cast<float>(c.number("epsilon", 1e-5));
    tensor& out = c.output(0, x.type, x.shape);
    if (c.shape_only()) return;
    if (!mean || !variance) c.fail("needs mean and variance");
    const auto& xd = c.data(x);
    const std::int64_t plane = element_count(x.shape) / std::max<std::int64_t>(x.shape[0] * channels, 1);
    for (std::size_t i = 0; i < xd.size(); ++i) {
        const auto ch = at((static_cast<std::int64_t>(i) / plane) % channels);
        const float v = (xd[i] - (*mean)[ch]) / std::sqrt((*variance)[ch] + eps);
        out.data[i] = v * (gamma ? (*gamma)[ch] : 1.0f) + (beta ? (*beta)[ch] : 0.0f);
    }
}

void run_pool(op_context& c) {
    const tensor& x = c.in("x");
    const window w = make_window(c, x.shape, c.integers("kernel_sizes"), true);
    const bool is_max = c.op() == "max_pool";
    const bool exclude_padding = c.boolean("exclude_padding_from_average", false);
    tensor& out = c.output(0, x.type, spatial_shape(x.shape, x.shape[1], w));
    if (c.shape_only()) return;
    const auto& xd = c.data(x);
    const std::int64_t planes = x.shape[0] * x.shape[1];
    for (std::int64_t p = 0; p < planes; ++p)
        for (std::int64_t oh = 0; oh < w.out_h; ++oh)
            for (std::int64_t ow = 0; ow < w.out_w; ++ow) {
                float acc = is_max ? -std::numeric_limits<float>::infinity() : 0.0f;
                std::int64_t inside = 0;
                for (std::int64_t kh = 0; kh < w.k_h; ++kh)
                    for (std::int64_t kw = 0; kw < w.k_w; ++kw) {
                        const std::int64_t ih = oh * w.s_h + kh - w.pad_top,
                                           iw = ow * w.s_w + kw - w.pad_left;
                        if (ih < 0 || ih >= w.in_h || iw < 0 || iw >= w.in_w) continue;
                        const float v = xd[at((p * w.in_h + ih) * w.in_w + iw)];
                        acc = is_max ? std::max(acc, v) : acc + v;
                        ++inside;
                    }
                if (!is_max)
                    acc /= static_cast<float>(exclude_padding ? std::max<std::int64_t>(inside, 1)
                                                              : w.k_h * w.k_w);
                out.data[at((p * w.out_h + oh) * w.out_w + ow)] = acc;
            }
}

void run_upsample(op_context& c) {
    const tensor& x = c.in("x");
    if (x.shape.size() < 3) c.fail("x must be rank >= 3");
    const double sh = c.number("scale_factor_height", 1.0), sw = c.number("scale_factor_width", 1.0);
    if (!(sh > 0.0) || !(sw > 0.0) || sh > 1e4 || sw > 1e4) c.fail("scale factors must be positive");
    const std::int64_t in_h = x.shape[x.shape.size() - 2], in_w = x.shape.back();
    const auto out_h = static_cast<std::int64_t>(std::floor(static_cast<double>(in_h) * sh));
    const auto out_w = static_cast<std::int64_t>(std::floor(static_cast<double>(in_w) * sw));
    shape_t shape = x.shape;
    shape[shape.size() - 2] = out_h;
    shape.back() = out_w;
    const bool bilinear = c.op() == "upsample_bilinear";
    const bool align_corners = bilinear && c.boolean("align_corners", true);
    const bool half_pixel = bilinear && c.boolean("half_pixel_centers", !align_corners);
    tensor& out = c.output(0, x.type, shape);
    if (c.shape_only()) return;
    const auto& xd = c.data(x);
    // Source coordinate of an output coordinate along one axis (scale recomputed from the sizes).
    auto source = [&](std::int64_t o, std::int64_t in, std::int64_t outn) {
        if (align_corners)
            return outn > 1
                       ? static_cast<double>(o) * static_cast<double>(in - 1) / static_cast<double>(outn - 1)
                       : 0.0;
        const double scale = static_cast<double>(in) / static_cast<double>(outn);
        return half_pixel ? std::max(0.0, (static_cast<double>(o) + 0.5) * scale - 0.5)
                          : static_cast<double>(o) * scale;
    };
    const std::int64_t planes = element_count(x.shape) / std::max<std::int64_t>(in_h * in_w, 1);
    for (std::int64_t p = 0; p < planes; ++p)
        for (std::int64_t oh = 0; oh < out_h; ++oh)
            for (std::int64_t ow = 0; ow < out_w; ++ow) {
                const float* plane = &xd[at(p * in_h * in_w)];
                float v;
                if (!bilinear) {
                    const auto ih = std::min<std::int64_t>(
                        in_h - 1, static_cast<std::int64_t>(std::floor(static_cast<double>(oh) / sh)));
                    const auto iw = std::min<std::int64_t>(
                        in_w - 1, static_cast<std::int64_t>(std::floor(static_cast<double>(ow) / sw)));
                    v = plane[ih * in_w + iw];
                } else {
                    const double fy = std::min(source(oh, in_h, out_h), static_cast<double>(in_h - 1));
                    const double fx = std::min(source(ow, in_w, out_w), static_cast<double>(in_w - 1));
                    const auto y0 = static_cast<std::int64_t>(fy), x0 = static_cast<std::int64_t>(fx);
                    const std::int64_t y1 = std::min(y0 + 1, in_h - 1), x1 = std::min(x0 + 1, in_w - 1);
                    const auto dy = static_cast<float>(fy - static_cast<double>(y0));
                    const auto dx = static_cast<float>(fx - static_cast<double>(x0));
                    const float top = plane[y0 * in_w + x0] * (1 - dx) + plane[y0 * in_w + x1] * dx;
                    const float bottom = plane[y1 * in_w + x0] * (1 - dx) + plane[y1 * in_w + x1] * dx;
                    v = top * (1 - dy) + bottom * dy;
                }
                out.data[at((p * out_h + oh) * out_w + ow)] = v;
            }
}

}  // namespace anvil_sim::mil
