// anvil: the two OCP 8-bit floats safetensors stores (F8_E4M3, F8_E5M2), as raw bytes. Decoding to float is
// exact; encoding from float rounds to nearest, ties to even, with PyTorch's overflow rules (see each
// encoder).
//   e4m3fn: S.EEEE.MMM, bias 7, no infinities, S.1111.111 is NaN; max 448, min subnormal 2^-9.
//   e5m2:   S.EEEEE.MM, bias 15, IEEE-like (it is the top byte of a half); max 57344, min subnormal 2^-16.
#pragma once

#include <bit>
#include <cstdint>

#include "anvil/core/half.hpp"

namespace anvil {

[[nodiscard]] constexpr float float8_e4m3_bits_to_float(std::uint8_t bits) noexcept {
    const std::uint32_t sign = (bits & 0x80u) << 24;
    const std::uint32_t magnitude = bits & 0x7Fu;
    if (magnitude == 0x7Fu) return std::bit_cast<float>(sign | 0x7FC00000u);
    if (magnitude >= 0x08u)
        return std::bit_cast<float>(sign | ((magnitude << 20) + 0x3C000000u));  // 7 -> 127
    const float subnormal = static_cast<float>(magnitude) * 0x1p-9f;            // exact
    return std::bit_cast<float>(sign | std::bit_cast<std::uint32_t>(subnormal));
}

[[nodiscard]] constexpr float float8_e5m2_bits_to_float(std::uint8_t bits) noexcept {
    return half_bits_to_float(static_cast<std::uint16_t>(bits << 8));
}

// Round to nearest even. Overflow follows PyTorch's `tensor.to(torch.float8_e4m3fn)` (c10's
// fp8e4m3fn_from_fp32_value), which does NOT saturate: magnitudes above 464 (the midpoint between 448 and the
// 480 the format cannot hold), infinities and NaNs all become NaN (0x7F with the input's sign bit); 464
// itself ties to even, down to 448.
[[nodiscard]] constexpr std::uint8_t float_to_float8_e4m3_bits(float value) noexcept {
    const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
    const std::uint32_t sign = (bits >> 24) & 0x80u;
    const std::uint32_t magnitude = bits & 0x7FFFFFFFu;
    std::uint32_t result = 0;
    if (magnitude >= 0x43F00000u) {  // 480, infinity, NaN
        result = 0x7Fu;
    } else if (magnitude >= 0x3C800000u) {  // 2^-6, the smallest normal; (464, 480) rounds up into 0x7F = NaN
        const std::uint32_t odd = (magnitude >> 20) & 1u;
        result = (magnitude - 0x3C000000u + 0x0007FFFFu + odd) >> 20;
    } else if (magnitude > 0x3A800000u) {  // above 2^-10, half the smallest subnormal
        const std::uint32_t significand = (magnitude & 0x007FFFFFu) | 0x00800000u;
        result = detail::shift_right_nearest_even(significand, 141u - (magnitude >> 23));
    }
    return static_cast<std::uint8_t>(sign | result);
}

// Round to nearest even, IEEE overflow: from 61440 (the midpoint between 57344 and 2^16) up, ±infinity.
// NaN becomes 0x7F with the input's sign bit, as in PyTorch's fp8e5m2_from_fp32_value.
[[nodiscard]] constexpr std::uint8_t float_to_float8_e5m2_bits(float value) noexcept {
    const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
    const std::uint32_t sign = (bits >> 24) & 0x80u;
    const std::uint32_t magnitude = bits & 0x7FFFFFFFu;
    std::uint32_t result = 0;
    if (magnitude > 0x7F800000u) {
        result = 0x7Fu;
    } else if (magnitude >= 0x47700000u) {  // 61440
        result = 0x7Cu;
    } else if (magnitude >= 0x38800000u) {  // 2^-14, the smallest normal
        const std::uint32_t odd = (magnitude >> 21) & 1u;
        result = (magnitude - 0x38000000u + 0x000FFFFFu + odd) >> 21;
    } else if (magnitude > 0x37000000u) {  // above 2^-17, half the smallest subnormal
        const std::uint32_t significand = (magnitude & 0x007FFFFFu) | 0x00800000u;
        result = detail::shift_right_nearest_even(significand, 134u - (magnitude >> 23));
    }
    return static_cast<std::uint8_t>(sign | result);
}

}  // namespace anvil
