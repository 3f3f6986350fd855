// export_mlpackage and `anvil export`'s recipes: a sentence encoder (every family) and the image classifiers
// written as Core ML packages, then compiled, loaded and run through the Core ML classes of the simulator as
// an app would run them (logical int32 / fp16 inputs, no surfaces), with Core ML's compute plan read back.
//
// Where the expected values come from: each recipe on the CPU backend (checked against PyTorch in
// test_sentence_encoder.cpp, test_resnet.cpp and test_vit.cpp), at the fp16 tolerance the Core ML route's
// tests use; the placement rules from MIL.md §2.5 (embedding lookups on the CPU). protoc's view of the same
// packages is the CTest coreml.exported_packages (tests/coreml/export_packages.sh).
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>
#include <anvil/backend/coreml/coreml_framework.hpp>

#include "ane_simulator.hpp"
#include "model_test_support.hpp"
#include "text_encoder_fixtures.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace test_coreml_export {

namespace {

namespace coreml = anvil::detail::coreml;
using anvil::dims;
using anvil::host_tensor;
using anvil_test::temporary_folder;

std::vector<std::byte> bytes_of(std::span<const anvil::half> values) {
    std::vector<std::byte> out(values.size() * 2);
    std::memcpy(out.data(), values.data(), out.size());
    return out;
}

// Compiles and loads `package` through Core ML (the simulator), as an app does.
coreml::coreml_model load_package(const std::filesystem::path& package, const std::filesystem::path& where) {
    const std::filesystem::path compiled = where / "model.mlmodelc";
    coreml::coreml_model::compile(package, compiled);
    return coreml::coreml_model::load(compiled);
}

// One right-padded text through an exported text model, as an app calls it: input_ids (and token_type_ids,
// when `types` is given) padded to `length` with zeros, attention_mask 1 over the text's tokens. Returns the
// output `name`, `width` fp16 values, as floats.
std::vector<float> run_text(const coreml::coreml_model& model, const std::vector<std::int32_t>& tokens,
                            const std::vector<std::int32_t>* types, std::int64_t length, const char* name,
                            std::int64_t width) {
    const auto n = static_cast<std::size_t>(length);
    std::vector<std::int32_t> ids(n, 0), type_ids(n, 0);
    std::vector<anvil::half> mask(n, anvil::half(0.0f));
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        ids[i] = tokens[i];
        if (types != nullptr) type_ids[i] = (*types)[i];
        mask[i] = anvil::half(1.0f);
    }
    std::vector<std::byte> mask_bytes = bytes_of(mask);
    std::vector<std::byte> out(static_cast<std::size_t>(width) * 2);
    std::vector<coreml::coreml_model::input> inputs{
        {"input_ids",
         0,
         0,
         0,
         reinterpret_cast<std::byte*>(ids.data()),
         {1, length},
         coreml::multi_array_int32},
        {"attention_mask", 0, 0, 0, mask_bytes.data(), {1, length}, coreml::multi_array_float16}};
    if (types != nullptr) {
        inputs.push_back({"token_type_ids",
                          0,
                          0,
                          0,
                          reinterpret_cast<std::byte*>(type_ids.data()),
                          {1, length},
                          coreml::multi_array_int32});
    }
    const std::vector<coreml::coreml_model::output> outputs{
        {name, 0, 0, 0, out.data(), {1, width}, coreml::multi_array_float16}};
    model.predict(inputs, outputs);
    std::vector<float> values(static_cast<std::size_t>(width));
    for (std::size_t j = 0; j < values.size(); ++j) {
        anvil::half h;
        std::memcpy(&h, out.data() + 2 * j, 2);
        values[j] = static_cast<float>(h);
    }
    return values;
}

}  // namespace

