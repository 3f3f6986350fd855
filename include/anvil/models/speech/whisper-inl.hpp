// anvil: whisper's definitions (see whisper.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/backend/compile.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/json.hpp"
#include "anvil/core/masking.hpp"
#include "anvil/expr/expr.hpp"
#include "anvil/io/checkpoint.hpp"
#include "anvil/io/log_mel.hpp"
#include "anvil/models/common/lora_adapter.hpp"
#include "anvil/models/llm/decoder_lm.hpp"
#include "anvil/models/speech/whisper.hpp"

namespace anvil::models::recipe_detail {

// A token id list that may be null or absent (suppress_tokens): empty then.
ANVIL_INLINE std::vector<std::int32_t> whisper_ids(const config_reader& config, std::string_view key) {
    std::vector<std::int32_t> out;
    for (const std::int64_t id : config.integers(key, 0))
        out.push_back(static_cast<std::int32_t>(id));
    return out;
}

// lang_to_id / task_to_id: an object of token ids.
ANVIL_INLINE std::map<std::string, std::int32_t> whisper_id_map(const config_reader& config,
                                                                std::string_view key) {
    std::map<std::string, std::int32_t> out;
    const json::value* v = config.find(key);
    if (v == nullptr || v->is_null()) return out;
    if (!v->is_object()) {
        throw format_error(anvil::detail::message(config.source(), ": '", key,
                                                  "' must be an object of token ids, got ", json::dump(*v)));
    }
    for (const auto& [name, id] : v->as_object()) {
        if (!id.is_integer() || id.as_int() < 0 || id.as_int() > (std::int64_t{1} << 31)) {
            throw format_error(anvil::detail::message(config.source(), ": '", key, "': '", name,
                                                      "' must be a token id, got ", json::dump(id)));
        }
        out[name] = static_cast<std::int32_t>(id.as_int());
    }
    return out;
}

}  // namespace anvil::models::recipe_detail

