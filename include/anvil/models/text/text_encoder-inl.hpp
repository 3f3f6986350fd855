// anvil: text_encoder's definitions (see text_encoder.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/backend/ane/ane_program.hpp"
#include "anvil/backend/compile.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/json.hpp"
#include "anvil/expr/expr.hpp"
#include "anvil/io/checkpoint.hpp"
#include "anvil/models/common/config.hpp"
#include "anvil/models/common/lora_adapter.hpp"
#include "anvil/models/text/text_encoder.hpp"

namespace anvil::models {

ANVIL_INLINE text_family_table family_table(text_family family) {
    switch (family) {
        case text_family::bert:
            return {family, "bert", "bert.", bert_layer_names(), true, false, false};
        case text_family::roberta:
            return {family, "roberta", "roberta.", bert_layer_names(), true, true, false};
        case text_family::xlm_roberta:  // XLMRobertaForSequenceClassification keeps RoBERTa's "roberta."
                                        // prefix
            return {family, "xlm-roberta", "roberta.", bert_layer_names(), true, true, false};
        case text_family::mpnet:
            return {family,
                    "mpnet",
                    "mpnet.",
                    {"encoder.layer.", "attention.attn.q", "attention.attn.k", "attention.attn.v",
                     "attention.attn.o", "attention.LayerNorm", "intermediate.dense", "output.dense",
                     "output.LayerNorm"},
                    false,
                    true,
                    true};
        case text_family::distilbert:
            return {family,
                    "distilbert",
                    "distilbert.",
                    {"transformer.layer.", "attention.q_lin", "attention.k_lin", "attention.v_lin",
                     "attention.out_lin", "sa_layer_norm", "ffn.lin1", "ffn.lin2", "output_layer_norm"},
                    false,
                    false,
                    false};
    }
    throw error("family_table: unknown text family");
}

ANVIL_INLINE text_encoder_config text_encoder_config::from_json(const json::value& document,
                                                                std::string source) {
    const config_reader config(document, std::move(source));
    const std::string type = config.string("model_type", "");
    text_encoder_config c;
    if (type == "bert") {
        c.family = text_family::bert;
    } else if (type == "roberta") {
        c.family = text_family::roberta;
    } else if (type == "xlm-roberta") {
        c.family = text_family::xlm_roberta;
    } else if (type == "mpnet") {
        c.family = text_family::mpnet;
    } else if (type == "distilbert") {
        c.family = text_family::distilbert;
    } else {
        throw unsupported_error(anvil::detail::message(
            config.source(), ": model_type '", type,
            "' is not a supported text encoder (bert, roberta, xlm-roberta, mpnet, distilbert)"));
    }
    c.vocab_size = config.required_integer("vocab_size");
    c.max_position_embeddings = config.integer("max_position_embeddings", 512);
    if (c.family == text_family::distilbert) {
        c.stack.layers = config.integer("n_layers", 6);
        c.stack.hidden = config.integer("dim", 768);
        c.stack.heads = config.integer("n_heads", 12);
        c.stack.intermediate = config.integer("hidden_dim", 3072);
        c.stack.layer_norm_eps = 1e-12;  // modeling_distilbert.py fixes it
        c.stack.act = parse_activation(config.string("activation", "gelu"));
        // DistilBertConfig's names and defaults; its attention has no dropout after out_lin.
        c.stack.hidden_dropout = config.probability("dropout", 0.1);
        c.stack.attention_dropout = config.probability("attention_dropout", 0.1);
        c.stack.attention_output_dropout = 0.0;
        c.classifier_dropout = config.probability("seq_classif_dropout", 0.2);
        c.type_vocab_size = 0;
        c.pad_token_id = config.integer("pad_token_id", 0, 0);
        if (config.boolean("sinusoidal_pos_embds", false)) {
            throw unsupported_error(anvil::detail::message(
                config.source(), ": sinusoidal_pos_embds true is not supported (learned positions only)"));
        }
        if (c.stack.hidden % c.stack.heads != 0) {
            throw format_error(anvil::detail::message(config.source(), ": dim ", c.stack.hidden,
                                                      " is not a multiple of n_heads ", c.stack.heads));
        }
    } else {
        c.stack = bert_config::from_json(document, config.source());
        c.classifier_dropout = c.family == text_family::mpnet
                                   ? c.stack.hidden_dropout
                                   : config.probability("classifier_dropout", c.stack.hidden_dropout);
        const std::string positions = config.string("position_embedding_type", "absolute");
        if (positions != "absolute") {
            throw unsupported_error(anvil::detail::message(config.source(), ": position_embedding_type '",
                                                           positions, "' is not supported (absolute only)"));
        }
        const bool roberta = c.family == text_family::roberta || c.family == text_family::xlm_roberta;
        c.pad_token_id = config.integer("pad_token_id", roberta || c.family == text_family::mpnet ? 1 : 0, 0);
        if (roberta) c.padding_idx = c.pad_token_id;
        if (c.family == text_family::mpnet) {
            c.padding_idx = 1;  // MPNetEmbeddings fixes padding_idx = 1, whatever pad_token_id says
            c.type_vocab_size = 0;
            c.relative_buckets = config.integer("relative_attention_num_buckets", 32);
        } else {
            c.type_vocab_size = config.integer("type_vocab_size", 2);
        }
    }
    c.embedding_norm_eps = c.stack.layer_norm_eps;
    if (c.pad_token_id >= c.vocab_size) {
        throw format_error(anvil::detail::message(config.source(), ": pad_token_id ", c.pad_token_id,
                                                  " is outside the vocabulary (vocab_size ", c.vocab_size,
                                                  ")"));
    }
    if (c.max_tokens() < 1) {
        throw format_error(anvil::detail::message(config.source(), ": max_position_embeddings ",
                                                  c.max_position_embeddings,
                                                  " leaves no position for a token"));
    }
    return c;
}

ANVIL_INLINE text_encoder_config text_encoder_config::load(const std::filesystem::path& folder) {
    const auto path = folder / "config.json";
    return from_json(config_reader::read_file(path), path.string());
}

ANVIL_INLINE std::int64_t mpnet_relative_bucket(std::int64_t relative_position) {
    constexpr std::int64_t half = 16, max_exact = 8, max_distance = 128;
    std::int64_t n = -relative_position;
    const std::int64_t ret = n < 0 ? half : 0;
    n = n < 0 ? -n : n;
    if (n < max_exact) return ret + n;
    const float scale = static_cast<float>(std::log(static_cast<double>(max_distance) / max_exact));
    const float large = std::log(static_cast<float>(n) / static_cast<float>(max_exact)) / scale *
                        static_cast<float>(half - max_exact);
    return ret + std::min(max_exact + static_cast<std::int64_t>(large), half - 1);
}

ANVIL_INLINE text_encoder_weights load_text_encoder(weight_loader& weights, const text_encoder_config& c,
                                                    const std::string& prefix) {
    const text_family_table table = c.table();
    const std::int64_t hidden = c.stack.hidden;
    const std::string e = prefix + "embeddings.";
    text_encoder_weights w;
    w.word_embeddings = weights.load(e + "word_embeddings.weight", dims{c.vocab_size, hidden});
    w.position_embeddings =
        weights.load(e + "position_embeddings.weight", dims{c.max_position_embeddings, hidden});
    if (table.token_types)
        w.token_type_embeddings =
            weights.load(e + "token_type_embeddings.weight", dims{c.type_vocab_size, hidden});
    w.embedding_norm = load_layer_norm(weights, e + "LayerNorm", hidden, c.embedding_norm_eps);
    w.embedding_dropout = load_dropout(weights, c.stack.hidden_dropout);
    for (std::int64_t i = 0; i < c.stack.layers; ++i)
        w.layers.push_back(load_encoder_layer(weights, c.stack, table.layers, i, prefix));
    if (table.relative_bias) {
        w.relative_attention_bias = weights.load(prefix + "encoder.relative_attention_bias.weight",
                                                 dims{c.relative_buckets, c.stack.heads});
    }
    return w;
}

ANVIL_INLINE std::string detect_prefix(const checkpoint& weights, const text_encoder_config& c) {
    const std::string probe = "embeddings.word_embeddings.weight";
    const std::string base(c.table().base_prefix);
    if (weights.contains(probe)) return "";
    if (weights.contains(base + probe)) return base;
    throw format_error(anvil::detail::message(weights.path().string(), ": no ", c.table().model_type,
                                              " encoder weights: neither '", probe, "' nor '", base, probe,
                                              "' is there"));
}

ANVIL_INLINE tensor<float> text_encoder_forward(graph& g, const text_encoder_weights& w,
                                                const text_encoder_config& c, std::int64_t rows,
                                                std::int64_t length, text_positions given) {
    const dims shape{rows, length};
    auto ids = g.input<std::int32_t>(std::string(input_ids_name), shape);
    const auto id_input = [&](std::string_view name, bool positions) {
        if (given == text_positions::inputs) return g.input<std::int32_t>(std::string(name), shape);
        // create_position_ids_from_input_ids for right padding: padding_idx + 1 + t (RoBERTa), else t.
        std::vector<std::int32_t> values(static_cast<std::size_t>(rows * length), 0);
        for (std::size_t i = 0; positions && i < values.size(); ++i) {
            const auto t = static_cast<std::int32_t>(static_cast<std::int64_t>(i) % length);
            values[i] = c.padding_idx < 0 ? t : static_cast<std::int32_t>(c.padding_idx) + 1 + t;
        }
        return g.constant<std::int32_t>(host_tensor::from(values, shape), std::string(name));
    };
    auto positions = id_input(position_ids_name, true);
    tensor<float> x = embedding(w.word_embeddings, ids) + embedding(w.position_embeddings, positions);
    if (w.token_type_embeddings) {
        auto types = given == text_positions::baked_positions
                         ? g.input<std::int32_t>(std::string(token_type_ids_name), shape)
                         : id_input(token_type_ids_name, false);
        x = x + embedding(*w.token_type_embeddings, types);
    }
    x = apply(w.embedding_dropout, apply(w.embedding_norm, x));
    tensor<float> mask = additive_padding_mask(g.input<float>(std::string(attention_mask_name), shape));
    if (w.relative_attention_bias) {
        // MPNetEncoder.compute_position_bias: one bias per head from the bucket of (key - query), the same
        // for every text, added to the padding mask so the attention gets one additive mask [rows, heads, S,
        // S].
        std::vector<std::int32_t> buckets(static_cast<std::size_t>(length * length));
        for (std::int64_t q = 0; q < length; ++q) {
            for (std::int64_t k = 0; k < length; ++k)
                buckets[static_cast<std::size_t>(q * length + k)] =
                    static_cast<std::int32_t>(mpnet_relative_bucket(k - q));
        }
        auto index =
            g.constant<std::int32_t>(host_tensor::from(buckets, dims{length, length}), "mpnet buckets");
        const tensor<float> bias = permute(embedding(*w.relative_attention_bias, index), {2, 0, 1});
        mask = reshape(bias, std::vector<std::int64_t>{1, c.stack.heads, length, length}) + mask;
    }
    return encoder_stack(w.layers, x, mask);
}

ANVIL_INLINE std::int64_t bucketed_length(std::int64_t length, std::int64_t max_tokens,
                                          length_buckets buckets) {
    std::int64_t bucket = 8;
    if (buckets == length_buckets::powers_of_two) {
        while (bucket < length)
            bucket *= 2;
    } else {
        // Steps of 8 up to 64, then of 16, 32 and 64 past 128, 256: at most a quarter of a text's length is
        // padding (powers of two waste up to half), with about 20 lengths up to 512.
        std::int64_t step = 8;
        while (bucket < length) {
            if (bucket >= 8 * step) step *= 2;
            bucket += step;
        }
    }
    return std::min(bucket, max_tokens);
}

ANVIL_INLINE std::int64_t bucketed_rows(std::size_t count, std::size_t batch_size) {
    std::size_t rows = 1;
    while (rows < count)
        rows *= 2;
    return static_cast<std::int64_t>(std::min(rows, std::max(batch_size, count)));
}

ANVIL_INLINE void check_token_ids(const text_encoder_config& c,
                                  std::span<const std::vector<std::int32_t>> ids,
                                  std::span<const std::vector<std::int32_t>> type_ids,
                                  std::int64_t max_tokens) {
    if (!type_ids.empty() && type_ids.size() != ids.size()) {
        throw shape_error(anvil::detail::message("text encoder: ", ids.size(), " texts but ", type_ids.size(),
                                                 " lists of token type ids"));
    }
    for (std::size_t i = 0; i < ids.size(); ++i) {
        const auto& text = ids[i];
        if (text.empty()) throw error(anvil::detail::message("text encoder: text ", i, " has no tokens"));
        if (static_cast<std::int64_t>(text.size()) > max_tokens) {
            throw shape_error(anvil::detail::message("text encoder: text ", i, " has ", text.size(),
                                                     " tokens; the model takes at most ", max_tokens));
        }
        for (std::size_t t = 0; t < text.size(); ++t) {
            if (text[t] < 0 || text[t] >= c.vocab_size) {
                throw error(anvil::detail::message("text encoder: text ", i, ", token ", t, ": id ", text[t],
                                                   " is outside the vocabulary [0, ", c.vocab_size, ")"));
            }
        }
        if (type_ids.empty()) continue;
        if (type_ids[i].size() != text.size()) {
            throw shape_error(anvil::detail::message("text encoder: text ", i, " has ", text.size(),
                                                     " token ids but ", type_ids[i].size(),
                                                     " token type ids"));
        }
        if (!c.table().token_types) continue;  // MPNet and DistilBERT have none: a tokenizer's are ignored
        for (std::size_t t = 0; t < text.size(); ++t) {
            if (type_ids[i][t] < 0 || type_ids[i][t] >= c.type_vocab_size) {
                throw error(anvil::detail::message("text encoder: text ", i, ", token ", t, ": token type ",
                                                   type_ids[i][t], " is outside [0, ", c.type_vocab_size,
                                                   ")"));
            }
        }
    }
}

ANVIL_INLINE std::vector<token_batch> make_batches(const text_encoder_config& c,
                                                   std::span<const std::vector<std::int32_t>> ids,
                                                   std::span<const std::vector<std::int32_t>> type_ids,
                                                   std::size_t batch_size, std::int64_t max_tokens,
                                                   length_buckets buckets) {
    if (batch_size == 0) throw error("text encoder: batch_size must be at least 1");
    check_token_ids(c, ids, type_ids, max_tokens);
    std::vector<std::size_t> order(ids.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return ids[a].size() > ids[b].size(); });
    std::vector<token_batch> batches;
    for (std::size_t start = 0; start < order.size(); start += batch_size) {
        token_batch b;
        b.items.assign(
            order.begin() + static_cast<std::ptrdiff_t>(start),
            order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), start + batch_size)));
        b.rows = bucketed_rows(b.items.size(), batch_size);
        b.length =
            bucketed_length(static_cast<std::int64_t>(ids[b.items.front()].size()), max_tokens, buckets);
        const auto cells = static_cast<std::size_t>(b.rows * b.length);
        std::vector<std::int32_t> tokens(cells, static_cast<std::int32_t>(c.pad_token_id));
        std::vector<std::int32_t> types(cells, 0);
        std::vector<std::int32_t> positions(cells, 0);
        std::vector<float> mask(cells, 0.0f);
        for (std::int64_t r = 0; r < b.rows; ++r) {
            const auto row = static_cast<std::size_t>(r * b.length);
            const bool filler = static_cast<std::size_t>(r) >= b.items.size();
            const std::size_t count = filler ? 0 : ids[b.items[static_cast<std::size_t>(r)]].size();
            if (!filler) {
                const std::size_t item = b.items[static_cast<std::size_t>(r)];
                std::copy(ids[item].begin(), ids[item].end(),
                          tokens.begin() + static_cast<std::ptrdiff_t>(row));
                if (!type_ids.empty() && c.table().token_types) {
                    std::copy(type_ids[item].begin(), type_ids[item].end(),
                              types.begin() + static_cast<std::ptrdiff_t>(row));
                }
                b.lengths.push_back(static_cast<std::int64_t>(count));
            }
            // A filler row sees its first token, so its softmax stays finite.
            std::fill_n(mask.begin() + static_cast<std::ptrdiff_t>(row), std::max<std::size_t>(count, 1),
                        1.0f);
            std::int64_t seen = 0;
            for (std::int64_t t = 0; t < b.length; ++t) {
                auto& p = positions[row + static_cast<std::size_t>(t)];
                if (c.padding_idx < 0) {
                    p = static_cast<std::int32_t>(t);
                } else {  // create_position_ids_from_input_ids: padding keeps padding_idx
                    const bool token = tokens[row + static_cast<std::size_t>(t)] != c.padding_idx;
                    seen += token ? 1 : 0;
                    p = static_cast<std::int32_t>(token ? c.padding_idx + seen : c.padding_idx);
                }
            }
        }
        const dims shape{b.rows, b.length};
        b.inputs.push_back({std::string(input_ids_name), host_tensor::from(tokens, shape)});
        b.inputs.push_back({std::string(position_ids_name), host_tensor::from(positions, shape)});
        if (c.table().token_types)
            b.inputs.push_back({std::string(token_type_ids_name), host_tensor::from(types, shape)});
        b.inputs.push_back({std::string(attention_mask_name), host_tensor::from(mask, shape)});
        batches.push_back(std::move(b));
    }
    return batches;
}

