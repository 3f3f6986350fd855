// anvil example: zero-shot image classification with CLIP — no training, just the labels you name.
//
//   zero_shot MODEL_DIR IMAGE LABEL [LABEL...] [--template "a photo of a {}."] [--backend
//   cpu|ane|coreml|auto]
//
// MODEL_DIR is a CLIPModel folder (openai/clip-vit-base-patch32, ...): config.json, model.safetensors,
// tokenizer.json, preprocessor_config.json. IMAGE is PNG or JPEG (when anvil is built with stb_image) or
// PPM/PGM. Prints the labels, most probable first.
#include <anvil/models/vision.hpp>

#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace {

int usage() {
    std::fputs(
        "usage: zero_shot MODEL_DIR IMAGE LABEL [LABEL...] [--template T] [--backend cpu|ane|coreml|auto]\n",
        stderr);
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> positional;
    anvil::models::load_options options;
    std::string label_template = "a photo of a {}.";
    for (int i = 1; i < argc; ++i) {
        const std::string_view argument = argv[i];
        if (argument == "--backend" && i + 1 < argc) {
            const std::string_view backend = argv[++i];
            if (backend == "cpu")
                options.compile.target = anvil::device::cpu;
            else if (backend == "ane")
                options.compile.target = anvil::device::ane;
            else if (backend == "coreml")
                options.compile.target = anvil::device::coreml;
            else if (backend == "auto")
                options.compile.target = anvil::device::automatic;
            else
                return usage();
        } else if (argument == "--template" && i + 1 < argc) {
            label_template = argv[++i];
        } else {
            positional.emplace_back(argument);
        }
    }
    if (positional.size() < 3) return usage();
    try {
        auto model = anvil::models::clip::load(positional[0], options);
        const anvil::image picture = anvil::read_image(positional[1]);
        const anvil::host_tensor pixels = anvil::preprocess(picture, model.preprocessing());
        const anvil::host_tensor batch =
            pixels.reshaped(anvil::dims{1, pixels.shape()[0], pixels.shape()[1], pixels.shape()[2]});
        const std::vector<std::string> labels(positional.begin() + 2, positional.end());
        const auto ranked = model.zero_shot(batch, labels, label_template);  // one list per image
        for (const auto& entry : ranked.front())
            std::printf("%.4f  %s\n", static_cast<double>(entry.probability), entry.label.c_str());
    } catch (const anvil::error& e) {
        std::fprintf(stderr, "zero_shot: %s\n", e.what());
        return 1;
    }
    return 0;
}