namespace anvil::models {

ANVIL_INLINE whisper_config whisper_config::from_json(const config_reader& config,
                                                      const config_reader* generation) {
    const std::string type = config.string("model_type", "");
    if (type != "whisper") {
        throw unsupported_error(anvil::detail::message(config.source(), ": model_type '", type,
                                                       "' is not a Whisper model (\"whisper\")"));
    }
    whisper_config c;
    c.vocab_size = config.integer("vocab_size", c.vocab_size);
    c.mel_bins = config.integer("num_mel_bins", c.mel_bins);
    c.d_model = config.integer("d_model", c.d_model);
    c.encoder_layers = config.integer("encoder_layers", c.encoder_layers);
    c.encoder_heads = config.integer("encoder_attention_heads", c.encoder_heads);
    c.decoder_layers = config.integer("decoder_layers", c.decoder_layers);
    c.decoder_heads = config.integer("decoder_attention_heads", c.decoder_heads);
    c.encoder_ffn = config.integer("encoder_ffn_dim", c.encoder_ffn);
    c.decoder_ffn = config.integer("decoder_ffn_dim", c.decoder_ffn);
    c.max_source_positions = config.integer("max_source_positions", c.max_source_positions);
    c.max_target_positions = config.integer("max_target_positions", c.max_target_positions);
    c.act = parse_activation(config.string("activation_function", "gelu"));
    c.scale_embedding = config.boolean("scale_embedding", c.scale_embedding);
    for (const auto& [heads, key] : {std::pair{c.encoder_heads, "encoder_attention_heads"},
                                     std::pair{c.decoder_heads, "decoder_attention_heads"}}) {
        if (c.d_model % heads != 0) {
            throw format_error(anvil::detail::message(config.source(), ": d_model ", c.d_model,
                                                      " is not a multiple of ", key, " ", heads));
        }
    }
    const auto id = [](const config_reader& from, std::string_view key, std::int32_t fallback) {
        return static_cast<std::int32_t>(from.integer(key, fallback, 0));
    };
    c.decoder_start_token_id = id(config, "decoder_start_token_id", c.decoder_start_token_id);
    c.eos_token_id = id(config, "eos_token_id", c.eos_token_id);
    c.max_length = c.max_target_positions;
    c.suppress_tokens = recipe_detail::whisper_ids(config, "suppress_tokens");
    c.begin_suppress_tokens = recipe_detail::whisper_ids(config, "begin_suppress_tokens");
    if (generation != nullptr) {
        const config_reader& g = *generation;
        c.decoder_start_token_id = id(g, "decoder_start_token_id", c.decoder_start_token_id);
        c.eos_token_id = id(g, "eos_token_id", c.eos_token_id);
        c.max_length = std::min(g.integer("max_length", c.max_length), c.max_target_positions);
        if (g.contains("suppress_tokens"))
            c.suppress_tokens = recipe_detail::whisper_ids(g, "suppress_tokens");
        if (g.contains("begin_suppress_tokens"))
            c.begin_suppress_tokens = recipe_detail::whisper_ids(g, "begin_suppress_tokens");
        if (const json::value* v = g.find("no_timestamps_token_id"); v && !v->is_null())
            c.no_timestamps_token_id = id(g, "no_timestamps_token_id", 0);
        c.max_initial_timestamp_index =
            g.integer("max_initial_timestamp_index", c.max_initial_timestamp_index, 0);
        c.language_ids = recipe_detail::whisper_id_map(g, "lang_to_id");
        c.task_ids = recipe_detail::whisper_id_map(g, "task_to_id");
        c.multilingual = g.boolean("is_multilingual", !c.language_ids.empty());
    } else {
        c.multilingual = false;
    }
    const auto check_id = [&](std::int64_t token, std::string_view what) {
        if (token < 0 || token >= c.vocab_size) {
            throw format_error(anvil::detail::message(config.source(), ": ", what, " ", token,
                                                      " is outside the vocabulary (vocab_size ", c.vocab_size,
                                                      ")"));
        }
    };
    check_id(c.decoder_start_token_id, "decoder_start_token_id");
    check_id(c.eos_token_id, "eos_token_id");
    if (c.no_timestamps_token_id) check_id(*c.no_timestamps_token_id, "no_timestamps_token_id");
    for (const auto& list : {c.suppress_tokens, c.begin_suppress_tokens})
        for (const std::int32_t token : list)
            check_id(token, "a suppressed token");
    for (const auto& map : {c.language_ids, c.task_ids})
        for (const auto& [name, token] : map)
            check_id(token, "the token of " + name);
    return c;
}

ANVIL_INLINE whisper_encoder_weights load_whisper_encoder(weight_loader& weights, const whisper_config& c,
                                                          const std::string& prefix) {
    const std::string e = prefix + "encoder.";
    const std::int64_t d = c.d_model;
    whisper_encoder_weights w;
    const auto conv = [&](const std::string& name, std::int64_t in) {
        return reshape(weights.load(e + name + ".weight", dims{d, in, 3}),
                       std::vector<std::int64_t>{d, in, 1, 3});
    };
    w.conv1_weight = conv("conv1", c.mel_bins);
    w.conv1_bias = weights.load(e + "conv1.bias", dims{d});
    w.conv2_weight = conv("conv2", d);
    w.conv2_bias = weights.load(e + "conv2.bias", dims{d});
    w.positions = weights.load(e + "embed_positions.weight", dims{c.max_source_positions, d});
    for (std::int64_t i = 0; i < c.encoder_layers; ++i) {
        const std::string p = e + "layers." + std::to_string(i) + ".";
        pre_norm_encoder_layer layer;
        layer.attention_norm = load_layer_norm(weights, p + "self_attn_layer_norm", d, c.layer_norm_eps);
        layer.attention.query = load_linear(weights, p + "self_attn.q_proj", d, d);
        layer.attention.key = load_linear(weights, p + "self_attn.k_proj", d, d, false);
        layer.attention.value = load_linear(weights, p + "self_attn.v_proj", d, d);
        layer.attention.output = load_linear(weights, p + "self_attn.out_proj", d, d);
        layer.attention.heads = layer.attention.kv_heads = c.encoder_heads;
        layer.attention.head_dim = c.encoder_head_dim();
        layer.mlp_norm = load_layer_norm(weights, p + "final_layer_norm", d, c.layer_norm_eps);
        layer.mlp.up = load_linear(weights, p + "fc1", c.encoder_ffn, d);
        layer.mlp.down = load_linear(weights, p + "fc2", d, c.encoder_ffn);
        layer.mlp.act = c.act;
        w.layers.push_back(std::move(layer));
    }
    w.final_norm = load_layer_norm(weights, e + "layer_norm", d, c.layer_norm_eps);
    return w;
}

ANVIL_INLINE whisper_decoder_weights load_whisper_decoder(weight_loader& weights, const whisper_config& c,
                                                          const std::string& prefix) {
    const std::string e = prefix + "decoder.";
    const std::int64_t d = c.d_model;
    whisper_decoder_weights w;
    w.tokens = weights.load(e + "embed_tokens.weight", dims{c.vocab_size, d});
    w.positions = weights.load(e + "embed_positions.weight", dims{c.max_target_positions, d});
    const auto attention = [&](const std::string& p) {
        attention_layer a;
        a.query = load_linear(weights, p + ".q_proj", d, d);
        a.key = load_linear(weights, p + ".k_proj", d, d, false);
        a.value = load_linear(weights, p + ".v_proj", d, d);
        a.output = load_linear(weights, p + ".out_proj", d, d);
        a.heads = a.kv_heads = c.decoder_heads;
        a.head_dim = c.decoder_head_dim();
        return a;
    };
    for (std::int64_t i = 0; i < c.decoder_layers; ++i) {
        const std::string p = e + "layers." + std::to_string(i) + ".";
        whisper_decoder_layer layer;
        layer.self_norm = load_layer_norm(weights, p + "self_attn_layer_norm", d, c.layer_norm_eps);
        layer.self_attention = attention(p + "self_attn");
        layer.cross_norm = load_layer_norm(weights, p + "encoder_attn_layer_norm", d, c.layer_norm_eps);
        layer.cross_attention = attention(p + "encoder_attn");
        layer.mlp_norm = load_layer_norm(weights, p + "final_layer_norm", d, c.layer_norm_eps);
        layer.mlp.up = load_linear(weights, p + "fc1", c.decoder_ffn, d);
        layer.mlp.down = load_linear(weights, p + "fc2", d, c.decoder_ffn);
        layer.mlp.act = c.act;
        w.layers.push_back(std::move(layer));
    }
    w.final_norm = load_layer_norm(weights, e + "layer_norm", d, c.layer_norm_eps);
    return w;
}

ANVIL_INLINE tensor<float> whisper_encode(const whisper_encoder_weights& w, const whisper_config& c,
                                          const tensor<float>& features) {
    const dims shape = features.shape();
    if (shape.rank() != 3 || shape[1] != c.mel_bins || shape[2] != c.frames()) {
        throw shape_error(anvil::detail::message("whisper: expected features [batch, ", c.mel_bins, ", ",
                                                 c.frames(), "] (num_mel_bins, one 30 s window), got ",
                                                 shape));
    }
    const std::int64_t batch = shape[0], d = c.d_model, positions = c.max_source_positions;
    // Conv1d as a conv2d over a height of 1: kernel 3, padding 1; the second with stride 2.
    const tensor<float> x = reshape(features, std::vector<std::int64_t>{batch, c.mel_bins, 1, c.frames()});
    const tensor<float> h1 =
        activate(conv2d(x, w.conv1_weight, w.conv1_bias, conv2d_options{.padding = padding2d(0, 1)}), c.act);
    const tensor<float> h2 = activate(conv2d(h1, w.conv2_weight, w.conv2_bias,
                                             conv2d_options{.stride = {1, 2}, .padding = padding2d(0, 1)}),
                                      c.act);
    tensor<float> h = permute(reshape(h2, std::vector<std::int64_t>{batch, d, positions}), {0, 2, 1}) +
                      reshape(w.positions, std::vector<std::int64_t>{1, positions, d});
    for (const auto& layer : w.layers)
        h = apply(layer, h, std::nullopt);
    return apply(w.final_norm, h);
}

ANVIL_INLINE std::string whisper_cross_key_name(std::int64_t layer) {
    return "xk" + std::to_string(layer);
}

ANVIL_INLINE std::string whisper_cross_value_name(std::int64_t layer) {
    return "xv" + std::to_string(layer);
}

ANVIL_INLINE std::vector<value> whisper_encoder_program(graph& g, const whisper_encoder_weights& encoder,
                                                        const whisper_decoder_weights& decoder,
                                                        const whisper_config& c) {
    const auto features = g.input<float>("input_features", dims{1, c.mel_bins, c.frames()});
    const tensor<float> hidden = whisper_encode(encoder, c, features);
    std::vector<value> out{hidden.value()};
    for (const auto& layer : decoder.layers) {
        const attention_layer& a = layer.cross_attention;
        out.push_back(recipe_detail::split_heads(apply(a.key, hidden), a.kv_heads, a.head_dim).value());
        out.push_back(recipe_detail::split_heads(apply(a.value, hidden), a.kv_heads, a.head_dim).value());
    }
    return out;
}

ANVIL_INLINE std::vector<value> whisper_decoder_step(graph& g, const whisper_decoder_weights& w,
                                                     const whisper_config& c, std::int64_t context) {
    const std::int64_t heads = c.decoder_heads, head_dim = c.decoder_head_dim();
    const auto ids = g.input<std::int32_t>(std::string(step_ids_name), dims{1, 1});
    const auto positions = g.input<std::int32_t>(std::string(step_positions_name), dims{1, 1});
    const auto mask = g.input<float>(std::string(step_mask_name), dims{1, 1, 1, context + 1});
    tensor<float> tokens = embedding(w.tokens, ids);
    if (c.scale_embedding) tokens = tokens * static_cast<float>(std::sqrt(static_cast<double>(c.d_model)));
    tensor<float> x = tokens + embedding(w.positions, positions);
    std::vector<value> new_keys_values;
    for (std::size_t i = 0; i < w.layers.size(); ++i) {
        const whisper_decoder_layer& layer = w.layers[i];
        const auto index = static_cast<std::int64_t>(i);
        const auto cached_k = g.input<float>(cache_key_name(index), dims{1, heads, context, head_dim});
        const auto cached_v = g.input<float>(cache_value_name(index), dims{1, heads, context, head_dim});
        const decoder_layer_result attended = cached_self_attention(
            layer.self_attention, apply(layer.self_norm, x), {cached_k}, {cached_v}, mask);
        x = x + attended.hidden;
        const auto cross_k =
            g.input<float>(whisper_cross_key_name(index), dims{1, heads, c.max_source_positions, head_dim});
        const auto cross_v =
            g.input<float>(whisper_cross_value_name(index), dims{1, heads, c.max_source_positions, head_dim});
        x = x + cross_attention(layer.cross_attention, apply(layer.cross_norm, x), cross_k, cross_v);
        x = x + apply(layer.mlp, apply(layer.mlp_norm, x));
        new_keys_values.push_back(attended.key.value());
        new_keys_values.push_back(attended.value.value());
    }
    std::vector<value> out{linear(apply(w.final_norm, x), w.tokens).value()};
    out.insert(out.end(), new_keys_values.begin(), new_keys_values.end());
    return out;
}

}  // namespace anvil::models

