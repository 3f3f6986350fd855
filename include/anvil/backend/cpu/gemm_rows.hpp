// anvil: the product of a few rows of A (decoding: one token, or a handful) with a weight stored as rows —
// B = Wᵀ for W [n, k], nn.Linear's layout and a GGUF file's. Each output is the dot product of a row of A
// with a row of W, so W is streamed from memory once, in its own format, and decoded in registers: never
// packed, never converted to f32 in memory. With one row of A the product reads nothing but W, and W's bytes
// are the time: 4 a weight in f32, 2 in f16 and bf16, 1 in int8, 1.06 in Q8_0 and 0.56 in Q4_0.
//   Formats: f32, f16, bf16, i8 with a scale and zero point per row of W (anvil's int8 compression), u8
// palette indices with a palette per group of rows (anvil's lut4 / lut6 compression), and ggml's Q8_0 and
// Q4_0 blocks (32 weights with an f16 scale d: w = d * q, q int8; w = d * (q - 8), q four
// bits, the first 16 in the low nibbles) and the K-quants of llama.cpp's Q4_K_M files, Q4_K and Q6_K (256
// weights: w = d sc q - dmin m with a 6-bit scale and min per 32, q four bits; w = d sc (q - 32) with an int8
// scale per 16, q six bits); also Q4_1, Q5_0, Q5_1 and IQ4_NL (32 weights: a min added, a fifth bit from a
// u32, a 16-value table), Q5_K (Q4_K with a fifth bit) and Q8_K (an f32 d over 256 int8). A block's dot
// product is taken over its integers and scaled once, d * Σ q x (- m Σ x): the same real number as Σ w x, so
// the result is the dequantised weights' product up to f32 rounding. Written once with vector extensions;
// decoders per instruction set (AVX-512, AVX2+F16C, and a portable one that decodes into memory), chosen by
// the GEMM's kernel.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>

#include "anvil/backend/cpu/gemm_kernel.hpp"
#include "anvil/backend/cpu/gemm_reference.hpp"
#include "anvil/compilation.hpp"
#include "anvil/core/bfloat16.hpp"
#include "anvil/core/ggml_types.hpp"
#include "anvil/core/half.hpp"
#include "anvil/core/thread_pool.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#elif defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#endif

#if defined(__GNUC__) || defined(__clang__)
#define ANVIL_DETAIL_ROWS_INLINE __attribute__((always_inline)) inline
#define ANVIL_DETAIL_ROWS_UNROLL _Pragma("GCC unroll 32")
#endif

