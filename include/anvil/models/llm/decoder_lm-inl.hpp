// anvil: decoder_lm's definitions (see decoder_lm.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/core/json.hpp"
#include "anvil/core/masking.hpp"
#include "anvil/expr/expr.hpp"
#include "anvil/io/checkpoint.hpp"
#include "anvil/models/common/weights.hpp"
#include "anvil/models/llm/decoder_lm.hpp"

namespace anvil::models {

ANVIL_INLINE decoder_config decoder_config::load(const std::filesystem::path& folder) {
    const auto path = folder / "config.json";
    const json::value document = config_reader::read_file(path);
    const auto generation_path = folder / "generation_config.json";
    if (std::filesystem::exists(generation_path)) {
        const json::value generation = json::parse_file(generation_path);
        return from_json(document, path.string(), &generation, generation_path.string());
    }
    return from_json(document, path.string());
}

}  // namespace anvil::models

namespace anvil::models::recipe_detail {

ANVIL_INLINE void read_token_ids(const config_reader& config, std::string_view key,
                                 std::vector<std::int32_t>& out) {
    const json::value* v = config.find(key);
    if (v == nullptr || v->is_null()) return;
    auto add = [&](const json::value& item) {
        if (!item.is_integer() || item.as_int() < 0 || item.as_int() > (std::int64_t{1} << 31) - 1) {
            throw format_error(anvil::detail::message(
                config.source(), ": '", key, "' must be a token id or a list of them, got ", json::dump(*v)));
        }
        const auto id = static_cast<std::int32_t>(item.as_int());
        if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
    };
    if (v->is_array()) {
        for (const auto& item : v->as_array())
            add(item);
    } else {
        add(*v);
    }
}

ANVIL_INLINE void read_rope_scaling(const config_reader& config, decoder_config& c) {
    const json::value* s = config.find("rope_scaling");
    if (s == nullptr || s->is_null()) return;
    if (!s->is_object())
        throw format_error(anvil::detail::message(config.source(), ": 'rope_scaling' must be an object"));
    const config_reader scaling(*s, config.source() + " rope_scaling");
    std::string type = scaling.string("rope_type", "");
    if (type.empty()) type = scaling.string("type", "default");
    c.rope.factor = scaling.positive_number("factor", 1.0);
    if (type == "default") {
        c.rope.scaling = rope_scaling_kind::none;
    } else if (type == "linear") {
        c.rope.scaling = rope_scaling_kind::linear;
    } else if (type == "dynamic") {
        c.rope.scaling = rope_scaling_kind::dynamic;
    } else if (type == "llama3") {
        c.rope.scaling = rope_scaling_kind::llama3;
        c.rope.low_freq_factor = scaling.positive_number("low_freq_factor", 1.0);
        c.rope.high_freq_factor = scaling.positive_number("high_freq_factor", 4.0);
        c.rope.original_max_position_embeddings = scaling.integer("original_max_position_embeddings", 8192);
        if (!(c.rope.high_freq_factor > c.rope.low_freq_factor)) {
            throw format_error(anvil::detail::message(
                config.source(), ": rope_scaling high_freq_factor ", c.rope.high_freq_factor,
                " must exceed low_freq_factor ", c.rope.low_freq_factor));
        }
    } else {
        throw unsupported_error(
            anvil::detail::message(config.source(), ": rope_scaling type '", type,
                                   "' is not supported (default, linear, dynamic, llama3)"));
    }
    if (c.rope.scaling != rope_scaling_kind::none && !scaling.contains("factor"))
        throw format_error(
            anvil::detail::message(config.source(), ": rope_scaling '", type, "' has no 'factor'"));
}

}  // namespace anvil::models::recipe_detail

