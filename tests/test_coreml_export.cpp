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
#include <cstdlib>
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

// An input or output of an exported model as an app passes it: a packed row-major array of `shape`.
coreml::coreml_model::input array_input(std::string name, void* data, std::vector<std::int64_t> shape,
                                        long type = coreml::multi_array_float16) {
    return {std::move(name), 0, 0, 0, static_cast<std::byte*>(data), std::move(shape), type};
}
coreml::coreml_model::output fp16_output(std::string name, std::vector<std::byte>& out,
                                         std::vector<std::int64_t> shape) {
    return {std::move(name), 0, 0, 0, out.data(), std::move(shape), coreml::multi_array_float16};
}

// fp16 bytes as floats.
std::vector<float> floats_of(std::span<const std::byte> bytes) {
    std::vector<float> values(bytes.size() / 2);
    for (std::size_t j = 0; j < values.size(); ++j) {
        anvil::half h;
        std::memcpy(&h, bytes.data() + 2 * j, 2);
        values[j] = static_cast<float>(h);
    }
    return values;
}

// A graph with one output, exported as `package` with that output named `name`.
anvil::mlpackage_summary export_single(const anvil::value& output, const std::filesystem::path& package,
                                       const char* name, anvil::mlpackage_options options = {}) {
    options.output_names = {name};
    return anvil::export_mlpackage(std::span<const anvil::value>(&output, 1), package, options);
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
        array_input("input_ids", ids.data(), {1, length}, coreml::multi_array_int32),
        array_input("attention_mask", mask_bytes.data(), {1, length})};
    if (types != nullptr)
        inputs.push_back(
            array_input("token_type_ids", type_ids.data(), {1, length}, coreml::multi_array_int32));
    model.predict(inputs, std::vector{fp16_output(name, out, {1, width})});
    return floats_of(out);
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
        const auto summary = export_single(embedding, where.path / "m.mlpackage", "embedding");
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
        const auto summary = export_single(logits, where.path / "x.mlpackage", "logits");
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
        model.predict(std::vector{array_input(summary.inputs[0].name, in.data(), summary.inputs[0].shape)},
                      std::vector{fp16_output("logits", out, {1, classes})});
        const std::vector<float> got = floats_of(out);
        double scale = 0.0, error = 0.0;
        for (std::size_t j = 0; j < got.size(); ++j) {
            const float want = expected.values<float>()[j];
            scale = std::max(scale, static_cast<double>(std::abs(want)));
            error = std::max(error, std::abs(static_cast<double>(got[j]) - want));
        }
        MESSAGE(name, ": exported package vs the CPU recipe, max error ", error, " (largest logit ", scale,
                ")");
        CHECK(error < 2e-2 * std::max(scale, 1.0));
    }
    CHECK(anvil_test::sim().violations() == "");
}

TEST_CASE("export: a ViT-B/16-shaped folder's package runs its 16 x 16 patch conv on the Neural Engine") {
    if (!anvil_test::ane_simulator_available()) {
        MESSAGE("this build has no ANE simulator: the package was not run");
        return;
    }
    // google/vit-base-patch16-224's shape (224 x 224 images, 16 x 16 patches) with a tiny hidden size; the
    // expected logits are PyTorch's (tools/reference/patch16_fixtures.py), for the computed images.
    const std::string folder = anvil_test::data_path("vit/vit_b16");
    auto classifier = anvil::models::image_classifier::load(folder, anvil_test::cpu());
    const host_tensor want = anvil_test::load_npy(folder + "/logits.npy");  // [2, 7]
    temporary_folder where("anvil-export");
    anvil::graph g;
    anvil::mlpackage_options options;
    options.output_names = {"logits"};
    const auto summary = anvil::export_mlpackage(classifier.build_graph(g, classifier.input_size()),
                                                 where.path / "v.mlpackage", options);
    REQUIRE(summary.inputs.size() == 1);
    CHECK(summary.inputs[0].shape == std::vector<std::int64_t>{1, 3, 224, 224});
    const auto model = load_package(where.path / "v.mlpackage", where.path);
    std::vector<float> logits;
    for (std::int64_t n = 0; n < 2; ++n) {
        const auto image = anvil_test::patch16_pixels(1, 224, n).to_f32();
        std::vector<anvil::half> halves(image.begin(), image.end());
        std::vector<std::byte> in = bytes_of(halves), out(7 * 2);
        model.predict(std::vector{array_input(summary.inputs[0].name, in.data(), summary.inputs[0].shape)},
                      std::vector{fp16_output("logits", out, {1, 7})});
        const auto got = floats_of(out);
        logits.insert(logits.end(), got.begin(), got.end());
    }
    const double error = anvil_test::max_relative_error(host_tensor::from(logits, want.shape()), want);
    MESSAGE("vit_b16 package vs PyTorch: max relative error ", error);
    CHECK(error < 2e-2);
    // The patch conv written as a space-to-depth transpose and a 1x1 conv, and Core ML's plan puts every op
    // on the Neural Engine (a 16-wide kernel would be placed by Core ML itself, RUNTIME.md §0b #26) — unless
    // a variant of the suite injects faults, which move the ops they name to the CPU.
    const char* sim_options = std::getenv("ANVIL_ANE_SIM_OPTIONS");
    const std::string injected = sim_options ? sim_options : "";
    const bool faults =
        injected.find("fail_") != std::string::npos || injected.find("inject") != std::string::npos;
    const auto plan = coreml::compute_plan(where.path / "model.mlmodelc");
    REQUIRE(plan.has_value());
    std::size_t convs = 0, transposes = 0;
    for (const auto& op : *plan) {
        CAPTURE(op.op);
        CAPTURE(op.output);
        if (!faults) CHECK(op.device == "ane");
        convs += op.op.ends_with(".conv") ? 1 : 0;
        transposes += op.op.ends_with(".transpose") ? 1 : 0;
    }
    CHECK(convs >= 1);
    CHECK(transposes >= 1);
    CHECK(anvil_test::sim().violations() == "");
}

