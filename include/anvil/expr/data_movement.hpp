// anvil: data movement: reshape, transpose and permute, concat and split, slice, pad, gather and embedding.
// Arguments given as template arguments (reshape<shape<2, dyn>>(x), permute<0, 2, 1, 3>(x), concat<1>(a, b))
// give a static result shape and are checked at compile time; arguments given at run time give the same rank
// with dyn extents (or any_shape), and graph::apply checks them when the graph is built. split lowers to one
// slice per piece.
#pragma once

#include <array>
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "anvil/expr/elementwise.hpp"
#include "anvil/expr/tensor.hpp"

namespace anvil {

// An `end` for slice that reaches the end of the axis, however long it is.
inline constexpr std::int64_t end_of_axis = std::numeric_limits<std::int64_t>::max();

namespace detail {

// --- reshape ---

template <class Target>
struct at_most_one_dyn_extent {
    static constexpr bool value = [] {
        std::size_t count = 0;
        for (const std::int64_t extent : Target::extents)
            count += extent == dyn ? 1U : 0U;
        return count <= 1;
    }();
};

// Equal element counts; a dyn extent in the target takes what is left (so the known ones must divide it).
template <class X, class Target>
struct reshape_element_count_matches {
    static constexpr bool value = [] {
        if constexpr (!X::is_static || !at_most_one_dyn_extent<Target>::value) {
            return true;
        } else {
            const auto count = checked_element_count(std::span<const std::int64_t>(X::extents));
            std::uint64_t known = 1;
            for (const std::int64_t extent : Target::extents) {
                if (extent != dyn) known *= static_cast<std::uint64_t>(extent);
            }
            if (!count) return false;
            if (Target::is_static) return known == *count;
            return known != 0 && *count % known == 0;
        }
    }();
};

template <class X, class Target>
struct reshape_shape {
    // A dyn extent is resolved when x's element count is known.
    static constexpr std::array<std::int64_t, Target::rank> extents = [] {
        std::array<std::int64_t, Target::rank> result = Target::extents;
        if constexpr (is_shape_v<X>) {
            if constexpr (X::is_static && reshape_element_count_matches<X, Target>::value &&
                          at_most_one_dyn_extent<Target>::value && !Target::is_static) {
                std::int64_t count = 1, known = 1;
                for (const std::int64_t extent : X::extents)
                    count *= extent;
                for (const std::int64_t extent : Target::extents)
                    known *= extent == dyn ? 1 : extent;
                for (auto& extent : result)
                    extent = extent == dyn ? count / known : extent;
            }
        }
        return result;
    }();
    using type = array_to_shape_t<extents>;
};

inline value apply_reshape(const value& x, std::vector<std::int64_t> sizes) {
    attributes attrs;
    attrs.sizes = std::move(sizes);
    return apply_op(op::reshape, {x}, std::move(attrs));
}

// --- transpose, permute ---

template <class Shape, class Axes>
struct axes_in_range {
    static constexpr bool value = [] {
        for (const std::int64_t axis : Axes::values) {
            if (!axis_in_range(axis, Shape::rank)) return false;
        }
        return true;
    }();
};

// One axis of the shape per position, each once (negative ones count from the end).
template <class Shape, class Order>
struct is_permutation_of_axes {
    static constexpr bool value = [] {
        if (Order::size != Shape::rank) return false;
        std::array<bool, max_rank> seen{};
        for (const std::int64_t axis : Order::values) {
            if (!axis_in_range(axis, Shape::rank)) return false;
            const auto index = static_cast<std::size_t>(normalized_axis(axis, Shape::rank));
            if (seen[index]) return false;
            seen[index] = true;
        }
        return true;
    }();
};

template <class X, class Order>
struct permute_shape {
    using type = any_shape;
};
template <std::int64_t... Extents, class Order>
struct permute_shape<shape<Extents...>, Order> {
    using x = shape<Extents...>;
    static constexpr bool valid = is_permutation_of_axes<x, Order>::value;
    static constexpr std::array<std::int64_t, x::rank> extents = [] {
        std::array<std::int64_t, x::rank> result{};
        if constexpr (valid) {
            for (std::size_t i = 0; i < x::rank; ++i) {
                result[i] = x::extents[static_cast<std::size_t>(normalized_axis(Order::values[i], x::rank))];
            }
        }
        return result;
    }();
    using type = std::conditional_t<valid, array_to_shape_t<extents>, any_shape>;
};

template <class X, std::int64_t A, std::int64_t B>
struct transpose_shape {
    using type = any_shape;
};
template <std::int64_t... Extents, std::int64_t A, std::int64_t B>
struct transpose_shape<shape<Extents...>, A, B> {
    using x = shape<Extents...>;
    static constexpr bool valid = axes_in_range<x, axis_list<A, B>>::value;
    static constexpr std::array<std::int64_t, x::rank> extents = [] {
        std::array<std::int64_t, x::rank> result = x::extents;
        if constexpr (valid) {
            std::swap(result[static_cast<std::size_t>(normalized_axis(A, x::rank))],
                      result[static_cast<std::size_t>(normalized_axis(B, x::rank))]);
        }
        return result;
    }();
    using type = std::conditional_t<valid, array_to_shape_t<extents>, any_shape>;
};

inline value apply_permute(const value& x, std::vector<std::int64_t> order) {
    attributes attrs;
    attrs.axes = std::move(order);
    return apply_op(op::permute, {x}, std::move(attrs));
}

inline std::int64_t checked_axis(std::string_view what, std::int64_t axis, const dims& shape) {
    const auto rank = static_cast<std::int64_t>(shape.rank());
    if (axis < -rank || axis >= rank) {
        throw shape_error(
            message(what, ": axis ", axis, " is out of range for shape ", shape, " (rank ", rank, ")"));
    }
    return axis < 0 ? axis + rank : axis;
}

inline value apply_transpose(const value& x, std::int64_t a, std::int64_t b) {
    if (!x.valid()) throw error("transpose: the operand is an empty tensor (default-constructed)");
    std::vector<std::int64_t> order(x.rank());
    for (std::size_t axis = 0; axis < order.size(); ++axis)
        order[axis] = static_cast<std::int64_t>(axis);
    std::swap(order[static_cast<std::size_t>(checked_axis("transpose", a, x.shape()))],
              order[static_cast<std::size_t>(checked_axis("transpose", b, x.shape()))]);
    return apply_permute(x, std::move(order));
}

// --- concat ---

template <class A, class B>
[[nodiscard]] constexpr bool agree_off_axis(std::size_t axis) noexcept {
    if constexpr (A::rank != B::rank) {
        return false;
    } else {
        for (std::size_t i = 0; i < A::rank; ++i) {
            if (i != axis && !extents_agree(A::extents[i], B::extents[i])) return false;
        }
        return true;
    }
}

// Same rank, the axis in range, equal extents off the axis.
template <class Axis, class First, class... Rest>
struct concat_operands_fit {
    static constexpr bool value = [] {
        constexpr std::int64_t axis = Axis::values[0];
        if (!axis_in_range(axis, First::rank)) return false;
        const auto index = static_cast<std::size_t>(normalized_axis(axis, First::rank));
        return (agree_off_axis<First, Rest>(index) && ...);
    }();
};

template <std::int64_t Axis, class... Shapes>
struct concat_shape {
    using type = any_shape;
};
template <std::int64_t Axis, std::int64_t... First, class... Rest>
requires(is_shape_v<Rest>&&...) struct concat_shape<Axis, shape<First...>, Rest...> {
    using first = shape<First...>;
    static constexpr bool valid = concat_operands_fit<axis_list<Axis>, first, Rest...>::value;
    static constexpr std::array<std::int64_t, first::rank> extents = [] {
        std::array<std::int64_t, first::rank> result = first::extents;
        if constexpr (valid) {
            const auto index = static_cast<std::size_t>(normalized_axis(Axis, first::rank));
            for (std::size_t i = 0; i < first::rank; ++i) {
                if (i == index) {
                    const bool any_dyn = result[i] == dyn || ((Rest::extents[i] == dyn) || ...);
                    result[i] = any_dyn ? dyn : (result[i] + ... + Rest::extents[i]);
                } else {
                    ((result[i] = result[i] == dyn ? Rest::extents[i] : result[i]), ...);
                }
            }
        }
        return result;
    }();
    using type = std::conditional_t<valid, array_to_shape_t<extents>, any_shape>;
};

inline value apply_concat(std::span<const value> operands, std::int64_t axis) {
    if (operands.empty()) throw error("concat: no operands");
    attributes attrs;
    attrs.axis = axis;
    return apply_op(op::concat, operands, std::move(attrs));
}

// --- split, slice, pad ---

// One slice per piece of `sizes` along `axis`.
inline std::vector<value> apply_split(const value& x, std::span<const std::int64_t> sizes,
                                      std::int64_t axis) {
    if (!x.valid()) throw error("split: the operand is an empty tensor (default-constructed)");
    const dims shape = x.shape();  // a copy: appending nodes moves them
    const auto index = static_cast<std::size_t>(checked_axis("split", axis, shape));
    std::int64_t total = 0;
    for (const std::int64_t size : sizes) {
        if (size < 0) throw shape_error(message("split: size ", size, " is negative"));
        total += size;
    }
    if (total != shape[index]) {
        throw shape_error(message("split: sizes ", extents_to_string(sizes, false), " add up to ", total,
                                  ", but axis ", index, " of ", shape, " has ", shape[index]));
    }
    graph g = graph::of(x);
    std::vector<value> pieces;
    std::int64_t begin = 0;
    for (const std::int64_t size : sizes) {
        attributes attrs;
        attrs.begin.assign(shape.rank(), 0);
        attrs.end.assign(shape.begin(), shape.end());
        attrs.step.assign(shape.rank(), 1);
        attrs.begin[index] = begin;
        attrs.end[index] = begin + size;
        pieces.push_back(g.apply(op::slice, {x}, std::move(attrs)));
        begin += size;
    }
    return pieces;
}

inline std::vector<value> apply_split_count(const value& x, std::int64_t count, std::int64_t axis) {
    if (!x.valid()) throw error("split: the operand is an empty tensor (default-constructed)");
    const dims shape = x.shape();  // a copy: appending nodes moves them
    const std::int64_t extent = shape[static_cast<std::size_t>(checked_axis("split", axis, shape))];
    if (count <= 0 || extent % count != 0) {
        throw shape_error(message("split: axis ", axis, " of ", shape, " (", extent, ") does not split into ",
                                  count, " equal pieces"));
    }
    const std::vector<std::int64_t> sizes(static_cast<std::size_t>(count), extent / count);
    return apply_split(x, sizes, axis);
}

inline value apply_slice(const value& x, std::int64_t axis, std::int64_t begin, std::int64_t end,
                         std::int64_t step) {
    if (!x.valid()) throw error("slice: the operand is an empty tensor (default-constructed)");
    const dims shape = x.shape();  // a copy: appending nodes moves them
    const auto index = static_cast<std::size_t>(checked_axis("slice", axis, shape));
    attributes attrs;
    attrs.begin.assign(shape.rank(), 0);
    attrs.end.assign(shape.begin(), shape.end());
    attrs.step.assign(shape.rank(), 1);
    attrs.begin[index] = begin;
    attrs.end[index] = end;
    attrs.step[index] = step;
    return apply_op(op::slice, {x}, std::move(attrs));
}

inline value apply_full_slice(const value& x, std::vector<std::int64_t> begin, std::vector<std::int64_t> end,
                              std::vector<std::int64_t> step) {
    if (step.empty()) step.assign(begin.size(), 1);
    attributes attrs;
    attrs.begin = std::move(begin);
    attrs.end = std::move(end);
    attrs.step = std::move(step);
    return apply_op(op::slice, {x}, std::move(attrs));
}

inline value apply_pad(const value& x, std::vector<std::int64_t> before, std::vector<std::int64_t> after,
                       double fill) {
    attributes attrs;
    attrs.begin = std::move(before);
    attrs.end = std::move(after);
    attrs.value = static_cast<float>(fill);
    return apply_op(op::pad, {x}, std::move(attrs));
}

// --- gather ---

template <class T>
struct integer_indices : std::bool_constant<!is_floating(dtype_or_f32<T>()) && !std::is_same_v<T, bool>> {};

// A table of rank >= 1, and a result (the indices' axes in place of the table's gathered one) within
// max_rank.
template <class Table, class Indices>
struct gather_fits : std::bool_constant<(Table::rank >= 1 && Table::rank - 1 + Indices::rank <= max_rank)> {};

template <auto Op, class TI, class Table, class Indices>
constexpr void require_gather_operands() noexcept {
    static_assert(operand_rule<Op, integer_indices, TI>::holds,
                  "anvil: indices must have an integer element type (i32 or i64 token ids); operand_rule<op, "
                  "integer_indices, T> names the op and the indices' type");
    if constexpr (all_shapes_v<Table, Indices>) {
        static_assert(
            shape_rule<Op, gather_fits, Table, Indices>::holds,
            "anvil: gather needs a table of rank >= 1, and the result (the indices' axes in place of the "
            "gathered one) may have at most 8 axes; shape_rule<op, gather_fits, table, indices> names "
            "both shapes");
    }
}

// embedding: [ids..., table[1:]...].
template <class Table, class Indices>
struct embedding_shape {
    using type = any_shape;
};
template <std::int64_t... TableExtents, std::int64_t... IndexExtents>
struct embedding_shape<shape<TableExtents...>, shape<IndexExtents...>> {
    using table = shape<TableExtents...>;
    static constexpr bool valid = gather_fits<table, shape<IndexExtents...>>::value;
    static constexpr std::size_t rank = valid ? table::rank - 1 + sizeof...(IndexExtents) : 0;
    static constexpr std::array<std::int64_t, rank> extents = [] {
        std::array<std::int64_t, rank> result{};
        if constexpr (valid) {
            std::size_t out = 0;
            for (const std::int64_t extent :
                 std::array<std::int64_t, sizeof...(IndexExtents)>{IndexExtents...}) {
                result[out++] = extent;
            }
            for (std::size_t axis = 1; axis < table::rank; ++axis)
                result[out++] = table::extents[axis];
        }
        return result;
    }();
    using type = std::conditional_t<valid, array_to_shape_t<extents>, any_shape>;
};

template <class Table, class Indices>
struct gather_shape {
    using type = any_shape;
};
template <std::int64_t... TableExtents, std::int64_t... IndexExtents>
struct gather_shape<shape<TableExtents...>, shape<IndexExtents...>> {
    static constexpr bool valid = gather_fits<shape<TableExtents...>, shape<IndexExtents...>>::value;
    using type =
        typename std::conditional_t<valid, dyn_shape<sizeof...(TableExtents) - 1 + sizeof...(IndexExtents)>,
                                    std::type_identity<any_shape>>::type;
};

inline value apply_gather(const value& table, const value& indices, std::int64_t axis) {
    attributes attrs;
    attrs.axis = axis;
    return apply_op(op::gather, {table, indices}, std::move(attrs));
}

}  // namespace detail

// x with its elements in row-major order under the static shape Target: reshape<shape<1, dyn, 64>>(x). One
// extent may be dyn (it takes the rest; resolved in the type when x's shape is static).
template <class Target, class T, class S>
[[nodiscard]] auto reshape(const tensor<T, S>& x) {
    static_assert(is_shape_v<Target>, "anvil::reshape<Target>: Target must be an anvil::shape<...>");
    static_assert(
        detail::shape_rule<op::reshape, detail::at_most_one_dyn_extent, Target>::holds,
        "anvil::reshape: at most one extent of the target may be dyn (it takes the elements the others "
        "leave); shape_rule<op::reshape, at_most_one_dyn_extent, target> names the target");
    if constexpr (is_shape_v<S>) {
        static_assert(
            detail::shape_rule<op::reshape, detail::reshape_element_count_matches, S, Target>::holds,
            "anvil::reshape: the element counts differ (or the known target extents do not divide the "
            "count, for a dyn one); shape_rule<op::reshape, reshape_element_count_matches, x, target> "
            "names both shapes");
    }
    std::vector<std::int64_t> sizes(Target::extents.begin(), Target::extents.end());
    return tensor<T, typename detail::reshape_shape<S, Target>::type>(
        detail::apply_reshape(x.value(), std::move(sizes)));
}
// Sizes known at run time; one may be -1: reshape(x, {batch, -1, heads, head_dim}).
template <class T, class S>
[[nodiscard]] tensor<T> reshape(const tensor<T, S>& x, std::vector<std::int64_t> sizes) {
    return tensor<T>(detail::apply_reshape(x.value(), std::move(sizes)));
}
template <class T, class S, std::same_as<dims> Dims>
[[nodiscard]] tensor<T> reshape(const tensor<T, S>& x, const Dims& target) {
    return tensor<T>(
        detail::apply_reshape(x.value(), std::vector<std::int64_t>(target.begin(), target.end())));
}

// Axes A and B swapped (a permute): transpose<-2, -1>(x).
template <std::int64_t A, std::int64_t B, class T, class S>
[[nodiscard]] auto transpose(const tensor<T, S>& x) {
    if constexpr (is_shape_v<S>) {
        static_assert(
            detail::operand_rule<op::permute, detail::axes_in_range, S, detail::axis_list<A, B>>::holds,
            "anvil::transpose: both axes must be in range for the shape's rank (negative ones count "
            "from the end); operand_rule<op::permute, axes_in_range, shape, axis_list<a, b>> names them");
    }
    using result = typename detail::transpose_shape<S, A, B>::type;
    return tensor<T, result>(detail::apply_transpose(x.value(), A, B));
}
template <class T, class S>
[[nodiscard]] auto transpose(const tensor<T, S>& x, std::int64_t a, std::int64_t b) {
    return tensor<T, detail::same_rank_dyn_t<S>>(detail::apply_transpose(x.value(), a, b));
}

// The result's axis i is x's axis Order[i]: permute<0, 2, 1, 3>(x) ([B, S, H, D] -> [B, H, S, D]).
template <std::int64_t... Order, class T, class S>
requires(sizeof...(Order) > 0) [[nodiscard]] auto permute(const tensor<T, S>& x) {
    if constexpr (is_shape_v<S>) {
        static_assert(
            detail::operand_rule<op::permute, detail::is_permutation_of_axes, S,
                                 detail::axis_list<Order...>>::holds,
            "anvil::permute: the order must name every axis of the shape once (negative ones count from the "
            "end); "
            "operand_rule<op::permute, is_permutation_of_axes, shape, axis_list<order...>> names both");
    }
    using result = typename detail::permute_shape<S, detail::axis_list<Order...>>::type;
    return tensor<T, result>(detail::apply_permute(x.value(), {Order...}));
}
template <class T, class S>
[[nodiscard]] auto permute(const tensor<T, S>& x, std::vector<std::int64_t> order) {
    return tensor<T, detail::same_rank_dyn_t<S>>(detail::apply_permute(x.value(), std::move(order)));
}

// The operands joined along Axis: concat<1>(a, b, c). Extents off the axis must agree.
template <std::int64_t Axis, class T, class S, class... Ts, class... Ss>
[[nodiscard]] auto concat(const tensor<T, S>& first, const tensor<Ts, Ss>&... rest) {
    (detail::require_same_element_type<op::concat, T, Ts>(), ...);
    if constexpr (detail::all_shapes_v<S, Ss...>) {
        static_assert(detail::operand_rule<op::concat, detail::concat_operands_fit, detail::axis_list<Axis>,
                                           S, Ss...>::holds,
                      "anvil::concat: the operands must have the same rank and equal extents off the axis, "
                      "and the axis must "
                      "be in range; operand_rule<op::concat, concat_operands_fit, axis_list<axis>, "
                      "shapes...> names the axis "
                      "and every shape");
    }
    using result = typename detail::concat_shape<Axis, S, Ss...>::type;
    const std::array<value, 1 + sizeof...(Ss)> operands{first.value(), rest.value()...};
    return tensor<T, result>(detail::apply_concat(operands, Axis));
}
// A list known at run time: concat({a, b}, axis), or a std::vector of tensors.
template <class T, class S>
[[nodiscard]] auto concat(const std::vector<tensor<T, S>>& operands, std::int64_t axis) {
    const std::vector<value> values(operands.begin(), operands.end());
    return tensor<T, detail::same_rank_dyn_t<S>>(detail::apply_concat(values, axis));
}
template <class T, class S>
[[nodiscard]] auto concat(std::initializer_list<tensor<T, S>> operands, std::int64_t axis) {
    const std::vector<value> values(operands.begin(), operands.end());
    return tensor<T, detail::same_rank_dyn_t<S>>(detail::apply_concat(values, axis));
}

// Pieces of the given sizes along `axis` (one slice each): split(qkv, {d, d, d}, -1).
template <class T, class S>
[[nodiscard]] std::vector<tensor<T, detail::same_rank_dyn_t<S>>> split(const tensor<T, S>& x,
                                                                       const std::vector<std::int64_t>& sizes,
                                                                       std::int64_t axis) {
    std::vector<tensor<T, detail::same_rank_dyn_t<S>>> pieces;
    for (value& piece : detail::apply_split(x.value(), sizes, axis))
        pieces.emplace_back(std::move(piece));
    return pieces;
}
// `count` equal pieces along `axis` (numpy's split(x, count)): split(qkv, 3, -1).
template <class T, class S>
[[nodiscard]] std::vector<tensor<T, detail::same_rank_dyn_t<S>>> split(const tensor<T, S>& x,
                                                                       std::int64_t count,
                                                                       std::int64_t axis) {
    std::vector<tensor<T, detail::same_rank_dyn_t<S>>> pieces;
    for (value& piece : detail::apply_split_count(x.value(), count, axis))
        pieces.emplace_back(std::move(piece));
    return pieces;
}

// Elements begin, begin + step, ... before end along one axis (Python's rules: negative indices count from
// the end, bounds clamp; end_of_axis reaches the end). The other axes are kept whole.
template <class T, class S>
[[nodiscard]] auto slice(const tensor<T, S>& x, std::int64_t axis, std::int64_t begin, std::int64_t end,
                         std::int64_t step = 1) {
    return tensor<T, detail::same_rank_dyn_t<S>>(detail::apply_slice(x.value(), axis, begin, end, step));
}
// One begin, end (and step, default 1) per axis.
template <class T, class S>
[[nodiscard]] auto slice(const tensor<T, S>& x, std::vector<std::int64_t> begin,
                         std::vector<std::int64_t> end, std::vector<std::int64_t> step = {}) {
    return tensor<T, detail::same_rank_dyn_t<S>>(
        detail::apply_full_slice(x.value(), std::move(begin), std::move(end), std::move(step)));
}

// `before[i]` and `after[i]` elements of `fill` added around axis i.
template <class T, class S>
[[nodiscard]] auto pad(const tensor<T, S>& x, std::vector<std::int64_t> before,
                       std::vector<std::int64_t> after, double fill = 0.0) {
    return tensor<T, detail::same_rank_dyn_t<S>>(
        detail::apply_pad(x.value(), std::move(before), std::move(after), fill));
}

// Slices of `table` along `axis` picked by integer `indices`; the indices' axes replace the gathered one.
template <class T, class S, class TI, class SI>
[[nodiscard]] auto gather(const tensor<T, S>& table, const tensor<TI, SI>& indices, std::int64_t axis = 0) {
    detail::require_gather_operands<op::gather, TI, S, SI>();
    return tensor<T, typename detail::gather_shape<S, SI>::type>(
        detail::apply_gather(table.value(), indices.value(), axis));
}
// Rows of table [vocab, dim] for token ids [...]: [..., dim].
template <class T, class S, class TI, class SI>
[[nodiscard]] auto embedding(const tensor<T, S>& table, const tensor<TI, SI>& ids) {
    detail::require_gather_operands<op::gather, TI, S, SI>();
    return tensor<T, typename detail::embedding_shape<S, SI>::type>(
        detail::apply_gather(table.value(), ids.value(), 0));
}

}  // namespace anvil
