// anvil: cross-encoder rerankers (ms-marco-MiniLM, bge-reranker, ...): a text encoder (text_encoder.hpp) with
// its family's sequence-classification head on the first token, run on (query, passage) pairs. The score is
// the first logit, as sentence-transformers' CrossEncoder.predict gives it without an activation.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "anvil/compilation.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/io/tokenizer.hpp"
#include "anvil/models/common/compiled_shapes.hpp"
#include "anvil/models/common/config.hpp"
#include "anvil/models/text/text_encoder.hpp"

namespace anvil::models {

namespace recipe_detail {

// The *ForSequenceClassification head of each family, on the first token's hidden state:
//   BERT        bert.pooler.dense + tanh, classifier
//   RoBERTa,    classifier.dense + tanh, classifier.out_proj  (RobertaClassificationHead,
//   XLM-R, MPNet                                                 MPNetClassificationHead)
//   DistilBERT  pre_classifier + ReLU, classifier
struct classification_head {
    std::string first, second;  // the two linear layers
    bool tanh = true;           // the activation between them: tanh, else ReLU
    // Dropout (training only) on token 0 before the first layer (RoBERTa's and MPNet's heads) and on the
    // activation's result before the second (every family).
    double token_dropout = 0.0;
    double pooled_dropout = 0.0;
};

[[nodiscard]] classification_head head_for(const text_encoder_config& c, const std::string& prefix);

// The head on the hidden states [rows, length, hidden]: its first linear layer on token 0, the activation,
// the second -> logits [rows, labels]. Loads its weights with `weights`.
[[nodiscard]] tensor<float> classification_logits(weight_loader& weights, const classification_head& head,
                                                  std::int64_t labels, const tensor<float>& states);

void check_architecture(const config_reader& config, text_family family);

}  // namespace recipe_detail

class cross_encoder {
public:
    [[nodiscard]] static cross_encoder load(const std::filesystem::path& folder,
                                            const load_options& options = {});

    // One score per pair: the first logit.
    [[nodiscard]] std::vector<float> predict(std::span<const std::pair<std::string, std::string>> pairs,
                                             std::size_t batch_size = 32);

    [[nodiscard]] std::vector<float> predict_ids(std::span<const std::vector<std::int32_t>> ids,
                                                 std::span<const std::vector<std::int32_t>> type_ids = {},
                                                 std::size_t batch_size = 32);

    // The head's logits, f32 [N, num_labels], in the caller's order.
    [[nodiscard]] host_tensor logits_ids(std::span<const std::vector<std::int32_t>> ids,
                                         std::span<const std::vector<std::int32_t>> type_ids = {},
                                         std::size_t batch_size = 32);

    [[nodiscard]] host_tensor logits(std::span<const std::pair<std::string, std::string>> pairs,
                                     std::size_t batch_size = 32);

    // id2label's names (LABEL_0.. where config.json has none), one per logit.
    [[nodiscard]] const std::vector<std::string>& labels() const noexcept { return labels_; }
    [[nodiscard]] const tokenizer& text_tokenizer() const { return encoder_.text_tokenizer(); }
    [[nodiscard]] std::size_t compiled_programs() const { return encoder_.compiled_programs(); }
    [[nodiscard]] const text_encoder_config& config() const noexcept { return encoder_.config(); }
    [[nodiscard]] const text_encoder& encoder() const noexcept { return encoder_; }

    // The graph of one right-padded pair of `length` tokens (inputs input_ids, token_type_ids where the
    // family has them, attention_mask) -> its logits f32 [1, num_labels], not compiled (anvil export).
    [[nodiscard]] value build_graph(graph& g, std::int64_t length) const {
        return encoder_.build_graph(g, 1, length, text_positions::baked_positions).at(0);
    }

private:
    explicit cross_encoder(text_encoder encoder) : encoder_(std::move(encoder)) {}

    void tokenize(std::span<const std::pair<std::string, std::string>> pairs,
                  std::vector<std::vector<std::int32_t>>& ids,
                  std::vector<std::vector<std::int32_t>>& types) const;

    text_encoder encoder_;
    std::vector<std::string> labels_;
};

}  // namespace anvil::models

#if ANVIL_DEFINITIONS
#include "anvil/models/text/cross_encoder-inl.hpp"
#endif
