// anvil: the ONNX ops of convolutional networks: Conv and ConvTranspose, pooling, batch, instance,
// layer and local response normalisation, and Resize / Upsample.
// Member definitions of onnx_detail::importer (importer-inl.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/models/import/onnx/importer-inl.hpp"

namespace anvil::models::onnx_detail {

inline importer::window importer::window_of(const onnx_node& n, const value& x,
                                            std::vector<std::int64_t> kernel) {
    const std::size_t spatial = kernel.size();
    window w;
    w.kernel = std::move(kernel);
    w.stride = ints_attribute(n, "strides").value_or(std::vector<std::int64_t>(spatial, 1));
    w.dilation = ints_attribute(n, "dilations").value_or(std::vector<std::int64_t>(spatial, 1));
    const std::vector<std::int64_t> pads =
        ints_attribute(n, "pads").value_or(std::vector<std::int64_t>(2 * spatial, 0));
    if (w.stride.size() != spatial || w.dilation.size() != spatial || pads.size() != 2 * spatial)
        throw shape_error(
            message(where(n), ": strides, dilations or pads do not fit ", spatial, " spatial axes"));
    w.pad_begin.assign(pads.begin(), pads.begin() + static_cast<std::ptrdiff_t>(spatial));
    w.pad_end.assign(pads.begin() + static_cast<std::ptrdiff_t>(spatial), pads.end());
    const std::string auto_pad = string_attribute(n, "auto_pad", "NOTSET");
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
        for (std::size_t i = 0; i < spatial; ++i) {
            const std::int64_t in = x.shape()[2 + i];
            const std::int64_t out = (in + w.stride[i] - 1) / w.stride[i];
            const std::int64_t span = (w.kernel[i] - 1) * w.dilation[i] + 1;
            const std::int64_t total = std::max<std::int64_t>((out - 1) * w.stride[i] + span - in, 0);
            const std::int64_t small = total / 2, large = total - small;
            w.pad_begin[i] = auto_pad == "SAME_UPPER" ? small : large;
            w.pad_end[i] = auto_pad == "SAME_UPPER" ? large : small;
        }
    } else if (auto_pad == "VALID") {
        std::fill(w.pad_begin.begin(), w.pad_begin.end(), 0);
        std::fill(w.pad_end.begin(), w.pad_end.end(), 0);
    } else if (auto_pad != "NOTSET") {
        throw format_error(message(where(n), ": auto_pad '", auto_pad, "'"));
    }
    return w;
}

// A 1-D window becomes a 2-D one of height 1 (x [N, C, L] -> [N, C, 1, L]); 3-D and more are refused.
inline value importer::as_2d(const onnx_node& n, const value& x) {
    if (x.rank() == 4) return x;
    if (x.rank() == 3) return reshape(x, {x.shape()[0], x.shape()[1], 1, x.shape()[2]});
    unsupported(n, message("a ", x.rank() > 2 ? x.rank() - 2 : 0, "-D window (anvil runs 1-D and 2-D)"));
}

inline void importer::set_window(attributes& a, const window& w) {
    const bool one = w.kernel.size() == 1;
    a.kernel = {one ? 1 : w.kernel[0], w.kernel.back()};
    a.stride = {one ? 1 : w.stride[0], w.stride.back()};
    a.dilation = {one ? 1 : w.dilation[0], w.dilation.back()};
    a.padding = {one ? 0 : w.pad_begin[0], one ? 0 : w.pad_end[0], w.pad_begin.back(), w.pad_end.back()};
}

inline value importer::conv(const onnx_node& n) {
    const value x = input(n, 0), weight = input(n, 1);
    if (weight.rank() != x.rank() || x.rank() < 3)
        throw shape_error(
            message(where(n), ": input ", x.shape(), " and weight ", weight.shape(), " do not fit"));
    std::vector<std::int64_t> kernel = extents_of(weight.shape());
    kernel.erase(kernel.begin(), kernel.begin() + 2);
    if (const auto given = ints_attribute(n, "kernel_shape"); given && *given != kernel)
        throw shape_error(message(where(n), ": kernel_shape differs from the weight's ", weight.shape()));
    const window w = window_of(n, x, kernel);
    attributes a;
    set_window(a, w);
    a.groups = int_attribute(n, "group", 1);
    std::vector<value> operands{as_2d(n, x), as_2d(n, weight)};
    if (has_input(n, 2)) operands.push_back(input(n, 2));
    const value y = g_.apply(op::conv2d, operands, a);
    if (x.rank() == 4) return y;
    return reshape(y, {y.shape()[0], y.shape()[1], y.shape()[3]});
}

