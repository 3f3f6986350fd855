// anvil: bfloat16 (safetensors BF16), the top 16 bits of an IEEE float. Conversion from float rounds to
// nearest, ties to even (as PyTorch's c10::BFloat16 does); a NaN stays NaN — quiet, sign and top payload bits
// kept — and never rounds into infinity. Conversion to float is a shift, exact.
#pragma once

#include <bit>
#include <compare>
#include <cstdint>
#include <limits>

namespace anvil {

[[nodiscard]] constexpr std::uint16_t float_to_bfloat16_bits(float value) noexcept {
    const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
    // The rounding add below would carry a NaN's payload into the exponent (0x7FFFFFFF -> -0), so NaN is
    // handled first. Finite values above the largest bfloat16 round correctly into infinity.
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
    const std::uint32_t odd = (bits >> 16) & 1u;
    return static_cast<std::uint16_t>((bits + 0x7FFFu + odd) >> 16);
}

[[nodiscard]] constexpr float bfloat16_bits_to_float(std::uint16_t bits) noexcept {
    return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

// A 16-bit brain float. Construction from float rounds (explicitly); reading it as float is exact and
// implicit. Comparisons follow IEEE: NaN is unordered, +0 == -0.
struct bfloat16 {
    std::uint16_t bits;

    bfloat16() = default;
    constexpr explicit bfloat16(float value) noexcept : bits(float_to_bfloat16_bits(value)) {}

    [[nodiscard]] static constexpr bfloat16 from_bits(std::uint16_t raw) noexcept {
        bfloat16 result;
        result.bits = raw;
        return result;
    }

    [[nodiscard]] constexpr operator float() const noexcept { return bfloat16_bits_to_float(bits); }

    [[nodiscard]] friend constexpr bool operator==(bfloat16 a, bfloat16 b) noexcept {
        return static_cast<float>(a) == static_cast<float>(b);
    }
    [[nodiscard]] friend constexpr std::partial_ordering operator<=>(bfloat16 a, bfloat16 b) noexcept {
        return static_cast<float>(a) <=> static_cast<float>(b);
    }
};

static_assert(sizeof(bfloat16) == 2 && alignof(bfloat16) == 2, "anvil::bfloat16 must be exactly 16 bits");

[[nodiscard]] constexpr bool isnan(bfloat16 value) noexcept {
    return (value.bits & 0x7FFFu) > 0x7F80u;
}
[[nodiscard]] constexpr bool isinf(bfloat16 value) noexcept {
    return (value.bits & 0x7FFFu) == 0x7F80u;
}
[[nodiscard]] constexpr bool isfinite(bfloat16 value) noexcept {
    return (value.bits & 0x7F80u) != 0x7F80u;
}

}  // namespace anvil

// libstdc++ declares numeric_limits a struct, libc++ a class; the tag cannot match both.
#if defined(__clang__)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wmismatched-tags"
#endif
namespace std {
template <>
struct numeric_limits<anvil::bfloat16> {
    static constexpr bool is_specialized = true;
    static constexpr bool is_signed = true;
    static constexpr bool is_integer = false;
    static constexpr bool is_exact = false;
    static constexpr bool has_infinity = true;
    static constexpr bool has_quiet_NaN = true;
    static constexpr bool has_signaling_NaN = true;
#if __cplusplus < 202302L  // deprecated in C++23
    static constexpr std::float_denorm_style has_denorm = std::denorm_present;
    static constexpr bool has_denorm_loss = false;
#endif
    static constexpr std::float_round_style round_style = std::round_to_nearest;
    static constexpr bool is_iec559 = false;  // not one of IEEE 754's interchange formats
    static constexpr bool is_bounded = true;
    static constexpr bool is_modulo = false;
    static constexpr int digits = 8;
    static constexpr int digits10 = 2;
    static constexpr int max_digits10 = 4;
    static constexpr int radix = 2;
    static constexpr int min_exponent = -125;
    static constexpr int min_exponent10 = -37;
    static constexpr int max_exponent = 128;
    static constexpr int max_exponent10 = 38;
    static constexpr bool traps = false;
    static constexpr bool tinyness_before = false;

    static constexpr anvil::bfloat16 min() noexcept {
        return anvil::bfloat16::from_bits(0x0080);
    }
    static constexpr anvil::bfloat16 lowest() noexcept {
        return anvil::bfloat16::from_bits(0xFF7F);
    }
    static constexpr anvil::bfloat16 max() noexcept {
        return anvil::bfloat16::from_bits(0x7F7F);
    }
    static constexpr anvil::bfloat16 epsilon() noexcept {
        return anvil::bfloat16::from_bits(0x3C00);
    }
    static constexpr anvil::bfloat16 round_error() noexcept {
        return anvil::bfloat16::from_bits(0x3F00);
    }
    static constexpr anvil::bfloat16 infinity() noexcept {
        return anvil::bfloat16::from_bits(0x7F80);
    }
    static constexpr anvil::bfloat16 quiet_NaN() noexcept {
        return anvil::bfloat16::from_bits(0x7FC0);
    }
    static constexpr anvil::bfloat16 signaling_NaN() noexcept {
        return anvil::bfloat16::from_bits(0x7FA0);
    }
    static constexpr anvil::bfloat16 denorm_min() noexcept {
        return anvil::bfloat16::from_bits(0x0001);
    }
};
}  // namespace std
#if defined(__clang__)
#pragma clang diagnostic pop
#endif
