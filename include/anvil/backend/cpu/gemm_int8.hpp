// anvil: the CPU's fast mode for quantised weights (compile_options::int8_activations): the activations
// are rounded to 8 bits, 32 values to a scale (ggml's Q8_0, as llama.cpp rounds them), and every block's
// dot product is taken in integers, four bytes to an instruction (vpdpbusd with AVX-512 VNNI, vpmaddubsw
// with AVX2). A weight stored as Q8_0, Q4_0, Q4_K or Q6_K blocks, or as int8 with a scale per output channel,
// is read as stored (Q4_K's w = d sc q - dmin m per 32 values: d sc Σ q x - dmin m Σ x, Σ x being the
// activations' block sum; Q6_K's q - 32 as signed bytes, an int8 scale per 16 values). The product is no
// longer the dequantised weights' (gemm_int8_reference in gemm_reference.hpp defines what it is): llama.cpp's
// accuracy for about twice the exact products' speed when decoding, and four times when a prompt is read.
//   Why integers: the exact product widens each weight byte to a float lane (two or three instructions for
// 16 weights) before its multiply-add; here one instruction multiplies and sums 32 or 64 byte pairs.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "anvil/backend/cpu/gemm_reference.hpp"
#include "anvil/backend/cpu/gemm_rows.hpp"
#include "anvil/compilation.hpp"
#include "anvil/core/cpu_features.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/half.hpp"
#include "anvil/core/thread_pool.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#if defined(__GNUC__) || defined(__clang__)
#define ANVIL_DETAIL_INT8_INLINE __attribute__((always_inline)) inline
#define ANVIL_DETAIL_INT8_UNROLL _Pragma("GCC unroll 16")
#endif

namespace anvil::detail {

// Whether the integer products can take B: Q8_0, Q4_0, Q4_K or Q6_K rows of blocks, or i8 stored by rows
// (B = Wᵀ, unit row stride) with its per-column scale; and k whole blocks of 32 (of 256 for the K-quants).
[[nodiscard]] inline bool int8_products_take(const matrix_operand& b, std::int64_t k) noexcept {
    if (k <= 0 || k % int8_activation_block != 0) return false;
    if (b.has_blocks())
        return b.blocks == ggml_type::Q8_0 || b.blocks == ggml_type::Q4_0 ||
               ((b.blocks == ggml_type::Q4_K || b.blocks == ggml_type::Q6_K) && k % 256 == 0);
    return b.type == dtype::i8 && b.lut == nullptr && b.scale != nullptr && b.row_stride == 1;
}

// The integer kernels. `automatic` picks the best this CPU runs; tests force the others.
enum class int8_isa : unsigned char { automatic, portable, avx2, avx512_vnni };

[[nodiscard]] inline const char* int8_isa_name(int8_isa isa) noexcept {
    switch (isa) {
        case int8_isa::automatic:
            return "automatic";
        case int8_isa::portable:
            return "portable";
        case int8_isa::avx2:
            return "avx2";
        case int8_isa::avx512_vnni:
            return "avx512_vnni";
    }
    return "unknown";
}

// The kernels this machine runs, best first; the last is always the portable one.
[[nodiscard]] inline const std::vector<int8_isa>& available_int8_isas() {
    static const std::vector<int8_isa> isas = [] {
        std::vector<int8_isa> found;
#if defined(__x86_64__) || defined(__i386__)
        const cpu_features& features = host_cpu_features();
        if (features.avx512_vnni) found.push_back(int8_isa::avx512_vnni);
        if (features.avx2_fma && features.f16c) found.push_back(int8_isa::avx2);
#endif
        found.push_back(int8_isa::portable);
        return found;
    }();
    return isas;
}

// One GEMM's activations as the kernels read them, rows of A rounded (int8_activations_reference).
struct int8_activation_rows {
    std::int64_t rows = 0, k = 0;
    std::vector<std::int8_t> values;  // [rows, k]
    std::vector<float> scales;        // [rows, k / 32]
    std::vector<std::int32_t> sums;   // [rows, k / 32]: each block's sum of values (Q4_0's offset of 8)
    std::vector<float> row_sums;      // [rows]: the sum over blocks of scale * sum (an i8 zero point's term)

    void resize(std::int64_t row_count, std::int64_t depth) {
        rows = row_count;
        k = depth;
        const auto count = static_cast<std::size_t>(row_count * depth);
        const auto blocks = count / int8_activation_block;
        if (values.size() < count) values.resize(count);
        if (scales.size() < blocks) scales.resize(blocks);
        if (sums.size() < blocks) sums.resize(blocks);
        if (row_sums.size() < static_cast<std::size_t>(row_count))
            row_sums.resize(static_cast<std::size_t>(row_count));
    }
};

#if defined(__x86_64__) || defined(__i386__)
#define ANVIL_DETAIL_INT8_AVX2 __attribute__((target("avx2,fma,f16c")))
#define ANVIL_DETAIL_INT8_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

// Rounding a row as int8_activations_reference does, eight values to an instruction: the same operations
// in the same order (|x|, max, d = max / 127, 1 / d, x * (1 / d), nearest even), so the same bytes.
ANVIL_DETAIL_INT8_AVX2 inline void round_activation_row_avx2(const float* x, std::int64_t k, std::int8_t* q,
                                                             float* scales, std::int32_t* sums) noexcept {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (std::int64_t b = 0; b < k / int8_activation_block; ++b) {
        const float* block = x + b * int8_activation_block;
        __m256 values[4];
        __m256 peak = _mm256_setzero_ps(), unordered = _mm256_setzero_ps();
        for (int p = 0; p < 4; ++p) {
            values[p] = _mm256_loadu_ps(block + 8 * p);
            peak = _mm256_max_ps(peak, _mm256_andnot_ps(sign, values[p]));
            unordered = _mm256_or_ps(unordered, _mm256_cmp_ps(values[p], values[p], _CMP_UNORD_Q));
        }
        __m128 half = _mm_max_ps(_mm256_castps256_ps128(peak), _mm256_extractf128_ps(peak, 1));
        half = _mm_max_ps(half, _mm_movehl_ps(half, half));
        half = _mm_max_ss(half, _mm_movehdup_ps(half));
        const float amax = _mm_cvtss_f32(half);
        float d = amax / 127.0f;
        float inverse = d != 0.0f ? 1.0f / d : 0.0f;
        const bool finite = _mm256_movemask_ps(unordered) == 0 && amax <= std::numeric_limits<float>::max();
        if (!finite) d = std::numeric_limits<float>::quiet_NaN();
        const __m256 scale = _mm256_set1_ps(inverse);
        __m256i rounded[4];
        for (int p = 0; p < 4; ++p)
            rounded[p] =
                finite ? _mm256_cvtps_epi32(_mm256_mul_ps(values[p], scale)) : _mm256_setzero_si256();
        // packs interleave the 128-bit halves; the permute puts the 32 bytes back in order.
        const __m256i words = _mm256_packs_epi32(rounded[0], rounded[1]);
        const __m256i words2 = _mm256_packs_epi32(rounded[2], rounded[3]);
        const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(words, words2),
                                                          _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * int8_activation_block), bytes);
        __m256i total = _mm256_add_epi32(_mm256_add_epi32(rounded[0], rounded[1]),
                                         _mm256_add_epi32(rounded[2], rounded[3]));
        __m128i sum4 = _mm_add_epi32(_mm256_castsi256_si128(total), _mm256_extracti128_si256(total, 1));
        sum4 = _mm_add_epi32(sum4, _mm_shuffle_epi32(sum4, 0x4E));
        sum4 = _mm_add_epi32(sum4, _mm_shuffle_epi32(sum4, 0xB1));
        scales[b] = d;
        sums[b] = _mm_cvtsi128_si32(sum4);
    }
}
#endif

