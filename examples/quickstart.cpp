// anvil quickstart: a small two-layer network stored the way Hugging Face stores weights, built as a graph of
// tensor expressions, compiled and run on the CPU backend.
//
// 1. writes the weights as a bf16 safetensors file (what a checkpoint on the Hub looks like),
// 2. loads them by name with their shapes checked — as graph constants pointing into the mapped file,
// 3. builds y = softmax(fc2(relu(fc1(x)))) and compiles it (the bf16 weights stay bf16: the GEMM converts
//    them while packing),
// 4. runs it on a batch, then again with ane_numerics to see the values the Neural Engine's fp16 would give.
#include <anvil/anvil.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

namespace {

constexpr std::int64_t inputs = 4, hidden = 16, classes = 3, batch = 6;

// Deterministic weights: a fixed pattern, so the demo prints the same numbers everywhere.
std::vector<anvil::bfloat16> pattern(std::size_t count, float scale) {
    std::vector<anvil::bfloat16> values(count);
    for (std::size_t i = 0; i < count; ++i) {
        values[i] = anvil::bfloat16(scale * std::sin(static_cast<float>(i) * 0.7f + 0.3f));
    }
    return values;
}

void print_rows(const char* title, const anvil::host_tensor& y) {
    std::printf("%s\n", title);
    const auto values = y.values<float>();
    for (std::int64_t row = 0; row < batch; ++row) {
        std::printf("  x[%lld] -> p = [", static_cast<long long>(row));
        for (std::int64_t c = 0; c < classes; ++c) {
            std::printf(c ? ", %.4f" : "%.4f",
                        static_cast<double>(values[static_cast<std::size_t>(row * classes + c)]));
        }
        std::printf("]\n");
    }
}

}  // namespace

int main() {
    try {
        const auto path = std::filesystem::temp_directory_path() / "anvil-quickstart.safetensors";
        anvil::safetensors_writer writer;
        writer.set_metadata("format", "pt");
        writer.add<anvil::bfloat16>("fc1.weight", {hidden, inputs}, pattern(hidden * inputs, 0.8f));
        writer.add<anvil::bfloat16>("fc1.bias", {hidden}, pattern(hidden, 0.1f));
        writer.add<anvil::bfloat16>("fc2.weight", {classes, hidden}, pattern(classes * hidden, 0.5f));
        writer.add<anvil::bfloat16>("fc2.bias", {classes}, pattern(classes, 0.05f));
        writer.write(path);

        auto weights = std::make_shared<const anvil::checkpoint>(anvil::checkpoint::open(path));
        std::printf("loaded %s: %zu tensors, %llu parameters\n", path.filename().c_str(),
                    weights->tensors().size(), static_cast<unsigned long long>(weights->parameter_count()));

        anvil::graph g;
        anvil::models::weight_loader loader(g, weights);
        const auto fc1 = anvil::models::load_linear(loader, "fc1", hidden, inputs);
        const auto fc2 = anvil::models::load_linear(loader, "fc2", classes, hidden);
        auto x = g.input<float>("x", anvil::dims{batch, inputs});
        auto y = anvil::softmax(apply(fc2, anvil::relu(apply(fc1, x))));

        std::vector<float> rows(static_cast<std::size_t>(batch * inputs));
        for (std::size_t i = 0; i < rows.size(); ++i)
            rows[i] = static_cast<float>(i % 7) / 3.0f - 1.0f;
        const auto x_value = anvil::host_tensor::from(rows, anvil::dims{batch, inputs});

        auto program = anvil::compile({y});
        std::printf("device: cpu (%zu threads); the compiled graph:\n%s", anvil::thread_pool::global().size(),
                    program.dump().c_str());
        print_rows("fp32:", program.run({{"x", x_value}})[0]);

        anvil::compile_options fp16;
        fp16.ane_numerics = true;
        auto rounded = anvil::compile({y}, fp16);
        print_rows("fp16, as the Neural Engine stores values:", rounded.run({{"x", x_value}})[0]);
        std::printf("fp16 overflow: %s\n",
                    rounded.numerics().clean() ? "none" : rounded.numerics().to_string().c_str());
        std::filesystem::remove(path);
        return 0;
    } catch (const anvil::error& e) {
        std::fprintf(stderr, "quickstart: %s\n", e.what());
        return 1;
    }
}
