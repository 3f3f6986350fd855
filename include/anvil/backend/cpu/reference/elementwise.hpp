// anvil: the reference elementwise kernels — the scalar definition of every unary, binary and ternary op
// (shared with the fast path, which vectorises around them), numpy-broadcasting loops, casts, and the
// fused_elementwise node that runs a chain of those ops per element.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <type_traits>
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
template <class T>
[[nodiscard]] T round_half_even(T x) {
    const T away = std::round(x);  // ties away from zero
    if (std::fabs(x - std::trunc(x)) != T(0.5)) return away;
    return T(2) * std::round(x * T(0.5));  // x * 0.5 is exact: a tie is at least 0.5 in magnitude
}

// One unary op on one value, as PyTorch defines it in float32 (T = float) or float64 (T = double). alpha and
// beta are clamp's min and max (ignored by the other ops). cast needs its target type: use cast_value.
template <class T>
[[nodiscard]] T apply_unary(op kind, T x, std::type_identity_t<T> alpha = T(0),
                            std::type_identity_t<T> beta = T(0)) {
    switch (kind) {
        case op::relu:
            return x > T(0.0) || std::isnan(x) ? x : T(0.0);  // NaN passes, as in torch.relu
        case op::gelu:
            return T(0.5) * x * (T(1.0) + std::erf(x * T(0.70710678118654752)));
        case op::gelu_tanh: {
            const T inner = T(0.79788456080286536) * (x + T(0.044715) * x * x * x);  // sqrt(2 / pi)
            return T(0.5) * x * (T(1.0) + std::tanh(inner));
        }
        case op::quick_gelu:
            return x / (T(1.0) + std::exp(-T(1.702) * x));
        case op::silu:
            return x / (T(1.0) + std::exp(-x));
        case op::sigmoid:
            return T(1.0) / (T(1.0) + std::exp(-x));
        case op::tanh:
            return std::tanh(x);
        case op::exp:
            return std::exp(x);
        case op::log:
            return std::log(x);
        case op::sqrt:
            return std::sqrt(x);
        case op::rsqrt:
            return T(1.0) / std::sqrt(x);
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
            return x > T(0.0) ? T(1.0) : x < T(0.0) ? -T(1.0) : x == T(0.0) ? T(0.0) : x;
        case op::sin:
            return std::sin(x);
        case op::cos:
            return std::cos(x);
        case op::logical_not:
            return x != T(0.0) ? T(0.0) : T(1.0);  // NaN counts as true, as bool(NaN) does in torch
        case op::clamp: {
            // torch.clamp: min first, then max (so min > max gives max); NaN passes through both comparisons.
            const T low = x < alpha ? alpha : x;
            return low > beta ? beta : low;
        }
        default:
            break;
    }
    throw error(message("apply_unary: ", op_name(kind),
                        kind == op::cast ? " needs its target type (use cast_value)" : " is not a unary op"));
}

// x as a float from which one more rounding to a narrower format (f16, bf16, fp8: at most 11 significant
// bits, against f32's 24) gives x correctly rounded: x rounded toward zero to a float, with the last bit set
// when that dropped anything ("round to odd"), so the second rounding sees whether x was above, at or below
// a tie. Rounding a double to float to nearest first and then again would round twice: 1 + 2^-11 + 2^-40
// would become the tie 1 + 2^-11 and then 1 in f16, where the nearest f16 is 1 + 2^-10.
[[nodiscard]] inline float narrowed_to_round_again(double x) {
    float nearest = static_cast<float>(x);
    if (std::isnan(x) || static_cast<double>(nearest) == x) return nearest;  // exact (or infinite)
    if (std::fabs(static_cast<double>(nearest)) > std::fabs(x))
        nearest = std::nextafter(nearest, 0.0f);  // now x truncated (the largest float past a huge x)
    std::uint32_t bits = 0;
    std::memcpy(&bits, &nearest, sizeof bits);
    bits |= 1u;
    std::memcpy(&nearest, &bits, sizeof bits);
    return nearest;
}
[[nodiscard]] inline float narrowed_to_round_again(float x) {
    return x;
}

// x converted to `to` and read back as T: the value a tensor of that type would hold.
//   f16, bf16, fp8: round to nearest even with each format's overflow (f16, bf16, e5m2: infinity; e4m3fn:
//     NaN past 464, as PyTorch), rounding once from a double too; f32: unchanged for a float, rounded to
//     nearest even from a double; f64: unchanged.
//   integers: truncate toward zero, then wrap modulo 2^bits into the type's range (torch on x86 wraps the
//     same way for 8- and 16-bit types and in-range values); NaN and infinities give 0 (torch gives 0 for
//     8- and 16-bit types and the lowest value for 32- and 64-bit ones). Results past 2^24 are not exact in
//     f32, past 2^53 not in f64.
//   boolean: x != 0 gives 1 (NaN too, as in torch).
template <class T>
[[nodiscard]] T cast_value(T x, dtype to) {
    const auto wrap = [x](int bits, bool is_signed_type) {
        if (!std::isfinite(x)) return T(0);
        const double modulus = std::ldexp(1.0, bits);
        const double lowest = is_signed_type ? -modulus / 2 : 0.0;
        const double whole = std::trunc(static_cast<double>(x));
        if (whole >= lowest && whole < lowest + modulus) return static_cast<T>(whole);
        // Out of range: fmod is exact, and so is the shift back (whole is coarse where it is large).
        double wrapped = std::fmod(whole - lowest, modulus);
        if (wrapped < 0) wrapped += modulus;
        return static_cast<T>(wrapped + lowest);
    };
    switch (to) {
        case dtype::f64:
            return x;
        case dtype::f32:
            return static_cast<T>(static_cast<float>(x));
        case dtype::f16:
            return static_cast<T>(static_cast<float>(half(narrowed_to_round_again(x))));
        case dtype::bf16:
            return static_cast<T>(static_cast<float>(bfloat16(narrowed_to_round_again(x))));
        case dtype::f8_e4m3:
            return static_cast<T>(
                float8_e4m3_bits_to_float(float_to_float8_e4m3_bits(narrowed_to_round_again(x))));
        case dtype::f8_e5m2:
            return static_cast<T>(
                float8_e5m2_bits_to_float(float_to_float8_e5m2_bits(narrowed_to_round_again(x))));
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
            return x != T(0) ? T(1) : T(0);
    }
    throw error(message("cast_value: unknown dtype ", static_cast<int>(to)));
}

