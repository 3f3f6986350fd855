// anvil example: rerank passages for a query with a cross-encoder, as sentence-transformers' CrossEncoder
// does.
//
//   rerank MODEL_DIR QUERY PASSAGE [PASSAGE...] [--backend cpu|ane|auto]
//
// MODEL_DIR is a `*ForSequenceClassification` folder (cross-encoder/ms-marco-MiniLM-L-6-v2,
// BAAI/bge-reranker-base,
// ...): config.json, model.safetensors, tokenizer.json. Prints the passages best first with their scores (the
// model's logit for the pair; one label, so higher is more relevant).
#include <anvil/models/text.hpp>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

int usage() {
    std::fputs("usage: rerank MODEL_DIR QUERY PASSAGE [PASSAGE...] [--backend cpu|ane|auto]\n", stderr);
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> positional;
    anvil::models::load_options options;
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
    if (positional.size() < 3) return usage();
    try {
        auto reranker = anvil::models::cross_encoder::load(positional[0], options);
        std::vector<std::pair<std::string, std::string>> pairs;
        for (std::size_t i = 2; i < positional.size(); ++i)
            pairs.emplace_back(positional[1], positional[i]);
        const std::vector<float> scores = reranker.predict(pairs);
        std::vector<std::size_t> order(scores.size());
        std::iota(order.begin(), order.end(), std::size_t{0});
        std::stable_sort(order.begin(), order.end(),
                         [&](std::size_t a, std::size_t b) { return scores[a] > scores[b]; });
        for (const std::size_t i : order)
            std::printf("%8.4f  %s\n", static_cast<double>(scores[i]), pairs[i].second.c_str());
    } catch (const anvil::error& e) {
        std::fprintf(stderr, "rerank: %s\n", e.what());
        return 1;
    }
    return 0;
}
