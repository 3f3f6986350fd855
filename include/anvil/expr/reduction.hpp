// anvil: reductions: sum, mean, max over axes and argmax along one. Axes given as template arguments
// (sum<1, 2>(x), sum<-1>(x, keep_dims), argmax<-1>(ids)) give a static result shape and are checked at
// compile time (in range, no repeats); axes given at run time (sum(x, {1, 2}, true)) give a tensor whose
// shape is known at run time. No axes means every axis.
#pragma once

#include <array>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "anvil/expr/tensor.hpp"

namespace anvil {

// Keep each reduced axis as an extent of 1: sum<-1>(x, keep_dims).
struct keep_dims_t {
    // Not constructible from {}, so that sum(x, {}) means "no axes" (as std::nullopt_t does it).
    enum class token : std::uint8_t { value };
    explicit constexpr keep_dims_t(token) noexcept {}
};
inline constexpr keep_dims_t keep_dims{keep_dims_t::token::value};

namespace detail {

// Every axis in range for the shape's rank (negative counts from the end), none named twice.
template <class Shape, class Axes>
struct reduction_axes_valid {
    static constexpr bool value = [] {
        std::array<bool, max_rank> seen{};
        for (const std::int64_t axis : Axes::values) {
            if (!axis_in_range(axis, Shape::rank)) return false;
            const auto index = static_cast<std::size_t>(normalized_axis(axis, Shape::rank));
            if (seen[index]) return false;
            seen[index] = true;
        }
        return true;
    }();
};

template <op Kind, bool KeepDims, class Shape, class Axes>
struct reduction_shape {
    using type = any_shape;
};
template <op Kind, bool KeepDims, std::int64_t... Extents, class Axes>
struct reduction_shape<Kind, KeepDims, shape<Extents...>, Axes> {
    using x = shape<Extents...>;
    static constexpr bool valid = reduction_axes_valid<x, Axes>::value;
    static constexpr bool reduced(std::size_t axis) {
        if (Axes::size == 0) return true;  // no axes: every axis
        for (const std::int64_t a : Axes::values) {
            if (static_cast<std::size_t>(normalized_axis(a, x::rank)) == axis) return true;
        }
        return false;
    }
    static constexpr std::size_t rank = [] {
        std::size_t count = 0;
        for (std::size_t axis = 0; axis < x::rank; ++axis) {
            if (KeepDims || !reduced(axis)) ++count;
        }
        return count;
    }();
    static constexpr std::array<std::int64_t, rank> extents = [] {
        std::array<std::int64_t, rank> result{};
        std::size_t out = 0;
        for (std::size_t axis = 0; axis < x::rank; ++axis) {
            if (!reduced(axis)) {
                result[out++] = x::extents[axis];
            } else if (KeepDims) {
                result[out++] = 1;
            }
        }
        return result;
    }();
    using type = std::conditional_t<valid, array_to_shape_t<extents>, any_shape>;
};

inline value apply_reduction(op kind, const value& x, std::vector<std::int64_t> axes, bool keep) {
    attributes attrs;
    attrs.keep_dims = keep;
    if (kind == op::argmax) {
        attrs.axis = axes.empty() ? -1 : axes[0];
    } else {
        attrs.axes = std::move(axes);
    }
    return apply_op(kind, {x}, std::move(attrs));
}

template <op Kind, bool KeepDims, std::int64_t... Axes, class T, class S>
[[nodiscard]] auto static_reduction(const tensor<T, S>& x) {
    if constexpr (is_shape_v<S>) {
        static_assert(
            operand_rule<Kind, reduction_axes_valid, S, axis_list<Axes...>>::holds,
            "anvil: the axes to reduce must be in range for the shape's rank (negative ones count from the "
            "end) and distinct; operand_rule<op, reduction_axes_valid, shape, axis_list> names the op, "
            "the shape and the axes");
    }
    using result = typename reduction_shape<Kind, KeepDims, S, axis_list<Axes...>>::type;
    using element = std::conditional_t<Kind == op::argmax, std::int64_t, T>;
    return tensor<element, result>(apply_reduction(Kind, x.value(), {Axes...}, KeepDims));
}

}  // namespace detail

// Sum over Axes (none: every axis): sum<-1>(x) drops the last axis, sum<-1>(x, keep_dims) keeps it as 1.
template <std::int64_t... Axes, class T, class S>
[[nodiscard]] auto sum(const tensor<T, S>& x) {
    return detail::static_reduction<op::reduce_sum, false, Axes...>(x);
}
template <std::int64_t... Axes, class T, class S>
[[nodiscard]] auto sum(const tensor<T, S>& x, keep_dims_t) {
    return detail::static_reduction<op::reduce_sum, true, Axes...>(x);
}
// Axes known at run time: sum(x, {1, 2}, true).
template <class T, class S>
[[nodiscard]] tensor<T> sum(const tensor<T, S>& x, std::vector<std::int64_t> axes,
                            bool keep_reduced = false) {
    return tensor<T>(detail::apply_reduction(op::reduce_sum, x.value(), std::move(axes), keep_reduced));
}

template <std::int64_t... Axes, class T, class S>
[[nodiscard]] auto mean(const tensor<T, S>& x) {
    return detail::static_reduction<op::reduce_mean, false, Axes...>(x);
}
template <std::int64_t... Axes, class T, class S>
[[nodiscard]] auto mean(const tensor<T, S>& x, keep_dims_t) {
    return detail::static_reduction<op::reduce_mean, true, Axes...>(x);
}
template <class T, class S>
[[nodiscard]] tensor<T> mean(const tensor<T, S>& x, std::vector<std::int64_t> axes,
                             bool keep_reduced = false) {
    return tensor<T>(detail::apply_reduction(op::reduce_mean, x.value(), std::move(axes), keep_reduced));
}

template <std::int64_t... Axes, class T, class S>
[[nodiscard]] auto max(const tensor<T, S>& x) {
    return detail::static_reduction<op::reduce_max, false, Axes...>(x);
}
template <std::int64_t... Axes, class T, class S>
[[nodiscard]] auto max(const tensor<T, S>& x, keep_dims_t) {
    return detail::static_reduction<op::reduce_max, true, Axes...>(x);
}
template <class T, class S>
[[nodiscard]] tensor<T> max(const tensor<T, S>& x, std::vector<std::int64_t> axes,
                            bool keep_reduced = false) {
    return tensor<T>(detail::apply_reduction(op::reduce_max, x.value(), std::move(axes), keep_reduced));
}

// The index of the largest element along Axis (default: the last), as i64: argmax(logits).
template <std::int64_t Axis = -1, class T, class S>
[[nodiscard]] auto argmax(const tensor<T, S>& x) {
    return detail::static_reduction<op::argmax, false, Axis>(x);
}
template <std::int64_t Axis = -1, class T, class S>
[[nodiscard]] auto argmax(const tensor<T, S>& x, keep_dims_t) {
    return detail::static_reduction<op::argmax, true, Axis>(x);
}
template <class T, class S>
[[nodiscard]] tensor<std::int64_t> argmax(const tensor<T, S>& x, std::int64_t axis,
                                          bool keep_reduced = false) {
    return tensor<std::int64_t>(detail::apply_reduction(op::argmax, x.value(), {axis}, keep_reduced));
}

}  // namespace anvil
