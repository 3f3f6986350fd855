// anvil: the reference elementwise kernels — the scalar definition of every unary, binary and ternary op
// (shared with the fast path, which vectorises around them), numpy-broadcasting loops, casts, and the
// fused_elementwise node that runs a chain of those ops per element.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <vector>

#include "anvil/backend/cpu/tensor_span.hpp"
#include "anvil/core/bfloat16.hpp"
#include "anvil/core/dtype.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/float8.hpp"
#include "anvil/core/half.hpp"
#include "anvil/graph/op.hpp"
#include "anvil/graph/shape_inference.hpp"

namespace anvil::detail::cpu {

// x rounded to the nearest integer, ties to even (numpy's rint, ONNX's Round), whatever the floating-point
// environment's rounding mode: std::nearbyint would follow that mode.
[[nodiscard]] inline float round_half_even(float x) {
    const float away = std::round(x);  // ties away from zero
    if (std::fabs(x - std::trunc(x)) != 0.5f) return away;
    return 2.0f * std::round(x * 0.5f);  // x * 0.5 is exact: a tie is at least 0.5 in magnitude
}

// One unary op on one value, as PyTorch defines it in float32. alpha and beta are clamp's min and max
// (ignored by the other ops). cast needs its target type: use cast_value.
[[nodiscard]] inline float apply_unary(op kind, float x, float alpha = 0.0f, float beta = 0.0f) {
    switch (kind) {
        case op::relu:
            return x > 0.0f || std::isnan(x) ? x : 0.0f;  // NaN passes, as in torch.relu
        case op::gelu:
            return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
        case op::gelu_tanh: {
            const float inner = 0.79788456080286536f * (x + 0.044715f * x * x * x);  // sqrt(2 / pi)
            return 0.5f * x * (1.0f + std::tanh(inner));
        }
        case op::quick_gelu:
            return x / (1.0f + std::exp(-1.702f * x));
        case op::silu:
            return x / (1.0f + std::exp(-x));
        case op::sigmoid:
            return 1.0f / (1.0f + std::exp(-x));
        case op::tanh:
            return std::tanh(x);
        case op::exp:
            return std::exp(x);
        case op::log:
            return std::log(x);
        case op::sqrt:
            return std::sqrt(x);
        case op::rsqrt:
            return 1.0f / std::sqrt(x);
        case op::abs:
            return std::fabs(x);
        case op::neg:
            return -x;
        case op::erf:
            return std::erf(x);
        case op::floor:
            return std::floor(x);
        case op::ceil:
            return std::ceil(x);
        case op::round:
            return round_half_even(x);
        case op::sign:
            // numpy's: both zeros give +0, NaN stays NaN.
            return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : x == 0.0f ? 0.0f : x;
        case op::sin:
            return std::sin(x);
        case op::cos:
            return std::cos(x);
        case op::logical_not:
            return x != 0.0f ? 0.0f : 1.0f;  // NaN counts as true, as bool(NaN) does in torch
        case op::clamp: {
            // torch.clamp: min first, then max (so min > max gives max); NaN passes through both comparisons.
            const float low = x < alpha ? alpha : x;
            return low > beta ? beta : low;
        }
        default:
            break;
    }
    throw error(message("apply_unary: ", op_name(kind),
                        kind == op::cast ? " needs its target type (use cast_value)" : " is not a unary op"));
}

// x converted to `to` and read back as float: the value a tensor of that type would hold.
//   f16, bf16, fp8: round to nearest even with each format's overflow (f16, bf16, e5m2: infinity; e4m3fn:
//     NaN past 464, as PyTorch); f32 and f64: unchanged (the CPU backend computes in f32).
//   integers: truncate toward zero, then wrap modulo 2^bits into the type's range (torch on x86 wraps the
//     same way for 8- and 16-bit types and in-range values); NaN and infinities give 0 (torch gives 0 for
//     8- and 16-bit types and the lowest value for 32- and 64-bit ones). Results past 2^24 are not exact in
//     f32.
//   boolean: x != 0 gives 1 (NaN too, as in torch).
[[nodiscard]] inline float cast_value(float x, dtype to) {
    const auto wrap = [x](int bits, bool is_signed_type) {
        if (!std::isfinite(x)) return 0.0f;
        const double modulus = std::ldexp(1.0, bits);
        const double lowest = is_signed_type ? -modulus / 2 : 0.0;
        const double whole = std::trunc(static_cast<double>(x));
        if (whole >= lowest && whole < lowest + modulus) return static_cast<float>(whole);
        // Out of range: fmod is exact, and so is the shift back (whole is a float, coarse where it is large).
        double wrapped = std::fmod(whole - lowest, modulus);
        if (wrapped < 0) wrapped += modulus;
        return static_cast<float>(wrapped + lowest);
    };
    switch (to) {
        case dtype::f64:
        case dtype::f32:
            return x;
        case dtype::f16:
            return static_cast<float>(half(x));
        case dtype::bf16:
            return static_cast<float>(bfloat16(x));
        case dtype::f8_e4m3:
            return float8_e4m3_bits_to_float(float_to_float8_e4m3_bits(x));
        case dtype::f8_e5m2:
            return float8_e5m2_bits_to_float(float_to_float8_e5m2_bits(x));
        case dtype::i64:
            return wrap(64, true);
        case dtype::i32:
            return wrap(32, true);
        case dtype::i16:
            return wrap(16, true);
        case dtype::i8:
            return wrap(8, true);
        case dtype::u64:
            return wrap(64, false);
        case dtype::u32:
            return wrap(32, false);
        case dtype::u16:
            return wrap(16, false);
        case dtype::u8:
            return wrap(8, false);
        case dtype::boolean:
            return x != 0.0f ? 1.0f : 0.0f;
    }
    throw error(message("cast_value: unknown dtype ", static_cast<int>(to)));
}

// One binary op, as PyTorch defines it in float32; maximum and minimum propagate NaN like torch.maximum.
// Comparisons and logical ops give 1 for true and 0 for false (how the CPU holds dtype::boolean).
[[nodiscard]] inline float apply_binary(op kind, float a, float b) {
    switch (kind) {
        case op::add:
            return a + b;
        case op::sub:
            return a - b;
        case op::mul:
            return a * b;
        case op::div:
            return a / b;
        case op::pow:
            return std::pow(a, b);
        case op::maximum:
            return std::isnan(a) || std::isnan(b) ? std::numeric_limits<float>::quiet_NaN() : (a < b ? b : a);
        case op::minimum:
            return std::isnan(a) || std::isnan(b) ? std::numeric_limits<float>::quiet_NaN() : (b < a ? b : a);
        // A comparison with NaN is false, as in IEEE 754; logical ops count any nonzero value as true.
        case op::equal:
            return a == b ? 1.0f : 0.0f;
        case op::less:
            return a < b ? 1.0f : 0.0f;
        case op::less_equal:
            return a <= b ? 1.0f : 0.0f;
        case op::greater:
            return a > b ? 1.0f : 0.0f;
        case op::greater_equal:
            return a >= b ? 1.0f : 0.0f;
        case op::logical_and:
            return a != 0.0f && b != 0.0f ? 1.0f : 0.0f;
        case op::logical_or:
            return a != 0.0f || b != 0.0f ? 1.0f : 0.0f;
        case op::logical_xor:
            return (a != 0.0f) != (b != 0.0f) ? 1.0f : 0.0f;
        default:
            break;
    }
    throw error(message("apply_binary: ", op_name(kind), " is not a binary op"));
}

// where(condition != 0, a, b); NaN counts as true, as bool(NaN) does in torch.
[[nodiscard]] inline float apply_ternary(op kind, float condition, float a, float b) {
    if (kind != op::where) throw error(message("apply_ternary: ", op_name(kind), " is not a ternary op"));
    return condition != 0.0f ? a : b;
}

namespace reference {

inline void unary(op kind, const_tensor_span x, float alpha, float beta, tensor_span out) {
    const std::int64_t count = count_of(out.shape);
    for (std::int64_t i = 0; i < count; ++i)
        out.data[i] = apply_unary(kind, x.data[i], alpha, beta);
}

inline void cast(const_tensor_span x, dtype to, tensor_span out) {
    const std::int64_t count = count_of(out.shape);
    for (std::int64_t i = 0; i < count; ++i)
        out.data[i] = cast_value(x.data[i], to);
}

// Calls body(output offset, operand offsets) for every element of `out_shape`, each operand read with
// numpy broadcasting.
template <std::size_t Operands, class Body>
void for_each_broadcast(const std::array<const_tensor_span, Operands>& operands, const dims& out_shape,
                        Body body) {
    if (count_of(out_shape) == 0) return;
    std::array<stride_array, Operands> strides{};
    for (std::size_t i = 0; i < Operands; ++i)
        strides[i] = broadcast_strides(operands[i].shape, out_shape);
    index_array index{};
    std::int64_t out_offset = 0;
    do {
        std::array<std::int64_t, Operands> offsets{};
        for (std::size_t i = 0; i < Operands; ++i)
            offsets[i] = offset_of(index, strides[i], out_shape.rank());
        body(out_offset++, offsets);
    } while (next_index(index, out_shape));
}

inline void binary(op kind, const_tensor_span a, const_tensor_span b, tensor_span out) {
    for_each_broadcast<2>({a, b}, out.shape, [&](std::int64_t o, const std::array<std::int64_t, 2>& at) {
        out.data[o] = apply_binary(kind, a.data[at[0]], b.data[at[1]]);
    });
}

inline void where(const_tensor_span condition, const_tensor_span a, const_tensor_span b, tensor_span out) {
    for_each_broadcast<3>(
        {condition, a, b}, out.shape, [&](std::int64_t o, const std::array<std::int64_t, 3>& at) {
            out.data[o] = apply_ternary(op::where, condition.data[at[0]], a.data[at[1]], b.data[at[2]]);
        });
}

// How many operands a fused step reads.
[[nodiscard]] inline std::size_t step_arity(op kind) {
    return anvil::detail::elementwise_arity(kind);
}

// Shared with shape inference, which runs it when a fused node is built.
using anvil::detail::check_fused_steps;

// Runs `steps` per output element; operand index i < inputs.size() reads input i (broadcast to the
// output), a larger one the result of step i - inputs.size(). The last step's result is the output.
inline void fused_elementwise(std::span<const fused_step> steps, std::span<const const_tensor_span> inputs,
                              tensor_span out) {
    check_fused_steps(steps, inputs.size());
    if (count_of(out.shape) == 0) return;
    std::vector<stride_array> strides;
    for (const auto& input : inputs)
        strides.push_back(broadcast_strides(input.shape, out.shape));
    std::vector<float> values(inputs.size() + steps.size());
    index_array index{};
    std::int64_t out_offset = 0;
    do {
        for (std::size_t i = 0; i < inputs.size(); ++i) {
            values[i] = inputs[i].data[offset_of(index, strides[i], out.shape.rank())];
        }
        for (std::size_t s = 0; s < steps.size(); ++s) {
            const fused_step& step = steps[s];
            const auto operand = [&](std::size_t i) { return values[step.operands[i]]; };
            float result = 0.0f;
            switch (step_arity(step.kind)) {
                case 1:
                    result = apply_unary(step.kind, operand(0), step.alpha, step.beta);
                    break;
                case 2:
                    result = apply_binary(step.kind, operand(0), operand(1));
                    break;
                default:
                    result = apply_ternary(step.kind, operand(0), operand(1), operand(2));
                    break;
            }
            values[inputs.size() + s] = result;
        }
        out.data[out_offset++] = values.back();
    } while (next_index(index, out.shape));
}

}  // namespace reference
}  // namespace anvil::detail::cpu