TEST_CASE("export: a conv kernel of any width is exported, never refused") {
    // The private compiler refuses a conv kernel 16 or wider (RUNTIME.md §0 #7); Core ML places such a conv
    // itself (§0b #26), so a package may hold one: a 1 x 16 kernel at stride 1 (no patch conv) stays a conv.
    temporary_folder where("anvil-export");
    anvil::graph g;
    const auto x = g.input("x", anvil::dtype::f32, dims{1, 2, 4, 40});
    const auto y =
        g.apply(anvil::op::conv2d,
                {x, g.constant(host_tensor::from(std::vector<float>(64, 0.05f), dims{2, 2, 1, 16}))});
    const auto summary = export_single(y, where.path / "wide.mlpackage", "y");
    CHECK(summary.outputs[0].shape == std::vector<std::int64_t>{1, 2, 4, 25});
    if (!anvil_test::ane_simulator_available()) return;
    // Core ML (the simulator's) places it on the CPU, as the kernel-width rule says, and runs it.
    const auto model = load_package(where.path / "wide.mlpackage", where.path);
    std::vector<anvil::half> ones(2 * 4 * 40, anvil::half(1.0f));
    std::vector<std::byte> in = bytes_of(ones), out(2 * 4 * 25 * 2);
    model.predict(std::vector{array_input("x", in.data(), {1, 2, 4, 40})},
                  std::vector{fp16_output("y", out, {1, 2, 4, 25})});
    for (const float v : floats_of(out))
        CHECK(v == doctest::Approx(2 * 16 * 0.05).epsilon(1e-2));
    const auto plan = coreml::compute_plan(where.path / "model.mlmodelc");
    REQUIRE(plan.has_value());
    for (const auto& op : *plan)
        if (op.op.ends_with(".conv")) CHECK(op.device == "cpu");
}

namespace {

// The prompt whose logits a decoder fixture's logits.npy holds (expected.json's logits_prompt).
std::vector<std::int32_t> logits_prompt(const std::string& folder) {
    const auto expected = anvil::json::parse_file(folder + "/expected.json");
    std::vector<std::int32_t> prompt;
    const auto index = static_cast<std::size_t>(expected.find("logits_prompt")->as_int());
    for (const auto& id : expected.find("prompts")->as_array()[index].as_array())
        prompt.push_back(static_cast<std::int32_t>(id.as_int()));
    return prompt;
}

// What an app does with an exported decoder LM (the contract `anvil export --help` states): the prompt in
// chunks of `tokens` (the last padded with tokens nothing reads or writes), each chunk's positions, the mask
// over the cache slots written so far and the chunk's own causal part (Mistral's window included), and
// cache_write placing each real token at the slot of its position. Returns the logits [prompt, V].
host_tensor run_decoder(const coreml::coreml_model& model, const anvil::models::decoder_config& c,
                        const std::vector<std::int32_t>& prompt, std::int64_t tokens, std::int64_t context,
                        const anvil::detail::ane::objc_object* given_state = nullptr,
                        std::int64_t start = 0) {
    const auto S = static_cast<std::size_t>(tokens);
    const auto T = static_cast<std::size_t>(context);
    const std::size_t V = static_cast<std::size_t>(c.vocab_size);
    const auto own_state = given_state == nullptr ? model.new_state() : anvil::detail::ane::objc_object();
    const auto* state = given_state != nullptr ? given_state : &own_state;
    const auto visible = [&](std::int64_t q, std::int64_t k) {
        return k <= q && (c.sliding_window == 0 || q - k < c.sliding_window);
    };
    std::vector<float> logits;
    const auto origin = static_cast<std::size_t>(start);  // the cache slots before it are already written
    for (std::size_t done = 0; done < prompt.size(); done += S) {
        const std::size_t real = std::min(S, prompt.size() - done);
        const std::size_t first = origin + done;
        std::vector<std::int32_t> ids(S, 0), positions(S, 0);
        std::vector<anvil::half> mask(S * (T + S), anvil::half(anvil::masked_score)),
            write(T * S, anvil::half(0.0f));
        for (std::size_t s = 0; s < S; ++s) {
            anvil::half* row = mask.data() + s * (T + S);
            if (s >= real) {  // padding: sees itself only, writes nothing
                row[T + s] = anvil::half(0.0f);
                continue;
            }
            const auto q = static_cast<std::int64_t>(first + s);
            ids[s] = prompt[done + s];
            positions[s] = static_cast<std::int32_t>(q);
            for (std::size_t t = 0; t < first; ++t)  // slot t holds position t
                if (visible(q, static_cast<std::int64_t>(t))) row[t] = anvil::half(0.0f);
            for (std::size_t j = 0; j <= s; ++j)
                if (visible(q, static_cast<std::int64_t>(first + j))) row[T + j] = anvil::half(0.0f);
            write[(first + s) * S + s] = anvil::half(1.0f);
        }
        std::vector<std::byte> mask_bytes = bytes_of(mask), write_bytes = bytes_of(write);
        std::vector<std::byte> out(S * V * 2);
        const std::vector<coreml::coreml_model::input> inputs{
            array_input("ids", ids.data(), {1, tokens}, coreml::multi_array_int32),
            array_input("positions", positions.data(), {1, tokens}, coreml::multi_array_int32),
            array_input("mask", mask_bytes.data(), {1, 1, tokens, context + tokens}),
            array_input("cache_write", write_bytes.data(), {1, 1, context, tokens})};
        model.predict(inputs, std::vector{fp16_output("logits", out, {1, tokens, c.vocab_size})}, state);
        const std::vector<float> values = floats_of(out);
        logits.insert(logits.end(), values.begin(), values.begin() + static_cast<std::ptrdiff_t>(real * V));
    }
    return host_tensor::from(logits, dims{static_cast<std::int64_t>(prompt.size()), c.vocab_size});
}

}  // namespace