// A's rows rounded into `out` with the best quantiser this machine runs (AVX2, else the reference).
inline void round_activations(const float* a, std::int64_t lda, std::int64_t m, std::int64_t k, int8_isa isa,
                              int8_activation_rows& out) {
    out.resize(m, k);
    const std::int64_t blocks = k / int8_activation_block;
    for (std::int64_t i = 0; i < m; ++i) {
        std::int8_t* q = out.values.data() + i * k;
        float* scales = out.scales.data() + i * blocks;
        std::int32_t* sums = out.sums.data() + i * blocks;
#if defined(__x86_64__) || defined(__i386__)
        if (isa != int8_isa::portable) {
            round_activation_row_avx2(a + i * lda, k, q, scales, sums);
        } else {
            int8_activations_reference(a + i * lda, k, q, scales, sums);
        }
#else
        (void)isa;
        int8_activations_reference(a + i * lda, k, q, scales, sums);
#endif
        float row_sum = 0.0f;
        for (std::int64_t b = 0; b < blocks; ++b)
            row_sum += scales[b] * static_cast<float>(sums[b]);
        out.row_sums[static_cast<std::size_t>(i)] = row_sum;
    }
}

// A tile's M x Rows outputs, summed over the blocks before they are stored.
template <int M, int Rows>
using int8_dots = float[static_cast<std::size_t>(M)][static_cast<std::size_t>(Rows)];

struct int8_rows_problem {
    std::int64_t m, n, k;
    const int8_activation_rows* a;
    weight_rows w;  // q8_0, q4_0, q4_k, q6_k or i8
    float* c;
    std::int64_t ldc;
    gemm_epilogue epilogue;
};

// Sub-block j (0-7) of the Q4_K block at `block` (d and dmin already converted): w = scale q - offset.
ANVIL_DETAIL_INT8_INLINE void q4_k_sub_block(const std::byte* block, int j, float d, float dmin, float& scale,
                                             float& offset) noexcept {
    int sub_scale = 0, sub_min = 0;
    ggml_scale_min_k4(j, reinterpret_cast<const std::uint8_t*>(block + 4), sub_scale, sub_min);
    scale = d * static_cast<float>(sub_scale);
    offset = dmin * static_cast<float>(sub_min);
}

// All 8 sub-blocks' scales and offsets of a Q4_K block, unpacked once a block rather than once a sub-block
// (the 6-bit unpacking cost more than the products). The 12 bytes as three little-endian words w0-w2, per
// ggml_scale_min_k4: scales 0-3 are w0's bytes & 63 and mins 0-3 w1's; scale 4 + i is byte i of w2 & 15 with
// the top two bits of w0's byte i above it, min 4 + i byte i of w2 >> 4 with those of w1's.
// The 8 scales then the 8 mins as 16 bytes, in four words.
ANVIL_DETAIL_INT8_INLINE void q4_k_scale_words(const std::byte* block, std::uint32_t* words) noexcept {
    std::uint32_t w[3];
    std::memcpy(w, block + 4, sizeof w);
    const std::uint32_t six = 0x3F3F3F3Fu, low = 0x0F0F0F0Fu, top = 0x03030303u;
    words[0] = w[0] & six;
    words[1] = (w[2] & low) | (((w[0] >> 6) & top) << 4);
    words[2] = w[1] & six;
    words[3] = ((w[2] >> 4) & low) | (((w[1] >> 6) & top) << 4);
}

ANVIL_DETAIL_INT8_INLINE void q4_k_sub_blocks(const std::byte* block, float d, float dmin, float* scales,
                                              float* offsets) noexcept {
    std::uint32_t words[4];
    q4_k_scale_words(block, words);
    unsigned char bytes[16];
    std::memcpy(bytes, words, sizeof bytes);
    for (int j = 0; j < 8; ++j) {
        scales[j] = d * static_cast<float>(bytes[j]);
        offsets[j] = dmin * static_cast<float>(bytes[8 + j]);
    }
}

// Output (i, j) from its integer-product sum `dot` (the weight's block scales applied): an i8 weight's zero
// point and scale, then bias and accumulation.
ANVIL_DETAIL_INT8_INLINE void int8_store(const int8_rows_problem& g, std::int64_t i, std::int64_t j,
                                         float dot) noexcept {
    if (g.w.format == row_format::i8) {
        if (g.w.zero_point != nullptr) dot -= g.w.zero_point[j] * g.a->row_sums[static_cast<std::size_t>(i)];
        dot *= g.w.scale[j];
    }
    float& out = g.c[i * g.ldc + j];
    const float bias = g.epilogue.bias != nullptr ? g.epilogue.bias[j] : 0.0f;
    out = (g.epilogue.accumulate ? out : 0.0f) + dot + bias;
}

// The entry points, one per instruction set (defined below; like gemm_rows.hpp's, they may have a unit of
// their own: ANVIL_KERNEL_DEFINITIONS, anvil/compilation.hpp).
ANVIL_KERNEL_INLINE void int8_rows_portable_range(const int8_rows_problem& g, std::int64_t j0,
                                                  std::int64_t j1);
#if defined(__x86_64__) || defined(__i386__)
ANVIL_KERNEL_INLINE void int8_rows_avx2_range(const int8_rows_problem& g, std::int64_t j0, std::int64_t j1);
ANVIL_KERNEL_INLINE void int8_rows_vnni_range(const int8_rows_problem& g, std::int64_t j0, std::int64_t j1);
#endif

