// anvil: rotary position embedding tables, computed on the host. Every variant Hugging Face's
// modeling_rope_utils.py has for the decoders anvil runs — plain, linear, dynamic (NTK) and llama3 — only
// changes the inverse frequencies, so the step graph takes cos and sin as inputs [B, 1, S, R / 2] and one
// graph serves them all (and dynamic scaling, whose frequencies depend on the sequence length, needs no new
// program). Arithmetic is float32 in the order torch does it, so the tables match to rounding.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "anvil/compilation.hpp"

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
[[nodiscard]] std::vector<float> rope_inverse_frequencies(const rope_config& c, std::int64_t seq_len);

// cos and sin tables [rows, 1, S, R / 2] (row-major, rows * S * R / 2 floats each) for `positions`
// [rows, S]; a negative position (a padding slot) gets cos 1, sin 0. Each row's frequencies come from its
// own largest position (dynamic scaling).
struct rope_tables {
    std::vector<float> cos, sin;
};

[[nodiscard]] rope_tables make_rope_tables(const rope_config& c, std::span<const std::int64_t> positions,
                                           std::int64_t rows, std::int64_t tokens);

}  // namespace anvil::models

#if ANVIL_DEFINITIONS
#include "anvil/models/common/rope-inl.hpp"
#endif
