// anvil: decoder language models — GPT-2 and the Llama family (Llama, Qwen2/2.5, Qwen3, Mistral) — as one
// mechanism: a config read from config.json (+ generation_config.json), a table of weight names per family,
// and one step graph built from the shared decoder layer (blocks.hpp). A step takes S new tokens per row of a
// batch, attends to a cache of T earlier keys and values that the caller keeps (resident on the device, see
// causal_lm.hpp), and returns the logits and the S new keys and values per layer. Positions enter as host
// tables (RoPE cos/sin, rope.hpp; GPT-2's position ids) and every masking rule (causal, padding, sliding
// window, cache slots not yet filled) as one additive mask, so a single graph serves every family and call.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/backend/program.hpp"
#include "anvil/compilation.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/core/json_value.hpp"
#include "anvil/expr/tensor.hpp"
#include "anvil/fwd.hpp"
#include "anvil/models/common/blocks.hpp"
#include "anvil/models/common/config.hpp"
#include "anvil/models/common/rope.hpp"
#include "anvil/models/common/weights.hpp"

namespace anvil::models {

enum class decoder_family : std::uint8_t { gpt2, llama, qwen2, qwen3, mistral };

struct decoder_config {
    decoder_family family = decoder_family::llama;
    std::string model_type;
    std::int64_t vocab_size = 0;
    std::int64_t hidden = 0;        // hidden_size / n_embd
    std::int64_t layers = 0;        // num_hidden_layers / n_layer
    std::int64_t heads = 0;         // num_attention_heads / n_head
    std::int64_t kv_heads = 0;      // num_key_value_heads (grouped-query attention when < heads)
    std::int64_t head_dim = 0;      // head_dim (Qwen3 states it; else hidden / heads)
    std::int64_t intermediate = 0;  // intermediate_size / n_inner
    std::int64_t max_position_embeddings = 2048;
    double norm_eps = 1e-6;  // rms_norm_eps / layer_norm_epsilon
    activation act = activation::silu;
    rope_config rope;          // rotary_dim 0: learned positions (GPT-2)
    bool qkv_bias = false;     // Qwen2: always; Llama: attention_bias
    bool output_bias = false;  // Llama: attention_bias; GPT-2: always
    bool mlp_bias = false;     // Llama: mlp_bias; GPT-2: always
    bool qk_norm = false;      // Qwen3
    bool tie_word_embeddings = false;
    std::int64_t sliding_window = 0;  // Mistral: key k visible from query q iff 0 <= q - k < window; 0: none
    std::vector<double> attention_scales;  // per layer (GPT-2's scale_attn_* options); 0: 1 / sqrt(head_dim)
    std::vector<std::int32_t> eos_token_ids;  // config.json and generation_config.json, merged
    std::optional<std::int32_t> bos_token_id;

    [[nodiscard]] bool learned_positions() const noexcept { return family == decoder_family::gpt2; }

    // `generation` (generation_config.json, may be null) adds its eos/bos ids.
    [[nodiscard]] static decoder_config from_json(const json::value& document, std::string source,
                                                  const json::value* generation = nullptr,
                                                  std::string generation_source = "generation_config.json");

    [[nodiscard]] static decoder_config load(const std::filesystem::path& folder);
};

namespace recipe_detail {

// eos_token_id / bos_token_id: an integer or a list of them (absent or null: none).
void read_token_ids(const config_reader& config, std::string_view key, std::vector<std::int32_t>& out);

void read_rope_scaling(const config_reader& config, decoder_config& c);

}  // namespace recipe_detail

// --- weights ---

// A decoder's weights as graph values: every linear as nn.Linear [out, in] (GPT-2's Conv1D [in, out] arrives
// transposed, see decoder_weight_source).
struct decoder_weights {
    tensor<float> token_embeddings;                    // [vocab, hidden]
    std::optional<tensor<float>> position_embeddings;  // GPT-2: [n_positions, hidden]
    std::vector<decoder_layer> layers;
    norm_layer final_norm;
    tensor<float> head;  // [vocab, hidden]: lm_head.weight, or the token embeddings when tied
};

// Where a checkpoint's tensors come from: the mapped file, plus GPT-2's Conv1D weights transposed once at
// load into host tensors that every compiled program's constants share.
class decoder_weight_source {
public:
    decoder_weight_source(std::shared_ptr<const checkpoint> weights, const decoder_config& c);