TEST_CASE("export: a decoder LM's package keeps its KV caches in MLState and gives PyTorch's logits") {
    if (!anvil_test::ane_simulator_available()) {
        MESSAGE("this build has no ANE simulator: the package was not run");
        return;
    }
    // The fixtures' PyTorch logits (tools/fixtures: the Hugging Face modules written out in plain PyTorch),
    // at the tolerance the Neural Engine route's decoder tests use (test_causal_lm.cpp).
    for (const std::string name : {"gpt2", "llama", "llama_linear", "qwen2", "qwen3", "mistral"}) {
        const auto folder = anvil_test::data_path("decoder_lms/" + name);
        const std::vector<std::int32_t> prompt = logits_prompt(folder);
        const host_tensor want = anvil_test::load_npy(folder + "/logits.npy");
        anvil::models::causal_lm_options options;
        options.load = anvil_test::cpu();
        const auto lm = anvil::models::causal_lm::load(folder, options);
        const auto& c = lm.config();
        for (const std::int64_t tokens : {std::int64_t{1}, std::int64_t{4}}) {
            CAPTURE(name);
            CAPTURE(tokens);
            const std::int64_t context = 32;
            temporary_folder where("anvil-export");
            const anvil::mlpackage_function step = lm.export_function("main", tokens, context);
            REQUIRE(step.outputs.size() == static_cast<std::size_t>(1 + 2 * c.layers));
            REQUIRE(step.states.size() == static_cast<std::size_t>(2 * c.layers));
            CHECK(step.states[1].input == anvil::models::cache_value_name(0));
            CHECK(step.states[1].output == 2);  // logits, k0, v0, ...
            anvil::mlpackage_options package;
            package.output_names = step.output_names;
            package.ios18 = true;
            package.states = step.states;
            const auto summary = anvil::export_mlpackage(step.outputs, where.path / "lm.mlpackage", package);
            REQUIRE(summary.states.size() == static_cast<std::size_t>(2 * c.layers));
            CHECK(summary.states[0].shape == std::vector<std::int64_t>{1, c.kv_heads, context, c.head_dim});
            REQUIRE(summary.outputs.size() == 1);
            CHECK(summary.outputs[0].shape == std::vector<std::int64_t>{1, tokens, c.vocab_size});

            const auto model = load_package(where.path / "lm.mlpackage", where.path);
            const host_tensor got = run_decoder(model, c, prompt, tokens, context);
            const double error = anvil_test::max_relative_error(got, want);
            MESSAGE(name, " (", tokens, " token(s) per prediction): logits max relative error ", error);
            CHECK(error < 5e-2);
        }
    }
    // Dynamic RoPE scaling recomputes its frequencies from each call's longest position, so past
    // max_position_embeddings no constant table is right: refused, naming the limit.
    anvil::models::causal_lm_options options;
    options.load = anvil_test::cpu();
    const auto dynamic =
        anvil::models::causal_lm::load(anvil_test::data_path("decoder_lms/llama_dynamic"), options);
    const std::int64_t limit = dynamic.config().rope.max_position_embeddings;
    const std::string at_most = "export at most " + std::to_string(limit);
    anvil::graph g;
    CHECK_THROWS_WITH_AS((void)dynamic.build_stateful_graph(g, 1, limit + 1),
                         doctest::Contains(at_most.c_str()), anvil::unsupported_error);
    anvil::graph fits;
    CHECK(dynamic.build_stateful_graph(fits, 1, limit).size() ==
          static_cast<std::size_t>(1 + 2 * dynamic.config().layers));
    CHECK(anvil_test::sim().counter("coreml_states") > 0);
    CHECK(anvil_test::sim().violations() == "");
}

TEST_CASE("export: a prefill and a decode function share one package's weights and one MLState") {
    if (!anvil_test::ane_simulator_available()) {
        MESSAGE("this build has no ANE simulator: the package was not run");
        return;
    }
    const auto folder = anvil_test::data_path("decoder_lms/qwen2");
    const std::vector<std::int32_t> prompt = logits_prompt(folder);
    REQUIRE(prompt.size() > 8);
    const host_tensor want = anvil_test::load_npy(folder + "/logits.npy");
    anvil::models::causal_lm_options lm_options;
    lm_options.load = anvil_test::cpu();
    const auto lm = anvil::models::causal_lm::load(folder, lm_options);
    const auto& c = lm.config();
    const std::int64_t context = 32, prefill = 8;
    temporary_folder where("anvil-export");
    const std::vector<anvil::mlpackage_function> functions{lm.export_function("prefill", prefill, context),
                                                           lm.export_function("decode", 1, context)};
    anvil::mlpackage_options options;
    options.ios18 = true;
    options.default_function = "decode";
    const auto both = anvil::export_mlpackage(functions, where.path / "lm.mlpackage", options);
    anvil::mlpackage_options single = options;
    single.output_names = {"logits"};
    single.states = functions[1].states;
    const auto one = anvil::export_mlpackage(functions[1].outputs, where.path / "one.mlpackage", single);
    MESSAGE("weights: ", both.weight_bytes, " bytes for prefill and decode, ", one.weight_bytes,
            " for decode");
    CHECK(both.weight_bytes <= one.weight_bytes + 4096);  // only the metadata of what differs, if anything
    REQUIRE(both.functions.size() == 2);
    CHECK(both.inputs.front().shape == std::vector<std::int64_t>{1, 1});  // the default: decode

    // The prompt's first 8 tokens in one prefill prediction, the rest one decode prediction each, all on
    // the decode model's state.
    coreml::coreml_model::compile(where.path / "lm.mlpackage", where.path / "lm.mlmodelc");
    const auto prefill_model = coreml::coreml_model::load(where.path / "lm.mlmodelc", "prefill");
    const auto decode_model = coreml::coreml_model::load(where.path / "lm.mlmodelc");
    const auto state = decode_model.new_state();
    const std::vector<std::int32_t> head(prompt.begin(), prompt.begin() + prefill);
    host_tensor first = run_decoder(prefill_model, c, head, prefill, context, &state);
    std::vector<float> rows = first.to_f32();
    for (std::size_t at = static_cast<std::size_t>(prefill); at < prompt.size(); ++at) {
        const std::vector<std::int32_t> token{prompt[at]};
        const auto step =
            run_decoder(decode_model, c, token, 1, context, &state, static_cast<std::int64_t>(at));
        const auto values = step.to_f32();
        rows.insert(rows.end(), values.begin(), values.end());
    }
    const host_tensor got =
        host_tensor::from(rows, dims{static_cast<std::int64_t>(prompt.size()), c.vocab_size});
    const double error = anvil_test::max_relative_error(got, want);
    MESSAGE("qwen2, prefill 8 then decode: logits max relative error ", error);
    CHECK(error < 5e-2);
    CHECK_THROWS_WITH_AS((void)coreml::coreml_model::load(where.path / "lm.mlmodelc", "verify"),
                         doctest::Contains("no function 'verify'"), anvil::error);
    CHECK(anvil_test::sim().violations() == "");
}

