// Bulk conversion: for every dtype, every length shape (empty, shorter than a vector, odd, crossing blocks)
// and an unaligned source, both the vector path and the portable loop give exactly the scalar conversion,
// element by element, and write nothing outside the output.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

// A namespace of its own, so the test files can be compiled together (a unity build).
namespace test_convert {

namespace {

using anvil::dtype;
using anvil::detail::conversion_path;

// 2053 crosses convert_to_f16's 1024-element blocks twice and leaves a ragged end.
constexpr std::size_t lengths[] = {0, 1, 7, 33, 1000, 2053};
constexpr conversion_path paths[] = {conversion_path::fastest, conversion_path::portable};

const char* path_name(conversion_path path) {
    return path == conversion_path::fastest ? "fastest" : "portable";
}

template <class T>
void append(std::vector<unsigned char>& bytes, T value) {
    unsigned char raw[sizeof(T)];
    std::memcpy(raw, &value, sizeof(T));
    bytes.insert(bytes.end(), raw, raw + sizeof(T));
}

const float special_floats[] = {0.0f,
                                -0.0f,
                                HUGE_VALF,
                                -HUGE_VALF,
                                std::bit_cast<float>(0x7FC00000u),
                                std::bit_cast<float>(0xFF800001u),
                                std::bit_cast<float>(0x7FA01234u),
                                65504.0f,
                                65520.0f,
                                std::nextafter(65520.0f, 0.0f),
                                0x1p-24f,
                                0x1p-25f,
                                std::nextafter(0x1p-25f, 1.0f),
                                std::numeric_limits<float>::max(),
                                std::numeric_limits<float>::denorm_min(),
                                -0x1p-14f,
                                1.0f / 3.0f};

// `count` elements of `type`: random bit patterns, plus (for f32 and f64) values on and between the half
// grid, exact ties among them, and the special values.
std::vector<unsigned char> make_elements(dtype type, std::size_t count, std::mt19937_64& random) {
    std::vector<unsigned char> bytes;
    for (std::size_t i = 0; i < count; ++i) {
        const std::uint64_t noise = random();
        const auto half_value = anvil::half_bits_to_float(static_cast<std::uint16_t>(noise & 0xFBFFu));
        const std::uint32_t half_grid = std::bit_cast<std::uint32_t>(half_value);
        if (type == dtype::f32) {
            switch (i % 4) {
                case 0:
                    append(bytes, static_cast<std::uint32_t>(noise >> 32));
                    break;
                case 1:
                    append(bytes, half_grid | static_cast<std::uint32_t>((noise >> 20) & 0x1FFFu));
                    break;
                case 2:
                    append(bytes, half_grid | 0x1000u);
                    break;  // a tie when half_value is a normal half
                default:
                    append(bytes, special_floats[(noise >> 40) % std::size(special_floats)]);
                    break;
            }
        } else if (type == dtype::f64) {
            const double grid = static_cast<double>(half_value);
            switch (i % 4) {
                case 0:
                    append(bytes, noise);
                    break;
                case 1:
                    append(bytes, grid + std::ldexp(grid, -11 - static_cast<int>((noise >> 50) % 40)));
                    break;
                case 2:
                    append(bytes, static_cast<double>(std::bit_cast<float>(half_grid | 0x1000u)));
                    break;
                default:
                    append(bytes,
                           static_cast<double>(special_floats[(noise >> 40) % std::size(special_floats)]));
                    break;
            }
        } else if (type == dtype::boolean) {
            const unsigned char choices[] = {0, 0, 1, 1, 2, 255};
            bytes.push_back(choices[noise % std::size(choices)]);
        } else {
            for (std::size_t b = 0; b < anvil::dtype_size(type); ++b) {
                bytes.push_back(static_cast<unsigned char>(noise >> (8 * b)));
            }
        }
    }
    return bytes;
}

template <class T>
T read(const unsigned char* element) {
    T value;
    std::memcpy(&value, element, sizeof(T));
    return value;
}

// The scalar conversion of one element, which test_half.cpp checks against the formats' formulas.
float scalar_to_f32(dtype type, const unsigned char* element) {
    switch (type) {
        case dtype::f64:
            return static_cast<float>(read<double>(element));
        case dtype::f32:
            return read<float>(element);
        case dtype::f16:
            return anvil::half_bits_to_float(read<std::uint16_t>(element));
        case dtype::bf16:
            return anvil::bfloat16_bits_to_float(read<std::uint16_t>(element));
        case dtype::f8_e4m3:
            return anvil::float8_e4m3_bits_to_float(*element);
        case dtype::f8_e5m2:
            return anvil::float8_e5m2_bits_to_float(*element);
        case dtype::i64:
            return static_cast<float>(read<std::int64_t>(element));
        case dtype::i32:
            return static_cast<float>(read<std::int32_t>(element));
        case dtype::i16:
            return static_cast<float>(read<std::int16_t>(element));
        case dtype::i8:
            return static_cast<float>(read<std::int8_t>(element));
        case dtype::u64:
            return static_cast<float>(read<std::uint64_t>(element));
        case dtype::u32:
            return static_cast<float>(read<std::uint32_t>(element));
        case dtype::u16:
            return static_cast<float>(read<std::uint16_t>(element));
        case dtype::u8:
            return static_cast<float>(*element);
        case dtype::boolean:
            return *element != 0 ? 1.0f : 0.0f;
    }
    FAIL("unknown dtype");
    return 0;
}

std::uint16_t scalar_to_f16(dtype type, const unsigned char* element) {
    if (type == dtype::f16) return read<std::uint16_t>(element);
    if (type == dtype::f64) return anvil::double_to_half_bits(read<double>(element));
    return anvil::float_to_half_bits(scalar_to_f32(type, element));
}

std::string describe(dtype type, std::size_t count, std::size_t offset, conversion_path path) {
    std::ostringstream text;
    text << anvil::dtype_name(type) << ", " << count << " elements at offset " << offset << ", "
         << path_name(path) << " path";
    return text.str();
}

constexpr std::uint32_t float_sentinel = 0xDEADBEEFu;
constexpr std::uint16_t half_sentinel = 0xBEEFu;

}  // namespace

TEST_CASE("convert: every dtype to f32 equals the scalar conversion at every length, alignment and path") {
    std::mt19937_64 random(1);
    for (const auto& entry : anvil::detail::dtype_table) {
        for (const std::size_t count : lengths) {
            const std::vector<unsigned char> elements = make_elements(entry.type, count, random);
            for (const std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
                // The source at `offset` bytes from an allocation: odd addresses for every multi-byte type.
                std::vector<unsigned char> storage(offset, 0xA5);
                storage.insert(storage.end(), elements.begin(), elements.end());
                const unsigned char* source = storage.data() + offset;
                for (const conversion_path path : paths) {
                    INFO(describe(entry.type, count, offset, path));
                    std::vector<std::uint32_t> out(count + 2, float_sentinel);
                    auto* first = reinterpret_cast<float*>(out.data() + 1);
                    anvil::detail::convert_to_f32(entry.type, source, count, first, path);
                    std::size_t wrong = 0, first_wrong = 0;
                    for (std::size_t i = 0; i < count; ++i) {
                        const float want = scalar_to_f32(entry.type, source + i * entry.size);
                        if (out[i + 1] != std::bit_cast<std::uint32_t>(want) && wrong++ == 0) first_wrong = i;
                    }
                    INFO("first wrong element: ", first_wrong);
                    CHECK(wrong == 0u);
                    CHECK(out.front() == float_sentinel);
                    CHECK(out.back() == float_sentinel);
                }
                std::vector<float> public_out(count);
                anvil::convert_to_f32(entry.type, source, count, public_out.data());
                for (std::size_t i = 0; i < count; ++i) {
                    const float want = scalar_to_f32(entry.type, source + i * entry.size);
                    REQUIRE(std::bit_cast<std::uint32_t>(public_out[i]) ==
                            std::bit_cast<std::uint32_t>(want));
                }
            }
        }
    }
}

TEST_CASE("convert: every dtype to f16 equals the scalar conversion at every length, alignment and path") {
    std::mt19937_64 random(2);
    for (const auto& entry : anvil::detail::dtype_table) {
        for (const std::size_t count : lengths) {
            const std::vector<unsigned char> elements = make_elements(entry.type, count, random);
            for (const std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
                std::vector<unsigned char> storage(offset, 0xA5);
                storage.insert(storage.end(), elements.begin(), elements.end());
                const unsigned char* source = storage.data() + offset;
                for (const conversion_path path : paths) {
                    INFO(describe(entry.type, count, offset, path));
                    std::vector<anvil::half> out(count + 2, anvil::half::from_bits(half_sentinel));
                    anvil::detail::convert_to_f16(entry.type, source, count, out.data() + 1, path);
                    std::size_t wrong = 0, first_wrong = 0;
                    for (std::size_t i = 0; i < count; ++i) {
                        const std::uint16_t want = scalar_to_f16(entry.type, source + i * entry.size);
                        if (out[i + 1].bits != want && wrong++ == 0) first_wrong = i;
                    }
                    INFO("first wrong element: ", first_wrong);
                    CHECK(wrong == 0u);
                    CHECK(out.front().bits == half_sentinel);
                    CHECK(out.back().bits == half_sentinel);
                }
                std::vector<anvil::half> public_out(count);
                anvil::convert_to_f16(entry.type, source, count, public_out.data());
                for (std::size_t i = 0; i < count; ++i) {
                    REQUIRE(public_out[i].bits == scalar_to_f16(entry.type, source + i * entry.size));
                }
            }
        }
    }
}

TEST_CASE("convert: float arrays to f16 and bf16 equal the scalar conversions") {
    std::mt19937_64 random(3);
    for (const std::size_t count : lengths) {
        const std::vector<unsigned char> bytes = make_elements(dtype::f32, count + 1, random);
        std::vector<float> floats(count + 1);
        std::memcpy(floats.data(), bytes.data(), bytes.size());
        const float* source = floats.data() + 1;  // 4-byte aligned, not vector aligned
        for (const conversion_path path : paths) {
            INFO(count, " floats, ", path_name(path), " path");
            std::vector<anvil::half> halves(count + 1, anvil::half::from_bits(half_sentinel));
            anvil::detail::convert_f32_to_f16(source, count, halves.data(), path);
            for (std::size_t i = 0; i < count; ++i)
                REQUIRE(halves[i].bits == anvil::float_to_half_bits(source[i]));
            CHECK(halves[count].bits == half_sentinel);
        }
        std::vector<anvil::half> halves(count);
        anvil::convert_f32_to_f16(source, count, halves.data());
        std::vector<anvil::bfloat16> brains(count + 1, anvil::bfloat16::from_bits(half_sentinel));
        anvil::convert_f32_to_bf16(source, count, brains.data());
        for (std::size_t i = 0; i < count; ++i) {
            REQUIRE(halves[i].bits == anvil::float_to_half_bits(source[i]));
            REQUIRE(brains[i].bits == anvil::float_to_bfloat16_bits(source[i]));
        }
        CHECK(brains[count].bits == half_sentinel);
    }
}

TEST_CASE("convert: known values of every dtype, from little-endian bytes") {
    struct known {
        dtype type;
        std::vector<unsigned char> bytes;
        std::vector<float> values;
    };
    const std::vector<known> cases = {
        {dtype::f64, {0, 0, 0, 0, 0, 0, 0xF0, 0x3F, 0, 0, 0, 0, 0, 0, 0x04, 0xC0}, {1.0f, -2.5f}},
        {dtype::f32, {0, 0, 0x80, 0x3F, 0, 0, 0x20, 0xC1}, {1.0f, -10.0f}},
        {dtype::f16, {0x00, 0x3C, 0xFF, 0x7B, 0x01, 0x00, 0x00, 0xC0}, {1.0f, 65504.0f, 0x1p-24f, -2.0f}},
        {dtype::bf16, {0x80, 0x3F, 0x49, 0x40, 0x80, 0xFF}, {1.0f, 3.140625f, -HUGE_VALF}},
        {dtype::f8_e4m3, {0x38, 0x7E, 0x01, 0xC0}, {1.0f, 448.0f, 0x1p-9f, -2.0f}},
        {dtype::f8_e5m2, {0x3C, 0x7B, 0x01, 0xFC}, {1.0f, 57344.0f, 0x1p-16f, -HUGE_VALF}},
        {dtype::i64,
         {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0, 0, 0x40},
         {-1.0f, 0x1p62f}},
        {dtype::i32,
         {0xF9, 0xFF, 0xFF, 0xFF, 0x01, 0x00, 0x00, 0x01},
         {-7.0f, 16777216.0f}},  // 2^24 + 1 rounds
        {dtype::i16, {0x00, 0x80, 0xF0, 0x7F}, {-32768.0f, 32752.0f}},
        {dtype::i8, {0x80, 0x7F, 0xFF}, {-128.0f, 127.0f, -1.0f}},
        {dtype::u64, {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}, {0x1p64f}},
        {dtype::u32, {0xFF, 0xFF, 0xFF, 0xFF}, {0x1p32f}},
        {dtype::u16, {0xFF, 0xFF, 0x34, 0x12}, {65535.0f, 4660.0f}},
        {dtype::u8, {0xFF, 0x00}, {255.0f, 0.0f}},
        {dtype::boolean, {0, 1, 2, 255}, {0.0f, 1.0f, 1.0f, 1.0f}},
    };
    CHECK(cases.size() == anvil::dtype_count);
    for (const known& c : cases) {
        INFO(anvil::dtype_name(c.type));
        std::vector<unsigned char> storage(1, 0);  // odd address again
        storage.insert(storage.end(), c.bytes.begin(), c.bytes.end());
        std::vector<float> out(c.values.size());
        anvil::convert_to_f32(c.type, storage.data() + 1, out.size(), out.data());
        CHECK(out == c.values);
        std::vector<anvil::half> halves(c.values.size());
        anvil::convert_to_f16(c.type, storage.data() + 1, halves.size(), halves.data());
        for (std::size_t i = 0; i < halves.size(); ++i) {
            const float want =
                std::fabs(c.values[i]) >= 65520.0f ? std::copysign(HUGE_VALF, c.values[i]) : c.values[i];
            // Every value above within f16's range is a multiple of its ulp, hence exact.
            CHECK(static_cast<float>(halves[i]) == want);
        }
    }
}

TEST_CASE("convert: empty conversions touch nothing, even through null pointers") {
    for (const auto& entry : anvil::detail::dtype_table) {
        CHECK_NOTHROW(anvil::convert_to_f32(entry.type, nullptr, 0, nullptr));
        CHECK_NOTHROW(anvil::convert_to_f16(entry.type, nullptr, 0, nullptr));
    }
    CHECK_NOTHROW(anvil::convert_f32_to_f16(nullptr, 0, nullptr));
    CHECK_NOTHROW(anvil::convert_f32_to_bf16(nullptr, 0, nullptr));
}

TEST_CASE("convert: an element type outside the dtype enum is a type_error naming the function and value") {
    const unsigned char bytes[8] = {};
    float floats[1];
    anvil::half halves[1];
    const auto bogus = static_cast<dtype>(200);
    CHECK_THROWS_WITH_AS(anvil::convert_to_f32(bogus, bytes, 1, floats),
                         doctest::Contains("convert_to_f32: source element type 200"), anvil::type_error);
    CHECK_THROWS_WITH_AS(anvil::convert_to_f16(bogus, bytes, 1, halves),
                         doctest::Contains("convert_to_f16: source element type 200"), anvil::type_error);
}

TEST_CASE("convert: the fastest path uses the CPU's vector conversions where it has them") {
#if defined(__x86_64__) || defined(__i386__)
    CHECK(anvil::detail::vector_conversion_available() == anvil::detail::host_cpu_features().f16c);
    if (!anvil::detail::vector_conversion_available()) {
        MESSAGE(
            "this CPU has no F16C: the fastest path is the portable loop, so only the portable loop was "
            "tested");
    }
#elif defined(__aarch64__)
    CHECK(anvil::detail::vector_conversion_available());
#else
    CHECK_FALSE(anvil::detail::vector_conversion_available());
    MESSAGE("no vector conversion path on this architecture: only the portable loop was tested");
#endif
}

}  // namespace test_convert
