// anvil quickstart: a small two-layer network, stored the way Hugging Face stores weights and run on the
// default device — at this stage of anvil, the CPU through the thread pool (the expression front end and the
// Neural Engine backend build on the same pieces).
//
// 1. writes the weights as a bf16 safetensors file (what a checkpoint on the Hub looks like),
// 2. opens it zero-copy and checks every tensor's shape,
// 3. runs y = softmax(W2 · relu(W1 · x + b1) + b2) for a batch of inputs, rows in parallel.
#include <anvil/anvil.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <vector>

namespace {

constexpr std::int64_t inputs = 4, hidden = 16, classes = 3;

// Deterministic weights: a fixed pattern, so the demo prints the same numbers everywhere.
std::vector<anvil::bfloat16> pattern(std::size_t count, float scale) {
    std::vector<anvil::bfloat16> values(count);
    for (std::size_t i = 0; i < count; ++i) {
        values[i] = anvil::bfloat16(scale * std::sin(static_cast<float>(i) * 0.7f + 0.3f));
    }
    return values;
}

std::vector<float> load(const anvil::checkpoint& weights, std::string_view name,
                        std::vector<std::int64_t> shape) {
    const anvil::tensor_view& tensor = weights.tensor(name);
    if (!std::equal(shape.begin(), shape.end(), tensor.shape().begin(), tensor.shape().end())) {
        throw anvil::shape_error(
            anvil::detail::message("quickstart: tensor '", name, "' has an unexpected shape"));
    }
    return tensor.to_f32();
}

}  // namespace

int main() {
    try {
        const auto path = std::filesystem::temp_directory_path() / "anvil-quickstart.safetensors";
        anvil::safetensors_writer writer;
        writer.set_metadata("format", "pt");
        const auto w1 = pattern(hidden * inputs, 0.8f), b1 = pattern(hidden, 0.1f);
        const auto w2 = pattern(classes * hidden, 0.5f), b2 = pattern(classes, 0.05f);
        writer.add<anvil::bfloat16>("fc1.weight", {hidden, inputs}, w1);
        writer.add<anvil::bfloat16>("fc1.bias", {hidden}, b1);
        writer.add<anvil::bfloat16>("fc2.weight", {classes, hidden}, w2);
        writer.add<anvil::bfloat16>("fc2.bias", {classes}, b2);
        writer.write(path);

        const anvil::checkpoint weights = anvil::checkpoint::open(path);
        const auto fc1_w = load(weights, "fc1.weight", {hidden, inputs});
        const auto fc1_b = load(weights, "fc1.bias", {hidden});
        const auto fc2_w = load(weights, "fc2.weight", {classes, hidden});
        const auto fc2_b = load(weights, "fc2.bias", {classes});
        std::printf("loaded %s: %zu tensors, %llu parameters\n", path.filename().c_str(),
                    weights.tensors().size(), static_cast<unsigned long long>(weights.parameter_count()));

        const std::size_t batch = 6;
        std::vector<float> x(batch * inputs), y(batch * classes);
        for (std::size_t i = 0; i < x.size(); ++i)
            x[i] = static_cast<float>(i % 7) / 3.0f - 1.0f;

        anvil::thread_pool::global().parallel_for(0, batch, 1, [&](std::size_t begin, std::size_t end) {
            std::vector<float> h(hidden);
            for (std::size_t row = begin; row < end; ++row) {
                for (std::size_t j = 0; j < hidden; ++j) {
                    float sum = fc1_b[j];
                    for (std::size_t k = 0; k < inputs; ++k)
                        sum += fc1_w[j * inputs + k] * x[row * inputs + k];
                    h[j] = std::max(sum, 0.0f);
                }
                float* out = &y[row * classes];
                float largest = -INFINITY, total = 0.0f;
                for (std::size_t c = 0; c < classes; ++c) {
                    float sum = fc2_b[c];
                    for (std::size_t j = 0; j < hidden; ++j)
                        sum += fc2_w[c * hidden + j] * h[j];
                    out[c] = sum;
                    largest = std::max(largest, sum);
                }
                for (std::size_t c = 0; c < classes; ++c)
                    total += out[c] = std::exp(out[c] - largest);
                for (std::size_t c = 0; c < classes; ++c)
                    out[c] /= total;
            }
        });

        std::printf("device: cpu (%zu threads)\n", anvil::thread_pool::global().size());
        for (std::size_t row = 0; row < batch; ++row) {
            std::printf("x[%zu] -> p = [", row);
            for (std::size_t c = 0; c < classes; ++c)
                std::printf(c ? ", %.4f" : "%.4f", y[row * classes + c]);
            std::printf("]\n");
        }
        std::filesystem::remove(path);
        return 0;
    } catch (const anvil::error& e) {
        std::fprintf(stderr, "quickstart: %s\n", e.what());
        return 1;
    }
}
