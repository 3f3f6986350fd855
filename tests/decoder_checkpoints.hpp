// Tiny decoder LMs written by the tests themselves: a config.json and a seeded random checkpoint in Hugging
// Face naming, for the tests that need no reference outputs (test_decoder_lm.cpp, test_decoder_plan.cpp).
#pragma once

#include <anvil/anvil.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace anvil_test {

inline void write_text(const std::filesystem::path& path, const std::string& text) {
    std::ofstream(path) << text;
}

// Seeded uniform values in [-scale, scale].
inline std::vector<float> random_values(std::size_t count, std::uint32_t& state, float scale) {
    std::vector<float> v(count);
    for (float& x : v) {
        state = state * 1664525u + 1013904223u;
        x = (static_cast<float>(state >> 8) / 16777216.0f * 2.0f - 1.0f) * scale;
    }
    return v;
}

// A random checkpoint for `c` in Hugging Face naming (GPT-2's Conv1D [in, out]), without the tensor `skip`.
inline void write_decoder_checkpoint(const anvil::models::decoder_config& c,
                                     const std::filesystem::path& file, const std::string& skip = "",
                                     bool transposed_c_attn = false) {
    anvil::safetensors_writer out;
    std::uint32_t state = 12345;
    auto add = [&](const std::string& name, std::vector<std::int64_t> shape, float scale,
                   float centre = 0.0f) {
        if (name == skip) return;
        std::size_t count = 1;
        for (const auto e : shape)
            count *= static_cast<std::size_t>(e);
        auto values = random_values(count, state, scale);
        for (float& v : values)
            v += centre;
        out.add(name, shape, values);
    };
    const std::int64_t h = c.hidden, i = c.intermediate, q = c.heads * c.head_dim,
                       kv = c.kv_heads * c.head_dim;
    if (c.family == anvil::models::decoder_family::gpt2) {
        add("transformer.wte.weight", {c.vocab_size, h}, 0.5f);
        add("transformer.wpe.weight", {c.max_position_embeddings, h}, 0.2f);
        for (std::int64_t l = 0; l < c.layers; ++l) {
            const std::string p = "transformer.h." + std::to_string(l) + ".";
            add(p + "ln_1.weight", {h}, 0.1f, 1.0f);
            add(p + "ln_1.bias", {h}, 0.1f);
            add(p + "attn.c_attn.weight",
                transposed_c_attn ? std::vector<std::int64_t>{3 * h, h} : std::vector<std::int64_t>{h, 3 * h},
                0.4f);
            add(p + "attn.c_attn.bias", {3 * h}, 0.1f);
            add(p + "attn.c_proj.weight", {h, h}, 0.3f);
            add(p + "attn.c_proj.bias", {h}, 0.1f);
            add(p + "ln_2.weight", {h}, 0.1f, 1.0f);
            add(p + "ln_2.bias", {h}, 0.1f);
            add(p + "mlp.c_fc.weight", {h, i}, 0.3f);
            add(p + "mlp.c_fc.bias", {i}, 0.1f);
            add(p + "mlp.c_proj.weight", {i, h}, 0.3f);
            add(p + "mlp.c_proj.bias", {h}, 0.1f);
        }
        add("transformer.ln_f.weight", {h}, 0.1f, 1.0f);
        add("transformer.ln_f.bias", {h}, 0.1f);
    } else {
        add("model.embed_tokens.weight", {c.vocab_size, h}, 0.5f);
        for (std::int64_t l = 0; l < c.layers; ++l) {
            const std::string p = "model.layers." + std::to_string(l) + ".";
            add(p + "input_layernorm.weight", {h}, 0.1f, 1.0f);
            add(p + "self_attn.q_proj.weight", {q, h}, 0.4f);
            add(p + "self_attn.k_proj.weight", {kv, h}, 0.4f);
            add(p + "self_attn.v_proj.weight", {kv, h}, 0.4f);
            add(p + "self_attn.o_proj.weight", {h, q}, 0.3f);
            add(p + "post_attention_layernorm.weight", {h}, 0.1f, 1.0f);
            add(p + "mlp.gate_proj.weight", {i, h}, 0.3f);
            add(p + "mlp.up_proj.weight", {i, h}, 0.3f);
            add(p + "mlp.down_proj.weight", {h, i}, 0.3f);
        }
        add("model.norm.weight", {h}, 0.1f, 1.0f);
        if (!c.tie_word_embeddings) add("lm_head.weight", {c.vocab_size, h}, 0.5f);
    }
    out.write(file);
}

// A model folder: `config_text` as config.json (`config`, what it parses to) and a random checkpoint.
inline void write_decoder_model(const std::filesystem::path& folder,
                                const anvil::models::decoder_config& config, const std::string& config_text,
                                const std::string& skip = "", bool transposed_c_attn = false) {
    write_text(folder / "config.json", config_text);
    write_decoder_checkpoint(config, folder / "model.safetensors", skip, transposed_c_attn);
}

}  // namespace anvil_test
