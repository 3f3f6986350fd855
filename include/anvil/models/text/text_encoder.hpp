// anvil: the text encoders — BERT, RoBERTa, XLM-R, MPNet and DistilBERT — as one mechanism. A family differs
// by its config keys and a table of weight names; every one is embeddings (word + position (+ token type),
// then LayerNorm) and the post-norm encoder stack of bert.hpp. Texts run in batches sorted by length, each
// padded to a bucketed length, so a handful of compiled programs (one per {rows, length}) serve any mix of
// texts. sentence_encoder.hpp and cross_encoder.hpp put pooling and classification heads on top.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "anvil/compilation.hpp"
#include "anvil/core/json_value.hpp"
#include "anvil/expr/tensor.hpp"
#include "anvil/fwd.hpp"
#include "anvil/io/tokenizer.hpp"
#include "anvil/models/common/compiled_shapes.hpp"
#include "anvil/models/common/weights.hpp"
#include "anvil/models/text/bert.hpp"

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

[[nodiscard]] text_family_table family_table(text_family family);

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
    // The sequence-classification head's dropout (training only): classifier_dropout, else
    // hidden_dropout_prob (BERT, RoBERTa, XLM-R); hidden_dropout_prob (MPNet); seq_classif_dropout
    // (DistilBERT). The embeddings' and the layers' are in `stack`.
    double classifier_dropout = 0.1;

    [[nodiscard]] text_family_table table() const { return family_table(family); }
    [[nodiscard]] std::int64_t first_position() const { return padding_idx < 0 ? 0 : padding_idx + 1; }
    // The longest sequence the position table holds.
    [[nodiscard]] std::int64_t max_tokens() const { return max_position_embeddings - first_position(); }

    [[nodiscard]] static text_encoder_config from_json(const json::value& document, std::string source);

    [[nodiscard]] static text_encoder_config load(const std::filesystem::path& folder);
};

// MPNet's relative_position_bucket (modeling_mpnet.py) for relative position `memory - context`, with its
// defaults: 32 buckets, max_distance 128. The logarithm is taken in float32, as torch does.
[[nodiscard]] std::int64_t mpnet_relative_bucket(std::int64_t relative_position);

// The weights of a text encoder: `prefix` is "" or the family's base prefix ("bert.", ...).
struct text_encoder_weights {
    tensor<float> word_embeddings;                       // [vocab, hidden]
    tensor<float> position_embeddings;                   // [max_position_embeddings, hidden]
    std::optional<tensor<float>> token_type_embeddings;  // [type_vocab, hidden]
    norm_layer embedding_norm;
    dropout_layer embedding_dropout;  // after embedding_norm
    std::vector<post_norm_encoder_layer> layers;
    std::optional<tensor<float>> relative_attention_bias;  // MPNet: [buckets, heads]
};

[[nodiscard]] text_encoder_weights load_text_encoder(weight_loader& weights, const text_encoder_config& c,
                                                     const std::string& prefix);

// The prefix the checkpoint's encoder tensors carry: "" (what AutoModel and sentence-transformers save) or
// the family's base prefix (what the *ForSequenceClassification classes save).
[[nodiscard]] std::string detect_prefix(const checkpoint& weights, const text_encoder_config& c);

// The graph's inputs, each [rows, length]: token ids, position ids (computed on the host: RoBERTa's depend
// on where the padding is), token types (families that have them) and the padding mask (1 token, 0 padding).
inline constexpr std::string_view input_ids_name = "input_ids";
inline constexpr std::string_view position_ids_name = "position_ids";
inline constexpr std::string_view token_type_ids_name = "token_type_ids";
inline constexpr std::string_view attention_mask_name = "attention_mask";

// How the graph gets position and token type ids: as inputs (what the host batches compute), or baked in
// for right-padded texts (positions 0.. offset as the family offsets them; `baked` also type 0), so an
// exported sentence encoder takes only input_ids and attention_mask and a cross-encoder those and its
// pair's token_type_ids (`baked_positions`): a padding token's position cannot change the real tokens'
// results, since the mask hides it from attention and pooling.
enum class text_positions : std::uint8_t { inputs, baked, baked_positions };

