// anvil: ResNet image classifiers, from pixels [N, C, H, W] to logits [N, classes]. Reads either
// torchvision's state_dict names (conv1.weight, bn1.*, layer{1-4}.{i}.conv{1,2,3}.weight, .bn{1,2,3}.*,
// .downsample.{0,1}.*, fc.*; no config.json needed: depth, block type, widths and groups come from the
// tensors present) or Hugging Face's ResNetForImageClassification names (resnet.embedder.embedder.*,
// resnet.encoder.stages.{s}.layers.{l}. layer.{k}.* / .shortcut.*, classifier.1.*; the architecture from
// config.json where there is one).
//
// The network (He et al. 2015, torchvision's "V1.5"): a 7x7 stride-2 stem convolution, ReLU, a 3x3 stride-2
// max pool, stages of residual blocks (basic: 3x3 -> 3x3; bottleneck: 1x1 -> 3x3 -> 1x1 to 4x the width), a
// global average pool and a linear classifier. Each stage but the first halves the resolution in its first
// block, on the 3x3 (or, with Hugging Face's downsample_in_bottleneck, on the first 1x1); a block whose input
// and output differ in channels or resolution adds a 1x1 projection of its input instead of the input itself.
// Every BatchNorm is folded into its convolution at load (batch_norm_folding.hpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "anvil/compilation.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/expr/tensor.hpp"
#include "anvil/fwd.hpp"
#include "anvil/models/common/blocks.hpp"
#include "anvil/models/common/compiled_shapes.hpp"
#include "anvil/models/common/config.hpp"
#include "anvil/models/vision/batch_norm_folding.hpp"

namespace anvil::models {

// ResNet-50's values as examples.
struct resnet_config {
    std::string naming;                // "torchvision" | "huggingface": which tensor names the folder uses
    std::int64_t channels = 3;         // input channels (num_channels)
    std::int64_t stem_channels = 64;   // the stem convolution's outputs (embedding_size)
    std::vector<std::int64_t> depths;  // blocks per stage: [3, 4, 6, 3]
    std::vector<std::int64_t> widths;  // each stage's output channels (hidden_sizes): [256, ..., 2048]
    std::vector<std::int64_t> inner_widths;  // a bottleneck's 3x3 channels per stage: [64, ..., 512]
    bool bottleneck = true;                  // 1x1-3x3-1x1 blocks ("bottleneck") or 3x3-3x3 ("basic")
    std::int64_t groups = 1;                 // the bottleneck 3x3's groups (32 in ResNeXt)
    bool downsample_in_first_stage = false;  // the first stage's first block has stride 2 too
    bool downsample_in_bottleneck = false;   // a bottleneck strides on its first 1x1 (V1), not its 3x3 (V1.5)
    activation act = activation::relu;       // hidden_act: after the stem and each residual sum
    std::int64_t classes = 1000;             // the classifier's outputs
};

}  // namespace anvil::models

namespace anvil::detail {

// Where each weight lives in one of the two namings.
struct resnet_names {
    bool huggingface = false;