namespace anvil::detail {

// How a weight's rows are stored: floats, i8 with a scale per row, palette indices, or ggml blocks (the
// first four read two rows at a time, gemm_rows_side_by_side; the rest one).
enum class row_format : unsigned char {
    f32,
    f16,
    bf16,
    i8,
    lut,
    q8_0,
    q4_0,
    q4_k,
    q6_k,
    q4_1,
    q5_0,
    q5_1,
    q5_k,
    q8_k,
    iq4_nl
};

// The ggml block formats (each step's sum is scaled), and those whose values are shifted too (w = scale *
// q - offset).
[[nodiscard]] constexpr bool row_format_has_blocks(row_format format) noexcept {
    return format != row_format::f32 && format != row_format::f16 && format != row_format::bf16 &&
           format != row_format::i8 && format != row_format::lut;
}
[[nodiscard]] constexpr bool row_format_has_offsets(row_format format) noexcept {
    return format == row_format::q4_k || format == row_format::q4_1 || format == row_format::q5_1 ||
           format == row_format::q5_k;
}

// A weight read by rows: row j of W (column j of B) at bytes + j * row_bytes, k values each.
struct weight_rows {
    const std::byte* bytes = nullptr;
    std::int64_t row_bytes = 0;
    row_format format = row_format::f32;
    const float* scale = nullptr;       // i8: one per row
    const float* zero_point = nullptr;  // i8: one per row, or null for 0
    // lut: u8 indices into a palette of lut_size values per group of rows, palettes lut_stride apart (64
    // floats, or 256: the decoders read whole vectors of them)
    const float* lut = nullptr;
    std::int64_t lut_size = 0, lut_stride = 0, rows_per_palette = 1;
};

// The rows B is, when it is a weight stored by rows in a format these kernels decode: B transposed
// (unit row stride), and k a whole number of blocks for ggml's.
[[nodiscard]] inline std::optional<weight_rows> weight_rows_of(const matrix_operand& b, std::int64_t k) {
    weight_rows rows;
    rows.bytes = static_cast<const std::byte*>(b.data);
    if (b.has_blocks()) {
        switch (b.blocks) {
            case ggml_type::Q8_0:
                rows.format = row_format::q8_0;
                break;
            case ggml_type::Q4_0:
                rows.format = row_format::q4_0;
                break;
            case ggml_type::Q4_K:
                rows.format = row_format::q4_k;
                break;
            case ggml_type::Q6_K:
                rows.format = row_format::q6_k;
                break;
            case ggml_type::Q4_1:
                rows.format = row_format::q4_1;
                break;
            case ggml_type::Q5_0:
                rows.format = row_format::q5_0;
                break;
            case ggml_type::Q5_1:
                rows.format = row_format::q5_1;
                break;
            case ggml_type::Q5_K:
                rows.format = row_format::q5_k;
                break;
            case ggml_type::Q8_K:
                rows.format = row_format::q8_k;
                break;
            case ggml_type::IQ4_NL:
                rows.format = row_format::iq4_nl;
                break;
            default:
                return std::nullopt;
        }
        const auto block =
            static_cast<std::int64_t>(ggml_layout(static_cast<std::uint32_t>(b.blocks))->block);
        if (k % block != 0) return std::nullopt;
        rows.row_bytes = b.block_row_bytes;
        return rows;
    }
    if (b.row_stride != 1 && k > 1) return std::nullopt;
    switch (b.type) {
        case dtype::f32:
            rows.format = row_format::f32;
            break;
        case dtype::f16:
            rows.format = row_format::f16;
            break;
        case dtype::bf16:
            rows.format = row_format::bf16;
            break;
        case dtype::i8:
            rows.format = row_format::i8;
            rows.scale = b.scale;
            rows.zero_point = b.zero_point;
            break;
        case dtype::u8:
            // Palettes padded to 64 or 256 values, as the decoders read them (linear_algebra.hpp pads
            // them).
            if (b.lut == nullptr || (b.lut_stride != 64 && b.lut_stride != 256)) return std::nullopt;
            rows.format = row_format::lut;
            rows.lut = b.lut;
            rows.lut_size = b.lut_length;
            rows.lut_stride = b.lut_stride;
            rows.rows_per_palette = b.lut_columns_per_group;
            break;
        default:
            return std::nullopt;
    }
    rows.row_bytes = b.col_stride * static_cast<std::int64_t>(dtype_size(b.type));
    return rows;
}

// Values per step of the kernels: one Q8_0 / Q4_0 block.
inline constexpr int gemm_rows_step = 32;
// Up to this many rows of A the GEMM takes the dot products (more rows reuse each decoded weight enough
// for packing to pay).
inline constexpr std::int64_t gemm_rows_max_m = 4;
// Threads take the rows of W in multiples of this.
inline constexpr int gemm_rows_per_tile = 4;
// Rows of W a tile reads side by side. With one row of A more rows would share its loads, but fewer
// streams read memory faster here (n=40000-80000, k=768, one thread, from memory: Q8_0 21 GB/s one row at
// a time against 7.5 four at a time, F16 30 against 24; Q4_0 and the K-quants best two at a time), and
// decoding reads weights from memory.
template <row_format format>
inline constexpr int gemm_rows_side_by_side =
    format == row_format::q4_0 || format == row_format::q4_k || format == row_format::q6_k ? 2 : 1;

struct gemm_rows_problem {
    std::int64_t m, n, k;
    const float* a;  // rows of A, lda apart, unit column stride
    std::int64_t lda;
    weight_rows w;
    float* c;
    std::int64_t ldc;
    gemm_epilogue epilogue;
    // i8 with zero points: Σ over each row of A (gemm_rows_run fills it), so that Σ (q - z) x = Σ q x - z
    // Σ x costs O(1) an output.
    float a_sums[gemm_rows_max_m] = {};
};

// The decoders, written once for vectors of Isa::width floats; the instruction set gives the conversions:
// bytes and nibbles widened to floats, and f16 (Isa::signed_bytes_to_floats, nibbles_to_floats,
// halves_to_floats, half_to_float).
// Integer vectors with as many lanes as a float vector (spelled out: GCC ignores a vector_size that
// depends on a template parameter). Bytes are widened by the instruction set's code: GCC converts a
// vector of bytes to floats one lane at a time.
template <int Width>
struct gemm_rows_lanes;
template <>
struct gemm_rows_lanes<4> {
    typedef std::uint16_t halves __attribute__((vector_size(8)));
    typedef std::uint32_t words __attribute__((vector_size(16)));
};
template <>
struct gemm_rows_lanes<8> {
    typedef std::uint16_t halves __attribute__((vector_size(16)));
    typedef std::uint32_t words __attribute__((vector_size(32)));
};
template <>
struct gemm_rows_lanes<16> {
    typedef std::uint16_t halves __attribute__((vector_size(32)));
    typedef std::uint32_t words __attribute__((vector_size(64)));
};

template <class Isa>
struct gemm_rows_decoder {
    typedef typename Isa::vec vec;
    static constexpr int width = Isa::width;
    static constexpr int per_step = gemm_rows_step / width;
    typedef typename gemm_rows_lanes<width>::halves halves;
    typedef typename gemm_rows_lanes<width>::words words;

    typedef std::uint8_t bytes16 __attribute__((vector_size(16)));

    // 16 times the bits of `first` and `second` (16 values' fifth bits, value l's in bit l % 8), one a
    // byte.
    ANVIL_DETAIL_ROWS_INLINE static bytes16 fifth_bit_of(std::byte first, std::byte second) noexcept {
        const auto a = static_cast<std::uint8_t>(first), b = static_cast<std::uint8_t>(second);
        const bytes16 spread = {a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b};
        const bytes16 bit = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
        return reinterpret_cast<bytes16>((spread & bit) != 0) & 16;
    }

    // 32 values below 128 (`low` values 0-15, `high` 16-31) as floats.
    ANVIL_DETAIL_ROWS_INLINE static void small_values_to_floats(const bytes16& low, const bytes16& high,
                                                                vec* values) noexcept {
        std::byte bytes[32];
        std::memcpy(bytes, &low, 16);
        std::memcpy(bytes + 16, &high, 16);
        ANVIL_DETAIL_ROWS_UNROLL for (int p = 0; p < per_step; ++p)
            Isa::signed_bytes_to_floats(bytes + p * width, values[p]);
    }

    // Sub-block j's scale and offset in a Q4_K or Q5_K block (d, dmin, then the same 12 bytes of 6-bit
    // scales and mins): w = d sc q - dmin m.
    ANVIL_DETAIL_ROWS_INLINE static void k_quant_sub_block(const std::byte* block, int j, float& scale,
                                                           float& offset) noexcept {
        int sub_scale = 0, sub_min = 0;
        ggml_scale_min_k4(j, reinterpret_cast<const std::uint8_t*>(block + 4), sub_scale, sub_min);
        scale = Isa::half_to_float(block) * static_cast<float>(sub_scale);
        offset = Isa::half_to_float(block + 2) * static_cast<float>(sub_min);
    }