// The last hidden states [rows, length, hidden] for inputs of that shape.
[[nodiscard]] tensor<float> text_encoder_forward(graph& g, const text_encoder_weights& w,
                                                 const text_encoder_config& c, std::int64_t rows,
                                                 std::int64_t length,
                                                 text_positions positions = text_positions::inputs);

// --- batching on the host ---

// How finely padded lengths are bucketed. Each distinct length is a program: on the Neural Engine a
// compilation of seconds, so few (powers of two); on the CPU one of milliseconds that shares the packed
// weights, so fine steps that waste little compute.
enum class length_buckets : std::uint8_t { powers_of_two, fine };

// A padded length from a short ladder (8, 16, 32, ... capped at the model's maximum), so that texts of many
// lengths share a few programs.
[[nodiscard]] std::int64_t bucketed_length(std::int64_t length, std::int64_t max_tokens,
                                           length_buckets buckets = length_buckets::powers_of_two);

// Rows rounded up to a power of two (at most batch_size): the last, partial batch reuses a program too.
[[nodiscard]] std::int64_t bucketed_rows(std::size_t count, std::size_t batch_size);

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
void check_token_ids(const text_encoder_config& c, std::span<const std::vector<std::int32_t>> ids,
                     std::span<const std::vector<std::int32_t>> type_ids, std::int64_t max_tokens);

// The texts sorted by length (longest first), cut into batches of at most batch_size, each padded on the
// right.
[[nodiscard]] std::vector<token_batch> make_batches(const text_encoder_config& c,
                                                    std::span<const std::vector<std::int32_t>> ids,
                                                    std::span<const std::vector<std::int32_t>> type_ids,
                                                    std::size_t batch_size, std::int64_t max_tokens,
                                                    length_buckets buckets = length_buckets::powers_of_two);

// A loaded text encoder: the config, the mapped weights, the tokenizer when the folder has one, and the
// programs compiled so far. A head (a pooler and classifier) may be put on top of the hidden states.
class text_encoder {
public:
    // Builds the head's output from the hidden states [rows, length, hidden]; loads its weights with
    // `weights`.
    using head_builder = std::function<tensor<float>(weight_loader& weights, const tensor<float>& hidden)>;

    [[nodiscard]] static text_encoder load(const std::filesystem::path& folder,
                                           const load_options& options = {});

    // Replaces the head (none: the outputs are the hidden states); every weight is loaded and checked now.
    void set_head(head_builder head);

    // Runs the texts in batches and hands each batch's output to `consume` (rows in the batch's order).
    void run(std::span<const std::vector<std::int32_t>> ids,
             std::span<const std::vector<std::int32_t>> type_ids, std::size_t batch_size,
             const std::function<void(const token_batch&, const host_tensor&)>& consume);

    // Limits the length of texts (a sentence-transformers folder's max_seq_length).
    void limit_tokens(std::int64_t limit);

    [[nodiscard]] const text_encoder_config& config() const noexcept { return state_->config; }
    [[nodiscard]] const checkpoint& weights() const noexcept { return *state_->weights; }
    [[nodiscard]] const std::string& prefix() const noexcept { return state_->prefix; }
    [[nodiscard]] std::int64_t max_tokens() const noexcept { return max_tokens_; }
    [[nodiscard]] std::size_t compiled_programs() const { return programs_->count(); }
    // The graph of `rows` right-padded texts of `length` tokens (inputs input_ids, attention_mask and, with
    // baked_positions, token_type_ids) -> the head's output, not compiled: what `anvil export` writes.
    [[nodiscard]] std::vector<value> build_graph(graph& g, std::int64_t rows, std::int64_t length,
                                                 text_positions ids = text_positions::baked) const {
        if (ids == text_positions::inputs) throw error("text encoder: build_graph bakes the position ids in");
        const std::int64_t key[] = {rows, length, static_cast<std::int64_t>(ids)};
        return programs_->build(g, key);
    }
    [[nodiscard]] bool has_tokenizer() const noexcept { return tokenizer_ != nullptr; }
    [[nodiscard]] const tokenizer& text_tokenizer() const;
    // Options for the tokenizer: special tokens, truncated to what the model takes.
    [[nodiscard]] anvil::encode_options tokenizer_options() const;

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

#if ANVIL_DEFINITIONS
#include "anvil/models/text/text_encoder-inl.hpp"
#endif