// One binary op, as PyTorch defines it in float32 or float64; maximum and minimum propagate NaN like
// torch.maximum. Comparisons and logical ops give 1 for true and 0 for false (how the CPU holds
// dtype::boolean).
template <class T>
[[nodiscard]] T apply_binary(op kind, T a, std::type_identity_t<T> b) {
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
            return std::isnan(a) || std::isnan(b) ? std::numeric_limits<T>::quiet_NaN() : (a < b ? b : a);
        case op::minimum:
            return std::isnan(a) || std::isnan(b) ? std::numeric_limits<T>::quiet_NaN() : (b < a ? b : a);
        // A comparison with NaN is false, as in IEEE 754; logical ops count any nonzero value as true.
        case op::equal:
            return a == b ? T(1.0) : T(0.0);
        case op::less:
            return a < b ? T(1.0) : T(0.0);
        case op::less_equal:
            return a <= b ? T(1.0) : T(0.0);
        case op::greater:
            return a > b ? T(1.0) : T(0.0);
        case op::greater_equal:
            return a >= b ? T(1.0) : T(0.0);
        case op::logical_and:
            return a != T(0.0) && b != T(0.0) ? T(1.0) : T(0.0);
        case op::logical_or:
            return a != T(0.0) || b != T(0.0) ? T(1.0) : T(0.0);
        case op::logical_xor:
            return (a != T(0.0)) != (b != T(0.0)) ? T(1.0) : T(0.0);
        default:
            break;
    }
    throw error(message("apply_binary: ", op_name(kind), " is not a binary op"));
}

// where(condition != 0, a, b); NaN counts as true, as bool(NaN) does in torch.
template <class T>
[[nodiscard]] T apply_ternary(op kind, T condition, std::type_identity_t<T> a, std::type_identity_t<T> b) {
    if (kind != op::where) throw error(message("apply_ternary: ", op_name(kind), " is not a ternary op"));
    return condition != T(0.0) ? a : b;
}

namespace reference {

template <class T>
void unary(op kind, operand_span<T> x, std::type_identity_t<T> alpha, std::type_identity_t<T> beta,
           basic_tensor_span<T> out) {
    const std::int64_t count = count_of(out.shape);
    for (std::int64_t i = 0; i < count; ++i)
        out.data[i] = apply_unary(kind, x.data[i], alpha, beta);
}

template <class T>
void cast(operand_span<T> x, dtype to, basic_tensor_span<T> out) {
    const std::int64_t count = count_of(out.shape);
    for (std::int64_t i = 0; i < count; ++i)
        out.data[i] = cast_value(x.data[i], to);
}

// Calls body(output offset, operand offsets) for every element of `out_shape`, each operand read with
// numpy broadcasting.
template <std::size_t Operands, class T = float, class Body>
void for_each_broadcast(const std::array<basic_const_tensor_span<T>, Operands>& operands,
                        const dims& out_shape, Body body) {
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

template <class T>
void binary(op kind, operand_span<T> a, operand_span<T> b, basic_tensor_span<T> out) {
    for_each_broadcast<2, T>({a, b}, out.shape, [&](std::int64_t o, const std::array<std::int64_t, 2>& at) {
        out.data[o] = apply_binary(kind, a.data[at[0]], b.data[at[1]]);
    });
}

template <class T>
void where(operand_span<T> condition, operand_span<T> a, operand_span<T> b, basic_tensor_span<T> out) {
    for_each_broadcast<3, T>(
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
template <class T>
void fused_elementwise(std::span<const fused_step> steps, std::span<const basic_const_tensor_span<T>> inputs,
                       basic_tensor_span<T> out) {
    check_fused_steps(steps, inputs.size());
    if (count_of(out.shape) == 0) return;
    std::vector<stride_array> strides;
    for (const auto& input : inputs)
        strides.push_back(broadcast_strides(input.shape, out.shape));
    std::vector<T> values(inputs.size() + steps.size());
    index_array index{};
    std::int64_t out_offset = 0;
    do {
        for (std::size_t i = 0; i < inputs.size(); ++i) {
            values[i] = inputs[i].data[offset_of(index, strides[i], out.shape.rank())];
        }
        for (std::size_t s = 0; s < steps.size(); ++s) {
            const fused_step& step = steps[s];
            const auto operand = [&](std::size_t i) { return values[step.operands[i]]; };
            T result = 0;
            switch (step_arity(step.kind)) {
                case 1:
                    result = apply_unary<T>(step.kind, operand(0), static_cast<T>(step.alpha),
                                            static_cast<T>(step.beta));
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
