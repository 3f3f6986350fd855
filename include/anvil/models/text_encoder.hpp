// anvil: the text encoders — BERT, RoBERTa, XLM-R, MPNet and DistilBERT — as one mechanism. A family differs
// by its config keys and a table of weight names; every one is embeddings (word + position (+ token type),
// then LayerNorm) and the post-norm encoder stack of bert.hpp. Texts run in batches sorted by length, each
// padded to a bucketed length, so a handful of compiled programs (one per {rows, length}) serve any mix of
// texts. sentence_encoder.hpp and cross_encoder.hpp put pooling and classification heads on top.
#pragma once

#include <algorithm>
#include <array>
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

#include "anvil/backend/compile.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/json.hpp"
#include "anvil/expr/expr.hpp"
#include "anvil/io/checkpoint.hpp"
#include "anvil/io/tokenizer.hpp"
#include "anvil/models/bert.hpp"
#include "anvil/models/compiled_shapes.hpp"
#include "anvil/models/config.hpp"
#include "anvil/models/weights.hpp"

namespace anvil::models {

enum class text_family : std::uint8_t { bert, roberta, xlm_roberta, mpnet, distilbert };

// What distinguishes one family: its model_type, the prefix its task classes put before the encoder's names
// ("bert." in BertForSequenceClassification), the layer-name table, and the embedding variants.
struct text_family_table {
    text_family family = text_family::bert;
    std::string_view model_type;
    std::string_view base_prefix;
    encoder_layer_names layers;
    bool token_types = true;              // token_type_embeddings
    bool positions_from_padding = false;  // RoBERTa's create_position_ids_from_input_ids
    bool relative_bias = false;           // MPNet's encoder.relative_attention_bias
};

[[nodiscard]] inline text_family_table family_table(text_family family) {
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

struct text_encoder_config {
    text_family family = text_family::bert;
    bert_config stack;  // layers, hidden, heads, intermediate, eps, activation
    std::int64_t vocab_size = 30522;
    std::int64_t max_position_embeddings = 512;
    std::int64_t type_vocab_size = 2;  // 0: no token-type embeddings (MPNet, DistilBERT)
    std::int64_t pad_token_id = 0;
    std::int64_t padding_idx = -1;      // >= 0: positions count from padding_idx + 1 (RoBERTa, MPNet)
    std::int64_t relative_buckets = 0;  // MPNet: rows of encoder.relative_attention_bias
    double embedding_norm_eps = 1e-12;

    [[nodiscard]] text_family_table table() const { return family_table(family); }
    [[nodiscard]] std::int64_t first_position() const { return padding_idx < 0 ? 0 : padding_idx + 1; }
    // The longest sequence the position table holds.
    [[nodiscard]] std::int64_t max_tokens() const { return max_position_embeddings - first_position(); }

    [[nodiscard]] static text_encoder_config from_json(const json::value& document, std::string source) {
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
            c.type_vocab_size = 0;
            c.pad_token_id = config.integer("pad_token_id", 0, 0);
            if (config.boolean("sinusoidal_pos_embds", false)) {
                throw unsupported_error(anvil::detail::message(
                    config.source(),
                    ": sinusoidal_pos_embds true is not supported (learned positions only)"));
            }
            if (c.stack.hidden % c.stack.heads != 0) {
                throw format_error(anvil::detail::message(config.source(), ": dim ", c.stack.hidden,
                                                          " is not a multiple of n_heads ", c.stack.heads));
            }
        } else {
            c.stack = bert_config::from_json(document, config.source());
            const std::string positions = config.string("position_embedding_type", "absolute");
            if (positions != "absolute") {
                throw unsupported_error(anvil::detail::message(config.source(), ": position_embedding_type '",
                                                               positions,
                                                               "' is not supported (absolute only)"));
            }
            const bool roberta = c.family == text_family::roberta || c.family == text_family::xlm_roberta;
            c.pad_token_id =
                config.integer("pad_token_id", roberta || c.family == text_family::mpnet ? 1 : 0, 0);
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

    [[nodiscard]] static text_encoder_config load(const std::filesystem::path& folder) {
        const auto path = folder / "config.json";
        return from_json(config_reader::read_file(path), path.string());
    }
};

// MPNet's relative_position_bucket (modeling_mpnet.py) for relative position `memory - context`, with its
// defaults: 32 buckets, max_distance 128. The logarithm is taken in float32, as torch does.
[[nodiscard]] inline std::int64_t mpnet_relative_bucket(std::int64_t relative_position) {
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

// The weights of a text encoder: `prefix` is "" or the family's base prefix ("bert.", ...).
struct text_encoder_weights {
    tensor<float> word_embeddings;                       // [vocab, hidden]
    tensor<float> position_embeddings;                   // [max_position_embeddings, hidden]
    std::optional<tensor<float>> token_type_embeddings;  // [type_vocab, hidden]
    norm_layer embedding_norm;
    std::vector<post_norm_encoder_layer> layers;
    std::optional<tensor<float>> relative_attention_bias;  // MPNet: [buckets, heads]
};

[[nodiscard]] inline text_encoder_weights load_text_encoder(weight_loader& weights,
                                                            const text_encoder_config& c,
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
    for (std::int64_t i = 0; i < c.stack.layers; ++i)
        w.layers.push_back(load_encoder_layer(weights, c.stack, table.layers, i, prefix));
    if (table.relative_bias) {
        w.relative_attention_bias = weights.load(prefix + "encoder.relative_attention_bias.weight",
                                                 dims{c.relative_buckets, c.stack.heads});
    }
    return w;
}

// The prefix the checkpoint's encoder tensors carry: "" (what AutoModel and sentence-transformers save) or
// the family's base prefix (what the *ForSequenceClassification classes save).
[[nodiscard]] inline std::string detect_prefix(const checkpoint& weights, const text_encoder_config& c) {
    const std::string probe = "embeddings.word_embeddings.weight";
    const std::string base(c.table().base_prefix);
    if (weights.contains(probe)) return "";
    if (weights.contains(base + probe)) return base;
    throw format_error(anvil::detail::message(weights.path().string(), ": no ", c.table().model_type,
                                              " encoder weights: neither '", probe, "' nor '", base, probe,
                                              "' is there"));
}

// The graph's inputs, each [rows, length]: token ids, position ids (computed on the host: RoBERTa's depend
// on where the padding is), token types (families that have them) and the padding mask (1 token, 0 padding).
inline constexpr std::string_view input_ids_name = "input_ids";
inline constexpr std::string_view position_ids_name = "position_ids";
inline constexpr std::string_view token_type_ids_name = "token_type_ids";
inline constexpr std::string_view attention_mask_name = "attention_mask";

// The last hidden states [rows, length, hidden] for inputs of that shape.
[[nodiscard]] inline tensor<float> text_encoder_forward(graph& g, const text_encoder_weights& w,
                                                        const text_encoder_config& c, std::int64_t rows,
                                                        std::int64_t length) {
    const dims shape{rows, length};
    auto ids = g.input<std::int32_t>(std::string(input_ids_name), shape);
    auto positions = g.input<std::int32_t>(std::string(position_ids_name), shape);
    tensor<float> x = embedding(w.word_embeddings, ids) + embedding(w.position_embeddings, positions);
    if (w.token_type_embeddings) {
        auto types = g.input<std::int32_t>(std::string(token_type_ids_name), shape);
        x = x + embedding(*w.token_type_embeddings, types);
    }
    x = apply(w.embedding_norm, x);
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

// --- batching on the host ---

// How finely padded lengths are bucketed. Each distinct length is a program: on the Neural Engine a
// compilation of seconds, so few (powers of two); on the CPU one of milliseconds that shares the packed
// weights, so fine steps that waste little compute.
enum class length_buckets : std::uint8_t { powers_of_two, fine };

// A padded length from a short ladder (8, 16, 32, ... capped at the model's maximum), so that texts of many
// lengths share a few programs.
[[nodiscard]] inline std::int64_t bucketed_length(std::int64_t length, std::int64_t max_tokens,
                                                  length_buckets buckets = length_buckets::powers_of_two) {
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

// Rows rounded up to a power of two (at most batch_size): the last, partial batch reuses a program too.
[[nodiscard]] inline std::int64_t bucketed_rows(std::size_t count, std::size_t batch_size) {
    std::size_t rows = 1;
    while (rows < count)
        rows *= 2;
    return static_cast<std::int64_t>(std::min(rows, std::max(batch_size, count)));
}

// One batch: the caller's texts `items` (row r holds items[r]; rows past items.size() are filler) and the
// program inputs.
struct token_batch {
    std::vector<std::size_t> items;
    std::vector<std::int64_t> lengths;
    std::int64_t rows = 0;
    std::int64_t length = 0;
    std::vector<named_tensor> inputs;
};

// Checks every text (not empty, within the model's length, ids in the vocabulary, type ids in range) so a bad
// one is an error naming it rather than a gather out of bounds.
inline void check_token_ids(const text_encoder_config& c, std::span<const std::vector<std::int32_t>> ids,
                            std::span<const std::vector<std::int32_t>> type_ids, std::int64_t max_tokens) {
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

// The texts sorted by length (longest first), cut into batches of at most batch_size, each padded on the
// right.
[[nodiscard]] inline std::vector<token_batch> make_batches(
    const text_encoder_config& c, std::span<const std::vector<std::int32_t>> ids,
    std::span<const std::vector<std::int32_t>> type_ids, std::size_t batch_size, std::int64_t max_tokens,
    length_buckets buckets = length_buckets::powers_of_two) {
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

// A loaded text encoder: the config, the mapped weights, the tokenizer when the folder has one, and the
// programs compiled so far. A head (a pooler and classifier) may be put on top of the hidden states.
class text_encoder {
public:
    // Builds the head's output from the hidden states [rows, length, hidden]; loads its weights with
    // `weights`.
    using head_builder = std::function<tensor<float>(weight_loader& weights, const tensor<float>& hidden)>;

    [[nodiscard]] static text_encoder load(const std::filesystem::path& folder,
                                           const load_options& options = {}) {
        text_encoder encoder;
        auto state = std::make_shared<shared_state>();
        state->config = text_encoder_config::load(folder);
        state->weights = std::make_shared<const checkpoint>(checkpoint::open(folder));
        state->prefix = detect_prefix(*state->weights, state->config);
        encoder.state_ = state;
        encoder.options_ = options.compile;
        const bool on_cpu = options.compile.target == device::cpu ||
                            (options.compile.target == device::automatic && !anvil::detail::ane::available());
        encoder.buckets_ = on_cpu ? length_buckets::fine : length_buckets::powers_of_two;
        encoder.max_tokens_ = state->config.max_tokens();
        // Without tokenizer files (an XLM-R folder with only sentencepiece.bpe.model, say) the encoder takes
        // token ids only.
        if (std::filesystem::exists(folder / "tokenizer.json") ||
            std::filesystem::exists(folder / "vocab.txt") ||
            (std::filesystem::exists(folder / "vocab.json") &&
             std::filesystem::exists(folder / "merges.txt"))) {
            encoder.tokenizer_ = std::make_shared<const tokenizer>(tokenizer::load(folder));
            const auto limit = static_cast<std::int64_t>(encoder.tokenizer_->model_max_length());
            if (limit > 0) encoder.max_tokens_ = std::min(encoder.max_tokens_, limit);
        }
        encoder.set_head({});
        return encoder;
    }

    // Replaces the head (none: the outputs are the hidden states); every weight is loaded and checked now.
    void set_head(head_builder head) {
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
                auto out = text_encoder_forward(g, w, state->config, key[0], key[1]);
                if (state->head) out = state->head(loader, out);
                return {out.value()};
            });
    }

    // Runs the texts in batches and hands each batch's output to `consume` (rows in the batch's order).
    void run(std::span<const std::vector<std::int32_t>> ids,
             std::span<const std::vector<std::int32_t>> type_ids, std::size_t batch_size,
             const std::function<void(const token_batch&, const host_tensor&)>& consume) {
        for (const token_batch& batch :
             make_batches(config(), ids, type_ids, batch_size, max_tokens_, buckets_)) {
            program& p = programs_->at({batch.rows, batch.length});
            const auto outputs = p.run(std::span<const named_tensor>(batch.inputs));
            consume(batch, outputs.at(0));
        }
    }

    // Limits the length of texts (a sentence-transformers folder's max_seq_length).
    void limit_tokens(std::int64_t limit) {
        if (limit > 0) max_tokens_ = std::min(max_tokens_, limit);
    }

    [[nodiscard]] const text_encoder_config& config() const noexcept { return state_->config; }
    [[nodiscard]] const checkpoint& weights() const noexcept { return *state_->weights; }
    [[nodiscard]] const std::string& prefix() const noexcept { return state_->prefix; }
    [[nodiscard]] std::int64_t max_tokens() const noexcept { return max_tokens_; }
    [[nodiscard]] std::size_t compiled_programs() const { return programs_->count(); }
    [[nodiscard]] bool has_tokenizer() const noexcept { return tokenizer_ != nullptr; }
    [[nodiscard]] const tokenizer& text_tokenizer() const {
        if (!tokenizer_) {
            throw io_error(
                "text encoder: the model folder has no tokenizer (tokenizer.json, vocab.txt or vocab.json + "
                "merges.txt); "
                "pass token ids instead");
        }
        return *tokenizer_;
    }
    // Options for the tokenizer: special tokens, truncated to what the model takes.
    [[nodiscard]] anvil::encode_options tokenizer_options() const {
        anvil::encode_options o;
        o.max_length = static_cast<std::size_t>(max_tokens_);
        return o;
    }

private:
    struct shared_state {
        text_encoder_config config;
        std::shared_ptr<const checkpoint> weights;
        std::string prefix;
        head_builder head;
    };

    std::shared_ptr<const shared_state> state_;
    std::shared_ptr<const tokenizer> tokenizer_;
    compile_options options_;
    std::unique_ptr<compiled_shapes> programs_;
    std::int64_t max_tokens_ = 0;
    length_buckets buckets_ = length_buckets::powers_of_two;
};

}  // namespace anvil::models
