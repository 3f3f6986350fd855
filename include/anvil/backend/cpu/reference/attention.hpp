// anvil: the reference transformer blocks — scaled dot-product attention (grouped-query, causal with a KV
// cache's alignment, additive mask) and rotary position embeddings in both the rotate-half (Llama, NeoX) and
// the interleaved (GPT-J) layouts.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "anvil/backend/cpu/reference/normalization.hpp"
#include "anvil/backend/cpu/tensor_span.hpp"

namespace anvil::detail::cpu::reference {

// out [B, H, Sq, Dv] = softmax(q k^T * scale + mask) v, for q [B, H, Sq, D], k [B, Hkv, Sk, D],
// v [B, Hkv, Sk, Dv] and a mask that broadcasts to [B, H, Sq, Sk].
//   scale 0 means 1 / sqrt(D).
//   Grouped-query: head h reads kv head h / (H / Hkv) (each kv head serves H / Hkv consecutive heads).
//   causal: query i sees key j iff j <= i + (Sk - Sq), i.e. the queries are the last Sq positions of the
//     keys, as with a KV cache; when Sq > Sk the first queries see no key.
//   A query that sees no key (every score -infinity after masking, or Sk = 0) gives a row of zeros, where
//     softmax would give NaNs.
template <class T>
void attention(operand_span<T> q, operand_span<T> k, operand_span<T> v, std::optional<operand_span<T>> mask,
               bool causal, float scale, basic_tensor_span<T> out) {
    const std::int64_t batch = q.shape[0], heads = q.shape[1], queries = q.shape[2], depth = q.shape[3];
    const std::int64_t kv_heads = k.shape[1], keys = k.shape[2], value_depth = v.shape[3];
    const std::int64_t heads_per_kv = kv_heads == 0 ? 1 : heads / kv_heads;
    const double factor = scale != 0.0f ? static_cast<double>(scale)
                                        : (depth > 0 ? 1.0 / std::sqrt(static_cast<double>(depth)) : 1.0);
    const dims scores_shape{batch, heads, queries, keys};
    const stride_array mask_strides = mask ? broadcast_strides(mask->shape, scores_shape) : stride_array{};
    const double masked = -std::numeric_limits<double>::infinity();

    std::vector<double> scores(static_cast<std::size_t>(keys));
    std::vector<T> weights(static_cast<std::size_t>(keys));
    for (std::int64_t b = 0; b < batch; ++b) {
        for (std::int64_t h = 0; h < heads; ++h) {
            const std::int64_t kv = h / heads_per_kv;
            const T* keys_of_head = k.data + (b * kv_heads + kv) * keys * depth;
            const T* values_of_head = v.data + (b * kv_heads + kv) * keys * value_depth;
            for (std::int64_t i = 0; i < queries; ++i) {
                const T* query = q.data + ((b * heads + h) * queries + i) * depth;
                for (std::int64_t j = 0; j < keys; ++j) {
                    double score = masked;
                    if (!causal || j <= i + (keys - queries)) {
                        double dot = 0.0;
                        for (std::int64_t d = 0; d < depth; ++d) {
                            dot += static_cast<double>(query[d]) * keys_of_head[j * depth + d];
                        }
                        score = dot * factor;
                        if (mask) {
                            const index_array index{b, h, i, j};
                            score += mask->data[offset_of(index, mask_strides, 4)];
                        }
                    }
                    scores[static_cast<std::size_t>(j)] = score;
                }
                softmax_row(scores.data(), keys, weights.data(), 1);
                T* row = out.data + ((b * heads + h) * queries + i) * value_depth;
                for (std::int64_t e = 0; e < value_depth; ++e) {
                    double sum = 0.0;
                    for (std::int64_t j = 0; j < keys; ++j) {
                        sum += static_cast<double>(weights[static_cast<std::size_t>(j)]) *
                               values_of_head[j * value_depth + e];
                    }
                    row[e] = static_cast<T>(sum);
                }
            }
        }
    }
}

// x [..., S, D] with cos and sin [S, R / 2]: rotates the first R features of every position by the angles
// whose cosines and sines the tables hold; features R..D pass through (partial rotary, as GPT-J's
// rotary_dim and NeoX's rotary_pct).
//   rotate-half (interleaved = false): feature i pairs with i + R/2:
//     out[i] = x[i] cos - x[i + R/2] sin, out[i + R/2] = x[i + R/2] cos + x[i] sin.
//   interleaved: feature 2i pairs with 2i + 1:
//     out[2i] = x[2i] cos - x[2i + 1] sin, out[2i + 1] = x[2i + 1] cos + x[2i] sin.
template <class T>
void rotary(operand_span<T> x, operand_span<T> cos, operand_span<T> sin, bool interleaved,
            basic_tensor_span<T> out) {
    const std::size_t rank = x.shape.rank();
    const std::int64_t positions = x.shape[rank - 2], features = x.shape[rank - 1];
    const std::int64_t half = cos.shape[1];
    const std::int64_t blocks = extent_product(x.shape, 0, rank - 2);
    for (std::int64_t blk = 0; blk < blocks; ++blk) {
        for (std::int64_t s = 0; s < positions; ++s) {
            const T* in = x.data + (blk * positions + s) * features;
            T* result = out.data + (blk * positions + s) * features;
            for (std::int64_t i = 0; i < half; ++i) {
                const T c = cos.data[s * half + i];
                const T n = sin.data[s * half + i];
                const std::int64_t first = interleaved ? 2 * i : i;
                const std::int64_t second = interleaved ? 2 * i + 1 : i + half;
                result[first] = in[first] * c - in[second] * n;
                result[second] = in[second] * c + in[first] * n;
            }
            for (std::int64_t i = 2 * half; i < features; ++i)
                result[i] = in[i];
        }
    }
}

}  // namespace anvil::detail::cpu::reference
