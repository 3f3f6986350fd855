// anvil: shape's definitions (see shape.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "anvil/core/error.hpp"
#include "anvil/core/shape.hpp"

namespace anvil {
namespace detail {

ANVIL_INLINE std::string extents_to_string(std::span<const std::int64_t> extents, bool dyn_as_any) {
    constexpr std::size_t shown = 16;
    std::string text = "[";
    for (std::size_t axis = 0; axis < extents.size() && axis < shown; ++axis) {
        if (axis > 0) text += ", ";
        text += dyn_as_any && extents[axis] == dyn ? std::string("?") : std::to_string(extents[axis]);
    }
    if (extents.size() > shown) text += message(", ... (", extents.size(), " dims)");
    return text + "]";
}

ANVIL_INLINE void throw_invalid_extent(std::size_t axis, std::int64_t extent) {
    throw shape_error(message("dims: extent ", extent, " at axis ", axis,
                              " is negative; extents must be >= 0 (anvil::dyn is for static shapes only)"));
}

ANVIL_INLINE void throw_extent_too_large(std::size_t axis, std::uint64_t extent) {
    throw shape_error(message("dims: extent ", extent, " at axis ", axis, " does not fit in int64"));
}

ANVIL_INLINE void throw_rank_too_large(std::size_t rank) {
    throw shape_error(message("dims: rank ", rank, " exceeds anvil's maximum rank of ", max_rank));
}

}  // namespace detail

ANVIL_INLINE void dims::throw_element_count_overflow() const {
    throw shape_error(detail::message("dims ", to_string(), ": the element count does not fit in 64 bits"));
}

ANVIL_INLINE dims broadcast_or_throw(std::string_view op, const dims& a, const dims& b) {
    if (auto result = broadcast(a, b)) return *result;
    const std::size_t rank = a.rank() > b.rank() ? a.rank() : b.rank();
    std::size_t from_right = 1;
    for (; from_right <= rank; ++from_right) {
        const std::int64_t extent_a = from_right <= a.rank() ? a[a.rank() - from_right] : 1;
        const std::int64_t extent_b = from_right <= b.rank() ? b[b.rank() - from_right] : 1;
        if (!detail::broadcast_extent(extent_a, extent_b)) {
            throw shape_error(detail::message(op, ": shapes ", a, " and ", b, " do not broadcast (axis -",
                                              from_right, ": ", extent_a, " vs ", extent_b,
                                              "; aligned from the right, extents must match or be 1)"));
        }
    }
    throw shape_error(detail::message(op, ": shapes ", a, " and ", b, " do not broadcast"));  // unreachable
}

}  // namespace anvil
