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

#include "anvil/core/error.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/core/json.hpp"
#include "anvil/expr/expr.hpp"
#include "anvil/io/tokenizer.hpp"
#include "anvil/models/blocks.hpp"
#include "anvil/models/compiled_shapes.hpp"
#include "anvil/models/config.hpp"
#include "anvil/models/text_encoder.hpp"

namespace anvil::models {

namespace detail {

// The *ForSequenceClassification head of each family, on the first token's hidden state:
//   BERT        bert.pooler.dense + tanh, classifier
//   RoBERTa,    classifier.dense + tanh, classifier.out_proj  (RobertaClassificationHead,
//   XLM-R, MPNet                                                 MPNetClassificationHead)
//   DistilBERT  pre_classifier + ReLU, classifier
struct classification_head {
    std::string first, second;  // the two linear layers
    bool tanh = true;           // the activation between them: tanh, else ReLU
};

[[nodiscard]] inline classification_head head_for(text_family family, const std::string& prefix) {
    switch (family) {
        case text_family::bert:
            return {prefix + "pooler.dense", "classifier", true};
        case text_family::roberta:
        case text_family::xlm_roberta:
        case text_family::mpnet:
            return {"classifier.dense", "classifier.out_proj", true};
        case text_family::distilbert:
            return {"pre_classifier", "classifier", false};
    }
    throw error("head_for: unknown text family");
}

inline void check_architecture(const config_reader& config, text_family family) {
    const json::value* list = config.find("architectures");
    if (list == nullptr || !list->is_array() || list->as_array().empty()) return;
    const json::value& first = list->as_array().front();
    if (!first.is_string()) return;
    const std::string& name = first.as_string();
    const bool fits = (family == text_family::bert && name == "BertForSequenceClassification") ||
                      (family == text_family::roberta && name == "RobertaForSequenceClassification") ||
                      (family == text_family::xlm_roberta && name == "XLMRobertaForSequenceClassification") ||
                      (family == text_family::mpnet && name == "MPNetForSequenceClassification") ||
                      (family == text_family::distilbert && name == "DistilBertForSequenceClassification");
    if (!fits) {
        throw unsupported_error(
            anvil::detail::message(config.source(), ": architecture '", name,
                                   "' is not a supported cross-encoder (BertForSequenceClassification, "
                                   "RobertaForSequenceClassification, XLMRobertaForSequenceClassification, "
                                   "MPNetForSequenceClassification, DistilBertForSequenceClassification)"));
    }
}

}  // namespace detail

class cross_encoder {
public:
    [[nodiscard]] static cross_encoder load(const std::filesystem::path& folder,
                                            const load_options& options = {}) {
        cross_encoder result(text_encoder::load(folder, options));
        const auto config_path = folder / "config.json";
        const json::value document = config_reader::read_file(config_path);
        const config_reader config(document, config_path.string());
        const text_family family = result.encoder_.config().family;
        detail::check_architecture(config, family);
        const auto head = detail::head_for(family, result.encoder_.prefix());
        const std::string out_name = head.second + ".weight";
        const tensor_view* out = result.encoder_.weights().find(out_name);
        if (out == nullptr || out->rank() != 2) {
            throw format_error(anvil::detail::message(
                result.encoder_.weights().path().string(), ": the classification head's tensor '", out_name,
                out == nullptr ? "' is missing" : "' is not a matrix [labels, hidden]"));
        }
        const std::int64_t labels = out->shape()[0];
        const std::int64_t hidden = result.encoder_.config().stack.hidden;
        result.labels_ = config.labels(labels);
        result.encoder_.set_head([head, labels, hidden](weight_loader& weights, const tensor<float>& states) {
            const auto first = load_linear(weights, head.first, hidden, hidden);
            const auto second = load_linear(weights, head.second, labels, hidden);
            const std::int64_t rows = states.shape()[0];
            const tensor<float> token =
                reshape(slice(states, 1, 0, 1), std::vector<std::int64_t>{rows, hidden});
            const tensor<float> pooled = apply(first, token);
            return apply(second, head.tanh ? anvil::tanh(pooled) : relu(pooled));
        });
        return result;
    }

    // One score per pair: the first logit.
    [[nodiscard]] std::vector<float> predict(std::span<const std::pair<std::string, std::string>> pairs,
                                             std::size_t batch_size = 32) {
        std::vector<std::vector<std::int32_t>> ids, types;
        tokenize(pairs, ids, types);
        return predict_ids(ids, types, batch_size);
    }

    [[nodiscard]] std::vector<float> predict_ids(std::span<const std::vector<std::int32_t>> ids,
                                                 std::span<const std::vector<std::int32_t>> type_ids = {},
                                                 std::size_t batch_size = 32) {
        const host_tensor logits = logits_ids(ids, type_ids, batch_size);
        const auto values = logits.values<float>();
        const std::size_t labels = labels_.size();
        std::vector<float> scores(ids.size());
        for (std::size_t i = 0; i < scores.size(); ++i)
            scores[i] = values[i * labels];
        return scores;
    }

    // The head's logits, f32 [N, num_labels], in the caller's order.
    [[nodiscard]] host_tensor logits_ids(std::span<const std::vector<std::int32_t>> ids,
                                         std::span<const std::vector<std::int32_t>> type_ids = {},
                                         std::size_t batch_size = 32) {
        const auto labels = static_cast<std::int64_t>(labels_.size());
        host_tensor result(dtype::f32, dims{static_cast<std::int64_t>(ids.size()), labels});
        encoder_.run(ids, type_ids, batch_size, [&](const token_batch& batch, const host_tensor& logits) {
            const float* rows = logits.values<float>().data();
            float* out = result.values<float>().data();
            const auto width = static_cast<std::size_t>(labels);
            for (std::size_t r = 0; r < batch.items.size(); ++r)
                std::copy(rows + r * width, rows + (r + 1) * width, out + batch.items[r] * width);
        });
        return result;
    }

    [[nodiscard]] host_tensor logits(std::span<const std::pair<std::string, std::string>> pairs,
                                     std::size_t batch_size = 32) {
        std::vector<std::vector<std::int32_t>> ids, types;
        tokenize(pairs, ids, types);
        return logits_ids(ids, types, batch_size);
    }

    // id2label's names (LABEL_0.. where config.json has none), one per logit.
    [[nodiscard]] const std::vector<std::string>& labels() const noexcept { return labels_; }
    [[nodiscard]] const tokenizer& text_tokenizer() const { return encoder_.text_tokenizer(); }
    [[nodiscard]] std::size_t compiled_programs() const { return encoder_.compiled_programs(); }
    [[nodiscard]] const text_encoder_config& config() const noexcept { return encoder_.config(); }

private:
    explicit cross_encoder(text_encoder encoder) : encoder_(std::move(encoder)) {}

    void tokenize(std::span<const std::pair<std::string, std::string>> pairs,
                  std::vector<std::vector<std::int32_t>>& ids,
                  std::vector<std::vector<std::int32_t>>& types) const {
        if (pairs.empty()) return;
        const tokenizer& words = encoder_.text_tokenizer();
        const auto options = encoder_.tokenizer_options();
        for (const auto& [first, second] : pairs) {
            encoding e = words.encode_pair(first, second, options);
            ids.push_back(std::move(e.ids));
            types.push_back(std::move(e.type_ids));
            if (types.back().size() != ids.back().size()) types.back().assign(ids.back().size(), 0);
        }
    }

    text_encoder encoder_;
    std::vector<std::string> labels_;
};

}  // namespace anvil::models
