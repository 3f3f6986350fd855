// anvil: image_classifier's definitions (see image_classifier.hpp; compilation.hpp says when this file is
// compiled).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <numeric>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/core/json.hpp"
#include "anvil/io/checkpoint.hpp"
#include "anvil/models/common/config.hpp"
#include "anvil/models/vision/image_classifier.hpp"

namespace anvil::models {

ANVIL_INLINE bool recipe_detail::is_timm_resnet(std::string_view architecture) {
    const auto digits_after = [&](std::string_view prefix) {
        if (!architecture.starts_with(prefix) || architecture.size() == prefix.size()) return false;
        const std::string_view rest = architecture.substr(prefix.size());
        const auto end = rest.find('_');
        const std::string_view number = rest.substr(0, end);
        return !number.empty() &&
               std::all_of(number.begin(), number.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    // resnet18 ... resnet200 (no letter suffix: 'd', 't', 's' and the like change the stem or shortcuts);
    // resnext50_32x4d, wide_resnet50_2 keep torchvision's layout, which the recipe reads from the tensors.
    if (digits_after("resnet"))
        return architecture.find('_') == std::string_view::npos &&
               std::all_of(architecture.begin() + 6, architecture.end(),
                           [](char c) { return c >= '0' && c <= '9'; });
    return digits_after("resnext") || digits_after("wide_resnet");
}

ANVIL_INLINE image_classifier image_classifier::load(const std::filesystem::path& folder,
                                                     const load_options& options) {
    std::error_code ignored;
    if (!std::filesystem::is_directory(folder, ignored)) {
        throw io_error(anvil::detail::message(folder.string(), ": not a model folder (no such directory)"));
    }
    const std::filesystem::path config_path = folder / "config.json";
    if (std::filesystem::exists(config_path, ignored)) {
        const json::value document = config_reader::read_file(config_path);
        const config_reader config(document, config_path.string());
        const std::string type = config.string("model_type", "");
        if (type == "vit" || type == "deit") return {vit::load(folder, options), folder};
        if (type == "resnet") return {resnet::load(folder, options), folder};
        // timm's Hub folders: {"architecture": "resnet50", "num_classes", "pretrained_cfg"} with
        // torchvision's tensor names.
        const std::string timm = type.empty() ? config.string("architecture", "") : std::string();
        if (!timm.empty()) {
            if (recipe_detail::is_timm_resnet(timm) && resnet::recognizes(checkpoint::open(folder))) {
                return {resnet::load(folder, options), folder};
            }
            throw unsupported_error(anvil::detail::message(
                config_path.string(), ": timm architecture '", timm,
                "' is not one anvil runs (timm's torchvision-style ResNets: resnet18 to resnet200, resnext*, "
                "wide_resnet*, with torchvision's tensor names)"));
        }
        throw unsupported_error(anvil::detail::message(
            config_path.string(), ": ",
            type.empty()
                ? std::string("there is neither a model_type (Hugging Face) nor an architecture (timm)")
                : anvil::detail::message("model_type '", type, "' is not an image classifier anvil runs"),
            "; anvil runs Hugging Face's vit, deit and resnet, and timm's ResNets"));
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

ANVIL_INLINE host_tensor image_classifier::logits(const host_tensor& pixels) {
    return std::visit([&](auto& model) { return model.logits(pixels); }, model_);
}

ANVIL_INLINE std::vector<std::vector<classification>> image_classifier::classify(const host_tensor& pixels,
                                                                                 std::size_t top_k) {
    return top_classes(logits(pixels), labels(), top_k);
}

ANVIL_INLINE std::vector<std::vector<classification>> image_classifier::top_classes(
    const host_tensor& scores, const std::vector<std::string>& names, std::size_t top_k) {
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

ANVIL_INLINE std::string_view image_classifier::architecture() const {
    if (const auto* transformer = std::get_if<vit>(&model_)) return transformer->config().model_type;
    return "resnet";
}

ANVIL_INLINE std::vector<value> image_classifier::build_graph(graph& g, image_size size) const {
    if (const auto* transformer = std::get_if<vit>(&model_)) return transformer->build_graph(g, 1);
    if (size.height <= 0 || size.width <= 0)
        throw error(anvil::detail::message("image classifier: a ResNet takes any image size; give one (",
                                           size.height, " x ", size.width, " is not)"));
    return std::get<resnet>(model_).build_graph(g, 1, size.height, size.width);
}

ANVIL_INLINE image_size image_classifier::input_size() const {
    if (const auto* transformer = std::get_if<vit>(&model_))
        return {transformer->config().image_height, transformer->config().image_width};
    return {0, 0};
}

ANVIL_INLINE image_preprocessing
image_classifier::default_preprocessing(const std::filesystem::path& folder) const {
    if (std::filesystem::exists(folder / "preprocessor_config.json"))
        return image_preprocessing::load(folder);
    // A timm folder describes its eval transform in config.json's pretrained_cfg.
    if (const auto config_path = folder / "config.json"; std::filesystem::exists(config_path)) {
        const json::value document = config_reader::read_file(config_path);
        if (const json::value* cfg = document.find("pretrained_cfg");
            cfg && document.find("model_type") == nullptr)
            return image_preprocessing::from_timm(*cfg, config_path.string() + ": pretrained_cfg");
    }
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

}  // namespace anvil::models
