// Tests of the ONNX importer (models/import/onnx_import.hpp). Where the expected values come from:
// tools/fixtures/make_onnx_fixtures.py wrote tests/data/onnx/ops/*.onnx with the onnx package and computed
// each model's outputs from its seeded inputs with numpy (the operator specs' semantics written out there,
// Softmax's two meanings before and after opset 13 among them); expected.json holds both.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

#include "malformed_corpus.hpp"
#include "model_test_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace test_onnx_import {

using anvil::onnx_model;
using anvil_test::data_path;

anvil::dims shape_of(const anvil::json::value& v) {
    std::vector<std::int64_t> extents;
    for (const auto& e : v.find("shape")->as_array())
        extents.push_back(e.as_int());
    return anvil::dims(extents);
}

std::vector<double> values_of(const anvil::json::value& v) {
    std::vector<double> out;
    for (const auto& e : v.find("values")->as_array())
        out.push_back(e.as_double());
    return out;
}

// A result's values as doubles: a float64 result as it is (it must match to the last bits), others from f32.
std::vector<double> doubles_of(const anvil::host_tensor& t) {
    if (t.type() == anvil::dtype::f64) {
        const auto values = t.values<double>();
        return {values.begin(), values.end()};
    }
    const std::vector<float> floats = t.to_f32();
    return {floats.begin(), floats.end()};
}

TEST_CASE("onnx import: each op model gives the outputs numpy computed, on the CPU") {
    const anvil::json::value expected = anvil::json::parse_file(data_path("onnx/ops/expected.json"));
    for (const auto& entry : expected.as_object()) {
        const std::string& name = entry.first;
        const anvil::json::value& run = entry.second;
        CAPTURE(name);
        const onnx_model model = onnx_model::open(data_path("onnx/ops/" + name + ".onnx"));
        // The inputs as the generator saved them (.npy, in their own dtypes), given by value: the importer
        // reads a value only where an op needs it settled (reshape_shape_input's target).
        std::map<std::string, anvil::host_tensor, std::less<>> inputs;
        for (const auto& input : run.find("inputs")->as_object()) {
            const anvil::npy::array array =
                anvil::npy::read(data_path("onnx/ops/" + name + "." + input.first + ".npy"));
            anvil::host_tensor t(array.type, anvil::dims(array.shape));
            if (!array.data.empty()) std::memcpy(t.raw(), array.data.data(), array.data.size());
            CHECK(t.shape() == shape_of(input.second));
            inputs.emplace(input.first, std::move(t));
        }
        const anvil::models::onnx_import imported = anvil::models::import_onnx(model, {}, inputs);
        const std::vector<std::string> fixed =
            name == "reshape_shape_input" ? std::vector<std::string>{"target"} : std::vector<std::string>{};
        CHECK(imported.fixed_inputs == fixed);
        anvil::compile_options cpu;
        cpu.target = anvil::device::cpu;
        auto program = anvil::compile(imported.outputs, cpu);
        std::vector<anvil::named_tensor> feeds;
        for (const std::string& input : imported.input_names) {
            CHECK(std::find(fixed.begin(), fixed.end(), input) == fixed.end());
            feeds.push_back({input, inputs.at(input)});
        }
        const std::vector<anvil::host_tensor> got = program.run(feeds);
        const auto& outputs = run.find("outputs")->as_object();
        REQUIRE(got.size() == outputs.size());
        for (const auto& result_entry : outputs) {
            const std::string& output = result_entry.first;
            const anvil::json::value& data = result_entry.second;
            CAPTURE(output);
            const auto at = std::find(imported.output_names.begin(), imported.output_names.end(), output);
            REQUIRE(at != imported.output_names.end());
            const anvil::host_tensor& result =
                got.at(static_cast<std::size_t>(at - imported.output_names.begin()));
            CHECK(result.shape() == shape_of(data));
            const auto want = values_of(data);
            const auto have = doubles_of(result);
            REQUIRE(have.size() == want.size());
            double worst = 0.0;
            for (std::size_t k = 0; k < want.size(); ++k)
                worst = std::max(worst, std::fabs(have[k] - want[k]) / (1.0 + std::fabs(want[k])));
            MESSAGE(name, ".", output, ": max error ", worst);
            // Float64 models are computed in float64: numpy's double results, to rounding.
            CHECK(worst < (result.type() == anvil::dtype::f64 ? 1e-15 : 1e-5));
        }
    }
}

