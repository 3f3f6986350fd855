// anvil: the CPU backend's reference evaluator — one plain kernel per graph op, chosen by an exhaustive
// switch (no default, so -Wswitch flags an op without a kernel). These kernels define each op's semantics;
// every fast kernel is tested against them.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "anvil/backend/cpu/reference/attention.hpp"
#include "anvil/backend/cpu/reference/convolution.hpp"
#include "anvil/backend/cpu/reference/data_movement.hpp"
#include "anvil/backend/cpu/reference/dequantize.hpp"
#include "anvil/backend/cpu/reference/elementwise.hpp"
#include "anvil/backend/cpu/reference/linear_algebra.hpp"
#include "anvil/backend/cpu/reference/normalization.hpp"
#include "anvil/backend/cpu/reference/reduction.hpp"
#include "anvil/backend/cpu/tensor_span.hpp"
#include "anvil/core/error.hpp"
#include "anvil/graph/graph.hpp"
#include "anvil/graph/op.hpp"
#include "anvil/graph/shape_inference.hpp"

namespace anvil::detail::cpu {

namespace reference {

// The type an operand slot must have for shape inference; the CPU holds every value as f32 (or f64), so only
// the slots whose type inference checks need another.
[[nodiscard]] inline dtype operand_type_for_inference(op kind, std::size_t slot) {
    if ((kind == op::gather || kind == op::gather_elements || kind == op::scatter_add) && slot == 1)
        return dtype::i64;
    if (kind == op::dequantize_int8 && slot == 0) return dtype::i8;
    if ((kind == op::dequantize_lut || kind == op::dequantize_ggml) && slot == 0) return dtype::u8;
    if (kind == op::logical_and || kind == op::logical_or || kind == op::logical_xor ||
        kind == op::logical_not)
        return dtype::boolean;
    return dtype::f32;
}

// The node's attributes in canonical form, after checking that the operands' shapes produce the node's
// result shape and that the output is sized for it: a node built by hand or rewritten by a pass is checked
// here rather than read out of bounds.
template <class T>
[[nodiscard]] attributes checked_attributes(const node& n, std::span<const basic_const_tensor_span<T>> inputs,
                                            const basic_tensor_span<T>& output) {
    if (n.kind == op::input || n.kind == op::constant) {
        throw error(message("evaluate_reference: ", op_name(n.kind), " nodes hold no computation; bind ",
                            n.kind == op::input ? "the input" : "the constant", " '", n.name, "' instead"));
    }
    if (inputs.size() != n.inputs.size()) {
        throw error(message("evaluate_reference: ", op_name(n.kind), " has ", n.inputs.size(),
                            " operands, got ", inputs.size(), " tensors"));
    }
    std::vector<value_type> types;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        types.push_back({operand_type_for_inference(n.kind, i), inputs[i].shape});
    }
    attributes attrs = n.attrs;
    const value_type inferred = infer(n.kind, attrs, types);
    if (!(inferred.shape == n.result.shape)) {
        throw shape_error(message("evaluate_reference: ", op_name(n.kind), " on ", describe_operands(types),
                                  " gives ", inferred.shape, ", but the node's result is ", n.result.shape));
    }
    if (!(output.shape == n.result.shape)) {
        throw shape_error(message("evaluate_reference: ", op_name(n.kind), " produces ", n.result.shape,
                                  ", but the output tensor is ", output.shape));
    }
    return attrs;
}

}  // namespace reference