#if ANVIL_KERNEL_DEFINITIONS
// The portable kernel: plain loops over each block (Clang makes them NEON's sdot where the target has it).
ANVIL_KERNEL_INLINE void int8_rows_portable_range(const int8_rows_problem& g, std::int64_t j0,
                                                  std::int64_t j1) {
    const std::int64_t blocks = g.k / int8_activation_block;
    for (std::int64_t j = j0; j < j1; ++j) {
        const std::byte* row = g.w.bytes + j * g.w.row_bytes;
        for (std::int64_t i = 0; i < g.m; ++i) {
            const std::int8_t* x = g.a->values.data() + i * g.k;
            const float* dx = g.a->scales.data() + i * blocks;
            const std::int32_t* xsum = g.a->sums.data() + i * blocks;
            float dot = 0.0f;
            for (std::int64_t b = 0; b < blocks; ++b) {
                std::int32_t sum = 0;
                float dw = 1.0f;
                const std::int8_t* xb = x + b * int8_activation_block;
                if (g.w.format == row_format::q8_0) {
                    const std::byte* block = row + b * 34;
                    std::uint16_t bits;
                    std::memcpy(&bits, block, 2);
                    dw = half_bits_to_float(bits);
                    for (int p = 0; p < int8_activation_block; ++p)
                        sum += static_cast<std::int8_t>(block[2 + p]) * xb[p];
                } else if (g.w.format == row_format::q4_0) {
                    const std::byte* block = row + b * 18;
                    std::uint16_t bits;
                    std::memcpy(&bits, block, 2);
                    dw = half_bits_to_float(bits);
                    for (int p = 0; p < 16; ++p) {
                        const auto packed = static_cast<unsigned>(block[2 + p]);
                        sum += static_cast<std::int32_t>(packed & 15u) * xb[p] +
                               static_cast<std::int32_t>(packed >> 4) * xb[16 + p];
                    }
                    sum -= 8 * xsum[b];
                } else if (g.w.format == row_format::q4_k) {
                    // Σ (scale q - offset) x = scale Σ q x - offset Σ x, the offset's part taken here.
                    const std::byte* block = row + b / 8 * 144;
                    const int sub = static_cast<int>(b % 8);
                    std::uint16_t bits[2];
                    std::memcpy(bits, block, 4);
                    float offset = 0.0f;
                    q4_k_sub_block(block, sub, half_bits_to_float(bits[0]), half_bits_to_float(bits[1]), dw,
                                   offset);
                    const std::byte* qs = block + 16 + 32 * (sub / 2);
                    for (int p = 0; p < int8_activation_block; ++p)
                        sum +=
                            static_cast<std::int32_t>((static_cast<unsigned>(qs[p]) >> (sub % 2 * 4)) & 15u) *
                            xb[p];
                    dot -= offset * dx[b] * static_cast<float>(xsum[b]);
                } else if (g.w.format == row_format::q6_k) {
                    // Step j's 32 six-bit values minus 32 (gemm_rows.hpp's decoder reads the same bits), an
                    // int8 scale per 16: the two halves' sums scaled apart.
                    const std::byte* block = row + b / 8 * 210;
                    const int step = static_cast<int>(b % 8), h = step / 4, q = step % 4;
                    const auto* low = reinterpret_cast<const std::uint8_t*>(block + 64 * h + 32 * (q % 2));
                    const auto* high = reinterpret_cast<const std::uint8_t*>(block + 128 + 32 * h);
                    const auto* scales = reinterpret_cast<const std::int8_t*>(block + 192 + 8 * h + 2 * q);
                    std::uint16_t bits;
                    std::memcpy(&bits, block + 208, 2);
                    const float d = half_bits_to_float(bits);
                    std::int32_t halves[2] = {};
                    for (int p = 0; p < int8_activation_block; ++p) {
                        const int value =
                            ((low[p] >> (4 * (q / 2))) & 15) | (((high[p] >> (2 * q)) & 3) << 4);
                        halves[p / 16] += (value - 32) * xb[p];
                    }
                    dot += d * dx[b] *
                           (static_cast<float>(scales[0]) * static_cast<float>(halves[0]) +
                            static_cast<float>(scales[1]) * static_cast<float>(halves[1]));
                    continue;
                } else {
                    const std::byte* values = row + b * int8_activation_block;
                    for (int p = 0; p < int8_activation_block; ++p)
                        sum += static_cast<std::int8_t>(values[p]) * xb[p];
                }
                dot += dw * dx[b] * static_cast<float>(sum);
            }
            int8_store(g, i, j, dot);
        }
    }
}

#if defined(__x86_64__) || defined(__i386__)
// Vectors of 32 bytes as the tiles hold them (vector extensions: the tiles are templates without a target,
// inlined into each instruction set's entry point, which gives the instructions).
typedef std::int8_t int8_lanes __attribute__((vector_size(32)));
typedef std::uint8_t uint8_lanes __attribute__((vector_size(32)));
typedef std::int32_t int32_lanes __attribute__((vector_size(32)));
typedef float float_lanes __attribute__((vector_size(32)));
typedef std::int8_t int8_wide __attribute__((vector_size(64)));
typedef std::uint8_t uint8_wide __attribute__((vector_size(64)));
typedef std::int32_t int32_wide __attribute__((vector_size(64)));
typedef float float_wide __attribute__((vector_size(64)));

// Step j (0-7) of the Q6_K block at `block`: its 32 six-bit values minus 32 as signed bytes (gemm_rows.hpp's
// decoder reads the same bits; Dot::six_bits extracts them), and d times the int8 scales of its two halves
// of 16, `scales[0..1]`.
template <class Dot>
ANVIL_DETAIL_INT8_INLINE void q6_k_step(const std::byte* block, int j, float d, int8_lanes& w,
                                        float* scales) noexcept {
    const int h = j / 4, q = j % 4;
    Dot::six_bits(block + 64 * h + 32 * (q % 2), 4 * (q / 2), block + 128 + 32 * h, 2 * q, w);
    const auto* sub_scales = reinterpret_cast<const std::int8_t*>(block + 192 + 8 * h + 2 * q);
    scales[0] = d * static_cast<float>(sub_scales[0]);
    scales[1] = d * static_cast<float>(sub_scales[1]);
}

