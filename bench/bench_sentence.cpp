// bench_sentence: sentences embedded per second by a sentence encoder (MiniLM-L6-sized, random weights) on
// anvil's CPU backend against PyTorch 1.13 on the same machine, in the same run. bench/sentence_vs_pytorch.sh
// drives it: tools/reference/sentence_bench.py writes the model folder, the token ids of a batch of
// mixed-length sentences, PyTorch's embeddings and PyTorch's best time (batches of 32, padded to each batch's
// longest, as sentence-transformers does); this program embeds the same ids with anvil (batches of 32),
// checks the embeddings against PyTorch's, and prints both rates and their ratio.
//
//   bench_sentence DIR [--threads N] [--runs R]
#include <anvil/anvil.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: bench_sentence DIR [--threads N] [--runs R]\n");
        return 2;
    }
    const std::string folder = argv[1];
    std::size_t threads = 1;
    int runs = 5;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (std::strcmp(argv[i], "--threads") == 0)
            threads = static_cast<std::size_t>(std::atoi(argv[i + 1]));
        if (std::strcmp(argv[i], "--runs") == 0) runs = std::max(1, std::atoi(argv[i + 1]));
    }
    try {
        const auto request = anvil::json::parse_file(folder + "/ids.json");
        std::vector<std::vector<std::int32_t>> ids;
        for (const auto& row : request.find("ids")->as_array()) {
            std::vector<std::int32_t> one;
            for (const auto& id : row.as_array())
                one.push_back(static_cast<std::int32_t>(id.as_int()));
            ids.push_back(std::move(one));
        }
        const auto pytorch = anvil::json::parse_file(folder + "/pytorch_timing.json");
        const double pytorch_rate = pytorch.find("sentences_per_second")->as_double();
        const auto expected = anvil::npy::read(folder + "/expected.npy").to_f32();

        anvil::models::load_options options;
        options.compile.target = anvil::device::cpu;
        options.compile.threads = threads;
        auto encoder = anvil::models::sentence_encoder::load(folder + "/model", options);
        anvil::models::encode_options encode;
        encode.batch_size = 32;

        // The first pass compiles one program per (batch, padded length) the batches need; it is reported
        // apart, and the timed passes run the compiled programs.
        const auto first_start = std::chrono::steady_clock::now();
        anvil::host_tensor embeddings = encoder.encode_ids(ids, {}, encode);
        const double first_s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - first_start).count();
        double best_s = 1e300;
        for (int r = 0; r < runs; ++r) {
            const auto start = std::chrono::steady_clock::now();
            embeddings = encoder.encode_ids(ids, {}, encode);
            best_s = std::min(
                best_s, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        }
        const auto got = embeddings.to_f32();
        if (got.size() != expected.size()) {
            std::fprintf(stderr, "bench_sentence: %zu values, PyTorch gave %zu\n", got.size(),
                         expected.size());
            return 1;
        }
        double worst = 0.0;
        for (std::size_t i = 0; i < got.size(); ++i)
            worst = std::max(worst, std::fabs(double{got[i]} - double{expected[i]}));
        const double rate = static_cast<double>(ids.size()) / best_s;
        std::printf(
            "{\"sentences\": %zu, \"threads\": %zu, \"anvil_sentences_per_second\": %.1f, "
            "\"pytorch_sentences_per_second\": %.1f, \"anvil_over_pytorch\": %.3f, \"first_pass_s\": %.3f, "
            "\"programs\": %zu, \"max_abs_vs_pytorch\": %.3g}\n",
            ids.size(), threads, rate, pytorch_rate, rate / pytorch_rate, first_s,
            encoder.compiled_programs(), worst);
        return worst < 1e-4 ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_sentence: %s\n", e.what());
        return 1;
    }
}