// A transposed convolution as the convolution it is: the input spread `stride` apart (zeros between),
// padded by (kernel - 1) * dilation less the given padding (plus output_padding after), convolved at
// stride 1 with the weight's in and out channels swapped within each group and its window flipped. The
// weight's rearrangement folds to a constant when the weight is one.
inline value importer::conv_transpose(const onnx_node& n) {
    const value x0 = input(n, 0), w0 = input(n, 1);
    if (w0.rank() != x0.rank() || x0.rank() < 3)
        throw shape_error(
            message(where(n), ": input ", x0.shape(), " and weight ", w0.shape(), " do not fit"));
    const value x = as_2d(n, x0), w = as_2d(n, w0);
    const std::size_t spatial = x0.rank() - 2;
    const std::int64_t groups = int_attribute(n, "group", 1);
    const std::int64_t in_channels = x.shape()[1], per_group_out = w.shape()[1];
    if (groups <= 0 || w.shape()[0] != in_channels || in_channels % groups != 0)
        throw shape_error(message(where(n), ": weight ", w0.shape(), " does not fit ", in_channels,
                                  " input channels in ", groups, " groups"));
    const auto list = [&](std::string_view name, std::int64_t fallback) {
        std::vector<std::int64_t> v =
            ints_attribute(n, name).value_or(std::vector<std::int64_t>(spatial, fallback));
        if (v.size() != spatial)
            throw shape_error(message(where(n), ": ", name, " does not fit ", spatial, " axes"));
        return v;
    };
    std::vector<std::int64_t> kernel = extents_of(w0.shape());
    kernel.erase(kernel.begin(), kernel.begin() + 2);
    const std::vector<std::int64_t> stride = list("strides", 1), dilation = list("dilations", 1);
    std::vector<std::int64_t> extra = list("output_padding", 0);
    std::vector<std::int64_t> pads =
        ints_attribute(n, "pads").value_or(std::vector<std::int64_t>(2 * spatial, 0));
    if (pads.size() != 2 * spatial)
        throw shape_error(message(where(n), ": pads do not fit ", spatial, " axes"));
    const std::string auto_pad = string_attribute(n, "auto_pad", "NOTSET");
    std::optional<std::vector<std::int64_t>> wanted = ints_attribute(n, "output_shape");
    if (!wanted && (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER")) {
        wanted = std::vector<std::int64_t>();
        for (std::size_t i = 0; i < spatial; ++i)
            wanted->push_back(x0.shape()[2 + i] * stride[i]);
    }
    if (wanted) {
        if (wanted->size() == spatial + 2) wanted->erase(wanted->begin(), wanted->begin() + 2);
        if (wanted->size() != spatial)
            throw shape_error(message(where(n), ": output_shape does not fit ", spatial, " axes"));
        for (std::size_t i = 0; i < spatial; ++i) {
            const std::int64_t total = stride[i] * (x0.shape()[2 + i] - 1) + extra[i] +
                                       (kernel[i] - 1) * dilation[i] + 1 - (*wanted)[i];
            // Floor division, as ONNX's reference: a negative total (an output_shape past the full
            // result) pads the end with zeros.
            const std::int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
            pads[i] = auto_pad == "SAME_UPPER" ? half : total - half;
            pads[i + spatial] = total - pads[i];
        }
    } else if (auto_pad == "VALID") {
        std::fill(pads.begin(), pads.end(), 0);
    }
    // The weight [C_in, C_out / g, kh, kw] as a convolution's [C_out, C_in / g, kh, kw], window flipped.
    const std::int64_t kh = w.shape()[2], kw = w.shape()[3];
    value flipped = reshape(w, {groups, in_channels / groups, per_group_out, kh, kw});
    flipped =
        reshape(permute(flipped, {0, 2, 1, 3, 4}), {groups * per_group_out, in_channels / groups, kh, kw});
    flipped = reversed(reversed(flipped, 2), 3);
    // The input spread out: [N, C, H, 1, W, 1] padded to [N, C, H, sh, W, sw], the trailing zeros cut.
    const bool one = spatial == 1;
    const std::int64_t sh = one ? 1 : stride[0], sw = stride.back();
    value spread = x;
    if (sh > 1 || sw > 1) {
        const std::int64_t batch = x.shape()[0], h = x.shape()[2], wd = x.shape()[3];
        attributes p;
        p.begin.assign(6, 0);
        p.end.assign(6, 0);
        p.end[3] = sh - 1;
        p.end[5] = sw - 1;
        spread = g_.apply(op::pad, {reshape(x, {batch, in_channels, h, 1, wd, 1})}, p);
        spread = reshape(spread, {batch, in_channels, h * sh, wd * sw});
        spread = slice(slice(spread, 2, 0, h * sh - (sh - 1)), 3, 0, wd * sw - (sw - 1));
    }
    // Padding (k - 1) d - pad before and (k - 1) d - pad + output_padding after; a negative one crops.
    std::array<std::int64_t, 4> padding{};
    for (std::size_t axis = 0; axis < 2; ++axis) {
        const bool real = !(one && axis == 0);
        const std::size_t i = one ? 0 : axis;
        const std::int64_t reach = real ? (kernel[i] - 1) * dilation[i] : 0;
        std::int64_t before = real ? reach - pads[i] : 0,
                     after = real ? reach - pads[i + spatial] + extra[i] : 0;
        const std::int64_t extent = spread.shape()[2 + axis];
        if (before < 0 || after < 0) {
            spread = slice(spread, 2 + axis, std::max<std::int64_t>(-before, 0),
                           extent - std::max<std::int64_t>(-after, 0));
            before = std::max<std::int64_t>(before, 0);
            after = std::max<std::int64_t>(after, 0);
        }
        padding[2 * axis] = before;
        padding[2 * axis + 1] = after;
    }
    attributes a;
    a.padding = padding;
    a.groups = groups;
    a.dilation = {one ? 1 : dilation[0], dilation.back()};
    std::vector<value> operands{spread, flipped};
    if (has_input(n, 2)) operands.push_back(input(n, 2));
    const value y = g_.apply(op::conv2d, operands, a);
    if (!one) return y;
    return reshape(y, {y.shape()[0], y.shape()[1], y.shape()[3]});
}

inline value importer::pool(const onnx_node& n, bool max) {
    const value x = input(n, 0);
    if (n.outputs.size() > 1 && !n.outputs[1].empty()) unsupported(n, "the indices output");
    const auto kernel = ints_attribute(n, "kernel_shape");
    if (!kernel) throw format_error(message(where(n), ": kernel_shape is required"));
    if (kernel->size() + 2 != x.rank())
        throw shape_error(message(where(n), ": kernel_shape does not fit the input ", x.shape()));
    const window w = window_of(n, x, *kernel);
    for (const std::int64_t d : w.dilation)
        if (d != 1) unsupported(n, "dilated pooling windows");
    attributes a;
    a.ceil_mode = int_attribute(n, "ceil_mode", 0) != 0;
    a.count_include_pad = int_attribute(n, "count_include_pad", 0) != 0;
    if (max && int_attribute(n, "storage_order", 0) != 0) unsupported(n, "storage_order 1");
    window padded_window = w;
    value source = as_2d(n, x);
    bool wide = false;
    for (std::size_t i = 0; i < w.kernel.size(); ++i)
        wide = wide || 2 * w.pad_begin[i] > w.kernel[i] || 2 * w.pad_end[i] > w.kernel[i];
    if (wide) {
        // anvil's pooling pads at most half a window (PyTorch's rule). Wider padding is made explicit:
        // -inf around a max, zeros around an average that counts the padding; the pooling then pads
        // nothing.
        if ((!max && !a.count_include_pad) || a.ceil_mode)
            unsupported(n,
                        "padding of more than half the window without count_include_pad, or with ceil_mode");
        attributes p;
        p.begin.assign(4, 0);
        p.end.assign(4, 0);
        const bool one = w.kernel.size() == 1;
        p.begin[2] = one ? 0 : w.pad_begin[0];
        p.end[2] = one ? 0 : w.pad_end[0];
        p.begin[3] = w.pad_begin.back();
        p.end[3] = w.pad_end.back();
        p.value = max ? -std::numeric_limits<float>::infinity() : 0.0f;
        source = g_.apply(op::pad, {source}, p);
        std::fill(padded_window.pad_begin.begin(), padded_window.pad_begin.end(), 0);
        std::fill(padded_window.pad_end.begin(), padded_window.pad_end.end(), 0);
    }
    set_window(a, padded_window);
    const value y = g_.apply(max ? op::max_pool2d : op::avg_pool2d, {source}, a);
    if (x.rank() == 4) return y;
    return reshape(y, {y.shape()[0], y.shape()[1], y.shape()[3]});
}

// ONNX: X, scale, B, mean, var; anvil: x, mean, variance, weight, bias.
inline value importer::batch_norm(const onnx_node& n) {
    if (int_attribute(n, "training_mode", 0) != 0 || (n.outputs.size() > 1 && !n.outputs[1].empty()))
        unsupported(n, "training mode (running statistics)");
    attributes a;
    a.epsilon = float_attribute(n, "epsilon", 1e-5f);
    return g_.apply(op::batch_norm, {input(n, 0), input(n, 3), input(n, 4), input(n, 1), input(n, 2)}, a);
}

inline value importer::instance_norm(const onnx_node& n) {
    const value x = input(n, 0);
    attributes a;
    a.epsilon = float_attribute(n, "epsilon", 1e-5f);
    a.groups = x.rank() >= 2 ? x.shape()[1] : 1;
    return g_.apply(op::group_norm, {x, input(n, 1), input(n, 2)}, a);
}

// Over the axes from `axis` on: the last axis is anvil's layer_norm; several are flattened into one
// first. The optional Mean and InvStdDev outputs are computed the same way when asked for.
inline std::vector<value> importer::layer_norm(const onnx_node& n) {
    const value x = input(n, 0);
    const auto rank = static_cast<std::int64_t>(x.rank());
    const std::int64_t axis = normalized_axis(int_attribute(n, "axis", -1), rank, where(n));
    const float epsilon = float_attribute(n, "epsilon", 1e-5f);
    const std::vector<std::int64_t> shape = extents_of(x.shape());
    std::int64_t inner = 1;
    for (std::int64_t i = axis; i < rank; ++i)
        inner *= shape[static_cast<std::size_t>(i)];
    std::vector<std::int64_t> rows(shape.begin(), shape.begin() + axis);
    rows.push_back(inner);
    const value flat = reshape(x, rows);
    const auto vector_of = [&](std::size_t index) {
        const value v = input(n, index);
        if (v.shape().element_count() != static_cast<std::size_t>(inner))
            return broadcast_to(v, std::vector<std::int64_t>(shape.begin() + axis, shape.end()));
        return v;
    };
    std::vector<value> operands{flat, reshape(vector_of(1), {inner})};
    if (has_input(n, 2)) operands.push_back(reshape(vector_of(2), {inner}));
    attributes a;
    a.epsilon = epsilon;
    std::vector<value> out{reshape(g_.apply(op::layer_norm, operands, a), shape)};
    const bool wants_statistics =
        (n.outputs.size() > 1 && !n.outputs[1].empty()) || (n.outputs.size() > 2 && !n.outputs[2].empty());
    if (wants_statistics) {
        std::vector<std::int64_t> kept = shape;
        for (std::size_t i = static_cast<std::size_t>(axis); i < kept.size(); ++i)
            kept[i] = 1;
        const std::int64_t last = static_cast<std::int64_t>(rows.size()) - 1;
        const value mean = reduce(op::reduce_mean, flat, {last}, true);
        const value centred = apply(op::sub, {flat, mean});
        const value variance = reduce(op::reduce_mean, apply(op::mul, {centred, centred}), {last}, true);
        const value inv_std = apply(op::rsqrt, {apply(op::add, {variance, scalar_like(epsilon, variance)})});
        out.push_back(reshape(mean, kept));
        out.push_back(reshape(inv_std, kept));
    }
    return out;
}

// Resizing the two spatial axes of NCHW: nearest with asymmetric coordinates rounded down (Upsample's,
// and PyTorch's 'nearest'), or linear with half-pixel or corner-aligned coordinates (PyTorch's
// bilinear). Other modes and coordinate transforms are refused by name.
inline value importer::resize(const onnx_node& n) {
    const value x = input(n, 0);
    if (x.rank() != 4) unsupported(n, message("resizing rank ", x.rank(), " (anvil resizes NCHW images)"));
    const std::string mode = string_attribute(n, "mode", "nearest");
    const bool upsample = n.op_type == "Upsample";
    const std::string transform =
        upsample ? "asymmetric" : string_attribute(n, "coordinate_transformation_mode", "half_pixel");
    std::vector<std::int64_t> sizes;
    std::vector<float> scales;
    if (upsample) {
        if (opset_ < 9) {
            const onnx_attribute* s = n.find("scales");
            if (s != nullptr) scales = s->floats;
        } else {
            scales = required(n, 1, "the scales").to_f32();
        }
    } else {
        const std::size_t scales_at = opset_ < 11 ? 1 : 2, sizes_at = 3;
        if (has_input(n, sizes_at)) sizes = required_ints(n, sizes_at, "the sizes");
        if (sizes.empty() && has_input(n, scales_at)) scales = required(n, scales_at, "the scales").to_f32();
        if (transform == "tf_crop_and_resize") unsupported(n, "tf_crop_and_resize");
        if (n.find("axes") != nullptr) unsupported(n, "the axes attribute");
        if (int_attribute(n, "antialias", 0) != 0) unsupported(n, "antialiasing");
    }
    const std::vector<std::int64_t> in = extents_of(x.shape());
    if (sizes.empty()) {
        if (scales.size() != 4) throw shape_error(message(where(n), ": scales or sizes must give 4 values"));
        for (std::size_t i = 0; i < 4; ++i)
            sizes.push_back(static_cast<std::int64_t>(std::floor(static_cast<float>(in[i]) * scales[i])));
        // Output extents from scales that are not whole would use the scale, not the sizes' ratio, for
        // the coordinates: refused rather than answered slightly off.
        for (std::size_t i = 2; i < 4; ++i)
            if (static_cast<float>(sizes[i]) != static_cast<float>(in[i]) * scales[i])
                unsupported(n, "scales that do not give whole output extents");
    }
    if (sizes.size() != 4) throw shape_error(message(where(n), ": sizes must give 4 values"));
    if (sizes[0] != in[0] || sizes[1] != in[1]) unsupported(n, "resizing the batch or channel axes");
    attributes a;
    a.sizes = {sizes[2], sizes[3]};
    if (mode == "nearest") {
        // anvil's nearest is floor(out * in / out_extent) (asymmetric coordinates rounded down:
        // Upsample's and PyTorch's). Half-pixel coordinates rounded to nearest give the same pixels when
        // each axis grows by a whole factor: (x + 0.5) / s - 0.5 stays within half a pixel of floor(x /
        // s).
        const std::string rounding =
            upsample ? "floor" : string_attribute(n, "nearest_mode", "round_prefer_floor");
        const bool whole_growth = sizes[2] % in[2] == 0 && sizes[3] % in[3] == 0;
        const bool same = (transform == "asymmetric" && rounding == "floor") ||
                          ((transform == "half_pixel" || transform == "pytorch_half_pixel") &&
                           (rounding == "round_prefer_floor" || rounding == "round_prefer_ceil") &&
                           whole_growth && sizes[2] > 1 && sizes[3] > 1);
        if (!same)
            unsupported(n, message("nearest with '", transform, "' coordinates and '", rounding,
                                   "' rounding at these sizes (anvil's is asymmetric, floor: PyTorch's "
                                   "'nearest')"));
        return g_.apply(op::upsample_nearest, {x}, a);
    }
    if (mode == "linear" || mode == "bilinear") {
        if (transform == "align_corners") {
            a.align_corners = true;
        } else if (transform != "half_pixel" && transform != "pytorch_half_pixel") {
            unsupported(n, message("linear with '", transform, "' coordinates"));
        } else if (transform == "pytorch_half_pixel" && (sizes[2] == 1 || sizes[3] == 1)) {
            // ONNX's pytorch_half_pixel samples coordinate 0 for an extent of 1; PyTorch itself (and
            // anvil) the half-pixel centre.
            unsupported(n, "pytorch_half_pixel resizing an axis to one pixel");
        }
        return g_.apply(op::upsample_bilinear, {x}, a);
    }
    unsupported(n, message("mode '", mode, "'"));
}

// x / (bias + alpha / size * (sum of squares over `size` neighbouring channels))^beta.
inline value importer::local_response_norm(const onnx_node& n) {
    const value x = input(n, 0);
    if (x.rank() < 3) throw shape_error(message(where(n), ": the input ", x.shape(), " is not [N, C, ...]"));
    const std::int64_t size = int_attribute(n, "size", 0);
    if (size <= 0) throw format_error(message(where(n), ": size must be positive"));
    const double alpha = float_attribute(n, "alpha", 1e-4f), beta = float_attribute(n, "beta", 0.75f),
                 bias = float_attribute(n, "bias", 1.0f);
    const std::int64_t channels = x.shape()[1];
    attributes a;
    a.begin.assign(x.rank(), 0);
    a.end.assign(x.rank(), 0);
    a.begin[1] = (size - 1) / 2;
    a.end[1] = size - 1 - (size - 1) / 2;
    const value padded = g_.apply(op::pad, {apply(op::mul, {x, x})}, a);
    value sum = slice(padded, 1, 0, channels);
    for (std::int64_t i = 1; i < size; ++i)
        sum = apply(op::add, {sum, slice(padded, 1, i, i + channels)});
    const value k = apply(
        op::add,
        {scalar_like(bias, x), apply(op::mul, {sum, scalar_like(alpha / static_cast<double>(size), x)})});
    return apply(op::div, {x, apply(op::pow, {k, scalar_like(beta, x)})});
}

}  // namespace anvil::models::onnx_detail