// The instruction sets' pieces: 32 bytes of W against 32 of A (signed), summed into eight 32-bit lanes of
// `sum` (unsigned W: Q4_0's nibbles; signed W: |w| against x with w's sign, as the instructions multiply
// unsigned by signed bytes).
struct int8_avx2_dot {
    static constexpr bool takes_pairs = false;
    // The sum of the lanes (a vector's lanes one by one went through memory: 15% of a decoding tile).
    ANVIL_DETAIL_INT8_AVX2 static float sum(const float_lanes& v) noexcept {
        const auto wide = reinterpret_cast<__m256>(v);
        __m128 half = _mm_add_ps(_mm256_castps256_ps128(wide), _mm256_extractf128_ps(wide, 1));
        half = _mm_add_ps(half, _mm_movehl_ps(half, half));
        return _mm_cvtss_f32(_mm_add_ss(half, _mm_movehdup_ps(half)));
    }
    ANVIL_DETAIL_INT8_AVX2 static void unsigned_signed(int32_lanes& sum, const uint8_lanes& u,
                                                       const int8_lanes& s) noexcept {
        // Pairs of products fit 16 bits: Q4_0 15 * 127 * 2, or |w| <= 128 against |x| <= 127.
        const __m256i pairs =
            _mm256_maddubs_epi16(reinterpret_cast<__m256i>(u), reinterpret_cast<__m256i>(s));
        sum = reinterpret_cast<int32_lanes>(
            _mm256_add_epi32(reinterpret_cast<__m256i>(sum), _mm256_madd_epi16(pairs, _mm256_set1_epi16(1))));
    }
    ANVIL_DETAIL_INT8_AVX2 static void signed_signed(int32_lanes& sum, const int8_lanes& w,
                                                     const int8_lanes& x) noexcept {
        const auto wide = reinterpret_cast<__m256i>(w);
        const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(wide, wide),
                                                   _mm256_sign_epi8(reinterpret_cast<__m256i>(x), wide));
        sum = reinterpret_cast<int32_lanes>(
            _mm256_add_epi32(reinterpret_cast<__m256i>(sum), _mm256_madd_epi16(pairs, _mm256_set1_epi16(1))));
    }
    // 32 bytes of Q4_K nibbles: (byte >> shift) & 15 each.
    ANVIL_DETAIL_INT8_AVX2 static void nibble_half(const std::byte* at, int shift,
                                                   uint8_lanes& out) noexcept {
        const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at));
        out = reinterpret_cast<uint8_lanes>(
            _mm256_and_si256(_mm256_srl_epi16(packed, _mm_cvtsi32_si128(shift)), _mm256_set1_epi8(15)));
    }
    // q4_k_sub_blocks with vector conversions, the bytes assembled in a register (four word stores read back
    // as one vector would stall): the scalar form of the 16 conversions held Q4_K at half Q4_0's speed.
    ANVIL_DETAIL_INT8_AVX2 static void q4_k_sub_blocks(const std::byte* block, float* scales,
                                                       float* offsets) noexcept {
        std::uint32_t words[4];
        q4_k_scale_words(block, words);
        const __m128i bytes = _mm_setr_epi32(static_cast<int>(words[0]), static_cast<int>(words[1]),
                                             static_cast<int>(words[2]), static_cast<int>(words[3]));
        _mm256_storeu_ps(scales, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes)),
                                               _mm256_set1_ps(half_to_float(block))));
        _mm256_storeu_ps(offsets,
                         _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(bytes, 8))),
                                       _mm256_set1_ps(half_to_float(block + 2))));
    }
    // 32 Q6_K values minus 32: (low >> low_shift) & 15 | ((high >> high_shift) & 3) << 4, byte by byte
    // (16-bit shifts, masked: nothing crosses a byte that the masks keep).
    ANVIL_DETAIL_INT8_AVX2 static void six_bits(const std::byte* low, int low_shift, const std::byte* high,
                                                int high_shift, int8_lanes& out) noexcept {
        const __m256i l =
            _mm256_and_si256(_mm256_srl_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(low)),
                                              _mm_cvtsi32_si128(low_shift)),
                             _mm256_set1_epi8(15));
        const __m256i h =
            _mm256_and_si256(_mm256_srl_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(high)),
                                              _mm_cvtsi32_si128(high_shift)),
                             _mm256_set1_epi8(3));
        out = reinterpret_cast<int8_lanes>(
            _mm256_sub_epi8(_mm256_or_si256(l, _mm256_slli_epi16(h, 4)), _mm256_set1_epi8(32)));
    }
    // 16 bytes of Q4_0 nibbles as 32 bytes: the low nibbles first, then the high ones.
    ANVIL_DETAIL_INT8_AVX2 static void nibbles(const std::byte* at, uint8_lanes& out) noexcept {
        const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(at));
        const __m128i mask = _mm_set1_epi8(15);
        out = reinterpret_cast<uint8_lanes>(
            _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(packed, 4), mask), _mm_and_si128(packed, mask)));
    }
    ANVIL_DETAIL_INT8_AVX2 static float half_to_float(const std::byte* at) noexcept {
        unsigned short bits;
        std::memcpy(&bits, at, 2);
        return _cvtsh_ss(bits);
    }
};
// With VNNI, two blocks at a time in 64-byte registers (int8_pairs): lanes 0-7 of a sum are block b's,
// 8-15 block b + 1's.
struct int8_vnni_dot : int8_avx2_dot {
    // The byte unpacking, scale conversion and lane sums are AVX2's (inlined here: its instructions are a
    // subset of these); the products and everything 64 bytes wide are VNNI's own.
    using int8_avx2_dot::sum;
    static constexpr bool takes_pairs = true;
    ANVIL_DETAIL_INT8_VNNI static float sum(const float_wide& v) noexcept {
        // Masked extracts: GCC 12's plain ones (and its casts and _mm512_reduce_add_ps, built on them) read
        // an "undefined" vector that -Wmaybe-uninitialized reports.
        const __m512d wide = _mm512_castps_pd(reinterpret_cast<__m512>(v));
        const __m256 low = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, wide, 0));
        const __m256 high = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, wide, 1));
        return int8_avx2_dot::sum(reinterpret_cast<float_lanes>(_mm256_add_ps(low, high)));
    }
    ANVIL_DETAIL_INT8_VNNI static void unsigned_signed(int32_lanes& sum, const uint8_lanes& u,
                                                       const int8_lanes& s) noexcept {
        sum = reinterpret_cast<int32_lanes>(_mm256_dpbusd_epi32(
            reinterpret_cast<__m256i>(sum), reinterpret_cast<__m256i>(u), reinterpret_cast<__m256i>(s)));
    }
    ANVIL_DETAIL_INT8_VNNI static void signed_signed(int32_lanes& sum, const int8_lanes& w,
                                                     const int8_lanes& x) noexcept {
        const auto wide = reinterpret_cast<__m256i>(w);
        sum = reinterpret_cast<int32_lanes>(
            _mm256_dpbusd_epi32(reinterpret_cast<__m256i>(sum), _mm256_abs_epi8(wide),
                                _mm256_sign_epi8(reinterpret_cast<__m256i>(x), wide)));
    }
    // Sub-blocks j and j + 1 (j even) of the Q4_K block at `block`: the 32 bytes of qs they share, low
    // nibbles (sub-block j) then high ones (j + 1), element order; their scales (unpacked, q4_k_sub_blocks)
    // in lanes 0-7 and 8-15.
    ANVIL_DETAIL_INT8_VNNI static void q4_k_pair(const std::byte* block, int j, const float* scales,
                                                 uint8_wide& w, float_wide& d) noexcept {
        const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 16 + 16 * j));
        const __m256i mask = _mm256_set1_epi8(15);
        const __m512i low = _mm512_castsi256_si512(_mm256_and_si256(packed, mask));
        w = reinterpret_cast<uint8_wide>(
            _mm512_mask_inserti64x4(low, 0xFF, low, _mm256_and_si256(_mm256_srli_epi16(packed, 4), mask), 1));
        d = reinterpret_cast<float_wide>(
            _mm512_mask_broadcastss_ps(_mm512_set1_ps(scales[j]), 0xFF00, _mm_set_ss(scales[j + 1])));
    }
    // Steps j and j + 1 (j even) of the Q6_K block at `block` (q6_k_step's values, in lanes 0-7 and 8-15),
    // and d times the four int8 scales of their halves of 16, each in four lanes. Built in registers: two
    // 32-byte stores read back as one 64-byte vector stalled the store forwarding, at half exact products'
    // speed.
    ANVIL_DETAIL_INT8_VNNI static void q6_k_pair(const std::byte* block, int j, float d, int8_wide& w,
                                                 float_wide& dw) noexcept {
        const int h = j / 4, q = j % 4;
        int8_lanes first, second;
        six_bits(block + 64 * h + 32 * (q % 2), 4 * (q / 2), block + 128 + 32 * h, 2 * q, first);
        six_bits(block + 64 * h + 32 * ((q + 1) % 2), 4 * ((q + 1) / 2), block + 128 + 32 * h, 2 * (q + 1),
                 second);
        const __m512i low = _mm512_castsi256_si512(reinterpret_cast<__m256i>(first));
        w = reinterpret_cast<int8_wide>(
            _mm512_mask_inserti64x4(low, 0xFF, low, reinterpret_cast<__m256i>(second), 1));
        std::int32_t four;  // the scales of 16 values, 2q to 2q + 3
        std::memcpy(&four, block + 192 + 8 * h + 2 * q, sizeof four);
        const __m512 scales =
            _mm512_maskz_cvtepi32_ps(0xFFFF, _mm512_maskz_cvtepi8_epi32(0xFFFF, _mm_cvtsi32_si128(four)));
        const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
        dw = reinterpret_cast<float_wide>(
            _mm512_mul_ps(_mm512_maskz_permutexvar_ps(0xFFFF, spread, scales), _mm512_set1_ps(d)));
    }

    ANVIL_DETAIL_INT8_VNNI static void unsigned_signed(int32_wide& sum, const uint8_wide& u,
                                                       const int8_wide& s) noexcept {
        sum = reinterpret_cast<int32_wide>(_mm512_dpbusd_epi32(
            reinterpret_cast<__m512i>(sum), reinterpret_cast<__m512i>(u), reinterpret_cast<__m512i>(s)));
    }
    // No 64-byte vpsignb: x negated where w is negative by a masked subtraction.
    ANVIL_DETAIL_INT8_VNNI static void signed_signed(int32_wide& sum, const int8_wide& w,
                                                     const int8_wide& x) noexcept {
        const auto wide = reinterpret_cast<__m512i>(w), values = reinterpret_cast<__m512i>(x);
        const __m512i signed_x =
            _mm512_mask_sub_epi8(values, _mm512_movepi8_mask(wide), _mm512_setzero_si512(), values);
        sum = reinterpret_cast<int32_wide>(
            _mm512_dpbusd_epi32(reinterpret_cast<__m512i>(sum), _mm512_abs_epi8(wide), signed_x));
    }
    // Two f16 scales as lanes 0-7 and 8-15.
    ANVIL_DETAIL_INT8_VNNI static void scale_pair(const std::byte* first, const std::byte* second,
                                                  float_wide& d) noexcept {
        std::int16_t a, b;
        std::memcpy(&a, first, 2);
        std::memcpy(&b, second, 2);
        const __m256i halves = _mm256_mask_set1_epi16(_mm256_set1_epi16(a), 0xFF00, b);
        d = reinterpret_cast<float_wide>(_mm512_maskz_cvtph_ps(0xFFFF, halves));
    }
    // Blocks b and b + 1 of Q4_0 (18 bytes apart from `block`) as 64 bytes in element order.
    ANVIL_DETAIL_INT8_VNNI static void q4_0_pair(const std::byte* block, uint8_wide& w,
                                                 float_wide& d) noexcept {
        const __m256i packed = _mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 20)),
                                                _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2)));
        const __m256i mask = _mm256_set1_epi8(15);
        const __m512i low = _mm512_castsi256_si512(_mm256_and_si256(packed, mask));
        const __m512i high = _mm512_castsi256_si512(_mm256_and_si256(_mm256_srli_epi16(packed, 4), mask));
        // 8-byte lanes: low = [b lo, b + 1 lo], high = [b hi, b + 1 hi] -> [b lo, b hi, b + 1 lo, b + 1 hi].
        w = reinterpret_cast<uint8_wide>(
            _mm512_permutex2var_epi64(low, _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11), high));
        scale_pair(block, block + 18, d);
    }
    ANVIL_DETAIL_INT8_VNNI static void q8_0_pair(const std::byte* block, int8_wide& w,
                                                 float_wide& d) noexcept {
        // The masked insert: GCC 12's plain one reads an "undefined" vector that -Wmaybe-uninitialized
        // reports. (Two masked loads instead ran at half the speed from memory.)
        const __m512i low =
            _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 2)));
        w = reinterpret_cast<int8_wide>(_mm512_mask_inserti64x4(
            low, 0xFF, low, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 36)), 1));
        scale_pair(block, block + 34, d);
    }
    // A row's blocks b and b + 1: values, scales, and for Q4_0 the offsets -8 Σ x in lanes 0 and 8.
    ANVIL_DETAIL_INT8_VNNI static void activation_pair(const std::int8_t* x, const float* scales,
                                                       const std::int32_t* sums, bool offsets,
                                                       int8_wide& values, float_wide& d,
                                                       int32_wide& init) noexcept {
        values = reinterpret_cast<int8_wide>(_mm512_loadu_si512(x));
        d = reinterpret_cast<float_wide>(
            _mm512_mask_broadcastss_ps(_mm512_set1_ps(scales[0]), 0xFF00, _mm_set_ss(scales[1])));
        init = reinterpret_cast<int32_wide>(
            offsets
                ? _mm512_mask_set1_epi32(_mm512_maskz_set1_epi32(0x0001, -8 * sums[0]), 0x0100, -8 * sums[1])
                : _mm512_setzero_si512());
    }
};