TEST_CASE("export: a sentence encoder's package gives the recipe's embeddings through Core ML") {
    if (!anvil_test::ane_simulator_available()) {
        MESSAGE("this build has no ANE simulator: the package was not run");
        return;
    }
    for (const std::string name :
         {"bert_sentence", "roberta_sentence", "mpnet_sentence", "distilbert_sentence"}) {
        CAPTURE(name);
        const auto folder = anvil_test::text_encoders::fixture(name);
        const auto input = anvil_test::text_encoders::read_texts(folder);
        std::size_t longest = 0;
        for (const auto& ids : input.ids)
            longest = std::max(longest, ids.size());
        auto encoder = anvil::models::sentence_encoder::load(folder, anvil_test::cpu());
        // Padded on the right where the position table leaves room.
        const auto length = std::min(static_cast<std::int64_t>(longest + 3), encoder.encoder().max_tokens());
        const host_tensor expected = encoder.encode_ids(input.ids);  // types 0, as the package has them

        temporary_folder where("anvil-export");
        anvil::graph g;
        const anvil::value embedding = encoder.build_graph(g, length);
        anvil::mlpackage_options options;
        options.output_names = {"embedding"};
        const auto summary = anvil::export_mlpackage(std::span<const anvil::value>(&embedding, 1),
                                                     where.path / "m.mlpackage", options);
        REQUIRE(summary.inputs.size() == 2);
        CHECK(summary.inputs[0].name == "input_ids");
        CHECK(summary.inputs[0].dtype == "int32");
        CHECK(summary.inputs[0].shape == std::vector<std::int64_t>{1, length});
        CHECK(summary.inputs[1].name == "attention_mask");
        CHECK(summary.inputs[1].dtype == "fp16");
        REQUIRE(summary.outputs.size() == 1);
        CHECK(summary.outputs[0].shape == std::vector<std::int64_t>{1, encoder.dimension()});

        auto model = load_package(where.path / "m.mlpackage", where.path);
        double worst = 0.0;
        const auto dim = static_cast<std::size_t>(encoder.dimension());
        for (std::size_t t = 0; t < input.ids.size(); ++t) {
            const std::vector<float> got =
                run_text(model, input.ids[t], nullptr, length, "embedding", encoder.dimension());
            const auto want = expected.values<float>().subspan(t * dim, dim);
            double scale = 0.0, error = 0.0;
            for (std::size_t j = 0; j < dim; ++j) {
                scale = std::max(scale, static_cast<double>(std::abs(want[j])));
                error = std::max(error, static_cast<double>(std::abs(got[j] - want[j])));
            }
            worst = std::max(worst, error / scale);
        }
        MESSAGE(name, ": exported package vs the CPU recipe, max relative error ", worst);
        CHECK(worst < 1.5e-2);  // the Core ML route's fp16 tolerance (test_sentence_encoder.cpp)

        // Core ML's placement: the embedding lookup on the CPU (MIL.md §2.5), every linear on the ANE.
        const auto plan = coreml::compute_plan(where.path / "model.mlmodelc");
        REQUIRE(plan.has_value());
        std::size_t gathers = 0, linears = 0;
        for (const auto& op : *plan) {
            CAPTURE(op.op);
            if (op.op.ends_with(".gather")) {
                ++gathers;
                CHECK(op.device == "cpu");
            }
            if (op.op.ends_with(".conv") || op.op.ends_with(".linear") || op.op.ends_with(".matmul")) {
                ++linears;
                CHECK(op.device == "ane");
            }
        }
        CHECK(gathers >= 1);
        CHECK(linears >= 1);
    }
    CHECK(anvil_test::sim().violations() == "");
}

TEST_CASE("export: a cross-encoder's package gives the recipe's logits through Core ML") {
    if (!anvil_test::ane_simulator_available()) {
        MESSAGE("this build has no ANE simulator: the package was not run");
        return;
    }
    for (const std::string name : {"bert_cross", "distilbert_cross", "mpnet_cross", "xlmr_cross"}) {
        CAPTURE(name);
        const auto folder = anvil_test::text_encoders::fixture(name);
        const auto input = anvil_test::text_encoders::read_texts(folder);
        auto scorer = anvil::models::cross_encoder::load(folder, anvil_test::cpu());
        std::size_t longest = 0;
        for (const auto& ids : input.ids)
            longest = std::max(longest, ids.size());
        const auto length = std::min(static_cast<std::int64_t>(longest + 2), scorer.encoder().max_tokens());
        const host_tensor expected = scorer.logits_ids(input.ids, input.types);
        const auto labels = static_cast<std::size_t>(expected.shape()[1]);

        temporary_folder where("anvil-export");
        anvil::graph g;
        const anvil::value logits = scorer.build_graph(g, length);
        anvil::mlpackage_options options;
        options.output_names = {"logits"};
        const auto summary = anvil::export_mlpackage(std::span<const anvil::value>(&logits, 1),
                                                     where.path / "x.mlpackage", options);
        const bool typed = scorer.config().table().token_types;
        REQUIRE(summary.inputs.size() == (typed ? 3U : 2U));
        CHECK(summary.inputs[0].name == "input_ids");
        if (typed) CHECK(summary.inputs[1].name == "token_type_ids");
        CHECK(summary.inputs.back().name == "attention_mask");

        auto model = load_package(where.path / "x.mlpackage", where.path);
        double worst = 0.0;
        for (std::size_t t = 0; t < input.ids.size(); ++t) {
            const std::vector<float> got = run_text(model, input.ids[t], typed ? &input.types[t] : nullptr,
                                                    length, "logits", static_cast<std::int64_t>(labels));
            for (std::size_t j = 0; j < labels; ++j) {
                const float want = expected.values<float>()[t * labels + j];
                worst = std::max(worst, static_cast<double>(std::abs(got[j] - want)) /
                                            std::max(1.0, static_cast<double>(std::abs(want))));
            }
        }
        MESSAGE(name, ": exported package vs the CPU recipe, max relative error ", worst);
        CHECK(worst < 2e-2);
    }
    CHECK(anvil_test::sim().violations() == "");
}

