// anvil: cross_encoder's definitions (see cross_encoder.hpp; compilation.hpp says when this file is
// compiled).
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/core/json.hpp"
#include "anvil/expr/expr.hpp"
#include "anvil/io/checkpoint.hpp"
#include "anvil/models/common/blocks.hpp"
#include "anvil/models/text/cross_encoder.hpp"

namespace anvil::models::recipe_detail {

ANVIL_INLINE classification_head head_for(const text_encoder_config& c, const std::string& prefix) {
    const double p = c.classifier_dropout;
    switch (c.family) {
        case text_family::bert:
            return {prefix + "pooler.dense", "classifier", true, 0.0, p};
        case text_family::roberta:
        case text_family::xlm_roberta:
        case text_family::mpnet:
            return {"classifier.dense", "classifier.out_proj", true, p, p};
        case text_family::distilbert:
            return {"pre_classifier", "classifier", false, 0.0, p};
    }
    throw error("head_for: unknown text family");
}

ANVIL_INLINE tensor<float> classification_logits(weight_loader& weights, const classification_head& head,
                                                 std::int64_t labels, const tensor<float>& states) {
    const std::int64_t rows = states.shape()[0];
    const std::int64_t hidden = states.shape()[2];
    const auto first = load_linear(weights, head.first, hidden, hidden);
    const auto second = load_linear(weights, head.second, labels, hidden);
    const tensor<float> token = reshape(slice(states, 1, 0, 1), std::vector<std::int64_t>{rows, hidden});
    const tensor<float> pooled = apply(first, apply(load_dropout(weights, head.token_dropout), token));
    return apply(second, apply(load_dropout(weights, head.pooled_dropout),
                               head.tanh ? anvil::tanh(pooled) : relu(pooled)));
}

ANVIL_INLINE void check_architecture(const config_reader& config, text_family family) {
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

}  // namespace anvil::models::recipe_detail

namespace anvil::models {

ANVIL_INLINE cross_encoder cross_encoder::load(const std::filesystem::path& folder,
                                               const load_options& options) {
    cross_encoder result(text_encoder::load(folder, options));
    const auto config_path = folder / "config.json";
    const json::value document = config_reader::read_file(config_path);
    const config_reader config(document, config_path.string());
    const text_family family = result.encoder_.config().family;
    recipe_detail::check_architecture(config, family);
    const auto head = recipe_detail::head_for(result.encoder_.config(), result.encoder_.prefix());
    const std::string out_name = head.second + ".weight";
    const tensor_view* out = result.encoder_.weights().find(out_name);
    if (out == nullptr || out->rank() != 2) {
        throw format_error(anvil::detail::message(
            result.encoder_.weights().path().string(), ": the classification head's tensor '", out_name,
            out == nullptr ? "' is missing" : "' is not a matrix [labels, hidden]"));
    }
    const std::int64_t labels = out->shape()[0];
    result.labels_ = config.labels(labels);
    result.encoder_.set_head([head, labels](weight_loader& weights, const tensor<float>& states) {
        return recipe_detail::classification_logits(weights, head, labels, states);
    });
    return result;
}

ANVIL_INLINE std::vector<float> cross_encoder::predict(
    std::span<const std::pair<std::string, std::string>> pairs, std::size_t batch_size) {
    std::vector<std::vector<std::int32_t>> ids, types;
    tokenize(pairs, ids, types);
    return predict_ids(ids, types, batch_size);
}

ANVIL_INLINE std::vector<float> cross_encoder::predict_ids(
    std::span<const std::vector<std::int32_t>> ids, std::span<const std::vector<std::int32_t>> type_ids,
    std::size_t batch_size) {
    const host_tensor logits = logits_ids(ids, type_ids, batch_size);
    const auto values = logits.values<float>();
    const std::size_t labels = labels_.size();
    std::vector<float> scores(ids.size());
    for (std::size_t i = 0; i < scores.size(); ++i)
        scores[i] = values[i * labels];
    return scores;
}

ANVIL_INLINE host_tensor cross_encoder::logits_ids(std::span<const std::vector<std::int32_t>> ids,
                                                   std::span<const std::vector<std::int32_t>> type_ids,
                                                   std::size_t batch_size) {
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

ANVIL_INLINE host_tensor cross_encoder::logits(std::span<const std::pair<std::string, std::string>> pairs,
                                               std::size_t batch_size) {
    std::vector<std::vector<std::int32_t>> ids, types;
    tokenize(pairs, ids, types);
    return logits_ids(ids, types, batch_size);
}

ANVIL_INLINE void cross_encoder::tokenize(std::span<const std::pair<std::string, std::string>> pairs,
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

}  // namespace anvil::models
