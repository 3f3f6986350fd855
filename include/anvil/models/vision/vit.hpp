// anvil: ViT and DeiT image classifiers (Hugging Face's ViTForImageClassification, DeiTForImageClassification
// and DeiTForImageClassificationWithTeacher). One recipe: DeiT differs from ViT only by a second prepended
// token (the distillation token) and, with a teacher, a second head on it. Read top to bottom:
//
//   pixels [N, C, H, W] -> patch embedding (a conv with kernel = stride = patch) -> [N, P, hidden]
//   -> [CLS] (and DeiT's distillation token) prepended -> + position embeddings [1, T, hidden]
//   -> L pre-norm encoder layers -> final layernorm -> classifier on token 0
//   (DeiT with teacher: (cls_classifier(token 0) + distillation_classifier(token 1)) / 2).
//
// Images must have the config's image_size: interpolating the position embeddings for other sizes
// (interpolate_pos_encoding) is not supported.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/compilation.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/expr/tensor.hpp"
#include "anvil/fwd.hpp"
#include "anvil/models/common/blocks.hpp"
#include "anvil/models/common/compiled_shapes.hpp"
#include "anvil/models/common/config.hpp"
#include "anvil/models/common/weights.hpp"

namespace anvil::models {

// ViTConfig / DeiTConfig, with transformers' defaults (google/vit-base-patch16-224).
struct vit_config {
    std::string model_type = "vit";    // "vit" or "deit": the weights' prefix, and DeiT's distillation token
    std::int64_t layers = 12;          // num_hidden_layers
    std::int64_t hidden = 768;         // hidden_size
    std::int64_t heads = 12;           // num_attention_heads
    std::int64_t intermediate = 3072;  // intermediate_size
    std::int64_t image_height = 224;   // image_size (a number, or [height, width])
    std::int64_t image_width = 224;
    std::int64_t patch_height = 16;  // patch_size (likewise)
    std::int64_t patch_width = 16;
    std::int64_t channels = 3;  // num_channels
    double layer_norm_eps = 1e-12;
    bool qkv_bias = true;
    activation act = activation::gelu;  // hidden_act
    // Dropout, which training applies (inference ignores it): after the embeddings, on the attention's and
    // the MLP's outputs (hidden_dropout_prob), on the attention probabilities (attention_probs_dropout_prob);
    // ViTConfig's and DeiTConfig's defaults are 0.
    double hidden_dropout = 0.0;
    double attention_dropout = 0.0;

    [[nodiscard]] bool distilled() const noexcept { return model_type == "deit"; }
    // Tokens before the patches: [CLS], and DeiT's distillation token.
    [[nodiscard]] std::int64_t prefix_tokens() const noexcept { return distilled() ? 2 : 1; }
    [[nodiscard]] std::int64_t patches() const noexcept {
        return (image_height / patch_height) * (image_width / patch_width);
    }
    [[nodiscard]] std::int64_t tokens() const noexcept { return prefix_tokens() + patches(); }

    [[nodiscard]] static vit_config from_json(const config_reader& config);

private:
    // A size given as one number (square) or as [height, width], as transformers accepts both.
    static std::pair<std::int64_t, std::int64_t> extents(const config_reader& config, std::string_view key,
                                                         std::int64_t fallback);
};

// Which head the checkpoint has.
enum class vit_head : std::uint8_t {
    cls,                   // classifier on token 0 (ViTForImageClassification, DeiTForImageClassification)
    cls_and_distillation,  // DeiTForImageClassificationWithTeacher's two heads, averaged
};

struct vit_weights {
    tensor<float> cls_token;                          // [1, 1, hidden]
    std::optional<tensor<float>> distillation_token;  // [1, 1, hidden] (DeiT)
    tensor<float> position_embeddings;                // [1, prefix tokens + patches, hidden]
    tensor<float> patch_weight;                       // [hidden, channels, patch_height, patch_width]
    tensor<float> patch_bias;                         // [hidden]
    dropout_layer embedding_dropout;                  // on the tokens with their positions added
    std::vector<pre_norm_encoder_layer> layers;
    norm_layer final_norm;                                // [hidden]
    linear_layer classifier;                              // [classes, hidden], on token 0
    std::optional<linear_layer> distillation_classifier;  // [classes, hidden], on token 1 (with teacher)
};

namespace recipe_detail {

// The head a checkpoint carries, and how many classes it has; a checkpoint without one (a bare
// ViTModel / DeiTModel, with or without its pooler, or a masked-image-modeling one) is not a classifier.
[[nodiscard]] std::pair<vit_head, std::int64_t> vit_head_of(const checkpoint& weights, const vit_config& c);

}  // namespace recipe_detail

// Layer i: `<prefix>encoder.layer.{i}.attention.attention.query.weight`, ...
[[nodiscard]] pre_norm_encoder_layer load_vit_layer(weight_loader& weights, const vit_config& c,
                                                    std::int64_t index);

[[nodiscard]] vit_weights load_vit_weights(weight_loader& weights, const vit_config& c, vit_head head,
                                           std::int64_t classes);

namespace recipe_detail {

// Pixels must be [N, channels, image_height, image_width].
void check_vit_pixels(const vit_config& c, const dims& shape);

}  // namespace recipe_detail

// pixels [N, C, H, W] -> logits [N, classes].
[[nodiscard]] tensor<float> vit_logits(const vit_weights& w, const vit_config& c,
                                       const tensor<float>& pixels);

// A ViT or DeiT classifier loaded from a Hugging Face folder (config.json + safetensors), compiling one
// program per batch size.
class vit {
public:
    [[nodiscard]] static vit load(const std::filesystem::path& folder, const load_options& options = {});

    // pixels [N, C, H, W] f32 -> logits [N, classes].
    [[nodiscard]] host_tensor logits(const host_tensor& pixels);

    [[nodiscard]] const std::vector<std::string>& labels() const noexcept { return labels_; }
    [[nodiscard]] const vit_config& config() const noexcept { return config_; }
    [[nodiscard]] vit_head head() const noexcept { return head_; }
    [[nodiscard]] std::size_t compiled_programs() const { return programs_->count(); }
    // The graph of pixels [N, C, H, W] (the config's size) -> logits [N, classes], not compiled.
    [[nodiscard]] std::vector<value> build_graph(graph& g, std::int64_t batch) const {
        const std::int64_t key[] = {batch};
        return programs_->build(g, key);
    }

private:
    vit() = default;

    vit_config config_;
    vit_head head_ = vit_head::cls;
    std::vector<std::string> labels_;
    std::unique_ptr<compiled_shapes> programs_;
};

}  // namespace anvil::models

#if ANVIL_DEFINITIONS
#include "anvil/models/vision/vit-inl.hpp"
#endif
