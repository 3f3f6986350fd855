// anvil: shape_inference's definitions (see shape_inference.hpp; compilation.hpp says when this file is
// compiled).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/core/checked_math.hpp"
#include "anvil/core/dtype.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/ggml_types.hpp"
#include "anvil/core/shape.hpp"
#include "anvil/graph/op.hpp"
#include "anvil/graph/shape_inference.hpp"

namespace anvil {

namespace detail {

ANVIL_INLINE void throw_op_shape(op kind, const std::string& what) {
    throw shape_error(message(op_name(kind), ": ", what));
}

ANVIL_INLINE std::string describe_operands(std::span<const value_type> inputs) {
    std::string text;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        if (i != 0) text += i + 1 == inputs.size() ? " and " : ", ";
        text += inputs[i].shape.to_string();
    }
    return text;
}

ANVIL_INLINE std::string describe_types(std::span<const value_type> inputs) {
    std::string text;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        if (i != 0) text += i + 1 == inputs.size() ? " and " : ", ";
        text += dtype_name(inputs[i].type);
    }
    return text;
}

ANVIL_INLINE std::int64_t normalize_axis(op kind, std::int64_t axis, std::size_t rank, const dims& shape) {
    const auto signed_rank = static_cast<std::int64_t>(rank);
    if (axis < -signed_rank || axis >= signed_rank) {
        throw_op_shape(kind,
                       message("axis ", axis, " is out of range for shape ", shape, " (rank ", rank, ")"));
    }
    return axis < 0 ? axis + signed_rank : axis;
}

ANVIL_INLINE void require_floating(op kind, dtype type, std::string_view which) {
    if (!is_floating(type)) {
        throw type_error(
            message(op_name(kind), ": ", which, " must be floating point, got ", dtype_name(type)));
    }
}

ANVIL_INLINE void require_same_type(op kind, std::span<const value_type> inputs) {
    for (std::size_t i = 1; i < inputs.size(); ++i) {
        if (inputs[i].type != inputs[0].type) {
            throw type_error(message(op_name(kind), ": operand types differ (", dtype_name(inputs[0].type),
                                     " and ", dtype_name(inputs[i].type), ")"));
        }
    }
}

ANVIL_INLINE void require_numeric(op kind, std::span<const value_type> inputs) {
    for (const value_type& input : inputs) {
        if (input.type == dtype::boolean) {
            throw type_error(message(op_name(kind), inputs.size() == 1 ? ": the operand" : ": operands",
                                     " must be numeric, got ", describe_types(inputs)));
        }
    }
}

ANVIL_INLINE void require_boolean(op kind, std::span<const value_type> inputs) {
    for (const value_type& input : inputs) {
        if (input.type != dtype::boolean) {
            throw type_error(message(op_name(kind), inputs.size() == 1 ? ": the operand" : ": operands",
                                     " must be bool, got ", describe_types(inputs),
                                     " (compare numbers first, or cast them to bool)"));
        }
    }
}

ANVIL_INLINE void require_rank(op kind, const value_type& input, std::size_t rank, std::string_view which) {
    if (input.shape.rank() != rank) {
        throw_op_shape(kind, message(which, " must have rank ", rank, ", got ", input.shape));
    }
}

ANVIL_INLINE void require_vector(op kind, const value_type& input, std::int64_t length,
                                 std::string_view which) {
    if (input.shape.rank() != 1 || input.shape[0] != length) {
        throw_op_shape(kind, message(which, " must have shape [", length, "], got ", input.shape));
    }
}

ANVIL_INLINE dims with_extent(dims shape, std::size_t axis, std::int64_t extent) {
    std::array<std::int64_t, max_rank> extents{};
    std::copy(shape.begin(), shape.end(), extents.begin());
    extents[axis] = extent;
    return dims(std::span<const std::int64_t>(extents.data(), shape.rank()));
}

