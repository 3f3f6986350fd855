// A BERT encoder stack built from the shared blocks, loaded from a random-weight checkpoint in Hugging Face's
// format (bf16 weights, 2 layers, hidden 40, 4 heads, a padded batch) and compared with the output of an
// independent PyTorch implementation written from transformers' modeling_bert.py
// (tools/reference/bert_stack.py, which wrote tests/data/bert_stack/).
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

#include <cmath>
#include <memory>
#include <string>

// A namespace of its own, so the test files can be compiled together (a unity build).
namespace test_bert_stack {

namespace {

const std::string folder = std::string(ANVIL_TEST_DATA_DIR) + "/bert_stack";

struct bert_stack {
    anvil::graph g;
    anvil::tensor<float> output;

    explicit bert_stack(const std::string& weights_path) {
        const auto config = anvil::models::bert_config::from_json(
            anvil::json::parse_file(folder + "/config.json"), "config.json");
        auto weights = std::make_shared<const anvil::checkpoint>(anvil::checkpoint::open(weights_path));
        anvil::models::weight_loader loader(g, weights);
        std::vector<anvil::models::post_norm_encoder_layer> layers;
        for (std::int64_t i = 0; i < config.layers; ++i)
            layers.push_back(anvil::models::load_bert_layer(loader, config, i));
        auto hidden = g.input<float>("hidden", anvil::dims{2, 9, config.hidden});
        auto mask = g.input<float>("mask", anvil::dims{2, 9});
        output = anvil::models::bert_encoder(layers, hidden, mask);
    }
};

anvil::host_tensor load_npy(const std::string& name) {
    const auto array = anvil::npy::read(folder + "/" + name);
    return anvil::host_tensor::from(array.to_f32(), anvil::dims(array.shape));
}

double max_relative_error(const anvil::host_tensor& got, const anvil::host_tensor& expected) {
    REQUIRE(got.shape() == expected.shape());
    const auto a = got.to_f32();
    const auto b = expected.to_f32();
    double worst = 0.0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        worst =
            std::max(worst, std::fabs(double{a[i]} - double{b[i]}) / std::max(1.0, std::fabs(double{b[i]})));
    }
    return worst;
}

}  // namespace

TEST_CASE("bert stack: matches PyTorch on a padded batch, with the optimised and the reference kernels") {
    bert_stack model(folder + "/model.safetensors");
    const auto hidden = load_npy("input.npy");
    const auto mask = load_npy("mask.npy");
    const auto expected = load_npy("output.npy");
    for (const auto kernels : {anvil::cpu_kernels::optimized, anvil::cpu_kernels::reference}) {
        anvil::compile_options options;
        options.kernels = kernels;
        auto program = anvil::compile({model.output}, options);
        const auto out = program.run({{"hidden", hidden}, {"mask", mask}});
        CAPTURE(static_cast<int>(kernels));
        CHECK(max_relative_error(out[0], expected) < 1e-4);
    }
    // The fp16 view of the same run: no overflow on these inputs, and agreement to fp16's precision.
    anvil::compile_options ane;
    ane.ane_numerics = true;
    auto program = anvil::compile({model.output}, ane);
    const auto out = program.run({{"hidden", hidden}, {"mask", mask}});
    CHECK(program.numerics().clean());
    CHECK(max_relative_error(out[0], expected) < 3e-2);
}

TEST_CASE("bert stack: a checkpoint that does not fit names the tensor and both shapes") {
    const auto config = anvil::models::bert_config::from_json(
        anvil::json::parse(R"({"num_hidden_layers": 1, "hidden_size": 48, "num_attention_heads": 4})"),
        "config.json");
    anvil::graph g;
    auto weights =
        std::make_shared<const anvil::checkpoint>(anvil::checkpoint::open(folder + "/model.safetensors"));
    anvil::models::weight_loader loader(g, weights);
    CHECK_THROWS_WITH_AS(
        static_cast<void>(anvil::models::load_bert_layer(loader, config, 0)),
        doctest::Contains("tensor 'encoder.layer.0.attention.self.query.weight': expected shape "
                          "[48, 48], got [40, 40]"),
        anvil::shape_error);
    const auto deeper = anvil::models::bert_config::from_json(
        anvil::json::parse(
            R"({"num_hidden_layers": 3, "hidden_size": 40, "num_attention_heads": 4, "intermediate_size": 72})"),
        "config.json");
    CHECK_THROWS_WITH_AS(
        static_cast<void>(anvil::models::load_bert_layer(loader, deeper, 2)),
        doctest::Contains("the tensor 'encoder.layer.2.attention.self.query.weight' is missing"),
        anvil::format_error);
    CHECK_THROWS_WITH_AS(
        static_cast<void>(anvil::models::bert_config::from_json(
            anvil::json::parse(R"({"hidden_size": 40, "num_attention_heads": 6})"), "config.json")),
        doctest::Contains("config.json: hidden_size 40 is not a multiple of num_attention_heads 6"),
        anvil::format_error);
    CHECK_THROWS_WITH_AS(static_cast<void>(anvil::models::bert_config::from_json(
                             anvil::json::parse(R"({"hidden_act": "mish"})"), "config.json")),
                         doctest::Contains("hidden_act 'mish' is not supported"), anvil::unsupported_error);
}

}  // namespace test_bert_stack
