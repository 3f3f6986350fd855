// anvil::models::image_classifier, the entry point `anvil classify` uses: a folder dispatched on
// config.json's model_type (ViT, DeiT, ResNet) or, without one, on torchvision ResNet weights; top-k
// classification against the softmax of PyTorch's logits (tools/reference/vit_fixtures.py,
// tools/reference/resnet_fixtures.py), computed here; the preprocessing each folder asks for; and folders
// that are not image classifiers, and timm's folders (config.json's architecture and pretrained_cfg).

#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "model_test_support.hpp"

namespace test_image_classifier {

namespace {

using anvil::models::image_classifier;
using anvil::models::load_options;
using anvil_test::data_path;

using anvil_test::cpu;

using anvil_test::temporary_folder;

// Softmax of one row of the expected logits, in double, independent of anvil's.
std::vector<double> softmax_row(const std::vector<float>& logits, std::size_t row, std::size_t classes) {
    const auto begin = logits.begin() + static_cast<std::ptrdiff_t>(row * classes);
    const double highest = *std::max_element(begin, begin + static_cast<std::ptrdiff_t>(classes));
    std::vector<double> p(classes);
    double total = 0.0;
    for (std::size_t i = 0; i < classes; ++i)
        total += p[i] = std::exp(double{begin[static_cast<std::ptrdiff_t>(i)]} - highest);
    for (auto& v : p)
        v /= total;
    return p;
}

// Checks classify(pixels, top_k) against the softmax of `expected` logits: indices best first, their
// probabilities and labels.
void check_top_k(image_classifier& classifier, const anvil::host_tensor& pixels,
                 const anvil::host_tensor& expected, std::size_t top_k) {
    const auto rows = static_cast<std::size_t>(expected.shape()[0]);
    const auto classes = static_cast<std::size_t>(expected.shape()[1]);
    const auto logits = expected.to_f32();
    const auto result = classifier.classify(pixels, top_k);
    REQUIRE(result.size() == rows);
    for (std::size_t row = 0; row < rows; ++row) {
        CAPTURE(row);
        const auto p = softmax_row(logits, row, classes);
        std::vector<std::size_t> order(classes);
        std::iota(order.begin(), order.end(), std::size_t{0});
        std::stable_sort(order.begin(), order.end(),
                         [&](std::size_t a, std::size_t b) { return p[a] > p[b]; });
        REQUIRE(result[row].size() == std::min(top_k, classes));
        for (std::size_t k = 0; k < result[row].size(); ++k) {
            CAPTURE(k);
            CHECK(result[row][k].index == static_cast<std::int64_t>(order[k]));
            CHECK(result[row][k].probability == doctest::Approx(p[order[k]]).epsilon(1e-4));
            CHECK(result[row][k].label == classifier.labels()[order[k]]);
        }
    }
}

// resnet/hf_basic's tensors renamed to torchvision's state_dict names, as folder/model.safetensors.
void write_torchvision_copy(const std::filesystem::path& folder) {
    const auto source = anvil::checkpoint::open(data_path("resnet/hf_basic/model.safetensors"));
    anvil::safetensors_writer writer;
    for (const auto* tensor : source.tensors()) {
        std::string name(tensor->name());
        const auto replace = [&](const std::string& from, const std::string& to) {
            if (const auto at = name.find(from); at != std::string::npos) name.replace(at, from.size(), to);
        };
        replace("resnet.embedder.embedder.convolution", "conv1");
        replace("resnet.embedder.embedder.normalization", "bn1");
        replace("classifier.1", "fc");
        for (int stage = 0; stage < 4; ++stage) {
            replace("resnet.encoder.stages." + std::to_string(stage) + ".layers.",
                    "layer" + std::to_string(stage + 1) + ".");
        }
        for (int k = 0; k < 2; ++k) {
            replace(".layer." + std::to_string(k) + ".convolution", ".conv" + std::to_string(k + 1));
            replace(".layer." + std::to_string(k) + ".normalization", ".bn" + std::to_string(k + 1));
        }
        replace(".shortcut.convolution", ".downsample.0");
        replace(".shortcut.normalization", ".downsample.1");
        writer.add(name, *tensor);
    }
    writer.write(folder / "model.safetensors");
}

}  // namespace

TEST_CASE("image_classifier: ViT and DeiT folders classify as PyTorch's logits say") {
    const std::vector<std::string> names{"tench",      "goldfish",     "great white shark", "tiger shark",
                                         "hammerhead", "electric ray", "stingray"};
    for (const auto& entry : std::vector<std::pair<std::string, std::string>>{
             {"vit", "vit"}, {"deit_teacher", "deit"}, {"deit", "deit"}}) {
        const std::string& model = entry.first;
        const std::string& architecture = entry.second;
        CAPTURE(model);
        auto classifier = image_classifier::load(data_path("vit/" + model), cpu());
        CHECK(classifier.architecture() == architecture);
        CHECK(classifier.labels() == names);
        const auto pixels = anvil_test::load_npy(data_path("vit/" + model + "/pixels.npy"));
        const auto expected = anvil_test::load_npy(data_path("vit/" + model + "/logits.npy"));
        CHECK(anvil_test::max_relative_error(classifier.logits(pixels), expected) < 1e-4);
        check_top_k(classifier, pixels, expected, 3);
        check_top_k(classifier, pixels, expected, 100);  // more than there are classes: all of them
        double total = 0.0;
        const auto all = classifier.classify(pixels, 7);
        for (const auto& c : all[0])
            total += c.probability;
        CHECK(total == doctest::Approx(1.0).epsilon(1e-6));
        CHECK(classifier.compiled_programs() == 1);
    }
}

TEST_CASE(
    "image_classifier: the preprocessing comes from preprocessor_config.json, else the family's default") {
    const auto vit = image_classifier::load(data_path("vit/vit"), cpu()).preprocessing();
    CHECK(vit.resize_height == 20);
    CHECK(vit.resize_width == 20);
    CHECK(vit.mean[1] == doctest::Approx(0.5));
    CHECK(vit.std[2] == doctest::Approx(0.5));
    CHECK(vit.output_height() == 20);
    const auto deit = image_classifier::load(data_path("vit/deit_teacher"), cpu()).preprocessing();
    CHECK(deit.resize_height == 23);
    CHECK(deit.crop_height == 20);
    CHECK(deit.crop_width == 20);
    CHECK(deit.mean[0] == doctest::Approx(0.485));
    // No preprocessor_config.json: ViTImageProcessor's defaults at the config's image_size (24), not
    // ImageNet's 224 crop, which the model could not take.
    const auto plain = image_classifier::load(data_path("vit/deit"), cpu()).preprocessing();
    CHECK(plain.resize_shortest_edge == 0);
    CHECK(plain.resize_height == 24);
    CHECK(plain.resize_width == 24);
    CHECK(plain.crop_height == 0);
    CHECK(plain.mean[0] == doctest::Approx(0.5));
    CHECK(plain.std[0] == doctest::Approx(0.5));
    CHECK(plain.output_height() == 24);
}

TEST_CASE("image_classifier: a ResNet folder, with config.json or with torchvision's names alone") {
    SUBCASE("Hugging Face's ResNetForImageClassification (model_type resnet)") {
        auto classifier = image_classifier::load(data_path("resnet/hf_basic"), cpu());
        CHECK(classifier.architecture() == "resnet");
        CHECK(classifier.labels()[4] == "blue");
        const auto pixels = anvil_test::load_npy(data_path("resnet/inputs_a.npy"));
        const auto expected = anvil_test::load_npy(data_path("resnet/hf_basic/logits_a.npy"));
        CHECK(anvil_test::max_relative_error(classifier.logits(pixels), expected) < 1e-4);
        check_top_k(classifier, pixels, expected, 3);
        CHECK(classifier.preprocessing().crop_height == 224);  // no preprocessor_config.json
    }
    SUBCASE("torchvision's state_dict names and no config.json") {
        // The Hugging Face tensors renamed to torchvision's: the dispatch must find the ResNet by its
        // weights. (Its numerics are test_resnet.cpp's; here it must be the ResNet recipe's result.)
        temporary_folder folder;
        write_torchvision_copy(folder.path);
        auto classifier = image_classifier::load(folder.path, cpu());
        CHECK(classifier.architecture() == "resnet");
        CHECK(classifier.labels()[6] == "LABEL_6");
        const auto pixels = anvil_test::load_npy(data_path("resnet/inputs_a.npy"));
        auto direct = anvil::models::resnet::load(folder.path, cpu());
        CHECK(anvil_test::max_relative_error(classifier.logits(pixels), direct.logits(pixels)) == 0.0);
    }
    SUBCASE("a timm folder: architecture, num_classes and pretrained_cfg, torchvision's names") {
        // How timm's ResNets appear on the Hub (timm/resnet50.a1_in1k and the like).
        temporary_folder folder;
        write_torchvision_copy(folder.path);
        auto direct = anvil::models::resnet::load(folder.path, cpu());
        const auto classes = static_cast<std::int64_t>(direct.labels().size());
        std::string labels;
        for (std::int64_t i = 0; i < classes; ++i)
            labels += (i ? ", \"class " : "\"class ") + std::to_string(i) + "\"";
        std::ofstream(folder.path / "config.json")
            << R"({"architecture": "resnet18", "num_classes": )" << classes
            << R"(, "num_features": 64, "global_pool": "avg", "pretrained_cfg": {"tag": "a1_in1k",
               "input_size": [3, 160, 160], "interpolation": "bicubic", "crop_pct": 0.95, "crop_mode": "center",
               "mean": [0.5, 0.25, 0.125], "std": [0.2, 0.3, 0.4], "num_classes": )"
            << classes << R"(, "label_names": [)" << labels << "]}}";
        auto classifier = image_classifier::load(folder.path, cpu());
        CHECK(classifier.architecture() == "resnet");
        CHECK(classifier.labels()[3] == "class 3");
        const auto pixels = anvil_test::load_npy(data_path("resnet/inputs_a.npy"));
        CHECK(anvil_test::max_relative_error(classifier.logits(pixels), direct.logits(pixels)) == 0.0);
        // timm's transforms_imagenet_eval: Resize(floor(160 / 0.95) = 168), CenterCrop(160), bicubic.
        const auto p = classifier.preprocessing();
        CHECK(p.resize_shortest_edge == 168);
        CHECK(p.crop_height == 160);
        CHECK(p.crop_width == 160);
        CHECK(p.filter == anvil::resample::bicubic);
        CHECK(p.mean[1] == doctest::Approx(0.25));
        CHECK(p.std[2] == doctest::Approx(0.4));
        CHECK(p.rescale_factor == doctest::Approx(1.0 / 255.0));

        // What timm folders anvil does not run say so.
        std::ofstream(folder.path / "config.json") << R"({"architecture": "resnet50d", "num_classes": 1000})";
        CHECK_THROWS_WITH_AS(static_cast<void>(image_classifier::load(folder.path, cpu())),
                             doctest::Contains("timm architecture 'resnet50d' is not one anvil runs"),
                             anvil::unsupported_error);
        std::ofstream(folder.path / "config.json") << R"({"architecture": "resnet18", "num_classes": 1000})";
        CHECK_THROWS_WITH_AS(static_cast<void>(image_classifier::load(folder.path, cpu())),
                             doctest::Contains("num_classes 1000 does not match the classifier's"),
                             anvil::format_error);
        // A non-square input_size loads (timm's ResizeKeepRatio to floor(side / 0.875), then the crop), and
        // so does a crop_mode anvil does not implement: it is refused only when an image is preprocessed.
        std::ofstream(folder.path / "config.json")
            << R"({"architecture": "resnet18", "pretrained_cfg": {"input_size": [3, 160, 200]}})";
        const auto wide = image_classifier::load(folder.path, cpu()).preprocessing();
        CHECK(wide.cover_height == 182);
        CHECK(wide.cover_width == 228);
        CHECK(wide.output_height() == 160);
        CHECK(wide.output_width() == 200);
        std::ofstream(folder.path / "config.json")
            << R"({"architecture": "resnet18", "pretrained_cfg": {"crop_mode": "border"}})";
        auto bordered = image_classifier::load(folder.path, cpu());
        CHECK(anvil_test::max_relative_error(bordered.logits(pixels), direct.logits(pixels)) == 0.0);
        CHECK(bordered.preprocessing().refused.find("crop_mode \"border\"") != std::string::npos);
    }
}