namespace {

// Moves a conversation up a context ladder, as an app does: the first `from` slots of every head of each
// cache k<i>/v<i> [1, kv_heads, from, head_dim] in `shorter` into the same slots of a state of `to` slots,
// through the state buffers' own strides.
void move_caches(const anvil::detail::ane::objc_object& shorter,
                 const anvil::detail::ane::objc_object& longer, const anvil::models::decoder_config& c,
                 std::int64_t from, std::int64_t to) {
    const auto row = static_cast<std::size_t>(c.head_dim) * 2;
    const auto rows = [&](std::span<const std::int64_t> strides, std::int64_t h, std::int64_t t) {
        return static_cast<std::size_t>(h * strides[1] + t * strides[2]) * 2;
    };
    for (std::int64_t layer = 0; layer < c.layers; ++layer) {
        for (const std::string& name :
             {anvil::models::cache_key_name(layer), anvil::models::cache_value_name(layer)}) {
            std::vector<std::byte> slots(static_cast<std::size_t>(c.kv_heads * from) * row);
            const std::vector<std::int64_t> small{1, c.kv_heads, from, c.head_dim};
            const std::vector<std::int64_t> large{1, c.kv_heads, to, c.head_dim};
            coreml::with_state_buffer(
                shorter, name, small, [&](std::byte* bytes, std::span<const std::int64_t> s) {
                    for (std::int64_t h = 0; h < c.kv_heads; ++h)
                        for (std::int64_t t = 0; t < from; ++t)
                            std::memcpy(slots.data() + static_cast<std::size_t>(h * from + t) * row,
                                        bytes + rows(s, h, t), row);
                });
            coreml::with_state_buffer(
                longer, name, large, [&](std::byte* bytes, std::span<const std::int64_t> s) {
                    for (std::int64_t h = 0; h < c.kv_heads; ++h)
                        for (std::int64_t t = 0; t < from; ++t)
                            std::memcpy(bytes + rows(s, h, t),
                                        slots.data() + static_cast<std::size_t>(h * from + t) * row, row);
                });
        }
    }
}

}  // namespace

TEST_CASE("export: a context ladder shares one package's weights; a conversation moves up a rung") {
    if (!anvil_test::ane_simulator_available()) {
        MESSAGE("this build has no ANE simulator: the package was not run");
        return;
    }
    const auto folder = anvil_test::data_path("decoder_lms/qwen2");
    const std::vector<std::int32_t> prompt = logits_prompt(folder);
    const std::int64_t shorter = 16, longer = 32, prefill = 8;
    REQUIRE(static_cast<std::int64_t>(prompt.size()) > shorter);
    const host_tensor want = anvil_test::load_npy(folder + "/logits.npy");
    anvil::models::causal_lm_options lm_options;
    lm_options.load = anvil_test::cpu();
    const auto lm = anvil::models::causal_lm::load(folder, lm_options);
    const auto& c = lm.config();
    // What `anvil export --context 16,32 --prefill 8` writes.
    temporary_folder where("anvil-export");
    std::vector<anvil::mlpackage_function> functions;
    for (const std::int64_t rung : {shorter, longer}) {
        functions.push_back(lm.export_function(anvil::detail::message("prefill_", rung), prefill, rung));
        functions.push_back(lm.export_function(anvil::detail::message("decode_", rung), 1, rung));
    }
    anvil::mlpackage_options options;
    options.ios18 = true;
    options.default_function = "decode_32";
    const auto ladder = anvil::export_mlpackage(functions, where.path / "lm.mlpackage", options);
    anvil::mlpackage_options one;
    one.ios18 = true;
    one.output_names = {"logits"};
    one.states = functions[3].states;
    const auto single = anvil::export_mlpackage(functions[3].outputs, where.path / "one.mlpackage", one);
    MESSAGE("weights: ", ladder.weight_bytes, " bytes for two rungs of prefill and decode, ",
            single.weight_bytes, " for decode at one");
    CHECK(ladder.weight_bytes <= single.weight_bytes + 8192);  // the rope tables of each length, if anything
    REQUIRE(ladder.functions.size() == 4);

    coreml::coreml_model::compile(where.path / "lm.mlpackage", where.path / "lm.mlmodelc");
    const auto load = [&](const char* name) {
        return coreml::coreml_model::load(where.path / "lm.mlmodelc", name);
    };
    const auto prefill_16 = load("prefill_16"), decode_16 = load("decode_16"), decode_32 = load("decode_32");
    // Tokens 0..15 on the 16-slot rung (8 in one prefill prediction, then one at a time), the rest on the
    // 32-slot rung after the caches move up.
    const auto small_state = decode_16.new_state();
    const std::vector<std::int32_t> head(prompt.begin(), prompt.begin() + prefill);
    std::vector<float> rows = run_decoder(prefill_16, c, head, prefill, shorter, &small_state).to_f32();
    const auto large_state = decode_32.new_state();
    for (std::size_t at = static_cast<std::size_t>(prefill); at < prompt.size(); ++at) {
        const bool moved = static_cast<std::int64_t>(at) >= shorter;
        if (static_cast<std::int64_t>(at) == shorter)
            move_caches(small_state, large_state, c, shorter, longer);
        const std::vector<std::int32_t> token{prompt[at]};
        const auto step = run_decoder(moved ? decode_32 : decode_16, c, token, 1, moved ? longer : shorter,
                                      moved ? &large_state : &small_state, static_cast<std::int64_t>(at));
        const auto values = step.to_f32();
        rows.insert(rows.end(), values.begin(), values.end());
    }
    const host_tensor got =
        host_tensor::from(rows, dims{static_cast<std::int64_t>(prompt.size()), c.vocab_size});
    const double error = anvil_test::max_relative_error(got, want);
    MESSAGE("qwen2, ", prompt.size(), " tokens, 16 slots then 32: logits max relative error ", error);
    CHECK(error < 5e-2);
    // A rung's state belongs to its rung: its caches have another shape.
    CHECK_THROWS_WITH_AS((void)run_decoder(decode_32, c, {prompt[0]}, 1, longer, &small_state),
                         doctest::Contains("another model"), anvil::error);
    CHECK_THROWS_WITH_AS(move_caches(large_state, small_state, c, shorter, longer),
                         doctest::Contains("not the fp16 [1, 1, 16, 12] buffer expected"), anvil::error);
    CHECK(anvil_test::sim().violations() == "");
}