ANVIL_INLINE std::int64_t window_output_extent(op kind, std::int64_t size, std::int64_t pad_before,
                                               std::int64_t pad_after, std::int64_t kernel,
                                               std::int64_t stride, std::int64_t dilation, bool ceil_mode) {
    if (kernel <= 0 || stride <= 0 || dilation <= 0 || pad_before < 0 || pad_after < 0) {
        throw_op_shape(
            kind, message("kernel ", kernel, ", stride ", stride, ", dilation ", dilation,
                          " must be positive and padding ", pad_before, ", ", pad_after, " non-negative"));
    }
    const std::int64_t extent =
        static_window_extent(size, pad_before, pad_after, kernel, stride, dilation, ceil_mode);
    if (extent == invalid_extent) {
        throw_op_shape(
            kind, message("the window (", dilation * (kernel - 1) + 1, ") is larger than the padded input (",
                          size + pad_before + pad_after, ")"));
    }
    return extent;
}

ANVIL_INLINE void check_fused_steps(std::span<const fused_step> steps, std::size_t input_count) {
    if (steps.empty()) throw error("fused_elementwise: the node has no steps");
    for (std::size_t s = 0; s < steps.size(); ++s) {
        const op kind = steps[s].kind;
        if (static_cast<std::size_t>(kind) >= op_count || !is_elementwise(kind) || kind == op::cast) {
            throw error(message("fused_elementwise: step ", s, " is ",
                                static_cast<std::size_t>(kind) < op_count ? op_name(kind) : "an unknown op",
                                ", not an elementwise op other than cast"));
        }
        for (std::size_t i = 0; i < elementwise_arity(kind); ++i) {
            if (steps[s].operands[i] >= input_count + s) {
                throw error(message("fused_elementwise: step ", s, " (", op_name(kind), ") reads value ",
                                    steps[s].operands[i], ", but only ", input_count + s,
                                    " values (inputs, then earlier steps) exist before it"));
            }
        }
    }
}

ANVIL_INLINE value_type infer_broadcast(op kind, std::span<const value_type> inputs) {
    dims shape = inputs[0].shape;
    for (std::size_t i = 1; i < inputs.size(); ++i) {
        if (!broadcast(shape, inputs[i].shape)) {
            throw shape_error(
                message(op_name(kind), ": shapes ", describe_operands(inputs), " do not broadcast"));
        }
        shape = broadcast_or_throw(op_name(kind), shape, inputs[i].shape);
    }
    return {inputs[0].type, shape};
}

ANVIL_INLINE value_type infer_matmul(op kind, const attributes& attrs, std::span<const value_type> in) {
    const dims& a = in[0].shape;
    const dims& b = in[1].shape;
    if (a.rank() < 2 || b.rank() < 2) {
        throw_op_shape(kind, message("operands need rank >= 2, got ", a, " and ", b));
    }
    const std::int64_t m = attrs.transpose_a ? a[a.rank() - 1] : a[a.rank() - 2];
    const std::int64_t ka = attrs.transpose_a ? a[a.rank() - 2] : a[a.rank() - 1];
    const std::int64_t kb = attrs.transpose_b ? b[b.rank() - 1] : b[b.rank() - 2];
    const std::int64_t n = attrs.transpose_b ? b[b.rank() - 2] : b[b.rank() - 1];
    if (ka != kb) {
        throw_op_shape(kind, message("inner extents differ: ", a, attrs.transpose_a ? "^T" : "", " and ", b,
                                     attrs.transpose_b ? "^T" : "", " (", ka, " vs ", kb, ")"));
    }
    const dims batch_a(a.extents().first(a.rank() - 2));
    const dims batch_b(b.extents().first(b.rank() - 2));
    const auto batch = broadcast(batch_a, batch_b);
    if (!batch) {
        throw_op_shape(kind, message("batch axes of ", a, " and ", b, " do not broadcast"));
    }
    std::vector<std::int64_t> out(batch->begin(), batch->end());
    out.push_back(m);
    out.push_back(n);
    return {in[0].type, dims(out)};
}

