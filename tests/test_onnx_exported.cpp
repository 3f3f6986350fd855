// Models exported from PyTorch 1.13 (torch.onnx.export), imported and run, against PyTorch's own outputs.
// Where the expected values come from: tools/fixtures/make_onnx_export_fixtures.py built torchvision's
// ResNet-18, a BERT encoder run on a padded batch with its attention mask, a GPT-2 block and a small CNN
// (depthwise convolution, pooling, upsampling), exported each at another opset (13, 14, 17, 11) with dynamic
// axes, and saved PyTorch's outputs for seeded inputs. The weights are random and not committed (ResNet-18's
// are 45 MB): each model's float initializers are external data in weights.bin, which this test writes from
// weights.tsv with the generator the script used to fill the PyTorch modules (splitmix64, below).
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

#include "model_test_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace test_onnx_exported {

namespace fs = std::filesystem;
using anvil_test::data_path;

std::uint64_t splitmix64(std::uint64_t x) {
    std::uint64_t z = x + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// The generator's value for float e of weights.bin: the top 24 bits of splitmix64(e) / 2^23 - 1, exact in
// float, times the initializer's scale (a float product, as numpy's float32 one).
float weight(std::uint64_t e, float scale) {
    const auto bits = static_cast<float>(splitmix64(e) >> 40);
    return (bits / 8388608.0f - 1.0f) * scale;
}

// The model's folder copied to `to`, with weights.bin written from weights.tsv.
void materialise(const fs::path& from, const fs::path& to) {
    fs::copy(from, to, fs::copy_options::recursive);
    std::ifstream manifest(from / "weights.tsv");
    REQUIRE(manifest);
    std::vector<float> file;
    std::string line;
    while (std::getline(manifest, line)) {
        if (line.empty() || line[0] == '#') continue;
        std::istringstream fields(line);
        std::string name, offset_text, count_text, scale_text;
        std::getline(fields, name, '\t');
        std::getline(fields, offset_text, '\t');
        std::getline(fields, count_text, '\t');
        std::getline(fields, scale_text, '\t');
        const std::uint64_t first = std::stoull(offset_text) / 4, count = std::stoull(count_text);
        const float scale = std::strtof(scale_text.c_str(), nullptr);  // a hex float, exact
        REQUIRE(first == file.size());
        for (std::uint64_t e = first; e < first + count; ++e)
            file.push_back(weight(e, scale));
    }
    std::ofstream out(to / "weights.bin", std::ios::binary);
    out.write(reinterpret_cast<const char*>(file.data()),
              static_cast<std::streamsize>(file.size() * sizeof(float)));
    REQUIRE(out.good());
}

anvil::host_tensor read_npy(const fs::path& path) {
    const anvil::npy::array array = anvil::npy::read(path.string());
    anvil::host_tensor t(array.type, anvil::dims(array.shape));
    if (!array.data.empty()) std::memcpy(t.raw(), array.data.data(), array.data.size());
    return t;
}

// max |got - expected| over max |expected|: the error against the output's own range.
double error_over_range(const anvil::host_tensor& got, const anvil::host_tensor& expected) {
    REQUIRE(got.shape() == expected.shape());
    const auto a = got.to_f32(), b = expected.to_f32();
    double worst = 0.0, range = 0.0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (!std::isfinite(a[i])) return INFINITY;
        worst = std::max(worst, std::fabs(double{a[i]} - double{b[i]}));
        range = std::max(range, std::fabs(double{b[i]}));
    }
    return worst / std::max(range, 1e-30);
}

struct exported_run {
    std::vector<anvil::host_tensor> outputs, expected;
    anvil::placement_report placement;
};

exported_run run_exported(const std::string& name, const std::vector<std::string>& inputs,
                          const anvil::compile_options& options) {
    anvil_test::temporary_folder folder("anvil-onnx-exported");
    const fs::path model_folder = folder.path / name;
    materialise(data_path("onnx/exported/" + name), model_folder);
    const anvil::onnx_model model = anvil::onnx_model::open(model_folder / "model.onnx");
    std::map<std::string, anvil::dims, std::less<>> shapes;
    std::vector<anvil::named_tensor> feeds;
    for (const std::string& input : inputs) {
        anvil::host_tensor t = read_npy(model_folder / (input + ".npy"));
        shapes.emplace(input, t.shape());
        feeds.push_back({input, std::move(t)});
    }
    const anvil::models::onnx_import imported = anvil::models::import_onnx(model, shapes);
    CHECK(imported.fixed_inputs.empty());
    auto program = anvil::compile(imported.outputs, options);
    exported_run run;
    run.outputs = program.run(feeds);
    for (const std::string& output : imported.output_names)
        run.expected.push_back(read_npy(model_folder / ("expected." + output + ".npy")));
    run.placement = program.placement();
    return run;
}

struct exported_model {
    std::string name;
    std::vector<std::string> inputs;
};

const std::vector<exported_model>& exported_models() {
    static const std::vector<exported_model> models = {
        {"resnet18", {"image"}},
        {"bert", {"input_ids", "attention_mask", "token_type_ids"}},
        {"gpt2_block", {"hidden_states"}},
        {"small_cnn", {"picture"}},
    };
    return models;
}

TEST_CASE("onnx exported: PyTorch's ResNet-18, BERT, GPT-2 block and CNN agree with PyTorch on the CPU") {
    for (const exported_model& m : exported_models()) {
        CAPTURE(m.name);
        anvil::compile_options cpu;
        cpu.target = anvil::device::cpu;
        const exported_run run = run_exported(m.name, m.inputs, cpu);
        REQUIRE(run.outputs.size() == run.expected.size());
        for (std::size_t i = 0; i < run.outputs.size(); ++i) {
            const double error = error_over_range(run.outputs[i], run.expected[i]);
            MESSAGE(m.name, " on the CPU: max error ", error, " of the output's range");
            // fp32 with another summation order than PyTorch's (its BLAS and convolution algorithms).
            CHECK(error < 1e-5);
        }
    }
}

TEST_CASE("onnx exported: the same models on the simulated Neural Engine within fp16 tolerance") {
    anvil_test::ane_target ane;
    if (!anvil_test::use_ane_simulator(ane)) return;
    for (const exported_model& m : exported_models()) {
        CAPTURE(m.name);
        const exported_run run = run_exported(m.name, m.inputs, ane.options);
        REQUIRE(run.outputs.size() == run.expected.size());
        for (std::size_t i = 0; i < run.outputs.size(); ++i) {
            const double error = error_over_range(run.outputs[i], run.expected[i]);
            MESSAGE(m.name, " on the simulated Neural Engine: max error ", error, " of the output's range");
            // fp16 storage between ops (11 bits of mantissa), through up to 20 layers.
            CHECK(error < 2e-2);
        }
        // The convolutions and products run on the Neural Engine, unless the simulator was told to refuse
        // them (the fault-injection runs), and then on the CPU with the refusal recorded.
        if (run.placement.refused() == 0) {
            CHECK(std::any_of(run.placement.segments.begin(), run.placement.segments.end(),
                              [](const anvil::placement_segment& s) { return s.device == "ane"; }));
        }
    }
}

}  // namespace test_onnx_exported