namespace anvil::models {

ANVIL_INLINE decoder_config decoder_config::from_json(const json::value& document, std::string source,
                                                      const json::value* generation,
                                                      std::string generation_source) {
    const config_reader config(document, std::move(source));
    decoder_config c;
    c.model_type = config.string("model_type", "");
    const std::string& type = c.model_type;
    if (type == "gpt2") {
        c.family = decoder_family::gpt2;
    } else if (type == "llama") {
        c.family = decoder_family::llama;
    } else if (type == "qwen2") {
        c.family = decoder_family::qwen2;
    } else if (type == "qwen3") {
        c.family = decoder_family::qwen3;
    } else if (type == "mistral") {
        c.family = decoder_family::mistral;
    } else {
        throw unsupported_error(anvil::detail::message(
            config.source(), ": model_type '", type,
            "' is not a supported decoder language model (gpt2, llama, qwen2, qwen3, mistral)"));
    }
    c.vocab_size = config.required_integer("vocab_size");
    if (c.family == decoder_family::gpt2) {
        c.hidden = config.integer("n_embd", 768);
        c.layers = config.integer("n_layer", 12);
        c.heads = config.integer("n_head", 12);
        c.kv_heads = c.heads;
        c.intermediate = config.integer("n_inner", 4 * c.hidden);
        c.max_position_embeddings = config.integer("n_positions", 1024);
        c.norm_eps = config.positive_number("layer_norm_epsilon", 1e-5);
        c.act = parse_activation(config.string("activation_function", "gelu_new"));
        c.qkv_bias = c.output_bias = c.mlp_bias = true;
        c.tie_word_embeddings = config.boolean("tie_word_embeddings", true);
        if (c.hidden % c.heads != 0) {
            throw format_error(anvil::detail::message(config.source(), ": n_embd ", c.hidden,
                                                      " is not a multiple of n_head ", c.heads));
        }
        c.head_dim = c.hidden / c.heads;
        // GPT2Attention: scale_attn_weights divides by sqrt(D); scale_attn_by_inverse_layer_idx further by
        // layer + 1.
        const bool scaled = config.boolean("scale_attn_weights", true);
        const bool by_layer = config.boolean("scale_attn_by_inverse_layer_idx", false);
        for (std::int64_t i = 0; i < c.layers; ++i) {
            double scale = scaled ? 1.0 / std::sqrt(static_cast<double>(c.head_dim)) : 1.0;
            if (by_layer) scale /= static_cast<double>(i + 1);
            c.attention_scales.push_back(scale);
        }
    } else {
        c.hidden = config.required_integer("hidden_size");
        c.layers = config.required_integer("num_hidden_layers");
        c.heads = config.required_integer("num_attention_heads");
        c.kv_heads = config.integer("num_key_value_heads", c.heads);
        c.intermediate = config.required_integer("intermediate_size");
        c.max_position_embeddings = config.integer("max_position_embeddings", 2048);
        c.norm_eps = config.positive_number("rms_norm_eps", 1e-6);
        c.act = parse_activation(config.string("hidden_act", "silu"));
        c.tie_word_embeddings = config.boolean("tie_word_embeddings", false);
        const bool explicit_head_dim = c.family == decoder_family::qwen3;
        if (!explicit_head_dim && c.hidden % c.heads != 0 && !config.contains("head_dim")) {
            throw format_error(anvil::detail::message(config.source(), ": hidden_size ", c.hidden,
                                                      " is not a multiple of num_attention_heads ", c.heads,
                                                      " (and there is no head_dim)"));
        }
        c.head_dim = config.integer("head_dim", explicit_head_dim ? 128 : c.hidden / c.heads);
        if (c.heads % c.kv_heads != 0) {
            throw format_error(anvil::detail::message(config.source(), ": num_attention_heads ", c.heads,
                                                      " is not a multiple of num_key_value_heads ",
                                                      c.kv_heads));
        }
        switch (c.family) {
            case decoder_family::llama:
                c.qkv_bias = c.output_bias = config.boolean("attention_bias", false);
                c.mlp_bias = config.boolean("mlp_bias", false);
                break;
            case decoder_family::qwen2:
                c.qkv_bias = true;  // Qwen2Attention: q/k/v always have a bias, o_proj none
                break;
            case decoder_family::qwen3:
                c.qkv_bias = c.output_bias = config.boolean("attention_bias", false);
                c.qk_norm = true;
                break;
            default:
                break;
        }
        if (c.family == decoder_family::qwen2 || c.family == decoder_family::qwen3) {
            if (config.boolean("use_sliding_window", false)) {
                throw unsupported_error(anvil::detail::message(
                    config.source(), ": use_sliding_window true is not supported for ", type,
                    " (Qwen's per-layer sliding window; Mistral's sliding_window is)"));
            }
        }
        if (c.family == decoder_family::mistral) c.sliding_window = config.integer("sliding_window", 0, 0);
        c.rope.theta = config.positive_number("rope_theta", 10000.0);
        c.rope.max_position_embeddings = c.max_position_embeddings;
        const double partial = config.positive_number("partial_rotary_factor", 1.0);
        const double rotary = static_cast<double>(c.head_dim) * partial;
        c.rope.rotary_dim = static_cast<std::int64_t>(rotary);
        if (partial > 1.0 || static_cast<double>(c.rope.rotary_dim) != rotary || c.rope.rotary_dim % 2 != 0 ||
            c.rope.rotary_dim < 2) {
            throw unsupported_error(
                anvil::detail::message(config.source(), ": partial_rotary_factor ", partial, " of head_dim ",
                                       c.head_dim, " does not give an even number of rotated features"));
        }
        recipe_detail::read_rope_scaling(config, c);
        c.attention_scales.assign(static_cast<std::size_t>(c.layers), 0.0);
    }
    recipe_detail::read_token_ids(config, "eos_token_id", c.eos_token_ids);
    std::vector<std::int32_t> bos;
    recipe_detail::read_token_ids(config, "bos_token_id", bos);
    if (generation != nullptr) {
        const config_reader gen(*generation, std::move(generation_source));
        recipe_detail::read_token_ids(gen, "eos_token_id", c.eos_token_ids);
        recipe_detail::read_token_ids(gen, "bos_token_id", bos);
    }
    if (!bos.empty()) c.bos_token_id = bos.front();
    for (const std::int32_t id : c.eos_token_ids) {
        if (id >= c.vocab_size) {
            throw format_error(anvil::detail::message(config.source(), ": eos_token_id ", id,
                                                      " is outside the vocabulary (vocab_size ", c.vocab_size,
                                                      ")"));
        }
    }
    return c;
}

ANVIL_INLINE decoder_weight_source::decoder_weight_source(std::shared_ptr<const checkpoint> weights,
                                                          const decoder_config& c)
    : weights_(std::move(weights)) {
    if (weights_->contains("model.embed_tokens.weight") || weights_->contains("transformer.wte.weight")) {
        prefix_ = c.learned_positions() ? "transformer." : "model.";
    }
    const std::string probe = prefix_ + (c.learned_positions() ? "wte.weight" : "embed_tokens.weight");
    if (!weights_->contains(probe)) {
        throw format_error(anvil::detail::message(weights_->path().string(), ": no ", c.model_type,
                                                  " weights: the tensor '", probe, "' is missing"));
    }
    if (c.learned_positions()) prepare_gpt2(c);
}

ANVIL_INLINE tensor<float> decoder_weight_source::load(weight_loader& loader, const std::string& name,
                                                       const dims& expected) const {
    const auto found = prepared_.find(name);
    if (found == prepared_.end()) return loader.load(prefix_ + name, expected);
    graph& g = loader.target();
    const value stored = g.constant(found->second, prefix_ + name);
    if (found->second.type() == dtype::f32) return tensor<float>(stored);
    attributes to_f32;
    to_f32.to = dtype::f32;
    return tensor<float>(g.apply(op::cast, {stored}, to_f32));
}

ANVIL_INLINE std::shared_ptr<const decoder_weight_source> decoder_weight_source::with_tensors(
    std::map<std::string, host_tensor> replacements) const {
    auto copy = std::make_shared<decoder_weight_source>(*this);
    for (auto& [name, tensor] : replacements)
        copy->prepared_.insert_or_assign(name, std::move(tensor));
    return copy;
}

ANVIL_INLINE const tensor_view& decoder_weight_source::find(const std::string& name, const dims& expected,
                                                            std::string_view layout) const {
    return checked_tensor(*weights_, prefix_ + name, expected, layout);
}

ANVIL_INLINE void decoder_weight_source::transpose_conv1d(const std::string& name, std::int64_t in,
                                                          std::int64_t out,
                                                          const std::vector<std::string>& pieces) {
    const tensor_view& weight = find(name + ".weight", dims{in, out}, " (Conv1D [in, out])");
    const tensor_view& bias = find(name + ".bias", dims{out}, "");
    if (weight.blocks()) {
        throw unsupported_error(anvil::detail::message(
            weights_->path().string(), ": tensor '", weight.name(), "' is a Conv1D weight [in, out] in ggml ",
            ggml_type_name(*weight.blocks()), " blocks, which cannot be transposed as they are"));
    }
    const auto part = out / static_cast<std::int64_t>(pieces.size());
    const std::size_t size = dtype_size(weight.type());
    const auto* from = reinterpret_cast<const unsigned char*>(weight.bytes().data());
    for (std::size_t n = 0; n < pieces.size(); ++n) {
        const std::int64_t first = static_cast<std::int64_t>(n) * part;
        host_tensor t(weight.type(), dims{part, in});
        auto* to = static_cast<unsigned char*>(t.raw());
        for (std::int64_t i = 0; i < in; ++i) {
            for (std::int64_t o = 0; o < part; ++o) {
                std::memcpy(to + static_cast<std::size_t>(o * in + i) * size,
                            from + static_cast<std::size_t>(i * out + first + o) * size, size);
            }
        }
        prepared_.emplace(pieces[n] + ".weight", std::move(t));
        const std::byte* b = bias.bytes().data() + static_cast<std::size_t>(first) * dtype_size(bias.type());
        prepared_.emplace(pieces[n] + ".bias", host_tensor(bias.type(), dims{part}, b, weights_));
    }
}

ANVIL_INLINE void decoder_weight_source::prepare_gpt2(const decoder_config& c) {
    for (std::int64_t i = 0; i < c.layers; ++i) {
        const std::string p = "h." + std::to_string(i) + ".";
        // A layer whose q, k and v come split (a llama.cpp file, models/import/gguf_decoder.hpp) holds its
        // four matrices as linear weights [out, in] already: nothing to transpose.
        if (weights_->contains(prefix_ + p + "attn.q.weight")) continue;
        transpose_conv1d(p + "attn.c_attn", c.hidden, 3 * c.hidden,
                         {p + "attn.q", p + "attn.k", p + "attn.v"});
        transpose_conv1d(p + "attn.c_proj", c.hidden, c.hidden, {p + "attn.c_proj"});
        transpose_conv1d(p + "mlp.c_fc", c.hidden, c.intermediate, {p + "mlp.c_fc"});
        transpose_conv1d(p + "mlp.c_proj", c.intermediate, c.hidden, {p + "mlp.c_proj"});
    }
}

}  // namespace anvil::models

