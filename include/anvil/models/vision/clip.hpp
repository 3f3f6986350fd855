// anvil: CLIP (Hugging Face's CLIPModel): an image tower and a text tower that embed into one space, for
// zero-shot classification and image or text search. Read top to bottom:
//
//   vision: pixels [N, C, H, W] -> patch conv (kernel = stride = patch, no bias) -> [N, P, hidden]
//           -> class embedding prepended -> + position embeddings -> pre_layrnorm -> L pre-norm layers
//           -> post_layernorm on the class token -> visual_projection -> image features [N, projection]
//   text:   ids [N, S] -> token + position embeddings -> L pre-norm layers, causal -> final_layer_norm
//           -> the EOS token's row -> text_projection -> text features [N, projection]
//   both:   features / ||features||; logits_per_image = exp(logit_scale) * image_embeds . text_embeds
//
// The text tower pools the row of the first EOS token (ids == eos_token_id); a legacy config whose
// eos_token_id is 2 pools at the argmax of the ids instead, as Hugging Face does (the real EOS is CLIP's
// largest id). The attention is causal, so the tokens after the EOS never reach its row: padding a text to
// max_position_embeddings, as CLIPProcessor(padding="max_length") does, gives the same features as padding
// it to any length past its EOS. A batch is padded to the shortest of 8, 16, 32, 64 and
// max_position_embeddings that holds its longest text: a few programs, and short labels cost a tenth of the
// full length.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "anvil/backend/coreml/export.hpp"
#include "anvil/compilation.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/expr/tensor.hpp"
#include "anvil/fwd.hpp"
#include "anvil/io/image_transforms.hpp"
#include "anvil/io/tokenizer.hpp"
#include "anvil/models/common/blocks.hpp"
#include "anvil/models/common/compiled_shapes.hpp"
#include "anvil/models/common/config.hpp"
#include "anvil/models/common/weights.hpp"

namespace anvil::models {

// CLIPTextConfig, with transformers' defaults (openai/clip-vit-base-patch32).
struct clip_text_config {
    std::int64_t vocab_size = 49408;
    std::int64_t hidden = 512;         // hidden_size
    std::int64_t heads = 8;            // num_attention_heads
    std::int64_t intermediate = 2048;  // intermediate_size
    std::int64_t layers = 12;          // num_hidden_layers
    std::int64_t max_positions = 77;   // max_position_embeddings: the padded text length
    double layer_norm_eps = 1e-5;
    activation act = activation::quick_gelu;  // hidden_act
    std::int64_t bos_token_id = 49406;
    std::int64_t eos_token_id = 49407;

    // eos_token_id 2 is the value configs had before transformers read it: pool at the argmax of the ids.
    [[nodiscard]] bool legacy_pooling() const noexcept { return eos_token_id == 2; }
};

// CLIPVisionConfig, with transformers' defaults (ViT-B/32).
struct clip_vision_config {
    std::int64_t hidden = 768;
    std::int64_t heads = 12;
    std::int64_t intermediate = 3072;
    std::int64_t layers = 12;
    std::int64_t image_size = 224;
    std::int64_t patch_size = 32;
    std::int64_t channels = 3;
    double layer_norm_eps = 1e-5;
    activation act = activation::quick_gelu;

    [[nodiscard]] std::int64_t grid() const noexcept { return image_size / patch_size; }
    [[nodiscard]] std::int64_t patches() const noexcept { return grid() * grid(); }
    [[nodiscard]] std::int64_t tokens() const noexcept { return patches() + 1; }  // the class token first
};

// CLIPConfig: the two towers (text_config, vision_config) and the shared projection size.
struct clip_config {
    clip_text_config text;
    clip_vision_config vision;
    std::int64_t projection_dim = 512;

    [[nodiscard]] static clip_config from_json(const config_reader& config);
};

struct clip_text_weights {
    tensor<float> token_embedding;     // [vocab, hidden]
    tensor<float> position_embedding;  // [max_positions, hidden]
    std::vector<pre_norm_encoder_layer> layers;
    norm_layer final_norm;
    linear_layer projection;  // [projection_dim, hidden], no bias
};

struct clip_vision_weights {
    tensor<float> class_embedding;     // [hidden]
    tensor<float> patch_weight;        // [hidden, channels, patch, patch], no bias
    tensor<float> position_embedding;  // [patches + 1, hidden]
    norm_layer pre_norm;               // pre_layrnorm
    std::vector<pre_norm_encoder_layer> layers;
    norm_layer post_norm;     // on the class token
    linear_layer projection;  // [projection_dim, hidden], no bias
};

// `<prefix>encoder.layers.{i}.self_attn.q_proj.weight`, ...: both towers name their layers alike.
[[nodiscard]] pre_norm_encoder_layer load_clip_layer(weight_loader& weights, const std::string& prefix,
                                                     std::int64_t hidden, std::int64_t heads,
                                                     std::int64_t intermediate, double epsilon,
                                                     activation act, std::int64_t index);

[[nodiscard]] clip_text_weights load_clip_text_weights(weight_loader& weights, const clip_config& c);
[[nodiscard]] clip_vision_weights load_clip_vision_weights(weight_loader& weights, const clip_config& c);

// ids i32 [N, S] (S <= max_positions) and pooled f32 [N, S], one 1 per row at the token to pool (a one-hot
// row, applied as a matmul so every backend runs it) -> text features [N, projection_dim], not normalised.
[[nodiscard]] tensor<float> clip_text_features(const clip_text_weights& w, const clip_config& c,
                                               const tensor<std::int32_t>& ids, const tensor<float>& pooled);

// pixels f32 [N, C, image_size, image_size] -> image features [N, projection_dim], not normalised.
[[nodiscard]] tensor<float> clip_image_features(const clip_vision_weights& w, const clip_config& c,
                                                const tensor<float>& pixels);

namespace recipe_detail {

// Where the text tower pools one text's ids: the first EOS, or (legacy configs) the first largest id;
// anvil::error naming the text when it has no EOS.
[[nodiscard]] std::size_t clip_pooled_position(const clip_text_config& c, std::span<const std::int32_t> ids,
                                               std::size_t text);

// Each row of f32 [N, D] divided by its L2 norm (torch's x / x.norm(dim=-1, keepdim=True)), in double.
void normalize_rows(host_tensor& rows);

}  // namespace recipe_detail

// One label of a zero-shot classification: its place in the caller's list, its softmax probability over
// the labels and the scaled cosine similarity the softmax read.
struct zero_shot_label {
    std::size_t index = 0;
    std::string label;
    float probability = 0.0f;
    float logit = 0.0f;
};

// A CLIP model loaded from a Hugging Face CLIPModel folder (config.json, safetensors, tokenizer.json,
// preprocessor_config.json), compiling one program per tower and batch size.
class clip {
public:
    [[nodiscard]] static clip load(const std::filesystem::path& folder, const load_options& options = {});

