// anvil: overflow-checked sizes. Shapes and offsets come from files anvil must treat as hostile, so every
// product and sum that sizes memory goes through these and reports overflow instead of wrapping.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

namespace anvil::detail {

[[nodiscard]] constexpr std::optional<std::uint64_t> checked_add(std::uint64_t a, std::uint64_t b) noexcept {
    std::uint64_t sum = 0;
    if (__builtin_add_overflow(a, b, &sum)) return std::nullopt;
    return sum;
}

[[nodiscard]] constexpr std::optional<std::uint64_t> checked_mul(std::uint64_t a, std::uint64_t b) noexcept {
    std::uint64_t product = 0;
    if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
    return product;
}

// The number of elements of a shape; nullopt for a negative extent or a product past 2^64 - 1.
// An empty shape is a scalar: one element.
template <class Extent>
[[nodiscard]] constexpr std::optional<std::uint64_t> checked_element_count(
    std::span<const Extent> extents) noexcept {
    std::uint64_t count = 1;
    for (const Extent extent : extents) {
        if (extent < 0) return std::nullopt;
        const auto next = checked_mul(count, static_cast<std::uint64_t>(extent));
        if (!next) return std::nullopt;
        count = *next;
    }
    return count;
}

}  // namespace anvil::detail