TEST_CASE("export: an MLState starts at zeros, persists across predictions and belongs to its model") {
    if (!anvil_test::ane_simulator_available()) {
        MESSAGE("this build has no ANE simulator: the package was not run");
        return;
    }
    // acc <- acc + x; y = 2 * (acc + x): an accumulator (coremltools' stateful-models guide), by hand.
    for (const std::int64_t width : {std::int64_t{32}, std::int64_t{12}}) {
        CAPTURE(width);
        temporary_folder where("anvil-export");
        anvil::graph g;
        const auto acc = g.input("acc", anvil::dtype::f32, dims{1, 1, 2, width});
        const auto x = g.input("x", anvil::dtype::f32, dims{1, 1, 2, width});
        const auto updated = g.apply(anvil::op::add, {acc, x});
        const auto y = g.apply(anvil::op::mul, {updated, g.scalar(2.0)});
        const std::vector<anvil::value> outputs{y, updated};
        anvil::mlpackage_options options;
        options.output_names = {"y"};
        options.states = {{"acc", 1}};
        options.ios18 = true;
        const auto summary = anvil::export_mlpackage(outputs, where.path / "acc.mlpackage", options);
        CHECK(summary.warnings.size() == (width % 32 == 0 ? 0u : 1u));
        const auto model = load_package(where.path / "acc.mlpackage", where.path);
        const auto n = static_cast<std::size_t>(2 * width);
        std::vector<anvil::half> in(n);
        for (std::size_t i = 0; i < n; ++i)
            in[i] = anvil::half(static_cast<float>(i % 7) - 3.0f);
        std::vector<std::byte> in_bytes = bytes_of(in), out(n * 2);
        const std::vector inputs{array_input("x", in_bytes.data(), {1, 1, 2, width})};
        const std::vector results{fp16_output("y", out, {1, 1, 2, width})};
        const auto first = model.new_state();
        for (int call = 1; call <= 3; ++call) {  // acc after `call` predictions: call * x
            model.predict(inputs, results, &first);
            const std::vector<float> value = floats_of(out);
            for (std::size_t i = 0; i < n; ++i)
                REQUIRE(value[i] == 2.0f * static_cast<float>(call) * static_cast<float>(in[i]));
        }
        const auto second = model.new_state();  // its own buffers, at zeros
        model.predict(inputs, results, &second);
        const std::vector<float> value = floats_of(out);
        for (std::size_t i = 0; i < n; ++i)
            REQUIRE(value[i] == 2.0f * static_cast<float>(in[i]));
        CHECK_THROWS_WITH_AS(model.predict(inputs, results), doctest::Contains("usingState"), anvil::error);
        std::filesystem::create_directories(where.path / "other");
        const auto other = load_package(where.path / "acc.mlpackage", where.path / "other");
        const auto foreign = other.new_state();
        CHECK_THROWS_WITH_AS(model.predict(inputs, results, &foreign), doctest::Contains("another model"),
                             anvil::error);
        // The compute plan: the state's reads and writes leave the Neural Engine when its width is not a
        // multiple of 32 (COREML.md §4.5).
        const auto plan = coreml::compute_plan(where.path / "model.mlmodelc");
        REQUIRE(plan.has_value());
        bool state_ops = false;
        for (const auto& entry : *plan) {
            if (entry.op.find("_state") == std::string::npos) continue;
            state_ops = true;
            CAPTURE(entry.op);
            CHECK(entry.device == (width % 32 == 0 ? "ane" : "cpu"));
        }
        CHECK(state_ops);
    }
    CHECK(anvil_test::sim().violations() == "");
}

TEST_CASE("export: a state must be an input, updated by a value of its shape, on iOS 18") {
    temporary_folder where("anvil-export");
    anvil::graph g;
    const auto cache = g.input("cache", anvil::dtype::f32, dims{1, 2, 4, 8});
    const auto fresh = g.input("x", anvil::dtype::f32, dims{1, 2, 4, 8});
    const auto sum = g.apply(anvil::op::add, {cache, fresh});
    const auto half = g.apply(anvil::op::relu, {fresh});
    const std::vector<anvil::value> outputs{half, sum};
    anvil::mlpackage_options options;
    options.output_names = {"y"};
    options.states = {{"cache", 1}};
    CHECK_THROWS_WITH_AS((void)anvil::export_mlpackage(outputs, where.path / "m.mlpackage", options),
                         doctest::Contains("needs Core ML spec 9"), anvil::unsupported_error);
    options.ios18 = true;
    options.states = {{"missing", 1}};
    CHECK_THROWS_WITH_AS((void)anvil::export_mlpackage(outputs, where.path / "m.mlpackage", options),
                         doctest::Contains("the state 'missing' is not an input"), anvil::error);
    options.states = {{"cache", 1}};
    const auto summary = anvil::export_mlpackage(outputs, where.path / "m.mlpackage", options);
    REQUIRE(summary.states.size() == 1);
    CHECK(summary.states[0].name == "cache");
    REQUIRE(summary.inputs.size() == 1);  // the state is not an input the app passes
    CHECK(summary.inputs[0].name == "x");
}

