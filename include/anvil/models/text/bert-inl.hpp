// anvil: bert's definitions (see bert.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/core/masking.hpp"
#include "anvil/expr/expr.hpp"
#include "anvil/models/common/config.hpp"
#include "anvil/models/text/bert.hpp"

namespace anvil::models {

ANVIL_INLINE bert_config bert_config::from_json(const json::value& document, std::string_view source) {
    const config_reader config(document, std::string(source));
    bert_config c;
    c.layers = config.integer("num_hidden_layers", c.layers);
    c.hidden = config.integer("hidden_size", c.hidden);
    c.heads = config.integer("num_attention_heads", c.heads);
    c.intermediate = config.integer("intermediate_size", c.intermediate);
    c.layer_norm_eps = config.positive_number("layer_norm_eps", c.layer_norm_eps);
    c.act = parse_activation(config.string("hidden_act", "gelu"));
    c.hidden_dropout = config.probability("hidden_dropout_prob", c.hidden_dropout);
    c.attention_dropout = config.probability("attention_probs_dropout_prob", c.attention_dropout);
    c.attention_output_dropout = c.hidden_dropout;
    if (c.hidden % c.heads != 0) {
        throw format_error(anvil::detail::message(source, ": hidden_size ", c.hidden,
                                                  " is not a multiple of num_attention_heads ", c.heads));
    }
    return c;
}

ANVIL_INLINE encoder_layer_names bert_layer_names() {
    return {"encoder.layer.",       "attention.self.query",   "attention.self.key",
            "attention.self.value", "attention.output.dense", "attention.output.LayerNorm",
            "intermediate.dense",   "output.dense",           "output.LayerNorm"};
}

ANVIL_INLINE post_norm_encoder_layer load_encoder_layer(weight_loader& weights, const bert_config& c,
                                                        const encoder_layer_names& names, std::int64_t index,
                                                        const std::string& prefix) {
    const std::string p = prefix + names.layer + std::to_string(index) + ".";
    post_norm_encoder_layer layer;
    layer.attention.query = load_linear(weights, p + names.query, c.hidden, c.hidden);
    layer.attention.key = load_linear(weights, p + names.key, c.hidden, c.hidden);
    layer.attention.value = load_linear(weights, p + names.value, c.hidden, c.hidden);
    layer.attention.output = load_linear(weights, p + names.output, c.hidden, c.hidden);
    layer.attention.heads = c.heads;
    layer.attention.kv_heads = c.heads;
    layer.attention.head_dim = c.hidden / c.heads;
    layer.attention.probability_dropout = load_dropout(weights, c.attention_dropout);
    layer.attention.output_dropout = load_dropout(weights, c.attention_output_dropout);
    layer.attention_norm = load_layer_norm(weights, p + names.attention_norm, c.hidden, c.layer_norm_eps);
    layer.mlp.up = load_linear(weights, p + names.up, c.intermediate, c.hidden);
    layer.mlp.down = load_linear(weights, p + names.down, c.hidden, c.intermediate);
    layer.mlp.act = c.act;
    layer.mlp.output_dropout = load_dropout(weights, c.hidden_dropout);
    layer.output_norm = load_layer_norm(weights, p + names.output_norm, c.hidden, c.layer_norm_eps);
    return layer;
}

ANVIL_INLINE post_norm_encoder_layer load_bert_layer(weight_loader& weights, const bert_config& c,
                                                     std::int64_t index, const std::string& prefix) {
    return load_encoder_layer(weights, c, bert_layer_names(), index, prefix);
}

ANVIL_INLINE tensor<float> additive_padding_mask(const tensor<float>& padding_mask) {
    const dims& m = padding_mask.shape();
    if (m.rank() != 2) {
        throw shape_error(
            anvil::detail::message("padding mask: expected [batch, sequence], got ", padding_mask.shape()));
    }
    return reshape((1.0f - padding_mask) * masked_score, std::vector<std::int64_t>{m[0], 1, 1, m[1]});
}

ANVIL_INLINE tensor<float> encoder_stack(const std::vector<post_norm_encoder_layer>& layers,
                                         const tensor<float>& hidden_states,
                                         const tensor<float>& additive_mask) {
    tensor<float> h = hidden_states;
    for (const auto& layer : layers)
        h = apply(layer, h, additive_mask);
    return h;
}

ANVIL_INLINE tensor<float> bert_encoder(const std::vector<post_norm_encoder_layer>& layers,
                                        const tensor<float>& hidden_states,
                                        const tensor<float>& padding_mask) {
    return encoder_stack(layers, hidden_states, additive_padding_mask(padding_mask));
}

}  // namespace anvil::models