namespace anvil::models::recipe_detail {

ANVIL_INLINE void process_whisper_logits(const whisper_config& c, std::span<const std::int32_t> generated,
                                         bool timestamps, std::span<float> logits) {
    constexpr float hidden = -std::numeric_limits<float>::infinity();
    const auto vocab = static_cast<std::int64_t>(logits.size());
    const auto suppress = [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t t = std::max<std::int64_t>(begin, 0); t < std::min(end, vocab); ++t)
            logits[static_cast<std::size_t>(t)] = hidden;
    };
    for (const std::int32_t token : c.suppress_tokens)
        suppress(token, token + 1);
    if (generated.empty()) {
        for (const std::int32_t token : c.begin_suppress_tokens)
            suppress(token, token + 1);
    }
    if (!timestamps) return;
    const std::optional<std::int32_t> first = c.timestamp_begin();
    if (!first) throw error("whisper: timestamps need generation_config.json's no_timestamps_token_id");
    const std::int64_t begin = *first;
    suppress(*c.no_timestamps_token_id, *c.no_timestamps_token_id + 1);
    // Timestamps come in pairs, except directly before the end of text.
    const std::size_t n = generated.size();
    const bool last_was_timestamp = n >= 1 && generated[n - 1] >= begin;
    const bool penultimate_was_timestamp = n < 2 || generated[n - 2] >= begin;
    if (last_was_timestamp) {
        if (penultimate_was_timestamp)
            suppress(begin, vocab);  // a text token next
        else
            suppress(0, c.eos_token_id);  // a timestamp or the end next
    }
    // Timestamps never decrease (and a pair's second one may not repeat an earlier timestamp).
    std::optional<std::int32_t> last_timestamp;
    for (const std::int32_t token : generated)
        if (token >= begin) last_timestamp = token;
    if (last_timestamp) {
        const std::int64_t until =
            last_was_timestamp && !penultimate_was_timestamp ? *last_timestamp : *last_timestamp + 1;
        suppress(begin, until);
    }
    if (n == 0) {  // the first token is a timestamp, at most max_initial_timestamp_index
        suppress(0, begin);
        suppress(begin + c.max_initial_timestamp_index + 1, vocab);
    }
    // When the timestamps together are likelier than any single text token, a timestamp it is.
    double top = -std::numeric_limits<double>::infinity();
    for (const float x : logits)
        top = std::max(top, double{x});
    if (!std::isfinite(top)) return;
    double total = 0.0;
    for (const float x : logits)
        total += std::exp(double{x} - top);
    const double log_total = std::log(total) + top;
    double timestamp_sum = 0.0, best_text = -std::numeric_limits<double>::infinity();
    for (std::int64_t t = 0; t < vocab; ++t) {
        const double logprob = double{logits[static_cast<std::size_t>(t)]} - log_total;
        if (t >= begin)
            timestamp_sum += std::exp(logprob);
        else
            best_text = std::max(best_text, logprob);
    }
    if (timestamp_sum > 0.0 && std::log(timestamp_sum) > best_text) suppress(0, begin);
}

}  // namespace anvil::models::recipe_detail

