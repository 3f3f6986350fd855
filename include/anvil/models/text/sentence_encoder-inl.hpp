// anvil: sentence_encoder's definitions (see sentence_encoder.hpp; compilation.hpp says when this file is
// compiled).
#pragma once

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/core/json.hpp"
#include "anvil/core/masking.hpp"
#include "anvil/expr/expr.hpp"
#include "anvil/models/common/blocks.hpp"
#include "anvil/models/common/config.hpp"
#include "anvil/models/text/sentence_encoder.hpp"

namespace anvil::models::recipe_detail {

ANVIL_INLINE pooling read_pooling_config(const std::filesystem::path& path, std::int64_t hidden) {
    const json::value document = config_reader::read_file(path);
    const config_reader config(document, path.string());
    const std::int64_t dimension = config.integer("word_embedding_dimension", hidden);
    if (dimension != hidden) {
        throw format_error(anvil::detail::message(path.string(), ": word_embedding_dimension ", dimension,
                                                  " does not match the encoder's hidden size ", hidden));
    }
    for (const char* unsupported : {"pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens",
                                    "pooling_mode_lasttoken"}) {
        if (config.boolean(unsupported, false)) {
            throw unsupported_error(anvil::detail::message(path.string(), ": ", unsupported,
                                                           " is not supported (cls, mean or max pooling)"));
        }
    }
    const bool cls = config.boolean("pooling_mode_cls_token", false);
    const bool mean = config.boolean("pooling_mode_mean_tokens", false);
    const bool max = config.boolean("pooling_mode_max_tokens", false);
    if (int{cls} + int{mean} + int{max} != 1) {
        throw unsupported_error(anvil::detail::message(
            path.string(),
            ": expected exactly one of pooling_mode_cls_token, pooling_mode_mean_tokens, "
            "pooling_mode_max_tokens (several poolings concatenated are not supported)"));
    }
    return cls ? pooling::cls : (mean ? pooling::mean : pooling::max);
}

ANVIL_INLINE void pool_rows(const float* rows, std::int64_t length, std::int64_t dim, pooling mode,
                            bool normalize, float* out) {
    const auto d = static_cast<std::size_t>(dim);
    std::vector<double> acc(d, mode == pooling::max ? -INFINITY : 0.0);
    const std::int64_t used = mode == pooling::cls ? 1 : length;
    for (std::int64_t t = 0; t < used; ++t) {
        const float* row = rows + static_cast<std::size_t>(t) * d;
        for (std::size_t j = 0; j < d; ++j)
            acc[j] = mode == pooling::max ? std::max(acc[j], double{row[j]}) : acc[j] + double{row[j]};
    }
    if (mode == pooling::mean) {
        for (auto& v : acc)
            v /= static_cast<double>(length);
    }
    double norm = 1.0;
    if (normalize) {  // torch.nn.functional.normalize: x / max(||x||, 1e-12)
        double squares = 0.0;
        for (const double v : acc)
            squares += v * v;
        norm = std::max(std::sqrt(squares), 1e-12);
    }
    for (std::size_t j = 0; j < d; ++j)
        out[j] = static_cast<float>(acc[j] / norm);
}

}  // namespace anvil::models::recipe_detail