TEST_CASE("onnx import: an imported Gemm runs on the simulated Neural Engine within fp16 tolerance") {
    anvil_test::ane_target ane;
    if (!anvil_test::use_ane_simulator(ane)) return;
    const anvil::json::value expected = anvil::json::parse_file(data_path("onnx/ops/expected.json"));
    const anvil::json::value& run = *expected.find("gemm");
    const anvil::json::value& a = *run.find("inputs")->find("a");
    const onnx_model model = onnx_model::open(data_path("onnx/ops/gemm.onnx"));
    const auto imported = anvil::models::import_onnx(model, {{"a", shape_of(a)}});
    auto program = anvil::compile(imported.outputs, ane.options);
    const std::vector<double> a_values = values_of(a);
    const std::vector<float> a_floats(a_values.begin(), a_values.end());  // float32 in the model
    const auto got = program.run({{"a", anvil::host_tensor::from(a_floats, shape_of(a))}});
    const auto want = values_of(*run.find("outputs")->find("y"));
    const auto have = got.at(0).to_f32();
    REQUIRE(have.size() == want.size());
    double worst = 0.0;
    for (std::size_t k = 0; k < want.size(); ++k)
        worst = std::max(worst, std::fabs(double{have[k]} - double{want[k]}) / (1.0 + std::fabs(want[k])));
    MESSAGE("gemm on the simulated Neural Engine: max error ", worst);
    CHECK(worst < 5e-3);
    // On the Neural Engine, unless the simulator was told to refuse it (the fault-injection runs), and then
    // on the CPU with the refusal recorded.
    const anvil::placement_report placement = program.placement();
    if (placement.refused() == 0) {
        CHECK(std::any_of(placement.segments.begin(), placement.segments.end(),
                          [](const anvil::placement_segment& segment) { return segment.device == "ane"; }));
    }
}

TEST_CASE("onnx import: symbolic dims, given shapes, undefined inputs and unsupported ops are named") {
    const onnx_model tiny = onnx_model::open(data_path("onnx/tiny.onnx"));
    // x is [batch, 4]: the batch comes from the shape given.
    const auto imported = anvil::models::import_onnx(tiny, {{"x", anvil::dims{5, 4}}});
    CHECK(imported.input_names == std::vector<std::string>{"x"});
    CHECK(imported.outputs.at(0).shape() == anvil::dims{5, 3});
    CHECK_THROWS_WITH_AS((void)anvil::models::import_onnx(tiny), doctest::Contains("dim 0 is 'batch'"),
                         anvil::shape_error);
    CHECK_THROWS_WITH_AS((void)anvil::models::import_onnx(tiny, {{"x", anvil::dims{5, 7}}}),
                         doctest::Contains("input 'x' dim 1 is 4, given [5, 7]"), anvil::shape_error);
    CHECK_THROWS_WITH_AS((void)anvil::models::import_onnx(tiny, {{"y", anvil::dims{1, 3}}}),
                         doctest::Contains("the model has no input 'y'"), anvil::shape_error);
    // A Reshape target given as a graph input needs its value; its shape alone leaves it unsettled.
    const onnx_model by_input = onnx_model::open(data_path("onnx/ops/reshape_shape_input.onnx"));
    CHECK_THROWS_WITH_AS(
        (void)anvil::models::import_onnx(by_input),
        doctest::Contains("unsupported ONNX op 'Reshape' (node 'reshape', opset 13): the shape "
                          "'target' is computed at run time"),
        anvil::unsupported_error);
    // A float64 Pad value that pad's float attribute would round is refused, naming the value.
    const onnx_model pad_float64 = onnx_model::open(data_path("onnx/pad_float64.onnx"));
    CHECK_THROWS_WITH_AS(
        (void)anvil::models::import_onnx(pad_float64),
        doctest::Contains("unsupported ONNX op 'Pad' (node 'pad_fill', opset 13): the float64 "
                          "constant value 0.1, which float32 would round"),
        anvil::unsupported_error);
    // An op with no import: the error says unsupported and names the op, the node and the opset.
    const onnx_model branches = onnx_model::open(data_path("onnx/subgraphs.onnx"));
    CHECK_THROWS_WITH_AS((void)anvil::models::import_onnx(branches),
                         doctest::Contains("unsupported ONNX op 'If' (node 'branch', opset 16)"),
                         anvil::unsupported_error);
}

TEST_CASE("onnx import: graphs with undefined inputs, cycles and values made twice are refused by name") {
    check_malformed_corpus("onnx_graph", 6, [](const std::filesystem::path& path) {
        (void)anvil::models::import_onnx(onnx_model::open(path));
    });
}

}  // namespace test_onnx_import