    [[nodiscard]] const std::string& prefix() const noexcept { return prefix_; }
    [[nodiscard]] const std::shared_ptr<const checkpoint>& file() const noexcept { return weights_; }

    // The tensor `name` (after the prefix) with shape `expected`, as an f32 value of loader's graph.
    [[nodiscard]] tensor<float> load(weight_loader& loader, const std::string& name,
                                     const dims& expected) const;

    // A source that reads each tensor of `replacements` (names after the prefix, shapes as stored in the
    // checkpoint's nn.Linear layout) from there instead of the checkpoint: how fp16 rescaling
    // (fp16_rescale.hpp) folds its powers of two into the weights once, for every program compiled after.
    [[nodiscard]] std::shared_ptr<const decoder_weight_source> with_tensors(
        std::map<std::string, host_tensor> replacements) const;

private:
    [[nodiscard]] const tensor_view& find(const std::string& name, const dims& expected,
                                          std::string_view layout) const;

    // Conv1D `name` (weight [in, out], bias [out]) as nn.Linear pieces [out / n, in] and [out / n], one per
    // entry of `pieces` (GPT-2's fused c_attn holds query, key and value). Weights are transposed bytes as
    // they are (any element type); biases are views of the mapped file.
    void transpose_conv1d(const std::string& name, std::int64_t in, std::int64_t out,
                          const std::vector<std::string>& pieces);

    void prepare_gpt2(const decoder_config& c);

