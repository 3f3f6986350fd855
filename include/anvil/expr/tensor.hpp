// anvil: tensor<T, Shape>, the typed handle of the expression front end. A tensor is a graph value (a shared
// graph and a node id) with its element type in T and, where the program knows it, its shape in Shape:
// shape<1, 64, dyn> (static extents; dyn for one known only when the graph is built) or any_shape (rank and
// extents known only at run time, as in model recipes configured by config.json).
//
// Ops append their node at once (there are no lazy expression trees), so `auto y = a + b;` is always safe.
// The templates only compute the result's type and run the compile-time checks; graph::apply does the work
// and the same checks on the runtime shapes (the {fmt} pattern: a thin template over a non-template core).
//
// Compile-time checks over shapes assert detail::shape_rule<op, rule, shapes...>::holds (core/shape.hpp);
// checks over element types or axis lists assert detail::operand_rule<op, rule, operands...>::holds below.
// Either way GCC and Clang print the op and every operand in the diagnostic.
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "anvil/core/dtype.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/core/shape.hpp"
#include "anvil/graph/graph.hpp"
#include "anvil/graph/op.hpp"

namespace anvil {

using f32 = float;
using f16 = half;
using bf16 = bfloat16;

// The shape of a tensor whose rank and extents are known only at run time: every dims matches it.
struct any_shape {
    [[nodiscard]] static constexpr bool matches(const dims&) noexcept { return true; }
    [[nodiscard]] static std::string to_string() { return "any shape"; }
};

template <class Shape>
inline constexpr bool is_tensor_shape_v = is_shape_v<Shape> || std::is_same_v<Shape, any_shape>;

namespace detail {

// The carrier of compile-time checks whose operands are not all shapes (element types, axis lists): like
// shape_rule, a failing `static_assert(operand_rule<Op, Rule, Operands...>::holds, "...")` prints the op,
// the rule and every operand.
template <auto Op, template <class...> class Rule, class... Operands>
struct operand_rule {
    static constexpr bool holds = Rule<Operands...>::value;
};

// Axes given as template arguments (permute<0, 2, 1, 3>, sum<1, 2>), as a type for operand_rule.
template <std::int64_t... Axes>
struct axis_list {
    static constexpr std::size_t size = sizeof...(Axes);
    static constexpr std::array<std::int64_t, size> values{Axes...};
};

template <class T>
[[nodiscard]] constexpr dtype dtype_or_f32() noexcept {
    if constexpr (element_type<T>) {
        return dtype_of_v<T>;
    } else {
        return dtype::f32;  // only after the static_assert in tensor has failed
    }
}

// --- static shape arithmetic (types only; dyn propagates) ---

[[nodiscard]] constexpr bool extents_agree(std::int64_t a, std::int64_t b) noexcept {
    return a == b || a == dyn || b == dyn;
}

[[nodiscard]] constexpr std::int64_t normalized_axis(std::int64_t axis, std::size_t rank) noexcept {
    return axis < 0 ? axis + static_cast<std::int64_t>(rank) : axis;
}

[[nodiscard]] constexpr bool axis_in_range(std::int64_t axis, std::size_t rank) noexcept {
    const auto signed_rank = static_cast<std::int64_t>(rank);
    return axis >= -signed_rank && axis < signed_rank;
}

// shape<Extents[0], Extents[1], ...> from a constexpr std::array.
template <auto Extents, class = std::make_index_sequence<Extents.size()>>
struct array_to_shape;
template <auto Extents, std::size_t... Axes>
struct array_to_shape<Extents, std::index_sequence<Axes...>> {
    using type = shape<Extents[Axes]...>;
};
template <auto Extents>
using array_to_shape_t = typename array_to_shape<Extents>::type;

template <std::int64_t>
inline constexpr std::int64_t dyn_for = dyn;

// The same rank with every extent dyn: the result of an op whose extents depend on runtime arguments.
template <class Shape>
struct same_rank_dyn {
    using type = any_shape;
};
template <std::int64_t... Extents>
struct same_rank_dyn<shape<Extents...>> {
    using type = shape<dyn_for<Extents>...>;
};
template <class Shape>
using same_rank_dyn_t = typename same_rank_dyn<Shape>::type;

// Whether a tensor of shape From may be used as one of shape To with no runtime check.
template <class From, class To>
[[nodiscard]] constexpr bool shape_converts() noexcept {
    if constexpr (std::is_same_v<To, any_shape>) {
        return true;
    } else if constexpr (!is_shape_v<From> || !is_shape_v<To>) {
        return false;
    } else if constexpr (From::rank != To::rank) {
        return false;
    } else {
        for (std::size_t axis = 0; axis < To::rank; ++axis) {
            if (To::extents[axis] != dyn && To::extents[axis] != From::extents[axis]) return false;
        }
        return true;
    }
}

template <std::size_t Rank>
struct dyn_shape {
    static constexpr auto extents = [] {
        std::array<std::int64_t, Rank> result{};
        result.fill(dyn);
        return result;
    }();
    using type = array_to_shape_t<extents>;
};
template <std::size_t Rank>
using dyn_shape_t = typename dyn_shape<Rank>::type;

// The last Count extents removed.
template <class Shape, std::size_t Count>
struct drop_last {
    static constexpr auto extents = [] {
        std::array<std::int64_t, Shape::rank - Count> result{};
        for (std::size_t axis = 0; axis < result.size(); ++axis)
            result[axis] = Shape::extents[axis];
        return result;
    }();
    using type = array_to_shape_t<extents>;
};
template <class Shape, std::size_t Count>
using drop_last_t = typename drop_last<Shape, Count>::type;

template <class Shape, std::int64_t... More>
struct append_extents;
template <std::int64_t... Extents, std::int64_t... More>
struct append_extents<shape<Extents...>, More...> {
    using type = shape<Extents..., More...>;
};
template <class Shape, std::int64_t... More>
using append_extents_t = typename append_extents<Shape, More...>::type;

template <class... Shapes>
inline constexpr bool all_shapes_v = (is_shape_v<Shapes> && ...);

// --- the non-template core every op calls ---

// "add %4", or "input \"x\" %0": a value for messages.
[[nodiscard]] inline std::string describe_value(const value& v) {
    const node& n = v.producer();
    return n.name.empty() ? message(op_name(n.kind), " %", v.id())
                          : message(op_name(n.kind), " \"", n.name, "\" %", v.id());
}

// "tensor<f32, [2, ?]>", "tensor<f32>".
[[nodiscard]] inline std::string describe_tensor_type(dtype type, std::string_view shape_text) {
    return shape_text.empty() ? message("tensor<", dtype_name(type), ">")
                              : message("tensor<", dtype_name(type), ", ", shape_text, ">");
}

// The runtime half of tensor<T, Shape>: the value's dtype is T's and its shape fits Shape.
inline void check_tensor_value(const value& v, dtype type, bool (*matches)(const dims&),
                               const std::string& shape_text) {
    if (!v.valid()) return;
    if (v.type() != type) {
        throw type_error(message(describe_tensor_type(type, shape_text), ": ", describe_value(v), " holds ",
                                 dtype_name(v.type()), " elements, not ", dtype_name(type)));
    }
    if (!matches(v.shape())) {
        throw shape_error(message(describe_tensor_type(type, shape_text), ": ", describe_value(v),
                                  " has shape ", v.shape(), ", which does not match ", shape_text));
    }
}

[[nodiscard]] inline graph graph_of(op kind, std::span<const value> operands) {
    for (const value& operand : operands) {
        if (operand.valid()) return graph::of(operand);
    }
    throw error(
        message(op_name(kind), ": every operand is an empty tensor (default-constructed, never assigned)"));
}

// Appends `kind` on `operands` to their graph; graph::apply infers the result and checks the runtime shapes.
inline value apply_op(op kind, std::span<const value> operands, attributes attrs = {}) {
    return graph_of(kind, operands).apply(kind, operands, std::move(attrs));
}
inline value apply_op(op kind, std::initializer_list<value> operands, attributes attrs = {}) {
    return apply_op(kind, std::span<const value>(operands.begin(), operands.size()), std::move(attrs));
}

// A rank-0 constant of x's element type, for `x * 0.5`.
inline value scalar_like(op kind, const value& x, double number) {
    if (!x.valid())
        throw error(message(op_name(kind), ": the tensor operand is empty (default-constructed)"));
    return graph::of(x).scalar(number, x.type());
}

}  // namespace detail

// A typed handle to one value of a graph; see the top of this file. Copies are cheap (a shared pointer and
// an id) and share the node.
template <class T, class Shape = any_shape>
class tensor {
    static_assert(
        element_type<T>,
        "anvil::tensor<T, Shape>: T must be an element type with a dtype: float (f32), half (f16), "
        "bfloat16 (bf16), double, std::int8_t .. std::int64_t, std::uint8_t .. std::uint64_t or bool");
    static_assert(
        is_tensor_shape_v<Shape>,
        "anvil::tensor<T, Shape>: Shape must be anvil::shape<...> (anvil::dyn for an extent known only "
        "when the graph is built) or anvil::any_shape");

public:
    using element = T;
    using shape_type = Shape;
    static constexpr dtype element_dtype = detail::dtype_or_f32<T>();

