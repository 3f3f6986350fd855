// anvil: IEEE 754 binary16 ("half", safetensors F16). Conversions from float and double round to nearest,
// ties to even; overflow gives ±infinity; subnormal results are exact; NaN stays NaN, made quiet, with its
// sign and top payload bits kept (what x86 F16C and ARM's FCVT do, so the scalar and vector paths agree bit
// for bit). All constexpr, through std::bit_cast: integer arithmetic and one exact float subtraction, so no
// tables and no dependence on the floating-point environment (rounding mode, flush-to-zero).
#pragma once

#include <bit>
#include <compare>
#include <cstdint>
#include <limits>

namespace anvil {

static_assert(std::numeric_limits<float>::is_iec559 && sizeof(float) == 4,
              "anvil needs IEEE 754 binary32 float");
static_assert(std::numeric_limits<double>::is_iec559 && sizeof(double) == 8,
              "anvil needs IEEE 754 binary64 double");

namespace detail {

// significand >> shift, rounded to nearest, ties to even (1 <= shift, no overflow for significands below half
// the type's range). Adding just under half a unit, plus one when the kept part is odd, carries exactly when
// the dropped part is above half, or half with an odd kept part; no branch, so loops over it vectorise.
template <class Unsigned>
[[nodiscard]] constexpr Unsigned shift_right_nearest_even(Unsigned significand, Unsigned shift) noexcept {
    const Unsigned one = 1;
    const Unsigned odd = (significand >> shift) & one;
    return (significand + ((one << (shift - one)) - one) + odd) >> shift;
}

}  // namespace detail

// Round to nearest even, float -> half bits. Integer arithmetic only, so it ignores the floating-point
// environment as F16C's immediate rounding mode does; every case is computed and one selected, so that a loop
// over this function vectorises where the target has per-lane shifts (AVX2, NEON, SVE, RVV).
[[nodiscard]] constexpr std::uint16_t float_to_half_bits(float value) noexcept {
    const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
    const std::uint32_t sign = (bits >> 16) & 0x8000u;
    const std::uint32_t magnitude = bits & 0x7FFFFFFFu;

    // NaN: quiet bit set, top 9 payload bits kept (the low 13 cannot be represented).
    const std::uint32_t nan = 0x7E00u | ((magnitude >> 13) & 0x03FFu);
    // Normal: rebias the exponent (127 -> 15) and round away the low 13 mantissa bits; a carry out of the
    // mantissa correctly bumps the exponent, up to infinity.
    const std::uint32_t normal = (magnitude - 0x38000000u + 0x0FFFu + ((magnitude >> 13) & 1u)) >> 13;
    // Below 2^-14: the value in units of 2^-24 is significand >> (126 - exponent). Clamping the shift to 25
    // rounds everything up to 2^-25 (a tie, to even zero) to zero, float subnormals included.
    const auto exponent = static_cast<std::int32_t>(magnitude >> 23);
    const std::int32_t shift = 126 - exponent < 14 ? 14 : (126 - exponent > 25 ? 25 : 126 - exponent);
    const std::uint32_t significand = (magnitude & 0x007FFFFFu) | 0x00800000u;
    const std::uint32_t subnormal =
        detail::shift_right_nearest_even(significand, static_cast<std::uint32_t>(shift));

    const std::uint32_t result = magnitude > 0x7F800000u    ? nan
                                 : magnitude >= 0x477FF000u ? 0x7C00u  // 65520 = 65504 + half an ulp and up
                                 : magnitude >= 0x38800000u ? normal
                                                            : subnormal;
    return static_cast<std::uint16_t>(sign | result);
}

// Round to nearest even, double -> half bits, in one rounding (double -> float -> half would round twice).
[[nodiscard]] constexpr std::uint16_t double_to_half_bits(double value) noexcept {
    const std::uint64_t bits = std::bit_cast<std::uint64_t>(value);
    const auto sign = static_cast<std::uint32_t>((bits >> 48) & 0x8000u);
    const std::uint64_t magnitude = bits & 0x7FFFFFFFFFFFFFFFull;

    std::uint64_t result = 0;
    if (magnitude > 0x7FF0000000000000ull) {
        result = 0x7E00u | ((magnitude >> 42) & 0x03FFu);
    } else if (magnitude >= 0x40EFFE0000000000ull) {  // 65520
        result = 0x7C00u;
    } else if (magnitude >= 0x3F10000000000000ull) {  // 2^-14
        const std::uint64_t odd = (magnitude >> 42) & 1u;
        result = (magnitude - 0x3F00000000000000ull + 0x01FFFFFFFFFFull + odd) >> 42;
    } else if (magnitude > 0x3E60000000000000ull) {  // 2^-25
        const std::uint64_t exponent = magnitude >> 52;
        const std::uint64_t significand = (magnitude & 0x000FFFFFFFFFFFFFull) | 0x0010000000000000ull;
        result = detail::shift_right_nearest_even(significand, std::uint64_t{1051} - exponent);  // 43 .. 53
    }
    return static_cast<std::uint16_t>(sign | result);
}

// Exact: every half is a float. A signalling NaN comes back quiet, as F16C's vcvtph2ps returns it. All three
// cases are computed and one selected, so that a loop over this function vectorises.
[[nodiscard]] constexpr float half_bits_to_float(std::uint16_t bits) noexcept {
    const std::uint32_t sign = (bits & 0x8000u) << 16;
    const std::uint32_t magnitude = bits & 0x7FFFu;
    const std::uint32_t normal = (magnitude << 13) + 0x38000000u;  // rebias the exponent 15 -> 127
    // Infinity and NaN: exponent 31 -> 255, NaN made quiet.
    const std::uint32_t special =
        ((magnitude << 13) + 0x70000000u) | (magnitude > 0x7C00u ? 0x00400000u : 0u);
    // Subnormal (or zero): m * 2^-24, computed exactly as (0.5 + m * 2^-24) - 0.5 with no rounding.
    const std::uint32_t subnormal =
        std::bit_cast<std::uint32_t>(std::bit_cast<float>(0x3F000000u | magnitude) - 0.5f);
    // Masks, not branches: GCC will not if-convert a float subtraction (it might trap), so it would not
    // vectorise.
    const std::uint32_t is_special = 0u - static_cast<std::uint32_t>(magnitude >= 0x7C00u);
    const std::uint32_t is_subnormal = 0u - static_cast<std::uint32_t>(magnitude < 0x0400u);
    const std::uint32_t is_normal = ~(is_special | is_subnormal);
    return std::bit_cast<float>(sign | (special & is_special) | (normal & is_normal) |
                                (subnormal & is_subnormal));
}

// A 16-bit IEEE half. Construction from float rounds (explicitly: it loses precision); reading it as float is
// exact and implicit. Comparisons follow IEEE: NaN is unordered, +0 == -0.
struct half {
    std::uint16_t bits;

