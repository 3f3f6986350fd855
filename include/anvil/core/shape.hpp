// anvil: tensor shapes. `shape<1, 64, 1, 32>` is a static shape, checked at compile time; an extent written
// `dyn` is known only at run time. `dims` is a dynamic shape (the extents themselves, known when the graph is
// built). Broadcasting follows numpy's rule in both worlds, through one function.
//
// Compile-time checks name the op and both shapes in the diagnostic. C++20 static_assert messages must be
// literals, so the shapes travel in a type instead: every check asserts `detail::shape_rule<Op, Rule,
// Shapes...>::holds`, and GCC ("note: '...' evaluates to false") and Clang ("static_assert failed due to
// requirement '...'") both print that expression with the op and the shapes spelled out. Op should be an
// enumerator (printed as `anvil::op::add` by both compilers); string literals as template arguments print as
// character codes in Clang 14.
#pragma once

#include "anvil/compilation.hpp"
#include "anvil/core/checked_math.hpp"
#include "anvil/core/error.hpp"

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <ostream>
#include <ranges>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace anvil {

// Marks an extent of a static shape that is known only at run time; printed as "?".
inline constexpr std::int64_t dyn = -1;

// The largest rank anvil handles; `dims` stores its extents inline, so shapes never allocate.
inline constexpr std::size_t max_rank = 8;

namespace detail {

// A shape for a message: "[1, 64, 1, 32]"; "[]" for a scalar; a long one shows its first 16 axes and its
// rank. Shapes anvil expects print dyn as "?"; shapes read from files (dyn_as_any = false) print every value.
[[nodiscard]] std::string extents_to_string(std::span<const std::int64_t> extents, bool dyn_as_any = true);

// numpy's rule for one pair of extents aligned from the right: equal, or one of them 1. dyn (which only
// static shapes hold) matches anything here; its real value is checked when the graph is built.
[[nodiscard]] constexpr std::optional<std::int64_t> broadcast_extent(std::int64_t a,
                                                                     std::int64_t b) noexcept {
    if (a == b) return a;
    if (a == 1) return b;
    if (b == 1) return a;
    if (a == dyn) return b;
    if (b == dyn) return a;
    return std::nullopt;
}

// Broadcasts a with b into result (of rank max(rank a, rank b)); false if they do not broadcast.
constexpr bool broadcast_extents(std::span<const std::int64_t> a, std::span<const std::int64_t> b,
                                 std::span<std::int64_t> result) noexcept {
    const std::size_t rank = result.size();
    for (std::size_t i = 0; i < rank; ++i) {  // i counts axes from the right
        const std::int64_t extent_a = i < a.size() ? a[a.size() - 1 - i] : 1;
        const std::int64_t extent_b = i < b.size() ? b[b.size() - 1 - i] : 1;
        const auto extent = broadcast_extent(extent_a, extent_b);
        if (!extent) return false;
        result[rank - 1 - i] = *extent;
    }
    return true;
}

[[noreturn]] void throw_invalid_extent(std::size_t axis, std::int64_t extent);

[[noreturn]] void throw_extent_too_large(std::size_t axis, std::uint64_t extent);

[[noreturn]] void throw_rank_too_large(std::size_t rank);

// A trait so that a failing check prints the shape: element_count_fits<anvil::shape<...>>::value.
template <class Shape>
struct element_count_fits {
    static constexpr bool value =
        checked_element_count(std::span<const std::int64_t>(Shape::extents)).has_value();
};

}  // namespace detail

// A dynamic shape: up to max_rank extents, each >= 0, stored inline. A rank-0 dims is a scalar (one element).
class dims {
public:
    constexpr dims() noexcept = default;

