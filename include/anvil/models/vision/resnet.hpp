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
// For inference every BatchNorm is folded into its convolution at load (batch_norm_folding.hpp); training
// runs them in train mode on the same layout (resnet_train_forward).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
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
    // nn.BatchNorm2d's default, which Hugging Face's and torchvision's ResNets keep (neither config names
    // it).
    double batch_norm_eps = batch_norm_default_eps;
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

// A convolution of the network and the BatchNorm after it: both by checkpoint name, the weight's shape and
// how it slides. For inference `folded` holds the BatchNorm folded into the convolution
// (fold_resnet_convolution); training reads the tensors by name through a weight_loader instead and leaves it
// empty.
struct resnet_convolution {
    models::folded_convolution folded;
    std::string label;  // the convolution's weight name (also the folded constants' name in dumps)
    std::string norm;   // the BatchNorm's prefix: <norm>.weight, .bias, .running_mean, .running_var
    dims shape;         // the weight's [out, in / groups, kh, kw]
    std::int64_t stride = 1;
    std::int64_t padding = 0;
    std::int64_t groups = 1;
};

struct resnet_block {
    std::vector<resnet_convolution> layers;        // an activation after each but the last
    std::optional<resnet_convolution> projection;  // the shortcut; the identity when absent
};

// A folder's network as its tensor names and config.json describe it: the naming, the architecture, every
// convolution with its BatchNorm (nothing folded yet) and the class labels.
struct resnet_layout {
    resnet_names names;
    models::resnet_config config;
    resnet_convolution stem;
    std::vector<resnet_block> blocks;
    std::vector<std::string> labels;
};

struct resnet_network {
    std::shared_ptr<const checkpoint> weights;  // the classifier's constants point into it
    resnet_layout layout;                       // every convolution folded
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

[[nodiscard]] resnet_convolution describe_resnet_convolution(std::string weight, std::string norm,
                                                             const dims& shape, std::int64_t stride,
                                                             std::int64_t groups = 1);

// Every block's convolutions and norms by name, with the strides and groups the config implies; a block whose
// shortcut needs a projection the checkpoint lacks is refused.
[[nodiscard]] std::vector<resnet_block> describe_resnet_blocks(const checkpoint& weights,
                                                               const resnet_names& names,
                                                               const models::resnet_config& c);

// The layout of the ResNet `weights` holds, with config.json beside `folder` (a folder or one .safetensors
// file) where there is one: the naming recognised, the architecture from config.json (Hugging Face) or from
// the tensors (torchvision, timm), the classifier's rows checked against timm's num_classes.
[[nodiscard]] resnet_layout read_resnet_layout(const checkpoint& weights,
                                               const std::filesystem::path& folder);

// Folds the convolution's BatchNorm into it, every tensor checked against the layout's shapes.
void fold_resnet_convolution(const checkpoint& weights, resnet_convolution& conv, double eps);

[[nodiscard]] tensor<float> apply_resnet_convolution(graph& g, const resnet_convolution& conv,
                                                     const tensor<float>& x);

// One convolution of the layout and its BatchNorm applied to x: folded (inference) or in train mode.
using resnet_convolve = std::function<tensor<float>(const resnet_convolution& conv, const tensor<float>& x)>;

// pixels [N, C, H, W] -> logits [N, classes]: the stem, the max pool, the residual blocks (each convolution
// with its BatchNorm through `convolve`), the global average pool, and the classifier read through `weights`.
[[nodiscard]] tensor<float> resnet_logits(models::weight_loader& weights, const resnet_layout& layout,
                                          const tensor<float>& pixels, const resnet_convolve& convolve);

// A convolution of the layout read through `weights` as stored, without its BatchNorm and not folded with it
// (training changes both): what train and eval mode share.
[[nodiscard]] tensor<float> unfolded_resnet_convolution(models::weight_loader& weights,
                                                        const resnet_convolution& conv,
                                                        const tensor<float>& x);

// The graph for pixels [N, C, H, W] (key {N, H, W}): logits [N, classes].
[[nodiscard]] std::vector<value> build_resnet(graph& g, const resnet_network& net,
                                              std::span<const std::int64_t> key);

}  // namespace anvil::detail

namespace anvil::models {

// A ResNet's forward pass in train mode (nn.Module.train()), as fine-tuning runs it: the convolutions,
// BatchNorm weights and biases and the classifier read through `weights` (whose substitute makes the trained
// ones program inputs), every BatchNorm normalising with its batch's statistics (train_mode_batch_norm), and
// those statistics returned as graph values so that the caller can update the running ones.
struct resnet_training_pass {
    tensor<float> logits;                           // [N, classes]
    std::vector<batch_norm_statistics> statistics;  // every BatchNorm, in the order the forward meets them
};

[[nodiscard]] resnet_training_pass resnet_train_forward(weight_loader& weights,
                                                        const anvil::detail::resnet_layout& layout,
                                                        const tensor<float>& pixels);

// The same network in eval mode (model.eval()), as fine-tuning evaluates it between epochs: logits [N,
// classes] with every BatchNorm normalising by its running statistics, read through `weights` like the other
// tensors (eval_mode_batch_norm).
[[nodiscard]] tensor<float> resnet_eval_forward(weight_loader& weights,
                                                const anvil::detail::resnet_layout& layout,
                                                const tensor<float>& pixels);

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