namespace {

// The weights compress_weights replaces in `outputs`' graph: how many, and their elements in all.
struct compressed_count {
    std::size_t weights = 0;
    std::int64_t elements = 0;
};
compressed_count count_compressed(std::span<const anvil::value> outputs, anvil::weight_compression how) {
    const anvil::graph_body body = anvil::compress_weights(anvil::body_of(outputs, "test"), how);
    compressed_count count;
    for (const auto& n : body.nodes) {
        if (n.kind != anvil::op::dequantize_int8 && n.kind != anvil::op::dequantize_lut) continue;
        ++count.weights;
        count.elements += n.result.shape.element_count();
    }
    return count;
}

struct compression_case {
    anvil::weight_compression how;
    bool ios18;
    double bits;  // per weight element
};
constexpr compression_case compression_cases[] = {
    {anvil::weight_compression::int8, false, 8}, {anvil::weight_compression::int8, true, 8},
    {anvil::weight_compression::lut4, false, 4}, {anvil::weight_compression::lut4, true, 4},
    {anvil::weight_compression::lut6, false, 6}, {anvil::weight_compression::lut4g32, true, 4},
};

}  // namespace

TEST_CASE("export: compressed weights are stored compressed and give the CPU's values for the same weights") {
    if (!anvil_test::ane_simulator_available()) {
        MESSAGE("this build has no ANE simulator: the package was not run");
        return;
    }
    const auto folder = anvil_test::text_encoders::fixture("bert_sentence");
    const auto input = anvil_test::text_encoders::read_texts(folder);
    auto encoder = anvil::models::sentence_encoder::load(folder, anvil_test::cpu());
    std::size_t longest = 0;
    for (const auto& ids : input.ids)
        longest = std::max(longest, ids.size());
    const auto length = std::min(static_cast<std::int64_t>(longest + 3), encoder.encoder().max_tokens());
    anvil::graph g;
    const anvil::value embedding = encoder.build_graph(g, length);
    temporary_folder where("anvil-export-compressed");
    const auto plain = export_single(embedding, where.path / "plain.mlpackage", "embedding");
    const auto dim = static_cast<std::size_t>(encoder.dimension());

    for (const compression_case& format : compression_cases) {
        const std::string name =
            std::string(anvil::weight_compression_name(format.how)) + (format.ios18 ? "_ios18" : "");
        CAPTURE(name);
        const compressed_count count =
            count_compressed(std::span<const anvil::value>(&embedding, 1), format.how);
        REQUIRE(count.weights >= 6);  // the attention and MLP projections of every layer
        anvil::mlpackage_options options;
        options.weights = format.how;
        options.ios18 = format.ios18;
        const auto summary =
            export_single(embedding, where.path / (name + ".mlpackage"), "embedding", options);
        // The package holds the compressed bytes instead of the fp16 ones; scales, palettes and 64-byte
        // record alignment cost a little of the difference.
        const auto fp16_bytes = static_cast<double>(2 * count.elements);
        const double saving = fp16_bytes - static_cast<double>(count.elements) * format.bits / 8;
        const double saved =
            static_cast<double>(plain.weight_bytes) - static_cast<double>(summary.weight_bytes);
        MESSAGE(name, ": ", count.weights, " weights, ", count.elements, " elements; weight file ",
                summary.weight_bytes, " bytes against ", plain.weight_bytes, " in fp16 (saved ", saved,
                " of ", saving, ")");
        CHECK(saved >= 0.75 * saving);
        CHECK(saved <= fp16_bytes);

        // Core ML decompresses what the CPU computes with under the same compression.
        anvil::compile_options cpu_options;
        cpu_options.weight_compression = format.how;
        anvil::program cpu = anvil::compile({embedding}, cpu_options);
        const std::filesystem::path compiled = where.path / name;
        std::filesystem::create_directories(compiled);
        auto model = load_package(where.path / (name + ".mlpackage"), compiled);
        double worst = 0.0;
        for (const auto& tokens : input.ids) {
            const std::vector<float> got =
                run_text(model, tokens, nullptr, length, "embedding", encoder.dimension());
            std::vector<std::int32_t> ids(static_cast<std::size_t>(length), 0);
            std::vector<float> mask(static_cast<std::size_t>(length), 0.0f);
            std::copy(tokens.begin(), tokens.end(), ids.begin());
            std::fill(mask.begin(), mask.begin() + static_cast<std::ptrdiff_t>(tokens.size()), 1.0f);
            const std::vector<float> want =
                cpu.run({{"input_ids", host_tensor::from(ids, dims{1, length})},
                         {"attention_mask", host_tensor::from(mask, dims{1, length})}})
                    .at(0)
                    .to_f32();
            double scale = 0.0, error = 0.0;
            for (std::size_t j = 0; j < dim; ++j) {
                scale = std::max(scale, static_cast<double>(std::abs(want[j])));
                error = std::max(error, static_cast<double>(std::abs(got[j] - want[j])));
            }
            worst = std::max(worst, error / scale);
        }
        MESSAGE(name, ": the package against the CPU with the same compressed weights, max relative error ",
                worst);
        CHECK(worst < 1.5e-2);
    }
    // lut4g32's grouped palettes are an iOS 18 op.
    anvil::mlpackage_options grouped;
    grouped.weights = anvil::weight_compression::lut4g32;
    CHECK_THROWS_WITH_AS(export_single(embedding, where.path / "g.mlpackage", "embedding", grouped),
                         doctest::Contains("lut4g32 (a palette per group of channels) needs Core ML spec 9"),
                         anvil::unsupported_error);
    CHECK(anvil_test::sim().violations() == "");
}

TEST_CASE("export: a decoder LM with palettised weights gives the CPU's logits for the same weights") {
    if (!anvil_test::ane_simulator_available()) {
        MESSAGE("this build has no ANE simulator: the package was not run");
        return;
    }
    for (const std::string name : {"llama", "gpt2"}) {
        CAPTURE(name);
        const auto folder = anvil_test::data_path("decoder_lms/" + name);
        const std::vector<std::int32_t> prompt = logits_prompt(folder);
        for (const auto how : {anvil::weight_compression::int8, anvil::weight_compression::lut4g32}) {
            CAPTURE(anvil::weight_compression_name(how));
            anvil::models::causal_lm_options options;
            options.load = anvil_test::cpu();
            options.load.compile.weight_compression = how;
            auto lm = anvil::models::causal_lm::load(folder, options);
            const host_tensor want = lm.logits(prompt);
            const auto& c = lm.config();
            const std::int64_t tokens = 4, context = 32;
            temporary_folder where("anvil-export");
            const anvil::mlpackage_function step = lm.export_function("main", tokens, context);
            anvil::mlpackage_options package;
            package.output_names = step.output_names;
            package.ios18 = true;
            package.states = step.states;
            package.weights = how;
            (void)anvil::export_mlpackage(step.outputs, where.path / "lm.mlpackage", package);
            const auto model = load_package(where.path / "lm.mlpackage", where.path);
            const host_tensor got = run_decoder(model, c, prompt, tokens, context);
            const double error = anvil_test::max_relative_error(got, want);
            MESSAGE(name, " ", anvil::weight_compression_name(how),
                    ": the package's logits against the CPU's with the same weights, max relative error ",
                    error);
            CHECK(error < 5e-2);
        }
    }
    CHECK(anvil_test::sim().violations() == "");
}

