// half, bfloat16 and fp8: every bit pattern against the formula of its format, round-to-nearest-even at every
// midpoint, the overflow and underflow edges, and the hardware's own conversions (x86's F16C, arm64's FCVT).
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

// A namespace of its own, so the test files can be compiled together (a unity build).
namespace test_half {

namespace {

constexpr double infinity = std::numeric_limits<double>::infinity();
constexpr double not_a_number = std::numeric_limits<double>::quiet_NaN();

std::uint32_t bits_of(float value) {
    return std::bit_cast<std::uint32_t>(value);
}
float float_from(std::uint32_t bits) {
    return std::bit_cast<float>(bits);
}

// Counts mismatches in a sweep and keeps the first few, so a broken conversion fails with examples instead of
// tens of thousands of lines.
class mismatches {
public:
    template <class... Parts>
    void add(const Parts&... parts) {
        if (count_++ < 8) {
            std::ostringstream line;
            line << std::hex;
            (line << ... << parts);
            examples_ += line.str() + "\n";
        }
    }
    [[nodiscard]] std::size_t count() const { return count_; }
    [[nodiscard]] const std::string& examples() const { return examples_; }

private:
    std::size_t count_ = 0;
    std::string examples_;
};

#define CHECK_NO_MISMATCHES(log)    \
    do {                            \
        INFO((log).examples());     \
        CHECK((log).count() == 0u); \
    } while (false)

// The value of a binary floating-point format with `mantissa_bits` and exponent `bias`, from the textbook
// formula: sign * 2^(e - bias) * (1 + m / 2^mantissa_bits), subnormals sign * 2^(1 - bias) * m /
// 2^mantissa_bits.
double formula_value(std::uint32_t sign, std::uint32_t exponent, std::uint32_t mantissa, int mantissa_bits,
                     int bias) {
    const double scale = std::ldexp(1.0, -mantissa_bits);
    const double magnitude = exponent == 0
                                 ? std::ldexp(mantissa * scale, 1 - bias)
                                 : std::ldexp(1.0 + mantissa * scale, static_cast<int>(exponent) - bias);
    return sign != 0 ? -magnitude : magnitude;
}

double half_formula(std::uint16_t bits) {
    const std::uint32_t sign = bits >> 15, exponent = (bits >> 10) & 0x1Fu, mantissa = bits & 0x3FFu;
    if (exponent == 0x1F) return mantissa != 0 ? not_a_number : (sign != 0 ? -infinity : infinity);
    return formula_value(sign, exponent, mantissa, 10, 15);
}

double bfloat16_formula(std::uint16_t bits) {
    const std::uint32_t sign = bits >> 15, exponent = (bits >> 7) & 0xFFu, mantissa = bits & 0x7Fu;
    if (exponent == 0xFF) return mantissa != 0 ? not_a_number : (sign != 0 ? -infinity : infinity);
    return formula_value(sign, exponent, mantissa, 7, 127);
}

double e4m3_formula(std::uint8_t bits) {
    const std::uint32_t sign = bits >> 7u, exponent = (bits >> 3u) & 0xFu, mantissa = bits & 0x7u;
    if (exponent == 0xF && mantissa == 0x7) return not_a_number;
    return formula_value(sign, exponent, mantissa, 3, 7);
}

double e5m2_formula(std::uint8_t bits) {
    const std::uint32_t sign = bits >> 7u, exponent = (bits >> 2u) & 0x1Fu, mantissa = bits & 0x3u;
    if (exponent == 0x1F) return mantissa != 0 ? not_a_number : (sign != 0 ? -infinity : infinity);
    return formula_value(sign, exponent, mantissa, 2, 15);
}

// Round-to-nearest-even by search. `magnitudes[k]` is the value of positive pattern k for k = 0 .. max + 1,
// where max is the largest finite pattern and entry max + 1 is where the format overflows to (2^16 for half,
// 480 for e4m3fn whose pattern 0x7F is NaN). Magnitudes from that value up give pattern max + 1.
std::uint32_t reference_round(double value, const std::vector<double>& magnitudes, std::uint32_t sign_bit) {
    const double magnitude = std::fabs(value);
    const std::uint32_t sign = std::signbit(value) ? sign_bit : 0u;
    const auto above = std::upper_bound(magnitudes.begin(), magnitudes.end(), magnitude);
    if (above == magnitudes.end()) return sign | static_cast<std::uint32_t>(magnitudes.size() - 1);
    const auto high = static_cast<std::uint32_t>(above - magnitudes.begin());
    const std::uint32_t low = high - 1;
    // Both differences are exact: the value lies between two neighbours within a factor of two (Sterbenz).
    const double to_low = magnitude - magnitudes[low], to_high = magnitudes[high] - magnitude;
    if (to_low < to_high) return sign | low;
    if (to_high < to_low) return sign | high;
    return sign | ((low & 1u) == 0 ? low : high);
}

template <class Formula>
std::vector<double> magnitude_table(Formula formula, std::uint32_t largest_finite, double overflow_value) {
    std::vector<double> table;
    for (std::uint32_t bits = 0; bits <= largest_finite; ++bits)
        table.push_back(formula(bits));
    table.push_back(overflow_value);
    return table;
}

const std::vector<double>& half_magnitudes() {
    static const auto table = magnitude_table(
        [](std::uint32_t b) { return half_formula(static_cast<std::uint16_t>(b)); }, 0x7BFF, 65536.0);
    return table;
}

const std::vector<double>& bfloat16_magnitudes() {
    static const auto table =
        magnitude_table([](std::uint32_t b) { return bfloat16_formula(static_cast<std::uint16_t>(b)); },
                        0x7F7F, std::ldexp(1.0, 128));
    return table;
}

bool is_half_nan(std::uint16_t bits) {
    return (bits & 0x7C00u) == 0x7C00u && (bits & 0x03FFu) != 0;
}
bool is_bfloat16_nan(std::uint16_t bits) {
    return (bits & 0x7F80u) == 0x7F80u && (bits & 0x007Fu) != 0;
}

// Finite, exactly representable float of a double that must be one.
float exact_float(double value) {
    const auto result = static_cast<float>(value);
    REQUIRE(static_cast<double>(result) == value);
    return result;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------- half

TEST_CASE("half: every one of the 65,536 patterns converts to float as the formula says") {
    mismatches log;
    for (std::uint32_t pattern = 0; pattern <= 0xFFFF; ++pattern) {
        const auto bits = static_cast<std::uint16_t>(pattern);
        const float converted = anvil::half_bits_to_float(bits);
        const double expected = half_formula(bits);
        if (std::isnan(expected)) {
            // NaN: quiet, sign and the 10 payload bits kept at the top of float's mantissa.
            const std::uint32_t want = (bits & 0x8000u) << 16 | 0x7FC00000u | (bits & 0x3FFu) << 13;
            if (bits_of(converted) != want) log.add("half ", pattern, " -> float ", bits_of(converted));
        } else if (static_cast<double>(converted) != expected ||
                   std::signbit(converted) != std::signbit(expected)) {
            log.add("half ", pattern, " -> ", converted, " but the formula gives ", expected);
        }
    }
    CHECK_NO_MISMATCHES(log);
}

TEST_CASE("half: float -> half gives back every pattern; NaNs come back quiet with sign and payload") {
    mismatches log;
    for (std::uint32_t pattern = 0; pattern <= 0xFFFF; ++pattern) {
        const auto bits = static_cast<std::uint16_t>(pattern);
        const std::uint16_t back = anvil::float_to_half_bits(anvil::half_bits_to_float(bits));
        const std::uint16_t want = is_half_nan(bits) ? static_cast<std::uint16_t>(bits | 0x0200u) : bits;
        if (back != want) log.add("half ", pattern, " -> float -> half ", back);
        const std::uint16_t via_double =
            anvil::double_to_half_bits(static_cast<double>(anvil::half_bits_to_float(bits)));
        if (via_double != want) log.add("half ", pattern, " -> double -> half ", via_double);
    }
    CHECK_NO_MISMATCHES(log);
}

TEST_CASE("half: midpoints between adjacent halves round to the even one, one float ulp off to the nearer") {
    mismatches log;
    const auto& magnitudes = half_magnitudes();
    for (const std::uint16_t sign : {std::uint16_t{0}, std::uint16_t{0x8000}}) {
        // Pairs up to (65504, 2^16): the last midpoint, 65520, is the overflow threshold.
        for (std::uint32_t low = 0; low <= 0x7BFF; ++low) {
            const std::uint32_t high = low + 1;
            const double midpoint = (magnitudes[low] + magnitudes[high]) / 2 * (sign != 0 ? -1 : 1);
            const float middle = exact_float(midpoint);
            const std::uint32_t even = (low & 1u) == 0 ? low : high;
            const float outward = std::nextafter(middle, sign != 0 ? -HUGE_VALF : HUGE_VALF);
            const float inward = std::nextafter(middle, 0.0f);
            if (anvil::float_to_half_bits(middle) != (sign | even))
                log.add("midpoint ", middle, " not to ", even);
            if (anvil::float_to_half_bits(outward) != (sign | high))
                log.add("above ", middle, " not to ", high);
            if (anvil::float_to_half_bits(inward) != (sign | low)) log.add("below ", middle, " not to ", low);
            // From double: the same, and a double just past the midpoint that a float could not tell apart
            // from it (double -> float -> half would round twice and land on the even side).
            const double nudge = std::ldexp(std::fabs(midpoint), -40);
            const double past = midpoint + (sign != 0 ? -nudge : nudge);
            if (anvil::double_to_half_bits(midpoint) != (sign | even)) log.add("double midpoint ", midpoint);
            if (anvil::double_to_half_bits(past) != (sign | high)) log.add("double past ", midpoint);
            if (anvil::double_to_half_bits(midpoint - (past - midpoint)) != (sign | low)) {
                log.add("double before ", midpoint);
            }
        }
    }
    CHECK_NO_MISMATCHES(log);
}

TEST_CASE("half: overflow, underflow and subnormal edges") {
    using anvil::float_to_half_bits;
    CHECK(float_to_half_bits(65504.0f) == 0x7BFF);
    CHECK(float_to_half_bits(65520.0f) == 0x7C00);
    CHECK(float_to_half_bits(std::nextafter(65520.0f, 0.0f)) == 0x7BFF);
    CHECK(float_to_half_bits(-65520.0f) == 0xFC00);
    CHECK(float_to_half_bits(std::numeric_limits<float>::max()) == 0x7C00);
    CHECK(float_to_half_bits(HUGE_VALF) == 0x7C00);
    CHECK(float_to_half_bits(-HUGE_VALF) == 0xFC00);
    CHECK(anvil::double_to_half_bits(65520.0) == 0x7C00);
    CHECK(anvil::double_to_half_bits(std::nextafter(65520.0, 0.0)) == 0x7BFF);
    CHECK(anvil::double_to_half_bits(1e300) == 0x7C00);

    CHECK(float_to_half_bits(0x1p-14f) == 0x0400);             // smallest normal
    CHECK(float_to_half_bits(0x1p-14f - 0x1p-24f) == 0x03FF);  // largest subnormal
    CHECK(float_to_half_bits(0x1p-14f - 0x1p-25f) == 0x0400);  // its midpoint to 2^-14: even is 0x400
    CHECK(float_to_half_bits(0x1p-24f) == 0x0001);             // smallest subnormal
    CHECK(float_to_half_bits(0x1p-25f) == 0x0000);             // half of it: ties to even zero
    CHECK(float_to_half_bits(std::nextafter(0x1p-25f, 1.0f)) == 0x0001);
    CHECK(float_to_half_bits(0x1.8p-24f) == 0x0002);  // 1.5 units: tie, even is 2
    CHECK(float_to_half_bits(0x1.8p-25f) == 0x0001);  // 0.75 units
    CHECK(float_to_half_bits(-0x1p-26f) == 0x8000);   // underflow keeps the sign
    CHECK(float_to_half_bits(std::numeric_limits<float>::denorm_min()) == 0x0000);
    CHECK(float_to_half_bits(-std::numeric_limits<float>::denorm_min()) == 0x8000);
    CHECK(float_to_half_bits(-0.0f) == 0x8000);
    CHECK(anvil::double_to_half_bits(0x1p-25) == 0x0000);
    CHECK(anvil::double_to_half_bits(std::nextafter(0x1p-25, 1.0)) == 0x0001);
    CHECK(anvil::double_to_half_bits(std::numeric_limits<double>::denorm_min()) == 0x0000);
    CHECK(anvil::double_to_half_bits(-0.0) == 0x8000);

    CHECK(anvil::half_bits_to_float(0x0001) == 0x1p-24f);
    CHECK(anvil::half_bits_to_float(0x03FF) == 1023 * 0x1p-24f);
    CHECK(anvil::half_bits_to_float(0x7BFF) == 65504.0f);
    CHECK(anvil::half_bits_to_float(0xFC00) == -HUGE_VALF);
}

TEST_CASE("half: NaNs stay NaN, made quiet, keeping the sign and the top payload bits") {
    using anvil::float_to_half_bits;
    CHECK(float_to_half_bits(float_from(0x7FC00000u)) == 0x7E00);
    CHECK(float_to_half_bits(float_from(0xFFC00000u)) == 0xFE00);
    CHECK(float_to_half_bits(float_from(0x7F800001u)) == 0x7E00);  // signalling, payload below half's reach
    CHECK(float_to_half_bits(float_from(0x7FA00000u)) == 0x7F00);  // signalling, top payload bit 21 kept
    CHECK(float_to_half_bits(float_from(0x7FFFFFFFu)) == 0x7FFF);
    CHECK(anvil::double_to_half_bits(-std::numeric_limits<double>::quiet_NaN()) == 0xFE00);
    CHECK(anvil::double_to_half_bits(std::bit_cast<double>(0x7FF0000000000001ull)) == 0x7E00);
    // Every float NaN payload in the top 10 bits, both signs: NaN out, never infinity.
    mismatches log;
    for (std::uint32_t payload = 1; payload < (1u << 23); payload += 97) {
        for (const std::uint32_t sign : {0u, 0x80000000u}) {
            const std::uint16_t result = float_to_half_bits(float_from(sign | 0x7F800000u | payload));
            const auto want = static_cast<std::uint16_t>(sign >> 16 | 0x7E00u | payload >> 13);
            if (result != want) log.add("float NaN ", sign | 0x7F800000u | payload, " -> ", result);
        }
    }
    CHECK_NO_MISMATCHES(log);
}

TEST_CASE("half: random floats and doubles round as a search over all halves says") {
    std::mt19937_64 random(20240611);
    mismatches log;
    const auto& magnitudes = half_magnitudes();
    for (int i = 0; i < 300000; ++i) {
        // Uniform bit patterns mostly over- or underflow; half of the samples are scaled into half's range.
        auto bits = static_cast<std::uint32_t>(random());
        if (i % 2 == 0) bits = (bits & 0x807FFFFFu) | ((100u + (bits >> 23) % 45u) << 23);
        const float value = float_from(bits);
        if (std::isnan(value)) continue;
        const std::uint32_t want = reference_round(value, magnitudes, 0x8000u);
        if (anvil::float_to_half_bits(value) != want) log.add("float ", bits, " -> not ", want);
        const double wide =
            std::ldexp(static_cast<double>(random() >> 11), -53 + static_cast<int>(random() % 45) - 28);
        const std::uint32_t want_wide = reference_round(wide, magnitudes, 0x8000u);
        if (anvil::double_to_half_bits(wide) != want_wide) log.add("double ", wide, " -> not ", want_wide);
    }
    CHECK_NO_MISMATCHES(log);
}

TEST_CASE("half: the value type converts, compares as IEEE and has its numeric_limits") {
    static_assert(std::is_trivially_copyable_v<anvil::half> && sizeof(anvil::half) == 2);
    static_assert(anvil::half(1.0f).bits == 0x3C00);  // usable at compile time
    static_assert(static_cast<float>(anvil::half::from_bits(0xC000)) == -2.0f);
    const anvil::half third(1.0f / 3.0f);
    CHECK(third.bits == 0x3555);  // 1/3 to nearest: 0x3555 = 0.33325195
    const float widened = third;
    CHECK(widened == 0.33325195f);
    CHECK(anvil::half(0.0f) == anvil::half(-0.0f));
    CHECK(anvil::half(1.0f) < anvil::half(2.0f));
    const auto nan = std::numeric_limits<anvil::half>::quiet_NaN();
    CHECK_FALSE(nan == nan);
    CHECK_FALSE(nan < anvil::half(0.0f));
    CHECK(anvil::isnan(nan));
    CHECK(anvil::isinf(std::numeric_limits<anvil::half>::infinity()));
    CHECK(anvil::isfinite(std::numeric_limits<anvil::half>::max()));

    using limits = std::numeric_limits<anvil::half>;
    CHECK(static_cast<float>(limits::max()) == 65504.0f);
    CHECK(static_cast<float>(limits::lowest()) == -65504.0f);
    CHECK(static_cast<float>(limits::min()) == 0x1p-14f);
    CHECK(static_cast<float>(limits::denorm_min()) == 0x1p-24f);
    CHECK(static_cast<float>(limits::epsilon()) == 0x1p-10f);
    CHECK(static_cast<float>(limits::infinity()) == HUGE_VALF);
    CHECK(anvil::isnan(limits::signaling_NaN()));
    CHECK(limits::digits == 11);
}

// ------------------------------------------------------------------------------------------------ F16C, FCVT

// The CPU's own conversions: x86's F16C (when this CPU has it) and arm64's FCVT (always there; the NEON paths
// of convert and of the GEMM's f16 rows use it).
namespace {
#if defined(__x86_64__) || defined(__i386__)
constexpr const char* conversion_instructions = "F16C";
__attribute__((target("f16c"))) float hardware_half_to_float(std::uint16_t bits) {
    return _cvtsh_ss(bits);
}
// _cvtss_sh's vector form: the same VCVTPS2PH, but Clang's _cvtss_sh macro is not valid C++ (a compound
// literal).
__attribute__((target("f16c"))) std::uint16_t hardware_float_to_half(float value) {
    const __m128i halves = _mm_cvtps_ph(_mm_set_ss(value), _MM_FROUND_TO_NEAREST_INT);
    return static_cast<std::uint16_t>(_mm_cvtsi128_si32(halves) & 0xFFFF);
}
#elif defined(__aarch64__)
constexpr const char* conversion_instructions = "FCVT";
// __fp16 (GCC and Clang on arm64) converts with FCVT: nearest even, NaNs quieted keeping sign and top payload
// bits under the default FPCR.
float hardware_half_to_float(std::uint16_t bits) {
    return static_cast<float>(std::bit_cast<__fp16>(bits));
}
std::uint16_t hardware_float_to_half(float value) {
    return std::bit_cast<std::uint16_t>(static_cast<__fp16>(value));
}
#endif
}  // namespace

TEST_CASE("half: the scalar conversions agree bit for bit with the CPU's conversion instructions") {
#if defined(__x86_64__) || defined(__i386__)
#if defined(__GNUC__) && !defined(__clang__)
    CHECK(anvil::detail::host_cpu_features().f16c ==
          (__builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c")));
#endif
    if (!anvil::detail::host_cpu_features().f16c) {
        MESSAGE("this CPU has no F16C: the comparison with _cvtsh_ss/_cvtss_sh did not run");
        return;
    }
#endif
#if defined(__x86_64__) || defined(__i386__) || defined(__aarch64__)
    CAPTURE(conversion_instructions);
    mismatches log;
    for (std::uint32_t pattern = 0; pattern <= 0xFFFF; ++pattern) {
        const auto bits = static_cast<std::uint16_t>(pattern);
        const std::uint32_t hardware = bits_of(hardware_half_to_float(bits));
        const std::uint32_t scalar = bits_of(anvil::half_bits_to_float(bits));
        if (hardware != scalar) log.add("half ", pattern, ": hardware ", hardware, ", scalar ", scalar);
    }
    // Every 251st float pattern (251 is prime, so the sweep walks through every mantissa residue), NaNs
    // included: the instructions quiet them keeping sign and top payload bits, as the scalar code does.
    for (std::uint64_t pattern = 0; pattern <= 0xFFFFFFFFu; pattern += 251) {
        const float value = float_from(static_cast<std::uint32_t>(pattern));
        const std::uint16_t hardware = hardware_float_to_half(value);
        const std::uint16_t scalar = anvil::float_to_half_bits(value);
        if (hardware != scalar) log.add("float ", pattern, ": hardware ", hardware, ", scalar ", scalar);
    }
    CHECK_NO_MISMATCHES(log);
#else
    MESSAGE("neither x86 nor arm64: no conversion instructions to compare the scalar conversions with");
#endif
}

// ------------------------------------------------------------------------------------------------ bfloat16

TEST_CASE("bfloat16: every one of the 65,536 patterns converts to float as the formula says") {
    mismatches log;
    for (std::uint32_t pattern = 0; pattern <= 0xFFFF; ++pattern) {
        const auto bits = static_cast<std::uint16_t>(pattern);
        const float converted = anvil::bfloat16_bits_to_float(bits);
        const double expected = bfloat16_formula(bits);
        if (std::isnan(expected)) {
            if (!std::isnan(converted) || std::signbit(converted) != ((bits & 0x8000u) != 0)) {
                log.add("bfloat16 NaN ", pattern, " -> ", bits_of(converted));
            }
        } else if (static_cast<double>(converted) != expected ||
                   std::signbit(converted) != std::signbit(expected)) {
            log.add("bfloat16 ", pattern, " -> ", converted, " but the formula gives ", expected);
        }
    }
    CHECK_NO_MISMATCHES(log);
}

TEST_CASE("bfloat16: float -> bfloat16 gives back every pattern; NaNs come back quiet") {
    mismatches log;
    for (std::uint32_t pattern = 0; pattern <= 0xFFFF; ++pattern) {
        const auto bits = static_cast<std::uint16_t>(pattern);
        const std::uint16_t back = anvil::float_to_bfloat16_bits(anvil::bfloat16_bits_to_float(bits));
        const std::uint16_t want = is_bfloat16_nan(bits) ? static_cast<std::uint16_t>(bits | 0x0040u) : bits;
        if (back != want) log.add("bfloat16 ", pattern, " -> float -> bfloat16 ", back);
    }
    CHECK_NO_MISMATCHES(log);
}

TEST_CASE("bfloat16: midpoints round to the even neighbour, one float ulp off to the nearer") {
    mismatches log;
    const auto& magnitudes = bfloat16_magnitudes();
    for (const std::uint16_t sign : {std::uint16_t{0}, std::uint16_t{0x8000}}) {
        for (std::uint32_t low = 0; low <= 0x7F7F; ++low) {
            const std::uint32_t high = low + 1;  // 0x7F80, infinity, after the largest finite
            const float middle = exact_float((magnitudes[low] + magnitudes[high]) / 2 * (sign != 0 ? -1 : 1));
            const std::uint32_t even = (low & 1u) == 0 ? low : high;
            const float outward = std::nextafter(middle, sign != 0 ? -HUGE_VALF : HUGE_VALF);
            const float inward = std::nextafter(middle, 0.0f);
            if (anvil::float_to_bfloat16_bits(middle) != (sign | even)) log.add("midpoint ", middle);
            if (anvil::float_to_bfloat16_bits(outward) != (sign | high)) log.add("above ", middle);
            if (anvil::float_to_bfloat16_bits(inward) != (sign | low)) log.add("below ", middle);
        }
    }
    CHECK_NO_MISMATCHES(log);
    CHECK(anvil::float_to_bfloat16_bits(std::numeric_limits<float>::max()) ==
          0x7F80);  // past the last midpoint
    CHECK(anvil::float_to_bfloat16_bits(-HUGE_VALF) == 0xFF80);
    CHECK(anvil::float_to_bfloat16_bits(std::numeric_limits<float>::denorm_min()) == 0x0000);
    CHECK(anvil::float_to_bfloat16_bits(0x1p-133f) == 0x0001);  // smallest bfloat16 subnormal
}

TEST_CASE("bfloat16: no NaN ever rounds into infinity or zero") {
    CHECK(anvil::float_to_bfloat16_bits(float_from(0x7FFFFFFFu)) == 0x7FFF);
    CHECK(anvil::float_to_bfloat16_bits(float_from(0xFFFFFFFFu)) == 0xFFFF);
    CHECK(anvil::float_to_bfloat16_bits(float_from(0x7F800001u)) == 0x7FC0);
    CHECK(anvil::float_to_bfloat16_bits(float_from(0xFF80FFFFu)) == 0xFFC0);
    mismatches log;
    for (std::uint32_t payload = 1; payload < (1u << 23); ++payload) {
        for (const std::uint32_t sign : {0u, 0x80000000u}) {
            const std::uint16_t result =
                anvil::float_to_bfloat16_bits(float_from(sign | 0x7F800000u | payload));
            if (!is_bfloat16_nan(result) || (result & 0x8000u) != sign >> 16 || (result & 0x40u) == 0) {
                log.add("float NaN ", sign | 0x7F800000u | payload, " -> ", result);
            }
        }
    }
    CHECK_NO_MISMATCHES(log);
}

TEST_CASE("bfloat16: random floats round as a search over all bfloat16 values says") {
    std::mt19937 random(7);
    mismatches log;
    const auto& magnitudes = bfloat16_magnitudes();
    for (int i = 0; i < 300000; ++i) {
        const float value = float_from(static_cast<std::uint32_t>(random()));
        if (std::isnan(value)) continue;
        const std::uint32_t want = reference_round(value, magnitudes, 0x8000u);
        if (anvil::float_to_bfloat16_bits(value) != want) log.add("float ", bits_of(value), " -> not ", want);
    }
    CHECK_NO_MISMATCHES(log);
}

TEST_CASE("bfloat16: the value type converts, compares as IEEE and has its numeric_limits") {
    static_assert(anvil::bfloat16(1.0f).bits == 0x3F80);
    CHECK(anvil::bfloat16(3.140625f).bits == 0x4049);
    CHECK(static_cast<float>(anvil::bfloat16::from_bits(0x4049)) == 3.140625f);
    CHECK(anvil::bfloat16(0.0f) == anvil::bfloat16(-0.0f));
    CHECK(anvil::bfloat16(-1.0f) < anvil::bfloat16(1.0f));
    CHECK_FALSE(std::numeric_limits<anvil::bfloat16>::quiet_NaN() ==
                std::numeric_limits<anvil::bfloat16>::quiet_NaN());
    using limits = std::numeric_limits<anvil::bfloat16>;
    CHECK(static_cast<double>(limits::max()) == (2.0 - 0x1p-7) * 0x1p127);
    CHECK(static_cast<float>(limits::min()) == std::numeric_limits<float>::min());
    CHECK(static_cast<float>(limits::epsilon()) == 0x1p-7f);
    CHECK(static_cast<float>(limits::denorm_min()) == 0x1p-133f);
    CHECK(anvil::isnan(limits::signaling_NaN()));
    CHECK(anvil::isinf(limits::infinity()));
}

// ------------------------------------------------------------------------------------------------ fp8

TEST_CASE("float8: all 256 patterns of e4m3fn and e5m2 decode as the OCP formulas say") {
    mismatches log;
    for (std::uint32_t pattern = 0; pattern <= 0xFF; ++pattern) {
        const auto bits = static_cast<std::uint8_t>(pattern);
        for (const bool e4m3 : {true, false}) {
            const float decoded =
                e4m3 ? anvil::float8_e4m3_bits_to_float(bits) : anvil::float8_e5m2_bits_to_float(bits);
            const double expected = e4m3 ? e4m3_formula(bits) : e5m2_formula(bits);
            const bool same = std::isnan(expected)
                                  ? std::isnan(decoded) && std::signbit(decoded) == (pattern >= 0x80)
                                  : static_cast<double>(decoded) == expected &&
                                        std::signbit(decoded) == std::signbit(expected);
            if (!same) log.add(e4m3 ? "e4m3 " : "e5m2 ", pattern, " -> ", decoded, ", formula ", expected);
        }
    }
    CHECK_NO_MISMATCHES(log);
}

TEST_CASE("float8: the formats' known constants") {
    using anvil::float8_e4m3_bits_to_float, anvil::float8_e5m2_bits_to_float;
    CHECK(float8_e4m3_bits_to_float(0x7E) == 448.0f);  // max
    CHECK(float8_e4m3_bits_to_float(0xFE) == -448.0f);
    CHECK(float8_e4m3_bits_to_float(0x01) == 0x1p-9f);  // min subnormal
    CHECK(float8_e4m3_bits_to_float(0x08) == 0x1p-6f);  // min normal
    CHECK(float8_e4m3_bits_to_float(0x38) == 1.0f);
    CHECK(std::isnan(float8_e4m3_bits_to_float(0x7F)));
    CHECK(std::isnan(float8_e4m3_bits_to_float(0xFF)));
    CHECK(float8_e4m3_bits_to_float(0x78) == 256.0f);    // S.1111.000 is a number: "fn" has no infinities
    CHECK(float8_e5m2_bits_to_float(0x7B) == 57344.0f);  // max
    CHECK(float8_e5m2_bits_to_float(0x01) == 0x1p-16f);  // min subnormal
    CHECK(float8_e5m2_bits_to_float(0x04) == 0x1p-14f);
    CHECK(float8_e5m2_bits_to_float(0x3C) == 1.0f);
    CHECK(float8_e5m2_bits_to_float(0x7C) == HUGE_VALF);
    CHECK(float8_e5m2_bits_to_float(0xFC) == -HUGE_VALF);
    CHECK(std::isnan(float8_e5m2_bits_to_float(0x7D)));
    CHECK(std::isnan(float8_e5m2_bits_to_float(0xFF)));
}

TEST_CASE("float8: encoders round to nearest even and overflow as PyTorch's casts do") {
    using anvil::float_to_float8_e4m3_bits, anvil::float_to_float8_e5m2_bits;
    // e4m3fn: no saturation; past 464 (448 + half an ulp), infinities and NaN all give NaN 0x7F | sign.
    CHECK(float_to_float8_e4m3_bits(448.0f) == 0x7E);
    CHECK(float_to_float8_e4m3_bits(464.0f) == 0x7E);
    CHECK(float_to_float8_e4m3_bits(std::nextafter(464.0f, 500.0f)) == 0x7F);
    CHECK(float_to_float8_e4m3_bits(480.0f) == 0x7F);
    CHECK(float_to_float8_e4m3_bits(1e10f) == 0x7F);
    CHECK(float_to_float8_e4m3_bits(HUGE_VALF) == 0x7F);
    CHECK(float_to_float8_e4m3_bits(-HUGE_VALF) == 0xFF);
    CHECK(float_to_float8_e4m3_bits(std::numeric_limits<float>::quiet_NaN()) == 0x7F);
    CHECK(float_to_float8_e4m3_bits(-500.0f) == 0xFF);
    CHECK(float_to_float8_e4m3_bits(0x1p-10f) == 0x00);  // half the min subnormal: tie to even zero
    CHECK(float_to_float8_e4m3_bits(std::nextafter(0x1p-10f, 1.0f)) == 0x01);
    CHECK(float_to_float8_e4m3_bits(-0.0f) == 0x80);
    // e5m2: IEEE overflow to infinity from 61440 (57344 + half an ulp) up.
    CHECK(float_to_float8_e5m2_bits(57344.0f) == 0x7B);
    CHECK(float_to_float8_e5m2_bits(61440.0f) == 0x7C);
    CHECK(float_to_float8_e5m2_bits(std::nextafter(61440.0f, 0.0f)) == 0x7B);
    CHECK(float_to_float8_e5m2_bits(-HUGE_VALF) == 0xFC);
    CHECK(float_to_float8_e5m2_bits(std::numeric_limits<float>::quiet_NaN()) == 0x7F);
    CHECK(float_to_float8_e5m2_bits(0x1p-17f) == 0x00);
    CHECK(float_to_float8_e5m2_bits(std::nextafter(0x1p-17f, 1.0f)) == 0x01);

    // Every finite pattern round-trips; every midpoint goes to the even neighbour.
    mismatches log;
    struct format {
        const char* name;
        std::uint8_t (*encode)(float);
        double (*formula)(std::uint8_t);
        std::uint32_t largest_finite;
        double overflow_value;
    };
    for (const format& f : {format{"e4m3", anvil::float_to_float8_e4m3_bits, e4m3_formula, 0x7E, 480.0},
                            format{"e5m2", anvil::float_to_float8_e5m2_bits, e5m2_formula, 0x7B, 65536.0}}) {
        const auto magnitudes =
            magnitude_table([&](std::uint32_t b) { return f.formula(static_cast<std::uint8_t>(b)); },
                            f.largest_finite, f.overflow_value);
        for (std::uint32_t sign : {0u, 0x80u}) {
            for (std::uint32_t low = 0; low <= f.largest_finite; ++low) {
                const float value = exact_float(magnitudes[low] * (sign != 0 ? -1 : 1));
                if (f.encode(value) != (sign | low)) log.add(f.name, " round trip ", low);
                const float middle =
                    exact_float((magnitudes[low] + magnitudes[low + 1]) / 2 * (sign != 0 ? -1 : 1));
                const std::uint32_t even = (low & 1u) == 0 ? low : low + 1;
                if (f.encode(middle) != (sign | even)) log.add(f.name, " midpoint above ", low);
                if (f.encode(std::nextafter(middle, 0.0f)) != (sign | low))
                    log.add(f.name, " below mid ", low);
                const float outward = std::nextafter(middle, sign != 0 ? -HUGE_VALF : HUGE_VALF);
                if (f.encode(outward) != (sign | (low + 1))) log.add(f.name, " above mid ", low);
            }
        }
        std::mt19937 random(11);
        for (int i = 0; i < 100000; ++i) {
            const float value = float_from((static_cast<std::uint32_t>(random()) & 0x807FFFFFu) |
                                           ((100u + static_cast<std::uint32_t>(random()) % 50u) << 23));
            const std::uint32_t want = reference_round(value, magnitudes, 0x80u);
            if (f.encode(value) != want) log.add(f.name, " random ", bits_of(value), " not ", want);
        }
    }
    CHECK_NO_MISMATCHES(log);
}

#undef CHECK_NO_MISMATCHES

}  // namespace test_half