    // The step's 32 values (without their block scale: w = scale * value - offset).
    template <row_format format>
    ANVIL_DETAIL_ROWS_INLINE static void decode(const std::byte* row, std::int64_t step, const float* palette,
                                                std::int64_t palette_size, vec* values, float& scale,
                                                float& offset) noexcept {
        scale = 1.0f;
        offset = 0.0f;
        if constexpr (format == row_format::f32) {
            std::memcpy(values, row + step * gemm_rows_step * 4, gemm_rows_step * 4);
        } else if constexpr (format == row_format::f16) {
            ANVIL_DETAIL_ROWS_UNROLL for (int p = 0; p < per_step; ++p)
                Isa::halves_to_floats(row + (step * gemm_rows_step + p * width) * 2, values[p]);
        } else if constexpr (format == row_format::bf16) {
            ANVIL_DETAIL_ROWS_UNROLL for (int p = 0; p < per_step; ++p) {
                halves raw;
                std::memcpy(&raw, row + (step * gemm_rows_step + p * width) * 2, sizeof raw);
                values[p] = reinterpret_cast<vec>(__builtin_convertvector(raw, words) << 16);
            }
        } else if constexpr (format == row_format::i8) {
            ANVIL_DETAIL_ROWS_UNROLL for (int p = 0; p < per_step; ++p)
                Isa::signed_bytes_to_floats(row + step * gemm_rows_step + p * width, values[p]);
        } else if constexpr (format == row_format::lut) {
            ANVIL_DETAIL_ROWS_UNROLL for (int p = 0; p < per_step; ++p) Isa::palette_to_floats(
                row + step * gemm_rows_step + p * width, palette, palette_size, values[p]);
        } else if constexpr (format == row_format::q8_0) {
            const std::byte* block = row + step * 34;
            scale = Isa::half_to_float(block);
            ANVIL_DETAIL_ROWS_UNROLL for (int p = 0; p < per_step; ++p)
                Isa::signed_bytes_to_floats(block + 2 + p * width, values[p]);
        } else if constexpr (format == row_format::q4_0) {
            // Q4_0: the low nibbles of the 16 bytes are values 0-15, the high nibbles 16-31.
            const std::byte* block = row + step * 18;
            scale = Isa::half_to_float(block);
            Isa::nibbles_to_floats(block + 2, values);
            ANVIL_DETAIL_ROWS_UNROLL for (int p = 0; p < per_step; ++p) values[p] -= 8.0f;
        } else if constexpr (format == row_format::q4_k) {
            // Sub-block j of 8 (144 bytes: d, dmin, 12 bytes of scales and mins, 128 of nibbles): the low
            // nibbles of qs[32 (j / 2) ...] for even j, the high ones for odd j.
            const std::byte* block = row + step / 8 * 144;
            const int j = static_cast<int>(step % 8);
            k_quant_sub_block(block, j, scale, offset);
            Isa::nibble_half_to_floats(block + 16 + 32 * (j / 2), j % 2 * 4, values);
        } else if constexpr (format == row_format::q4_1) {
            // Q4_1 (20 bytes: d, m, 16 bytes of nibbles as Q4_0's): w = d q + m.
            const std::byte* block = row + step * 20;
            scale = Isa::half_to_float(block);
            offset = -Isa::half_to_float(block + 2);
            Isa::nibbles_to_floats(block + 4, values);
        } else if constexpr (format == row_format::q5_0 || format == row_format::q5_1) {
            // Q5_0 (22 bytes: d, a u32 of fifth bits, 16 bytes of nibbles): w = d (q - 16); Q5_1 (24
            // bytes: d, m, then the same): w = d q + m. Value l's fifth bit is bit l of the u32.
            constexpr bool with_min = format == row_format::q5_1;
            const std::byte* block = row + step * (with_min ? 24 : 22);
            scale = Isa::half_to_float(block);
            if constexpr (with_min) offset = -Isa::half_to_float(block + 2);
            const std::byte* fifth_bits = block + (with_min ? 4 : 2);
            bytes16 low, high;
            std::memcpy(&low, fifth_bits + 4, 16);
            high = low >> 4;
            low &= 15;
            low |= fifth_bit_of(fifth_bits[0], fifth_bits[1]);
            high |= fifth_bit_of(fifth_bits[2], fifth_bits[3]);
            small_values_to_floats(low, high, values);
            if constexpr (!with_min) {
                ANVIL_DETAIL_ROWS_UNROLL for (int p = 0; p < per_step; ++p) values[p] -= 16.0f;
            }
        } else if constexpr (format == row_format::q5_k) {
            // Q5_K (176 bytes: d, dmin, 12 bytes of scales and mins as Q4_K's, 32 of fifth bits qh, 128
            // of nibbles qs): sub-block j's value l is the nibble of qs[32 (j / 2) + l] (the low one for
            // even j) plus 16 times bit j of qh[l].
            const std::byte* block = row + step / 8 * 176;
            const int j = static_cast<int>(step % 8);
            k_quant_sub_block(block, j, scale, offset);
            // Shifts by constants and a compare: GCC widens byte vectors shifted by a variable lane by lane.
            const auto bit = static_cast<std::uint8_t>(1u << j);
            bytes16 parts[2];
            ANVIL_DETAIL_ROWS_UNROLL for (int h = 0; h < 2; ++h) {
                bytes16 nibbles, fifth;
                std::memcpy(&nibbles, block + 48 + 32 * (j / 2) + 16 * h, 16);
                std::memcpy(&fifth, block + 16 + 16 * h, 16);
                const bytes16 value = j % 2 != 0 ? bytes16(nibbles >> 4) : bytes16(nibbles & 15);
                parts[h] = value | (reinterpret_cast<bytes16>((fifth & bit) != 0) & 16);
            }
            small_values_to_floats(parts[0], parts[1], values);
        } else if constexpr (format == row_format::q8_k) {
            // Q8_K (292 bytes: f32 d, 256 int8 values, 16 int16 sums the product does not need).
            const std::byte* block = row + step / 8 * 292;
            std::memcpy(&scale, block, 4);
            ANVIL_DETAIL_ROWS_UNROLL for (int p = 0; p < per_step; ++p)
                Isa::signed_bytes_to_floats(block + 4 + 32 * (step % 8) + p * width, values[p]);
        } else if constexpr (format == row_format::iq4_nl) {
            // IQ4_NL (18 bytes: d, 16 bytes of nibbles ordered as Q4_0's): w = d table[nibble].
            const std::byte* block = row + step * 18;
            scale = Isa::half_to_float(block);
            bytes16 low;
            std::memcpy(&low, block + 2, 16);
            std::byte indices[32];
            const bytes16 high = low >> 4;
            low &= 15;
            std::memcpy(indices, &low, 16);
            std::memcpy(indices + 16, &high, 16);
            ANVIL_DETAIL_ROWS_UNROLL for (int p = 0; p < per_step; ++p)
                Isa::palette_to_floats(indices + p * width, ggml_iq4_nl_values, 16, values[p]);
        } else if constexpr (format == row_format::q6_k) {
            // Quarter q of half h (210 bytes: 128 of low nibbles ql, 64 of high bit pairs qh, 16 int8
            // scales, d): value l is ((ql[64 h + 32 (q % 2) + l] >> 4 (q / 2)) & 15) | ((qh[32 h + l] >>
            // 2 q) & 3) << 4, minus 32, times scale[8 h + 2 q + l / 16].
            const std::byte* block = row + step / 8 * 210;
            const int j = static_cast<int>(step % 8), h = j / 4, q = j % 4;
            scale = Isa::half_to_float(block + 208);
            Isa::six_bits_to_floats(block + 64 * h + 32 * (q % 2), q / 2 * 4, block + 128 + 32 * h, 2 * q,
                                    values);
            const auto* scales = reinterpret_cast<const std::int8_t*>(block + 192 + 8 * h + 2 * q);
            ANVIL_DETAIL_ROWS_UNROLL for (int p = 0; p < per_step; ++p) values[p] *=
                static_cast<float>(scales[p * width / 16]);
        }
    }
};

// The portable version, with vector extensions that Clang turns into NEON's widening moves on arm64 (GCC
// on x86 converts lane by lane: there the AVX2 and AVX-512 versions run instead). f16 converts in
// hardware on arm64 (FCVT: __fp16 and NEON's intrinsics, which GCC and Clang share; g++ 12 has no _Float16 in
// C++), through anvil's scalar conversion elsewhere.
struct gemm_rows_portable_isa {
    typedef gemm_isa_portable::vec vec;
    static constexpr int width = gemm_isa_portable::width;
    typedef std::int8_t four_bytes __attribute__((vector_size(4)));
    typedef std::uint8_t four_unsigned_bytes __attribute__((vector_size(4)));
    typedef std::uint8_t sixteen_bytes __attribute__((vector_size(16)));

