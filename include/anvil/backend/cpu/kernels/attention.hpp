// anvil: the CPU backend's fused attention (flash-attention style) and rotary position embeddings.
//
// attention never materialises the [Sq, Sk] scores: per (batch, kv head, block of up to 64 query rows) it
// streams over blocks of 64 keys, keeping for each row a running maximum and sum (the online softmax) and an
// accumulator of Dv values that is rescaled whenever the maximum grows. Grouped-query heads that share a kv
// head are processed together (their query rows are consecutive in q), so a decode step of 8 query heads
// on one kv head reads each key and value once. Key blocks past every row's causal limit are skipped.
// Scores come from a 4 x 2W register-tiled product against the key block transposed into scratch; with fewer
// than 12 rows (decode) dot products of 4 rows against each key are cheaper than the transpose. All scratch
// is per thread and of block size (attention_workspace).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

#include "anvil/backend/cpu/kernels/elementwise.hpp"
#include "anvil/backend/cpu/tensor_span.hpp"
#include "anvil/core/thread_pool.hpp"
#include "anvil/graph/graph.hpp"

namespace anvil::detail::cpu {

namespace flash {

inline constexpr std::int64_t block_rows = 64;
inline constexpr std::int64_t block_keys = 64;  // a multiple of every vector width
inline constexpr std::int64_t few_rows = 12;    // below this, scores by dot products (no transpose)

struct problem {
    const float* q;
    const float* k;
    const float* v;
    const float* mask;  // null without one
    stride_array mask_strides;
    float* out;
    std::int64_t heads, kv_heads, queries, keys, depth, value_depth;
    std::int64_t group;       // query heads per kv head
    std::int64_t rows;        // query rows per kv head: group x queries
    std::int64_t row_blocks;  // per kv head
    bool causal;
    float scale;
};

[[nodiscard]] inline std::size_t scratch_floats(std::int64_t depth, std::int64_t value_depth) {
    return static_cast<std::size_t>(depth * block_keys + block_rows * block_keys + block_rows * value_depth +
                                    2 * block_rows);
}

template <int W>
ANVIL_DETAIL_ALWAYS_INLINE simd::vec<W> load_partial(const float* p, std::int64_t count) {
    float padded[static_cast<std::size_t>(W)] = {};
    std::memcpy(padded, p, static_cast<std::size_t>(count) * sizeof(float));
    return simd::load<W>(padded);
}
template <int W>
ANVIL_DETAIL_ALWAYS_INLINE void store_partial(float* p, const simd::vec<W>& x, std::int64_t count) {
    float padded[static_cast<std::size_t>(W)];
    simd::store(padded, x);
    std::memcpy(p, padded, static_cast<std::size_t>(count) * sizeof(float));
}

// c[R x width] (+)= a[R x depth] b[depth x width], width <= H*W: the register tile (R rows of H vectors).
// Partial: the last vector of each row is narrower (width - (H-1) W lanes), loaded and stored through a pad.
template <int W, int R, int H, bool Partial>
ANVIL_DETAIL_ALWAYS_INLINE void product_tile(const float* a, std::int64_t lda, const float* b,
                                             std::int64_t ldb, std::int64_t depth, float* c, std::int64_t ldc,
                                             std::int64_t width, bool accumulate) {
    using namespace simd;
    const std::int64_t last = width - (H - 1) * W;
    vec<W> acc[static_cast<std::size_t>(R)][static_cast<std::size_t>(H)];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 2
        for (int h = 0; h < H; ++h) {
            const float* at = c + r * ldc + h * W;
            const bool narrow = Partial && h == H - 1;
            acc[r][h] = !accumulate ? splat<W>(0.0f) : narrow ? load_partial<W>(at, last) : load<W>(at);
        }
    }
    for (std::int64_t p = 0; p < depth; ++p) {
        vec<W> row[static_cast<std::size_t>(H)];
#pragma GCC unroll 2
        for (int h = 0; h < H; ++h) {
            const float* at = b + p * ldb + h * W;
            row[h] = Partial && h == H - 1 ? load_partial<W>(at, last) : load<W>(at);
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            const vec<W> scalar = splat<W>(a[r * lda + p]);
#pragma GCC unroll 2
            for (int h = 0; h < H; ++h)
                acc[r][h] = acc[r][h] + scalar * row[h];
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 2
        for (int h = 0; h < H; ++h) {
            float* at = c + r * ldc + h * W;
            if (Partial && h == H - 1) {
                store_partial(at, acc[r][h], last);
            } else {
                store(at, acc[r][h]);
            }
        }
    }
}

template <int W, int R>
ANVIL_DETAIL_ALWAYS_INLINE void product_rows(const float* a, std::int64_t lda, const float* b,
                                             std::int64_t ldb, std::int64_t depth, float* c, std::int64_t ldc,
                                             std::int64_t width, bool accumulate) {
    for (std::int64_t column = 0; column < width; column += 2 * W) {
        const std::int64_t span = std::min<std::int64_t>(2 * W, width - column);
        const float* bc = b + column;
        float* cc = c + column;
        if (span == 2 * W) {
            product_tile<W, R, 2, false>(a, lda, bc, ldb, depth, cc, ldc, span, accumulate);
        } else if (span > W) {
            product_tile<W, R, 2, true>(a, lda, bc, ldb, depth, cc, ldc, span, accumulate);
        } else if (span == W) {
            product_tile<W, R, 1, false>(a, lda, bc, ldb, depth, cc, ldc, span, accumulate);
        } else {
            product_tile<W, R, 1, true>(a, lda, bc, ldb, depth, cc, ldc, span, accumulate);
        }
    }
}

// c[rows x width] (+)= a[rows x depth] b[depth x width], all row-major with the given row strides.
template <int W>
ANVIL_DETAIL_ALWAYS_INLINE void product(std::int64_t rows, const float* a, std::int64_t lda, const float* b,
                                        std::int64_t ldb, std::int64_t depth, float* c, std::int64_t ldc,
                                        std::int64_t width, bool accumulate) {
    std::int64_t r = 0;
    for (; r + 4 <= rows; r += 4)
        product_rows<W, 4>(a + r * lda, lda, b, ldb, depth, c + r * ldc, ldc, width, accumulate);
    switch (rows - r) {
        case 3:
            return product_rows<W, 3>(a + r * lda, lda, b, ldb, depth, c + r * ldc, ldc, width, accumulate);
        case 2:
            return product_rows<W, 2>(a + r * lda, lda, b, ldb, depth, c + r * ldc, ldc, width, accumulate);
        case 1:
            return product_rows<W, 1>(a + r * lda, lda, b, ldb, depth, c + r * ldc, ldc, width, accumulate);
        default:
            return;
    }
}

// scores[r * ldc + j] = q row r . key row j for R query rows and `count` keys: each key is loaded once for
// the R rows, no transpose needed (what decode steps with a handful of query rows want).
template <int W, int R>
ANVIL_DETAIL_ALWAYS_INLINE void dot_rows(const float* q, std::int64_t depth, const float* keys,
                                         std::int64_t count, float* scores, std::int64_t ldc) {
    using namespace simd;
    for (std::int64_t j = 0; j < count; ++j) {
        const float* key = keys + j * depth;
        vec<W> acc[static_cast<std::size_t>(R)];
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r)
            acc[r] = splat<W>(0.0f);
        std::int64_t d = 0;
        for (; d + W <= depth; d += W) {
            const vec<W> k = load<W>(key + d);
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r)
                acc[r] = acc[r] + load<W>(q + r * depth + d) * k;
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            float total = horizontal_sum(acc[r]);
            for (std::int64_t e = d; e < depth; ++e)
                total += q[r * depth + e] * key[e];
            scores[r * ldc + j] = total;
        }
    }
}