    // dims{seq, hidden}: any integer types; a single extent must be spelled dims{n} (explicit), so that an
    // integer never converts to a shape by accident.
    template <std::integral... Extents>
    requires(sizeof...(Extents) >= 1 &&
             (!std::same_as<Extents, bool> && ...)) constexpr explicit(sizeof...(Extents) == 1)
        dims(Extents... extents) {
        if (sizeof...(Extents) > max_rank) detail::throw_rank_too_large(sizeof...(Extents));
        (push_back(extents), ...);
    }

    // From any range of integers: a std::vector<std::int64_t>, a span, npy's shape.
    template <std::ranges::input_range Range>
    requires std::integral<std::ranges::range_value_t<Range>> &&
        (!std::same_as<std::remove_cvref_t<Range>, dims>)constexpr explicit dims(const Range& extents) {
        if constexpr (std::ranges::sized_range<Range>) {
            const auto rank = static_cast<std::size_t>(std::ranges::size(extents));
            if (rank > max_rank) detail::throw_rank_too_large(rank);
        }
        for (const auto extent : extents) {
            if (rank_ == max_rank) detail::throw_rank_too_large(max_rank + 1);
            push_back(extent);
        }
    }

    [[nodiscard]] constexpr std::size_t rank() const noexcept { return rank_; }
    // Unchecked, like std::array; at() checks.
    [[nodiscard]] constexpr std::int64_t operator[](std::size_t axis) const noexcept {
        return extents_[axis];
    }
    [[nodiscard]] std::int64_t at(std::size_t axis) const {
        if (axis >= rank_) {
            throw shape_error(
                detail::message("dims ", to_string(), ": axis ", axis, " is out of range for rank ", rank_));
        }
        return extents_[axis];
    }
    [[nodiscard]] constexpr const std::int64_t* begin() const noexcept { return extents_.data(); }
    [[nodiscard]] constexpr const std::int64_t* end() const noexcept { return extents_.data() + rank_; }
    [[nodiscard]] constexpr std::span<const std::int64_t> extents() const noexcept {
        return {begin(), end()};
    }

    // The product of the extents (1 for a scalar); throws shape_error when it does not fit in 64 bits.
    [[nodiscard]] constexpr std::uint64_t element_count() const {
        const auto count = detail::checked_element_count(extents());
        if (!count) throw_element_count_overflow();
        return *count;
    }

    [[nodiscard]] std::string to_string() const { return detail::extents_to_string(extents()); }

    [[nodiscard]] friend constexpr bool operator==(const dims& a, const dims& b) noexcept {
        if (a.rank_ != b.rank_) return false;
        for (std::size_t axis = 0; axis < a.rank_; ++axis) {
            if (a.extents_[axis] != b.extents_[axis]) return false;
        }
        return true;
    }

private:
    template <std::integral Extent>
    constexpr void push_back(Extent extent) {
        if constexpr (std::is_signed_v<Extent>) {
            if (extent < 0) detail::throw_invalid_extent(rank_, static_cast<std::int64_t>(extent));
        } else if constexpr (sizeof(Extent) >= sizeof(std::int64_t)) {
            if (extent > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
                detail::throw_extent_too_large(rank_, static_cast<std::uint64_t>(extent));
            }
        }
        extents_[rank_++] = static_cast<std::int64_t>(extent);
    }

    [[noreturn]] void throw_element_count_overflow() const;

    std::array<std::int64_t, max_rank> extents_{};
    std::size_t rank_ = 0;
};

[[nodiscard]] inline std::string to_string(const dims& shape) {
    return shape.to_string();
}
inline std::ostream& operator<<(std::ostream& out, const dims& shape) {
    return out << shape.to_string();
}

// numpy broadcasting: the result of an elementwise op on operands of these shapes, or nullopt.
[[nodiscard]] constexpr std::optional<dims> broadcast(const dims& a, const dims& b) noexcept {
    std::array<std::int64_t, max_rank> extents{};
    const std::size_t rank = a.rank() > b.rank() ? a.rank() : b.rank();
    if (!detail::broadcast_extents(a.extents(), b.extents(), std::span(extents.data(), rank)))
        return std::nullopt;
    return dims(std::span<const std::int64_t>(extents.data(), rank));
}

