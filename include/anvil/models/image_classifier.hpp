// anvil: one entry point for every image classifier anvil runs (what `anvil classify` uses). A model folder
// is dispatched on config.json's model_type — "vit" and "deit" to the ViT recipe, "resnet" to the ResNet
// one — or, without a config.json, on its weights (torchvision's ResNet state_dict). The folder's
// preprocessor_config.json, where present, says how to turn an image into pixels.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <numeric>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

// Before blocks.hpp: config.hpp calls detail::message unqualified, which blocks.hpp's anvil::models::detail
// would hide.
#include "anvil/models/config.hpp"

#include "anvil/core/error.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/core/json.hpp"
#include "anvil/io/checkpoint.hpp"
#include "anvil/io/image_transforms.hpp"
#include "anvil/models/compiled_shapes.hpp"
#include "anvil/models/resnet.hpp"
#include "anvil/models/vit.hpp"

namespace anvil::models {

// One class of one image: its index in the classifier's output, its softmax probability and its label.
struct classification {
    std::int64_t index = 0;
    float probability = 0.0f;
    std::string label;
};

class image_classifier {
public:
    // config.json's model_type "vit", "deit" or "resnet", or a folder without config.json whose weights are
    // torchvision's ResNet; anything else is an unsupported_error naming the model_type or what was found.
    [[nodiscard]] static image_classifier load(const std::filesystem::path& folder,
                                               const load_options& options = {}) {
        std::error_code ignored;
        if (!std::filesystem::is_directory(folder, ignored)) {
            throw io_error(
                anvil::detail::message(folder.string(), ": not a model folder (no such directory)"));
        }
        const std::filesystem::path config_path = folder / "config.json";
        if (std::filesystem::exists(config_path, ignored)) {
            const json::value document = config_reader::read_file(config_path);
            const config_reader config(document, config_path.string());
            const std::string type = config.string("model_type", "");
            if (type == "vit" || type == "deit") return {vit::load(folder, options), folder};
            if (type == "resnet") return {resnet::load(folder, options), folder};
            throw unsupported_error(
                anvil::detail::message(config_path.string(), ": ",
                                       type.empty() ? std::string("there is no model_type")
                                                    : anvil::detail::message("model_type '", type, "'"),
                                       " is not an image classifier anvil runs (vit, deit, resnet)"));
        }
        bool has_weights = false;
        for (std::filesystem::directory_iterator entry(folder, ignored), end; !ignored && entry != end;
             entry.increment(ignored)) {
            has_weights = has_weights || entry->path().extension() == ".safetensors";
        }
        if (!has_weights) {
            throw unsupported_error(anvil::detail::message(
                folder.string(), ": neither a config.json nor .safetensors weights: not a model folder"));
        }
        const checkpoint weights = checkpoint::open(folder);
        if (!resnet::recognizes(weights)) {
            const auto& tensors = weights.tensors();
            throw unsupported_error(anvil::detail::message(
                folder.string(), ": there is no config.json, and the weights (", tensors.size(),
                " tensors, the first '", tensors.empty() ? std::string_view() : tensors.front()->name(),
                "') are not torchvision's ResNet ('conv1.weight', 'layer1.0.conv1.weight'); a Hugging "
                "Face model needs its config.json"));
        }
        return {resnet::load(folder, options), folder};
    }

    // pixels f32 [N, 3, H, W] (what preprocessing() makes) -> logits f32 [N, classes].
    [[nodiscard]] host_tensor logits(const host_tensor& pixels) {
        return std::visit([&](auto& model) { return model.logits(pixels); }, model_);
    }

    // The `top_k` most probable classes of each image (softmax over the logits), best first; ties keep
    // the lower index first.
    [[nodiscard]] std::vector<std::vector<classification>> classify(const host_tensor& pixels,
                                                                    std::size_t top_k = 5) {
        return top_classes(logits(pixels), labels(), top_k);
    }

    // The same for logits [N, classes] computed elsewhere; `names` labels the classes (a class without
    // one is "LABEL_<index>").
    [[nodiscard]] static std::vector<std::vector<classification>> top_classes(
        const host_tensor& scores, const std::vector<std::string>& names, std::size_t top_k = 5) {
        const dims& shape = scores.shape();
        if (shape.rank() != 2 || shape[1] < 1) {
            throw shape_error(
                anvil::detail::message("image_classifier: expected logits [images, classes], got ", shape));
        }
        const auto rows = static_cast<std::size_t>(shape[0]);
        const auto classes = static_cast<std::size_t>(shape[1]);
        const std::vector<float> values = scores.to_f32();
        std::vector<std::vector<classification>> out(rows);
        for (std::size_t row = 0; row < rows; ++row) {
            // In double, shifted by the maximum: exp never overflows and the sum keeps every class.
            const float* logit = values.data() + row * classes;
            const double highest = *std::max_element(logit, logit + classes);
            std::vector<double> probability(classes);
            double total = 0.0;
            for (std::size_t i = 0; i < classes; ++i)
                total += probability[i] = std::exp(double{logit[i]} - highest);
            std::vector<std::size_t> order(classes);
            std::iota(order.begin(), order.end(), std::size_t{0});
            std::stable_sort(order.begin(), order.end(),
                             [&](std::size_t a, std::size_t b) { return probability[a] > probability[b]; });
            const std::size_t kept = std::min(top_k, classes);
            for (std::size_t k = 0; k < kept; ++k) {
                const std::size_t i = order[k];
                out[row].push_back({static_cast<std::int64_t>(i), static_cast<float>(probability[i] / total),
                                    i < names.size() ? names[i] : "LABEL_" + std::to_string(i)});
            }
        }
        return out;
    }

    [[nodiscard]] const std::vector<std::string>& labels() const {
        return std::visit([](const auto& model) -> const std::vector<std::string>& { return model.labels(); },
                          model_);
    }

    // From preprocessor_config.json where the folder has one, else torchvision's ImageNet defaults.
    [[nodiscard]] image_preprocessing preprocessing() const { return preprocessing_; }

    // "vit", "deit" or "resnet".
    [[nodiscard]] std::string_view architecture() const {
        if (const auto* transformer = std::get_if<vit>(&model_)) return transformer->config().model_type;
        return "resnet";
    }

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
    [[nodiscard]] image_preprocessing default_preprocessing(const std::filesystem::path& folder) const {
        if (std::filesystem::exists(folder / "preprocessor_config.json"))
            return image_preprocessing::load(folder);
        const auto* transformer = std::get_if<vit>(&model_);
        if (transformer == nullptr) return image_preprocessing::imagenet();
        image_preprocessing p = image_preprocessing::imagenet();
        p.resize_shortest_edge = 0;
        p.resize_height = transformer->config().image_height;
        p.resize_width = transformer->config().image_width;
        p.crop_height = p.crop_width = 0;
        p.filter = resample::bilinear;
        p.mean = {0.5f, 0.5f, 0.5f};
        p.std = {0.5f, 0.5f, 0.5f};
        return p;
    }

    std::variant<vit, resnet> model_;
    image_preprocessing preprocessing_;
};

}  // namespace anvil::models