TEST_CASE("export: CLIP's two towers in one package give PyTorch's normalised embeddings") {
    if (!anvil_test::ane_simulator_available()) {
        MESSAGE("this build has no ANE simulator: the package was not run");
        return;
    }
    // Expected: the fixture's text_embeds / image_embeds, CLIPModel's L2-normalised outputs in PyTorch
    // (tools/reference/clip_fixtures.py; clip_b16, shaped like CLIP ViT-B/16 with 224 x 224 images and 16 x
    // 16 patches: patch16_fixtures.py), at the Core ML route's tolerance (test_clip.cpp).
    for (const std::string name : {"clip", "clip_b16"}) {
        CAPTURE(name);
        const std::string folder = anvil_test::data_path("clip/" + name);
        const auto model = anvil::models::clip::load(folder, anvil_test::cpu());
        const auto& c = model.config();
        const host_tensor ids = anvil_test::load_npy(folder + "/input_ids.npy");  // [texts, length], padded
        const host_tensor pixels = name == "clip_b16" ? anvil_test::patch16_pixels(2, 224)
                                                      : anvil_test::load_npy(folder + "/pixels.npy");
        const host_tensor text_want = anvil_test::load_npy(folder + "/text_embeds.npy");
        const host_tensor image_want = anvil_test::load_npy(folder + "/image_embeds.npy");
        const std::int64_t length = ids.shape()[1], width = c.projection_dim;

        temporary_folder where("anvil-export");
        const std::vector<anvil::mlpackage_function> functions{model.export_image_function(),
                                                               model.export_text_function(length)};
        anvil::mlpackage_options options;
        options.ios18 = true;  // two functions
        const auto summary = anvil::export_mlpackage(functions, where.path / "clip.mlpackage", options);
        REQUIRE(summary.functions.size() == 2);
        CHECK(summary.functions[1].inputs[1].name == "pooled");
        CHECK(summary.functions[1].outputs[0].shape == std::vector<std::int64_t>{1, width});
        CHECK(summary.inputs[0].shape ==
              std::vector<std::int64_t>{1, c.vision.channels, c.vision.image_size, c.vision.image_size});
        coreml::coreml_model::compile(where.path / "clip.mlpackage", where.path / "clip.mlmodelc");
        const auto image_model = coreml::coreml_model::load(where.path / "clip.mlmodelc", "image");
        const auto text_model = coreml::coreml_model::load(where.path / "clip.mlmodelc", "text");

        std::vector<float> texts;
        const auto all_ids = ids.values<std::int32_t>();
        for (std::int64_t t = 0; t < ids.shape()[0]; ++t) {
            std::vector<std::int32_t> row(all_ids.begin() + t * length, all_ids.begin() + (t + 1) * length);
            const std::size_t eos = anvil::models::recipe_detail::clip_pooled_position(c.text, row, 0);
            std::vector<anvil::half> pooled(static_cast<std::size_t>(length), anvil::half(0.0f));
            pooled[eos] = anvil::half(1.0f);
            std::vector<std::byte> pooled_bytes = bytes_of(pooled), out(static_cast<std::size_t>(width) * 2);
            text_model.predict(
                std::vector{array_input("input_ids", row.data(), {1, length}, coreml::multi_array_int32),
                            array_input("pooled", pooled_bytes.data(), {1, length})},
                std::vector{fp16_output("text_embeds", out, {1, width})});
            const auto got = floats_of(out);
            texts.insert(texts.end(), got.begin(), got.end());
        }
        std::vector<float> images;
        const auto image_values = pixels.values<float>();
        const auto per_image = image_values.size() / static_cast<std::size_t>(pixels.shape()[0]);
        for (std::int64_t i = 0; i < pixels.shape()[0]; ++i) {
            const auto one = image_values.subspan(static_cast<std::size_t>(i) * per_image, per_image);
            std::vector<anvil::half> halves(one.begin(), one.end());
            std::vector<std::byte> in = bytes_of(halves), out(static_cast<std::size_t>(width) * 2);
            image_model.predict(std::vector{array_input("pixels", in.data(), summary.inputs[0].shape)},
                                std::vector{fp16_output("image_embeds", out, {1, width})});
            const auto got = floats_of(out);
            images.insert(images.end(), got.begin(), got.end());
        }
        const double text_error =
            anvil_test::max_relative_error(host_tensor::from(texts, text_want.shape()), text_want);
        const double image_error =
            anvil_test::max_relative_error(host_tensor::from(images, image_want.shape()), image_want);
        MESSAGE(name, " package vs PyTorch: text_embeds max relative error ", text_error, ", image_embeds ",
                image_error);
        CHECK(text_error < 2e-2);
        CHECK(image_error < 2e-2);
        CHECK_THROWS_WITH_AS((void)model.export_text_function(length + 1),
                             doctest::Contains("2 to 16 tokens"), anvil::error);
    }
    CHECK(anvil_test::sim().violations() == "");
}