template <int W>
ANVIL_DETAIL_ALWAYS_INLINE void dot_scores(std::int64_t rows, const float* q, std::int64_t depth,
                                           const float* keys, std::int64_t count, float* scores,
                                           std::int64_t ldc) {
    std::int64_t r = 0;
    for (; r + 4 <= rows; r += 4)
        dot_rows<W, 4>(q + r * depth, depth, keys, count, scores + r * ldc, ldc);
    switch (rows - r) {
        case 3:
            return dot_rows<W, 3>(q + r * depth, depth, keys, count, scores + r * ldc, ldc);
        case 2:
            return dot_rows<W, 2>(q + r * depth, depth, keys, count, scores + r * ldc, ldc);
        case 1:
            return dot_rows<W, 1>(q + r * depth, depth, keys, count, scores + r * ldc, ldc);
        default:
            return;
    }
}

// One work item: rows [first_row, last_row) of kv head `kv` in batch `b`.
template <int W>
ANVIL_DETAIL_ALWAYS_INLINE void attend_block(const problem& p, std::int64_t b, std::int64_t kv,
                                             std::int64_t first_row, std::int64_t last_row, float* scratch) {
    using namespace simd;
    const float infinity = std::numeric_limits<float>::infinity();
    const std::int64_t rows = last_row - first_row;
    const std::int64_t head0 = b * p.heads + kv * p.group;  // the first query head of this kv head
    const float* q_rows = p.q + (head0 * p.queries + first_row) * p.depth;
    float* out_rows = p.out + (head0 * p.queries + first_row) * p.value_depth;
    const float* keys = p.k + (b * p.kv_heads + kv) * p.keys * p.depth;
    const float* values = p.v + (b * p.kv_heads + kv) * p.keys * p.value_depth;

    float* key_block = scratch;                             // [depth x block_keys], transposed keys
    float* scores = key_block + p.depth * block_keys;       // [block_rows x block_keys]
    float* acc = scores + block_rows * block_keys;          // [block_rows x value_depth]
    float* running_max = acc + block_rows * p.value_depth;  // [block_rows]
    float* running_sum = running_max + block_rows;          // [block_rows]
    std::fill(acc, acc + rows * p.value_depth, 0.0f);
    std::fill(running_max, running_max + rows, -infinity);
    std::fill(running_sum, running_sum + rows, 0.0f);

    // Query i sees key j iff j <= i + (Sk - Sq): the block stops at its rows' largest limit.
    std::int64_t key_end = p.keys;
    if (p.causal) {
        std::int64_t largest_query = 0;
        for (std::int64_t r = first_row; r < last_row; ++r)
            largest_query = std::max(largest_query, r % p.queries);
        key_end = std::clamp<std::int64_t>(largest_query + p.keys - p.queries + 1, 0, p.keys);
    }

    for (std::int64_t key0 = 0; key0 < key_end; key0 += block_keys) {
        const std::int64_t count = std::min(block_keys, key_end - key0);
        const std::int64_t padded = (count + W - 1) / W * W;
        const float* key_rows = keys + key0 * p.depth;
        if (rows >= few_rows) {
            for (std::int64_t j = 0; j < count; ++j) {
                for (std::int64_t d = 0; d < p.depth; ++d)
                    key_block[d * block_keys + j] = key_rows[j * p.depth + d];
            }
            product<W>(rows, q_rows, p.depth, key_block, block_keys, p.depth, scores, block_keys, count,
                       false);
        } else {
            dot_scores<W>(rows, q_rows, p.depth, key_rows, count, scores, block_keys);
        }
        for (std::int64_t r = 0; r < rows; ++r) {
            float* s = scores + r * block_keys;
            const std::int64_t row = first_row + r;
            const std::int64_t head = kv * p.group + row / p.queries, query = row % p.queries;
            // Keys at or past `visible` are masked out (causal), and the padding up to a whole vector.
            const std::int64_t visible =
                p.causal ? std::clamp<std::int64_t>(query + p.keys - p.queries + 1 - key0, 0, count) : count;
            if (p.mask != nullptr) {
                const std::int64_t offset = b * p.mask_strides[0] + head * p.mask_strides[1] +
                                            query * p.mask_strides[2] + key0 * p.mask_strides[3];
                const float* m = p.mask + offset;
                std::int64_t j = 0;
                if (p.mask_strides[3] == 1) {
                    for (; j + W <= visible; j += W)
                        store(s + j, load<W>(s + j) * p.scale + load<W>(m + j));
                    for (; j < visible; ++j)
                        s[j] = s[j] * p.scale + m[j];
                } else {
                    for (; j + W <= visible; j += W)
                        store(s + j, load<W>(s + j) * p.scale + m[0]);
                    for (; j < visible; ++j)
                        s[j] = s[j] * p.scale + m[0];
                }
            } else {
                std::int64_t j = 0;
                for (; j + W <= visible; j += W)
                    store(s + j, load<W>(s + j) * p.scale);
                for (; j < visible; ++j)
                    s[j] *= p.scale;
            }
            std::fill(s + visible, s + padded, -infinity);

            vec<W> largest_v = splat<W>(-infinity);
            for (std::int64_t j = 0; j < padded; j += W)
                largest_v = max(largest_v, load<W>(s + j));
            const float previous = running_max[r];
            const float largest = std::max(previous, horizontal_max(largest_v));
            if (largest == -infinity) {  // nothing visible yet: contributes nothing
                std::fill(s, s + padded, 0.0f);
                continue;
            }
            vec<W> sum = splat<W>(0.0f);
            for (std::int64_t j = 0; j < padded; j += W) {
                const vec<W> e = exp(load<W>(s + j) - largest);
                store(s + j, e);
                sum = sum + e;
            }
            const float correction = previous == -infinity ? 0.0f : std::exp(previous - largest);
            running_sum[r] = running_sum[r] * correction + horizontal_sum(sum);
            running_max[r] = largest;
            if (correction != 1.0f) {
                float* a = acc + r * p.value_depth;
                std::int64_t e = 0;
                for (; e + W <= p.value_depth; e += W)
                    store(a + e, load<W>(a + e) * correction);
                for (; e < p.value_depth; ++e)
                    a[e] *= correction;
            }
        }
        product<W>(rows, scores, block_keys, values + key0 * p.value_depth, p.value_depth, count, acc,
                   p.value_depth, p.value_depth, true);
    }

    for (std::int64_t r = 0; r < rows; ++r) {
        const float total = running_sum[r];
        const float factor = total > 0.0f ? 1.0f / total : 0.0f;  // a row that saw no key gives zeros
        const float* a = acc + r * p.value_depth;
        float* o = out_rows + r * p.value_depth;
        for (std::int64_t e = 0; e < p.value_depth; ++e)
            o[e] = a[e] * factor;
    }
}