    half() = default;
    constexpr explicit half(float value) noexcept : bits(float_to_half_bits(value)) {}

    [[nodiscard]] static constexpr half from_bits(std::uint16_t raw) noexcept {
        half result;
        result.bits = raw;
        return result;
    }

    [[nodiscard]] constexpr operator float() const noexcept { return half_bits_to_float(bits); }

    [[nodiscard]] friend constexpr bool operator==(half a, half b) noexcept {
        return static_cast<float>(a) == static_cast<float>(b);
    }
    [[nodiscard]] friend constexpr std::partial_ordering operator<=>(half a, half b) noexcept {
        return static_cast<float>(a) <=> static_cast<float>(b);
    }
};

static_assert(sizeof(half) == 2 && alignof(half) == 2, "anvil::half must be exactly 16 bits");

[[nodiscard]] constexpr bool isnan(half value) noexcept {
    return (value.bits & 0x7FFFu) > 0x7C00u;
}
[[nodiscard]] constexpr bool isinf(half value) noexcept {
    return (value.bits & 0x7FFFu) == 0x7C00u;
}
[[nodiscard]] constexpr bool isfinite(half value) noexcept {
    return (value.bits & 0x7C00u) != 0x7C00u;
}

}  // namespace anvil

// libstdc++ declares numeric_limits a struct, libc++ a class; the tag cannot match both.
#if defined(__clang__)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wmismatched-tags"
#endif
namespace std {
template <>
struct numeric_limits<anvil::half> {
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
    static constexpr bool is_iec559 = true;
    static constexpr bool is_bounded = true;
    static constexpr bool is_modulo = false;
    static constexpr int digits = 11;
    static constexpr int digits10 = 3;
    static constexpr int max_digits10 = 5;
    static constexpr int radix = 2;
    static constexpr int min_exponent = -13;
    static constexpr int min_exponent10 = -4;
    static constexpr int max_exponent = 16;
    static constexpr int max_exponent10 = 4;
    static constexpr bool traps = false;
    static constexpr bool tinyness_before = false;

    static constexpr anvil::half min() noexcept {
        return anvil::half::from_bits(0x0400);
    }
    static constexpr anvil::half lowest() noexcept {
        return anvil::half::from_bits(0xFBFF);
    }
    static constexpr anvil::half max() noexcept {
        return anvil::half::from_bits(0x7BFF);
    }
    static constexpr anvil::half epsilon() noexcept {
        return anvil::half::from_bits(0x1400);
    }
    static constexpr anvil::half round_error() noexcept {
        return anvil::half::from_bits(0x3800);
    }
    static constexpr anvil::half infinity() noexcept {
        return anvil::half::from_bits(0x7C00);
    }
    static constexpr anvil::half quiet_NaN() noexcept {
        return anvil::half::from_bits(0x7E00);
    }
    static constexpr anvil::half signaling_NaN() noexcept {
        return anvil::half::from_bits(0x7D00);
    }
    static constexpr anvil::half denorm_min() noexcept {
        return anvil::half::from_bits(0x0001);
    }
};
}  // namespace std
#if defined(__clang__)
#pragma clang diagnostic pop
#endif
