// anvil: one entry point for every image classifier anvil runs (what `anvil classify` uses). A model folder
// is dispatched on config.json's model_type — "vit" and "deit" to the ViT recipe, "resnet" to the ResNet
// one — or on timm's "architecture" (its torchvision-style ResNets), or, without a config.json, on its
// weights (torchvision's ResNet state_dict). The folder's preprocessor_config.json, or a timm folder's
// pretrained_cfg, says how to turn an image into pixels.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "anvil/compilation.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/io/image_transforms.hpp"
#include "anvil/models/common/compiled_shapes.hpp"
#include "anvil/models/vision/resnet.hpp"
#include "anvil/models/vision/vit.hpp"

namespace anvil::models {

namespace recipe_detail {

// A timm architecture name the ResNet recipe runs: resnet18 ... resnet200, resnext*, wide_resnet*.
[[nodiscard]] bool is_timm_resnet(std::string_view architecture);

}  // namespace recipe_detail

// One class of one image: its index in the classifier's output, its softmax probability and its label.
struct classification {
    std::int64_t index = 0;
    float probability = 0.0f;
    std::string label;
};

class image_classifier {
public:
    // config.json's model_type "vit", "deit" or "resnet", a timm config.json ("architecture": "resnet50",
    // ...), or a folder without config.json whose weights are torchvision's ResNet; anything else is an
    // unsupported_error naming the model_type, the architecture or what was found.
    [[nodiscard]] static image_classifier load(const std::filesystem::path& folder,
                                               const load_options& options = {});

    // pixels f32 [N, 3, H, W] (what preprocessing() makes) -> logits f32 [N, classes].
    [[nodiscard]] host_tensor logits(const host_tensor& pixels);

    // The `top_k` most probable classes of each image (softmax over the logits), best first; ties keep
    // the lower index first.
    [[nodiscard]] std::vector<std::vector<classification>> classify(const host_tensor& pixels,
                                                                    std::size_t top_k = 5);

    // The same for logits [N, classes] computed elsewhere; `names` labels the classes (a class without
    // one is "LABEL_<index>").
    [[nodiscard]] static std::vector<std::vector<classification>> top_classes(
        const host_tensor& scores, const std::vector<std::string>& names, std::size_t top_k = 5);

    [[nodiscard]] const std::vector<std::string>& labels() const {
        return std::visit([](const auto& model) -> const std::vector<std::string>& { return model.labels(); },
                          model_);
    }

    // From preprocessor_config.json where the folder has one, else torchvision's ImageNet defaults.
    [[nodiscard]] image_preprocessing preprocessing() const { return preprocessing_; }

    // "vit", "deit" or "resnet".
    [[nodiscard]] std::string_view architecture() const;

    // The pixel size the model takes, height and width: a ViT or DeiT its config's image size; 0 x 0 for a
    // ResNet, which takes any size.
    [[nodiscard]] image_size input_size() const;

    // The graph of one image's pixels f32 [1, 3, H, W] -> logits [1, classes], not compiled (what `anvil
    // export` writes); `size` is ignored by a ViT, which takes its config's size.
    [[nodiscard]] std::vector<value> build_graph(graph& g, image_size size) const;

    // How many programs have been compiled (one per input shape met).
    [[nodiscard]] std::size_t compiled_programs() const {
        return std::visit([](const auto& model) { return model.compiled_programs(); }, model_);
    }

private:
    template <class Model>
    image_classifier(Model model, const std::filesystem::path& folder)
        : model_(std::move(model)), preprocessing_(default_preprocessing(folder)) {}

    // preprocessor_config.json where the folder has one. Without it, a ViT or DeiT gets ViTImageProcessor's
    // defaults at the config's image size (resize to it, bilinear, mean and std 0.5): ImageNet's 224 crop
    // would not fit a model trained at another size. A ResNet gets torchvision's ImageNet transform.
    [[nodiscard]] image_preprocessing default_preprocessing(const std::filesystem::path& folder) const;

    std::variant<vit, resnet> model_;
    image_preprocessing preprocessing_;
};

}  // namespace anvil::models

#if ANVIL_DEFINITIONS
#include "anvil/models/vision/image_classifier-inl.hpp"
#endif
