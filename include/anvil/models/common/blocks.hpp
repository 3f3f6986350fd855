// anvil: the building blocks every model recipe shares — a linear layer, a norm, self-attention and the MLP —
// each a struct of weights loaded by name (weights.hpp) and a function that applies it. A model family
// differs by its config and its weight names, never by a copy of these.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/compilation.hpp"
#include "anvil/expr/tensor.hpp"
#include "anvil/expr/transformer.hpp"
#include "anvil/models/common/weights.hpp"

namespace anvil::models {

enum class activation : std::uint8_t { gelu, gelu_tanh, quick_gelu, relu, silu };

// Hugging Face's `hidden_act` names.
[[nodiscard]] activation parse_activation(std::string_view name);

[[nodiscard]] tensor<float> activate(const tensor<float>& x, activation kind);

// nn.Linear: weight [out, in], bias [out].
struct linear_layer {
    tensor<float> weight;
    std::optional<tensor<float>> bias;
};

[[nodiscard]] linear_layer load_linear(weight_loader& weights, const std::string& prefix, std::int64_t out,
                                       std::int64_t in, bool with_bias = true);

[[nodiscard]] tensor<float> apply(const linear_layer& layer, const tensor<float>& x);

// LayerNorm (weight and bias) or RMSNorm (weight only) over the last axis.
struct norm_layer {
    enum class kind : std::uint8_t { layer_norm, rms_norm };
    kind type = kind::layer_norm;
    tensor<float> weight;
    std::optional<tensor<float>> bias;
    double epsilon = 1e-5;
};

[[nodiscard]] norm_layer load_layer_norm(weight_loader& weights, const std::string& prefix, std::int64_t size,
                                         double epsilon);

[[nodiscard]] tensor<float> apply(const norm_layer& norm, const tensor<float>& x);

// One BatchNorm's statistics over a batch in train mode: the per-channel mean and biased variance [C] over N,
// H and W, and that count N H W, which the running variance's unbiased update (var * m / (m - 1)) needs.
struct batch_norm_statistics {
    std::string norm;  // the BatchNorm's prefix: <norm>.running_mean, .running_var, .num_batches_tracked
    tensor<float> mean;
    tensor<float> variance;
    std::int64_t count = 0;
};

struct batch_norm_pass {
    tensor<float> output;
    batch_norm_statistics statistics;
};

// nn.BatchNorm2d in train mode over x [N, C, H, W], from differentiable primitives so that the gradients
// flow through the batch statistics too: (x - mean) / sqrt(var + epsilon) * weight + bias with the batch's
// per-channel mean and biased variance, `<norm>.weight` and `.bias` [C] read through `weights`. The running
// statistics are neither read nor changed: the caller updates them from the returned ones. Fewer than two
// values per channel is an anvil::shape_error, as PyTorch refuses it (no unbiased variance).
[[nodiscard]] batch_norm_pass train_mode_batch_norm(weight_loader& weights, const std::string& norm,
                                                    const tensor<float>& x, double epsilon);

// nn.BatchNorm2d in eval mode (model.eval()) over x [N, C, H, W]: (x - running_mean) / sqrt(running_var +
// epsilon) * weight + bias, `<norm>.running_mean`, `.running_var`, `.weight` and `.bias` [C] all read through
// `weights`, so that fine-tuning can feed the running statistics it keeps as program inputs and evaluate
// between epochs without compiling again. Built from primitives as train mode is: the batch_norm op's Neural
// Engine lowering takes constant statistics only.
[[nodiscard]] tensor<float> eval_mode_batch_norm(weight_loader& weights, const std::string& norm,
                                                 const tensor<float>& x, double epsilon);

// nn.Dropout at one site: the probability the config gives that site and training's hook (weights.hpp's
// dropout_hook). A default-constructed one, or one loaded for inference, is the identity.
struct dropout_layer {
    double probability = 0.0;
    dropout_hook hook;

