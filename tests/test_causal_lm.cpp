// The decoder language models end to end against an independent PyTorch port of Hugging Face's modeling_*.py
// (tools/reference/decoder_lms.py wrote tests/data/decoder_lms/): every family's full-sequence logits, greedy
// continuations token for token (one stream, and eight batched in one decode call), chunked prefill, a
// context ladder crossed twice, decode windows of several sizes, the chat template — on the CPU and through
// the Neural Engine simulator, whose counters show that a decode step moves the new token's keys and values
// and a window flush W tokens' worth, never the whole cache.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "ane_simulator.hpp"
#include "model_test_support.hpp"

namespace test_causal_lm {

namespace {

using anvil::models::causal_lm;
using ids = std::vector<std::int32_t>;

const char* const models[] = {"gpt2", "llama", "llama_linear", "llama_dynamic", "qwen2", "qwen3", "mistral"};

std::string fixture(const std::string& name) {
    return anvil_test::data_path("decoder_lms/" + name);
}

ids to_ids(const anvil::json::value& v) {
    ids out;
    for (const auto& item : v.as_array())
        out.push_back(static_cast<std::int32_t>(item.as_int()));
    return out;
}

std::vector<ids> to_id_lists(const anvil::json::value& v) {
    std::vector<ids> out;
    for (const auto& item : v.as_array())
        out.push_back(to_ids(item));
    return out;
}

struct expected {
    std::vector<ids> prompts, greedy;
    std::size_t logits_prompt = 0;
    anvil::json::value document;
};

expected read_expected(const std::string& name) {
    expected e;
    e.document = anvil::json::parse_file(fixture(name) + "/expected.json");
    e.prompts = to_id_lists(*e.document.find("prompts"));
    e.greedy = to_id_lists(*e.document.find("greedy"));
    e.logits_prompt = static_cast<std::size_t>(e.document.find("logits_prompt")->as_int());
    REQUIRE(e.prompts.size() == 8);
    return e;
}

// Greedy, exactly as many tokens as the reference, never stopping early.
anvil::models::generation_options greedy(std::size_t tokens) {
    anvil::models::generation_options g;
    g.max_new_tokens = static_cast<std::int64_t>(tokens);
    g.stop_at_eos = false;
    return g;
}

// max_context 64 for every model: llama_dynamic's max_position_embeddings is 16 (its prompts run past it,
// where dynamic scaling acts).
anvil::models::causal_lm_options options_for(const anvil::compile_options& compile) {
    anvil::models::causal_lm_options o;
    o.load.compile = compile;
    o.max_context = 64;
    return o;
}

anvil::compile_options cpu() {
    anvil::compile_options c;
    c.target = anvil::device::cpu;
    return c;
}

// The simulator's counters (0 in a build without it, where the tests that read them do not run).
long simulator_counter(const char* name) {
#ifdef ANVIL_ANE_SIM_PATH
    return anvil_test::sim().counter(name);
#else
    static_cast<void>(name);
    return 0;
#endif
}

// Every model against the reference on one device: logits within `tolerance`, the greedy path of each prompt
// alone and of all eight batched in one decode call.
void check_against_reference(const anvil::compile_options& compile, double tolerance, double& worst) {
    for (const std::string name : models) {
        CAPTURE(name);
        const expected e = read_expected(name);
        auto options = options_for(compile);
        options.prefill_chunk = 32;
        auto lm = causal_lm::load(fixture(name), options);
        const auto want = anvil_test::load_npy(fixture(name) + "/logits.npy");
        const double error = anvil_test::max_relative_error(lm.logits(e.prompts[e.logits_prompt]), want);
        MESSAGE(name, ": logits max relative error ", error);
        CHECK(error < tolerance);
        worst = std::max(worst, error);
        for (std::size_t p = 0; p < e.prompts.size(); ++p) {
            CAPTURE(p);
            const auto result = lm.generate(e.prompts[p], greedy(e.greedy[p].size()));
            CHECK(result.tokens == e.greedy[p]);
            CHECK(result.stop_reason == "max_new_tokens");
        }
        const auto batch = lm.generate_batch(e.prompts, greedy(e.greedy.front().size()));
        REQUIRE(batch.size() == e.prompts.size());
        for (std::size_t p = 0; p < e.prompts.size(); ++p) {
            CAPTURE(p);
            CHECK(batch[p].tokens == e.greedy[p]);
        }
    }
}

// Llama's long prompt: 13 tokens and 24 greedy ones cross the rungs 16 -> 32 -> 64 (a decode window of 8
// holds 3 tokens at the first crossing; batched with the 21-token prompt, 3 at the crossing of 32).
void check_ladder(const anvil::compile_options& compile, std::int64_t decode_window = -1) {
    const expected e = read_expected("llama");
    const auto* long_case = e.document.find("prompts_long");
    REQUIRE(long_case != nullptr);
    const ids prompt = to_ids(*long_case->find("prompt"));
    const ids want = to_ids(*long_case->find("greedy"));
    auto options = options_for(compile);
    options.context_ladder = {16, 32, 64};
    options.decode_window = decode_window;
    auto lm = causal_lm::load(fixture("llama"), options);
    CHECK(lm.context_ladder() == std::vector<std::int64_t>{16, 32, 64});
    const auto result = lm.generate(prompt, greedy(want.size()));
    CHECK(result.tokens == want);
    // The batch of eight with the long prompt among them crosses the same rungs.
    std::vector<ids> prompts(e.prompts.begin(), e.prompts.begin() + 7);
    prompts.push_back(prompt);
    const auto batch = lm.generate_batch(prompts, greedy(want.size()));
    CHECK(batch.back().tokens == want);
}

}  // namespace

TEST_CASE("causal lm: every family matches the PyTorch reference on the CPU") {
    double worst = 0.0;
    check_against_reference(cpu(), 1e-4, worst);
    MESSAGE("CPU: worst logits relative error over all models ", worst);
}

TEST_CASE("causal lm: an int8 checkpoint with per-channel scales loads as stored and equals its values") {
    // The llama fixture's matrices quantised here (symmetric, per output channel: scale = max |w| / 127,
    // q = round(w / scale)) and written twice: int8 with `<name>_scale` [out, 1] beside each, as
    // compressed-tensors' int-quantized checkpoints store them, and plain f32 holding q * scale. The two must
    // give the same logits, the int8 one's programs holding the int8 bytes, not f32 copies.
    const expected e = read_expected("llama");
    const auto original = anvil::safetensors_file::open(fixture("llama") + "/model.safetensors");
    anvil_test::temporary_folder quantised("anvil-int8-checkpoint"), dequantised("anvil-int8-values");
    for (const auto& entry : std::filesystem::directory_iterator(fixture("llama"))) {
        if (entry.path().filename() == "model.safetensors") continue;
        std::filesystem::copy_file(entry.path(), quantised.path / entry.path().filename());
        std::filesystem::copy_file(entry.path(), dequantised.path / entry.path().filename());
    }
    anvil::safetensors_writer int8_file, values_file;
    std::size_t int8_bytes = 0;
    for (const anvil::tensor_view& t : original.tensors()) {
        const bool matrix = t.rank() == 2 && t.name().find("proj.weight") != std::string::npos;
        if (!matrix) {
            int8_file.add(t);
            values_file.add(t);
            continue;
        }
        const std::int64_t rows = t.shape()[0], cols = t.shape()[1];
        const std::vector<float> w = t.to_f32();
        std::vector<std::int8_t> q(w.size());
        std::vector<float> scale(static_cast<std::size_t>(rows)), values(w.size());
        for (std::int64_t r = 0; r < rows; ++r) {
            float largest = 0.0f;
            for (std::int64_t c = 0; c < cols; ++c)
                largest = std::max(largest, std::fabs(w[static_cast<std::size_t>(r * cols + c)]));
            const float step = largest > 0.0f ? largest / 127.0f : 1.0f;
            scale[static_cast<std::size_t>(r)] = step;
            for (std::int64_t c = 0; c < cols; ++c) {
                const auto at = static_cast<std::size_t>(r * cols + c);
                q[at] = static_cast<std::int8_t>(std::nearbyint(w[at] / step));
                values[at] = static_cast<float>(q[at]) * step;
            }
        }
        int8_file.add(t.name(), {rows, cols}, q);
        int8_file.add(t.name() + "_scale", {rows, 1}, scale);
        values_file.add(t.name(), {rows, cols}, values);
        int8_bytes += q.size();
    }
    int8_file.write(quantised.path / "model.safetensors");
    values_file.write(dequantised.path / "model.safetensors");
    std::size_t before = anvil::resident_weight_bytes().cpu_bytes;
    auto reference = causal_lm::load(dequantised.path.string(), options_for(cpu()));
    const anvil::host_tensor want = reference.logits(e.prompts[1]);
    const std::size_t reference_held = anvil::resident_weight_bytes().cpu_bytes - before;
    before = anvil::resident_weight_bytes().cpu_bytes;
    auto lm = causal_lm::load(quantised.path.string(), options_for(cpu()));
    const anvil::host_tensor got = lm.logits(e.prompts[1]);
    const std::size_t held = anvil::resident_weight_bytes().cpu_bytes - before;
    const double error = anvil_test::max_relative_error(got, want);
    MESSAGE("int8 checkpoint against its f32 values: logits max relative error ", error,
            "; its programs hold ", held, " bytes, the f32 one's ", reference_held, ", for ", int8_bytes,
            " bytes of int8 matrices");
    CHECK(error < 1e-4);
    // The matrices' f32 copies would be four times their int8 bytes: the int8 checkpoint saves three.
    CHECK(held + 2 * int8_bytes < reference_held);
    // A missing scale is named.
    anvil_test::temporary_folder unscaled_folder("anvil-int8-unscaled");
    for (const auto& entry : std::filesystem::directory_iterator(quantised.path))
        std::filesystem::copy_file(entry.path(), unscaled_folder.path / entry.path().filename());
    const auto scaled = anvil::safetensors_file::open(quantised.path / "model.safetensors");
    anvil::safetensors_writer unscaled;
    for (const anvil::tensor_view& t : scaled.tensors())
        if (t.name() != "model.layers.0.mlp.up_proj.weight_scale") unscaled.add(t);
    unscaled.write(unscaled_folder.path / "model.safetensors");
    CHECK_THROWS_WITH_AS((void)causal_lm::load(unscaled_folder.path.string(), options_for(cpu())),
                         doctest::Contains("'model.layers.0.mlp.up_proj.weight' is int8 without "
                                           "'model.layers.0.mlp.up_proj.weight_scale'"),
                         anvil::type_error);
}

TEST_CASE("causal lm: a SqueezeLLM checkpoint (a 4-bit palette per output channel) loads as stored") {
    // The llama fixture's matrices palettised here, each row to 16 of its own values (the quantiles
    // (2k + 1) / 32), and written twice: as SqueezeLLM's checkpoints hold them, in vLLM's squeezellm layout
    // (`qweight` i32 [in / 8, out], input 8r + j of output c in bits 4j..4j+3 of word (r, c) as vLLM's CUDA
    // kernel reads it; `lookup_table` f16 [out, 16]), and as plain f32 holding palette[index]. The two must
    // give the same logits, on the CPU and the simulated Neural Engine, the palettised one's programs holding
    // indices, not f32 copies.
    const expected e = read_expected("llama");
    const auto original = anvil::safetensors_file::open(fixture("llama") + "/model.safetensors");
    anvil_test::temporary_folder palettised("anvil-squeezellm"), dequantised("anvil-squeezellm-values");
    for (const auto& entry : std::filesystem::directory_iterator(fixture("llama"))) {
        if (entry.path().filename() == "model.safetensors") continue;
        std::filesystem::copy_file(entry.path(), palettised.path / entry.path().filename());
        std::filesystem::copy_file(entry.path(), dequantised.path / entry.path().filename());
    }
    anvil::safetensors_writer packed_file, values_file;
    std::size_t index_count = 0, palette_count = 0;
    for (const anvil::tensor_view& t : original.tensors()) {
        const bool matrix = t.rank() == 2 && t.name().find("proj.weight") != std::string::npos;
        if (!matrix) {
            packed_file.add(t);
            values_file.add(t);
            continue;
        }
        const std::int64_t rows = t.shape()[0], cols = t.shape()[1];
        REQUIRE(cols % 8 == 0);
        const std::vector<float> w = t.to_f32();
        std::vector<anvil::half> table(static_cast<std::size_t>(rows * 16));
        std::vector<std::uint8_t> index(w.size());
        std::vector<float> values(w.size());
        for (std::int64_t r = 0; r < rows; ++r) {
            std::vector<float> sorted(w.begin() + r * cols, w.begin() + (r + 1) * cols);
            std::sort(sorted.begin(), sorted.end());
            anvil::half* palette = table.data() + r * 16;
            for (std::int64_t k = 0; k < 16; ++k)
                palette[k] = anvil::half(sorted[static_cast<std::size_t>((2 * k + 1) * cols / 32)]);
            for (std::int64_t c = 0; c < cols; ++c) {
                const auto at = static_cast<std::size_t>(r * cols + c);
                std::uint8_t best = 0;
                for (std::uint8_t k = 1; k < 16; ++k) {
                    if (std::fabs(w[at] - static_cast<float>(palette[k])) <
                        std::fabs(w[at] - static_cast<float>(palette[best])))
                        best = k;
                }
                index[at] = best;
                values[at] = static_cast<float>(palette[best]);
            }
        }
        std::vector<std::int32_t> words(static_cast<std::size_t>(cols / 8 * rows));
        for (std::int64_t g = 0; g < cols / 8; ++g) {
            for (std::int64_t r = 0; r < rows; ++r) {
                std::uint32_t word = 0;
                for (int j = 0; j < 8; ++j)
                    word |= std::uint32_t{index[static_cast<std::size_t>(r * cols + 8 * g + j)]} << (4 * j);
                words[static_cast<std::size_t>(g * rows + r)] = static_cast<std::int32_t>(word);
            }
        }
        const std::string prefix = t.name().substr(0, t.name().size() - std::string(".weight").size());
        packed_file.add(prefix + ".qweight", {cols / 8, rows}, words);
        packed_file.add(prefix + ".lookup_table", {rows, 16}, table);
        values_file.add(t.name(), {rows, cols}, values);
        index_count += index.size();
        palette_count += static_cast<std::size_t>(rows);
    }
    packed_file.write(palettised.path / "model.safetensors");
    values_file.write(dequantised.path / "model.safetensors");
    std::size_t before = anvil::resident_weight_bytes().cpu_bytes;
    auto reference = causal_lm::load(dequantised.path.string(), options_for(cpu()));
    const anvil::host_tensor want = reference.logits(e.prompts[1]);
    const std::size_t reference_held = anvil::resident_weight_bytes().cpu_bytes - before;
    before = anvil::resident_weight_bytes().cpu_bytes;
    auto lm = causal_lm::load(palettised.path.string(), options_for(cpu()));
    const anvil::host_tensor got = lm.logits(e.prompts[1]);
    const std::size_t held = anvil::resident_weight_bytes().cpu_bytes - before;
    const double error = anvil_test::max_relative_error(got, want);
    MESSAGE("SqueezeLLM checkpoint against its f32 values: logits max relative error ", error,
            "; its programs hold ", held, " bytes, the f32 one's ", reference_held, ", for ", index_count,
            " palette indices");
    CHECK(error < 1e-4);
    // A byte per index against four per f32 value, and each palette as the GEMM reads it (padded to 64 f32
    // values: on these 48-wide rows a palette outweighs its row, on a real model's it is a few percent): an
    // f32 copy of the matrices would add four bytes per index.
    const std::size_t palette_bytes = palette_count * 64 * sizeof(float);
    CHECK(held + 2 * index_count < reference_held + palette_bytes);
    anvil_test::ane_target ane;
    if (anvil_test::use_ane_simulator(ane)) {
        auto on_ane = causal_lm::load(palettised.path.string(), options_for(ane.options));
        const double ane_error = anvil_test::max_relative_error(on_ane.logits(e.prompts[1]), want);
        MESSAGE("SqueezeLLM checkpoint on the simulated Neural Engine: logits max relative error ",
                ane_error);
        CHECK(ane_error < 5e-2);
    }
    // A table of the wrong size is named, with the shape it should have.
    anvil_test::temporary_folder bad_folder("anvil-squeezellm-bad");
    for (const auto& entry : std::filesystem::directory_iterator(palettised.path))
        std::filesystem::copy_file(entry.path(), bad_folder.path / entry.path().filename());
    const auto good = anvil::safetensors_file::open(palettised.path / "model.safetensors");
    anvil::safetensors_writer bad;
    for (const anvil::tensor_view& t : good.tensors()) {
        if (t.name() == "model.layers.0.mlp.up_proj.lookup_table") {
            bad.add(t.name(), {t.shape()[0], 8},
                    std::vector<float>(static_cast<std::size_t>(t.shape()[0] * 8)));
        } else {
            bad.add(t);
        }
    }
    bad.write(bad_folder.path / "model.safetensors");
    CHECK_THROWS_WITH_AS((void)causal_lm::load(bad_folder.path.string(), options_for(cpu())),
                         doctest::Contains("'model.layers.0.mlp.up_proj.lookup_table': SqueezeLLM's lookup "
                                           "table for a weight of shape"),
                         anvil::shape_error);
}

TEST_CASE("causal lm: chunked prefill gives the logits of one prefill") {
    // Not llama_dynamic: its frequencies depend on each call's largest position, so chunks differ by design
    // (as in Hugging Face).
    for (const std::string name : {"gpt2", "llama", "qwen2", "qwen3", "mistral"}) {
        CAPTURE(name);
        const expected e = read_expected(name);
        auto options = options_for(cpu());
        options.prefill_chunk = 5;
        auto lm = causal_lm::load(fixture(name), options);
        const auto want = anvil_test::load_npy(fixture(name) + "/logits.npy");
        CHECK(anvil_test::max_relative_error(lm.logits(e.prompts[e.logits_prompt]), want) < 1e-4);
        const auto result = lm.generate(e.prompts[1], greedy(e.greedy[1].size()));
        CHECK(result.tokens == e.greedy[1]);
    }
}

TEST_CASE("causal lm: the context ladder, stop tokens, streaming and statistics on the CPU") {
    check_ladder(cpu());

    const expected e = read_expected("qwen2");
    auto lm = causal_lm::load(fixture("qwen2"), options_for(cpu()));
    CHECK(lm.has_tokenizer());
    CHECK(lm.decode_window() == 0);                     // the CPU writes its cache directly
    CHECK(lm.config().eos_token_ids == ids{319, 317});  // config.json, then generation_config.json
    // A stop token ends the stream before it (the token itself is not returned).
    auto g = greedy(12);
    g.stop_tokens = {e.greedy[0][4]};
    const auto stopped = lm.generate(e.prompts[0], g);
    CHECK(stopped.stop_reason == "stop_token");
    CHECK(stopped.tokens == ids(e.greedy[0].begin(), e.greedy[0].begin() + 4));
    // Streaming: every token reaches the callback, its text pieces make the decoded text; false stops.
    std::string streamed;
    std::size_t calls = 0;
    const auto result = lm.generate(e.prompts[0], greedy(12),
                                    [&](std::size_t stream, std::int32_t token, std::string_view text) {
                                        CHECK(stream == 0);
                                        CHECK(token == e.greedy[0][calls]);
                                        streamed += text;
                                        return ++calls < 6;
                                    });
    CHECK(calls == 6);
    CHECK(result.stop_reason == "callback");
    CHECK(result.text == lm.tokens().decode(ids(e.greedy[0].begin(), e.greedy[0].begin() + 6)));
    CHECK(result.text.starts_with(streamed));
    CHECK(result.stats.prompt_tokens == static_cast<std::int64_t>(e.prompts[0].size()));
    CHECK(result.stats.generated_tokens == 6);
    CHECK(result.stats.time_to_first_token_s > 0);
    CHECK(result.stats.prefill_tokens_per_s > 0);
    CHECK(result.stats.decode_tokens_per_s > 0);

    // The chat template renders the reference conversation; its greedy continuation matches.
    const auto* chat = e.document.find("chat");
    REQUIRE(chat != nullptr);
    std::vector<anvil::models::chat_message> messages;
    for (const auto& m : chat->find("messages")->as_array())
        messages.push_back({m.find("role")->as_string(), m.find("content")->as_string()});
    const anvil::models::chat_prompt prompt = lm.chat(messages);
    CHECK(prompt.text == chat->find("text")->as_string());
    CHECK(lm.chat_ids(prompt) == to_ids(*chat->find("ids")));
    CHECK(lm.generate(prompt, greedy(12)).tokens == to_ids(*chat->find("greedy")));

    // DESIGN.md's form: a braced conversation and a callback that takes only the text. (Its
    // `{.max_new_tokens = 64}` also works; GCC's -Wextra warns about the members it leaves out.)
    std::string piece_text;
    anvil::models::generation_options four;
    four.max_new_tokens = 4;
    const auto reply = lm.generate(lm.chat({messages.front(), messages.back()}), four,
                                   [&](std::string_view piece) { piece_text += piece; });
    CHECK(reply.tokens.size() <= 4);
    CHECK(piece_text == lm.tokens().decode(reply.tokens).substr(0, piece_text.size()));
}

TEST_CASE("causal lm: decode windows of 0, 1, 3 and 8 tokens give the reference's greedy tokens") {
    for (const std::int64_t window : {0, 1, 3, 8}) {
        CAPTURE(window);
        for (const std::string name : models) {
            CAPTURE(name);
            const expected e = read_expected(name);
            auto options = options_for(cpu());
            options.decode_window = window;
            auto lm = causal_lm::load(fixture(name), options);
            CHECK(lm.decode_window() == window);
            CHECK(lm.generate(e.prompts[3], greedy(e.greedy[3].size())).tokens == e.greedy[3]);
            const auto batch = lm.generate_batch(e.prompts, greedy(e.greedy.front().size()));
            REQUIRE(batch.size() == e.prompts.size());
            for (std::size_t p = 0; p < e.prompts.size(); ++p) {
                CAPTURE(p);
                CHECK(batch[p].tokens == e.greedy[p]);
            }
            // Two prefill programs at context 64 (on the CPU a chunk fits its prompt: 16 tokens for prompts
            // of 3 to 13, 32 for 17 to 21, the last token's logits), a decode program for one stream and one
            // for eight.
            CHECK(lm.compiled_programs() == 4);
        }
        check_ladder(cpu(), window);
    }
}

void check_simulated_device(const anvil_test::ane_target& ane) {
    double worst = 0.0;
    // Logits reach 84: fp16 spacing there is 0.0625, and the CPU with every op rounded to fp16
    // (ane_numerics) lands at 1.6e-2 .. 2.4e-2 on the same measure.
    check_against_reference(ane.options, 5e-2, worst);
    MESSAGE(anvil_test::route_name(ane.options), ": worst logits relative error over all models ", worst);
    check_ladder(ane.options);
}

TEST_CASE("causal lm: the Neural Engine simulator matches the reference within fp16 tolerance") {
    anvil_test::ane_target ane;
    if (!anvil_test::use_ane_simulator(ane)) return;
    check_simulated_device(ane);
}

TEST_CASE("causal lm: the Core ML route matches the reference within fp16 tolerance") {
    anvil_test::ane_target ane;
    if (!anvil_test::use_ane_simulator(ane, anvil::device::coreml)) return;
    check_simulated_device(ane);
}

TEST_CASE(
    "causal lm: on the simulator a decode step writes its window slot, a flush W tokens, never the cache") {
    anvil_test::ane_target ane;
    if (!anvil_test::use_ane_simulator(ane)) return;
    const expected e = read_expected("llama");
    auto options = options_for(ane.options);
    options.context_ladder = {64};
    auto lm = causal_lm::load(fixture("llama"), options);
    CHECK(lm.decode_window() == 8);
    const auto& c = lm.config();
    std::vector<long> changed, read, written;
    const auto result =
        lm.generate(e.prompts[1], greedy(12), [&](std::size_t, std::int32_t, std::string_view) {
            changed.push_back(simulator_counter("bytes_changed_in"));
            read.push_back(simulator_counter("bytes_in"));
            written.push_back(simulator_counter("bytes_out"));
            return true;
        });
    CHECK(result.tokens == e.greedy[1]);
    REQUIRE(changed.size() == 12);
    // Token 0 comes from prefill, token n from decode step n, whose inputs changed by what the runner wrote
    // after step n - 1: one window slot, or (after step 8, which filled the window) the flush of 8 tokens.
    // Bytes (4 per element, generously) of a step's ordinary inputs (ids, cos, sin, mask, select for one
    // stream and one token: 64 cache + 8 window + 1 new keys) and of one token's key and value per layer.
    const long window = 8, context = 64;
    const long ordinary = 4 * (1 + c.rope.rotary_dim + (context + window + 1) + 1);
    const long one_token = 4 * 2 * c.layers * c.kv_heads * c.head_dim;
    const long flushed = 2 * 2 * c.layers * c.kv_heads * window * c.head_dim;  // 8 tokens in fp16
    const long cache = 2 * 2 * c.layers * c.kv_heads * context * c.head_dim;   // the whole cache in fp16
    CHECK(ordinary + one_token < flushed / 2);
    for (std::size_t step = 2; step < changed.size(); ++step) {
        const long delta = changed[step] - changed[step - 1];
        CAPTURE(step);
        CAPTURE(delta);
        CHECK(delta > 0);
        CHECK(delta < cache / 4);
        if (step == 9) {
            CHECK(delta > flushed / 2);  // nearly every byte of 8 tokens differs from the zeros there
            CHECK(delta <= ordinary + 2 * flushed);
        } else {
            CHECK(delta <= ordinary + one_token);
        }
    }
    MESSAGE("bytes changed: a decode step ", changed[3] - changed[2], ", a flush step ",
            changed[9] - changed[8], " (whole cache: ", cache, " bytes); a decode step reads ",
            read[3] - read[2], " bytes of input surfaces and writes ", written[3] - written[2],
            " bytes of output surfaces");
}

TEST_CASE("causal lm: on the Core ML route the KV caches stay in MLState; a decode step passes no cache") {
    anvil_test::ane_target ane;
    if (!anvil_test::use_ane_simulator(ane, anvil::device::coreml)) return;
    const expected e = read_expected("llama");
    auto options = options_for(ane.options);
    options.context_ladder = {64};
    const long states_before = simulator_counter("coreml_states");
    auto lm = causal_lm::load(fixture("llama"), options);
    const auto& c = lm.config();
    std::vector<long> passed, accesses;
    const auto result =
        lm.generate(e.prompts[1], greedy(12), [&](std::size_t, std::int32_t, std::string_view) {
            passed.push_back(simulator_counter("coreml_input_bytes"));
            accesses.push_back(simulator_counter("coreml_state_accesses"));
            return true;
        });
    CHECK(result.tokens == e.greedy[1]);
    CHECK(simulator_counter("coreml_states") > states_before);  // each Core ML segment's MLState
    REQUIRE(passed.size() == 12);
    // The fp16 bytes of one layer's key cache: what a decode step would pass per cache input, were the caches
    // inputs rather than states. The decode program's inputs (ids, rope, mask, select) and the activations
    // passed between segments are far smaller.
    const long one_cache = 2 * c.kv_heads * 64 * c.head_dim;
    for (std::size_t step = 2; step < passed.size(); ++step) {
        CAPTURE(step);
        CHECK(passed[step] - passed[step - 1] < one_cache);
        CHECK(accesses[step] > accesses[step - 1]);  // the new token's keys and values, written in place
    }
    MESSAGE("a decode step passes ", passed[3] - passed[2],
            " bytes to Core ML predictions (one layer's key cache: ", one_cache, " bytes) and opens ",
            accesses[3] - accesses[2], " state buffers");
}

TEST_CASE("causal lm: on the Core ML route compressed weights stay in their programs, not passed as inputs") {
    anvil_test::ane_target ane;
    if (!anvil_test::use_ane_simulator(ane, anvil::device::coreml)) return;
    const expected e = read_expected("llama");
    // The CPU with the same palettes is the reference; the Core ML programs hold the palettes themselves, so
    // a decode step passes what the uncompressed one does (the embedding lookup on the CPU comes first: a
    // palette must not become an input of a later program).
    auto cpu_options = options_for(cpu());
    cpu_options.load.compile.weight_compression = anvil::weight_compression::lut4g32;
    auto reference = causal_lm::load(fixture("llama"), cpu_options);
    auto options = options_for(ane.options);
    options.context_ladder = {64};
    options.load.compile.weight_compression = anvil::weight_compression::lut4g32;
    auto lm = causal_lm::load(fixture("llama"), options);
    const auto& c = lm.config();
    const anvil::host_tensor want = reference.logits(e.prompts[1]);
    const anvil::host_tensor got = lm.logits(e.prompts[1]);
    const double error = anvil_test::max_relative_error(got, want);
    MESSAGE("lut4g32 on the Core ML route against the CPU with the same palettes: logits max relative error ",
            error);
    CHECK(error < 5e-2);
    std::vector<long> passed, predictions;
    (void)lm.generate(e.prompts[1], greedy(4), [&](std::size_t, std::int32_t, std::string_view) {
        passed.push_back(simulator_counter("coreml_input_bytes"));
        predictions.push_back(simulator_counter("coreml_predictions"));
        return true;
    });
    REQUIRE(passed.size() == 4);
    const long one_cache = 2 * c.kv_heads * 64 * c.head_dim;
    // The step runs on Core ML (a segment Core ML refused would have gone to the CPU, passing nothing).
    CHECK(predictions[3] > predictions[2]);
    CHECK(passed[3] - passed[2] > 0);
    CHECK(passed[3] - passed[2] < one_cache);
    MESSAGE("a decode step passes ", passed[3] - passed[2], " bytes to Core ML predictions");
}

}  // namespace test_causal_lm