    // A vector from lane(0..width-1), written to an array first: writing the lanes of an uninitialised vector
    // one by one made g++ -O3 warn (-Wmaybe-uninitialized) in users' header-only builds.
    template <class Lane>
    ANVIL_DETAIL_ROWS_INLINE static vec from_lanes(Lane lane) noexcept {
        float lanes[width];
        for (int at = 0; at < width; ++at)
            lanes[at] = lane(at);
        vec out;
        std::memcpy(&out, lanes, sizeof out);
        return out;
    }
    ANVIL_DETAIL_ROWS_INLINE static float half_to_float(const std::byte* at) noexcept {
#if defined(__aarch64__) && defined(__ARM_NEON)
        __fp16 value;
        std::memcpy(&value, at, 2);
        return static_cast<float>(value);
#else
        std::uint16_t bits;
        std::memcpy(&bits, at, 2);
        return half_bits_to_float(bits);
#endif
    }
    ANVIL_DETAIL_ROWS_INLINE static void halves_to_floats(const std::byte* at, vec& out) noexcept {
#if defined(__aarch64__) && defined(__ARM_NEON)
        const float32x4_t floats =
            vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(reinterpret_cast<const std::uint8_t*>(at))));
        std::memcpy(&out, &floats, sizeof out);
#else
        out = from_lanes([&](int lane) { return half_to_float(at + 2 * lane); });
#endif
    }
    ANVIL_DETAIL_ROWS_INLINE static void signed_bytes_to_floats(const std::byte* at, vec& out) noexcept {
        four_bytes raw;
        std::memcpy(&raw, at, sizeof raw);
        out = __builtin_convertvector(raw, vec);
    }
    ANVIL_DETAIL_ROWS_INLINE static void palette_to_floats(const std::byte* at, const float* palette,
                                                           std::int64_t, vec& out) noexcept {
        out = from_lanes([&](int lane) { return palette[static_cast<unsigned>(at[lane])]; });
    }
    // 32 bytes: (byte >> shift) & 15 each, into out[0..7].
    ANVIL_DETAIL_ROWS_INLINE static void nibble_half_to_floats(const std::byte* at, int shift,
                                                               vec* out) noexcept {
        for (int p = 0; p < 8; ++p) {
            out[p] = from_lanes([&](int lane) {
                return static_cast<float>((static_cast<unsigned>(at[p * width + lane]) >> shift) & 15u);
            });
        }
    }
    // Q6_K's six-bit values, minus 32: 32 from low (a nibble of each byte) and high (two bits of each
    // byte).
    ANVIL_DETAIL_ROWS_INLINE static void six_bits_to_floats(const std::byte* low, int low_shift,
                                                            const std::byte* high, int high_shift,
                                                            vec* out) noexcept {
        for (int p = 0; p < 8; ++p) {
            out[p] = from_lanes([&](int lane) {
                const int at = p * width + lane;
                const unsigned value = ((static_cast<unsigned>(low[at]) >> low_shift) & 15u) |
                                       (((static_cast<unsigned>(high[at]) >> high_shift) & 3u) << 4);
                return static_cast<float>(static_cast<int>(value) - 32);
            });
        }
    }
    // 16 bytes: the low nibbles into out[0..3], the high ones into out[4..7].
    ANVIL_DETAIL_ROWS_INLINE static void nibbles_to_floats(const std::byte* at, vec* out) noexcept {
        sixteen_bytes packed;
        std::memcpy(&packed, at, sizeof packed);
        const sixteen_bytes low = packed & static_cast<std::uint8_t>(15);
        const sixteen_bytes high = packed >> static_cast<std::uint8_t>(4);
        const auto quarter = [](const sixteen_bytes& from, int q) {
            four_unsigned_bytes part;
            std::memcpy(&part, reinterpret_cast<const unsigned char*>(&from) + 4 * q, sizeof part);
            return __builtin_convertvector(part, vec);
        };
        ANVIL_DETAIL_ROWS_UNROLL for (int q = 0; q < 4; ++q) {
            out[q] = quarter(low, q);
            out[4 + q] = quarter(high, q);
        }
    }
};

