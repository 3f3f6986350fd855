// anvil: the VJP table's definitions (see vjp.hpp; compilation.hpp says when this file is compiled). Each row
// follows PyTorch's derivatives.yaml where a choice exists (ties of maximum split the gradient in halves,
// clamp passes it at its bounds, max pooling sends it to the first maximum of a window, amax-style reductions
// split it evenly among ties), so the test can compare against torch.autograd.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numbers>
#include <string>
#include <utility>
#include <vector>

#include "anvil/backend/cpu/reference/convolution.hpp"
#include "anvil/core/error.hpp"
#include "anvil/graph/vjp.hpp"

namespace anvil::detail::autodiff {

// --- builder ---------------------------------------------------------------------------------------------

ANVIL_INLINE std::vector<float> builder::ones(const dims& shape) {
    return std::vector<float>(static_cast<std::size_t>(shape.element_count()), 1.0f);
}

ANVIL_INLINE value builder::constant(std::vector<float> values, const dims& shape, dtype type,
                                     std::string label) {
    value v = graph_.constant(host_tensor::from(values, shape), std::move(label));
    return type == dtype::f32 ? v : cast(v, type);
}

ANVIL_INLINE value builder::zeros(dtype type, const dims& shape) {
    return graph_.constant(host_tensor(type, shape), "zeros");
}

ANVIL_INLINE value builder::cast(const value& a, dtype to) {
    if (a.type() == to) return a;
    attributes attrs;
    attrs.to = to;
    return apply(op::cast, {a}, attrs);
}

ANVIL_INLINE value builder::matmul(const value& a, const value& b, bool transpose_a, bool transpose_b) {
    attributes attrs;
    attrs.transpose_a = transpose_a;
    attrs.transpose_b = transpose_b;
    return apply(op::matmul, {a, b}, attrs);
}

ANVIL_INLINE value builder::reshape(const value& a, const dims& shape) {
    if (a.shape() == shape) return a;
    attributes attrs;
    attrs.sizes.assign(shape.begin(), shape.end());
    return apply(op::reshape, {a}, attrs);
}

ANVIL_INLINE value builder::permute(const value& a, std::vector<std::int64_t> axes) {
    attributes attrs;
    attrs.axes = std::move(axes);
    return apply(op::permute, {a}, attrs);
}

ANVIL_INLINE value builder::slice(const value& a, std::vector<std::int64_t> begin,
                                  std::vector<std::int64_t> end, std::vector<std::int64_t> step) {
    attributes attrs;
    attrs.begin = std::move(begin);
    attrs.end = std::move(end);
    attrs.step = std::move(step);
    return apply(op::slice, {a}, attrs);
}

ANVIL_INLINE value builder::pad(const value& a, std::vector<std::int64_t> begin,
                                std::vector<std::int64_t> end) {
    if (std::all_of(begin.begin(), begin.end(), [](std::int64_t n) { return n == 0; }) &&
        std::all_of(end.begin(), end.end(), [](std::int64_t n) { return n == 0; })) {
        return a;
    }
    attributes attrs;
    attrs.begin = std::move(begin);
    attrs.end = std::move(end);
    return apply(op::pad, {a}, attrs);
}

ANVIL_INLINE value builder::reduce_sum(const value& a, std::vector<std::int64_t> axes, bool keep_dims) {
    attributes attrs;
    attrs.axes = std::move(axes);
    attrs.keep_dims = keep_dims;
    return apply(op::reduce_sum, {a}, attrs);
}

ANVIL_INLINE value builder::reduce_mean(const value& a, std::vector<std::int64_t> axes, bool keep_dims) {
    attributes attrs;
    attrs.axes = std::move(axes);
    attrs.keep_dims = keep_dims;
    return apply(op::reduce_mean, {a}, attrs);
}

ANVIL_INLINE value builder::sum_to(const value& a, const dims& shape) {
    const dims from = a.shape();
    if (from == shape) return a;
    const std::size_t lead = from.rank() - shape.rank();
    std::vector<std::int64_t> axes;
    for (std::size_t axis = 0; axis < from.rank(); ++axis) {
        if (axis < lead || (shape[axis - lead] == 1 && from[axis] != 1)) {
            axes.push_back(static_cast<std::int64_t>(axis));
        }
    }
    const value summed = axes.empty() ? a : reduce_sum(a, std::move(axes), true);
    return reshape(summed, shape);
}

ANVIL_INLINE value builder::broadcast_to(const value& a, const dims& shape) {
    const dims from = a.shape();
    if (from == shape) return a;
    const std::size_t lead = shape.rank() - from.rank();
    std::vector<std::int64_t> extents;
    for (std::size_t axis = 0; axis < shape.rank(); ++axis) {
        const bool present = axis >= lead && from[axis - lead] == shape[axis];
        extents.push_back(present ? 1 : shape[axis]);
    }
    const dims ones_shape(extents);
    return mul(a, ones_like_shape(a.type(), ones_shape));
}

ANVIL_INLINE value builder::dilate(const value& a, std::span<const std::int64_t> steps) {
    const dims from = a.shape();
    if (std::all_of(steps.begin(), steps.end(), [](std::int64_t s) { return s == 1; })) return a;
    // [.., n, ..] -> [.., n, 1, ..], padded to [.., n, step, ..], flattened to [.., n * step, ..] and cut
    // after the last element: each element followed by step - 1 zeros.
    std::vector<std::int64_t> split, pad_begin, pad_end, joined, begin, end, stride;
    for (std::size_t axis = 0; axis < from.rank(); ++axis) {
        const std::int64_t n = from[axis], step = steps[axis];
        split.push_back(n);
        pad_begin.push_back(0);
        pad_end.push_back(0);
        if (step > 1) {
            split.push_back(1);
            pad_begin.push_back(0);
            pad_end.push_back(step - 1);
        }
        joined.push_back(n * step);
        begin.push_back(0);
        end.push_back(n == 0 ? 0 : (n - 1) * step + 1);
        stride.push_back(1);
    }
    if (split.size() > max_rank) {
        throw error(message("gradients: cannot spread the cotangent ", from, " by strides of ", steps.size(),
                            " axes within rank ", max_rank));
    }
    const value padded = pad(reshape(a, dims(split)), std::move(pad_begin), std::move(pad_end));
    return slice(reshape(padded, dims(joined)), std::move(begin), std::move(end), std::move(stride));
}

ANVIL_INLINE value builder::flip(const value& a, std::int64_t axis) {
    const std::int64_t n = a.shape()[static_cast<std::size_t>(axis)];
    std::vector<float> reversed;
    for (std::int64_t i = n; i-- > 0;)
        reversed.push_back(static_cast<float>(i));
    attributes attrs;
    attrs.axis = axis;
    return apply(op::gather, {a, constant(std::move(reversed), dims{n}, dtype::i64, "reversed indices")},
                 attrs);
}

// --- helpers the rows share ------------------------------------------------------------------------------

namespace vjp_rows {

// `rank` axes 0..rank-1 except those in `keep`.
ANVIL_INLINE std::vector<std::int64_t> axes_except(std::size_t rank,
                                                   std::initializer_list<std::int64_t> keep) {
    std::vector<std::int64_t> axes;
    for (std::size_t axis = 0; axis < rank; ++axis) {
        if (std::find(keep.begin(), keep.end(), static_cast<std::int64_t>(axis)) == keep.end()) {
            axes.push_back(static_cast<std::int64_t>(axis));
        }
    }
    return axes;
}

ANVIL_INLINE std::int64_t last_axis(const value& v) {
    return static_cast<std::int64_t>(v.rank()) - 1;
}

// A reduction's result with its reduced axes kept as extent 1 (the node may have dropped them).
ANVIL_INLINE dims kept_shape(const dims& input, const std::vector<std::int64_t>& axes) {
    std::vector<std::int64_t> extents(input.begin(), input.end());
    for (const std::int64_t axis : axes)
        extents[static_cast<std::size_t>(axis)] = 1;
    return dims(extents);
}

// A per-channel vector [C] shaped to broadcast over NC... (axis 1 of an input of `rank`).
ANVIL_INLINE dims channel_shape(std::int64_t channels, std::size_t rank) {
    std::vector<std::int64_t> extents(rank, 1);
    extents[1] = channels;
    return dims(extents);
}

// The cotangent of an operand broadcast against the result, summed back to the operand's shape.
ANVIL_INLINE void set(vjp_call& call, std::size_t operand, const value& gradient) {
    if (!call.wanted[operand]) return;
    call.operand_gradients[operand] = call.build.sum_to(gradient, call.operands[operand].shape());
}

// d/dx f(x) = derivative (a value the shape of x): the cotangent times it.
ANVIL_INLINE void unary_chain(vjp_call& call, const value& derivative) {
    set(call, 0, call.build.mul(call.gradient, derivative));
}

// --- elementwise ------------------------------------------------------------------------------------------

ANVIL_INLINE void vjp_relu(vjp_call& call) {
    builder& b = call.build;
    const value& x = call.operands[0];
    const value positive = b.apply(op::greater, {x, b.scalar(0, x.type())});
    set(call, 0, b.where(positive, call.gradient, b.scalar(0, x.type())));
}

ANVIL_INLINE void vjp_gelu(vjp_call& call) {
    // Phi(x) + x phi(x), phi the standard normal density.
    builder& b = call.build;
    const value& x = call.operands[0];
    const dtype t = x.type();
    const value cdf = b.mul(b.add(b.unary(op::erf, b.mul(x, std::numbers::sqrt2 / 2)), b.scalar(1, t)), 0.5);
    const value density =
        b.mul(b.unary(op::exp, b.mul(b.mul(x, x), -0.5)), 1.0 / std::sqrt(2.0 * std::numbers::pi));
    unary_chain(call, b.add(cdf, b.mul(x, density)));
}

ANVIL_INLINE void vjp_gelu_tanh(vjp_call& call) {
    // y = x/2 (1 + tanh(k (x + c x^3))): dy/dx = (1 + t)/2 + x/2 (1 - t^2) k (1 + 3 c x^2).
    builder& b = call.build;
    const value& x = call.operands[0];
    const dtype t = x.type();
    const double k = std::sqrt(2.0 / std::numbers::pi), c = 0.044715;
    const value x2 = b.mul(x, x);
    const value inner = b.mul(b.mul(x, b.add(b.mul(x2, c), b.scalar(1, t))), k);
    const value th = b.unary(op::tanh, inner);
    const value one = b.scalar(1, t);
    const value left = b.mul(b.add(th, one), 0.5);
    const value slope = b.mul(b.add(b.mul(x2, 3 * c), one), k);
    const value right = b.mul(b.mul(b.mul(x, 0.5), b.sub(one, b.mul(th, th))), slope);
    unary_chain(call, b.add(left, right));
}

ANVIL_INLINE void vjp_quick_gelu(vjp_call& call) {
    // y = x s(1.702 x): s + 1.702 x s (1 - s).
    builder& b = call.build;
    const value& x = call.operands[0];
    const value s = b.unary(op::sigmoid, b.mul(x, 1.702));
    const value one = b.scalar(1, x.type());
    unary_chain(call, b.add(s, b.mul(b.mul(b.mul(x, 1.702), s), b.sub(one, s))));
}

ANVIL_INLINE void vjp_silu(vjp_call& call) {
    // y = x s(x): s (1 + x (1 - s)).
    builder& b = call.build;
    const value& x = call.operands[0];
    const value s = b.unary(op::sigmoid, x);
    const value one = b.scalar(1, x.type());
    unary_chain(call, b.mul(s, b.add(one, b.mul(x, b.sub(one, s)))));
}

ANVIL_INLINE void vjp_sigmoid(vjp_call& call) {
    builder& b = call.build;
    const value& y = call.result;
    unary_chain(call, b.mul(y, b.sub(b.scalar(1, y.type()), y)));
}

ANVIL_INLINE void vjp_tanh(vjp_call& call) {
    builder& b = call.build;
    const value& y = call.result;
    unary_chain(call, b.sub(b.scalar(1, y.type()), b.mul(y, y)));
}

ANVIL_INLINE void vjp_exp(vjp_call& call) {
    unary_chain(call, call.result);
}

ANVIL_INLINE void vjp_log(vjp_call& call) {
    set(call, 0, call.build.div(call.gradient, call.operands[0]));
}

ANVIL_INLINE void vjp_sqrt(vjp_call& call) {
    // 1 / (2 sqrt(x)), from the result.
    builder& b = call.build;
    set(call, 0, b.div(b.mul(call.gradient, 0.5), call.result));
}

ANVIL_INLINE void vjp_rsqrt(vjp_call& call) {
    // d/dx x^-1/2 = -x^-3/2 / 2 = -y^3 / 2.
    builder& b = call.build;
    const value& y = call.result;
    unary_chain(call, b.mul(b.mul(b.mul(y, y), y), -0.5));
}

ANVIL_INLINE void vjp_abs(vjp_call& call) {
    unary_chain(call, call.build.unary(op::sign, call.operands[0]));
}

ANVIL_INLINE void vjp_neg(vjp_call& call) {
    set(call, 0, call.build.neg(call.gradient));
}

ANVIL_INLINE void vjp_erf(vjp_call& call) {
    builder& b = call.build;
    const value& x = call.operands[0];
    unary_chain(call, b.mul(b.unary(op::exp, b.neg(b.mul(x, x))), 2.0 / std::sqrt(std::numbers::pi)));
}

// floor, ceil, round and sign: flat almost everywhere, and PyTorch's gradient is zero.
ANVIL_INLINE void vjp_zero(vjp_call& call) {
    if (call.wanted[0])
        call.operand_gradients[0] = call.build.zeros(call.operands[0].type(), call.operands[0].shape());
}

ANVIL_INLINE void vjp_sin(vjp_call& call) {
    unary_chain(call, call.build.unary(op::cos, call.operands[0]));
}

ANVIL_INLINE void vjp_cos(vjp_call& call) {
    builder& b = call.build;
    unary_chain(call, b.neg(b.unary(op::sin, call.operands[0])));
}

ANVIL_INLINE void vjp_clamp(vjp_call& call) {
    // PyTorch passes the gradient where min <= x <= max, the bounds included.
    builder& b = call.build;
    const value& x = call.operands[0];
    const dtype t = x.type();
    const value inside =
        b.apply(op::logical_and, {b.apply(op::greater_equal, {x, b.scalar(call.forward.attrs.min, t)}),
                                  b.apply(op::less_equal, {x, b.scalar(call.forward.attrs.max, t)})});
    set(call, 0, b.where(inside, call.gradient, b.scalar(0, t)));
}

ANVIL_INLINE void vjp_cast(vjp_call& call) {
    // Between floating types the cotangent is cast back; from an integer or boolean there is nothing to pass.
    if (is_floating(call.operands[0].type()))
        set(call, 0, call.build.cast(call.gradient, call.operands[0].type()));
}

ANVIL_INLINE void vjp_add(vjp_call& call) {
    set(call, 0, call.gradient);
    set(call, 1, call.gradient);
}

ANVIL_INLINE void vjp_sub(vjp_call& call) {
    set(call, 0, call.gradient);
    if (call.wanted[1]) set(call, 1, call.build.neg(call.gradient));
}

ANVIL_INLINE void vjp_mul(vjp_call& call) {
    builder& b = call.build;
    if (call.wanted[0]) set(call, 0, b.mul(call.gradient, call.operands[1]));
    if (call.wanted[1]) set(call, 1, b.mul(call.gradient, call.operands[0]));
}

ANVIL_INLINE void vjp_div(vjp_call& call) {
    builder& b = call.build;
    const value& divisor = call.operands[1];
    if (call.wanted[0]) set(call, 0, b.div(call.gradient, divisor));
    if (call.wanted[1]) set(call, 1, b.neg(b.div(b.mul(call.gradient, call.result), divisor)));
}

ANVIL_INLINE void vjp_pow(vjp_call& call) {
    // As PyTorch: the base's gradient is 0 where the exponent is 0, the exponent's where the base is 0 and
    // the exponent >= 0 (where log would give -inf times 0).
    builder& b = call.build;
    const value& base = call.operands[0];
    const value& exponent = call.operands[1];
    const dtype t = base.type();
    const value zero = b.scalar(0, t);
    if (call.wanted[0]) {
        const value slope = b.mul(exponent, b.apply(op::pow, {base, b.sub(exponent, b.scalar(1, t))}));
        const value masked = b.where(b.apply(op::equal, {exponent, zero}), zero, slope);
        set(call, 0, b.mul(call.gradient, masked));
    }
    if (call.wanted[1]) {
        const value slope = b.mul(call.result, b.unary(op::log, base));
        const value at_zero = b.apply(op::logical_and, {b.apply(op::equal, {base, zero}),
                                                        b.apply(op::greater_equal, {exponent, zero})});
        set(call, 1, b.mul(call.gradient, b.where(at_zero, zero, slope)));
    }
}

// maximum and minimum: the gradient goes to the operand that won, halved on ties (PyTorch 1.13).
ANVIL_INLINE void vjp_extremum(vjp_call& call, op loses_first, op loses_second) {
    builder& b = call.build;
    const value& x = call.operands[0];
    const value& y = call.operands[1];
    const value zero = b.scalar(0, x.type());
    const value tie = b.apply(op::equal, {x, y});
    const value half = b.mul(call.gradient, 0.5);
    if (call.wanted[0]) {
        set(call, 0, b.where(tie, half, b.where(b.apply(loses_first, {x, y}), zero, call.gradient)));
    }
    if (call.wanted[1]) {
        set(call, 1, b.where(tie, half, b.where(b.apply(loses_second, {x, y}), zero, call.gradient)));
    }
}

ANVIL_INLINE void vjp_maximum(vjp_call& call) {
    vjp_extremum(call, op::less, op::greater);
}

ANVIL_INLINE void vjp_minimum(vjp_call& call) {
    vjp_extremum(call, op::greater, op::less);
}

ANVIL_INLINE void vjp_where(vjp_call& call) {
    builder& b = call.build;
    const value& condition = call.operands[0];
    const value zero = b.scalar(0, call.gradient.type());
    if (call.wanted[1]) set(call, 1, b.where(condition, call.gradient, zero));
    if (call.wanted[2]) set(call, 2, b.where(condition, zero, call.gradient));
}

// --- linear algebra ---------------------------------------------------------------------------------------

ANVIL_INLINE void vjp_matmul(vjp_call& call) {
    // C = op(A) op(B): dop(A) = G op(B)^T, dop(B) = op(A)^T G, written with the transpose flags so no
    // operand is materialised transposed.
    builder& b = call.build;
    const value& a = call.operands[0];
    const value& bm = call.operands[1];
    const value& g = call.gradient;
    const bool ta = call.forward.attrs.transpose_a, tb = call.forward.attrs.transpose_b;
    if (call.wanted[0]) set(call, 0, ta ? b.matmul(bm, g, tb, true) : b.matmul(g, bm, false, !tb));
    if (call.wanted[1]) set(call, 1, tb ? b.matmul(g, a, true, ta) : b.matmul(a, g, !ta, false));
}

ANVIL_INLINE void vjp_linear(vjp_call& call) {
    // y [.., out] = x [.., in] W^T + b: rows flattened to [N, out] and [N, in].
    builder& b = call.build;
    const value& x = call.operands[0];
    const value& w = call.operands[1];
    const dims xs = x.shape();
    const std::int64_t in = w.shape()[1], out = w.shape()[0];
    std::int64_t rows = 1;
    for (std::size_t axis = 0; axis + 1 < xs.rank(); ++axis)
        rows *= xs[axis];
    const value g = b.reshape(call.gradient, dims{rows, out});
    if (call.wanted[0]) call.operand_gradients[0] = b.reshape(b.matmul(g, w), xs);
    if (call.wanted[1]) call.operand_gradients[1] = b.matmul(g, b.reshape(x, dims{rows, in}), true, false);
    if (call.operands.size() == 3 && call.wanted[2]) call.operand_gradients[2] = b.reduce_sum(g, {0}, false);
}

ANVIL_INLINE void vjp_conv2d(vjp_call& call) {
    builder& b = call.build;
    const attributes& a = call.forward.attrs;
    const value& x = call.operands[0];
    const value& w = call.operands[1];
    const value& g = call.gradient;
    const dims xs = x.shape(), ws = w.shape();
    const std::int64_t groups = a.groups, batch = xs[0], in = xs[1], out = ws[0];
    const std::int64_t kh = ws[2], kw = ws[3];
    if (call.operands.size() == 3 && call.wanted[2])
        call.operand_gradients[2] = b.reduce_sum(g, {0, 2, 3}, false);
    if (batch == 0) {
        if (call.wanted[0]) call.operand_gradients[0] = b.zeros(x.type(), xs);
        if (call.wanted[1]) call.operand_gradients[1] = b.zeros(w.type(), ws);
        return;
    }
    if (call.wanted[1]) {
        // dW[o, i, r, c] = sum over n, oh, ow of g[n, o, oh, ow] xpad[n, i, oh s + r d, ow s + c d]: a
        // convolution of the padded input (batch and channels swapped, channels ordered (group, n)) with the
        // cotangent as its kernel, stride and dilation swapped; it may reach rows past the kernel, cut after.
        const value padded = b.pad(x, {0, 0, a.padding[0], a.padding[2]}, {0, 0, a.padding[1], a.padding[3]});
        const dims ps = padded.shape();
        const value grouped = b.reshape(padded, dims{batch, groups, in / groups, ps[2], ps[3]});
        const value images =
            b.reshape(b.permute(grouped, {2, 1, 0, 3, 4}), dims{in / groups, groups * batch, ps[2], ps[3]});
        const value kernels = b.permute(g, {1, 0, 2, 3});
        attributes conv;
        conv.stride = a.dilation;
        conv.dilation = a.stride;
        conv.groups = groups;
        const value full = b.apply(op::conv2d, {images, kernels}, conv);
        const value cut = b.slice(full, {0, 0, 0, 0}, {in / groups, out, kh, kw}, {1, 1, 1, 1});
        call.operand_gradients[1] = b.permute(cut, {1, 0, 2, 3});
    }
    if (call.wanted[0]) {
        // The transposed convolution: the cotangent spread by the stride, correlated with the flipped kernel
        // (in and out channels swapped per group) over a full padding, then cut to the input's rows.
        const std::int64_t span_h = (kh - 1) * a.dilation[0] + 1, span_w = (kw - 1) * a.dilation[1] + 1;
        const std::int64_t steps[] = {1, 1, a.stride[0], a.stride[1]};
        const value spread = b.dilate(g, steps);
        const value flipped = b.flip(b.flip(w, 2), 3);
        const value regrouped = b.reshape(
            b.permute(b.reshape(flipped, dims{groups, out / groups, in / groups, kh, kw}), {0, 2, 1, 3, 4}),
            dims{in, out / groups, kh, kw});
        attributes conv;
        conv.dilation = a.dilation;
        conv.groups = groups;
        conv.padding = {span_h - 1, span_h - 1, span_w - 1, span_w - 1};
        const value full = b.apply(op::conv2d, {spread, regrouped}, conv);
        // full covers the padded input's rows [0, (OH - 1) s + span); the input's rows are [top, top + H).
        const dims fs = full.shape();
        std::vector<std::int64_t> begin{0, 0}, end{batch, in}, tail{0, 0};
        for (std::size_t axis = 0; axis < 2; ++axis) {
            const std::int64_t before = a.padding[2 * axis], extent = xs[2 + axis], have = fs[2 + axis];
            const std::int64_t first = std::min(before, have), last = std::min(before + extent, have);
            begin.push_back(first);
            end.push_back(last);
            tail.push_back(extent - (last - first));
        }
        const value rows = b.slice(full, begin, end, {1, 1, 1, 1});
        call.operand_gradients[0] = b.pad(rows, {0, 0, 0, 0}, tail);
    }
}

// --- pooling and resizing ---------------------------------------------------------------------------------

// Pooling's gradient as a sum over the kernel's offsets: offset (i, j) of every window reads a strided slice
// of the padded input; `each(slice)` gives that slice's cotangent, which goes back to its place (the
// slice's transpose: spread by the stride, shifted by the offset) in the padded input.
template <class Each>
value pool_gradient(vjp_call& call, float padding_value, Each each) {
    builder& b = call.build;
    const attributes& a = call.forward.attrs;
    const value& x = call.operands[0];
    const dims xs = x.shape(), ys = call.result.shape();
    const std::int64_t oh = ys[2], ow = ys[3];
    // Padding enough below and right that every window (ceil_mode's included) lies inside.
    std::vector<std::int64_t> before{0, 0, a.padding[0], a.padding[2]}, after{0, 0, 0, 0};
    for (std::size_t axis = 0; axis < 2; ++axis) {
        const std::int64_t reach = (ys[2 + axis] - 1) * a.stride[axis] + a.kernel[axis];
        after[2 + axis] = std::max<std::int64_t>(0, reach - before[2 + axis] - xs[2 + axis]);
    }
    attributes padding;
    padding.begin = before;
    padding.end = after;
    padding.value = padding_value;
    const value padded = b.apply(op::pad, {x}, padding);
    const dims ps = padded.shape();
    value total;
    for (std::int64_t i = 0; i < a.kernel[0]; ++i) {
        for (std::int64_t j = 0; j < a.kernel[1]; ++j) {
            const value window =
                b.slice(padded, {0, 0, i, j},
                        {xs[0], xs[1], i + (oh - 1) * a.stride[0] + 1, j + (ow - 1) * a.stride[1] + 1},
                        {1, 1, a.stride[0], a.stride[1]});
            const value part = each(window);
            const std::int64_t steps[] = {1, 1, a.stride[0], a.stride[1]};
            const value spread = b.dilate(part, steps);
            const dims ss = spread.shape();
            const value placed = b.pad(spread, {0, 0, i, j}, {0, 0, ps[2] - i - ss[2], ps[3] - j - ss[3]});
            total = total.valid() ? b.add(total, placed) : placed;
        }
    }
    return b.slice(total, {0, 0, before[2], before[3]}, {xs[0], xs[1], before[2] + xs[2], before[3] + xs[3]},
                   {1, 1, 1, 1});
}

ANVIL_INLINE void vjp_max_pool2d(vjp_call& call) {
    if (!call.wanted[0]) return;
    builder& b = call.build;
    const value& x = call.operands[0];
    if (x.shape().element_count() == 0) {
        call.operand_gradients[0] = b.zeros(x.type(), x.shape());
        return;
    }
    // The first maximum of each window in row-major order takes the gradient, as PyTorch's kernel.
    value taken;
    const value zero = b.scalar(0, x.type());
    call.operand_gradients[0] =
        pool_gradient(call, -std::numeric_limits<float>::infinity(), [&](const value& window) {
            value hit = b.apply(op::equal, {window, call.result});
            if (taken.valid()) hit = b.apply(op::logical_and, {hit, b.apply(op::logical_not, {taken})});
            taken = taken.valid() ? b.apply(op::logical_or, {taken, hit}) : hit;
            return b.where(hit, call.gradient, zero);
        });
}

ANVIL_INLINE void vjp_avg_pool2d(vjp_call& call) {
    if (!call.wanted[0]) return;
    builder& b = call.build;
    const attributes& a = call.forward.attrs;
    const value& x = call.operands[0];
    if (x.shape().element_count() == 0) {
        call.operand_gradients[0] = b.zeros(x.type(), x.shape());
        return;
    }
    // Each output's divisor, as the forward kernel counts it (cpu::reference::window_along).
    const dims xs = x.shape(), ys = call.result.shape();
    std::vector<float> divisors;
    for (std::int64_t r = 0; r < ys[2]; ++r) {
        const auto rows =
            cpu::reference::window_along(r, xs[2], a.kernel[0], a.stride[0], a.padding[0], a.padding[1]);
        for (std::int64_t c = 0; c < ys[3]; ++c) {
            const auto cols =
                cpu::reference::window_along(c, xs[3], a.kernel[1], a.stride[1], a.padding[2], a.padding[3]);
            const std::int64_t n = a.count_include_pad ? rows.padded_size * cols.padded_size
                                                       : (rows.end - rows.begin) * (cols.end - cols.begin);
            divisors.push_back(static_cast<float>(n));
        }
    }
    const value share =
        b.div(call.gradient, b.constant(std::move(divisors), dims{ys[2], ys[3]}, x.type(), "pool divisors"));
    call.operand_gradients[0] = pool_gradient(call, 0.0f, [&](const value&) { return share; });
}

// Resizing is linear and separable: out = R_h x R_w^T per plane, so dx = R_h^T g R_w, with R the
// interpolation matrices [out, in] the forward kernel's index rules give.
ANVIL_INLINE void vjp_upsample(vjp_call& call) {
    if (!call.wanted[0]) return;
    builder& b = call.build;
    const value& x = call.operands[0];
    const dims xs = x.shape(), ys = call.result.shape();
    const bool nearest = call.forward.kind == op::upsample_nearest;
    auto matrix = [&](std::int64_t in, std::int64_t out) {
        std::vector<float> m(static_cast<std::size_t>(in * out), 0.0f);
        for (std::int64_t o = 0; o < out; ++o) {
            if (nearest) {
                m[static_cast<std::size_t>(o * in + cpu::reference::nearest_source(o, in, out))] = 1.0f;
            } else {
                const auto taps = cpu::reference::linear_source(o, in, out, call.forward.attrs.align_corners);
                m[static_cast<std::size_t>(o * in + taps.first)] += taps.first_weight;
                m[static_cast<std::size_t>(o * in + taps.second)] += taps.second_weight;
            }
        }
        return b.constant(std::move(m), dims{out, in}, x.type(), "interpolation matrix");
    };
    const value rows = matrix(xs[2], ys[2]);
    const value cols = matrix(xs[3], ys[3]);
    const value across = b.matmul(call.gradient, cols);  // [N, C, OH, W]
    call.operand_gradients[0] = b.matmul(rows, across, true, false);
}

// --- normalisation ----------------------------------------------------------------------------------------

// The cotangent of x for y = (x - mean) / sqrt(var + eps) over `axes` given the cotangent of the normalised
// value: rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)). Returns it with xhat for the affine gradients.
struct normalised {
    value input_gradient;
    value xhat;
};

ANVIL_INLINE normalised standardise_backward(builder& b, const value& x, const value& dxhat,
                                             std::vector<std::int64_t> axes, float epsilon) {
    const value mean = b.reduce_mean(x, axes, true);
    const value centred = b.sub(x, mean);
    const value variance = b.reduce_mean(b.mul(centred, centred), axes, true);
    const value rstd = b.unary(op::rsqrt, b.add(variance, b.scalar(epsilon, x.type())));
    const value xhat = b.mul(centred, rstd);
    const value mean_d = b.reduce_mean(dxhat, axes, true);
    const value mean_dx = b.reduce_mean(b.mul(dxhat, xhat), axes, true);
    return {b.mul(rstd, b.sub(b.sub(dxhat, mean_d), b.mul(xhat, mean_dx))), xhat};
}

ANVIL_INLINE void vjp_layer_norm(vjp_call& call) {
    builder& b = call.build;
    const value& x = call.operands[0];
    const bool weighted = call.operands.size() > 1;
    const value dxhat = weighted ? b.mul(call.gradient, call.operands[1]) : call.gradient;
    const normalised n = standardise_backward(b, x, dxhat, {last_axis(x)}, call.forward.attrs.epsilon);
    if (call.wanted[0]) call.operand_gradients[0] = n.input_gradient;
    if (weighted && call.wanted[1]) set(call, 1, b.mul(call.gradient, n.xhat));
    if (call.operands.size() > 2) set(call, 2, call.gradient);
}

ANVIL_INLINE void vjp_rms_norm(vjp_call& call) {
    // y = x r w, r = 1/sqrt(mean(x^2) + eps): dx = r (gw - x r^2 mean(gw x)).
    builder& b = call.build;
    const value& x = call.operands[0];
    const std::vector<std::int64_t> axis{last_axis(x)};
    const value r = b.unary(op::rsqrt, b.add(b.reduce_mean(b.mul(x, x), axis, true),
                                             b.scalar(call.forward.attrs.epsilon, x.type())));
    const bool weighted = call.operands.size() > 1;
    const value gw = weighted ? b.mul(call.gradient, call.operands[1]) : call.gradient;
    if (call.wanted[0]) {
        const value inner = b.reduce_mean(b.mul(gw, x), axis, true);
        call.operand_gradients[0] = b.mul(r, b.sub(gw, b.mul(b.mul(x, b.mul(r, r)), inner)));
    }
    if (weighted && call.wanted[1]) set(call, 1, b.mul(call.gradient, b.mul(x, r)));
}

ANVIL_INLINE void vjp_group_norm(vjp_call& call) {
    builder& b = call.build;
    const value& x = call.operands[0];
    const dims xs = x.shape();
    const std::int64_t batch = xs[0], channels = xs[1], groups = call.forward.attrs.groups;
    const std::int64_t per_group =
        batch * channels == 0 ? 0 : static_cast<std::int64_t>(xs.element_count()) / (batch * groups);
    const bool weighted = call.operands.size() > 1;
    const dims cs = channel_shape(channels, xs.rank());
    const value dxhat = weighted ? b.mul(call.gradient, b.reshape(call.operands[1], cs)) : call.gradient;
    const dims grouped{batch, groups, per_group};
    const normalised n = standardise_backward(b, b.reshape(x, grouped), b.reshape(dxhat, grouped), {2},
                                              call.forward.attrs.epsilon);
    if (call.wanted[0]) call.operand_gradients[0] = b.reshape(n.input_gradient, xs);
    const std::vector<std::int64_t> others = axes_except(xs.rank(), {1});
    if (weighted && call.wanted[1]) {
        call.operand_gradients[1] = b.reduce_sum(b.mul(call.gradient, b.reshape(n.xhat, xs)), others, false);
    }
    if (call.operands.size() > 2 && call.wanted[2])
        call.operand_gradients[2] = b.reduce_sum(call.gradient, others, false);
}

ANVIL_INLINE void vjp_batch_norm(vjp_call& call) {
    // y = (x - mean) r w + b over axis 1 with r = 1/sqrt(var + eps), the statistics given (inference form;
    // training's batch statistics are built from reductions, which differentiate themselves).
    builder& b = call.build;
    const value& x = call.operands[0];
    const dims xs = x.shape();
    const dims cs = channel_shape(xs[1], xs.rank());
    const std::vector<std::int64_t> others = axes_except(xs.rank(), {1});
    const value mean = b.reshape(call.operands[1], cs);
    const value r = b.unary(
        op::rsqrt, b.add(b.reshape(call.operands[2], cs), b.scalar(call.forward.attrs.epsilon, x.type())));
    const bool weighted = call.operands.size() > 3;
    const value gw = weighted ? b.mul(call.gradient, b.reshape(call.operands[3], cs)) : call.gradient;
    const value centred = b.sub(x, mean);
    if (call.wanted[0]) call.operand_gradients[0] = b.mul(gw, r);
    if (call.wanted[1]) call.operand_gradients[1] = b.neg(b.reduce_sum(b.mul(gw, r), others, false));
    if (call.wanted[2]) {
        const value r3 = b.mul(b.mul(r, r), r);
        call.operand_gradients[2] = b.reshape(
            b.mul(b.reduce_sum(b.mul(gw, centred), others, true), b.mul(r3, -0.5)), call.operands[2].shape());
    }
    if (weighted && call.wanted[3])
        call.operand_gradients[3] = b.reduce_sum(b.mul(call.gradient, b.mul(centred, r)), others, false);
    if (call.operands.size() > 4 && call.wanted[4])
        call.operand_gradients[4] = b.reduce_sum(call.gradient, others, false);
}

// softmax's VJP from its probabilities p along `axis`: p (g - sum(g p)). Rows whose every score was masked
// have p = 0 and so a zero gradient, matching the forward's zeros.
ANVIL_INLINE value softmax_backward(builder& b, const value& p, const value& g, std::int64_t axis) {
    return b.mul(p, b.sub(g, b.reduce_sum(b.mul(g, p), {axis}, true)));
}

ANVIL_INLINE void vjp_softmax(vjp_call& call) {
    const value dz = softmax_backward(call.build, call.result, call.gradient, call.forward.attrs.axis);
    if (call.wanted[0]) call.operand_gradients[0] = dz;
    if (call.operands.size() > 1) set(call, 1, dz);
}

// --- reductions and scans ---------------------------------------------------------------------------------

ANVIL_INLINE void vjp_reduce_sum(vjp_call& call) {
    builder& b = call.build;
    const dims xs = call.operands[0].shape();
    const value g = b.reshape(call.gradient, kept_shape(xs, call.forward.attrs.axes));
    if (call.wanted[0]) call.operand_gradients[0] = b.broadcast_to(g, xs);
}

ANVIL_INLINE void vjp_reduce_mean(vjp_call& call) {
    builder& b = call.build;
    const dims xs = call.operands[0].shape();
    std::int64_t count = 1;
    for (const std::int64_t axis : call.forward.attrs.axes)
        count *= xs[static_cast<std::size_t>(axis)];
    const value g = b.reshape(call.gradient, kept_shape(xs, call.forward.attrs.axes));
    if (call.wanted[0])
        call.operand_gradients[0] =
            b.broadcast_to(b.mul(g, count == 0 ? 0.0 : 1.0 / static_cast<double>(count)), xs);
}

ANVIL_INLINE void vjp_reduce_extremum(vjp_call& call) {
    // As torch.amax / amin: the gradient split evenly among the elements that equal the result.
    builder& b = call.build;
    const value& x = call.operands[0];
    if (!call.wanted[0]) return;
    const dims xs = x.shape();
    const dims kept = kept_shape(xs, call.forward.attrs.axes);
    const value hit = b.cast(b.apply(op::equal, {x, b.reshape(call.result, kept)}), x.type());
    const value count = b.reduce_sum(hit, call.forward.attrs.axes, true);
    call.operand_gradients[0] = b.mul(hit, b.div(b.reshape(call.gradient, kept), count));
}

ANVIL_INLINE void vjp_reduce_prod(vjp_call& call) {
    // d prod / d x_i is the product of the others: y / x_i where x_i != 0; where x_i is the slice's only
    // zero, the product of the nonzero others; with two zeros or more, 0.
    builder& b = call.build;
    const value& x = call.operands[0];
    const dtype t = x.type();
    const dims kept = kept_shape(x.shape(), call.forward.attrs.axes);
    const value zero = b.scalar(0, t), one = b.scalar(1, t);
    const value is_zero = b.apply(op::equal, {x, zero});
    attributes product;
    product.axes = call.forward.attrs.axes;
    product.keep_dims = true;
    const value nonzero_product = b.apply(op::reduce_prod, {b.where(is_zero, one, x)}, product);
    const value zeros_in_slice = b.reduce_sum(b.cast(is_zero, t), call.forward.attrs.axes, true);
    const value for_zero = b.where(b.apply(op::equal, {zeros_in_slice, one}), nonzero_product, zero);
    const value y = b.reshape(call.result, kept);
    const value others = b.where(is_zero, for_zero, b.div(y, b.where(is_zero, one, x)));
    if (call.wanted[0]) call.operand_gradients[0] = b.mul(b.reshape(call.gradient, kept), others);
}

ANVIL_INLINE void vjp_cumsum(vjp_call& call) {
    // Each input element feeds every later sum, so its cotangent is the sum of the later cotangents: the same
    // scan run the other way.
    attributes attrs = call.forward.attrs;
    attrs.reverse = !attrs.reverse;
    if (call.wanted[0]) call.operand_gradients[0] = call.build.apply(op::cumsum, {call.gradient}, attrs);
}

// --- data movement ----------------------------------------------------------------------------------------

ANVIL_INLINE void vjp_reshape(vjp_call& call) {
    if (call.wanted[0])
        call.operand_gradients[0] = call.build.reshape(call.gradient, call.operands[0].shape());
}

ANVIL_INLINE void vjp_permute(vjp_call& call) {
    const std::vector<std::int64_t>& axes = call.forward.attrs.axes;
    std::vector<std::int64_t> inverse(axes.size());
    for (std::size_t i = 0; i < axes.size(); ++i)
        inverse[static_cast<std::size_t>(axes[i])] = static_cast<std::int64_t>(i);
    if (call.wanted[0]) call.operand_gradients[0] = call.build.permute(call.gradient, std::move(inverse));
}

ANVIL_INLINE void vjp_concat(vjp_call& call) {
    const std::int64_t axis = call.forward.attrs.axis;
    const dims gs = call.gradient.shape();
    std::int64_t offset = 0;
    for (std::size_t i = 0; i < call.operands.size(); ++i) {
        const dims s = call.operands[i].shape();
        const std::int64_t extent = s[static_cast<std::size_t>(axis)];
        if (call.wanted[i]) {
            std::vector<std::int64_t> begin(gs.rank(), 0), end(gs.begin(), gs.end()), step(gs.rank(), 1);
            begin[static_cast<std::size_t>(axis)] = offset;
            end[static_cast<std::size_t>(axis)] = offset + extent;
            call.operand_gradients[i] = call.build.slice(call.gradient, begin, end, step);
        }
        offset += extent;
    }
}

ANVIL_INLINE void vjp_slice(vjp_call& call) {
    // The slice's transpose: the cotangent spread by the steps and padded back to the input's extents.
    if (!call.wanted[0]) return;
    builder& b = call.build;
    const attributes& a = call.forward.attrs;
    const dims xs = call.operands[0].shape(), gs = call.gradient.shape();
    if (gs.element_count() == 0) {
        call.operand_gradients[0] = b.zeros(call.operands[0].type(), xs);
        return;
    }
    const value spread = b.dilate(call.gradient, a.step);
    const dims ss = spread.shape();
    std::vector<std::int64_t> before, after;
    for (std::size_t axis = 0; axis < xs.rank(); ++axis) {
        before.push_back(a.begin[axis]);
        after.push_back(xs[axis] - a.begin[axis] - ss[axis]);
    }
    call.operand_gradients[0] = b.pad(spread, before, after);
}

ANVIL_INLINE void vjp_pad(vjp_call& call) {
    if (!call.wanted[0]) return;
    const attributes& a = call.forward.attrs;
    const dims xs = call.operands[0].shape();
    std::vector<std::int64_t> end, step(xs.rank(), 1);
    for (std::size_t axis = 0; axis < xs.rank(); ++axis)
        end.push_back(a.begin[axis] + xs[axis]);
    call.operand_gradients[0] = call.build.slice(call.gradient, a.begin, end, step);
}

// Rows of a table along `axis` picked by indices: the transpose adds each cotangent row back into the row it
// came from — scatter_add, whose cost is the table's zeroing and one add per looked-up element (a one-hot
// [V, n] product, its former spelling, cost 2 V n per row element: ~48 GFLOP for BERT-base's word embeddings
// at batch 8 x 128).
ANVIL_INLINE void vjp_gather(vjp_call& call) {
    if (!call.wanted[0]) return;
    attributes attrs;
    attrs.axis = call.forward.attrs.axis;
    const dims ts = call.operands[0].shape();
    attrs.sizes.assign(ts.begin(), ts.end());
    call.operand_gradients[0] = call.build.apply(op::scatter_add, {call.gradient, call.operands[1]}, attrs);
}

// Its transpose is gather: each update row's cotangent is the table cotangent's row its index names.
ANVIL_INLINE void vjp_scatter_add(vjp_call& call) {
    if (!call.wanted[0]) return;
    attributes attrs;
    attrs.axis = call.forward.attrs.axis;
    call.operand_gradients[0] = call.build.apply(op::gather, {call.gradient, call.operands[1]}, attrs);
}

ANVIL_INLINE void vjp_gather_elements(vjp_call& call) {
    // out[.., j, ..] = data[.., index[.., j, ..], ..] along `axis`: with the axis moved last and the rest
    // flattened to L lines, d data[l, v] = sum_j g[l, j] [index[l, j] == v], a batched [1, J] x [J, V]
    // product; lines of data past the result's extents (which may be smaller off the axis) get zeros.
    if (!call.wanted[0]) return;
    builder& b = call.build;
    const value& data = call.operands[0];
    const value& indices = call.operands[1];
    const dims ds = data.shape(), os = indices.shape();
    const std::size_t rank = ds.rank();
    const auto axis = static_cast<std::size_t>(call.forward.attrs.axis);
    std::vector<std::int64_t> order;
    for (std::size_t i = 0; i < rank; ++i)
        if (i != axis) order.push_back(static_cast<std::int64_t>(i));
    order.push_back(static_cast<std::int64_t>(axis));
    const std::int64_t extent = ds[axis], picks = os[axis];
    const std::int64_t lines = picks == 0 ? 0 : static_cast<std::int64_t>(os.element_count()) / picks;
    const value moved_g = b.reshape(b.permute(call.gradient, order), dims{lines, 1, picks});
    const value idx = b.reshape(b.permute(indices, order), dims{lines, picks, 1});
    // Negative indices count from the end.
    const value extent_v = b.constant({static_cast<float>(extent)}, dims{}, indices.type(), "extent");
    const value zero_i = b.constant({0.0f}, dims{}, indices.type(), "zero");
    const value wrapped = b.where(b.apply(op::less, {idx, zero_i}), b.add(idx, extent_v), idx);
    std::vector<float> positions;
    for (std::int64_t v = 0; v < extent; ++v)
        positions.push_back(static_cast<float>(v));
    const value row_ids = b.constant(std::move(positions), dims{1, 1, extent}, indices.type(), "positions");
    const value one_hot = b.cast(b.apply(op::equal, {wrapped, row_ids}), data.type());
    const value lined = b.matmul(moved_g, one_hot);  // [L, 1, V]
    std::vector<std::int64_t> moved_shape, inverse(rank);
    for (const std::int64_t i : order)
        moved_shape.push_back(static_cast<std::size_t>(i) == axis ? extent : os[static_cast<std::size_t>(i)]);
    for (std::size_t i = 0; i < rank; ++i)
        inverse[static_cast<std::size_t>(order[i])] = static_cast<std::int64_t>(i);
    const value back = b.permute(b.reshape(lined, dims(moved_shape)), inverse);
    std::vector<std::int64_t> before(rank, 0), after;
    const dims bs = back.shape();
    for (std::size_t i = 0; i < rank; ++i)
        after.push_back(ds[i] - bs[i]);
    call.operand_gradients[0] = b.pad(back, before, after);
}

// --- transformer blocks -----------------------------------------------------------------------------------

ANVIL_INLINE void vjp_attention(vjp_call& call) {
    // Recomputes the probabilities and applies the chain rule through softmax(q k^T s + mask) v, in rank 4
    // (the Neural Engine's products stop at rank 5, and on an M1 a rank-5 product decomposes past it): a
    // grouped-query kv head is gathered once per query head it serves, and the heads' cotangents are summed
    // back per kv head.
    builder& b = call.build;
    const attributes& a = call.forward.attrs;
    const value& q = call.operands[0];
    const dims qs = q.shape(), ks = call.operands[1].shape();
    const std::int64_t batch = qs[0], heads = qs[1], queries = qs[2], depth = qs[3];
    const std::int64_t kv_heads = ks[1], keys = ks[2];
    const std::int64_t group = heads / kv_heads;
    const dtype t = q.type();
    const double scale =
        a.scale != 0.0f ? a.scale : (depth > 0 ? 1.0 / std::sqrt(static_cast<double>(depth)) : 1.0);
    auto per_query_head = [&](const value& kv) {
        if (group == 1) return kv;
        std::vector<float> serving;
        for (std::int64_t h = 0; h < heads; ++h)
            serving.push_back(static_cast<float>(h / group));
        attributes heads_axis;
        heads_axis.axis = 1;
        return b.apply(op::gather,
                       {kv, b.constant(std::move(serving), dims{heads}, dtype::i64, "kv head of each head")},
                       heads_axis);
    };
    auto per_kv_head = [&](const value& grad) {
        if (group == 1) return grad;
        const dims gs = grad.shape();
        return b.reduce_sum(b.reshape(grad, dims{batch, kv_heads, group, gs[2], gs[3]}), {2}, false);
    };
    const value k = per_query_head(call.operands[1]);
    const value v = per_query_head(call.operands[2]);
    const value& g = call.gradient;
    value scores = b.mul(b.matmul(q, k, false, true), scale);
    if (call.operands.size() == 4) scores = b.add(scores, call.operands[3]);
    // The causal mask as the Neural Engine needs it (finite: a softmax row holding -infinity is NaN there,
    // CONSTRAINTS.md), -1e4 where key j is hidden from query i (exp gives exactly 0 in every precision), and
    // the probabilities times 0 or 1 after, which also zeroes the rows of queries that see no key, as the
    // forward does.
    std::vector<float> hidden, visible;
    if (a.causal) {
        for (std::int64_t i = 0; i < queries; ++i) {
            for (std::int64_t j = 0; j < keys; ++j) {
                const bool seen = j <= i + (keys - queries);
                hidden.push_back(seen ? 0.0f : -1e4f);
                visible.push_back(seen ? 1.0f : 0.0f);
            }
        }
        scores = b.add(scores, b.constant(std::move(hidden), dims{queries, keys}, t, "causal mask"));
    }
    attributes softmax;
    softmax.axis = 3;
    value p = b.apply(op::softmax, {scores}, softmax);
    if (a.causal) p = b.mul(p, b.constant(std::move(visible), dims{queries, keys}, t, "causal visibility"));
    if (call.wanted[2]) call.operand_gradients[2] = per_kv_head(b.matmul(p, g, true, false));
    const value ds = softmax_backward(b, p, b.matmul(g, v, false, true), 3);
    if (call.wanted[0]) call.operand_gradients[0] = b.mul(b.matmul(ds, k), scale);
    if (call.wanted[1]) call.operand_gradients[1] = per_kv_head(b.mul(b.matmul(ds, q, true, false), scale));
    if (call.operands.size() == 4) set(call, 3, ds);
}

ANVIL_INLINE void vjp_rotary(vjp_call& call) {
    // Each pair (x1, x2) turns by its angle: y1 = x1 c - x2 s, y2 = x2 c + x1 s. The transpose turns it back
    // (the same op with sin negated); the tables' cotangents sum g1 x1 + g2 x2 and g2 x1 - g1 x2 over the
    // leading axes.
    builder& b = call.build;
    const value& x = call.operands[0];
    if (call.wanted[0]) {
        call.operand_gradients[0] = b.apply(
            op::rotary, {call.gradient, call.operands[1], b.neg(call.operands[2])}, call.forward.attrs);
    }
    if (!call.wanted[1] && !call.wanted[2]) return;
    const dims xs = x.shape();
    const std::int64_t half = call.operands[1].shape()[1];
    const bool interleaved = call.forward.attrs.interleaved;
    auto part = [&](const value& v, std::int64_t which) {
        std::vector<std::int64_t> begin(xs.rank(), 0), end(xs.begin(), xs.end()), step(xs.rank(), 1);
        const std::size_t last = xs.rank() - 1;
        begin[last] = interleaved ? which : which * half;
        end[last] = interleaved ? 2 * half : (which + 1) * half;
        step[last] = interleaved ? 2 : 1;
        return b.slice(v, begin, end, step);
    };
    const value x1 = part(x, 0), x2 = part(x, 1);
    const value g1 = part(call.gradient, 0), g2 = part(call.gradient, 1);
    set(call, 1, b.add(b.mul(g1, x1), b.mul(g2, x2)));
    set(call, 2, b.sub(b.mul(g2, x1), b.mul(g1, x2)));
}

}  // namespace vjp_rows

ANVIL_INLINE vjp_entry vjp_of(op kind) {
    switch (kind) {
        case op::input:
        case op::constant:
            return {nullptr, "a leaf"};
        case op::relu:
            return {vjp_rows::vjp_relu, {}};
        case op::gelu:
            return {vjp_rows::vjp_gelu, {}};
        case op::gelu_tanh:
            return {vjp_rows::vjp_gelu_tanh, {}};
        case op::quick_gelu:
            return {vjp_rows::vjp_quick_gelu, {}};
        case op::silu:
            return {vjp_rows::vjp_silu, {}};
        case op::sigmoid:
            return {vjp_rows::vjp_sigmoid, {}};
        case op::tanh:
            return {vjp_rows::vjp_tanh, {}};
        case op::exp:
            return {vjp_rows::vjp_exp, {}};
        case op::log:
            return {vjp_rows::vjp_log, {}};
        case op::sqrt:
            return {vjp_rows::vjp_sqrt, {}};
        case op::rsqrt:
            return {vjp_rows::vjp_rsqrt, {}};
        case op::abs:
            return {vjp_rows::vjp_abs, {}};
        case op::neg:
            return {vjp_rows::vjp_neg, {}};
        case op::erf:
            return {vjp_rows::vjp_erf, {}};
        case op::floor:
        case op::ceil:
        case op::round:
        case op::sign:
            return {vjp_rows::vjp_zero, {}};
        case op::sin:
            return {vjp_rows::vjp_sin, {}};
        case op::cos:
            return {vjp_rows::vjp_cos, {}};
        case op::clamp:
            return {vjp_rows::vjp_clamp, {}};
        case op::cast:
            return {vjp_rows::vjp_cast, {}};
        case op::add:
            return {vjp_rows::vjp_add, {}};
        case op::sub:
            return {vjp_rows::vjp_sub, {}};
        case op::mul:
            return {vjp_rows::vjp_mul, {}};
        case op::div:
            return {vjp_rows::vjp_div, {}};
        case op::pow:
            return {vjp_rows::vjp_pow, {}};
        case op::maximum:
            return {vjp_rows::vjp_maximum, {}};
        case op::minimum:
            return {vjp_rows::vjp_minimum, {}};
        case op::equal:
        case op::less:
        case op::less_equal:
        case op::greater:
        case op::greater_equal:
        case op::logical_and:
        case op::logical_or:
        case op::logical_xor:
        case op::logical_not:
        case op::argmax:
            return {nullptr, "its result is boolean or an index, which carries no gradient"};
        case op::where:
            return {vjp_rows::vjp_where, {}};
        case op::fused_elementwise:
            return {nullptr, "fusion runs when a program is compiled; differentiate the graph before it"};
        case op::matmul:
            return {vjp_rows::vjp_matmul, {}};
        case op::linear:
            return {vjp_rows::vjp_linear, {}};
        case op::conv2d:
            return {vjp_rows::vjp_conv2d, {}};
        case op::max_pool2d:
            return {vjp_rows::vjp_max_pool2d, {}};
        case op::avg_pool2d:
            return {vjp_rows::vjp_avg_pool2d, {}};
        case op::upsample_nearest:
        case op::upsample_bilinear:
            return {vjp_rows::vjp_upsample, {}};
        case op::layer_norm:
            return {vjp_rows::vjp_layer_norm, {}};
        case op::rms_norm:
            return {vjp_rows::vjp_rms_norm, {}};
        case op::group_norm:
            return {vjp_rows::vjp_group_norm, {}};
        case op::batch_norm:
            return {vjp_rows::vjp_batch_norm, {}};
        case op::softmax:
            return {vjp_rows::vjp_softmax, {}};
        case op::reduce_sum:
            return {vjp_rows::vjp_reduce_sum, {}};
        case op::reduce_mean:
            return {vjp_rows::vjp_reduce_mean, {}};
        case op::reduce_max:
        case op::reduce_min:
            return {vjp_rows::vjp_reduce_extremum, {}};
        case op::reduce_prod:
            return {vjp_rows::vjp_reduce_prod, {}};
        case op::cumsum:
            return {vjp_rows::vjp_cumsum, {}};
        case op::reshape:
            return {vjp_rows::vjp_reshape, {}};
        case op::permute:
            return {vjp_rows::vjp_permute, {}};
        case op::concat:
            return {vjp_rows::vjp_concat, {}};
        case op::slice:
            return {vjp_rows::vjp_slice, {}};
        case op::pad:
            return {vjp_rows::vjp_pad, {}};
        case op::gather:
            return {vjp_rows::vjp_gather, {}};
        case op::gather_elements:
            return {vjp_rows::vjp_gather_elements, {}};
        case op::scatter_add:
            return {vjp_rows::vjp_scatter_add, {}};
        case op::attention:
            return {vjp_rows::vjp_attention, {}};
        case op::rotary:
            return {vjp_rows::vjp_rotary, {}};
        case op::dequantize_int8:
        case op::dequantize_lut:
        case op::dequantize_ggml:
            return {nullptr,
                    "its weights are quantised; train a floating-point copy, or a LoRA adapter beside them"};
    }
    return {nullptr, "an unknown op"};
}

}  // namespace anvil::detail::autodiff