namespace anvil::models {

ANVIL_INLINE whisper whisper::load(const std::filesystem::path& folder, const load_options& given) {
    const load_options options = with_model_source(given, folder);
    namespace fs = std::filesystem;
    const json::value document = config_reader::read_file(folder / "config.json");
    const config_reader reader(document, (folder / "config.json").string());
    whisper result;
    if (fs::exists(folder / "generation_config.json")) {
        const json::value generation = config_reader::read_file(folder / "generation_config.json");
        const config_reader generation_reader(generation, (folder / "generation_config.json").string());
        result.config_ = whisper_config::from_json(reader, &generation_reader);
    } else {
        result.config_ = whisper_config::from_json(reader);
    }
    auto weights = open_weights(folder, options);
    // WhisperForConditionalGeneration names its tensors model.encoder.*; a bare WhisperModel encoder.*.
    const std::string prefix = weights->contains("model.encoder.conv1.weight") ? "model." : "";
    if (!weights->contains(prefix + "encoder.conv1.weight")) {
        throw format_error(
            anvil::detail::message(weights->path().string(),
                                   ": no Whisper encoder: neither 'model.encoder.conv1.weight' nor "
                                   "'encoder.conv1.weight' is there"));
    }
    if (const tensor_view* head = weights->find("proj_out.weight")) {
        // Hugging Face ties proj_out to the token embeddings; a checkpoint that stores it must hold the same.
        const tensor_view& tokens = weights->tensor(prefix + "decoder.embed_tokens.weight");
        // Same dtype: the stored bytes (large-v3's are 66 M values: no f32 copies of both at load).
        const bool same_shape = std::ranges::equal(head->shape(), tokens.shape());
        const bool same =
            same_shape && (head->type() == tokens.type() ? std::ranges::equal(head->bytes(), tokens.bytes())
                                                         : head->to_f32() == tokens.to_f32());
        if (!same) {
            throw unsupported_error(anvil::detail::message(
                weights->path().string(),
                ": proj_out.weight differs from the token embeddings (an untied output projection is not "
                "supported)"));
        }
    }
    // Every tensor is looked up and its shape checked now, so a folder that does not fit fails at load.
    {
        weight_loader check(graph{}, weights);
        static_cast<void>(load_whisper_encoder(check, result.config_, prefix));
        static_cast<void>(load_whisper_decoder(check, result.config_, prefix));
    }
    if (fs::exists(folder / "tokenizer.json") ||
        (fs::exists(folder / "vocab.json") && fs::exists(folder / "merges.txt")))
        result.tokenizer_ = std::make_shared<const tokenizer>(tokenizer::load(folder));

    const whisper_config config = result.config_;
    result.encoder_ = std::make_unique<compiled_shapes>(
        options.compile, [config, weights, prefix](graph& g, std::span<const std::int64_t>) {
            weight_loader loader(g, weights);
            const auto encoder = load_whisper_encoder(loader, config, prefix);
            const auto decoder = load_whisper_decoder(loader, config, prefix);
            return whisper_encoder_program(g, encoder, decoder, config);
        });
    compile_options decoder_options = options.compile;
    for (std::int64_t i = 0; i < config.decoder_layers; ++i) {
        decoder_options.resident_inputs.push_back(cache_key_name(i));
        decoder_options.resident_inputs.push_back(cache_value_name(i));
        decoder_options.resident_inputs.push_back(whisper_cross_key_name(i));
        decoder_options.resident_inputs.push_back(whisper_cross_value_name(i));
    }
    result.decoder_ = std::make_unique<compiled_shapes>(
        decoder_options, [config, weights, prefix](graph& g, std::span<const std::int64_t> key) {
            weight_loader loader(g, weights);
            return whisper_decoder_step(g, load_whisper_decoder(loader, config, prefix), config, key[0]);
        });
    return result;
}

ANVIL_INLINE mlpackage_function whisper::export_encoder_function() const {
    graph g;
    const std::int64_t key[] = {1};
    const std::vector<value> computed = encoder_->build(g, key);  // the hidden state, then xk0, xv0, ...
    mlpackage_function f{"encoder", {computed.begin() + 1, computed.end()}, {}, {}};
    for (std::int64_t i = 0; i < config_.decoder_layers; ++i) {
        f.output_names.push_back(whisper_cross_key_name(i));
        f.output_names.push_back(whisper_cross_value_name(i));
    }
    return f;
}

ANVIL_INLINE mlpackage_function whisper::export_decoder_function(std::int64_t context) const {
    if (context < 1 || context > config_.max_target_positions) {
        throw error(anvil::detail::message("whisper: an exported decoder takes 1 to ",
                                           config_.max_target_positions, " cache slots, not ", context));
    }
    graph g;
    const std::int64_t key[] = {context};
    mlpackage_function f{"decoder", decoder_->build(g, key), {"logits"}, {}};
    write_step_into_caches(g, f.outputs, 1, context, config_.decoder_heads, config_.decoder_head_dim());
    for (std::int64_t i = 0; i < config_.decoder_layers; ++i) {  // outputs: logits, k0, v0, k1, v1, ...
        f.states.push_back({cache_key_name(i), static_cast<std::size_t>(1 + 2 * i)});
        f.states.push_back({cache_value_name(i), static_cast<std::size_t>(2 + 2 * i)});
        f.states.push_back({whisper_cross_key_name(i), std::nullopt});
        f.states.push_back({whisper_cross_value_name(i), std::nullopt});
    }
    return f;
}

ANVIL_INLINE const tokenizer& whisper::tokens() const {
    if (!tokenizer_) {
        throw error(
            "whisper: the model folder has no tokenizer (tokenizer.json, or vocab.json + merges.txt)");
    }
    return *tokenizer_;
}

ANVIL_INLINE std::string whisper::text(std::span<const std::int32_t> ids) const {
    const std::optional<std::int32_t> first_timestamp = config_.timestamp_begin();
    std::vector<std::int32_t> words;
    for (const std::int32_t id : ids)
        if (!first_timestamp || id < *first_timestamp) words.push_back(id);
    return tokens().decode(words);
}

ANVIL_INLINE host_tensor whisper::features(std::span<const float> samples) const {
    log_mel_options mel;
    mel.mel_bins = config_.mel_bins;
    // Past one window: the features of the whole clip (one log-mel, normalised over all of it), which
    // transcription then cuts into 30 s windows.
    if (static_cast<std::int64_t>(samples.size()) > mel.window())
        mel.window_samples = static_cast<std::int64_t>(samples.size());
    return whisper_log_mel(samples, mel);
}

ANVIL_INLINE host_tensor whisper::window(const host_tensor& features, std::int64_t start) const {
    const dims shape = features.shape();
    if (shape.rank() != 2 || shape[0] != config_.mel_bins || shape[1] < 1 || features.type() != dtype::f32) {
        throw shape_error(anvil::detail::message("whisper: expected f32 features [", config_.mel_bins,
                                                 ", frames] (num_mel_bins), got ",
                                                 dtype_name(features.type()), " ", shape));
    }
    const std::int64_t frames = shape[1], window_frames = config_.frames();
    host_tensor out(dtype::f32, dims{config_.mel_bins, window_frames});  // zero-filled
    const std::span<const float> in = features.values<float>();
    const std::span<float> to = out.values<float>();
    const std::int64_t count = std::clamp<std::int64_t>(frames - start, 0, window_frames);
    for (std::int64_t m = 0; m < config_.mel_bins; ++m)
        std::copy_n(in.begin() + static_cast<std::ptrdiff_t>(m * frames + start), count,
                    to.begin() + static_cast<std::ptrdiff_t>(m * window_frames));
    return out;
}

ANVIL_INLINE host_tensor whisper::encode(const host_tensor& features) {
    const dims shape = features.shape();
    const bool plain = shape.rank() == 2;
    if (!(plain || (shape.rank() == 3 && shape[0] == 1)) || shape[shape.rank() - 2] != config_.mel_bins ||
        shape[shape.rank() - 1] != config_.frames()) {
        throw shape_error(anvil::detail::message("whisper: expected features [", config_.mel_bins, ", ",
                                                 config_.frames(), "] (num_mel_bins, one 30 s window), got ",
                                                 shape));
    }
    if (features.type() != dtype::f32) {
        throw type_error(
            anvil::detail::message("whisper: expected f32 features, got ", dtype_name(features.type())));
    }
    program& p = encoder_->at({1});
    const host_tensor batched = plain ? features.reshaped(dims{1, shape[0], shape[1]}) : features;
    return p.run({{"input_features", batched}})
        .front()
        .reshaped(dims{config_.max_source_positions, config_.d_model});
}

ANVIL_INLINE host_tensor whisper::logits(const host_tensor& features, std::span<const std::int32_t> ids) {
    const dims shape = features.shape();
    if (shape.rank() != 2 || shape[0] != config_.mel_bins || shape[1] != config_.frames()) {
        throw shape_error(anvil::detail::message("whisper: expected features [", config_.mel_bins, ", ",
                                                 config_.frames(), "] (one 30 s window), got ", shape));
    }
    if (ids.empty() || static_cast<std::int64_t>(ids.size()) > config_.max_target_positions) {
        throw shape_error(anvil::detail::message("whisper: logits takes 1 to ", config_.max_target_positions,
                                                 " ids (max_target_positions), got ", ids.size()));
    }
    for (const std::int32_t id : ids) {
        if (id < 0 || id >= config_.vocab_size) {
            throw error(anvil::detail::message("whisper: token id ", id, " is out of range (vocab_size ",
                                               config_.vocab_size, ")"));
        }
    }
    start_window(features.reshaped(dims{1, shape[0], shape[1]}));
    const auto vocab = static_cast<std::size_t>(config_.vocab_size);
    std::vector<float> rows;
    rows.reserve(ids.size() * vocab);
    for (std::size_t t = 0; t < ids.size(); ++t) {
        const std::vector<float> row = step(ids[t], static_cast<std::int64_t>(t));
        rows.insert(rows.end(), row.begin(), row.end());
    }
    return host_tensor::from(rows, dims{static_cast<std::int64_t>(ids.size()), config_.vocab_size});
}

ANVIL_INLINE void whisper::start_window(const host_tensor& features) {
    program& encoder = encoder_->at({1});
    const std::vector<host_tensor> out = encoder.run({{"input_features", features}});
    program& decoder = decoder_->at({config_.max_target_positions});
    for (std::int64_t i = 0; i < config_.decoder_layers; ++i) {
        const auto at = static_cast<std::size_t>(1 + 2 * i);
        decoder.write_input(whisper_cross_key_name(i), 2, 0, out[at]);
        decoder.write_input(whisper_cross_value_name(i), 2, 0, out[at + 1]);
    }
}

ANVIL_INLINE std::vector<float> whisper::step(std::int32_t token, std::int64_t position) {
    const std::int64_t context = config_.max_target_positions;
    program& decoder = decoder_->at({context});
    std::vector<float> mask(static_cast<std::size_t>(context + 1), masked_score);
    for (std::int64_t slot = 0; slot < position; ++slot)
        mask[static_cast<std::size_t>(slot)] = 0.0f;
    mask.back() = 0.0f;  // the token itself
    const std::vector<host_tensor> out = decoder.run(
        {{std::string(step_ids_name), host_tensor::from(std::vector<std::int32_t>{token}, dims{1, 1})},
         {std::string(step_positions_name),
          host_tensor::from(std::vector<std::int32_t>{static_cast<std::int32_t>(position)}, dims{1, 1})},
         {std::string(step_mask_name), host_tensor::from(mask, dims{1, 1, 1, context + 1})}});
    for (std::int64_t i = 0; i < config_.decoder_layers; ++i) {
        const auto at = static_cast<std::size_t>(1 + 2 * i);
        decoder.write_input(cache_key_name(i), 2, position, out[at]);
        decoder.write_input(cache_value_name(i), 2, position, out[at + 1]);
    }
    return out.front().to_f32();
}

ANVIL_INLINE std::int32_t whisper::language_id(std::string_view name) const {
    const std::string token = name.starts_with("<|") ? std::string(name) : "<|" + std::string(name) + "|>";
    const auto found = config_.language_ids.find(token);
    if (found != config_.language_ids.end()) return found->second;
    std::string known;
    for (const auto& [code, id] : config_.language_ids)
        known += (known.empty() ? "" : ", ") + code.substr(2, code.size() - 4);
    throw error(anvil::detail::message("whisper: unknown language '", name,
                                       "' (generation_config.json's lang_to_id has ",
                                       known.empty() ? std::string("none") : known, ")"));
}

ANVIL_INLINE std::vector<std::int32_t> whisper::prompt(const transcribe_options& options) const {
    std::vector<std::int32_t> ids{config_.decoder_start_token_id};
    if (config_.multilingual) {
        if (options.language.empty())
            throw error("whisper: prompt() needs a language; transcribe() detects it when none is given");
        ids.push_back(language_id(options.language));
        const auto task = config_.task_ids.find(options.task);
        if (task == config_.task_ids.end()) {
            throw error(
                anvil::detail::message("whisper: unknown task '", options.task,
                                       "' (generation_config.json's task_to_id: transcribe, translate)"));
        }
        ids.push_back(task->second);
    } else if (!options.language.empty() && options.language != "en" && options.language != "<|en|>") {
        throw error(anvil::detail::message("whisper: this model is English-only (is_multilingual false): ",
                                           "language '", options.language, "' is not available"));
    } else if (options.task != "transcribe") {
        throw error(
            anvil::detail::message("whisper: this model is English-only (is_multilingual false): task '",
                                   options.task, "' is not available"));
    }
    if (!options.timestamps) {
        if (!config_.no_timestamps_token_id) {
            throw error(
                "whisper: generation_config.json has no no_timestamps_token_id to start the prompt with");
        }
        ids.push_back(*config_.no_timestamps_token_id);
    }
    return ids;
}

ANVIL_INLINE whisper::detected_language whisper::detect_language() {
    if (config_.language_ids.empty()) throw error("whisper: generation_config.json has no lang_to_id");
    detected_language detected;
    detected.start_logits = step(config_.decoder_start_token_id, 0);
    const std::vector<float>& logits = detected.start_logits;
    std::int32_t best = config_.language_ids.begin()->second;
    for (const auto& [code, id] : config_.language_ids) {
        const float score = logits[static_cast<std::size_t>(id)];
        const float current = logits[static_cast<std::size_t>(best)];
        if (score > current || (score == current && id < best)) best = id;
    }
    detected.id = best;
    return detected;
}

ANVIL_INLINE transcribed_window whisper::decode_window(const std::vector<std::int32_t>& prompt,
                                                       const transcribe_options& options,
                                                       const std::vector<float>* start_logits) {
    transcribed_window window;
    window.prompt = prompt;
    const auto prompt_length = static_cast<std::int64_t>(prompt.size());
    const std::int64_t room = config_.max_length - prompt_length;
    if (room < 1) throw error("whisper: the prompt fills generation_config.json's max_length");
    const std::int64_t limit = options.max_new_tokens > 0 ? std::min(options.max_new_tokens, room) : room;
    std::vector<float> logits;
    std::int64_t fed = 0;
    if (start_logits) {  // the start token is at position 0 already
        logits = *start_logits;
        fed = 1;
    }
    for (std::int64_t t = fed; t < prompt_length; ++t)
        logits = step(prompt[static_cast<std::size_t>(t)], t);
    for (;;) {
        recipe_detail::process_whisper_logits(config_, window.generated, options.timestamps, logits);
        const auto next =
            static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        if (next == config_.eos_token_id) {
            window.stop_reason = "eos";
            break;
        }
        window.generated.push_back(next);
        if (options.on_token) options.on_token(next);
        const auto count = static_cast<std::int64_t>(window.generated.size());
        if (count >= limit) {
            window.stop_reason = count >= room ? "max_length" : "max_new_tokens";
            break;
        }
        logits = step(next, prompt_length + count - 1);
    }
    return window;
}

ANVIL_INLINE transcription whisper::transcribe_features(const host_tensor& features,
                                                        const transcribe_options& options) {
    const dims shape = features.shape();
    if (shape.rank() != 2 || shape[0] != config_.mel_bins || shape[1] < 1) {
        throw shape_error(anvil::detail::message("whisper: expected features [", config_.mel_bins,
                                                 ", frames] (num_mel_bins), got ", shape));
    }
    if (features.type() != dtype::f32) {
        throw type_error(
            anvil::detail::message("whisper: expected f32 features, got ", dtype_name(features.type())));
    }
    const std::int64_t frames = shape[1], window_frames = config_.frames();
    transcription result;
    // The language, when none is given, is detected once, on the first window (as generate does).
    transcribe_options chosen = options;
    for (std::int64_t start = 0; start < frames; start += window_frames) {
        start_window(window(features, start).reshaped(dims{1, config_.mel_bins, window_frames}));
        std::optional<detected_language> detected;
        if (config_.multilingual && chosen.language.empty()) {
            detected = detect_language();
            for (const auto& [code, id] : config_.language_ids)
                if (id == detected->id) chosen.language = code;
        }
        if (config_.multilingual)
            result.language =
                chosen.language.starts_with("<|") ? chosen.language : "<|" + chosen.language + "|>";
        transcribed_window decoded =
            decode_window(prompt(chosen), chosen, detected ? &detected->start_logits : nullptr);
        result.ids.insert(result.ids.end(), decoded.generated.begin(), decoded.generated.end());
        result.windows.push_back(std::move(decoded));
    }
    if (tokenizer_)
        for (const auto& window : result.windows)
            result.text += text(window.generated);
    return result;
}

ANVIL_INLINE transcription whisper::transcribe(std::span<const float> samples,
                                               const transcribe_options& options) {
    return transcribe_features(features(samples), options);
}

ANVIL_INLINE transcription whisper::transcribe(const audio& speech, const transcribe_options& options) {
    if (speech.sample_rate != 16000) {
        throw error(anvil::detail::message("whisper: the audio is at ", speech.sample_rate,
                                           " Hz; Whisper takes 16000 Hz (resample it first: anvil does not "
                                           "resample silently)"));
    }
    return transcribe(std::span<const float>(speech.samples), options);
}

}  // namespace anvil::models