#if defined(ANVIL_DETAIL_GEMM_X86)
// The entry points flatten: everything below them, the decoders too, is inlined into the function that has
// the instruction set's target attribute (F16C's conversions cannot be inlined anywhere else).
#define ANVIL_DETAIL_ROWS_AVX2 __attribute__((target("avx2,fma,f16c")))
#define ANVIL_DETAIL_ROWS_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))

struct gemm_rows_avx2_isa {
    typedef gemm_isa_avx2::vec vec;
    static constexpr int width = gemm_isa_avx2::width;

    ANVIL_DETAIL_ROWS_AVX2 static float half_to_float(const std::byte* at) noexcept {
        unsigned short bits;
        std::memcpy(&bits, at, 2);
        return _cvtsh_ss(bits);
    }
    ANVIL_DETAIL_ROWS_AVX2 static void halves_to_floats(const std::byte* at, vec& out) noexcept {
        out = reinterpret_cast<vec>(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at))));
    }
    ANVIL_DETAIL_ROWS_AVX2 static void signed_bytes_to_floats(const std::byte* at, vec& out) noexcept {
        out = reinterpret_cast<vec>(
            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(at)))));
    }
    ANVIL_DETAIL_ROWS_AVX2 static void palette_to_floats(const std::byte* at, const float* palette,
                                                         std::int64_t, vec& out) noexcept {
        const __m256i indices = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(at)));
        out = reinterpret_cast<vec>(_mm256_mask_i32gather_ps(_mm256_setzero_ps(), palette, indices,
                                                             _mm256_castsi256_ps(_mm256_set1_epi32(-1)), 4));
    }
    // 32 bytes: (byte >> shift) & 15 each, into out[0..3].
    ANVIL_DETAIL_ROWS_AVX2 static void nibble_half_to_floats(const std::byte* at, int shift,
                                                             vec* out) noexcept {
        const __m256i mask = _mm256_set1_epi32(15);
        const __m128i count = _mm_cvtsi32_si128(shift);
        for (int p = 0; p < 4; ++p) {
            const __m256i wide =
                _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(at + 8 * p)));
            out[p] = reinterpret_cast<vec>(
                _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srl_epi32(wide, count), mask)));
        }
    }
    // Q6_K's six-bit values, minus 32 (see the portable version).
    ANVIL_DETAIL_ROWS_AVX2 static void six_bits_to_floats(const std::byte* low, int low_shift,
                                                          const std::byte* high, int high_shift,
                                                          vec* out) noexcept {
        const __m128i low_count = _mm_cvtsi32_si128(low_shift), high_count = _mm_cvtsi32_si128(high_shift);
        for (int p = 0; p < 4; ++p) {
            const __m256i l =
                _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(low + 8 * p)));
            const __m256i h =
                _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(high + 8 * p)));
            const __m256i value = _mm256_or_si256(
                _mm256_and_si256(_mm256_srl_epi32(l, low_count), _mm256_set1_epi32(15)),
                _mm256_slli_epi32(_mm256_and_si256(_mm256_srl_epi32(h, high_count), _mm256_set1_epi32(3)),
                                  4));
            out[p] =
                reinterpret_cast<vec>(_mm256_cvtepi32_ps(_mm256_sub_epi32(value, _mm256_set1_epi32(32))));
        }
    }
    // 16 bytes: the low nibbles into out[0..1], the high ones into out[2..3].
    ANVIL_DETAIL_ROWS_AVX2 static void nibbles_to_floats(const std::byte* at, vec* out) noexcept {
        const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(at));
        const __m128i mask = _mm_set1_epi8(15);
        const __m128i low = _mm_and_si128(packed, mask),
                      high = _mm_and_si128(_mm_srli_epi16(packed, 4), mask);
        out[0] = reinterpret_cast<vec>(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(low)));
        out[1] = reinterpret_cast<vec>(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(low, 8))));
        out[2] = reinterpret_cast<vec>(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(high)));
        out[3] = reinterpret_cast<vec>(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(high, 8))));
    }
};

struct gemm_rows_avx512_isa {
    typedef gemm_isa_avx512::vec vec;
    static constexpr int width = gemm_isa_avx512::width;

