// anvil: rope's definitions (see rope.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <span>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/models/common/rope.hpp"

namespace anvil::models {

ANVIL_INLINE std::vector<float> rope_inverse_frequencies(const rope_config& c, std::int64_t seq_len) {
    if (c.rotary_dim < 2 || c.rotary_dim % 2 != 0)
        throw error(anvil::detail::message("rope: the rotary dimension ", c.rotary_dim,
                                           " must be even and positive"));
    const auto half = static_cast<std::size_t>(c.rotary_dim / 2);
    const auto dim = static_cast<float>(c.rotary_dim);
    double base = c.theta;
    if (c.scaling == rope_scaling_kind::dynamic && seq_len > c.max_position_embeddings) {
        // _compute_dynamic_ntk_parameters
        const double grown =
            c.factor * static_cast<double>(seq_len) / static_cast<double>(c.max_position_embeddings) -
            (c.factor - 1.0);
        base = base * std::pow(grown, static_cast<double>(dim) / (static_cast<double>(dim) - 2.0));
    }
    std::vector<float> inv(half);
    for (std::size_t i = 0; i < half; ++i) {
        const float exponent = static_cast<float>(2 * i) / dim;
        inv[i] = 1.0f / std::pow(static_cast<float>(base), exponent);
    }
    if (c.scaling == rope_scaling_kind::linear) {
        for (float& f : inv)
            f /= static_cast<float>(c.factor);
    } else if (c.scaling == rope_scaling_kind::llama3) {
        // _compute_llama3_parameters: long wavelengths divided by factor, short ones kept, a smooth blend
        // between.
        const auto old_context = static_cast<float>(c.original_max_position_embeddings);
        const auto low = static_cast<float>(c.low_freq_factor);
        const auto high = static_cast<float>(c.high_freq_factor);
        const auto factor = static_cast<float>(c.factor);
        const float low_freq_wavelen = old_context / low;
        const float high_freq_wavelen = old_context / high;
        for (float& f : inv) {
            const float wavelen = 2.0f * std::numbers::pi_v<float> / f;
            const float scaled = wavelen > low_freq_wavelen ? f / factor : f;
            const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
            if (medium) {
                const float smooth = (old_context / wavelen - low) / (high - low);
                f = (1.0f - smooth) * scaled / factor + smooth * scaled;
            } else {
                f = scaled;
            }
        }
    }
    return inv;
}

ANVIL_INLINE rope_tables make_rope_tables(const rope_config& c, std::span<const std::int64_t> positions,
                                          std::int64_t rows, std::int64_t tokens) {
    if (rows < 1 || tokens < 1 || static_cast<std::int64_t>(positions.size()) != rows * tokens) {
        throw error(anvil::detail::message("rope: ", positions.size(), " positions for ", rows, " rows of ",
                                           tokens, " tokens"));
    }
    const auto half = static_cast<std::size_t>(c.rotary_dim / 2);
    const auto count = positions.size() * half;
    rope_tables t{std::vector<float>(count, 1.0f), std::vector<float>(count, 0.0f)};
    for (std::int64_t r = 0; r < rows; ++r) {
        const auto row =
            positions.subspan(static_cast<std::size_t>(r * tokens), static_cast<std::size_t>(tokens));
        const std::int64_t largest = *std::max_element(row.begin(), row.end());
        if (largest < 0) continue;
        const std::vector<float> inv = rope_inverse_frequencies(c, largest + 1);
        for (std::size_t s = 0; s < row.size(); ++s) {
            if (row[s] < 0) continue;
            const auto p = static_cast<float>(row[s]);
            float* cos = t.cos.data() + (static_cast<std::size_t>(r * tokens) + s) * half;
            float* sin = t.sin.data() + (static_cast<std::size_t>(r * tokens) + s) * half;
            for (std::size_t i = 0; i < half; ++i) {
                const float angle = inv[i] * p;  // float32, as torch's inv_freq @ position_ids
                cos[i] = std::cos(angle);
                sin[i] = std::sin(angle);
            }
        }
    }
    return t;
}

}  // namespace anvil::models