template <int W>
ANVIL_DETAIL_ALWAYS_INLINE void attend(const problem& p, std::size_t first, std::size_t last,
                                       float* scratch) {
    for (auto item = static_cast<std::int64_t>(first); item < static_cast<std::int64_t>(last); ++item) {
        const std::int64_t block = item % p.row_blocks;
        const std::int64_t kv = item / p.row_blocks % p.kv_heads;
        const std::int64_t b = item / p.row_blocks / p.kv_heads;
        const std::int64_t first_row = block * block_rows;
        attend_block<W>(p, b, kv, first_row, std::min(p.rows, first_row + block_rows), scratch);
    }
}

inline void attend_portable(const problem& p, std::size_t first, std::size_t last, float* scratch) {
    attend<4>(p, first, last, scratch);
}

#if defined(ANVIL_DETAIL_KERNELS_X86)
__attribute__((target("avx2,fma"))) inline void attend_avx2(const problem& p, std::size_t first,
                                                            std::size_t last, float* scratch) {
    attend<8>(p, first, last, scratch);
}
#endif

}  // namespace flash

// Scratch floats per thread for attention, given its operands' shapes (q, k, v[, mask]): the workspace passed
// to the kernel holds this many floats for each thread that should run it (at least one).
[[nodiscard]] inline std::size_t attention_workspace(const node& /*n*/, std::span<const dims> input_shapes) {
    return flash::scratch_floats(input_shapes[0][3], input_shapes[2][3]);
}

