// `anvil classify`: the top classes of images (PNG/JPEG with stb_image, PPM/PGM always) or of preprocessed
// pixels (.npy, float32 [N, 3, H, W]) under a ResNet, ViT or DeiT image classifier.
#pragma once

#include "arguments.hpp"
#include "model_commands.hpp"

#include <anvil/anvil.hpp>

#include <cstdio>
#include <string>
#include <vector>

namespace anvil::cli {

inline constexpr const char* classify_usage =
    "usage: anvil classify --model DIR (IMAGE... | --pixels F.npy) [--top K] [--backend "
    "cpu|ane|coreml|auto]\n"
    "                      [--strict-device] [--compress KIND] [--adapter DIR] [--out F.npy] [--json]\n"
    "\n"
    "The K (default 5) most probable classes of each image under a ResNet (Hugging Face or torchvision\n"
    "weights), ViT or DeiT classifier. Images are resized, cropped and normalised as the folder's\n"
    "preprocessor_config.json says (else torchvision's ImageNet transform); --pixels takes them already\n"
    "preprocessed, float32 [N, 3, H, W] or [3, H, W]. --out writes the logits [N, classes] as .npy.\n"
    "--adapter DIR applies a PEFT LoRA adapter (adapter_config.json, adapter_model.safetensors,\nas `anvil "
    "train --lora` or PEFT's save_pretrained write it) to the folder's weights.\n";

inline int run_classify(const std::vector<std::string_view>& argv, const char* argv0) {
    const arguments args("classify", argv,
                         {{"model", true},
                          {"pixels", true},
                          {"top", true},
                          {"backend", true},
                          {"compress", true},
                          {"strict-device", false},
                          {"adapter", true},
                          {"out", true},
                          {"json", false},
                          {"help", false}});
    if (args.flag("help")) {
        std::fputs(classify_usage, stdout);
        return 0;
    }
    const std::string folder = model_folder(args, "classify");
    const auto pixels_file = args.value("pixels");
    const auto& images = args.positional();
    if (pixels_file.has_value() == !images.empty())
        throw usage_error("classify: give either IMAGE... or --pixels F.npy (one of them, not both)");
    std::size_t top = 5;
    if (const auto k = args.value("top")) {
        char* end = nullptr;
        const long long value = std::strtoll(k->c_str(), &end, 10);
        if (k->empty() || end != k->c_str() + k->size() || value < 1 || value > 100000)
            throw usage_error(detail::message("classify: --top must be a positive integer, got '", *k, "'"));
        top = static_cast<std::size_t>(value);
    }

    const progress shown;
    shown.say("loading " + folder);
    auto classifier = models::image_classifier::load(folder, backend_options(args, "classify", argv0));
    host_tensor pixels;
    std::vector<std::string> names;
    if (pixels_file) {
        pixels = read_pixels(*pixels_file);
        for (std::int64_t i = 0; i < pixels.shape()[0]; ++i)
            names.push_back(detail::message(*pixels_file, "[", i, "]"));
    } else {
        const image_preprocessing preprocessing = classifier.preprocessing();
        std::vector<image> decoded;
        for (const auto& path : images) {
            shown.say("reading " + path);
            decoded.push_back(read_image(path));
            names.push_back(path);
        }
        pixels = preprocess(std::span<const image>(decoded), preprocessing);
    }
    shown.say("classifying");
    const host_tensor logits = classifier.logits(pixels);
    if (const auto out = args.value("out")) write_npy(*out, logits);
    const auto results = models::image_classifier::top_classes(logits, classifier.labels(), top);
    if (args.flag("json")) {
        json::array list;
        for (std::size_t i = 0; i < results.size(); ++i) {
            json::object entry;
            entry["input"] = names[i];
            json::array best;
            for (const auto& c : results[i]) {
                json::object item;
                item["index"] = c.index;
                item["label"] = c.label;
                item["probability"] = json_number(c.probability);
                best.emplace_back(std::move(item));
            }
            entry["top"] = json::value(std::move(best));
            list.emplace_back(std::move(entry));
        }
        json::object report;
        report["model"] = folder;
        report["placement"] = placement_json();
        report["architecture"] = std::string(classifier.architecture());
        report["results"] = json::value(std::move(list));
        std::printf("%s\n", json::dump(json::value(std::move(report))).c_str());
        return 0;
    }
    for (std::size_t i = 0; i < results.size(); ++i) {
        std::printf("%s\n", names[i].c_str());
        for (const auto& c : results[i])
            std::printf("  %8.5f  %lld %s\n", static_cast<double>(c.probability),
                        static_cast<long long>(c.index), c.label.c_str());
    }
    return 0;
}

}  // namespace anvil::cli