ANVIL_INLINE text_encoder text_encoder::load(const std::filesystem::path& folder, const load_options& given) {
    const load_options options = with_model_source(given, folder);
    text_encoder encoder;
    auto state = std::make_shared<shared_state>();
    state->config = text_encoder_config::load(folder);
    state->weights = open_weights(folder, options);
    state->prefix = detect_prefix(*state->weights, state->config);
    encoder.state_ = state;
    encoder.options_ = options.compile;
    const bool on_cpu = options.compile.target == device::cpu ||
                        (options.compile.target == device::automatic && !anvil::detail::ane::available());
    encoder.buckets_ = on_cpu ? length_buckets::fine : length_buckets::powers_of_two;
    encoder.max_tokens_ = state->config.max_tokens();
    // Without tokenizer files (an XLM-R folder with only sentencepiece.bpe.model, say) the encoder takes
    // token ids only.
    if (std::filesystem::exists(folder / "tokenizer.json") || std::filesystem::exists(folder / "vocab.txt") ||
        (std::filesystem::exists(folder / "vocab.json") && std::filesystem::exists(folder / "merges.txt"))) {
        encoder.tokenizer_ = std::make_shared<const tokenizer>(tokenizer::load(folder));
        const auto limit = static_cast<std::int64_t>(encoder.tokenizer_->model_max_length());
        if (limit > 0) encoder.max_tokens_ = std::min(encoder.max_tokens_, limit);
    }
    encoder.set_head({});
    return encoder;
}