// The same, for an op being built: throws shape_error naming the op, both shapes and the first axis (counted
// from the right, as numpy aligns them) that does not fit.
[[nodiscard]] dims broadcast_or_throw(std::string_view op, const dims& a, const dims& b);

// A static shape. Extents are >= 0, or dyn for one known only at run time.
template <std::int64_t... Extents>
struct shape {
    static_assert(
        ((Extents >= 0 || Extents == dyn) && ...),
        "anvil::shape: every extent must be >= 0, or anvil::dyn (-1) for one known only at run time");
    static_assert(sizeof...(Extents) <= max_rank, "anvil::shape: the rank exceeds anvil::max_rank (8)");

    static constexpr std::size_t rank = sizeof...(Extents);
    static constexpr std::array<std::int64_t, rank> extents{Extents...};
    // True when no extent is dyn: the shape is fully known at compile time.
    static constexpr bool is_static = ((Extents != dyn) && ...);

    [[nodiscard]] static constexpr std::uint64_t element_count() {
        static_assert(
            is_static,
            "anvil::shape: element_count() needs every extent at compile time, and this shape has a dyn "
            "extent; count the runtime dims instead");
        if constexpr (is_static) {
            static_assert(detail::element_count_fits<shape>::value,
                          "anvil::shape: the element count does not fit in 64 bits");
            return *detail::checked_element_count(std::span<const std::int64_t>(extents));
        } else {
            return 0;
        }
    }

    // Whether runtime extents fit this pattern: the same rank, and every static extent equal.
    [[nodiscard]] static constexpr bool matches(const dims& actual) noexcept {
        if (actual.rank() != rank) return false;
        for (std::size_t axis = 0; axis < rank; ++axis) {
            if (extents[axis] != dyn && extents[axis] != actual[axis]) return false;
        }
        return true;
    }

    // "[1, ?, 32]".
    [[nodiscard]] static std::string to_string() { return detail::extents_to_string(extents); }

    // A fully static shape converts to its dims; one with a dyn extent has no values to give.
    [[nodiscard]] constexpr operator dims() const {
        static_assert(
            is_static,
            "anvil::shape: a shape with a dyn extent has no values to convert to dims; build the dims "
            "from the runtime extents and check them with matches()");
        return dims(extents);
    }
};

template <std::int64_t... Extents>
std::ostream& operator<<(std::ostream& out, shape<Extents...>) {
    return out << shape<Extents...>::to_string();
}

template <class T>
inline constexpr bool is_shape_v = false;
template <std::int64_t... Extents>
inline constexpr bool is_shape_v<shape<Extents...>> = true;

// Broadcasting static shapes: broadcast_t<shape<8, 1, 3>, shape<4, 1>> is shape<8, 4, 3>. A dyn extent
// broadcasts against 1 to dyn and against n to n (whose runtime check is then that dyn is 1 or n). `type` is
// absent when the shapes do not broadcast, so the trait is SFINAE-friendly; ops use
// detail::checked_broadcast_t, which explains the failure instead.
template <class A, class B>
struct broadcast_shapes {};

namespace detail {

template <class A, class B>
struct static_broadcast {
    static constexpr std::size_t rank = A::rank > B::rank ? A::rank : B::rank;
    struct result_type {
        bool ok = false;
        std::array<std::int64_t, rank> extents{};
    };
    static constexpr result_type result = [] {
        result_type r;
        r.ok = broadcast_extents(A::extents, B::extents, r.extents);
        return r;
    }();
    template <std::size_t... Axes>
    static auto make(std::index_sequence<Axes...>) -> shape<result.extents[Axes]...>;
    using type = decltype(make(std::make_index_sequence<rank>{}));
};

}  // namespace detail