TEST_CASE("export: Whisper's encoder and decoder in one package give PyTorch's logits, caches in MLState") {
    if (!anvil_test::ane_simulator_available()) {
        MESSAGE("this build has no ANE simulator: the package was not run");
        return;
    }
    // Expected: prompt_logits.npy, WhisperForConditionalGeneration's logits for the first generation case's
    // prompt over jfk.wav (tools/reference/whisper_fixtures.py), at the Core ML route's tolerance
    // (test_whisper.cpp: 0.14 seen there, through 1500-position attention in fp16).
    const std::string folder = anvil_test::data_path("whisper/whisper_en");
    auto model = anvil::models::whisper::load(folder, anvil_test::cpu());
    const auto& c = model.config();
    const auto generation = anvil::json::parse_file(folder + "/generation.json");
    const auto& cases = generation.is_array() ? generation : *generation.find("cases");
    std::vector<std::int32_t> prompt;
    for (const auto& id : cases.as_array()[0].find("prompt")->as_array())
        prompt.push_back(static_cast<std::int32_t>(id.as_int()));
    const host_tensor want = anvil_test::load_npy(folder + "/prompt_logits.npy");
    REQUIRE(want.shape()[0] == static_cast<std::int64_t>(prompt.size()));
    anvil::log_mel_options mel;
    mel.mel_bins = c.mel_bins;
    const host_tensor features =
        anvil::whisper_log_mel(anvil::read_wav(anvil_test::data_path("audio/jfk.wav")).samples, mel);

    const std::int64_t context = 32, heads = c.decoder_heads, head_dim = c.decoder_head_dim();
    temporary_folder where("anvil-export");
    const std::vector<anvil::mlpackage_function> functions{model.export_encoder_function(),
                                                           model.export_decoder_function(context)};
    CHECK(functions[1].states.size() == static_cast<std::size_t>(4 * c.decoder_layers));
    anvil::mlpackage_options options;
    options.ios18 = true;
    options.default_function = "decoder";
    const auto summary = anvil::export_mlpackage(functions, where.path / "w.mlpackage", options);
    REQUIRE(summary.functions.size() == 2);
    CHECK(summary.functions[0].outputs.size() == static_cast<std::size_t>(2 * c.decoder_layers));
    CHECK(summary.states.size() == static_cast<std::size_t>(4 * c.decoder_layers));
    CHECK(summary.outputs.size() == 1);
    CHECK_THROWS_WITH_AS((void)model.export_decoder_function(c.max_target_positions + 1),
                         doctest::Contains("cache slots"), anvil::error);

    coreml::coreml_model::compile(where.path / "w.mlpackage", where.path / "w.mlmodelc");
    const auto encoder = coreml::coreml_model::load(where.path / "w.mlmodelc", "encoder");
    const auto decoder = coreml::coreml_model::load(where.path / "w.mlmodelc");
    // The encoder once; its outputs copied into the decoder's read-only states, through their strides.
    const auto source = static_cast<std::size_t>(c.max_source_positions);
    const std::vector<std::int64_t> cross_shape{1, heads, c.max_source_positions, head_dim};
    const std::size_t cross_values = static_cast<std::size_t>(heads * head_dim) * source;
    std::vector<anvil::half> halves(features.values<float>().begin(), features.values<float>().end());
    std::vector<std::byte> in = bytes_of(halves);
    std::vector<std::vector<std::byte>> cross(static_cast<std::size_t>(2 * c.decoder_layers),
                                              std::vector<std::byte>(cross_values * 2));
    std::vector<coreml::coreml_model::output> outs;
    for (std::int64_t i = 0; i < c.decoder_layers; ++i) {
        outs.push_back(fp16_output(anvil::models::whisper_cross_key_name(i),
                                   cross[static_cast<std::size_t>(2 * i)], cross_shape));
        outs.push_back(fp16_output(anvil::models::whisper_cross_value_name(i),
                                   cross[static_cast<std::size_t>(2 * i + 1)], cross_shape));
    }
    encoder.predict(std::vector{array_input("input_features", in.data(), {1, c.mel_bins, c.frames()})}, outs);
    const auto state = decoder.new_state();
    for (std::size_t k = 0; k < outs.size(); ++k) {
        const std::string name = outs[k].name;
        coreml::with_state_buffer(
            state, name, cross_shape, [&](std::byte* bytes, std::span<const std::int64_t> strides) {
                const auto row = static_cast<std::size_t>(head_dim) * 2;
                for (std::int64_t h = 0; h < heads; ++h)
                    for (std::int64_t t = 0; t < c.max_source_positions; ++t)
                        std::memcpy(bytes + (h * strides[1] + t * strides[2]) * 2,
                                    cross[k].data() +
                                        (h * c.max_source_positions + t) * static_cast<std::int64_t>(row),
                                    row);
            });
    }
    // The prompt one token per prediction, as an app decodes.
    const auto T = static_cast<std::size_t>(context);
    std::vector<float> logits;
    for (std::size_t p = 0; p < prompt.size(); ++p) {
        std::int32_t id = prompt[p], position = static_cast<std::int32_t>(p);
        std::vector<anvil::half> mask(T + 1, anvil::half(anvil::masked_score)), write(T, anvil::half(0.0f));
        for (std::size_t t = 0; t < p; ++t)
            mask[t] = anvil::half(0.0f);
        mask[T] = anvil::half(0.0f);
        write[p] = anvil::half(1.0f);
        std::vector<std::byte> mask_bytes = bytes_of(mask), write_bytes = bytes_of(write);
        std::vector<std::byte> out(static_cast<std::size_t>(c.vocab_size) * 2);
        decoder.predict(std::vector{array_input("ids", &id, {1, 1}, coreml::multi_array_int32),
                                    array_input("positions", &position, {1, 1}, coreml::multi_array_int32),
                                    array_input("mask", mask_bytes.data(), {1, 1, 1, context + 1}),
                                    array_input("cache_write", write_bytes.data(), {1, 1, context, 1})},
                        std::vector{fp16_output("logits", out, {1, 1, c.vocab_size})}, &state);
        const auto values = floats_of(out);
        logits.insert(logits.end(), values.begin(), values.end());
    }
    const double error = anvil_test::max_relative_error(host_tensor::from(logits, want.shape()), want);
    MESSAGE("whisper_en package vs PyTorch: prompt logits max relative error ", error);
    CHECK(error < 3e-1);
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
                         doctest::Contains("2 output names and 0 states written for 1 outputs"),
                         anvil::error);
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