ANVIL_INLINE value_type infer_conv2d(op kind, attributes& attrs, std::span<const value_type> in) {
    require_rank(kind, in[0], 4, "the input (NCHW)");
    require_rank(kind, in[1], 4, "the weight [out, in / groups, kh, kw]");
    const dims& x = in[0].shape;
    const dims& w = in[1].shape;
    if (attrs.groups <= 0 || x[1] % attrs.groups != 0 || w[0] % attrs.groups != 0 ||
        w[1] * attrs.groups != x[1]) {
        throw_op_shape(kind, message("input ", x, " and weight ", w, " do not fit groups = ", attrs.groups,
                                     " (expected weight [out, ", attrs.groups > 0 ? x[1] / attrs.groups : 0,
                                     ", kh, kw] with out divisible by groups)"));
    }
    if (in.size() == 3) require_vector(kind, in[2], w[0], "the bias");
    attrs.kernel = {w[2], w[3]};
    const std::int64_t h = window_output_extent(kind, x[2], attrs.padding[0], attrs.padding[1], w[2],
                                                attrs.stride[0], attrs.dilation[0], false);
    const std::int64_t width = window_output_extent(kind, x[3], attrs.padding[2], attrs.padding[3], w[3],
                                                    attrs.stride[1], attrs.dilation[1], false);
    return {in[0].type, dims{x[0], w[0], h, width}};
}

ANVIL_INLINE value_type infer_pool(op kind, const attributes& attrs, std::span<const value_type> in) {
    require_rank(kind, in[0], 4, "the input (NCHW)");
    const dims& x = in[0].shape;
    if (attrs.dilation != std::array<std::int64_t, 2>{1, 1}) {
        throw_op_shape(kind, message("dilation ", extents_to_string(attrs.dilation, false),
                                     " is not supported: pooling windows are dense"));
    }
    for (std::size_t i = 0; i < 2; ++i) {
        if (attrs.padding[2 * i] * 2 > attrs.kernel[i] || attrs.padding[2 * i + 1] * 2 > attrs.kernel[i]) {
            throw_op_shape(kind,
                           message("padding must be at most half the kernel (kernel ", attrs.kernel[i],
                                   ", padding ", attrs.padding[2 * i], ", ", attrs.padding[2 * i + 1], ")"));
        }
    }
    const std::int64_t h = window_output_extent(kind, x[2], attrs.padding[0], attrs.padding[1],
                                                attrs.kernel[0], attrs.stride[0], 1, attrs.ceil_mode);
    const std::int64_t w = window_output_extent(kind, x[3], attrs.padding[2], attrs.padding[3],
                                                attrs.kernel[1], attrs.stride[1], 1, attrs.ceil_mode);
    return {in[0].type, dims{x[0], x[1], h, w}};
}

ANVIL_INLINE value_type infer_reduction(op kind, attributes& attrs, std::span<const value_type> in) {
    const dims& x = in[0].shape;
    if (kind == op::argmax) attrs.axes = {attrs.axis};
    if (attrs.axes.empty()) {
        for (std::size_t axis = 0; axis < x.rank(); ++axis)
            attrs.axes.push_back(static_cast<std::int64_t>(axis));
    }
    for (auto& axis : attrs.axes)
        axis = normalize_axis(kind, axis, x.rank(), x);
    std::sort(attrs.axes.begin(), attrs.axes.end());
    if (std::adjacent_find(attrs.axes.begin(), attrs.axes.end()) != attrs.axes.end()) {
        throw_op_shape(kind, message("an axis is repeated in the reduction of ", x));
    }
    if (kind == op::argmax) attrs.axis = attrs.axes[0];
    std::vector<std::int64_t> out;
    for (std::size_t axis = 0; axis < x.rank(); ++axis) {
        const bool reduced =
            std::binary_search(attrs.axes.begin(), attrs.axes.end(), static_cast<std::int64_t>(axis));
        if (reduced && x[axis] == 0 &&
            (kind == op::reduce_max || kind == op::reduce_min || kind == op::argmax)) {
            throw_op_shape(kind, message("cannot reduce the empty axis ", axis, " of ", x));
        }
        if (!reduced)
            out.push_back(x[axis]);
        else if (attrs.keep_dims)
            out.push_back(1);
    }
    return {kind == op::argmax ? dtype::i64 : in[0].type, dims(out)};
}