    [[nodiscard]] bool active() const noexcept { return hook && probability > 0.0; }
};

// A site with this probability (config_reader::probability reads it), dropping when `weights` was given
// training's hook.
[[nodiscard]] dropout_layer load_dropout(const weight_loader& weights, double probability);

[[nodiscard]] tensor<float> apply(const dropout_layer& dropout, const tensor<float>& x);

// Multi-head self-attention with separate query, key, value and output projections; kv_heads < heads is
// grouped-query attention. Dropout (training only) on the attention probabilities and on the output
// projection's result, where the family's Hugging Face class has them.
struct attention_layer {
    linear_layer query, key, value, output;
    std::int64_t heads = 0;
    std::int64_t kv_heads = 0;
    std::int64_t head_dim = 0;
    dropout_layer probability_dropout;
    dropout_layer output_dropout;
};

namespace recipe_detail {

// [B, S, heads * D] -> [B, heads, S, D]
[[nodiscard]] tensor<float> split_heads(const tensor<float>& x, std::int64_t heads, std::int64_t head_dim);

// [B, heads, S, D] -> [B, S, heads * D]
[[nodiscard]] tensor<float> merge_heads(const tensor<float>& x);

// Each row of x [N, D] divided by its L2 norm, the norm clamped below at 1e-12
// (torch.nn.functional.normalize), in the graph: the embeddings a sentence encoder's or CLIP's exported
// package returns.
[[nodiscard]] tensor<float> l2_normalized_rows(const tensor<float>& x);

}  // namespace recipe_detail

// x [B, S, hidden] -> [B, S, hidden]. `mask`: additive, broadcast to the scores [B, heads, S, S] (e.g.
// [B, 1, 1, S] for padding: 0 where a key may be seen, a large negative number where not).
[[nodiscard]] tensor<float> self_attention(const attention_layer& layer, const tensor<float>& x,
                                           const std::optional<tensor<float>>& mask,
                                           const attention_options& options = {});

// Attention of x's queries [B, S, hidden] over keys and values computed elsewhere, [B, kv_heads, Tk, D]: an
// encoder-decoder's cross-attention (Whisper's decoder over its encoder's output, whose keys and values are
// computed once). -> [B, S, hidden], through the output projection.
[[nodiscard]] tensor<float> cross_attention(const attention_layer& layer, const tensor<float>& x,
                                            const tensor<float>& keys, const tensor<float>& values);

// The feed-forward block: down(act(up(x))), or down(act(gate(x)) * up(x)) when there is a gate (SwiGLU);
// dropout (training only) on down's result.
struct mlp_layer {
    linear_layer up, down;
    std::optional<linear_layer> gate;
    activation act = activation::gelu;
    dropout_layer output_dropout;
};

[[nodiscard]] tensor<float> apply(const mlp_layer& mlp, const tensor<float>& x);

// A transformer encoder layer with the norms after each residual (BERT, RoBERTa):
// h = norm1(x + attention(x)); out = norm2(h + mlp(h)).
struct post_norm_encoder_layer {
    attention_layer attention;
    norm_layer attention_norm;
    mlp_layer mlp;
    norm_layer output_norm;
};

[[nodiscard]] tensor<float> apply(const post_norm_encoder_layer& layer, const tensor<float>& x,
                                  const std::optional<tensor<float>>& mask);

// A transformer encoder layer with the norms before each block, on the residual's branch (ViT, DeiT, CLIP's
// towers): h = x + attention(norm1(x)); out = h + mlp(norm2(h)).
struct pre_norm_encoder_layer {
    norm_layer attention_norm;
    attention_layer attention;
    norm_layer mlp_norm;
    mlp_layer mlp;
};

// `options.causal`: each token attends to itself and the tokens before it (CLIP's text tower).
[[nodiscard]] tensor<float> apply(const pre_norm_encoder_layer& layer, const tensor<float>& x,
                                  const std::optional<tensor<float>>& mask,
                                  const attention_options& options = {});

// Rotary position embedding in the rotate_half form (Llama, GPT-NeoX) with tables given per row:
// x [B, heads, S, D], cos and sin [B, 1, S, R / 2] (broadcast over heads). The first R features rotate in
// pairs (i, i + R/2): x1 cos - x2 sin, x2 cos + x1 sin; the rest pass through. Elementwise ops, so every
// backend runs it and the tables may differ per row (positions, dynamic scaling).
[[nodiscard]] tensor<float> rotate_half_rows(const tensor<float>& x, const tensor<float>& cos,
                                             const tensor<float>& sin);

// A pre-norm decoder layer (GPT-2, Llama, Qwen2/3, Mistral): h = x + attention(norm1(x)); out = h +
// mlp(norm2(h)). Attention reads the cached keys and values followed by this step's; Qwen3 normalises each
// query and key head first (query_norm, key_norm).
struct decoder_layer {
    norm_layer attention_norm;
    attention_layer attention;
    std::optional<norm_layer> query_norm, key_norm;
    norm_layer mlp_norm;
    mlp_layer mlp;
    double attention_scale = 0.0;  // 0: 1 / sqrt(head_dim)
};

// What one decoder layer gives: the hidden states and this step's keys (rotated) and values
// [B, kv_heads, S, D], which the caller appends to the cache.
struct decoder_layer_result {
    tensor<float> hidden, key, value;
};

// Self-attention of a step's rows `h` (already normalised) [B, S, hidden] over the earlier keys and values
// (parts [B, kv_heads, T_i, D], read in order) followed by its own: the projections split into heads, the
// per-head query and key norms and the rotary embedding where given, the output projection. `hidden` is
// that projection (before the residual); key (rotated) and value are this step's. The LMs' decoder layers and
// Whisper's decoder share it.
struct cached_attention_options {
    const norm_layer* query_norm = nullptr;  // Qwen3
    const norm_layer* key_norm = nullptr;
    const std::pair<tensor<float>, tensor<float>>* rope = nullptr;  // cos, sin [B, 1, S, R / 2]
    double scale = 0.0;                                             // 0: 1 / sqrt(head_dim)
};
[[nodiscard]] decoder_layer_result cached_self_attention(const attention_layer& a, const tensor<float>& h,
                                                         const std::vector<tensor<float>>& earlier_keys,
                                                         const std::vector<tensor<float>>& earlier_values,
                                                         const tensor<float>& mask,
                                                         const cached_attention_options& options = {});

// x [B, S, hidden]; earlier_keys, earlier_values: the keys and values before this step's, as parts
// [B, kv_heads, T_i, D] read in order (a KV cache, then a decode window); mask additive, broadcast to the
// scores [B, heads, S, sum T_i + S]; rope: cos, sin [B, 1, S, R / 2] (none for learned positions).
[[nodiscard]] decoder_layer_result apply(const decoder_layer& layer, const tensor<float>& x,
                                         const std::vector<tensor<float>>& earlier_keys,
                                         const std::vector<tensor<float>>& earlier_values,
                                         const tensor<float>& mask,
                                         const std::optional<std::pair<tensor<float>, tensor<float>>>& rope);

// One cache [B, kv_heads, T, D] of earlier keys and values.
[[nodiscard]] decoder_layer_result apply(const decoder_layer& layer, const tensor<float>& x,
                                         const tensor<float>& cached_key, const tensor<float>& cached_value,
                                         const tensor<float>& mask,
                                         const std::optional<std::pair<tensor<float>, tensor<float>>>& rope);

}  // namespace anvil::models

#if ANVIL_DEFINITIONS
#include "anvil/models/common/blocks-inl.hpp"
#endif