// out [B, H, Sq, Dv] = softmax(q k^T scale + mask, causal) v; see reference/attention.hpp for the rules.
inline void attention(const node& n, std::span<const const_tensor_span> inputs, tensor_span output,
                      thread_pool& pool, std::span<float> workspace) {
    const dims& q = inputs[0].shape;
    const dims& k = inputs[1].shape;
    const dims& v = inputs[2].shape;
    flash::problem p{};
    p.q = inputs[0].data;
    p.k = inputs[1].data;
    p.v = inputs[2].data;
    p.out = output.data;
    p.heads = q[1];
    p.kv_heads = k[1];
    p.queries = q[2];
    p.keys = k[2];
    p.depth = q[3];
    p.value_depth = v[3];
    p.group = p.heads / p.kv_heads;
    p.rows = p.group * p.queries;
    p.row_blocks = (p.rows + flash::block_rows - 1) / flash::block_rows;
    p.causal = n.attrs.causal;
    p.scale = n.attrs.scale != 0.0f ? n.attrs.scale
              : p.depth > 0         ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.depth)))
                                    : 1.0f;
    if (inputs.size() == 4) {
        p.mask = inputs[3].data;
        p.mask_strides = broadcast_strides(inputs[3].shape, dims{q[0], q[1], q[2], k[2]});
    }
    if (count_of(output.shape) == 0) return;
    const auto items = static_cast<std::size_t>(q[0] * p.kv_heads * p.row_blocks);
    const bool avx2 = use_avx2_kernels();
    run_with_scratch(pool, workspace, flash::scratch_floats(p.depth, p.value_depth), items, 1, "attention",
                     [&](float* scratch, std::size_t first, std::size_t last) {
#if defined(ANVIL_DETAIL_KERNELS_X86)
                         if (avx2) return flash::attend_avx2(p, first, last, scratch);
#endif
                         flash::attend_portable(p, first, last, scratch);
                     });
    (void)avx2;
}