ANVIL_INLINE void text_encoder::set_head(head_builder head) {
    auto state = std::make_shared<shared_state>(*state_);
    state->head = std::move(head);
    {
        graph scratch;
        weight_loader loader(scratch, state->weights);
        static_cast<void>(load_text_encoder(loader, state->config, state->prefix));
        if (state->head) {
            auto hidden = scratch.input<float>("hidden", dims{1, 1, state->config.stack.hidden});
            static_cast<void>(state->head(loader, hidden));
        }
    }
    state_ = state;
    programs_ = std::make_unique<compiled_shapes>(
        options_, [state](graph& g, std::span<const std::int64_t> key) -> std::vector<value> {
            weight_loader loader(g, state->weights);
            const auto w = load_text_encoder(loader, state->config, state->prefix);
            // A third key element is the graph `anvil export` writes: its text_positions.
            auto out = text_encoder_forward(
                g, w, state->config, key[0], key[1],
                key.size() > 2 ? static_cast<text_positions>(key[2]) : text_positions::inputs);
            if (state->head) out = state->head(loader, out);
            return {out.value()};
        });
}

ANVIL_INLINE void text_encoder::run(
    std::span<const std::vector<std::int32_t>> ids, std::span<const std::vector<std::int32_t>> type_ids,
    std::size_t batch_size, const std::function<void(const token_batch&, const host_tensor&)>& consume) {
    for (const token_batch& batch :
         make_batches(config(), ids, type_ids, batch_size, max_tokens_, buckets_)) {
        program& p = programs_->at({batch.rows, batch.length});
        const auto outputs = p.run(std::span<const named_tensor>(batch.inputs));
        consume(batch, outputs.at(0));
    }
}

ANVIL_INLINE void text_encoder::limit_tokens(std::int64_t limit) {
    if (limit > 0) max_tokens_ = std::min(max_tokens_, limit);
}

ANVIL_INLINE const tokenizer& text_encoder::text_tokenizer() const {
    if (!tokenizer_) {
        throw io_error(
            "text encoder: the model folder has no tokenizer (tokenizer.json, vocab.txt or vocab.json + "
            "merges.txt); "
            "pass token ids instead");
    }
    return *tokenizer_;
}

ANVIL_INLINE anvil::encode_options text_encoder::tokenizer_options() const {
    anvil::encode_options o;
    o.max_length = static_cast<std::size_t>(max_tokens_);
    return o;
}

}  // namespace anvil::models