namespace anvil::models {

ANVIL_INLINE sentence_encoder sentence_encoder::load(const std::filesystem::path& folder,
                                                     const load_options& options) {
    std::filesystem::path model_folder = folder;
    std::optional<std::filesystem::path> pooling_folder;
    bool normalize = false;
    const auto modules_path = folder / "modules.json";
    if (std::filesystem::exists(modules_path)) {
        const json::value modules = json::parse_file(modules_path);
        if (!modules.is_array()) {
            throw format_error(anvil::detail::message(modules_path.string(), ": expected a list of modules"));
        }
        for (const auto& module : modules.as_array()) {
            const config_reader entry(module, modules_path.string());
            const std::string type = entry.string("type", "");
            const std::string path = entry.string("path", "");
            const auto kind = type.substr(type.rfind('.') + 1);
            if (kind == "Transformer") {
                model_folder = folder / path;
            } else if (kind == "Pooling") {
                pooling_folder = folder / path;
            } else if (kind == "Normalize") {
                normalize = true;
            } else {
                throw unsupported_error(
                    anvil::detail::message(modules_path.string(), ": module '", type, "' (", path,
                                           ") is not supported (Transformer, Pooling, Normalize)"));
            }
        }
    }
    sentence_encoder result(text_encoder::load(model_folder, options));
    result.normalize_ = normalize;
    const std::int64_t hidden = result.encoder_.config().stack.hidden;
    if (pooling_folder)
        result.pool_ = recipe_detail::read_pooling_config(*pooling_folder / "config.json", hidden);
    // sentence-transformers truncates to max_seq_length, which may be shorter than the position table.
    const auto st_config = model_folder / "sentence_bert_config.json";
    if (std::filesystem::exists(st_config)) {
        const json::value document = json::parse_file(st_config);
        result.encoder_.limit_tokens(
            config_reader(document, st_config.string()).integer("max_seq_length", 0, 0));
    }
    return result;
}

ANVIL_INLINE value sentence_encoder::build_graph(graph& g, std::int64_t length) const {
    // sentence-transformers' Pooling and Normalize as graph ops, over the hidden states [1, S, D]:
    //   mean: sum(h * m) / max(sum(m), 1e-9); cls: h[:, 0]; max: max over tokens of h, padding at -1e4;
    //   Normalize: x / max(||x||, 1e-12) (the fp16-safe floor 1e-6 on a Neural Engine is below any real
    //   norm).
    const value hidden = encoder_.build_graph(g, 1, length).at(0);
    const std::int64_t dim = dimension();
    const value mask = g.input_named(std::string(attention_mask_name));  // f32 [1, S], 1 = a real token
    attributes as_column;
    as_column.sizes = {1, length, 1};
    const value column = g.apply(op::reshape, {mask}, as_column);
    attributes over_tokens;
    over_tokens.axes = {1};
    value pooled;
    switch (pool_) {
        case pooling::mean: {
            const value summed = g.apply(op::reduce_sum, {g.apply(op::mul, {hidden, column})}, over_tokens);
            attributes keep = over_tokens;
            keep.keep_dims = true;
            attributes floor;
            floor.min = 1e-9f;
            floor.max = 3.0e38f;
            const value count = g.apply(op::clamp, {g.apply(op::reduce_sum, {mask}, keep)}, floor);
            pooled = g.apply(op::div, {summed, count});
            break;
        }
        case pooling::cls: {
            attributes first;
            first.begin = {0, 0, 0};
            first.end = {1, 1, dim};
            first.step = {1, 1, 1};
            attributes flat;
            flat.sizes = {1, dim};
            pooled = g.apply(op::reshape, {g.apply(op::slice, {hidden}, first)}, flat);
            break;
        }
        case pooling::max: {
            // h + (1 - m) * masked_score (-1e4): padding tokens fall far below every real one.
            const value shift =
                g.apply(op::mul, {g.apply(op::sub, {g.scalar(1.0), column}), g.scalar(masked_score)});
            pooled = g.apply(op::reduce_max, {g.apply(op::add, {hidden, shift})}, over_tokens);
            break;
        }
        case pooling::none:
            return hidden;
    }
    if (!normalize_) return pooled;
    return recipe_detail::l2_normalized_rows(tensor<float>(pooled)).value();
}

ANVIL_INLINE host_tensor sentence_encoder::encode(std::span<const std::string> texts,
                                                  const encode_options& options) {
    if (texts.empty()) return encode_ids({}, {}, options);
    const tokenizer& words = encoder_.text_tokenizer();
    const auto tokenizer_options = encoder_.tokenizer_options();
    std::vector<std::vector<std::int32_t>> ids, types;
    for (const auto& text : texts) {
        encoding e = words.encode(text, tokenizer_options);
        ids.push_back(std::move(e.ids));
        types.push_back(std::move(e.type_ids));
        if (types.back().size() != ids.back().size()) types.back().assign(ids.back().size(), 0);
    }
    return encode_ids(ids, types, options);
}

ANVIL_INLINE host_tensor sentence_encoder::encode_ids(std::span<const std::vector<std::int32_t>> ids,
                                                      std::span<const std::vector<std::int32_t>> type_ids,
                                                      const encode_options& options) {
    const pooling mode = options.pool.value_or(pool_);
    const std::int64_t dim = dimension();
    if (mode == pooling::none) {
        if (ids.size() != 1) {
            throw error(
                anvil::detail::message("sentence_encoder: pooling none gives the hidden states of one "
                                       "text, got ",
                                       ids.size(), " texts"));
        }
        const bool normalize = options.normalize.value_or(false);
        host_tensor result(dtype::f32, dims{static_cast<std::int64_t>(ids[0].size()), dim});
        encoder_.run(ids, type_ids, 1, [&](const token_batch& batch, const host_tensor& hidden) {
            const float* rows = hidden.values<float>().data();
            float* out = result.values<float>().data();
            for (std::int64_t t = 0; t < batch.lengths[0]; ++t) {
                const auto offset = static_cast<std::size_t>(t * dim);
                recipe_detail::pool_rows(rows + offset, 1, dim, pooling::mean, normalize, out + offset);
            }
        });
        return result;
    }
    const bool normalize = options.normalize.value_or(normalize_);
    host_tensor result(dtype::f32, dims{static_cast<std::int64_t>(ids.size()), dim});
    encoder_.run(ids, type_ids, options.batch_size, [&](const token_batch& batch, const host_tensor& hidden) {
        const float* rows = hidden.values<float>().data();
        float* out = result.values<float>().data();
        for (std::size_t r = 0; r < batch.items.size(); ++r) {
            const auto offset = static_cast<std::size_t>(static_cast<std::int64_t>(r) * batch.length * dim);
            recipe_detail::pool_rows(rows + offset, batch.lengths[r], dim, mode, normalize,
                                     out + batch.items[r] * static_cast<std::size_t>(dim));
        }
    });
    return result;
}

}  // namespace anvil::models