namespace flash {

struct rotary_args {
    const float* x;
    const float* cos;
    const float* sin;
    float* out;
    std::int64_t positions, features, half;
    bool interleaved;
};

template <int W>
ANVIL_DETAIL_ALWAYS_INLINE void rotate_rows(const rotary_args& a, std::size_t first, std::size_t last) {
    using namespace simd;
    for (auto row = static_cast<std::int64_t>(first); row < static_cast<std::int64_t>(last); ++row) {
        const float* x = a.x + row * a.features;
        float* y = a.out + row * a.features;
        const float* c = a.cos + (row % a.positions) * a.half;
        const float* s = a.sin + (row % a.positions) * a.half;
        std::int64_t i = 0;
        if (!a.interleaved) {
            for (; i + W <= a.half; i += W) {
                const vec<W> x1 = load<W>(x + i), x2 = load<W>(x + i + a.half);
                const vec<W> cv = load<W>(c + i), sv = load<W>(s + i);
                store(y + i, x1 * cv - x2 * sv);
                store(y + i + a.half, x2 * cv + x1 * sv);
            }
        }
        for (; i < a.half; ++i) {
            const std::int64_t one = a.interleaved ? 2 * i : i;
            const std::int64_t two = a.interleaved ? 2 * i + 1 : i + a.half;
            const float x1 = x[one], x2 = x[two];
            y[one] = x1 * c[i] - x2 * s[i];
            y[two] = x2 * c[i] + x1 * s[i];
        }
        std::copy(x + 2 * a.half, x + a.features, y + 2 * a.half);
    }
}

inline void rotate_portable(const rotary_args& a, std::size_t first, std::size_t last) {
    rotate_rows<4>(a, first, last);
}

#if defined(ANVIL_DETAIL_KERNELS_X86)
__attribute__((target("avx2,fma"))) inline void rotate_avx2(const rotary_args& a, std::size_t first,
                                                            std::size_t last) {
    rotate_rows<8>(a, first, last);
}
#endif

}  // namespace flash

// x [..., S, D] with cos and sin [S, R/2]: rotates the first R features of each position (rotate-half or
// interleaved pairs), the rest pass through.
inline void rotary(const node& n, std::span<const const_tensor_span> inputs, tensor_span output,
                   thread_pool& pool, std::span<float> /*workspace*/) {
    const dims& shape = inputs[0].shape;
    const std::size_t rank = shape.rank();
    const flash::rotary_args args{inputs[0].data,  inputs[1].data,  inputs[2].data,     output.data,
                                  shape[rank - 2], shape[rank - 1], inputs[1].shape[1], n.attrs.interleaved};
    if (count_of(shape) == 0) return;
    const auto rows = static_cast<std::size_t>(count_of(shape) / args.features);
    const auto grain = static_cast<std::size_t>(std::max<std::int64_t>(1, 32768 / args.features));
    const bool avx2 = use_avx2_kernels();
    pool.parallel_for(0, rows, grain, [&](std::size_t first, std::size_t last) {
#if defined(ANVIL_DETAIL_KERNELS_X86)
        if (avx2) return flash::rotate_avx2(args, first, last);
#endif
        flash::rotate_portable(args, first, last);
    });
    (void)avx2;
}

}  // namespace anvil::detail::cpu
