// anvil: rotary position embedding tables, computed on the host. Every variant Hugging Face's
// modeling_rope_utils.py has for the decoders anvil runs — plain, linear, dynamic (NTK) and llama3 — only
// changes the inverse frequencies, so the step graph takes cos and sin as inputs [B, 1, S, R / 2] and one
// graph serves them all (and dynamic scaling, whose frequencies depend on the sequence length, needs no new
// program). Arithmetic is float32 in the order torch does it, so the tables match to rounding.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <span>
#include <vector>

#include "anvil/core/error.hpp"

namespace anvil::models {

enum class rope_scaling_kind : std::uint8_t { none, linear, dynamic, llama3 };

struct rope_config {
    std::int64_t rotary_dim = 0;  // R: the rotated features of a head (head_dim * partial_rotary_factor)
    double theta = 10000.0;       // rope_theta
    rope_scaling_kind scaling = rope_scaling_kind::none;
    double factor = 1.0;
    // dynamic: the length past which the base grows (config.max_position_embeddings)
    std::int64_t max_position_embeddings = 2048;
    // llama3
    double low_freq_factor = 1.0;
    double high_freq_factor = 4.0;
    std::int64_t original_max_position_embeddings = 8192;
};

// The R / 2 inverse frequencies for a call whose largest position is `seq_len - 1` (only dynamic scaling
// looks at it: HF's _dynamic_frequency_update recomputes the base from torch.max(position_ids) + 1).
[[nodiscard]] inline std::vector<float> rope_inverse_frequencies(const rope_config& c, std::int64_t seq_len) {
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

// cos and sin tables [rows, 1, S, R / 2] (row-major, rows * S * R / 2 floats each) for `positions`
// [rows, S]; a negative position (a padding slot) gets cos 1, sin 0. Each row's frequencies come from its
// own largest position (dynamic scaling).
struct rope_tables {
    std::vector<float> cos, sin;
};

[[nodiscard]] inline rope_tables make_rope_tables(const rope_config& c,
                                                  std::span<const std::int64_t> positions, std::int64_t rows,
                                                  std::int64_t tokens) {
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