// C[i, j0 + r] for the Rows rows of W from j0 and the M rows of A from i0. Per block: each W row's 32
// values read once (Q4_0's low nibbles become bytes 0-15, the high ones 16-31), each integer sum made float
// and added, times the product of the two scales, into one vector per output.
template <class Dot, row_format Format, int M, int Rows>
ANVIL_DETAIL_INT8_INLINE void int8_blocks(const int8_rows_problem& g, std::int64_t i0, std::int64_t j0,
                                          std::int64_t first_block, std::int64_t end_block,
                                          int8_dots<M, Rows>& dots) noexcept {
    constexpr auto a_rows = static_cast<std::size_t>(M), w_rows = static_cast<std::size_t>(Rows);
    const std::int64_t blocks = g.k / int8_activation_block;
    const std::byte* rows[w_rows];
    ANVIL_DETAIL_INT8_UNROLL for (int r = 0; r < Rows; ++r) rows[r] = g.w.bytes + (j0 + r) * g.w.row_bytes;
    float_lanes acc[a_rows][w_rows];
    float offsets[a_rows][w_rows] = {};                   // Q4_K: Σ offset Σ x, subtracted at the end
    float sub_scales[w_rows][8], sub_offsets[w_rows][8];  // Q4_K: the current block's, per row of W
    ANVIL_DETAIL_INT8_UNROLL for (int i = 0; i < M; ++i) {
        ANVIL_DETAIL_INT8_UNROLL for (int r = 0; r < Rows; ++r) acc[i][r] = float_lanes{};
    }
    const std::int8_t* x_rows = g.a->values.data() + i0 * g.k;
    const float* x_scales = g.a->scales.data() + i0 * blocks;
    const std::int32_t* x_sums = g.a->sums.data() + i0 * blocks;
    for (std::int64_t b = first_block; b < end_block; ++b) {
        int8_lanes x[a_rows];
        int32_lanes init[a_rows];
        float dx[a_rows];
        ANVIL_DETAIL_INT8_UNROLL for (int i = 0; i < M; ++i) {
            std::memcpy(&x[i], x_rows + i * g.k + b * int8_activation_block, sizeof x[i]);
            dx[i] = x_scales[i * blocks + b];
            // Σ (q - 8) x = Σ q x - 8 Σ x: the offset starts lane 0 of Q4_0's sums.
            init[i] = int32_lanes{};
            if constexpr (Format == row_format::q4_0) init[i][0] = -8 * x_sums[i * blocks + b];
        }
        ANVIL_DETAIL_INT8_UNROLL for (int r = 0; r < Rows; ++r) {
            float dw = 1.0f;
            if constexpr (Format == row_format::q4_0) {
                const std::byte* block = rows[r] + b * 18;
                dw = Dot::half_to_float(block);
                uint8_lanes w;
                Dot::nibbles(block + 2, w);
                ANVIL_DETAIL_INT8_UNROLL for (int i = 0; i < M; ++i) {
                    int32_lanes sum = init[i];
                    Dot::unsigned_signed(sum, w, x[i]);
                    acc[i][r] += __builtin_convertvector(sum, float_lanes) * (dw * dx[i]);
                }
            } else if constexpr (Format == row_format::q4_k) {
                const std::byte* block = rows[r] + b / 8 * 144;
                const int sub = static_cast<int>(b % 8);
                if (sub == 0 || b == first_block) Dot::q4_k_sub_blocks(block, sub_scales[r], sub_offsets[r]);
                dw = sub_scales[r][sub];
                const float offset = sub_offsets[r][sub];
                uint8_lanes w;
                Dot::nibble_half(block + 16 + 32 * (sub / 2), sub % 2 * 4, w);
                ANVIL_DETAIL_INT8_UNROLL for (int i = 0; i < M; ++i) {
                    int32_lanes sum = init[i];
                    Dot::unsigned_signed(sum, w, x[i]);
                    acc[i][r] += __builtin_convertvector(sum, float_lanes) * (dw * dx[i]);
                    offsets[i][r] += offset * dx[i] * static_cast<float>(x_sums[i * blocks + b]);
                }
            } else if constexpr (Format == row_format::q6_k) {
                // Lanes 0-3 of a sum hold values 0-15, lanes 4-7 values 16-31: each half's scale in its
                // lanes.
                const std::byte* block = rows[r] + b / 8 * 210;
                int8_lanes w;
                float scales[2];
                q6_k_step<Dot>(block, static_cast<int>(b % 8), Dot::half_to_float(block + 208), w, scales);
                const float_lanes dw_lanes = {scales[0], scales[0], scales[0], scales[0],
                                              scales[1], scales[1], scales[1], scales[1]};
                ANVIL_DETAIL_INT8_UNROLL for (int i = 0; i < M; ++i) {
                    int32_lanes sum = init[i];
                    Dot::signed_signed(sum, w, x[i]);
                    acc[i][r] += __builtin_convertvector(sum, float_lanes) * (dw_lanes * dx[i]);
                }
            } else {
                const std::byte* values = rows[r] + b * int8_activation_block;
                if constexpr (Format == row_format::q8_0) {
                    values = rows[r] + b * 34 + 2;
                    dw = Dot::half_to_float(values - 2);
                }
                int8_lanes w;
                std::memcpy(&w, values, sizeof w);
                ANVIL_DETAIL_INT8_UNROLL for (int i = 0; i < M; ++i) {
                    int32_lanes sum = init[i];
                    Dot::signed_signed(sum, w, x[i]);
                    acc[i][r] += __builtin_convertvector(sum, float_lanes) * (dw * dx[i]);
                }
            }
        }
    }
    ANVIL_DETAIL_INT8_UNROLL for (int i = 0; i < M; ++i) {
        ANVIL_DETAIL_INT8_UNROLL for (int r = 0; r < Rows; ++r) dots[i][r] +=
            Dot::sum(acc[i][r]) - offsets[i][r];
    }
}

