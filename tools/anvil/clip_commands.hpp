// `anvil zero-shot` and `anvil embed` for CLIP folders: labels ranked by probability for an image, and the
// L2-normalised text or image embeddings [N, projection_dim].
#pragma once

#include "arguments.hpp"
#include "model_commands.hpp"

#include <anvil/anvil.hpp>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace anvil::cli {

inline constexpr const char* zero_shot_usage =
    "usage: anvil zero-shot --model DIR (IMAGE | --pixels F.npy) --labels LABEL... [--template T]\n"
    "                       [--backend cpu|ane|coreml|auto] [--strict-device] [--compress KIND]\n"
    "                       [--out F.npy] [--json]\n"
    "\n"
    "Zero-shot classification with a CLIP model: each label is put into the template at {} (default\n"
    "\"a photo of a {}.\"), and the labels are ranked by the softmax of CLIP's scaled cosine similarities.\n"
    "--labels takes every word after it up to the next option (or repeats). The image is resized, cropped\n"
    "and normalised as preprocessor_config.json says; --pixels takes it preprocessed, float32 [1, 3, H, W]\n"
    "or [3, H, W]. --out writes the probabilities [L] in the labels' order as .npy.\n";

inline constexpr const char* clip_embed_usage =
    "usage: anvil embed --model CLIP_DIR (TEXT... | --ids LIST... | --image IMAGE... | --pixels F.npy)\n"
    "                   [--no-normalize] [--backend cpu|ane|coreml|auto] [--strict-device]\n"
    "                   [--compress KIND] [--adapter DIR] [--out F.npy] [--json]\n"
    "\n"
    "CLIP text or image embeddings, [N, projection_dim], L2-normalised (--no-normalize: the projections\n"
    "as get_text_features / get_image_features give them). LIST is comma-separated token ids with the\n"
    "start and end tokens; --ids and --image repeat.\n";

namespace detail_clip {

// config.json says model_type "clip".
inline bool is_clip_folder(const std::string& folder) {
    const std::filesystem::path config = std::filesystem::path(folder) / "config.json";
    if (!std::filesystem::is_regular_file(config)) return false;
    const json::value document = models::config_reader::read_file(config);
    if (!document.is_object()) return false;
    const json::value* type = document.find("model_type");
    return type != nullptr && type->is_string() && type->as_string() == "clip";
}

inline host_tensor read_images(const std::vector<std::string>& paths, const models::clip& model,
                               const progress& shown) {
    std::vector<image> decoded;
    for (const auto& path : paths) {
        shown.say("reading " + path);
        decoded.push_back(read_image(path));
    }
    return preprocess(std::span<const image>(decoded), model.preprocessing());
}

inline json::value json_floats(std::span<const float> values) {
    json::array out;
    for (const float v : values)
        out.push_back(json_number(v));
    return json::value(std::move(out));
}

}  // namespace detail_clip

inline int run_zero_shot(const std::vector<std::string_view>& argv, const char* argv0) {
    // --labels takes the words after it, up to the next option: `--labels cat dog "a bird"`.
    std::vector<std::string_view> rest;
    std::vector<std::string> labels;
    for (std::size_t i = 0; i < argv.size(); ++i) {
        if (argv[i] != "--labels") {
            rest.push_back(argv[i]);
            continue;
        }
        const std::size_t before = labels.size();
        while (i + 1 < argv.size() && !argv[i + 1].starts_with("--"))
            labels.emplace_back(argv[++i]);
        if (labels.size() == before) throw usage_error("zero-shot: --labels needs at least one label");
    }
    const arguments args("zero-shot", rest,
                         {{"model", true},
                          {"pixels", true},
                          {"template", true},
                          {"backend", true},
                          {"compress", true},
                          {"strict-device", false},
                          {"out", true},
                          {"json", false},
                          {"help", false}});
    if (args.flag("help")) {
        std::fputs(zero_shot_usage, stdout);
        return 0;
    }
    const std::string folder = model_folder(args, "zero-shot");
    const auto pixels_file = args.value("pixels");
    const auto& images = args.positional();
    if (pixels_file.has_value() == !images.empty() || images.size() > 1)
        throw usage_error("zero-shot: give one IMAGE or --pixels F.npy (one of them, not both)");
    if (labels.empty()) throw usage_error("zero-shot: --labels LABEL... is required");
    const std::string label_template = args.value("template").value_or("a photo of a {}.");
    if (label_template.find("{}") == std::string::npos)
        throw usage_error(detail::message("zero-shot: --template '", label_template, "' has no {}"));

    const progress shown;
    shown.say("loading " + folder);
    auto model = models::clip::load(folder, backend_options(args, "zero-shot", argv0));
    const host_tensor pixels =
        pixels_file ? read_pixels(*pixels_file) : detail_clip::read_images(images, model, shown);
    const std::string input = pixels_file ? *pixels_file : images.front();
    if (pixels.shape()[0] != 1) {
        throw shape_error(detail::message(input, ": zero-shot takes one image, got ", pixels.shape()[0],
                                          " (pixels ", pixels.shape(), ")"));
    }
    shown.say("classifying");
    const auto ranked = model.zero_shot(pixels, labels, label_template).front();
    std::vector<float> probabilities(labels.size());
    for (const auto& entry : ranked)
        probabilities[entry.index] = entry.probability;
    if (const auto out = args.value("out")) {
        write_npy(*out, host_tensor::from(probabilities, dims{static_cast<std::int64_t>(labels.size())}));
    }
    if (args.flag("json")) {
        json::array list;
        for (const auto& entry : ranked) {
            json::object item;
            item["index"] = static_cast<std::int64_t>(entry.index);
            item["label"] = entry.label;
            item["probability"] = json_number(entry.probability);
            item["logit"] = json_number(entry.logit);
            list.emplace_back(std::move(item));
        }
        json::object report;
        report["model"] = folder;
        report["placement"] = placement_json();
        report["input"] = input;
        report["template"] = label_template;
        report["labels"] = json::value(std::move(list));
        report["probabilities"] = detail_clip::json_floats(probabilities);
        std::printf("%s\n", json::dump(json::value(std::move(report))).c_str());
        return 0;
    }
    for (const auto& entry : ranked)
        std::printf("%8.5f  %s\n", static_cast<double>(entry.probability), entry.label.c_str());
    return 0;
}