    ANVIL_DETAIL_ROWS_AVX512 static float half_to_float(const std::byte* at) noexcept {
        return gemm_rows_avx2_isa::half_to_float(at);
    }
    // The masked form: GCC 12's plain _mm512_cvtph_ps reads an "undefined" vector that
    // -Wmaybe-uninitialized reports.
    ANVIL_DETAIL_ROWS_AVX512 static void halves_to_floats(const std::byte* at, vec& out) noexcept {
        out = reinterpret_cast<vec>(
            _mm512_maskz_cvtph_ps(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at))));
    }
    ANVIL_DETAIL_ROWS_AVX512 static void signed_bytes_to_floats(const std::byte* at, vec& out) noexcept {
        const __m512i wide =
            _mm512_maskz_cvtepi8_epi32(0xFFFF, _mm_loadu_si128(reinterpret_cast<const __m128i*>(at)));
        out = reinterpret_cast<vec>(_mm512_maskz_cvtepi32_ps(0xFFFF, wide));
    }
    // A palette of up to 16 values is one register (one permute), of up to 64 four (two two-register
    // permutes and a blend on bit 5 of the index); a larger one (no compression option makes one) is read
    // value by value.
    ANVIL_DETAIL_ROWS_AVX512 static void palette_to_floats(const std::byte* at, const float* palette,
                                                           std::int64_t size, vec& out) noexcept {
        const __m512i indices =
            _mm512_maskz_cvtepu8_epi32(0xFFFF, _mm_loadu_si128(reinterpret_cast<const __m128i*>(at)));
        if (size <= 16) {
            out =
                reinterpret_cast<vec>(_mm512_maskz_permutexvar_ps(0xFFFF, indices, _mm512_loadu_ps(palette)));
        } else if (size <= 64) {
            const __m512 low = _mm512_maskz_permutex2var_ps(0xFFFF, _mm512_loadu_ps(palette), indices,
                                                            _mm512_loadu_ps(palette + 16));
            const __m512 high = _mm512_maskz_permutex2var_ps(0xFFFF, _mm512_loadu_ps(palette + 32), indices,
                                                             _mm512_loadu_ps(palette + 48));
            out = reinterpret_cast<vec>(
                _mm512_mask_blend_ps(_mm512_test_epi32_mask(indices, _mm512_set1_epi32(32)), low, high));
        } else {
            float lanes[width];
            for (int lane = 0; lane < width; ++lane)
                lanes[lane] = palette[static_cast<unsigned>(at[lane])];
            std::memcpy(&out, lanes, sizeof out);
        }
    }
    // 32 bytes: (byte >> shift) & 15 each, into out[0..1].
    ANVIL_DETAIL_ROWS_AVX512 static void nibble_half_to_floats(const std::byte* at, int shift,
                                                               vec* out) noexcept {
        const __m512i mask = _mm512_set1_epi32(15);
        const __m128i count = _mm_cvtsi32_si128(shift);
        for (int p = 0; p < 2; ++p) {
            const __m512i wide = _mm512_maskz_cvtepu8_epi32(
                0xFFFF, _mm_loadu_si128(reinterpret_cast<const __m128i*>(at + 16 * p)));
            out[p] = reinterpret_cast<vec>(_mm512_maskz_cvtepi32_ps(
                0xFFFF, _mm512_and_si512(_mm512_maskz_srl_epi32(0xFFFF, wide, count), mask)));
        }
    }
    // Q6_K's six-bit values, minus 32 (see the portable version).
    ANVIL_DETAIL_ROWS_AVX512 static void six_bits_to_floats(const std::byte* low, int low_shift,
                                                            const std::byte* high, int high_shift,
                                                            vec* out) noexcept {
        const __m128i low_count = _mm_cvtsi32_si128(low_shift), high_count = _mm_cvtsi32_si128(high_shift);
        for (int p = 0; p < 2; ++p) {
            const __m512i l = _mm512_maskz_cvtepu8_epi32(
                0xFFFF, _mm_loadu_si128(reinterpret_cast<const __m128i*>(low + 16 * p)));
            const __m512i h = _mm512_maskz_cvtepu8_epi32(
                0xFFFF, _mm_loadu_si128(reinterpret_cast<const __m128i*>(high + 16 * p)));
            const __m512i value = _mm512_or_si512(
                _mm512_and_si512(_mm512_maskz_srl_epi32(0xFFFF, l, low_count), _mm512_set1_epi32(15)),
                _mm512_maskz_slli_epi32(
                    0xFFFF,
                    _mm512_and_si512(_mm512_maskz_srl_epi32(0xFFFF, h, high_count), _mm512_set1_epi32(3)),
                    4));
            out[p] = reinterpret_cast<vec>(
                _mm512_maskz_cvtepi32_ps(0xFFFF, _mm512_sub_epi32(value, _mm512_set1_epi32(32))));
        }
    }
    // 16 bytes: the low nibbles into out[0], the high ones into out[1].
    ANVIL_DETAIL_ROWS_AVX512 static void nibbles_to_floats(const std::byte* at, vec* out) noexcept {
        const __m512i wide =
            _mm512_maskz_cvtepu8_epi32(0xFFFF, _mm_loadu_si128(reinterpret_cast<const __m128i*>(at)));
        const __m512i mask = _mm512_set1_epi32(15);
        out[0] = reinterpret_cast<vec>(_mm512_maskz_cvtepi32_ps(0xFFFF, _mm512_and_si512(wide, mask)));
        out[1] =
            reinterpret_cast<vec>(_mm512_maskz_cvtepi32_ps(0xFFFF, _mm512_maskz_srli_epi32(0xFFFF, wide, 4)));
    }
};
#endif

// Element p of a float, i8 or palette-index row (the tail past whole steps); blocks have no tail.
[[nodiscard]] inline float weight_row_value(const weight_rows& w, const std::byte* row, const float* palette,
                                            std::int64_t p) noexcept {
    std::uint16_t bits = 0;
    switch (w.format) {
        case row_format::f32: {
            float value;
            std::memcpy(&value, row + p * 4, 4);
            return value;
        }
        case row_format::f16:
            std::memcpy(&bits, row + p * 2, 2);
            return static_cast<float>(half::from_bits(bits));
        case row_format::bf16:
            std::memcpy(&bits, row + p * 2, 2);
            return static_cast<float>(bfloat16::from_bits(bits));
        case row_format::i8:
            return static_cast<float>(static_cast<std::int8_t>(row[p]));
        case row_format::lut:
            return palette[static_cast<unsigned>(row[p])];
        default:
            return 0.0f;
    }
}