// Runs node n with the reference kernels, in float (every program) or double (a float64_program).
// inputs: one per operand in order; output sized n.result.shape. op::input and op::constant are not computed
// here (throws anvil::error if asked).
template <class T>
void evaluate_reference_as(const node& n, std::span<const basic_const_tensor_span<T>> inputs,
                           basic_tensor_span<T> output) {
    namespace ref = reference;
    const attributes attrs = ref::checked_attributes<T>(n, inputs, output);
    const auto optional_input = [&](std::size_t slot) -> std::optional<basic_const_tensor_span<T>> {
        if (slot < inputs.size()) return inputs[slot];
        return std::nullopt;
    };
    switch (n.kind) {
        case op::input:
        case op::constant:
            return;  // checked_attributes has thrown
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
        case op::sign:
        case op::sin:
        case op::cos:
        case op::logical_not:
        case op::clamp:
            return ref::unary(n.kind, inputs[0], attrs.min, attrs.max, output);
        case op::cast:
            return ref::cast(inputs[0], attrs.to, output);
        case op::add:
        case op::sub:
        case op::mul:
        case op::div:
        case op::pow:
        case op::maximum:
        case op::minimum:
        case op::equal:
        case op::less:
        case op::less_equal:
        case op::greater:
        case op::greater_equal:
        case op::logical_and:
        case op::logical_or:
        case op::logical_xor:
            return ref::binary(n.kind, inputs[0], inputs[1], output);
        case op::where:
            return ref::where(inputs[0], inputs[1], inputs[2], output);
        case op::fused_elementwise:
            return ref::fused_elementwise<T>(attrs.steps, inputs, output);
        case op::matmul:
            return ref::matmul(inputs[0], inputs[1], attrs.transpose_a, attrs.transpose_b, output);
        case op::linear:
            return ref::linear(inputs[0], inputs[1], optional_input(2), output);
        case op::conv2d:
            return ref::conv2d(inputs[0], inputs[1], optional_input(2), attrs, output);
        case op::max_pool2d:
            return ref::max_pool2d(inputs[0], attrs, output);
        case op::avg_pool2d:
            return ref::avg_pool2d(inputs[0], attrs, output);
        case op::upsample_nearest:
            return ref::upsample_nearest(inputs[0], output);
        case op::upsample_bilinear:
            return ref::upsample_bilinear(inputs[0], attrs.align_corners, output);
        case op::layer_norm:
            return ref::layer_norm(inputs[0], optional_input(1), optional_input(2), attrs.epsilon, output);
        case op::rms_norm:
            return ref::rms_norm(inputs[0], optional_input(1), attrs.epsilon, output);
        case op::group_norm:
            return ref::group_norm(inputs[0], optional_input(1), optional_input(2), attrs.groups,
                                   attrs.epsilon, output);
        case op::batch_norm:
            return ref::batch_norm(inputs[0], inputs[1], inputs[2], optional_input(3), optional_input(4),
                                   attrs.epsilon, output);
        case op::softmax:
            return ref::softmax(inputs[0], optional_input(1), attrs.axis, output);
        case op::reduce_sum:
            return ref::reduce_sum(inputs[0], attrs.axes, output);
        case op::reduce_mean:
            return ref::reduce_mean(inputs[0], attrs.axes, output);
        case op::reduce_max:
            return ref::reduce_max(inputs[0], attrs.axes, output);
        case op::reduce_min:
            return ref::reduce_min(inputs[0], attrs.axes, output);
        case op::reduce_prod:
            return ref::reduce_prod(inputs[0], attrs.axes, output);
        case op::argmax:
            return ref::argmax(inputs[0], attrs.axis, output);
        case op::cumsum:
            return ref::cumsum(inputs[0], attrs.axis, attrs.exclusive, attrs.reverse, output);
        case op::reshape:
            return ref::reshape(inputs[0], output);
        case op::permute:
            return ref::permute(inputs[0], attrs.axes, output);
        case op::concat:
            return ref::concat<T>(inputs, attrs.axis, output);
        case op::slice:
            return ref::slice(inputs[0], attrs.begin, attrs.step, output);
        case op::pad:
            return ref::pad(inputs[0], attrs.begin, attrs.value, output);
        case op::gather:
            return ref::gather(inputs[0], inputs[1], attrs.axis, output);
        case op::gather_elements:
            return ref::gather_elements(inputs[0], inputs[1], attrs.axis, output);
        case op::scatter_add:
            return ref::scatter_add(inputs[0], inputs[1], attrs.axis, output);
        case op::attention:
            return ref::attention(inputs[0], inputs[1], inputs[2], optional_input(3), attrs.causal,
                                  attrs.scale, output);
        case op::rotary:
            return ref::rotary(inputs[0], inputs[1], inputs[2], attrs.interleaved, output);
        case op::dequantize_int8:
            return ref::dequantize_int8(inputs[0], inputs[1], optional_input(2), attrs.axis, output);
        case op::dequantize_lut:
            return ref::dequantize_lut(inputs[0], inputs[1], output);
        case op::dequantize_ggml:
            return ref::dequantize_ggml(inputs[0], attrs.ggml_type, output);
    }
    throw error(message("evaluate_reference: unknown op ", static_cast<int>(n.kind)));
}

inline void evaluate_reference(const node& n, std::span<const const_tensor_span> inputs, tensor_span output) {
    evaluate_reference_as<float>(n, inputs, output);
}

inline void evaluate_reference(const node& n, std::span<const basic_const_tensor_span<double>> inputs,
                               basic_tensor_span<double> output) {
    evaluate_reference_as<double>(n, inputs, output);
}

}  // namespace anvil::detail::cpu
