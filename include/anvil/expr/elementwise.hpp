// anvil: elementwise ops on tensors: activations, rounding, cast, arithmetic with numpy broadcasting
// (operators and scalar operands: `x * 0.5f`, `2.0f - x`), maximum/minimum/pow, clamp, comparisons and logic
// (bool tensors), and where. Static shapes broadcast at compile time (a mismatch names the op and both
// shapes); operands of different element types are a compile error.
#pragma once

#include <concepts>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "anvil/expr/tensor.hpp"

namespace anvil {

// A C++ number used as an operand: a constant of the tensor's element type.
template <class Number>
concept scalar_number = std::is_arithmetic_v<Number> && !std::is_same_v<Number, bool>;

enum class gelu_approximation : std::uint8_t {
    none,  // x * Phi(x), with erf
    tanh,  // the tanh approximation ("gelu_new", "gelu_pytorch_tanh")
};

namespace detail {

template <class A, class B>
struct same_element_type : std::is_same<A, B> {};

template <class T>
struct floating_element : std::bool_constant<is_floating(dtype_or_f32<T>())> {};

// graph::scalar makes constants of these types; a fractional number needs a floating-point tensor.
template <class T, class Number>
struct scalar_operand_fits {
    static constexpr dtype type = dtype_or_f32<T>();
    static constexpr bool value = type == dtype::f64 || type == dtype::f32 || type == dtype::f16 ||
                                  type == dtype::bf16 ||
                                  ((type == dtype::i32 || type == dtype::i64) && std::is_integral_v<Number>);
};

template <auto Op, class A, class B>
constexpr void require_same_element_type() noexcept {
    static_assert(
        operand_rule<Op, same_element_type, A, B>::holds,
        "anvil: the operands' element types differ; operand_rule<op, same_element_type, A, B> names the "
        "op and both types (convert one with anvil::cast<T>(x))");
}

template <auto Op, class T>
constexpr void require_floating_element() noexcept {
    static_assert(
        operand_rule<Op, floating_element, T>::holds,
        "anvil: this op needs a floating-point tensor (f32, f16, bf16, f64); operand_rule<op, "
        "floating_element, T> names the op and the element type (convert with anvil::cast<float>(x))");
}

// The static result of broadcasting two operands: any_shape unless both shapes are static and broadcast.
// The check itself (require_elementwise_shapes) runs in the op's body, so that a failure is one diagnostic.
template <class A, class B>
struct broadcast_result {
    using type = any_shape;
};
template <std::int64_t... ExtentsA, std::int64_t... ExtentsB>
struct broadcast_result<shape<ExtentsA...>, shape<ExtentsB...>> {
    using a = shape<ExtentsA...>;
    using b = shape<ExtentsB...>;
    using type = typename std::conditional_t<broadcastable<a, b>::value, static_broadcast<a, b>,
                                             std::type_identity<any_shape>>::type;
};
template <class A, class B>
using broadcast_result_t = typename broadcast_result<A, B>::type;

template <auto Op, class A, class B>
constexpr void require_elementwise_shapes() noexcept {
    if constexpr (all_shapes_v<A, B>) require_broadcastable<Op, A, B>();
}

template <op Kind, class T, class Shape>
[[nodiscard]] tensor<T, Shape> unary(const tensor<T, Shape>& x, attributes attrs = {}) {
    require_floating_element<Kind, T>();
    return tensor<T, Shape>(apply_op(Kind, {x.value()}, std::move(attrs)));
}

template <op Kind, class TA, class SA, class TB, class SB>
[[nodiscard]] auto binary(const tensor<TA, SA>& a, const tensor<TB, SB>& b) {
    require_same_element_type<Kind, TA, TB>();
    require_elementwise_shapes<Kind, SA, SB>();
    return tensor<TA, broadcast_result_t<SA, SB>>(apply_op(Kind, {a.value(), b.value()}));
}

template <op Kind, class T, class Shape, class Number>
[[nodiscard]] tensor<T, Shape> binary_with_scalar(const tensor<T, Shape>& x, Number number,
                                                  bool scalar_first) {
    static_assert(operand_rule<Kind, scalar_operand_fits, T, Number>::holds,
                  "anvil: a scalar operand becomes a constant of the tensor's element type, which needs a "
                  "floating-point tensor (f32, f16, bf16, f64) or, for an integer scalar, an i32 or i64 one; "
                  "operand_rule<op, scalar_operand_fits, T, Number> names the op and both types");
    const value constant = scalar_like(Kind, x.value(), static_cast<double>(number));
    return tensor<T, Shape>(scalar_first ? apply_op(Kind, {constant, x.value()})
                                         : apply_op(Kind, {x.value(), constant}));
}

}  // namespace detail

// --- one operand (floating-point tensors) ---

template <class T, class S>
[[nodiscard]] tensor<T, S> relu(const tensor<T, S>& x) {
    return detail::unary<op::relu>(x);
}
template <class T, class S>
[[nodiscard]] tensor<T, S> gelu(const tensor<T, S>& x,
                                gelu_approximation approximation = gelu_approximation::none) {
    if (approximation == gelu_approximation::tanh) return detail::unary<op::gelu_tanh>(x);
    return detail::unary<op::gelu>(x);
}
// x * sigmoid(1.702 x), CLIP's activation.
template <class T, class S>
[[nodiscard]] tensor<T, S> quick_gelu(const tensor<T, S>& x) {
    return detail::unary<op::quick_gelu>(x);
}
template <class T, class S>
[[nodiscard]] tensor<T, S> silu(const tensor<T, S>& x) {
    return detail::unary<op::silu>(x);
}
template <class T, class S>
[[nodiscard]] tensor<T, S> sigmoid(const tensor<T, S>& x) {
    return detail::unary<op::sigmoid>(x);
}
template <class T, class S>
[[nodiscard]] tensor<T, S> tanh(const tensor<T, S>& x) {
    return detail::unary<op::tanh>(x);
}
template <class T, class S>
[[nodiscard]] tensor<T, S> exp(const tensor<T, S>& x) {
    return detail::unary<op::exp>(x);
}
template <class T, class S>
[[nodiscard]] tensor<T, S> log(const tensor<T, S>& x) {
    return detail::unary<op::log>(x);
}
template <class T, class S>
[[nodiscard]] tensor<T, S> sqrt(const tensor<T, S>& x) {
    return detail::unary<op::sqrt>(x);
}
template <class T, class S>
[[nodiscard]] tensor<T, S> rsqrt(const tensor<T, S>& x) {
    return detail::unary<op::rsqrt>(x);
}
template <class T, class S>
[[nodiscard]] tensor<T, S> abs(const tensor<T, S>& x) {
    return detail::unary<op::abs>(x);
}
template <class T, class S>
[[nodiscard]] tensor<T, S> operator-(const tensor<T, S>& x) {
    return detail::unary<op::neg>(x);
}
// min(max(x, lo), hi).
template <class T, class S>
[[nodiscard]] tensor<T, S> clamp(const tensor<T, S>& x, double lo, double hi) {
    attributes attrs;
    attrs.min = static_cast<float>(lo);
    attrs.max = static_cast<float>(hi);
    return detail::unary<op::clamp>(x, std::move(attrs));
}

template <class T, class S>
[[nodiscard]] tensor<T, S> erf(const tensor<T, S>& x) {
    return detail::unary<op::erf>(x);
}
template <class T, class S>
[[nodiscard]] tensor<T, S> floor(const tensor<T, S>& x) {
    return detail::unary<op::floor>(x);
}
template <class T, class S>
[[nodiscard]] tensor<T, S> ceil(const tensor<T, S>& x) {
    return detail::unary<op::ceil>(x);
}
// To the nearest integer, ties to even (numpy's rint, ONNX's Round).
template <class T, class S>
[[nodiscard]] tensor<T, S> round(const tensor<T, S>& x) {
    return detail::unary<op::round>(x);
}
// -1, 0 or 1; NaN stays NaN.
template <class T, class S>
[[nodiscard]] tensor<T, S> sign(const tensor<T, S>& x) {
    return detail::unary<op::sign>(x);
}
template <class T, class S>
[[nodiscard]] tensor<T, S> sin(const tensor<T, S>& x) {
    return detail::unary<op::sin>(x);
}
template <class T, class S>
[[nodiscard]] tensor<T, S> cos(const tensor<T, S>& x) {
    return detail::unary<op::cos>(x);
}

// cast<U>(x): the elements converted to element type U.
template <class U, class T, class Shape>
[[nodiscard]] tensor<U, Shape> cast(const tensor<T, Shape>& x) {
    attributes attrs;
    attrs.to = tensor<U, Shape>::element_dtype;
    return tensor<U, Shape>(detail::apply_op(op::cast, {x.value()}, std::move(attrs)));
}

// --- two operands, numpy broadcasting; a C++ number on either side is a scalar constant ---

template <class TA, class SA, class TB, class SB>
[[nodiscard]] auto operator+(const tensor<TA, SA>& a, const tensor<TB, SB>& b) {
    return detail::binary<op::add>(a, b);
}
template <class T, class S, scalar_number N>
[[nodiscard]] tensor<T, S> operator+(const tensor<T, S>& x, N number) {
    return detail::binary_with_scalar<op::add>(x, number, false);
}
template <class T, class S, scalar_number N>
[[nodiscard]] tensor<T, S> operator+(N number, const tensor<T, S>& x) {
    return detail::binary_with_scalar<op::add>(x, number, true);
}

template <class TA, class SA, class TB, class SB>
[[nodiscard]] auto operator-(const tensor<TA, SA>& a, const tensor<TB, SB>& b) {
    return detail::binary<op::sub>(a, b);
}
template <class T, class S, scalar_number N>
[[nodiscard]] tensor<T, S> operator-(const tensor<T, S>& x, N number) {
    return detail::binary_with_scalar<op::sub>(x, number, false);
}
template <class T, class S, scalar_number N>
[[nodiscard]] tensor<T, S> operator-(N number, const tensor<T, S>& x) {
    return detail::binary_with_scalar<op::sub>(x, number, true);
}

template <class TA, class SA, class TB, class SB>
[[nodiscard]] auto operator*(const tensor<TA, SA>& a, const tensor<TB, SB>& b) {
    return detail::binary<op::mul>(a, b);
}
template <class T, class S, scalar_number N>
[[nodiscard]] tensor<T, S> operator*(const tensor<T, S>& x, N number) {
    return detail::binary_with_scalar<op::mul>(x, number, false);
}
template <class T, class S, scalar_number N>
[[nodiscard]] tensor<T, S> operator*(N number, const tensor<T, S>& x) {
    return detail::binary_with_scalar<op::mul>(x, number, true);
}

template <class TA, class SA, class TB, class SB>
[[nodiscard]] auto operator/(const tensor<TA, SA>& a, const tensor<TB, SB>& b) {
    return detail::binary<op::div>(a, b);
}
template <class T, class S, scalar_number N>
[[nodiscard]] tensor<T, S> operator/(const tensor<T, S>& x, N number) {
    return detail::binary_with_scalar<op::div>(x, number, false);
}
template <class T, class S, scalar_number N>
[[nodiscard]] tensor<T, S> operator/(N number, const tensor<T, S>& x) {
    return detail::binary_with_scalar<op::div>(x, number, true);
}

// x to the power y, elementwise.
template <class TA, class SA, class TB, class SB>
[[nodiscard]] auto pow(const tensor<TA, SA>& x, const tensor<TB, SB>& y) {
    return detail::binary<op::pow>(x, y);
}
template <class T, class S, scalar_number N>
[[nodiscard]] tensor<T, S> pow(const tensor<T, S>& x, N exponent) {
    return detail::binary_with_scalar<op::pow>(x, exponent, false);
}
template <class T, class S, scalar_number N>
[[nodiscard]] tensor<T, S> pow(N base, const tensor<T, S>& y) {
    return detail::binary_with_scalar<op::pow>(y, base, true);
}

template <class TA, class SA, class TB, class SB>
[[nodiscard]] auto maximum(const tensor<TA, SA>& a, const tensor<TB, SB>& b) {
    return detail::binary<op::maximum>(a, b);
}
template <class T, class S, scalar_number N>
[[nodiscard]] tensor<T, S> maximum(const tensor<T, S>& x, N number) {
    return detail::binary_with_scalar<op::maximum>(x, number, false);
}
template <class T, class S, scalar_number N>
[[nodiscard]] tensor<T, S> maximum(N number, const tensor<T, S>& x) {
    return detail::binary_with_scalar<op::maximum>(x, number, true);
}

template <class TA, class SA, class TB, class SB>
[[nodiscard]] auto minimum(const tensor<TA, SA>& a, const tensor<TB, SB>& b) {
    return detail::binary<op::minimum>(a, b);
}
template <class T, class S, scalar_number N>
[[nodiscard]] tensor<T, S> minimum(const tensor<T, S>& x, N number) {
    return detail::binary_with_scalar<op::minimum>(x, number, false);
}
template <class T, class S, scalar_number N>
[[nodiscard]] tensor<T, S> minimum(N number, const tensor<T, S>& x) {
    return detail::binary_with_scalar<op::minimum>(x, number, true);
}

// --- comparisons (bool tensors; NaN compares false) and logic on bool tensors, numpy broadcasting ---

namespace detail {

template <op Kind, class TA, class SA, class TB, class SB>
[[nodiscard]] auto to_bool(const tensor<TA, SA>& a, const tensor<TB, SB>& b) {
    require_same_element_type<Kind, TA, TB>();
    require_elementwise_shapes<Kind, SA, SB>();
    return tensor<bool, broadcast_result_t<SA, SB>>(apply_op(Kind, {a.value(), b.value()}));
}

}  // namespace detail

template <class TA, class SA, class TB, class SB>
[[nodiscard]] auto equal(const tensor<TA, SA>& a, const tensor<TB, SB>& b) {
    return detail::to_bool<op::equal>(a, b);
}
template <class TA, class SA, class TB, class SB>
[[nodiscard]] auto less(const tensor<TA, SA>& a, const tensor<TB, SB>& b) {
    return detail::to_bool<op::less>(a, b);
}
template <class TA, class SA, class TB, class SB>
[[nodiscard]] auto less_equal(const tensor<TA, SA>& a, const tensor<TB, SB>& b) {
    return detail::to_bool<op::less_equal>(a, b);
}
template <class TA, class SA, class TB, class SB>
[[nodiscard]] auto greater(const tensor<TA, SA>& a, const tensor<TB, SB>& b) {
    return detail::to_bool<op::greater>(a, b);
}
template <class TA, class SA, class TB, class SB>
[[nodiscard]] auto greater_equal(const tensor<TA, SA>& a, const tensor<TB, SB>& b) {
    return detail::to_bool<op::greater_equal>(a, b);
}
template <class SA, class SB>
[[nodiscard]] auto logical_and(const tensor<bool, SA>& a, const tensor<bool, SB>& b) {
    return detail::to_bool<op::logical_and>(a, b);
}
template <class SA, class SB>
[[nodiscard]] auto logical_or(const tensor<bool, SA>& a, const tensor<bool, SB>& b) {
    return detail::to_bool<op::logical_or>(a, b);
}
template <class SA, class SB>
[[nodiscard]] auto logical_xor(const tensor<bool, SA>& a, const tensor<bool, SB>& b) {
    return detail::to_bool<op::logical_xor>(a, b);
}
template <class S>
[[nodiscard]] tensor<bool, S> logical_not(const tensor<bool, S>& x) {
    return tensor<bool, S>(detail::apply_op(op::logical_not, {x.value()}));
}

// a where condition != 0, else b; the three broadcast together. The condition may have any element type.
template <class TC, class SC, class TA, class SA, class TB, class SB>
[[nodiscard]] auto where(const tensor<TC, SC>& condition, const tensor<TA, SA>& a, const tensor<TB, SB>& b) {
    detail::require_same_element_type<op::where, TA, TB>();
    detail::require_elementwise_shapes<op::where, SA, SB>();
    using branches = detail::broadcast_result_t<SA, SB>;  // any_shape when unknown or already reported
    detail::require_elementwise_shapes<op::where, SC, branches>();
    using result = detail::broadcast_result_t<SC, branches>;
    return tensor<TA, result>(detail::apply_op(op::where, {condition.value(), a.value(), b.value()}));
}

}  // namespace anvil
