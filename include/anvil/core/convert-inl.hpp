// anvil: convert's definitions (see convert.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "anvil/core/bfloat16.hpp"
#include "anvil/core/convert.hpp"
#include "anvil/core/cpu_features.hpp"
#include "anvil/core/dtype.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/float8.hpp"
#include "anvil/core/half.hpp"

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
#define ANVIL_DETAIL_CONVERT_F16C 1
#include <immintrin.h>
#elif defined(__aarch64__) && defined(__ARM_NEON)
#define ANVIL_DETAIL_CONVERT_NEON 1
#include <arm_neon.h>
#endif

namespace anvil {

namespace detail {

ANVIL_INLINE bool vector_conversion_available() noexcept {
#if defined(ANVIL_DETAIL_CONVERT_F16C) && defined(__F16C__)
    return true;
#elif defined(ANVIL_DETAIL_CONVERT_F16C)
    return host_cpu_features().f16c;
#elif defined(ANVIL_DETAIL_CONVERT_NEON)
    return true;
#else
    return false;
#endif
}

ANVIL_INLINE void f16_to_f32_portable(const unsigned char* source, std::size_t count, float* out) noexcept {
    for (std::size_t i = 0; i < count; ++i) {
        out[i] = half_bits_to_float(load_unaligned<std::uint16_t>(source + 2 * i));
    }
}

ANVIL_INLINE void f32_to_f16_portable(const unsigned char* source, std::size_t count, half* out) noexcept {
    for (std::size_t i = 0; i < count; ++i) {
        out[i].bits = float_to_half_bits(load_unaligned<float>(source + 4 * i));
    }
}

#if defined(ANVIL_DETAIL_CONVERT_F16C)
__attribute__((target("avx,f16c"))) ANVIL_INLINE void f16_to_f32_f16c(const unsigned char* source,
                                                                      std::size_t count,
                                                                      float* out) noexcept {
    std::size_t i = 0;
    for (; i + 8 <= count; i += 8) {
        const __m128i halves = _mm_loadu_si128(reinterpret_cast<const __m128i*>(source + 2 * i));
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(halves));
    }
    f16_to_f32_portable(source + 2 * i, count - i, out + i);
}

__attribute__((target("avx,f16c"))) ANVIL_INLINE void f32_to_f16_f16c(const unsigned char* source,
                                                                      std::size_t count, half* out) noexcept {
    std::size_t i = 0;
    for (; i + 8 <= count; i += 8) {
        const __m256 floats = _mm256_loadu_ps(reinterpret_cast<const float*>(source + 4 * i));
        // The immediate rounding mode (nearest even) overrides MXCSR, as the scalar path ignores it too.
        const __m128i halves = _mm256_cvtps_ph(floats, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), halves);
    }
    f32_to_f16_portable(source + 4 * i, count - i, out + i);
}
#endif

#if defined(ANVIL_DETAIL_CONVERT_NEON)
// Byte loads and stores, so no alignment is assumed; FCVT rounds to nearest even and quiets NaNs keeping the
// top payload bits under the default FPCR, as the scalar functions do.
ANVIL_INLINE void f16_to_f32_neon(const unsigned char* source, std::size_t count, float* out) noexcept {
    std::size_t i = 0;
    for (; i + 4 <= count; i += 4) {
        const float16x4_t halves = vreinterpret_f16_u8(vld1_u8(source + 2 * i));
        vst1q_f32(out + i, vcvt_f32_f16(halves));
    }
    f16_to_f32_portable(source + 2 * i, count - i, out + i);
}

ANVIL_INLINE void f32_to_f16_neon(const unsigned char* source, std::size_t count, half* out) noexcept {
    std::size_t i = 0;
    for (; i + 4 <= count; i += 4) {
        const float32x4_t floats = vreinterpretq_f32_u8(vld1q_u8(source + 4 * i));
        vst1_u8(reinterpret_cast<std::uint8_t*>(out + i), vreinterpret_u8_f16(vcvt_f16_f32(floats)));
    }
    f32_to_f16_portable(source + 4 * i, count - i, out + i);
}
#endif