ANVIL_INLINE value_type infer_reshape(op kind, attributes& attrs, std::span<const value_type> in) {
    const dims& x = in[0].shape;
    std::int64_t known = 1;
    std::size_t inferred = attrs.sizes.size();
    for (std::size_t i = 0; i < attrs.sizes.size(); ++i) {
        if (attrs.sizes[i] == -1 && inferred == attrs.sizes.size()) {
            inferred = i;
        } else if (attrs.sizes[i] < 0) {
            throw_op_shape(kind, message("target extent ", attrs.sizes[i], " at axis ", i,
                                         " is invalid (one extent may be -1)"));
        } else {
            const auto product =
                checked_mul(static_cast<std::uint64_t>(known), static_cast<std::uint64_t>(attrs.sizes[i]));
            if (!product || *product > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
                throw_op_shape(kind, message("the target ", extents_to_string(attrs.sizes, false),
                                             " has too many elements"));
            }
            known = static_cast<std::int64_t>(*product);
        }
    }
    if (attrs.sizes.size() > max_rank) {
        throw_op_shape(
            kind, message("the target ", extents_to_string(attrs.sizes, false), " exceeds rank ", max_rank));
    }
    const auto count = static_cast<std::int64_t>(x.element_count());
    if (inferred != attrs.sizes.size()) {
        if (known == 0 || count % known != 0) {
            throw_op_shape(kind, message("cannot reshape ", x, " (", count, " elements) with -1 in ",
                                         extents_to_string(attrs.sizes, false)));
        }
        attrs.sizes[inferred] = count / known;
    }
    const dims target(attrs.sizes);
    if (static_cast<std::int64_t>(target.element_count()) != count) {
        throw_op_shape(kind, message("cannot reshape ", x, " (", count, " elements) to ", target, " (",
                                     target.element_count(), " elements)"));
    }
    return {in[0].type, target};
}

ANVIL_INLINE value_type infer_slice(op kind, attributes& attrs, std::span<const value_type> in) {
    const dims& x = in[0].shape;
    if (attrs.begin.size() != x.rank() || attrs.end.size() != x.rank() || attrs.step.size() != x.rank()) {
        throw_op_shape(kind, message("begin, end and step need one entry per axis of ", x));
    }
    std::vector<std::int64_t> out;
    for (std::size_t axis = 0; axis < x.rank(); ++axis) {
        const std::int64_t extent = x[axis];
        if (attrs.step[axis] <= 0) {
            throw_op_shape(kind, message("step ", attrs.step[axis], " at axis ", axis, " must be positive"));
        }
        // Python's rules: negative indices count from the end; out-of-range bounds clamp.
        auto clamp_index = [extent](std::int64_t index) {
            if (index < 0) index += extent;
            return std::clamp<std::int64_t>(index, 0, extent);
        };
        attrs.begin[axis] = clamp_index(attrs.begin[axis]);
        attrs.end[axis] = std::max(attrs.begin[axis], clamp_index(attrs.end[axis]));
        out.push_back((attrs.end[axis] - attrs.begin[axis] + attrs.step[axis] - 1) / attrs.step[axis]);
    }
    return {in[0].type, dims(out)};
}

ANVIL_INLINE value_type infer_attention(op kind, std::span<const value_type> in) {
    require_same_type(kind, in.first(3));
    for (std::size_t i = 0; i < 3; ++i)
        require_rank(kind, in[i], 4, i == 0 ? "q" : i == 1 ? "k" : "v");
    const dims& q = in[0].shape;
    const dims& k = in[1].shape;
    const dims& v = in[2].shape;
    if (k[0] != q[0] || v[0] != q[0] || k[1] != v[1] || k[2] != v[2] || k[3] != q[3] || k[1] == 0 ||
        q[1] % k[1] != 0) {
        throw_op_shape(kind,
                       message("q ", q, ", k ", k, ", v ", v,
                               " do not fit q [B, H, Sq, D], k [B, Hkv, Sk, D], v [B, Hkv, Sk, Dv] with H a "
                               "multiple of Hkv"));
    }
    if (in.size() == 4) {
        const dims scores{q[0], q[1], q[2], k[2]};
        const auto b = broadcast(in[3].shape, scores);
        if (!b || !(*b == scores)) {
            throw_op_shape(kind,
                           message("the mask ", in[3].shape, " does not broadcast to the scores ", scores));
        }
    }
    return {in[0].type, dims{q[0], q[1], q[2], v[3]}};
}

}  // namespace detail