inline int run_clip_embed(const arguments& args, const char* argv0) {
    if (args.flag("help")) {
        std::fputs(clip_embed_usage, stdout);
        return 0;
    }
    const std::string folder = model_folder(args, "embed");
    for (const std::string_view text_only : {"pooling", "type-ids"}) {
        if (args.value(text_only))
            throw usage_error(detail::message("embed: --", text_only, " is for sentence encoders, not CLIP"));
    }
    const auto ids = parse_id_lists(args, "ids");
    const auto& texts = args.positional();
    const auto image_paths = args.values("image");
    const auto pixels_file = args.value("pixels");
    const int inputs =
        int{!texts.empty()} + int{!ids.empty()} + int{!image_paths.empty()} + int{pixels_file.has_value()};
    if (inputs != 1)
        throw usage_error("embed: give one of TEXT..., --ids LIST..., --image IMAGE... or --pixels F.npy");
    const bool normalize = !args.flag("no-normalize");

    const progress shown;
    shown.say("loading " + folder);
    auto model = models::clip::load(folder, backend_options(args, "embed", argv0));
    host_tensor result;
    const bool of_images = !image_paths.empty() || pixels_file.has_value();
    if (of_images) {
        const host_tensor pixels =
            pixels_file ? read_pixels(*pixels_file) : detail_clip::read_images(image_paths, model, shown);
        shown.say("encoding images");
        result = model.image_embeddings(pixels, normalize);
    } else {
        shown.say("encoding texts");
        result = texts.empty() ? model.text_embeddings_from_ids(ids, normalize)
                               : model.text_embeddings(std::span<const std::string>(texts), normalize);
    }
    if (const auto out = args.value("out")) write_npy(*out, result);
    const auto values = result.to_f32();
    const auto rows = static_cast<std::size_t>(result.shape()[0]);
    const auto columns = static_cast<std::size_t>(result.shape()[1]);
    if (args.flag("json")) {
        json::array list;
        for (std::size_t r = 0; r < rows; ++r)
            list.push_back(
                detail_clip::json_floats(std::span<const float>(values).subspan(r * columns, columns)));
        json::object report;
        report["model"] = folder;
        report["placement"] = placement_json();
        report["tower"] = of_images ? "image" : "text";
        json::array shape;
        shape.emplace_back(static_cast<std::int64_t>(rows));
        shape.emplace_back(static_cast<std::int64_t>(columns));
        report["shape"] = json::value(std::move(shape));
        report["embeddings"] = json::value(std::move(list));
        std::printf("%s\n", json::dump(json::value(std::move(report))).c_str());
        return 0;
    }
    for (std::size_t r = 0; r < rows; ++r) {
        std::printf("%zu [%zu]", r, columns);
        for (std::size_t c = 0; c < std::min<std::size_t>(columns, 6); ++c)
            std::printf(" %.6f", static_cast<double>(values[r * columns + c]));
        std::printf("%s\n", columns > 6 ? " ..." : "");
    }
    return 0;
}

}  // namespace anvil::cli