// C[i, j0 + r] for the Rows rows of W from j0 and the M rows of A from i0: per step, each row of W's 32
// values are decoded once and dotted with each row of A; the per-step sums are scaled (blocks) and added
// to one accumulator vector per output, reduced at the end. A tail of k beyond whole steps (float and i8
// rows only) is added one value at a time.
template <class Decoder, row_format format, int M, int Rows>
ANVIL_DETAIL_ROWS_INLINE void gemm_rows_tile(const gemm_rows_problem& g, std::int64_t i0, std::int64_t j0) {
    using vec = typename Decoder::vec;
    constexpr int per_step = gemm_rows_step / Decoder::width;
    constexpr bool blocks = row_format_has_blocks(format);
    constexpr bool offsets = row_format_has_offsets(format);  // w = scale * q - offset
    constexpr auto row_count = static_cast<std::size_t>(Rows), a_rows = static_cast<std::size_t>(M),
                   vectors = static_cast<std::size_t>(per_step);
    const std::byte* rows[row_count];
    const float* palettes[row_count];
    ANVIL_DETAIL_ROWS_UNROLL for (int r = 0; r < Rows; ++r) {
        rows[r] = g.w.bytes + (j0 + r) * g.w.row_bytes;
        palettes[r] =
            g.w.lut != nullptr ? g.w.lut + (j0 + r) / g.w.rows_per_palette * g.w.lut_stride : nullptr;
    }
    vec acc[a_rows][row_count];
    ANVIL_DETAIL_ROWS_UNROLL for (int i = 0; i < M; ++i) {
        ANVIL_DETAIL_ROWS_UNROLL for (int r = 0; r < Rows; ++r) acc[i][r] = vec{};
    }
    const std::int64_t steps = g.k / gemm_rows_step;
    for (std::int64_t step = 0; step < steps; ++step) {
        vec x[a_rows][vectors];
        vec x_sum[a_rows];
        ANVIL_DETAIL_ROWS_UNROLL for (int i = 0; i < M; ++i) {
            ANVIL_DETAIL_ROWS_UNROLL for (int p = 0; p < per_step; ++p) std::memcpy(
                &x[i][p], g.a + (i0 + i) * g.lda + step * gemm_rows_step + p * Decoder::width, sizeof(vec));
            if constexpr (offsets) {
                x_sum[i] = x[i][0];
                ANVIL_DETAIL_ROWS_UNROLL for (int p = 1; p < per_step; ++p) x_sum[i] += x[i][p];
            }
        }
        ANVIL_DETAIL_ROWS_UNROLL for (int r = 0; r < Rows; ++r) {
            vec values[vectors];
            float scale, offset;
            Decoder::template decode<format>(rows[r], step, palettes[r], g.w.lut_size, values, scale, offset);
            ANVIL_DETAIL_ROWS_UNROLL for (int i = 0; i < M; ++i) {
                if constexpr (blocks) {
                    vec sum = values[0] * x[i][0];
                    ANVIL_DETAIL_ROWS_UNROLL for (int p = 1; p < per_step; ++p) sum += values[p] * x[i][p];
                    acc[i][r] += scale * sum;
                    if constexpr (offsets) acc[i][r] -= offset * x_sum[i];
                } else {
                    ANVIL_DETAIL_ROWS_UNROLL for (int p = 0; p < per_step; ++p) acc[i][r] +=
                        values[p] * x[i][p];
                }
            }
        }
    }
    for (int i = 0; i < M; ++i) {
        for (int r = 0; r < Rows; ++r) {
            float dot = 0.0f;
            for (int lane = 0; lane < Decoder::width; ++lane)
                dot += acc[i][r][lane];
            const float* a_row = g.a + (i0 + i) * g.lda;
            for (std::int64_t p = steps * gemm_rows_step; p < g.k; ++p)
                dot += a_row[p] * weight_row_value(g.w, rows[r], palettes[r], p);
            const std::int64_t j = j0 + r;
            if constexpr (format == row_format::i8) {
                // Σ (q - z) x = Σ q x - z Σ x: the zero point applied once per output.
                if (g.w.zero_point != nullptr) dot -= g.w.zero_point[j] * g.a_sums[i0 + i];
                dot *= g.w.scale[j];
            }
            float& out = g.c[(i0 + i) * g.ldc + j];
            const float bias = g.epilogue.bias != nullptr ? g.epilogue.bias[j] : 0.0f;
            out = (g.epilogue.accumulate ? out : 0.0f) + dot + bias;
        }
    }
}

// Rows [j0, j0 + Rows) of W against every row of A, two rows of A at a time.
template <class Decoder, row_format format, int Rows>
ANVIL_DETAIL_ROWS_INLINE void gemm_rows_against_a(const gemm_rows_problem& g, std::int64_t j0) {
    std::int64_t i = 0;
    for (; i + 2 <= g.m; i += 2)
        gemm_rows_tile<Decoder, format, 2, Rows>(g, i, j0);
    if (i < g.m) gemm_rows_tile<Decoder, format, 1, Rows>(g, i, j0);
}

// Rows [j0, j1) of W: tiles of gemm_rows_side_by_side rows, then single rows.
template <class Decoder, row_format format>
ANVIL_DETAIL_ROWS_INLINE void gemm_rows_range_of(const gemm_rows_problem& g, std::int64_t j0,
                                                 std::int64_t j1) {
    std::int64_t j = j0;
    constexpr int side_by_side = gemm_rows_side_by_side<format>;
    for (; j + side_by_side <= j1; j += side_by_side)
        gemm_rows_against_a<Decoder, format, side_by_side>(g, j);
    for (; j < j1; ++j)
        gemm_rows_against_a<Decoder, format, 1>(g, j);
}

// One format's rows, through Formats::range<format>: a function of its own for each instruction set and
// format.
template <class Formats>
ANVIL_DETAIL_ROWS_INLINE void gemm_rows_range(const gemm_rows_problem& g, std::int64_t j0, std::int64_t j1) {
    switch (g.w.format) {
        case row_format::f32:
            return Formats::template range<row_format::f32>(g, j0, j1);
        case row_format::f16:
            return Formats::template range<row_format::f16>(g, j0, j1);
        case row_format::bf16:
            return Formats::template range<row_format::bf16>(g, j0, j1);
        case row_format::i8:
            return Formats::template range<row_format::i8>(g, j0, j1);
        case row_format::q8_0:
            return Formats::template range<row_format::q8_0>(g, j0, j1);
        case row_format::q4_0:
            return Formats::template range<row_format::q4_0>(g, j0, j1);
        case row_format::q4_k:
            return Formats::template range<row_format::q4_k>(g, j0, j1);
        case row_format::q6_k:
            return Formats::template range<row_format::q6_k>(g, j0, j1);
        case row_format::lut:
            return Formats::template range<row_format::lut>(g, j0, j1);
        case row_format::q4_1:
            return Formats::template range<row_format::q4_1>(g, j0, j1);
        case row_format::q5_0:
            return Formats::template range<row_format::q5_0>(g, j0, j1);
        case row_format::q5_1:
            return Formats::template range<row_format::q5_1>(g, j0, j1);
        case row_format::q5_k:
            return Formats::template range<row_format::q5_k>(g, j0, j1);
        case row_format::q8_k:
            return Formats::template range<row_format::q8_k>(g, j0, j1);
        case row_format::iq4_nl:
            return Formats::template range<row_format::iq4_nl>(g, j0, j1);
    }
}

