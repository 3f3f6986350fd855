// anvil example: sentence embeddings from a sentence-transformers folder, and how alike the texts are.
//
//   embed MODEL_DIR TEXT [TEXT...] [--backend cpu|ane|auto]
//
// MODEL_DIR is a Hugging Face folder as `huggingface-cli download sentence-transformers/all-MiniLM-L6-v2`
// leaves it: config.json, model.safetensors, tokenizer.json, modules.json, 1_Pooling/config.json. Prints each
// text's embedding size and the cosine similarity of every pair (the embeddings are L2-normalised when the
// folder's modules.json says so; the similarity divides by the norms anyway).
#include <anvil/models/text.hpp>

#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace {

int usage() {
    std::fputs("usage: embed MODEL_DIR TEXT [TEXT...] [--backend cpu|ane|auto]\n", stderr);
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> positional;
    anvil::models::load_options options;  // the Neural Engine where there is one, else the CPU
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
        } else {
            positional.emplace_back(argument);
        }
    }
    if (positional.size() < 2) return usage();
    const std::vector<std::string> texts(positional.begin() + 1, positional.end());
    try {
        auto encoder = anvil::models::sentence_encoder::load(positional[0], options);
        const anvil::host_tensor embeddings = encoder.encode(texts);  // [texts, dim]
        const auto values = embeddings.to_f32();
        const auto dim = static_cast<std::size_t>(embeddings.shape()[1]);
        const auto row = [&](std::size_t i) { return values.data() + i * dim; };
        const auto dot = [&](const float* a, const float* b) {
            double sum = 0;
            for (std::size_t j = 0; j < dim; ++j)
                sum += double{a[j]} * double{b[j]};
            return sum;
        };
        for (std::size_t i = 0; i < texts.size(); ++i)
            std::printf("%zu [%zu] %s\n", i, dim, texts[i].c_str());
        for (std::size_t i = 0; i < texts.size(); ++i) {
            for (std::size_t j = i + 1; j < texts.size(); ++j) {
                const double cosine =
                    dot(row(i), row(j)) / std::sqrt(dot(row(i), row(i)) * dot(row(j), row(j)));
                std::printf("similarity(%zu, %zu) = %.4f\n", i, j, cosine);
            }
        }
    } catch (const anvil::error& e) {
        std::fprintf(stderr, "embed: %s\n", e.what());
        return 1;
    }
    return 0;
}