// int8_blocks two blocks at a time (Dot::takes_pairs), the last one alone when their number is odd.
template <class Dot, row_format Format, int M, int Rows>
ANVIL_DETAIL_INT8_INLINE void int8_pairs(const int8_rows_problem& g, std::int64_t i0, std::int64_t j0,
                                         int8_dots<M, Rows>& dots) noexcept {
    constexpr auto a_rows = static_cast<std::size_t>(M), w_rows = static_cast<std::size_t>(Rows);
    const std::int64_t blocks = g.k / int8_activation_block;
    const std::byte* rows[w_rows];
    ANVIL_DETAIL_INT8_UNROLL for (int r = 0; r < Rows; ++r) rows[r] = g.w.bytes + (j0 + r) * g.w.row_bytes;
    float_wide acc[a_rows][w_rows];
    float offsets[a_rows][w_rows] = {};                   // Q4_K: Σ offset Σ x, subtracted at the end
    float sub_scales[w_rows][8], sub_offsets[w_rows][8];  // Q4_K: the current block's, per row of W
    ANVIL_DETAIL_INT8_UNROLL for (int i = 0; i < M; ++i) {
        ANVIL_DETAIL_INT8_UNROLL for (int r = 0; r < Rows; ++r) acc[i][r] = float_wide{};
    }
    const std::int8_t* x_rows = g.a->values.data() + i0 * g.k;
    const float* x_scales = g.a->scales.data() + i0 * blocks;
    const std::int32_t* x_sums = g.a->sums.data() + i0 * blocks;
    for (std::int64_t b = 0; b + 2 <= blocks; b += 2) {
        int8_wide x[a_rows];
        float_wide dx[a_rows];
        int32_wide init[a_rows];
        ANVIL_DETAIL_INT8_UNROLL for (int i = 0; i < M; ++i)
            Dot::activation_pair(x_rows + i * g.k + b * int8_activation_block, x_scales + i * blocks + b,
                                 x_sums + i * blocks + b, Format == row_format::q4_0, x[i], dx[i], init[i]);
        ANVIL_DETAIL_INT8_UNROLL for (int r = 0; r < Rows; ++r) {
            float_wide dw;
            if constexpr (Format == row_format::q4_0) {
                uint8_wide w;
                Dot::q4_0_pair(rows[r] + b * 18, w, dw);
                ANVIL_DETAIL_INT8_UNROLL for (int i = 0; i < M; ++i) {
                    int32_wide sum = init[i];
                    Dot::unsigned_signed(sum, w, x[i]);
                    acc[i][r] += __builtin_convertvector(sum, float_wide) * (dw * dx[i]);
                }
            } else if constexpr (Format == row_format::q4_k) {
                // b is even, so sub-blocks b % 8 and b % 8 + 1 share their block and their 32 bytes of qs.
                const std::byte* block = rows[r] + b / 8 * 144;
                const int sub = static_cast<int>(b % 8);
                if (sub == 0) Dot::q4_k_sub_blocks(block, sub_scales[r], sub_offsets[r]);
                uint8_wide w;
                Dot::q4_k_pair(block, sub, sub_scales[r], w, dw);
                const float offset = sub_offsets[r][sub], next_offset = sub_offsets[r][sub + 1];
                ANVIL_DETAIL_INT8_UNROLL for (int i = 0; i < M; ++i) {
                    int32_wide sum = init[i];
                    Dot::unsigned_signed(sum, w, x[i]);
                    acc[i][r] += __builtin_convertvector(sum, float_wide) * (dw * dx[i]);
                    const float* scales = x_scales + i * blocks + b;
                    const std::int32_t* sums = x_sums + i * blocks + b;
                    offsets[i][r] += offset * scales[0] * static_cast<float>(sums[0]) +
                                     next_offset * scales[1] * static_cast<float>(sums[1]);
                }
            } else if constexpr (Format == row_format::q6_k) {
                // b is even: steps b % 8 and b % 8 + 1 of one block, lanes 0-7 and 8-15, four lanes a scale.
                const std::byte* block = rows[r] + b / 8 * 210;
                int8_wide w;
                Dot::q6_k_pair(block, static_cast<int>(b % 8), Dot::half_to_float(block + 208), w, dw);
                ANVIL_DETAIL_INT8_UNROLL for (int i = 0; i < M; ++i) {
                    int32_wide sum = init[i];
                    Dot::signed_signed(sum, w, x[i]);
                    acc[i][r] += __builtin_convertvector(sum, float_wide) * (dw * dx[i]);
                }
            } else {
                int8_wide w;
                if constexpr (Format == row_format::q8_0) {
                    Dot::q8_0_pair(rows[r] + b * 34, w, dw);
                } else {
                    std::memcpy(&w, rows[r] + b * int8_activation_block, sizeof w);
                    dw = float_wide{} + 1.0f;
                }
                ANVIL_DETAIL_INT8_UNROLL for (int i = 0; i < M; ++i) {
                    int32_wide sum = init[i];
                    Dot::signed_signed(sum, w, x[i]);
                    acc[i][r] += __builtin_convertvector(sum, float_wide) * (dw * dx[i]);
                }
            }
        }
    }
    ANVIL_DETAIL_INT8_UNROLL for (int i = 0; i < M; ++i) {
        ANVIL_DETAIL_INT8_UNROLL for (int r = 0; r < Rows; ++r) dots[i][r] +=
            Dot::sum(acc[i][r]) - offsets[i][r];
    }
    // The odd last block, output by output: one small instantiation rather than a second copy of the tile.
    if (blocks % 2 != 0) {
        for (int i = 0; i < M; ++i) {
            for (int r = 0; r < Rows; ++r) {
                int8_dots<1, 1> last = {};
                int8_blocks<Dot, Format, 1, 1>(g, i0 + i, j0 + r, blocks - 1, blocks, last);
                dots[i][r] += last[0][0];
            }
        }
    }
}