TEST_CASE("image_classifier: top_classes ranks logits by softmax, ties by index, unnamed classes by number") {
    const auto logits = anvil::host_tensor::from(
        std::vector<float>{0.0f, 2.0f, 2.0f, -1.0f, 60.0f, 0.0f, 0.0f, 0.0f}, anvil::dims{2, 4});
    const auto top = image_classifier::top_classes(logits, {"a", "b", "c"}, 3);
    REQUIRE(top.size() == 2);
    REQUIRE(top[0].size() == 3);
    CHECK(top[0][0].index == 1);
    CHECK(top[0][0].label == "b");
    CHECK(top[0][1].index == 2);
    CHECK(top[0][2].index == 0);
    // e^2 / (1 + 2 e^2 + e^-1)
    const double e2 = std::exp(2.0);
    CHECK(top[0][0].probability == doctest::Approx(e2 / (1.0 + 2.0 * e2 + std::exp(-1.0))).epsilon(1e-6));
    // A large logit neither overflows nor loses the others: they are e^-60 each, not NaN.
    CHECK(top[1][0].index == 0);
    CHECK(top[1][0].probability == doctest::Approx(1.0));
    CHECK(top[1][1].probability > 0.0f);
    CHECK(top[1][1].probability < 1e-25f);
    CHECK(image_classifier::top_classes(logits, {"a"}, 5)[0][3].label == "LABEL_3");
    CHECK_THROWS_WITH_AS(static_cast<void>(image_classifier::top_classes(
                             anvil::host_tensor::from(std::vector<float>(4, 0.0f), anvil::dims{4}), {}, 1)),
                         doctest::Contains("expected logits [images, classes], got [4]"), anvil::shape_error);
}