    // Texts tokenised by the folder's tokenizer (truncated to max_position_embeddings) -> f32 [N,
    // projection_dim], L2-normalised unless `normalize` is false (then what get_text_features gives).
    [[nodiscard]] host_tensor text_embeddings(std::span<const std::string> texts, bool normalize = true);

    // The same for texts already tokenised (with BOS and EOS); each at most max_position_embeddings ids.
    [[nodiscard]] host_tensor text_embeddings_from_ids(std::span<const std::vector<std::int32_t>> ids,
                                                       bool normalize = true);

    // pixels f32 [N, C, image_size, image_size] (what preprocess gives) -> f32 [N, projection_dim].
    [[nodiscard]] host_tensor image_embeddings(const host_tensor& pixels, bool normalize = true);

    // Images through the folder's preprocessing, then image_embeddings.
    [[nodiscard]] host_tensor image_embeddings(std::span<const image> images, bool normalize = true);

    // f32 [N images, T texts]: exp(logit_scale) times the cosine similarity, as CLIPModel's logits_per_image.
    [[nodiscard]] host_tensor logits_per_image(const host_tensor& pixels, std::span<const std::string> texts);

    // Zero-shot classification of each image: every label put into `label_template` at "{}" ("a photo of a
    // {}."; a template without "{}" is an anvil::error), softmax over the labels, best first (ties keep the
    // caller's order). pixels [N, C, H, W] -> N lists of labels.size() entries.
    [[nodiscard]] std::vector<std::vector<zero_shot_label>> zero_shot(
        const host_tensor& pixels, std::span<const std::string> labels,
        std::string_view label_template = "a photo of a {}.");

    [[nodiscard]] const clip_config& config() const noexcept { return config_; }
    [[nodiscard]] const tokenizer& text_tokenizer() const noexcept { return *tokenizer_; }
    // The text of token ids as CLIP's tokenizers decode them: special tokens skipped, each "</w>" (the end
    // of a word) a space, the ends trimmed ("a photo , of a cat ." for "A photo, of a cat."). Throws when
    // the folder has no tokenizer.
    [[nodiscard]] std::string text(std::span<const std::int32_t> ids) const;
    // From preprocessor_config.json where the folder has one, else CLIPImageProcessor's defaults at the
    // config's image size (resize the shortest edge, bicubic, center crop, CLIP's mean and std).
    [[nodiscard]] const image_preprocessing& preprocessing() const noexcept { return preprocessing_; }
    // The checkpoint's logit_scale (a log: logits use its exponential).
    [[nodiscard]] float logit_scale() const noexcept { return logit_scale_; }
    [[nodiscard]] std::size_t compiled_programs() const { return text_->count() + vision_->count(); }

    // The graphs the programs run, not compiled: ids i32 [rows, length] and pooled f32 [rows, length] (length
    // at most max_positions) -> text features; pixels [rows, C, H, W] -> image features.
    [[nodiscard]] std::vector<value> build_text_graph(graph& g, std::int64_t rows,
                                                      std::int64_t length) const {
        const std::int64_t key[] = {rows, length};
        return text_->build(g, key);
    }
    [[nodiscard]] std::vector<value> build_image_graph(graph& g, std::int64_t rows) const {
        const std::int64_t key[] = {rows};
        return vision_->build(g, key);
    }

    // The two functions of an exported Core ML package (anvil export), each with L2-normalised embeddings
    // as CLIPModel's text_embeds / image_embeds: `text` takes input_ids int32 [1, length] (padded after
    // the EOS with any id) and pooled fp16 [1, length] (1 at the first EOS, the token CLIP pools, 0
    // elsewhere) and returns text_embeds [1, projection_dim]; `image` takes pixels fp16 [1, C, H, W]
    // (preprocessing() applied) and returns image_embeds [1, projection_dim]. logits_per_image is
    // exp(logit_scale()) times their dot product.
    [[nodiscard]] mlpackage_function export_text_function(std::int64_t length) const;
    [[nodiscard]] mlpackage_function export_image_function() const;

private:
    clip() = default;

    clip_config config_;
    float logit_scale_ = 0.0f;
    std::shared_ptr<const tokenizer> tokenizer_;
    image_preprocessing preprocessing_;
    std::unique_ptr<compiled_shapes> text_, vision_;
};

}  // namespace anvil::models

#if ANVIL_DEFINITIONS
#include "anvil/models/vision/clip-inl.hpp"
#endif