template <class Dot, row_format Format, int M, int Rows>
ANVIL_DETAIL_INT8_INLINE void int8_tile(const int8_rows_problem& g, std::int64_t i0,
                                        std::int64_t j0) noexcept {
    int8_dots<M, Rows> dots = {};
    if constexpr (Dot::takes_pairs) {
        int8_pairs<Dot, Format, M, Rows>(g, i0, j0, dots);
    } else {
        int8_blocks<Dot, Format, M, Rows>(g, i0, j0, 0, g.k / int8_activation_block, dots);
    }
    ANVIL_DETAIL_INT8_UNROLL for (int i = 0; i < M; ++i) {
        ANVIL_DETAIL_INT8_UNROLL for (int r = 0; r < Rows; ++r) int8_store(g, i0 + i, j0 + r, dots[i][r]);
    }
}

// Rows [j0, j1) of W against every row of A, RowsPerTile W rows side by side. A is taken in panels of rows
// small enough to stay in the cache while each tile of W's rows passes over them; a tile of W is read once a
// panel.
template <class Dot, row_format Format, int M, int RowsPerTile>
ANVIL_DETAIL_INT8_INLINE void int8_range_of(const int8_rows_problem& g, std::int64_t j0,
                                            std::int64_t j1) noexcept {
    const std::int64_t panel = std::max<std::int64_t>(M, (std::int64_t{128} << 10) / g.k / M * M);
    for (std::int64_t p0 = 0; p0 < g.m; p0 += panel) {
        const std::int64_t p1 = std::min(g.m, p0 + panel);
        std::int64_t j = j0;
        for (; j + RowsPerTile <= j1; j += RowsPerTile) {
            std::int64_t i = p0;
            for (; i + M <= p1; i += M)
                int8_tile<Dot, Format, M, RowsPerTile>(g, i, j);
            for (; i < p1; ++i)
                int8_tile<Dot, Format, 1, RowsPerTile>(g, i, j);
        }
        for (; j < j1; ++j) {
            std::int64_t i = p0;
            for (; i + M <= p1; i += M)
                int8_tile<Dot, Format, M, 1>(g, i, j);
            for (; i < p1; ++i)
                int8_tile<Dot, Format, 1, 1>(g, i, j);
        }
    }
}