    // An empty handle, to be assigned; ops on it throw.
    tensor() = default;

    // A graph value with its element type and shape checked against T and Shape (type_error, shape_error).
    explicit tensor(anvil::value v) : value_(std::move(v)) {
        detail::check_tensor_value(value_, element_dtype, &Shape::matches, shape_text());
    }

    // A static shape converts to any_shape, and to a shape that has dyn where it has an extent.
    template <class Other>
    requires(!std::is_same_v<Other, Shape> && detail::shape_converts<Other, Shape>())
        tensor(const tensor<T, Other>& other)
        : value_(other.value()) {}

    // Tensors pass where values are expected: anvil::compile({y, z}, options).
    operator const anvil::value&() const noexcept { return value_; }

    [[nodiscard]] const anvil::value& value() const noexcept { return value_; }
    [[nodiscard]] bool valid() const noexcept { return value_.valid(); }
    [[nodiscard]] dtype type() const { return value_.type(); }
    // The runtime extents (Shape gives those known at compile time). A copy: a reference into the graph
    // would dangle once more nodes are appended.
    [[nodiscard]] dims shape() const { return value_.shape(); }
    [[nodiscard]] std::size_t rank() const { return value_.rank(); }

private:
    static std::string shape_text() {
        if constexpr (std::is_same_v<Shape, any_shape>) {
            return {};
        } else {
            return Shape::to_string();
        }
    }

