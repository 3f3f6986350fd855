// anvil: the post-norm encoder stack of BERT and its relatives — the config read from config.json, the table
// of a layer's weight names, and the stack — built from the shared blocks. text_encoder.hpp adds the
// embeddings and the per-family tables; sentence_encoder.hpp and cross_encoder.hpp the pooling and the heads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "anvil/compilation.hpp"
#include "anvil/core/json_value.hpp"
#include "anvil/models/common/blocks.hpp"

namespace anvil::models {

struct bert_config {
    std::int64_t layers = 12;          // num_hidden_layers
    std::int64_t hidden = 768;         // hidden_size
    std::int64_t heads = 12;           // num_attention_heads
    std::int64_t intermediate = 3072;  // intermediate_size
    double layer_norm_eps = 1e-12;
    activation act = activation::gelu;  // hidden_act
    // Dropout, which training applies (inference ignores it): after the embeddings' norm and on each
    // block's output (hidden_dropout_prob), on the attention probabilities (attention_probs_dropout_prob),
    // and on the attention's output projection (hidden_dropout_prob; DistilBERT has none there).
    double hidden_dropout = 0.1;
    double attention_dropout = 0.1;
    double attention_output_dropout = 0.1;

    [[nodiscard]] static bert_config from_json(const json::value& document, std::string_view source);
};

// Where one family keeps a post-norm encoder layer's tensors: layer i's are `<prefix><layer><i>.<name>`. A
// family (BERT, RoBERTa, MPNet, DistilBERT) differs only by this table; each name is a Linear or LayerNorm
// module (".weight"/".bias" appended).
struct encoder_layer_names {
    std::string layer;  // "encoder.layer."
    std::string query, key, value, output, attention_norm, up, down, output_norm;
};

// BertModel's (and RobertaModel's, XLMRobertaModel's) names.
[[nodiscard]] encoder_layer_names bert_layer_names();

// Layer `index` of an encoder whose tensors `names` gives, each shape checked against the config.
[[nodiscard]] post_norm_encoder_layer load_encoder_layer(weight_loader& weights, const bert_config& c,
                                                         const encoder_layer_names& names, std::int64_t index,
                                                         const std::string& prefix = "");

// Layer i of BertModel's encoder: `<prefix>encoder.layer.{i}.attention.self.query.weight`, ...
[[nodiscard]] post_norm_encoder_layer load_bert_layer(weight_loader& weights, const bert_config& c,
                                                      std::int64_t index, const std::string& prefix = "");

// A padding mask [B, S] (1 = token, 0 = padding) as the additive mask [B, 1, 1, S] that broadcasts over heads
// and queries, with anvil::masked_score (-1e4, core/masking.hpp) at the padding. Hugging Face adds float32's
// lowest value; -1e4 gives the same softmax in fp32 (either way exp underflows to exactly 0) and keeps
// score + mask finite in fp16, where float32's lowest would round to -inf and 0 * -inf to NaN.
[[nodiscard]] tensor<float> additive_padding_mask(const tensor<float>& padding_mask);

// The encoder stack over hidden states [B, S, hidden] with an additive mask that broadcasts to the scores
// [B, heads, S, S] (padding, plus MPNet's relative position bias).
[[nodiscard]] tensor<float> encoder_stack(const std::vector<post_norm_encoder_layer>& layers,
                                          const tensor<float>& hidden_states,
                                          const tensor<float>& additive_mask);

// The same with a padding mask [B, S] (1 = token, 0 = padding).
[[nodiscard]] tensor<float> bert_encoder(const std::vector<post_norm_encoder_layer>& layers,
                                         const tensor<float>& hidden_states,
                                         const tensor<float>& padding_mask);

}  // namespace anvil::models

#if ANVIL_DEFINITIONS
#include "anvil/models/text/bert-inl.hpp"
#endif