    std::shared_ptr<const checkpoint> weights_;
    std::string prefix_;
    // GPT-2's Conv1D tensors as nn.Linear ones, and the tensors with_tensors replaced: read before the file.
    std::map<std::string, host_tensor> prepared_;
};

namespace recipe_detail {

[[nodiscard]] linear_layer load_decoder_linear(weight_loader& loader, const decoder_weight_source& source,
                                               const std::string& name, std::int64_t out, std::int64_t in,
                                               bool bias);

[[nodiscard]] norm_layer load_decoder_norm(weight_loader& loader, const decoder_weight_source& source,
                                           const std::string& name, std::int64_t size, double eps,
                                           bool layer_norm);

// GPT-2's attention: the fused c_attn comes as three prepared pieces (decoder_weight_source).
[[nodiscard]] attention_layer load_gpt2_attention(weight_loader& loader, const decoder_weight_source& source,
                                                  const decoder_config& c, const std::string& p);

}  // namespace recipe_detail

[[nodiscard]] decoder_weights load_decoder_weights(weight_loader& loader, const decoder_weight_source& source,
                                                   const decoder_config& c);

// --- the step graph ---

// The step graph's inputs (contract: ids [B, S] i32; cos, sin [B, 1, S, R/2]; mask [B, 1, S, T + W + S]
// additive; positions [B, S] i32 for learned positions; select [B, 1, S] one-hot; resident k<i>, v<i>
// [B, kv_heads, T, D] and, with a decode window (W > 0), wk<i>, wv<i> [B, kv_heads, W, D]) and outputs
// (logits [B, S, V] or [B, 1, V], then k<i>, v<i> [B, kv_heads, S, D]).
inline constexpr std::string_view step_ids_name = "ids";
inline constexpr std::string_view step_cos_name = "cos";
inline constexpr std::string_view step_sin_name = "sin";
inline constexpr std::string_view step_mask_name = "mask";
inline constexpr std::string_view step_positions_name = "positions";
inline constexpr std::string_view step_select_name = "select";
[[nodiscard]] std::string cache_key_name(std::int64_t layer);
[[nodiscard]] std::string cache_value_name(std::int64_t layer);
[[nodiscard]] std::string window_key_name(std::int64_t layer);
[[nodiscard]] std::string window_value_name(std::int64_t layer);

// The stages a step graph marks (graph::begin_stage), in order: the embedding, each layer, the head (final
// norm and LM head). The Neural Engine chunks a model by them, and the decoder planner names its chunks so.
inline constexpr std::string_view embedding_stage_label = "embedding";
inline constexpr std::string_view head_stage_label = "head";
[[nodiscard]] std::string layer_stage_label(std::int64_t layer);

// The inputs of one step for `batch` rows of `tokens` new tokens each. `ids` [B, S]; `positions` [B, S]
// (-1: an unused slot); `cache_positions` [B, T] (-1: a slot the row has not filled; with a decode window, T
// counts the cache's slots and then the window's); `select` one position per row whose logits the step
// returns (empty: every position's). A query sees a key iff the key's position is at most its own (and
// within the sliding window); an unused slot sees only itself, so its softmax stays finite.
[[nodiscard]] std::vector<named_tensor> decoder_step_inputs(
    const decoder_config& c, std::span<const std::int32_t> ids, std::span<const std::int64_t> positions,
    std::span<const std::int64_t> cache_positions, std::int64_t batch, std::int64_t tokens,
    std::int64_t context, std::span<const std::int64_t> select);

struct step_shape {
    std::int64_t batch = 1;    // B: streams
    std::int64_t tokens = 1;   // S: new tokens per stream
    std::int64_t context = 1;  // T: cache slots
    bool select = false;       // logits of one chosen position per stream
    std::int64_t window = 0;   // W: decode window slots read after the cache (causal_lm.hpp); 0: none
};

// Constant RoPE tables [P, R / 2] (row p: position p) the step gathers by an input `positions` [B, S]
// int32, as learned positions are gathered: an exported model's form, instead of the inputs cos and sin
// [B, 1, S, R / 2] the runner fills per call.
struct step_rope {
    tensor<float> cos, sin;
};

// The outputs of one step: logits, then k0, v0, k1, v1, ...
[[nodiscard]] std::vector<value> decoder_step(graph& g, const decoder_weights& w, const decoder_config& c,
                                              const step_shape& s,
                                              const std::optional<step_rope>& rope_tables = std::nullopt);

// The step a Core ML package runs with its KV caches as states (anvil export; backend/coreml/export.hpp):
// one stream, `tokens` new tokens, `context` cache slots. Inputs: ids [1, S] and positions [1, S] (int32;
// a RoPE model gathers cos and sin from constant tables of `context` rows, so positions must be below it),
// mask [1, 1, S, T + S] as decoder_step's, and cache_write [1, 1, T, S], one-hot: 1 at (t, s) puts new
// token s's key and value in slot t. The caches k<i>/v<i> [1, kv_heads, T, D] are inputs the export turns
// into states. Outputs: logits [1, S, V], then per layer the updated caches,
// cache * (1 - sum_s cache_write) + cache_write @ new, which replace the states. Throws unsupported_error
// for dynamic RoPE scaling past max_position_embeddings (its tables would depend on the call).
inline constexpr std::string_view step_cache_write_name = "cache_write";
[[nodiscard]] std::vector<value> decoder_state_step(graph& g, const decoder_weights& w,
                                                    const decoder_config& c, std::int64_t tokens,
                                                    std::int64_t context);

// What turns a step's new keys and values into the caches' new contents, for every stateful step (the LMs'
// decoder_state_step, Whisper's decoder): outputs[1 + 2i] and outputs[2 + 2i], layer i's new keys and values
// [1, kv_heads, S, D], are replaced by cache * (1 - sum_s cache_write) + cache_write @ new, where the cache
// is the graph input cache_key_name(i) / cache_value_name(i) [1, kv_heads, T, D] and cache_write the input
// step_cache_write_name [1, 1, T, S] this adds. outputs[0] is left alone.
void write_step_into_caches(graph& g, std::vector<value>& outputs, std::int64_t tokens, std::int64_t context,
                            std::int64_t kv_heads, std::int64_t head_dim);

}  // namespace anvil::models

#if ANVIL_DEFINITIONS
#include "anvil/models/llm/decoder_lm-inl.hpp"
#endif
