// anvil: bulk element conversion to f32 and f16, for safetensors views, .npy arrays and the CPU backend's
// packing. Sources are raw bytes that may sit at any address (safetensors offsets are arbitrary), so every
// read goes through memcpy or an unaligned vector load. Each conversion gives exactly the scalar functions'
// result (half.hpp, bfloat16.hpp, float8.hpp, static_cast for integers); the vector paths — F16C on x86-64,
// chosen at run time so no -mf16c is needed, and NEON on arm64 — are only faster.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "anvil/compilation.hpp"
#include "anvil/core/bfloat16.hpp"
#include "anvil/core/dtype.hpp"
#include "anvil/core/float8.hpp"
#include "anvil/core/half.hpp"

namespace anvil {

namespace detail {

// Which implementation a conversion uses: the fastest this machine has, or the portable loop (so tests can
// compare the two on a machine that has both).
enum class conversion_path { fastest, portable };

// Whether conversion_path::fastest runs vector instructions for f16 <-> f32 on this machine; checked once.
[[nodiscard]] bool vector_conversion_available() noexcept;

template <class T>
[[nodiscard]] inline T load_unaligned(const unsigned char* source) noexcept {
    T value;
    std::memcpy(&value, source, sizeof value);
    return value;
}

// Portable loops: branch-free bodies over memcpy loads, which GCC and Clang vectorise at -O3 (f32 -> f16
// needs per-lane shifts: AVX2, NEON, SVE, RVV).
void f16_to_f32_portable(const unsigned char* source, std::size_t count, float* out) noexcept;

void f32_to_f16_portable(const unsigned char* source, std::size_t count, half* out) noexcept;

void f16_to_f32(const unsigned char* source, std::size_t count, float* out, conversion_path path);

void f32_to_f16(const unsigned char* source, std::size_t count, half* out, conversion_path path);

// bf16 -> f32 is a 16-bit shift. Spelled out for SSE2 and NEON (both baseline, no run-time check) because
// GCC does not vectorise at -O2; elsewhere the plain loop vectorises at -O3.
void bf16_to_f32(const unsigned char* source, std::size_t count, float* out) noexcept;

// Integers and bool by value (any nonzero byte is true), f64 rounded to nearest even.
template <class Value>
void values_to_f32(const unsigned char* source, std::size_t count, float* out) noexcept {
    for (std::size_t i = 0; i < count; ++i) {
        out[i] = static_cast<float>(load_unaligned<Value>(source + sizeof(Value) * i));
    }
}

void bool_to_f32(const unsigned char* source, std::size_t count, float* out) noexcept;

template <float (*Decode)(std::uint8_t)>
constexpr std::array<float, 256> float8_table() noexcept {
    std::array<float, 256> table{};
    for (std::size_t bits = 0; bits < table.size(); ++bits)
        table[bits] = Decode(static_cast<std::uint8_t>(bits));
    return table;
}

inline constexpr std::array<float, 256> float8_e4m3_table = float8_table<float8_e4m3_bits_to_float>();
inline constexpr std::array<float, 256> float8_e5m2_table = float8_table<float8_e5m2_bits_to_float>();

void table_to_f32(const std::array<float, 256>& table, const unsigned char* source, std::size_t count,
                  float* out) noexcept;

[[noreturn]] void throw_unknown_dtype(const char* function, dtype source);

void convert_to_f32(dtype source, const void* data, std::size_t count, float* out, conversion_path path);

void convert_to_f16(dtype source, const void* data, std::size_t count, half* out, conversion_path path);

void convert_f32_to_f16(const float* data, std::size_t count, half* out, conversion_path path);

}  // namespace detail

// Converts `count` elements of type `source` at `data` (any alignment) to float, into `out`, which must not
// overlap `data`. Integers and bool convert by value; f64 rounds to nearest even. Throws type_error for a
// value of `source` outside the dtype enum.
void convert_to_f32(dtype source, const void* data, std::size_t count, float* out);

// The same to half, each element rounded once to nearest even (f64 included).
void convert_to_f16(dtype source, const void* data, std::size_t count, half* out);

void convert_f32_to_f16(const float* data, std::size_t count, half* out);

void convert_f32_to_bf16(const float* data, std::size_t count, bfloat16* out) noexcept;

}  // namespace anvil

#if ANVIL_DEFINITIONS
#include "anvil/core/convert-inl.hpp"
#endif