ANVIL_INLINE void f16_to_f32(const unsigned char* source, std::size_t count, float* out,
                             [[maybe_unused]] conversion_path path) {
#if defined(ANVIL_DETAIL_CONVERT_F16C)
    if (path == conversion_path::fastest && vector_conversion_available()) {
        f16_to_f32_f16c(source, count, out);
        return;
    }
#elif defined(ANVIL_DETAIL_CONVERT_NEON)
    if (path == conversion_path::fastest) {
        f16_to_f32_neon(source, count, out);
        return;
    }
#endif
    f16_to_f32_portable(source, count, out);
}

ANVIL_INLINE void f32_to_f16(const unsigned char* source, std::size_t count, half* out,
                             [[maybe_unused]] conversion_path path) {
#if defined(ANVIL_DETAIL_CONVERT_F16C)
    if (path == conversion_path::fastest && vector_conversion_available()) {
        f32_to_f16_f16c(source, count, out);
        return;
    }
#elif defined(ANVIL_DETAIL_CONVERT_NEON)
    if (path == conversion_path::fastest) {
        f32_to_f16_neon(source, count, out);
        return;
    }
#endif
    f32_to_f16_portable(source, count, out);
}

ANVIL_INLINE void bf16_to_f32(const unsigned char* source, std::size_t count, float* out) noexcept {
    std::size_t i = 0;
#if defined(ANVIL_DETAIL_CONVERT_F16C) && defined(__SSE2__)
    const __m128i zero = _mm_setzero_si128();
    for (; i + 8 <= count; i += 8) {
        const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(source + 2 * i));
        // Zeros interleaved below each bfloat16: the shift by 16.
        _mm_storeu_ps(out + i, _mm_castsi128_ps(_mm_unpacklo_epi16(zero, raw)));
        _mm_storeu_ps(out + i + 4, _mm_castsi128_ps(_mm_unpackhi_epi16(zero, raw)));
    }
#elif defined(ANVIL_DETAIL_CONVERT_NEON)
    for (; i + 8 <= count; i += 8) {
        const uint16x8_t raw = vreinterpretq_u16_u8(vld1q_u8(source + 2 * i));
        vst1q_f32(out + i, vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(raw), 16)));
        vst1q_f32(out + i + 4, vreinterpretq_f32_u32(vshll_high_n_u16(raw, 16)));
    }
#endif
    for (; i < count; ++i) {
        const auto bits = static_cast<std::uint32_t>(load_unaligned<std::uint16_t>(source + 2 * i));
        out[i] = std::bit_cast<float>(bits << 16);
    }
}

ANVIL_INLINE void bool_to_f32(const unsigned char* source, std::size_t count, float* out) noexcept {
    for (std::size_t i = 0; i < count; ++i)
        out[i] = source[i] != 0 ? 1.0f : 0.0f;
}

ANVIL_INLINE void table_to_f32(const std::array<float, 256>& table, const unsigned char* source,
                               std::size_t count, float* out) noexcept {
    for (std::size_t i = 0; i < count; ++i)
        out[i] = table[source[i]];
}

ANVIL_INLINE void throw_unknown_dtype(const char* function, dtype source) {
    throw type_error(message(function, ": source element type ", static_cast<unsigned>(source),
                             " is not an anvil::dtype; no conversion is defined for it"));
}