    [[nodiscard]] std::string stem_convolution() const;
    [[nodiscard]] std::string stem_norm() const;
    // The prefix of block `index` of stage `stage` (both from 0).
    [[nodiscard]] std::string block(std::size_t stage, std::int64_t index) const;
    // Convolution `k` (from 0) of a block, and its norm.
    [[nodiscard]] std::string convolution(const std::string& block_prefix, std::size_t k) const;
    [[nodiscard]] std::string norm(const std::string& block_prefix, std::size_t k) const;
    [[nodiscard]] std::string shortcut_convolution(const std::string& block_prefix) const;
    [[nodiscard]] std::string shortcut_norm(const std::string& block_prefix) const;
    [[nodiscard]] std::string classifier() const { return huggingface ? "classifier.1" : "fc"; }
};

// A convolution with its BatchNorm folded in, and how it slides.
struct resnet_convolution {
    models::folded_convolution folded;
    std::string label;  // the checkpoint's weight name, for dumps and errors
    std::int64_t stride = 1;
    std::int64_t padding = 0;
    std::int64_t groups = 1;
};

struct resnet_block {
    std::vector<resnet_convolution> layers;        // an activation after each but the last
    std::optional<resnet_convolution> projection;  // the shortcut; the identity when absent
};

struct resnet_network {
    std::shared_ptr<const checkpoint> weights;  // the classifier's constants point into it
    resnet_names names;
    std::int64_t channels = 3;
    std::int64_t classes = 0;
    std::int64_t features = 0;  // the last stage's width, the classifier's input
    models::activation act = models::activation::relu;
    resnet_convolution stem;
    std::vector<resnet_block> blocks;
};

// Extent `axis` of a tensor the architecture is read from; its rank must be `rank`.
[[nodiscard]] std::int64_t resnet_extent(const checkpoint& weights, const std::string& name, std::size_t rank,
                                         std::size_t axis);

// Depth, block type, widths and groups from the tensors present (torchvision's folders have no config).
void infer_resnet_architecture(const checkpoint& weights, const resnet_names& names,
                               models::resnet_config& c);

// Hugging Face's ResNetConfig fields (defaults: microsoft/resnet-50's), checked against the stage and layer
// counts the checkpoint holds.
void read_resnet_config(const models::config_reader& config, const checkpoint& weights,
                        const resnet_names& names, models::resnet_config& c);

[[nodiscard]] resnet_convolution load_resnet_convolution(const checkpoint& weights, std::string weight,
                                                         const std::string& norm, const dims& shape,
                                                         std::int64_t stride, std::int64_t groups = 1);

// Every block's folded convolutions, with the shapes the config implies checked tensor by tensor.
[[nodiscard]] std::vector<resnet_block> load_resnet_blocks(const checkpoint& weights,
                                                           const resnet_names& names,
                                                           const models::resnet_config& c);

[[nodiscard]] tensor<float> apply_resnet_convolution(graph& g, const resnet_convolution& conv,
                                                     const tensor<float>& x);

// The graph for pixels [N, C, H, W] (key {N, H, W}): logits [N, classes].
[[nodiscard]] std::vector<value> build_resnet(graph& g, const resnet_network& net,
                                              std::span<const std::int64_t> key);

}  // namespace anvil::detail

namespace anvil::models {

class resnet {
public:
    // Whether `weights` holds a ResNet's stem and first block in either naming.
    [[nodiscard]] static bool recognizes(const checkpoint& weights);

    // A folder (or one .safetensors file) of either naming, with config.json next to it where there is one.
    [[nodiscard]] static resnet load(const std::filesystem::path& folder, const load_options& options = {});

    // pixels f32 [N, C, H, W] -> logits f32 [N, classes]; one program per {N, H, W}, compiled on first use.
    [[nodiscard]] host_tensor logits(const host_tensor& pixels);

    // config.json's id2label names by class index, else "LABEL_0", "LABEL_1", ...
    [[nodiscard]] const std::vector<std::string>& labels() const noexcept { return labels_; }
    [[nodiscard]] const resnet_config& config() const noexcept { return config_; }
    // How many programs have been compiled (one per pixel shape {N, H, W} met).
    [[nodiscard]] std::size_t compiled_programs() const { return programs_->count(); }
    // The graph of pixels "pixels" f32 [N, C, H, W] -> logits [N, classes], not compiled (anvil export).
    [[nodiscard]] std::vector<value> build_graph(graph& g, std::int64_t batch, std::int64_t height,
                                                 std::int64_t width) const {
        const std::int64_t key[] = {batch, height, width};
        return programs_->build(g, key);
    }

private:
    resnet() = default;

    resnet_config config_;
    std::vector<std::string> labels_;
    std::unique_ptr<compiled_shapes> programs_;
};

}  // namespace anvil::models

#if ANVIL_DEFINITIONS
#include "anvil/models/vision/resnet-inl.hpp"
#endif
