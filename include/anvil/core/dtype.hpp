// anvil: element types. One enum names every element type anvil reads, stores or computes with; the tables
// below give each its size and its spellings in safetensors and anvil's own messages.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>

#include "anvil/core/bfloat16.hpp"
#include "anvil/core/half.hpp"

namespace anvil {

enum class dtype : std::uint8_t {
    f64,
    f32,
    f16,
    bf16,
    f8_e4m3,  // OCP FP8 E4M3 "fn": no infinities, one NaN pattern per sign
    f8_e5m2,  // OCP FP8 E5M2: IEEE-like, with infinities and NaNs
    i64,
    i32,
    i16,
    i8,
    u64,
    u32,
    u16,
    u8,
    boolean,
};

inline constexpr std::size_t dtype_count = 15;

namespace detail {

struct dtype_info {
    dtype type;
    std::size_t size;                   // bytes per element
    std::string_view name;              // anvil's spelling, as in messages and `anvil info`
    std::string_view safetensors_name;  // the header's "dtype" string
    bool is_float;
    bool is_signed;
};

inline constexpr std::array<dtype_info, dtype_count> dtype_table{{
    {dtype::f64, 8, "f64", "F64", true, true},
    {dtype::f32, 4, "f32", "F32", true, true},
    {dtype::f16, 2, "f16", "F16", true, true},
    {dtype::bf16, 2, "bf16", "BF16", true, true},
    {dtype::f8_e4m3, 1, "f8_e4m3", "F8_E4M3", true, true},
    {dtype::f8_e5m2, 1, "f8_e5m2", "F8_E5M2", true, true},
    {dtype::i64, 8, "i64", "I64", false, true},
    {dtype::i32, 4, "i32", "I32", false, true},
    {dtype::i16, 2, "i16", "I16", false, true},
    {dtype::i8, 1, "i8", "I8", false, true},
    {dtype::u64, 8, "u64", "U64", false, false},
    {dtype::u32, 4, "u32", "U32", false, false},
    {dtype::u16, 2, "u16", "U16", false, false},
    {dtype::u8, 1, "u8", "U8", false, false},
    {dtype::boolean, 1, "bool", "BOOL", false, false},
}};

[[nodiscard]] constexpr const dtype_info& info(dtype type) noexcept {
    return dtype_table[static_cast<std::size_t>(type)];
}

}  // namespace detail

[[nodiscard]] constexpr std::size_t dtype_size(dtype type) noexcept {
    return detail::info(type).size;
}
[[nodiscard]] constexpr std::string_view dtype_name(dtype type) noexcept {
    return detail::info(type).name;
}
[[nodiscard]] constexpr bool is_floating(dtype type) noexcept {
    return detail::info(type).is_float;
}
[[nodiscard]] constexpr bool is_signed(dtype type) noexcept {
    return detail::info(type).is_signed;
}

// The safetensors spelling ("F32", "BF16", ...) of a dtype, and back; nullopt for a name the format lacks.
[[nodiscard]] constexpr std::string_view safetensors_dtype_name(dtype type) noexcept {
    return detail::info(type).safetensors_name;
}
[[nodiscard]] constexpr std::optional<dtype> dtype_from_safetensors_name(std::string_view name) noexcept {
    for (const auto& entry : detail::dtype_table) {
        if (entry.safetensors_name == name) return entry.type;
    }
    return std::nullopt;
}

// anvil's own spelling ("f32", "bf16", ...) back to the enum.
[[nodiscard]] constexpr std::optional<dtype> dtype_from_name(std::string_view name) noexcept {
    for (const auto& entry : detail::dtype_table) {
        if (entry.name == name) return entry.type;
    }
    return std::nullopt;
}

// The dtype whose elements a C++ type holds exactly: dtype_of<float>::value == dtype::f32. Types with no
// dtype (fp8 has no C++ type) leave dtype_of<T> empty, so element_type<T> is false for them.
template <class T>
struct dtype_of {};
template <dtype Type>
struct dtype_constant : std::integral_constant<dtype, Type> {};
template <>
struct dtype_of<double> : dtype_constant<dtype::f64> {};
template <>
struct dtype_of<float> : dtype_constant<dtype::f32> {};
template <>
struct dtype_of<half> : dtype_constant<dtype::f16> {};
template <>
struct dtype_of<bfloat16> : dtype_constant<dtype::bf16> {};
template <>
struct dtype_of<std::int64_t> : dtype_constant<dtype::i64> {};
template <>
struct dtype_of<std::int32_t> : dtype_constant<dtype::i32> {};
template <>
struct dtype_of<std::int16_t> : dtype_constant<dtype::i16> {};
template <>
struct dtype_of<std::int8_t> : dtype_constant<dtype::i8> {};
template <>
struct dtype_of<std::uint64_t> : dtype_constant<dtype::u64> {};
template <>
struct dtype_of<std::uint32_t> : dtype_constant<dtype::u32> {};
template <>
struct dtype_of<std::uint16_t> : dtype_constant<dtype::u16> {};
template <>
struct dtype_of<std::uint8_t> : dtype_constant<dtype::u8> {};
template <>
struct dtype_of<bool> : dtype_constant<dtype::boolean> {};

template <class T>
concept element_type = requires {
    dtype_of<T>::value;
}
&&sizeof(T) == dtype_size(dtype_of<T>::value);

template <element_type T>
inline constexpr dtype dtype_of_v = dtype_of<T>::value;

static_assert(
    [] {
        for (std::size_t i = 0; i < dtype_count; ++i) {
            if (static_cast<std::size_t>(detail::dtype_table[i].type) != i) return false;
        }
        return true;
    }(),
    "dtype_table must list the dtypes in enum order");

}  // namespace anvil