namespace anvil::models::recipe_detail {

ANVIL_INLINE linear_layer load_decoder_linear(weight_loader& loader, const decoder_weight_source& source,
                                              const std::string& name, std::int64_t out, std::int64_t in,
                                              bool bias) {
    linear_layer layer{source.load(loader, name + ".weight", dims{out, in}), std::nullopt};
    if (bias) layer.bias = source.load(loader, name + ".bias", dims{out});
    return layer;
}

ANVIL_INLINE norm_layer load_decoder_norm(weight_loader& loader, const decoder_weight_source& source,
                                          const std::string& name, std::int64_t size, double eps,
                                          bool layer_norm) {
    norm_layer n;
    n.type = layer_norm ? norm_layer::kind::layer_norm : norm_layer::kind::rms_norm;
    n.weight = source.load(loader, name + ".weight", dims{size});
    if (layer_norm) n.bias = source.load(loader, name + ".bias", dims{size});
    n.epsilon = eps;
    return n;
}

ANVIL_INLINE attention_layer load_gpt2_attention(weight_loader& loader, const decoder_weight_source& source,
                                                 const decoder_config& c, const std::string& p) {
    attention_layer a;
    a.query = load_decoder_linear(loader, source, p + "attn.q", c.hidden, c.hidden, true);
    a.key = load_decoder_linear(loader, source, p + "attn.k", c.hidden, c.hidden, true);
    a.value = load_decoder_linear(loader, source, p + "attn.v", c.hidden, c.hidden, true);
    a.output = load_decoder_linear(loader, source, p + "attn.c_proj", c.hidden, c.hidden, true);
    return a;
}

}  // namespace anvil::models::recipe_detail

