// anvil example: classify images with a ResNet, ViT or DeiT folder, preprocessed as the folder says.
//
//   classify MODEL_DIR IMAGE [IMAGE...] [--top K] [--backend cpu|ane|auto]
//
// MODEL_DIR is an image-classification folder (microsoft/resnet-50, google/vit-base-patch16-224,
// facebook/deit-small-patch16-224, or a torchvision ResNet state_dict): config.json, model.safetensors,
// preprocessor_config.json. IMAGE is PNG or JPEG (when anvil is built with stb_image), PPM/PGM, or .npy
// pixels. Prints the K most probable labels of each image.
#include <anvil/models/vision.hpp>

#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace {

int usage() {
    std::fputs("usage: classify MODEL_DIR IMAGE [IMAGE...] [--top K] [--backend cpu|ane|auto]\n", stderr);
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> positional;
    anvil::models::load_options options;
    std::size_t top = 5;
    for (int i = 1; i < argc; ++i) {
        const std::string_view argument = argv[i];
        if (argument == "--backend" && i + 1 < argc) {
            const std::string_view backend = argv[++i];
            if (backend == "cpu")
                options.compile.target = anvil::device::cpu;
            else if (backend == "ane")
                options.compile.target = anvil::device::ane;
            else if (backend == "auto")
                options.compile.target = anvil::device::automatic;
            else
                return usage();
        } else if (argument == "--top" && i + 1 < argc) {
            top = std::stoul(argv[++i]);
        } else {
            positional.emplace_back(argument);
        }
    }
    if (positional.size() < 2 || top == 0) return usage();
    try {
        auto classifier = anvil::models::image_classifier::load(positional[0], options);
        std::vector<anvil::image> images;
        for (std::size_t i = 1; i < positional.size(); ++i)
            images.push_back(anvil::read_image(positional[i]));
        const auto results = classifier.classify(anvil::preprocess(images, classifier.preprocessing()), top);
        for (std::size_t i = 0; i < results.size(); ++i) {
            std::printf("%s\n", positional[i + 1].c_str());
            for (const auto& guess : results[i])
                std::printf("  %.4f  %s\n", static_cast<double>(guess.probability), guess.label.c_str());
        }
    } catch (const anvil::error& e) {
        std::fprintf(stderr, "classify: %s\n", e.what());
        return 1;
    }
    return 0;
}