template <std::int64_t... ExtentsA, std::int64_t... ExtentsB>
requires(detail::static_broadcast<shape<ExtentsA...>, shape<ExtentsB...>>::result
             .ok) struct broadcast_shapes<shape<ExtentsA...>, shape<ExtentsB...>> {
    using type = typename detail::static_broadcast<shape<ExtentsA...>, shape<ExtentsB...>>::type;
};

template <class A, class B>
using broadcast_t = typename broadcast_shapes<A, B>::type;

namespace detail {

// Rules over static shapes, for shape_rule below. A dyn extent satisfies every rule here; the graph builder
// checks its runtime value.
template <class A, class B>
struct broadcastable : std::bool_constant<static_broadcast<A, B>::result.ok> {};

// Same rank, and equal extents wherever both are static.
template <class A, class B>
[[nodiscard]] constexpr bool static_compatible() noexcept {
    if constexpr (A::rank != B::rank) {
        return false;
    } else {
        for (std::size_t axis = 0; axis < A::rank; ++axis) {
            const std::int64_t a = A::extents[axis], b = B::extents[axis];
            if (a != b && a != dyn && b != dyn) return false;
        }
        return true;
    }
}

template <class A, class B>
struct compatible : std::bool_constant<static_compatible<A, B>()> {};

// The carrier of every compile-time shape check: `static_assert(shape_rule<Op, Rule, A, B>::holds, "...")`.
// When it fails, both GCC and Clang print this type, so the diagnostic names the op (Op, best an
// enumerator such as anvil::op::add), the rule (Rule, a trait over the shapes) and every shape. An op with
// its own rule writes a trait `template <class A, class B> struct inner_extents_match :
// std::bool_constant<...>` and asserts `shape_rule<Op, inner_extents_match, A, B>::holds` with a message
// saying what was expected.
template <auto Op, template <class...> class Rule, class... Shapes>
struct shape_rule {
    static_assert((is_shape_v<Shapes> && ...), "anvil: shape_rule takes anvil::shape<...> types");
    static constexpr bool holds = Rule<Shapes...>::value;
};

// The broadcast of two static shapes for an op, or a compile error that names the op and both shapes. On
// failure `type` is A, so the static_assert is the only error the user sees.
template <auto Op, class A, class B>
struct checked_broadcast {
    static_assert(
        shape_rule<Op, broadcastable, A, B>::holds,
        "anvil: these static shapes do not broadcast; shape_rule<op, broadcastable, shape<...>, "
        "shape<...>> names the op and both shapes (numpy rule: aligned from the right, each pair of "
        "extents must match or one must be 1; -1 is anvil::dyn)");
    using type = typename std::conditional_t<broadcastable<A, B>::value, static_broadcast<A, B>,
                                             std::type_identity<A>>::type;
};

template <auto Op, class A, class B>
using checked_broadcast_t = typename checked_broadcast<Op, A, B>::type;

template <auto Op, class A, class B>
constexpr void require_broadcastable() noexcept {
    static_cast<void>(sizeof(checked_broadcast<Op, A, B>));
}

template <auto Op, class A, class B>
constexpr void require_compatible() noexcept {
    static_assert(
        shape_rule<Op, compatible, A, B>::holds,
        "anvil: these static shapes differ; shape_rule<op, compatible, shape<...>, shape<...>> names the "
        "op and both shapes (expected the same rank and equal extents wherever both are static; -1 is "
        "anvil::dyn)");
}

// The runtime half of a static shape with dyn extents: throws shape_error naming `what` (an op, an input)
// when the extents do not fit the static shape.
template <class Shape>
void require_matches(std::string_view what, const dims& actual) {
    static_assert(is_shape_v<Shape>, "anvil: require_matches takes an anvil::shape<...>");
    if (!Shape::matches(actual)) {
        throw shape_error(
            message(what, ": shape ", actual, " does not match the static shape ", Shape::to_string()));
    }
}

}  // namespace detail
}  // namespace anvil

#if ANVIL_DEFINITIONS
#include "anvil/core/shape-inl.hpp"
#endif
