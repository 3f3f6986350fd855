// bench_bert: a BERT-base-sized encoder stack (random weights) on anvil's CPU backend against PyTorch 1.13 on
// the same machine, in the same run. bench/bert_vs_pytorch.sh drives it: tools/reference/bert_stack.py writes
// the weights, the input, PyTorch's output (computed in float64) and PyTorch's best time at the same thread
// count; this program times anvil on the same folder, checks its output, and prints the ratio.
//
//   bench_bert DIR [--threads N] [--runs R]
#include <anvil/anvil.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: bench_bert DIR [--threads N] [--runs R]\n");
        return 2;
    }
    const std::string folder = argv[1];
    std::size_t threads = 1;
    int runs = 20;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (std::strcmp(argv[i], "--threads") == 0)
            threads = static_cast<std::size_t>(std::atoi(argv[i + 1]));
        if (std::strcmp(argv[i], "--runs") == 0) runs = std::atoi(argv[i + 1]);
    }
    try {
        const auto config_json = anvil::json::parse_file(folder + "/config.json");
        const auto config = anvil::models::bert_config::from_json(config_json, "config.json");
        const auto input = anvil::npy::read(folder + "/input.npy");
        const auto mask = anvil::npy::read(folder + "/mask.npy");
        const auto expected = anvil::npy::read(folder + "/output.npy").to_f32();
        const anvil::dims input_shape(input.shape), mask_shape(mask.shape);

        anvil::graph g;
        auto weights =
            std::make_shared<const anvil::checkpoint>(anvil::checkpoint::open(folder + "/model.safetensors"));
        anvil::models::weight_loader loader(g, weights);
        std::vector<anvil::models::post_norm_encoder_layer> layers;
        for (std::int64_t i = 0; i < config.layers; ++i)
            layers.push_back(anvil::models::load_bert_layer(loader, config, i));
        auto hidden = g.input<float>("hidden", input_shape);
        auto padding = g.input<float>("mask", mask_shape);
        auto output = anvil::models::bert_encoder(layers, hidden, padding);

        anvil::compile_options options;
        options.threads = threads;
        const auto compile_start = std::chrono::steady_clock::now();
        auto program = anvil::compile({output}, options);
        const double compile_ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - compile_start)
                .count();
        const auto hidden_value = anvil::host_tensor::from(input.to_f32(), input_shape);
        const auto mask_value = anvil::host_tensor::from(mask.to_f32(), mask_shape);

        std::vector<anvil::host_tensor> result;
        for (int i = 0; i < 3; ++i)
            result = program.run({{"hidden", hidden_value}, {"mask", mask_value}});
        std::vector<double> times;
        for (int i = 0; i < runs; ++i) {
            const auto start = std::chrono::steady_clock::now();
            result = program.run({{"hidden", hidden_value}, {"mask", mask_value}});
            times.push_back(
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
        }
        std::sort(times.begin(), times.end());
        const auto got = result[0].to_f32();
        double worst = 0.0;
        for (std::size_t i = 0; i < got.size(); ++i) {
            worst = std::max(worst, std::fabs(double{got[i]} - double{expected[i]}) /
                                        std::max(1.0, std::fabs(double{expected[i]})));
        }
        double pytorch_ms = 0.0;
        try {
            const auto timing = anvil::json::parse_file(folder + "/pytorch_timing.json");
            pytorch_ms = timing.at("pytorch_ms_best").as_double();
        } catch (const anvil::error&) {
        }
        std::printf("anvil BERT stack: %lld layers, hidden %lld, heads %lld, input %s, %zu thread(s)\n",
                    static_cast<long long>(config.layers), static_cast<long long>(config.hidden),
                    static_cast<long long>(config.heads), input_shape.to_string().c_str(), threads);
        std::printf("  compile %.1f ms; run best %.2f ms, median %.2f ms over %d runs\n", compile_ms,
                    times.front(), times[times.size() / 2], runs);
        std::printf("  max relative error vs PyTorch float64: %.2e (%s 1e-4)\n", worst,
                    worst < 1e-4 ? "within" : "BEYOND");
        if (pytorch_ms > 0.0) {
            std::printf("  PyTorch best %.2f ms -> anvil is %.2fx PyTorch's speed\n", pytorch_ms,
                        pytorch_ms / times.front());
        }
        return worst < 1e-4 ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_bert: error: %s\n", e.what());
        return 1;
    }
}