ANVIL_INLINE void convert_to_f32(dtype source, const void* data, std::size_t count, float* out,
                                 conversion_path path) {
    if (count == 0) return;
    const auto* bytes = static_cast<const unsigned char*>(data);
    switch (source) {
        case dtype::f64:
            return values_to_f32<double>(bytes, count, out);
        case dtype::f32:
            std::memcpy(out, bytes, count * sizeof(float));
            return;
        case dtype::f16:
            return f16_to_f32(bytes, count, out, path);
        case dtype::bf16:
            return bf16_to_f32(bytes, count, out);
        case dtype::f8_e4m3:
            return table_to_f32(float8_e4m3_table, bytes, count, out);
        case dtype::f8_e5m2:
            return table_to_f32(float8_e5m2_table, bytes, count, out);
        case dtype::i64:
            return values_to_f32<std::int64_t>(bytes, count, out);
        case dtype::i32:
            return values_to_f32<std::int32_t>(bytes, count, out);
        case dtype::i16:
            return values_to_f32<std::int16_t>(bytes, count, out);
        case dtype::i8:
            return values_to_f32<std::int8_t>(bytes, count, out);
        case dtype::u64:
            return values_to_f32<std::uint64_t>(bytes, count, out);
        case dtype::u32:
            return values_to_f32<std::uint32_t>(bytes, count, out);
        case dtype::u16:
            return values_to_f32<std::uint16_t>(bytes, count, out);
        case dtype::u8:
            return values_to_f32<std::uint8_t>(bytes, count, out);
        case dtype::boolean:
            return bool_to_f32(bytes, count, out);
    }
    throw_unknown_dtype("convert_to_f32", source);
}

ANVIL_INLINE void convert_to_f16(dtype source, const void* data, std::size_t count, half* out,
                                 conversion_path path) {
    if (count == 0) return;
    const auto* bytes = static_cast<const unsigned char*>(data);
    switch (source) {
        case dtype::f16:
            std::memcpy(out, bytes, count * sizeof(half));
            return;
        case dtype::f32:
            return f32_to_f16(bytes, count, out, path);
        case dtype::f64:
            // Directly: f64 -> f32 -> f16 would round twice.
            for (std::size_t i = 0; i < count; ++i) {
                out[i].bits = double_to_half_bits(load_unaligned<double>(bytes + 8 * i));
            }
            return;
        case dtype::bf16:
        case dtype::f8_e4m3:
        case dtype::f8_e5m2:
        case dtype::i64:
        case dtype::i32:
        case dtype::i16:
        case dtype::i8:
        case dtype::u64:
        case dtype::u32:
        case dtype::u16:
        case dtype::u8:
        case dtype::boolean: {
            // Through f32 in blocks. One rounding only: these are exact in f32, except integers of magnitude
            // >= 2^24, which round in f32 but overflow f16 to infinity either way.
            std::array<float, 1024> block;
            const std::size_t element_size = dtype_size(source);
            for (std::size_t done = 0; done < count; done += block.size()) {
                const std::size_t chunk = count - done < block.size() ? count - done : block.size();
                convert_to_f32(source, bytes + done * element_size, chunk, block.data(), path);
                f32_to_f16(reinterpret_cast<const unsigned char*>(block.data()), chunk, out + done, path);
            }
            return;
        }
    }
    throw_unknown_dtype("convert_to_f16", source);
}

ANVIL_INLINE void convert_f32_to_f16(const float* data, std::size_t count, half* out, conversion_path path) {
    if (count == 0) return;
    f32_to_f16(reinterpret_cast<const unsigned char*>(data), count, out, path);
}

}  // namespace detail

ANVIL_INLINE void convert_to_f32(dtype source, const void* data, std::size_t count, float* out) {
    detail::convert_to_f32(source, data, count, out, detail::conversion_path::fastest);
}

ANVIL_INLINE void convert_to_f16(dtype source, const void* data, std::size_t count, half* out) {
    detail::convert_to_f16(source, data, count, out, detail::conversion_path::fastest);
}

ANVIL_INLINE void convert_f32_to_f16(const float* data, std::size_t count, half* out) {
    detail::convert_f32_to_f16(data, count, out, detail::conversion_path::fastest);
}

ANVIL_INLINE void convert_f32_to_bf16(const float* data, std::size_t count, bfloat16* out) noexcept {
    const auto* bytes = reinterpret_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < count; ++i) {
        out[i].bits = float_to_bfloat16_bits(detail::load_unaligned<float>(bytes + 4 * i));
    }
}

}  // namespace anvil

#undef ANVIL_DETAIL_CONVERT_F16C
#undef ANVIL_DETAIL_CONVERT_NEON
