// anvil: BERT's encoder stack — the config read from config.json and the weight names of
// BertModel's `encoder.layer.{i}` — built from the shared blocks. (Embeddings, pooling, tokenisation and the
// sentence-encoder and cross-encoder heads build on this.)
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "anvil/core/json.hpp"
#include "anvil/models/blocks.hpp"

namespace anvil::models {

struct bert_config {
    std::int64_t layers = 12;          // num_hidden_layers
    std::int64_t hidden = 768;         // hidden_size
    std::int64_t heads = 12;           // num_attention_heads
    std::int64_t intermediate = 3072;  // intermediate_size
    double layer_norm_eps = 1e-12;
    activation act = activation::gelu;  // hidden_act

    [[nodiscard]] static bert_config from_json(const json::value& config, std::string_view source) {
        bert_config c;
        if (!config.is_object())
            throw format_error(anvil::detail::message(source, ": expected a JSON object"));
        auto integer = [&](const char* key, std::int64_t fallback) {
            const json::value* v = config.find(key);
            if (v == nullptr) return fallback;
            if (!v->is_integer() || v->as_int() < 1 || v->as_int() > (std::int64_t{1} << 31)) {
                throw format_error(
                    anvil::detail::message(source, ": '", key, "' must be a positive integer"));
            }
            return v->as_int();
        };
        c.layers = integer("num_hidden_layers", c.layers);
        c.hidden = integer("hidden_size", c.hidden);
        c.heads = integer("num_attention_heads", c.heads);
        c.intermediate = integer("intermediate_size", c.intermediate);
        if (const json::value* eps = config.find("layer_norm_eps"); eps != nullptr) {
            if (!eps->is_number() || !(eps->as_double() > 0.0)) {
                throw format_error(
                    anvil::detail::message(source, ": 'layer_norm_eps' must be a positive number"));
            }
            c.layer_norm_eps = eps->as_double();
        }
        if (const json::value* act = config.find("hidden_act"); act != nullptr) {
            if (!act->is_string())
                throw format_error(anvil::detail::message(source, ": 'hidden_act' must be a string"));
            c.act = parse_activation(act->as_string());
        }
        if (c.hidden % c.heads != 0) {
            throw format_error(anvil::detail::message(source, ": hidden_size ", c.hidden,
                                                      " is not a multiple of num_attention_heads ", c.heads));
        }
        return c;
    }
};

// Layer i of BertModel's encoder: `<prefix>encoder.layer.{i}.attention.self.query.weight`, ...
[[nodiscard]] inline post_norm_encoder_layer load_bert_layer(weight_loader& weights, const bert_config& c,
                                                             std::int64_t index,
                                                             const std::string& prefix = "") {
    const std::string p = prefix + "encoder.layer." + std::to_string(index) + ".";
    post_norm_encoder_layer layer;
    layer.attention.query = load_linear(weights, p + "attention.self.query", c.hidden, c.hidden);
    layer.attention.key = load_linear(weights, p + "attention.self.key", c.hidden, c.hidden);
    layer.attention.value = load_linear(weights, p + "attention.self.value", c.hidden, c.hidden);
    layer.attention.output = load_linear(weights, p + "attention.output.dense", c.hidden, c.hidden);
    layer.attention.heads = c.heads;
    layer.attention.kv_heads = c.heads;
    layer.attention.head_dim = c.hidden / c.heads;
    layer.attention_norm =
        load_layer_norm(weights, p + "attention.output.LayerNorm", c.hidden, c.layer_norm_eps);
    layer.mlp.up = load_linear(weights, p + "intermediate.dense", c.intermediate, c.hidden);
    layer.mlp.down = load_linear(weights, p + "output.dense", c.hidden, c.intermediate);
    layer.mlp.act = c.act;
    layer.output_norm = load_layer_norm(weights, p + "output.LayerNorm", c.hidden, c.layer_norm_eps);
    return layer;
}

// The encoder stack over hidden states [B, S, hidden] with a padding mask [B, S] (1 = token, 0 = padding),
// turned into an additive mask broadcast over heads and queries. Hugging Face adds float32's lowest value;
// fp16's lowest (-65504) gives the same softmax in fp32 (either way exp underflows to exactly 0) and stays
// finite in fp16, where float32's lowest would round to -inf and 0 * -inf to NaN.
[[nodiscard]] inline tensor<float> bert_encoder(const std::vector<post_norm_encoder_layer>& layers,
                                                const tensor<float>& hidden_states,
                                                const tensor<float>& padding_mask) {
    const dims& m = padding_mask.shape();
    const auto additive =
        reshape((1.0f - padding_mask) * -65504.0f, std::vector<std::int64_t>{m[0], 1, 1, m[1]});
    tensor<float> h = hidden_states;
    for (const auto& layer : layers)
        h = apply(layer, h, additive);
    return h;
}

}  // namespace anvil::models