    anvil::value value_;
};

template <class T>
inline constexpr bool is_tensor_v = false;
template <class T, class Shape>
inline constexpr bool is_tensor_v<tensor<T, Shape>> = true;

// An operand an op may go without (a bias, a mask): a tensor, a std::optional of one, or std::nullopt.
template <class Operand>
struct optional_operand_traits {
    static constexpr bool is_operand = false;
};
template <class T, class Shape>
struct optional_operand_traits<tensor<T, Shape>> {
    static constexpr bool is_operand = true;
    using shape_type = Shape;
    static std::optional<value> get(const tensor<T, Shape>& operand) { return operand.value(); }
};
template <class T, class Shape>
struct optional_operand_traits<std::optional<tensor<T, Shape>>> {
    static constexpr bool is_operand = true;
    using shape_type = Shape;
    static std::optional<value> get(const std::optional<tensor<T, Shape>>& operand) {
        if (operand) return operand->value();
        return std::nullopt;
    }
};
template <>
struct optional_operand_traits<std::nullopt_t> {
    static constexpr bool is_operand = true;
    using shape_type = any_shape;
    static std::optional<value> get(std::nullopt_t) { return std::nullopt; }
};

template <class Operand>
concept optional_operand = optional_operand_traits<std::remove_cvref_t<Operand>>::is_operand;

namespace detail {

template <optional_operand Operand>
using operand_shape_t = typename optional_operand_traits<std::remove_cvref_t<Operand>>::shape_type;

template <optional_operand Operand>
[[nodiscard]] std::optional<value> operand_value(const Operand& operand) {
    return optional_operand_traits<std::remove_cvref_t<Operand>>::get(operand);
}

// Appends `kind` on the required operands followed by the optional ones that are present. An op's optional
// operands are positional (layer_norm's bias is its third), so one may be present only when those before it
// are; `names` names them for that error.
inline value apply_with_optional(op kind, std::vector<value> operands,
                                 std::initializer_list<std::optional<value>> optional,
                                 std::initializer_list<std::string_view> names, attributes attrs = {}) {
    std::size_t index = 0;
    std::string_view missing;
    for (const auto& operand : optional) {
        const std::string_view name =
            index < names.size() ? names.begin()[index] : std::string_view("operand");
        ++index;
        if (!operand) {
            if (missing.empty()) missing = name;
            continue;
        }
        if (!missing.empty()) {
            throw error(message(op_name(kind), ": ", name, " is given without ", missing,
                                ", which comes before it (pass ", missing, " as well)"));
        }
        operands.push_back(*operand);
    }
    return apply_op(kind, operands, std::move(attrs));
}

}  // namespace detail

// --- graph's typed leaves (declared in graph/graph.hpp) ---

namespace detail {

template <class Shape>
struct has_no_dyn_extent : std::bool_constant<Shape::is_static> {};

inline void check_constant_type(const host_tensor& data, dtype expected, const std::string& label) {
    if (data.type() != expected) {
        throw type_error(message("graph::constant<", dtype_name(expected), "> \"", label,
                                 "\": the data holds ", dtype_name(data.type()), " elements, not ",
                                 dtype_name(expected)));
    }
}

}  // namespace detail

template <class T, std::int64_t... Extents>
tensor<T, shape<Extents...>> graph::input(std::string name, shape<Extents...>) {
    using static_shape = shape<Extents...>;
    static_assert(detail::shape_rule<op::input, detail::has_no_dyn_extent, static_shape>::holds,
                  "anvil::graph::input: a static shape with a dyn extent needs the runtime extents; write "
                  "input<T, shape<...>>(name, dims{...}), which checks them against the static shape");
    if constexpr (static_shape::is_static) {
        return tensor<T, static_shape>(input(std::move(name), dtype_of_v<T>, dims(static_shape::extents)));
    } else {
        return {};
    }
}

template <class T, class Shape>
tensor<T, Shape> graph::input(std::string name, dims extents) {
    if constexpr (is_shape_v<Shape>)
        detail::require_matches<Shape>(detail::message("graph::input \"", name, "\""), extents);
    return tensor<T, Shape>(input(std::move(name), dtype_of_v<T>, extents));
}

template <class T>
tensor<T, any_shape> graph::constant(host_tensor data, std::string label) {
    detail::check_constant_type(data, dtype_of_v<T>, label);
    return tensor<T, any_shape>(constant(std::move(data), std::move(label)));
}

template <class T, std::int64_t... Extents>
tensor<T, shape<Extents...>> graph::constant(host_tensor data, shape<Extents...>, std::string label) {
    detail::check_constant_type(data, dtype_of_v<T>, label);
    detail::require_matches<shape<Extents...>>(detail::message("graph::constant \"", label, "\""),
                                               data.shape());
    return tensor<T, shape<Extents...>>(constant(std::move(data), std::move(label)));
}

}  // namespace anvil