namespace anvil::models {

ANVIL_INLINE decoder_weights load_decoder_weights(weight_loader& loader, const decoder_weight_source& source,
                                                  const decoder_config& c) {
    decoder_weights w;
    const bool gpt2 = c.learned_positions();
    w.token_embeddings =
        source.load(loader, gpt2 ? "wte.weight" : "embed_tokens.weight", dims{c.vocab_size, c.hidden});
    if (gpt2)
        w.position_embeddings = source.load(loader, "wpe.weight", dims{c.max_position_embeddings, c.hidden});
    const std::int64_t q_out = c.heads * c.head_dim, kv_out = c.kv_heads * c.head_dim;
    for (std::int64_t i = 0; i < c.layers; ++i) {
        decoder_layer layer;
        layer.attention_scale = c.attention_scales.at(static_cast<std::size_t>(i));
        if (gpt2) {
            const std::string p = "h." + std::to_string(i) + ".";
            layer.attention_norm =
                recipe_detail::load_decoder_norm(loader, source, p + "ln_1", c.hidden, c.norm_eps, true);
            layer.attention = recipe_detail::load_gpt2_attention(loader, source, c, p);
            layer.mlp_norm =
                recipe_detail::load_decoder_norm(loader, source, p + "ln_2", c.hidden, c.norm_eps, true);
            layer.mlp.up = recipe_detail::load_decoder_linear(loader, source, p + "mlp.c_fc", c.intermediate,
                                                              c.hidden, true);
            layer.mlp.down = recipe_detail::load_decoder_linear(loader, source, p + "mlp.c_proj", c.hidden,
                                                                c.intermediate, true);
        } else {
            const std::string p = "layers." + std::to_string(i) + ".";
            layer.attention_norm = recipe_detail::load_decoder_norm(loader, source, p + "input_layernorm",
                                                                    c.hidden, c.norm_eps, false);
            attention_layer& a = layer.attention;
            a.query = recipe_detail::load_decoder_linear(loader, source, p + "self_attn.q_proj", q_out,
                                                         c.hidden, c.qkv_bias);
            a.key = recipe_detail::load_decoder_linear(loader, source, p + "self_attn.k_proj", kv_out,
                                                       c.hidden, c.qkv_bias);
            a.value = recipe_detail::load_decoder_linear(loader, source, p + "self_attn.v_proj", kv_out,
                                                         c.hidden, c.qkv_bias);
            a.output = recipe_detail::load_decoder_linear(loader, source, p + "self_attn.o_proj", c.hidden,
                                                          q_out, c.output_bias);
            if (c.qk_norm) {
                layer.query_norm = recipe_detail::load_decoder_norm(loader, source, p + "self_attn.q_norm",
                                                                    c.head_dim, c.norm_eps, false);
                layer.key_norm = recipe_detail::load_decoder_norm(loader, source, p + "self_attn.k_norm",
                                                                  c.head_dim, c.norm_eps, false);
            }
            layer.mlp_norm = recipe_detail::load_decoder_norm(loader, source, p + "post_attention_layernorm",
                                                              c.hidden, c.norm_eps, false);
            layer.mlp.gate = recipe_detail::load_decoder_linear(loader, source, p + "mlp.gate_proj",
                                                                c.intermediate, c.hidden, c.mlp_bias);
            layer.mlp.up = recipe_detail::load_decoder_linear(loader, source, p + "mlp.up_proj",
                                                              c.intermediate, c.hidden, c.mlp_bias);
            layer.mlp.down = recipe_detail::load_decoder_linear(loader, source, p + "mlp.down_proj", c.hidden,
                                                                c.intermediate, c.mlp_bias);
        }
        layer.attention.heads = c.heads;
        layer.attention.kv_heads = c.kv_heads;
        layer.attention.head_dim = c.head_dim;
        layer.mlp.act = c.act;
        w.layers.push_back(std::move(layer));
    }
    w.final_norm =
        recipe_detail::load_decoder_norm(loader, source, gpt2 ? "ln_f" : "norm", c.hidden, c.norm_eps, gpt2);
    // lm_head sits outside the base model's prefix (GPT2LMHeadModel, LlamaForCausalLM).
    if (c.tie_word_embeddings) {
        w.head = w.token_embeddings;
    } else {
        w.head = loader.load("lm_head.weight", dims{c.vocab_size, c.hidden});
    }
    return w;
}

ANVIL_INLINE std::string cache_key_name(std::int64_t layer) {
    return "k" + std::to_string(layer);
}

ANVIL_INLINE std::string cache_value_name(std::int64_t layer) {
    return "v" + std::to_string(layer);
}

ANVIL_INLINE std::string layer_stage_label(std::int64_t layer) {
    return "layer " + std::to_string(layer);
}

ANVIL_INLINE std::string window_key_name(std::int64_t layer) {
    return "wk" + std::to_string(layer);
}

ANVIL_INLINE std::string window_value_name(std::int64_t layer) {
    return "wv" + std::to_string(layer);
}

ANVIL_INLINE std::vector<named_tensor> decoder_step_inputs(
    const decoder_config& c, std::span<const std::int32_t> ids, std::span<const std::int64_t> positions,
    std::span<const std::int64_t> cache_positions, std::int64_t batch, std::int64_t tokens,
    std::int64_t context, std::span<const std::int64_t> select) {
    std::vector<named_tensor> in;
    in.push_back({std::string(step_ids_name),
                  host_tensor::from(std::vector<std::int32_t>(ids.begin(), ids.end()), dims{batch, tokens})});
    if (c.learned_positions()) {
        std::vector<std::int32_t> p(positions.size());
        for (std::size_t i = 0; i < p.size(); ++i)
            p[i] = static_cast<std::int32_t>(std::max<std::int64_t>(positions[i], 0));
        in.push_back({std::string(step_positions_name), host_tensor::from(p, dims{batch, tokens})});
    } else {
        auto tables = make_rope_tables(c.rope, positions, batch, tokens);
        const dims table{batch, 1, tokens, c.rope.rotary_dim / 2};
        in.push_back({std::string(step_cos_name), host_tensor::from(tables.cos, table)});
        in.push_back({std::string(step_sin_name), host_tensor::from(tables.sin, table)});
    }
    const std::int64_t width = context + tokens;
    std::vector<float> mask(static_cast<std::size_t>(batch * tokens * width), masked_score);
    auto visible = [&](std::int64_t q, std::int64_t k) {
        return k >= 0 && k <= q && (c.sliding_window == 0 || q - k < c.sliding_window);
    };
    for (std::int64_t b = 0; b < batch; ++b) {
        for (std::int64_t i = 0; i < tokens; ++i) {
            float* row = mask.data() + (b * tokens + i) * width;
            const std::int64_t q = positions[static_cast<std::size_t>(b * tokens + i)];
            if (q < 0) {
                row[context + i] = 0.0f;
                continue;
            }
            for (std::int64_t j = 0; j < context; ++j)
                if (visible(q, cache_positions[static_cast<std::size_t>(b * context + j)])) row[j] = 0.0f;
            for (std::int64_t j = 0; j < tokens; ++j)
                if (visible(q, positions[static_cast<std::size_t>(b * tokens + j)])) row[context + j] = 0.0f;
        }
    }
    in.push_back({std::string(step_mask_name), host_tensor::from(mask, dims{batch, 1, tokens, width})});
    if (!select.empty()) {
        std::vector<float> one_hot(static_cast<std::size_t>(batch * tokens), 0.0f);
        for (std::int64_t b = 0; b < batch; ++b)
            one_hot[static_cast<std::size_t>(b * tokens + select[static_cast<std::size_t>(b)])] = 1.0f;
        in.push_back({std::string(step_select_name), host_tensor::from(one_hot, dims{batch, 1, tokens})});
    }
    return in;
}

ANVIL_INLINE std::vector<value> decoder_step(graph& g, const decoder_weights& w, const decoder_config& c,
                                             const step_shape& s,
                                             const std::optional<step_rope>& rope_tables) {
    // Stages (graph::begin_stage): the embedding, each layer, the head. A model whose weights pass one
    // Neural Engine program's limit runs as chunks of whole layers (backend/ane/partition.hpp).
    g.begin_stage(std::string(embedding_stage_label));
    const dims tokens{s.batch, s.tokens};
    auto ids = g.input<std::int32_t>(std::string(step_ids_name), tokens);
    tensor<float> x = embedding(w.token_embeddings, ids);
    std::optional<std::pair<tensor<float>, tensor<float>>> rope;
    if (w.position_embeddings) {
        x = x + embedding(*w.position_embeddings,
                          g.input<std::int32_t>(std::string(step_positions_name), tokens));
    } else if (rope_tables) {
        auto positions = g.input<std::int32_t>(std::string(step_positions_name), tokens);
        const dims table{s.batch, 1, s.tokens, c.rope.rotary_dim / 2};
        rope.emplace(reshape(embedding(rope_tables->cos, positions), table),
                     reshape(embedding(rope_tables->sin, positions), table));
    } else {
        const dims table{s.batch, 1, s.tokens, c.rope.rotary_dim / 2};
        rope.emplace(g.input<float>(std::string(step_cos_name), table),
                     g.input<float>(std::string(step_sin_name), table));
    }
    auto mask = g.input<float>(std::string(step_mask_name),
                               dims{s.batch, 1, s.tokens, s.context + s.window + s.tokens});
    std::vector<value> caches;
    const dims cache{s.batch, c.kv_heads, s.context, c.head_dim};
    const dims window{s.batch, c.kv_heads, s.window, c.head_dim};
    for (std::int64_t i = 0; i < c.layers; ++i) {
        g.begin_stage(layer_stage_label(i));
        std::vector<tensor<float>> keys{g.input<float>(cache_key_name(i), cache)};
        std::vector<tensor<float>> values{g.input<float>(cache_value_name(i), cache)};
        if (s.window > 0) {
            keys.push_back(g.input<float>(window_key_name(i), window));
            values.push_back(g.input<float>(window_value_name(i), window));
        }
        auto out = apply(w.layers[static_cast<std::size_t>(i)], x, keys, values, mask, rope);
        x = out.hidden;
        caches.push_back(out.key.value());
        caches.push_back(out.value.value());
    }
    g.begin_stage(std::string(head_stage_label));
    if (s.select) x = matmul(g.input<float>(std::string(step_select_name), dims{s.batch, 1, s.tokens}), x);
    const auto logits = linear(apply(w.final_norm, x), w.head);
    std::vector<value> outputs{logits.value()};
    outputs.insert(outputs.end(), caches.begin(), caches.end());
    return outputs;
}

ANVIL_INLINE std::vector<value> decoder_state_step(graph& g, const decoder_weights& w,
                                                   const decoder_config& c, std::int64_t tokens,
                                                   std::int64_t context) {
    if (tokens < 1 || context < 1) {
        throw error(anvil::detail::message("decoder_state_step: ", tokens, " tokens and ", context,
                                           " cache slots; both must be positive"));
    }
    std::optional<step_rope> rope;
    if (!c.learned_positions()) {
        if (c.rope.scaling == rope_scaling_kind::dynamic && context > c.rope.max_position_embeddings) {
            throw unsupported_error(anvil::detail::message(
                "export: dynamic RoPE scaling changes its frequencies past ", c.rope.max_position_embeddings,
                " positions, so a context of ", context, " has no fixed tables; export at most ",
                c.rope.max_position_embeddings));
        }
        std::vector<std::int64_t> every(static_cast<std::size_t>(context));
        for (std::int64_t p = 0; p < context; ++p)
            every[static_cast<std::size_t>(p)] = p;
        const rope_tables made = make_rope_tables(c.rope, every, 1, context);
        const dims table{context, c.rope.rotary_dim / 2};
        rope.emplace(step_rope{g.constant<float>(host_tensor::from(made.cos, table), "rope.cos"),
                               g.constant<float>(host_tensor::from(made.sin, table), "rope.sin")});
    }
    std::vector<value> outputs = decoder_step(g, w, c, {1, tokens, context, false, 0}, rope);
    write_step_into_caches(g, outputs, tokens, context, c.kv_heads, c.head_dim);
    return outputs;
}

ANVIL_INLINE void write_step_into_caches(graph& g, std::vector<value>& outputs, std::int64_t tokens,
                                         std::int64_t context, std::int64_t kv_heads, std::int64_t head_dim) {
    // Placing S new rows in T slots: a matmul [1, T, S] x [1, S, kv_heads * D] (the heads flattened, so the
    // product has no broadcast batch), and the slots written are cleared first.
    auto write = g.input<float>(std::string(step_cache_write_name), dims{1, 1, context, tokens});
    auto keep = 1.0f - sum(write, {3}, true);  // [1, 1, T, 1]
    auto flat_write = reshape(write, dims{1, context, tokens});
    const std::int64_t row = kv_heads * head_dim;
    for (std::size_t k = 1; k < outputs.size(); ++k) {
        const std::int64_t layer = static_cast<std::int64_t>((k - 1) / 2);
        auto cache =
            tensor<float>(g.input_named(k % 2 == 1 ? cache_key_name(layer) : cache_value_name(layer)));
        auto fresh = tensor<float>(outputs[k]);  // [1, kv_heads, S, D]
        auto rows = reshape(permute(fresh, {0, 2, 1, 3}), dims{1, tokens, row});
        auto placed =
            permute(reshape(matmul(flat_write, rows), dims{1, context, kv_heads, head_dim}), {0, 2, 1, 3});
        outputs[k] = (cache * keep + placed).value();
    }
}

}  // namespace anvil::models