// W rows a tile reads side by side. With a few rows of A (decoding), fewer streams read memory faster here
// (n=80000, k=768, one thread, AVX-512 VNNI: Q8_0 at 34 GB/s one row at a time against 15 four at a time;
// Q4_0 21 against 16 two at a time). With a prompt, a tile of W sits in the cache while A's rows pass, and
// four rows reuse each row of A four times.
template <class Dot, row_format Format, int M>
ANVIL_DETAIL_INT8_INLINE void int8_range_of(const int8_rows_problem& g, std::int64_t j0,
                                            std::int64_t j1) noexcept {
    if (g.m > M) return int8_range_of<Dot, Format, M, 4>(g, j0, j1);
    constexpr int side_by_side = Format == row_format::q4_0 || Format == row_format::q4_k ? 2 : 1;
    return int8_range_of<Dot, Format, M, side_by_side>(g, j0, j1);
}

// One format's rows through Formats::range<format>, a function of its own (as gemm_rows.hpp's entry points).
template <class Formats>
ANVIL_DETAIL_INT8_INLINE void int8_range(const int8_rows_problem& g, std::int64_t j0,
                                         std::int64_t j1) noexcept {
    switch (g.w.format) {
        case row_format::q8_0:
            return Formats::template range<row_format::q8_0>(g, j0, j1);
        case row_format::q4_0:
            return Formats::template range<row_format::q4_0>(g, j0, j1);
        case row_format::q4_k:
            return Formats::template range<row_format::q4_k>(g, j0, j1);
        case row_format::q6_k:
            return Formats::template range<row_format::q6_k>(g, j0, j1);
        default:
            return Formats::template range<row_format::i8>(g, j0, j1);
    }
}

// AVX2 has 16 vector registers: tiles of 2 x 4 outputs. AVX-512 has 32: 4 x 4.
struct int8_avx2_formats {
    template <row_format format>
    ANVIL_DETAIL_INT8_AVX2 __attribute__((flatten, noinline)) static void range(const int8_rows_problem& g,
                                                                                std::int64_t j0,
                                                                                std::int64_t j1) {
        int8_range_of<int8_avx2_dot, format, 2>(g, j0, j1);
    }
};
struct int8_vnni_formats {
    template <row_format format>
    ANVIL_DETAIL_INT8_VNNI __attribute__((flatten, noinline)) static void range(const int8_rows_problem& g,
                                                                                std::int64_t j0,
                                                                                std::int64_t j1) {
        int8_range_of<int8_vnni_dot, format, 4>(g, j0, j1);
    }
};
ANVIL_KERNEL_INLINE void int8_rows_avx2_range(const int8_rows_problem& g, std::int64_t j0, std::int64_t j1) {
    int8_range<int8_avx2_formats>(g, j0, j1);
}
ANVIL_KERNEL_INLINE void int8_rows_vnni_range(const int8_rows_problem& g, std::int64_t j0, std::int64_t j1) {
    int8_range<int8_vnni_formats>(g, j0, j1);
}
#endif
#endif  // ANVIL_KERNEL_DEFINITIONS
#if defined(__x86_64__) || defined(__i386__)
#undef ANVIL_DETAIL_INT8_AVX2
#undef ANVIL_DETAIL_INT8_VNNI
#endif

// C[m, n] (row stride ldc) = round(A)[m, k] * B[k, n] (+ bias) (+ C): A's rows rounded to 8-bit blocks
// (int8_activations_reference) and multiplied in integers with B, which must be what int8_products_take
// accepts. On `pool` (the global one when null), with the kernels of `isa`.
inline void gemm_int8(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda,
                      const matrix_operand& b, float* c, std::int64_t ldc, const gemm_epilogue& epilogue = {},
                      thread_pool* pool = nullptr, int8_isa isa = int8_isa::automatic) {
    const matrix_operand a_operand{a, dtype::f32, lda, 1};
    check_gemm_arguments("gemm_int8", m, n, k, a_operand, b, c, ldc);
    if (!int8_products_take(b, k)) {
        throw type_error(message("gemm_int8: B (", k, "x", n, ", ",
                                 b.has_blocks() ? ggml_type_name(b.blocks) : gemm_dtype_name(b.type),
                                 ") is not Q8_0, Q4_0, Q4_K or Q6_K blocks or i8 stored by columns, or k=", k,
                                 " is not a whole number of blocks of ", int8_activation_block,
                                 " (of 256 for Q4_K and Q6_K)"));
    }
    const std::vector<int8_isa>& available = available_int8_isas();
    if (isa == int8_isa::automatic) isa = available.front();
    if (std::find(available.begin(), available.end(), isa) == available.end()) {
        throw unsupported_error(
            message("gemm_int8: the ", int8_isa_name(isa), " kernel cannot run on this CPU"));
    }
    if (m == 0 || n == 0) return;
    thread_local int8_activation_rows rounded;
    round_activations(a, lda, m, k, isa, rounded);
    const std::optional<weight_rows> rows = weight_rows_of(b, k);
    const int8_rows_problem g{m, n, k, &rounded, *rows, c, ldc, epilogue};
    void (*range)(const int8_rows_problem&, std::int64_t, std::int64_t) = int8_rows_portable_range;
#if defined(__x86_64__) || defined(__i386__)
    if (isa == int8_isa::avx2) range = int8_rows_avx2_range;
    if (isa == int8_isa::avx512_vnni) range = int8_rows_vnni_range;
#endif
    thread_pool& threads = pool != nullptr ? *pool : thread_pool::global();
    // Threads take contiguous ranges of W's rows, whole tiles of 4; a product too small to share runs here.
    constexpr std::int64_t tile = 4;
    const double work = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
    const std::int64_t tiles = (n + tile - 1) / tile;
    const std::int64_t thread_count = std::clamp<std::int64_t>(
        std::min<std::int64_t>(static_cast<std::int64_t>(threads.size()),
                               static_cast<std::int64_t>(work / double(1 << 18)) + 1),
        1, tiles);
    if (thread_count == 1) {
        range(g, 0, n);
        return;
    }
    // Several ranges per thread, claimed as threads come free: a thread kept off its core by another process
    // then holds up one short range, not its whole share (issue 41).
    const std::int64_t parts =
        std::min(tiles, thread_count * static_cast<std::int64_t>(thread_pool::chunks_per_thread));
    threads.parallel_for(0, static_cast<std::size_t>(parts), 1, static_cast<std::size_t>(thread_count),
                         [&](std::size_t begin, std::size_t end) {
                             for (std::size_t part = begin; part < end; ++part) {
                                 const auto index = static_cast<std::int64_t>(part);
                                 const std::int64_t j0 = std::min(n, tiles * index / parts * tile);
                                 const std::int64_t j1 = std::min(n, tiles * (index + 1) / parts * tile);
                                 if (j1 > j0) range(g, j0, j1);
                             }
                         });
}

}  // namespace anvil::detail

#undef ANVIL_DETAIL_INT8_INLINE
#undef ANVIL_DETAIL_INT8_UNROLL