// The entry points, one per instruction set, switch over the formats. Each format's tiles are flattened into
// a function of their own (flatten, so the templates take the instruction set's target; noinline, so the
// formats stay apart): one body for all fifteen formats took Clang with the sanitizers minutes, most of it in
// passes that grow faster than the function. Separate compilation may give them a unit of their own
// (ANVIL_KERNEL_DEFINITIONS, anvil/compilation.hpp).
ANVIL_KERNEL_INLINE void gemm_rows_portable_range(const gemm_rows_problem& g, std::int64_t j0,
                                                  std::int64_t j1);
#if defined(ANVIL_DETAIL_GEMM_X86)
ANVIL_KERNEL_INLINE void gemm_rows_avx2_range(const gemm_rows_problem& g, std::int64_t j0, std::int64_t j1);
ANVIL_KERNEL_INLINE void gemm_rows_avx512_range(const gemm_rows_problem& g, std::int64_t j0, std::int64_t j1);
#endif

#if ANVIL_KERNEL_DEFINITIONS
struct gemm_rows_portable_formats {
    template <row_format format>
    __attribute__((flatten, noinline)) static void range(const gemm_rows_problem& g, std::int64_t j0,
                                                         std::int64_t j1) {
        gemm_rows_range_of<gemm_rows_decoder<gemm_rows_portable_isa>, format>(g, j0, j1);
    }
};
ANVIL_KERNEL_INLINE void gemm_rows_portable_range(const gemm_rows_problem& g, std::int64_t j0,
                                                  std::int64_t j1) {
    gemm_rows_range<gemm_rows_portable_formats>(g, j0, j1);
}
#if defined(ANVIL_DETAIL_GEMM_X86)
struct gemm_rows_avx2_formats {
    template <row_format format>
    ANVIL_DETAIL_ROWS_AVX2 __attribute__((flatten, noinline)) static void range(const gemm_rows_problem& g,
                                                                                std::int64_t j0,
                                                                                std::int64_t j1) {
        gemm_rows_range_of<gemm_rows_decoder<gemm_rows_avx2_isa>, format>(g, j0, j1);
    }
};
struct gemm_rows_avx512_formats {
    template <row_format format>
    ANVIL_DETAIL_ROWS_AVX512 __attribute__((flatten, noinline)) static void range(const gemm_rows_problem& g,
                                                                                  std::int64_t j0,
                                                                                  std::int64_t j1) {
        gemm_rows_range_of<gemm_rows_decoder<gemm_rows_avx512_isa>, format>(g, j0, j1);
    }
};
ANVIL_KERNEL_INLINE void gemm_rows_avx2_range(const gemm_rows_problem& g, std::int64_t j0, std::int64_t j1) {
    gemm_rows_range<gemm_rows_avx2_formats>(g, j0, j1);
}
ANVIL_KERNEL_INLINE void gemm_rows_avx512_range(const gemm_rows_problem& g, std::int64_t j0,
                                                std::int64_t j1) {
    gemm_rows_range<gemm_rows_avx512_formats>(g, j0, j1);
}
#endif
#endif
#if defined(ANVIL_DETAIL_GEMM_X86)
#undef ANVIL_DETAIL_ROWS_AVX2
#undef ANVIL_DETAIL_ROWS_AVX512
#endif

// The product on at most `thread_count` of `threads`, with the decoders of `isa` (the GEMM kernel's): the
// rows of W cut into contiguous ranges of whole tiles, several per thread, claimed as threads come free, so
// that a thread another process keeps off its core holds up one short range, not its whole share (issue
// 41). A range costs only its claim: A is read where it lies and W streams. Ranges start at whole tiles (a
// multiple of gemm_rows_side_by_side), so each row of W is summed by the same code however the rows are cut.
inline void gemm_rows_run(gemm_rows_problem g, gemm_isa isa, thread_pool& threads,
                          std::int64_t thread_count) {
    if (g.w.format == row_format::i8 && g.w.zero_point != nullptr) {
        for (std::int64_t i = 0; i < g.m; ++i) {
            float sum = 0.0f;
            for (std::int64_t p = 0; p < g.k; ++p)
                sum += g.a[i * g.lda + p];
            g.a_sums[i] = sum;
        }
    }
    void (*range)(const gemm_rows_problem&, std::int64_t, std::int64_t) = gemm_rows_portable_range;
#if defined(ANVIL_DETAIL_GEMM_X86)
    if (isa == gemm_isa::avx512) range = gemm_rows_avx512_range;
    if (isa == gemm_isa::avx2) range = gemm_rows_avx2_range;
#else
    (void)isa;
#endif
    const std::int64_t tiles = (g.n + gemm_rows_per_tile - 1) / gemm_rows_per_tile;
    thread_count = std::clamp<std::int64_t>(thread_count, 1, tiles);
    if (thread_count == 1) {
        range(g, 0, g.n);
        return;
    }
    const std::int64_t parts =
        std::min(tiles, thread_count * static_cast<std::int64_t>(thread_pool::chunks_per_thread));
    threads.parallel_for(
        0, static_cast<std::size_t>(parts), 1, static_cast<std::size_t>(thread_count),
        [&](std::size_t begin, std::size_t end) {
            for (std::size_t part = begin; part < end; ++part) {
                const auto index = static_cast<std::int64_t>(part);
                const std::int64_t j0 = std::min(g.n, tiles * index / parts * gemm_rows_per_tile);
                const std::int64_t j1 = std::min(g.n, tiles * (index + 1) / parts * gemm_rows_per_tile);
                if (j1 > j0) range(g, j0, j1);
            }
        });
}

}  // namespace anvil::detail

#undef ANVIL_DETAIL_ROWS_INLINE
#undef ANVIL_DETAIL_ROWS_UNROLL