TEST_CASE("image_classifier: folders that hold no image classifier say what they hold") {
    temporary_folder folder;
    CHECK_THROWS_WITH_AS(static_cast<void>(image_classifier::load(folder.path, cpu())),
                         doctest::Contains("neither a config.json nor .safetensors weights"),
                         anvil::unsupported_error);
    // ViT weights without their config.json: not torchvision's ResNet, so nothing to go by.
    std::filesystem::copy_file(data_path("vit/vit/model.safetensors"), folder.path / "model.safetensors");
    CHECK_THROWS_WITH_AS(static_cast<void>(image_classifier::load(folder.path, cpu())),
                         doctest::Contains("there is no config.json, and the weights (40 tensors, the first "
                                           "'classifier.bias') are not torchvision's ResNet"),
                         anvil::unsupported_error);
    std::ofstream(folder.path / "config.json") << R"({"model_type": "bert", "hidden_size": 36})";
    CHECK_THROWS_WITH_AS(
        static_cast<void>(image_classifier::load(folder.path, cpu())),
        doctest::Contains("config.json: model_type 'bert' is not an image classifier anvil "
                          "runs; anvil runs Hugging Face's vit, deit and resnet, and timm's ResNets"),
        anvil::unsupported_error);
    std::ofstream(folder.path / "config.json") << R"({"hidden_size": 36})";
    CHECK_THROWS_WITH_AS(static_cast<void>(image_classifier::load(folder.path, cpu())),
                         doctest::Contains("config.json: there is neither a model_type (Hugging Face) nor an "
                                           "architecture (timm)"),
                         anvil::unsupported_error);
    CHECK_THROWS_WITH_AS(static_cast<void>(image_classifier::load(folder.path / "absent", cpu())),
                         doctest::Contains("absent: not a model folder (no such directory)"),
                         anvil::io_error);
}

}  // namespace test_image_classifier