ANVIL_INLINE value_type infer(op kind, attributes& attrs, std::span<const value_type> inputs) {
    using namespace detail;
    const op_info& meta = info(kind);
    if (inputs.size() < meta.min_inputs ||
        (meta.max_inputs != any_count && inputs.size() > meta.max_inputs)) {
        const std::string range = meta.max_inputs == meta.min_inputs ? ""
                                  : meta.max_inputs == any_count     ? " or more"
                                                                     : message(" to ", int{meta.max_inputs});
        throw error(
            message(meta.name, ": takes ", int{meta.min_inputs}, range, " operands, got ", inputs.size()));
    }
    switch (kind) {
        case op::input:
        case op::constant:
            throw error(message(meta.name, ": a leaf's type is given, not inferred"));
        case op::relu:
        case op::gelu:
        case op::gelu_tanh:
        case op::quick_gelu:
        case op::silu:
        case op::sigmoid:
        case op::tanh:
        case op::exp:
        case op::log:
        case op::sqrt:
        case op::rsqrt:
        case op::abs:
        case op::neg:
        case op::erf:
        case op::floor:
        case op::ceil:
        case op::round:
        case op::sin:
        case op::cos:
        case op::clamp:
            require_floating(kind, inputs[0].type, "the operand");
            return inputs[0];
        case op::sign:
            require_numeric(kind, inputs);
            return inputs[0];
        case op::cast:
            return {attrs.to, inputs[0].shape};
        case op::add:
        case op::sub:
        case op::mul:
        case op::div:
        case op::pow:
        case op::maximum:
        case op::minimum:
            require_same_type(kind, inputs);
            return infer_broadcast(kind, inputs);
        case op::equal:
        case op::less:
        case op::less_equal:
        case op::greater:
        case op::greater_equal: {
            require_same_type(kind, inputs);
            // equal also compares booleans (ONNX's Equal does); an order needs numbers.
            if (kind != op::equal) require_numeric(kind, inputs);
            auto result = infer_broadcast(kind, inputs);
            result.type = dtype::boolean;
            return result;
        }
        case op::logical_and:
        case op::logical_or:
        case op::logical_xor:
        case op::logical_not: {
            require_boolean(kind, inputs);
            auto result = infer_broadcast(kind, inputs);
            result.type = dtype::boolean;
            return result;
        }
        case op::where: {
            require_same_type(kind, inputs.subspan(1));
            auto result = infer_broadcast(kind, inputs);
            result.type = inputs[1].type;
            return result;
        }
        case op::fused_elementwise: {
            check_fused_steps(attrs.steps, inputs.size());
            auto result = infer_broadcast(kind, inputs);
            result.type = attrs.to;
            return result;
        }
        case op::matmul:
            require_same_type(kind, inputs);
            return infer_matmul(kind, attrs, inputs);
        case op::linear: {
            const dims& x = inputs[0].shape;
            require_rank(kind, inputs[1], 2, "the weight [out, in]");
            if (x.rank() < 1 || x[x.rank() - 1] != inputs[1].shape[1]) {
                throw_op_shape(kind, message("input ", x, " and weight ", inputs[1].shape,
                                             " do not fit: expected input [..., ", inputs[1].shape[1], "]"));
            }
            if (inputs.size() == 3) require_vector(kind, inputs[2], inputs[1].shape[0], "the bias");
            return {inputs[0].type, with_extent(x, x.rank() - 1, inputs[1].shape[0])};
        }
        case op::conv2d:
            return infer_conv2d(kind, attrs, inputs);
        case op::max_pool2d:
        case op::avg_pool2d:
            return infer_pool(kind, attrs, inputs);
        case op::upsample_nearest:
        case op::upsample_bilinear:
            require_rank(kind, inputs[0], 4, "the input (NCHW)");
            if (attrs.sizes.size() != 2 || attrs.sizes[0] <= 0 || attrs.sizes[1] <= 0) {
                throw_op_shape(kind, "sizes must give the output [h, w], both positive");
            }
            if (inputs[0].shape[2] == 0 || inputs[0].shape[3] == 0) {
                throw_op_shape(kind, message("cannot resize the empty image ", inputs[0].shape));
            }
            return {inputs[0].type,
                    dims{inputs[0].shape[0], inputs[0].shape[1], attrs.sizes[0], attrs.sizes[1]}};
        case op::layer_norm:
        case op::rms_norm: {
            const dims& x = inputs[0].shape;
            if (x.rank() < 1) throw_op_shape(kind, "the input must have rank >= 1");
            for (std::size_t i = 1; i < inputs.size(); ++i) {
                require_vector(kind, inputs[i], x[x.rank() - 1], i == 1 ? "the weight" : "the bias");
            }
            return inputs[0];
        }
        case op::group_norm:
        case op::batch_norm: {
            const dims& x = inputs[0].shape;
            if (x.rank() < 2) throw_op_shape(kind, message("the input must be [N, C, ...], got ", x));
            if (kind == op::group_norm && (attrs.groups <= 0 || x[1] % attrs.groups != 0)) {
                throw_op_shape(kind, message(x[1], " channels do not split into ", attrs.groups, " groups"));
            }
            static constexpr std::array<std::string_view, 5> names{"", "the mean", "the variance",
                                                                   "the weight", "the bias"};
            for (std::size_t i = 1; i < inputs.size(); ++i) {
                require_vector(kind, inputs[i], x[1],
                               kind == op::group_norm ? (i == 1 ? "the weight" : "the bias") : names[i]);
            }
            return inputs[0];
        }
        case op::softmax: {
            require_floating(kind, inputs[0].type, "the operand");
            attrs.axis = normalize_axis(kind, attrs.axis, inputs[0].shape.rank(), inputs[0].shape);
            if (inputs.size() == 2) {
                const auto b = broadcast(inputs[1].shape, inputs[0].shape);
                if (!b || !(*b == inputs[0].shape)) {
                    throw_op_shape(kind, message("the mask ", inputs[1].shape,
                                                 " does not broadcast to the input ", inputs[0].shape));
                }
            }
            return inputs[0];
        }
        case op::reduce_sum:
        case op::reduce_mean:
        case op::reduce_max:
        case op::reduce_min:
        case op::reduce_prod:
        case op::argmax:
            return infer_reduction(kind, attrs, inputs);
        case op::cumsum: {
            const dims& x = inputs[0].shape;
            if (x.rank() == 0) throw_op_shape(kind, "the operand must have rank >= 1");
            attrs.axis = normalize_axis(kind, attrs.axis, x.rank(), x);
            return inputs[0];
        }
        case op::reshape:
            return infer_reshape(kind, attrs, inputs);
        case op::permute: {
            const dims& x = inputs[0].shape;
            std::vector<bool> seen(x.rank(), false);
            if (attrs.axes.size() != x.rank()) {
                throw_op_shape(kind, message("the order ", extents_to_string(attrs.axes, false),
                                             " is not a permutation of the axes of ", x));
            }
            std::vector<std::int64_t> out;
            for (auto& axis : attrs.axes) {
                axis = normalize_axis(kind, axis, x.rank(), x);
                if (seen[static_cast<std::size_t>(axis)]) {
                    throw_op_shape(kind, message("the order ", extents_to_string(attrs.axes, false),
                                                 " repeats axis ", axis));
                }
                seen[static_cast<std::size_t>(axis)] = true;
                out.push_back(x[static_cast<std::size_t>(axis)]);
            }
            return {inputs[0].type, dims(out)};
        }
        case op::concat: {
            require_same_type(kind, inputs);
            const dims& first = inputs[0].shape;
            if (first.rank() == 0) throw_op_shape(kind, "cannot concatenate scalars");
            attrs.axis = normalize_axis(kind, attrs.axis, first.rank(), first);
            const auto axis = static_cast<std::size_t>(attrs.axis);
            std::int64_t total = 0;
            for (const auto& input : inputs) {
                bool fits = input.shape.rank() == first.rank();
                for (std::size_t i = 0; fits && i < first.rank(); ++i)
                    fits = i == axis || input.shape[i] == first[i];
                if (!fits) {
                    throw_op_shape(
                        kind, message("shapes ", describe_operands(inputs), " differ outside axis ", axis));
                }
                total += input.shape[axis];
            }
            return {inputs[0].type, with_extent(first, axis, total)};
        }
        case op::slice:
            return infer_slice(kind, attrs, inputs);
        case op::pad: {
            const dims& x = inputs[0].shape;
            if (attrs.begin.size() != x.rank() || attrs.end.size() != x.rank()) {
                throw_op_shape(kind,
                               message("padding needs a before and an after count for each axis of ", x));
            }
            std::vector<std::int64_t> out;
            for (std::size_t axis = 0; axis < x.rank(); ++axis) {
                if (attrs.begin[axis] < 0 || attrs.end[axis] < 0) {
                    throw_op_shape(kind, message("negative padding at axis ", axis));
                }
                out.push_back(x[axis] + attrs.begin[axis] + attrs.end[axis]);
            }
            return {inputs[0].type, dims(out)};
        }
        case op::gather: {
            const dims& table = inputs[0].shape;
            if (is_floating(inputs[1].type) || inputs[1].type == dtype::boolean) {
                throw type_error(
                    message("gather: indices must be integers, got ", dtype_name(inputs[1].type)));
            }
            if (table.rank() == 0) throw_op_shape(kind, "the table must have rank >= 1");
            attrs.axis = normalize_axis(kind, attrs.axis, table.rank(), table);
            const auto axis = static_cast<std::size_t>(attrs.axis);
            std::vector<std::int64_t> out(table.begin(), table.begin() + attrs.axis);
            out.insert(out.end(), inputs[1].shape.begin(), inputs[1].shape.end());
            out.insert(out.end(), table.begin() + attrs.axis + 1, table.end());
            if (out.size() > max_rank) {
                throw_op_shape(kind, message("the result of gathering ", inputs[1].shape, " from ", table,
                                             " along axis ", axis, " exceeds rank ", max_rank));
            }
            return {inputs[0].type, dims(out)};
        }
        case op::scatter_add: {
            if (is_floating(inputs[1].type) || inputs[1].type == dtype::boolean) {
                throw type_error(
                    message("scatter_add: indices must be integers, got ", dtype_name(inputs[1].type)));
            }
            if (attrs.sizes.empty() || attrs.sizes.size() > max_rank) {
                throw_op_shape(kind, message("the table's shape (attribute sizes) must have rank 1 to ",
                                             max_rank, ", got ", attrs.sizes.size(), " extents"));
            }
            for (const std::int64_t extent : attrs.sizes) {
                if (extent < 0)
                    throw_op_shape(kind, message("negative extent ", extent, " in the table's shape"));
            }
            const dims table(attrs.sizes);
            attrs.axis = normalize_axis(kind, attrs.axis, table.rank(), table);
            // The updates are laid out as gather's result: the indices' axes in place of the table's axis.
            std::vector<std::int64_t> expected(table.begin(), table.begin() + attrs.axis);
            expected.insert(expected.end(), inputs[1].shape.begin(), inputs[1].shape.end());
            expected.insert(expected.end(), table.begin() + attrs.axis + 1, table.end());
            if (expected.size() > max_rank || !(dims(expected) == inputs[0].shape)) {
                throw_op_shape(kind,
                               message("the updates ", inputs[0].shape, " must be laid out as gathering ",
                                       inputs[1].shape, " from the table ", table, " along axis ", attrs.axis,
                                       " would give"));
            }
            return {inputs[0].type, table};
        }
        case op::gather_elements: {
            const dims& data = inputs[0].shape;
            const dims& indices = inputs[1].shape;
            if (is_floating(inputs[1].type) || inputs[1].type == dtype::boolean) {
                throw type_error(
                    message("gather_elements: indices must be integers, got ", dtype_name(inputs[1].type)));
            }
            if (data.rank() == 0) throw_op_shape(kind, "the data must have rank >= 1");
            attrs.axis = normalize_axis(kind, attrs.axis, data.rank(), data);
            bool fits = indices.rank() == data.rank();
            for (std::size_t i = 0; fits && i < data.rank(); ++i)
                fits = static_cast<std::int64_t>(i) == attrs.axis || indices[i] <= data[i];
            if (!fits) {
                throw_op_shape(kind, message("the indices ", indices, " must have the rank of the data ",
                                             data, " and extents no larger off axis ", attrs.axis));
            }
            return {inputs[0].type, indices};
        }
        case op::attention:
            return infer_attention(kind, inputs);
        case op::rotary: {
            const dims& x = inputs[0].shape;
            if (x.rank() < 2) throw_op_shape(kind, message("x must be [..., S, D], got ", x));
            const std::int64_t s = x[x.rank() - 2];
            const std::int64_t d = x[x.rank() - 1];
            for (std::size_t i = 1; i < 3; ++i) {
                const dims& table = inputs[i].shape;
                if (table.rank() != 2 || table[0] != s || 2 * table[1] > d || !(table == inputs[1].shape)) {
                    throw_op_shape(kind,
                                   message("cos ", inputs[1].shape, " and sin ", inputs[2].shape,
                                           " must both be [", s, ", R / 2] with R <= ", d, " for x ", x));
                }
            }
            return inputs[0];
        }
        case op::dequantize_int8: {
            const dims& q = inputs[0].shape;
            if (inputs[0].type != dtype::i8) {
                throw type_error(
                    message("dequantize_int8: the values must be i8, got ", dtype_name(inputs[0].type)));
            }
            if (q.rank() == 0) throw_op_shape(kind, "the values must have rank >= 1");
            attrs.axis = normalize_axis(kind, attrs.axis, q.rank(), q);
            for (std::size_t i = 1; i < inputs.size(); ++i) {
                require_vector(kind, inputs[i], q[static_cast<std::size_t>(attrs.axis)],
                               i == 1 ? "the scale" : "the zero point");
            }
            require_floating(kind, inputs[1].type, "the scale");
            return {inputs[1].type, q};
        }
        case op::dequantize_lut: {
            const dims& indices = inputs[0].shape;
            const dims& lut = inputs[1].shape;
            if (inputs[0].type != dtype::u8) {
                throw type_error(
                    message("dequantize_lut: the indices must be u8, got ", dtype_name(inputs[0].type)));
            }
            const bool per_channel = lut.rank() == 2;
            const bool groups_fit =
                per_channel && indices.rank() >= 1 && lut[0] >= 1 && indices[0] % lut[0] == 0;
            if (!(lut.rank() == 1 || groups_fit) || lut[lut.rank() - 1] == 0 || lut[lut.rank() - 1] > 256) {
                throw_op_shape(kind, message("the table ", lut, " must be [L] or [G, L] with G dividing ",
                                             indices.rank() ? indices[0] : 0,
                                             " and 1 <= L <= 256 for indices ", indices));
            }
            require_floating(kind, inputs[1].type, "the table");
            return {inputs[1].type, indices};
        }
        case op::dequantize_ggml: {
            const dims& blocks = inputs[0].shape;
            if (inputs[0].type != dtype::u8) {
                throw type_error(
                    message("dequantize_ggml: the blocks must be u8, got ", dtype_name(inputs[0].type)));
            }
            const std::optional<ggml_type_layout> layout = ggml_layout(attrs.ggml_type);
            if (!layout || !layout->dequantizes) {
                throw unsupported_error(message("dequantize_ggml: ggml type ", attrs.ggml_type,
                                                layout ? message(" (", layout->name, ")") : std::string(),
                                                " has no dequantiser"));
            }
            if (blocks.rank() == 0 || blocks[blocks.rank() - 1] % layout->bytes != 0) {
                throw_op_shape(kind, message("the blocks ", blocks, " are not rows of whole ", layout->name,
                                             " blocks (", layout->bytes, " bytes each)"));
            }
            std::vector<std::int64_t> values(blocks.begin(), blocks.end());
            values.back() = values.back() / layout->bytes * layout->block;
            return {dtype::f32, dims(values)};
        }
    }
    throw error(message("infer: unknown op ", static_cast<int>(kind)));
}

}  // namespace anvil
