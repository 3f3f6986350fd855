// anvil: the post-norm encoder stack of BERT and its relatives — the config read from config.json, the table
// of a layer's weight names, and the stack — built from the shared blocks. text_encoder.hpp adds the
// embeddings and the per-family tables; sentence_encoder.hpp and cross_encoder.hpp the pooling and the heads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "anvil/core/json.hpp"
#include "anvil/models/config.hpp"

// After config.hpp, whose unqualified detail::message would otherwise find blocks.hpp's
// anvil::models::detail.
#include "anvil/models/blocks.hpp"

namespace anvil::models {

struct bert_config {
    std::int64_t layers = 12;          // num_hidden_layers
    std::int64_t hidden = 768;         // hidden_size
    std::int64_t heads = 12;           // num_attention_heads
    std::int64_t intermediate = 3072;  // intermediate_size
    double layer_norm_eps = 1e-12;
    activation act = activation::gelu;  // hidden_act

    [[nodiscard]] static bert_config from_json(const json::value& document, std::string_view source) {
        const config_reader config(document, std::string(source));
        bert_config c;
        c.layers = config.integer("num_hidden_layers", c.layers);
        c.hidden = config.integer("hidden_size", c.hidden);
        c.heads = config.integer("num_attention_heads", c.heads);
        c.intermediate = config.integer("intermediate_size", c.intermediate);
        c.layer_norm_eps = config.positive_number("layer_norm_eps", c.layer_norm_eps);
        c.act = parse_activation(config.string("hidden_act", "gelu"));
        if (c.hidden % c.heads != 0) {
            throw format_error(anvil::detail::message(source, ": hidden_size ", c.hidden,
                                                      " is not a multiple of num_attention_heads ", c.heads));
        }
        return c;
    }
};

// Where one family keeps a post-norm encoder layer's tensors: layer i's are `<prefix><layer><i>.<name>`. A
// family (BERT, RoBERTa, MPNet, DistilBERT) differs only by this table; each name is a Linear or LayerNorm
// module (".weight"/".bias" appended).
struct encoder_layer_names {
    std::string layer;  // "encoder.layer."
    std::string query, key, value, output, attention_norm, up, down, output_norm;
};

// BertModel's (and RobertaModel's, XLMRobertaModel's) names.
[[nodiscard]] inline encoder_layer_names bert_layer_names() {
    return {"encoder.layer.",       "attention.self.query",   "attention.self.key",
            "attention.self.value", "attention.output.dense", "attention.output.LayerNorm",
            "intermediate.dense",   "output.dense",           "output.LayerNorm"};
}

// Layer `index` of an encoder whose tensors `names` gives, each shape checked against the config.
[[nodiscard]] inline post_norm_encoder_layer load_encoder_layer(weight_loader& weights, const bert_config& c,
                                                                const encoder_layer_names& names,
                                                                std::int64_t index,
                                                                const std::string& prefix = "") {
    const std::string p = prefix + names.layer + std::to_string(index) + ".";
    post_norm_encoder_layer layer;
    layer.attention.query = load_linear(weights, p + names.query, c.hidden, c.hidden);
    layer.attention.key = load_linear(weights, p + names.key, c.hidden, c.hidden);
    layer.attention.value = load_linear(weights, p + names.value, c.hidden, c.hidden);
    layer.attention.output = load_linear(weights, p + names.output, c.hidden, c.hidden);
    layer.attention.heads = c.heads;
    layer.attention.kv_heads = c.heads;
    layer.attention.head_dim = c.hidden / c.heads;
    layer.attention_norm = load_layer_norm(weights, p + names.attention_norm, c.hidden, c.layer_norm_eps);
    layer.mlp.up = load_linear(weights, p + names.up, c.intermediate, c.hidden);
    layer.mlp.down = load_linear(weights, p + names.down, c.hidden, c.intermediate);
    layer.mlp.act = c.act;
    layer.output_norm = load_layer_norm(weights, p + names.output_norm, c.hidden, c.layer_norm_eps);
    return layer;
}

// Layer i of BertModel's encoder: `<prefix>encoder.layer.{i}.attention.self.query.weight`, ...
[[nodiscard]] inline post_norm_encoder_layer load_bert_layer(weight_loader& weights, const bert_config& c,
                                                             std::int64_t index,
                                                             const std::string& prefix = "") {
    return load_encoder_layer(weights, c, bert_layer_names(), index, prefix);
}

// A padding mask [B, S] (1 = token, 0 = padding) as the additive mask [B, 1, 1, S] that broadcasts over heads
// and queries. Hugging Face adds float32's lowest value; fp16's lowest (-65504) gives the same softmax in
// fp32 (either way exp underflows to exactly 0) and stays finite in fp16, where float32's lowest would round
// to -inf and 0 * -inf to NaN.
[[nodiscard]] inline tensor<float> additive_padding_mask(const tensor<float>& padding_mask) {
    const dims& m = padding_mask.shape();
    if (m.rank() != 2) {
        throw shape_error(
            anvil::detail::message("padding mask: expected [batch, sequence], got ", padding_mask.shape()));
    }
    return reshape((1.0f - padding_mask) * -65504.0f, std::vector<std::int64_t>{m[0], 1, 1, m[1]});
}

// The encoder stack over hidden states [B, S, hidden] with an additive mask that broadcasts to the scores
// [B, heads, S, S] (padding, plus MPNet's relative position bias).
[[nodiscard]] inline tensor<float> encoder_stack(const std::vector<post_norm_encoder_layer>& layers,
                                                 const tensor<float>& hidden_states,
                                                 const tensor<float>& additive_mask) {
    tensor<float> h = hidden_states;
    for (const auto& layer : layers)
        h = apply(layer, h, additive_mask);
    return h;
}

// The same with a padding mask [B, S] (1 = token, 0 = padding).
[[nodiscard]] inline tensor<float> bert_encoder(const std::vector<post_norm_encoder_layer>& layers,
                                                const tensor<float>& hidden_states,
                                                const tensor<float>& padding_mask) {
    return encoder_stack(layers, hidden_states, additive_padding_mask(padding_mask));
}

}  // namespace anvil::models
