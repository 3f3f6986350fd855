// anvil: normalisation ops: layer_norm and rms_norm over the last axis, group_norm and batch_norm (inference
// form) over the channels of [N, C, ...], and softmax with an optional additive mask. Weights and biases are
// optional operands (a tensor, a std::optional of one, or std::nullopt); with static shapes their lengths are
// checked at compile time. They may have another element type than x (f16 weights with f32 activations).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

#include "anvil/expr/elementwise.hpp"
#include "anvil/expr/tensor.hpp"

namespace anvil {

namespace detail {

// A weight or bias [D] for x [..., D].
template <class X, class P>
struct last_axis_parameter_fits {
    static constexpr bool value = [] {
        if constexpr (X::rank < 1 || P::rank != 1) {
            return false;
        } else {
            return extents_agree(P::extents[0], X::extents[X::rank - 1]);
        }
    }();
};

// A per-channel vector [C] for x [N, C, ...].
template <class X, class P>
struct channel_parameter_fits {
    static constexpr bool value = [] {
        if constexpr (X::rank < 2 || P::rank != 1) {
            return false;
        } else {
            return extents_agree(P::extents[0], X::extents[1]);
        }
    }();
};

// M broadcasts to Target without changing it (numpy's rule, aligned from the right): an additive mask.
template <class M, class Target>
struct broadcasts_to {
    static constexpr bool value = [] {
        if constexpr (M::rank > Target::rank) {
            return false;
        } else {
            for (std::size_t i = 1; i <= M::rank; ++i) {
                const std::int64_t m = M::extents[M::rank - i], t = Target::extents[Target::rank - i];
                if (m != 1 && !extents_agree(m, t)) return false;
            }
            return true;
        }
    }();
};

template <auto Op, class X, class Parameter>
constexpr void require_last_axis_parameter() noexcept {
    if constexpr (all_shapes_v<X, operand_shape_t<Parameter>>) {
        static_assert(
            shape_rule<Op, last_axis_parameter_fits, X, operand_shape_t<Parameter>>::holds,
            "anvil: a weight or bias of a norm over the last axis must be a vector as long as that axis "
            "(x [..., D], weight [D]); shape_rule<op, last_axis_parameter_fits, x, parameter> names the "
            "op and both shapes");
    }
}

template <auto Op, class X, class Parameter>
constexpr void require_channel_parameter() noexcept {
    if constexpr (all_shapes_v<X, operand_shape_t<Parameter>>) {
        static_assert(
            shape_rule<Op, channel_parameter_fits, X, operand_shape_t<Parameter>>::holds,
            "anvil: a per-channel parameter must be a vector with one element per channel (x [N, C, ...], "
            "parameter [C]); shape_rule<op, channel_parameter_fits, x, parameter> names the op and both "
            "shapes");
    }
}

template <auto Op, class Mask, class Target>
constexpr void require_mask_broadcasts() noexcept {
    if constexpr (all_shapes_v<Mask, Target>) {
        static_assert(
            shape_rule<Op, broadcasts_to, Mask, Target>::holds,
            "anvil: the additive mask must broadcast to the shape it is added to without changing it "
            "(aligned from the right, each extent 1 or equal); shape_rule<op, broadcasts_to, mask, "
            "target> names the op and both shapes");
    }
}

inline value apply_norm(op kind, const value& x, std::initializer_list<std::optional<value>> parameters,
                        std::initializer_list<std::string_view> names, double epsilon,
                        std::int64_t groups = 1) {
    attributes attrs;
    attrs.epsilon = static_cast<float>(epsilon);
    attrs.groups = groups;
    return apply_with_optional(kind, {x}, parameters, names, std::move(attrs));
}

inline value apply_softmax(const value& x, std::int64_t axis, const std::optional<value>& mask) {
    attributes attrs;
    attrs.axis = axis;
    return apply_with_optional(op::softmax, {x}, {mask}, {"the mask"}, std::move(attrs));
}

}  // namespace detail

// (x - mean) / sqrt(var + epsilon) * weight + bias over the last axis; weight and bias [D] are optional.
template <class T, class S, optional_operand Weight, optional_operand Bias>
[[nodiscard]] tensor<T, S> layer_norm(const tensor<T, S>& x, const Weight& weight, const Bias& bias,
                                      double epsilon = 1e-5) {
    detail::require_last_axis_parameter<op::layer_norm, S, Weight>();
    detail::require_last_axis_parameter<op::layer_norm, S, Bias>();
    return tensor<T, S>(detail::apply_norm(op::layer_norm, x.value(),
                                           {detail::operand_value(weight), detail::operand_value(bias)},
                                           {"the weight", "the bias"}, epsilon));
}
template <class T, class S>
[[nodiscard]] tensor<T, S> layer_norm(const tensor<T, S>& x, double epsilon = 1e-5) {
    return layer_norm(x, std::nullopt, std::nullopt, epsilon);
}

// x / sqrt(mean(x^2) + epsilon) * weight over the last axis (Llama's RMSNorm); weight [D] is optional.
template <class T, class S, optional_operand Weight>
[[nodiscard]] tensor<T, S> rms_norm(const tensor<T, S>& x, const Weight& weight, double epsilon = 1e-6) {
    detail::require_last_axis_parameter<op::rms_norm, S, Weight>();
    return tensor<T, S>(detail::apply_norm(op::rms_norm, x.value(), {detail::operand_value(weight)},
                                           {"the weight"}, epsilon));
}
template <class T, class S>
[[nodiscard]] tensor<T, S> rms_norm(const tensor<T, S>& x, double epsilon = 1e-6) {
    return rms_norm(x, std::nullopt, epsilon);
}

// x [N, C, ...] normalised over each of `groups` groups of channels (and the spatial axes), then scaled by
// weight [C] and shifted by bias [C] (PyTorch's GroupNorm).
template <class T, class S, optional_operand Weight, optional_operand Bias>
[[nodiscard]] tensor<T, S> group_norm(const tensor<T, S>& x, std::int64_t groups, const Weight& weight,
                                      const Bias& bias, double epsilon = 1e-5) {
    detail::require_channel_parameter<op::group_norm, S, Weight>();
    detail::require_channel_parameter<op::group_norm, S, Bias>();
    return tensor<T, S>(detail::apply_norm(op::group_norm, x.value(),
                                           {detail::operand_value(weight), detail::operand_value(bias)},
                                           {"the weight", "the bias"}, epsilon, groups));
}
template <class T, class S>
[[nodiscard]] tensor<T, S> group_norm(const tensor<T, S>& x, std::int64_t groups, double epsilon = 1e-5) {
    return group_norm(x, groups, std::nullopt, std::nullopt, epsilon);
}

// Inference-time batch norm over axis 1 of x [N, C, ...]: (x - mean) / sqrt(variance + epsilon) * weight +
// bias, all four [C]; weight and bias are optional.
template <class T, class S, optional_operand Mean, optional_operand Variance, optional_operand Weight,
          optional_operand Bias>
[[nodiscard]] tensor<T, S> batch_norm(const tensor<T, S>& x, const Mean& mean, const Variance& variance,
                                      const Weight& weight, const Bias& bias, double epsilon = 1e-5) {
    detail::require_channel_parameter<op::batch_norm, S, Mean>();
    detail::require_channel_parameter<op::batch_norm, S, Variance>();
    detail::require_channel_parameter<op::batch_norm, S, Weight>();
    detail::require_channel_parameter<op::batch_norm, S, Bias>();
    return tensor<T, S>(detail::apply_norm(op::batch_norm, x.value(),
                                           {detail::operand_value(mean), detail::operand_value(variance),
                                            detail::operand_value(weight), detail::operand_value(bias)},
                                           {"the mean", "the variance", "the weight", "the bias"}, epsilon));
}
template <class T, class S, optional_operand Mean, optional_operand Variance>
[[nodiscard]] tensor<T, S> batch_norm(const tensor<T, S>& x, const Mean& mean, const Variance& variance,
                                      double epsilon = 1e-5) {
    return batch_norm(x, mean, variance, std::nullopt, std::nullopt, epsilon);
}

// softmax(x + mask) along `axis` (negative counts from the end); the optional additive mask broadcasts to x.
template <class T, class S>
[[nodiscard]] tensor<T, S> softmax(const tensor<T, S>& x, std::int64_t axis = -1) {
    detail::require_floating_element<op::softmax, T>();
    return tensor<T, S>(detail::apply_softmax(x.value(), axis, std::nullopt));
}
template <class T, class S, optional_operand Mask>
[[nodiscard]] tensor<T, S> softmax(const tensor<T, S>& x, std::int64_t axis, const Mask& mask) {
    detail::require_floating_element<op::softmax, T>();
    detail::require_mask_broadcasts<op::softmax, detail::operand_shape_t<Mask>, S>();
    return tensor<T, S>(detail::apply_softmax(x.value(), axis, detail::operand_value(mask)));
}

}  // namespace anvil