TEST_CASE("export: an image classifier's package gives the recipe's logits through Core ML") {
    if (!anvil_test::ane_simulator_available()) {
        MESSAGE("this build has no ANE simulator: the package was not run");
        return;
    }
    for (const std::string name : {"resnet/hf_basic", "vit/vit", "vit/deit"}) {
        CAPTURE(name);
        auto classifier =
            anvil::models::image_classifier::load(anvil_test::data_path(name), anvil_test::cpu());
        const anvil::image_size size =
            classifier.architecture() == "resnet" ? anvil::image_size{32, 40} : classifier.input_size();
        std::vector<float> pixels(static_cast<std::size_t>(3 * size.height * size.width));
        for (std::size_t i = 0; i < pixels.size(); ++i)
            pixels[i] = static_cast<float>((i * 37) % 101) / 50.0f - 1.0f;
        const host_tensor expected =
            classifier.logits(host_tensor::from(pixels, dims{1, 3, size.height, size.width}));

        temporary_folder where("anvil-export");
        anvil::graph g;
        const auto outputs = classifier.build_graph(g, size);
        anvil::mlpackage_options options;
        options.output_names = {"logits"};
        options.author = "anvil tests";
        const auto summary = anvil::export_mlpackage(outputs, where.path / "c.mlpackage", options);
        REQUIRE(summary.inputs.size() == 1);
        CHECK(summary.inputs[0].shape == std::vector<std::int64_t>{1, 3, size.height, size.width});
        const auto classes = static_cast<std::int64_t>(classifier.labels().size());
        CHECK(summary.outputs[0].shape == std::vector<std::int64_t>{1, classes});
        // The same graph exports to the same bytes.
        anvil::graph again;
        CHECK(
            anvil::export_mlpackage(classifier.build_graph(again, size), where.path / "d.mlpackage", options)
                .digest == summary.digest);

        auto model = load_package(where.path / "c.mlpackage", where.path);
        std::vector<anvil::half> halves(pixels.begin(), pixels.end());
        std::vector<std::byte> in = bytes_of(halves);
        std::vector<std::byte> out(static_cast<std::size_t>(classes) * 2);
        const std::vector<coreml::coreml_model::input> inputs{{summary.inputs[0].name, 0, 0, 0, in.data(),
                                                               summary.inputs[0].shape,
                                                               coreml::multi_array_float16}};
        const std::vector<coreml::coreml_model::output> results{
            {"logits", 0, 0, 0, out.data(), {1, classes}, coreml::multi_array_float16}};
        model.predict(inputs, results);
        double scale = 0.0, error = 0.0;
        for (std::int64_t j = 0; j < classes; ++j) {
            anvil::half h;
            std::memcpy(&h, out.data() + 2 * j, 2);
            const float want = expected.values<float>()[static_cast<std::size_t>(j)];
            scale = std::max(scale, static_cast<double>(std::abs(want)));
            error = std::max(error, std::abs(static_cast<double>(static_cast<float>(h)) - want));
        }
        MESSAGE(name, ": exported package vs the CPU recipe, max error ", error, " (largest logit ", scale,
                ")");
        CHECK(error < 2e-2 * std::max(scale, 1.0));
    }
    CHECK(anvil_test::sim().violations() == "");
}

TEST_CASE("export: what cannot be exported is named") {
    temporary_folder where("anvil-export");
    anvil::graph g;
    const auto x = g.input("x", anvil::dtype::f32, dims{2, 8});
    const auto y = g.apply(anvil::op::relu, {x});
    CHECK_THROWS_WITH_AS(
        (void)anvil::export_mlpackage(std::span<const anvil::value>(&y, 1), where.path / "m.pkg"),
        doctest::Contains("does not end in .mlpackage"), anvil::error);
    anvil::mlpackage_options two_names;
    two_names.output_names = {"a", "b"};
    CHECK_THROWS_WITH_AS((void)anvil::export_mlpackage(std::span<const anvil::value>(&y, 1),
                                                       where.path / "m.mlpackage", two_names),
                         doctest::Contains("2 output names for 1 outputs"), anvil::error);
    anvil::graph bytes;
    const auto b = bytes.input("raw", anvil::dtype::u8, dims{4});
    const auto c = bytes.apply(anvil::op::cast, {b}, [] {
        anvil::attributes a;
        a.to = anvil::dtype::f32;
        return a;
    }());
    CHECK_THROWS_WITH_AS(
        (void)anvil::export_mlpackage(std::span<const anvil::value>(&c, 1), where.path / "m.mlpackage"),
        doctest::Contains("input 'raw' is u8"), anvil::unsupported_error);
    CHECK_FALSE(std::filesystem::exists(where.path / "m.mlpackage"));
}

}  // namespace test_coreml_export
