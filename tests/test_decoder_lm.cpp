// Decoder language models, the parts that need no reference model: config.json (+ generation_config.json) of
// every family and its errors, weight names and shapes (a missing or misshapen tensor is named), the RoPE
// tables of every scaling variant against the formulas of Hugging Face's modeling_rope_utils.py evaluated
// here in double precision, and the runner's invariants on tiny random checkpoints written here (chunked
// prefill = one prefill, greedy generation = repeated argmax of the full logits, batched = one by one, a
// decode window gives the logits of decoding without one).
// test_causal_lm.cpp compares with the independent PyTorch reference.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <numbers>
#include <string>
#include <vector>

#include "decoder_checkpoints.hpp"
#include "model_test_support.hpp"

namespace test_decoder_lm {

namespace {

using anvil::models::decoder_config;
using anvil::models::decoder_family;

decoder_config parse(const std::string& text, const std::string& generation = "") {
    const auto document = anvil::json::parse(text);
    if (generation.empty()) return decoder_config::from_json(document, "config.json");
    const auto gen = anvil::json::parse(generation);
    return decoder_config::from_json(document, "config.json", &gen);
}

const std::string llama_json = R"({"model_type": "llama", "vocab_size": 30, "hidden_size": 12,
    "num_hidden_layers": 2, "num_attention_heads": 3, "num_key_value_heads": 1, "intermediate_size": 20,
    "rms_norm_eps": 1e-5, "rope_theta": 500.0, "max_position_embeddings": 64, "eos_token_id": 2,
    "bos_token_id": 1, "tie_word_embeddings": false})";

const std::string gpt2_json = R"({"model_type": "gpt2", "vocab_size": 30, "n_embd": 12, "n_layer": 2,
    "n_head": 3, "n_inner": null, "n_positions": 40, "layer_norm_epsilon": 1e-5,
    "activation_function": "gelu_new", "eos_token_id": 29, "bos_token_id": 29})";

using anvil_test::temporary_folder;
using anvil_test::write_text;

// A folder with `config` and a random checkpoint for it.
void write_model(const std::filesystem::path& folder, const std::string& config, const std::string& skip = "",
                 bool transposed_c_attn = false) {
    anvil_test::write_decoder_model(folder, parse(config), config, skip, transposed_c_attn);
}

anvil::models::causal_lm_options cpu_options() {
    anvil::models::causal_lm_options o;
    o.load.compile.target = anvil::device::cpu;
    return o;
}

// HF's inverse frequencies in double precision, written from modeling_rope_utils.py.
std::vector<double> hf_inverse_frequencies(const anvil::models::rope_config& c, double seq_len) {
    using anvil::models::rope_scaling_kind;
    const auto dim = static_cast<double>(c.rotary_dim);
    double base = c.theta;
    if (c.scaling == rope_scaling_kind::dynamic && seq_len > static_cast<double>(c.max_position_embeddings)) {
        base *= std::pow(c.factor * seq_len / static_cast<double>(c.max_position_embeddings) - (c.factor - 1),
                         dim / (dim - 2));
    }
    std::vector<double> inv;
    for (std::int64_t i = 0; i < c.rotary_dim; i += 2)
        inv.push_back(1.0 / std::pow(base, static_cast<double>(i) / dim));
    if (c.scaling == rope_scaling_kind::linear) {
        for (double& f : inv)
            f /= c.factor;
    }
    if (c.scaling == rope_scaling_kind::llama3) {
        const double old = static_cast<double>(c.original_max_position_embeddings);
        const double low_wavelen = old / c.low_freq_factor, high_wavelen = old / c.high_freq_factor;
        for (double& f : inv) {
            const double wavelen = 2 * std::numbers::pi / f;
            if (wavelen > low_wavelen) {
                f /= c.factor;
            } else if (wavelen >= high_wavelen) {
                const double smooth =
                    (old / wavelen - c.low_freq_factor) / (c.high_freq_factor - c.low_freq_factor);
                f = (1 - smooth) * f / c.factor + smooth * f;
            }
        }
    }
    return inv;
}

}  // namespace

TEST_CASE("decoder lm: config.json of each family") {
    const auto llama = parse(llama_json);
    CHECK(llama.family == decoder_family::llama);
    CHECK(llama.kv_heads == 1);
    CHECK(llama.head_dim == 4);
    CHECK(llama.rope.rotary_dim == 4);
    CHECK(llama.rope.theta == 500.0);
    CHECK(llama.norm_eps == 1e-5);
    CHECK(!llama.qkv_bias);
    CHECK(!llama.tie_word_embeddings);
    CHECK(llama.eos_token_ids == std::vector<std::int32_t>{2});
    CHECK(llama.bos_token_id == 1);

    // generation_config.json adds its eos ids (a list) to config.json's.
    const auto merged = parse(llama_json, R"({"eos_token_id": [2, 7], "bos_token_id": 1})");
    CHECK(merged.eos_token_ids == std::vector<std::int32_t>{2, 7});

    auto with = [&](const std::string& type, const std::string& extra) {
        std::string text = llama_json;
        text.replace(text.find("\"llama\""), 7, "\"" + type + "\"");
        text.insert(text.size() - 1, extra);
        return parse(text);
    };
    const auto qwen2 = with("qwen2", R"(, "use_sliding_window": false, "sliding_window": 8)");
    CHECK(qwen2.qkv_bias);
    CHECK(!qwen2.output_bias);
    CHECK(qwen2.sliding_window == 0);
    const auto qwen3 = with("qwen3", R"(, "head_dim": 6)");
    CHECK(qwen3.qk_norm);
    CHECK(qwen3.head_dim == 6);
    CHECK(with("qwen3", "").head_dim == 128);  // Qwen3Config's default, not hidden / heads
    const auto mistral = with("mistral", R"(, "sliding_window": 5)");
    CHECK(mistral.sliding_window == 5);
    CHECK(with("mistral", R"(, "sliding_window": null)").sliding_window == 0);
    const auto scaled = with("llama", R"(, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
        "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16})");
    CHECK(scaled.rope.scaling == anvil::models::rope_scaling_kind::llama3);
    CHECK(scaled.rope.original_max_position_embeddings == 16);
    CHECK(with("llama", R"(, "rope_scaling": {"type": "dynamic", "factor": 2.0})").rope.scaling ==
          anvil::models::rope_scaling_kind::dynamic);
    CHECK(with("llama", R"(, "attention_bias": true, "mlp_bias": true)").output_bias);

    const auto gpt2 = parse(gpt2_json);
    CHECK(gpt2.family == decoder_family::gpt2);
    CHECK(gpt2.intermediate == 48);  // n_inner null: 4 * n_embd
    CHECK(gpt2.tie_word_embeddings);
    CHECK(gpt2.learned_positions());
    CHECK(gpt2.act == anvil::models::activation::gelu_tanh);
    CHECK(gpt2.attention_scales.at(1) == doctest::Approx(0.5));
}

TEST_CASE("decoder lm: config errors name the field and what was expected") {
    CHECK_THROWS_WITH_AS(
        parse(R"({"model_type": "falcon", "vocab_size": 3})"),
        doctest::Contains("model_type 'falcon' is not a supported decoder language model (gpt2, "
                          "llama, qwen2, qwen3, mistral)"),
        anvil::unsupported_error);
    std::string qwen = llama_json;
    qwen.replace(qwen.find("\"llama\""), 7, "\"qwen2\"");
    qwen.insert(qwen.size() - 1, R"(, "use_sliding_window": true)");
    CHECK_THROWS_WITH_AS(parse(qwen), doctest::Contains("use_sliding_window true is not supported for qwen2"),
                         anvil::unsupported_error);
    std::string yarn = llama_json;
    yarn.insert(yarn.size() - 1, R"(, "rope_scaling": {"rope_type": "yarn", "factor": 4.0})");
    CHECK_THROWS_WITH_AS(parse(yarn), doctest::Contains("rope_scaling type 'yarn' is not supported"),
                         anvil::unsupported_error);
    std::string gqa = llama_json;
    gqa.replace(gqa.find("\"num_key_value_heads\": 1"), 24, "\"num_key_value_heads\": 2");
    CHECK_THROWS_WITH(parse(gqa),
                      doctest::Contains("num_attention_heads 3 is not a multiple of num_key_value_heads 2"));
    std::string partial = llama_json;
    partial.insert(partial.size() - 1, R"(, "partial_rotary_factor": 0.25)");
    CHECK_THROWS_WITH_AS(parse(partial), doctest::Contains("partial_rotary_factor 0.25 of head_dim 4"),
                         anvil::unsupported_error);
    std::string eos = llama_json;
    eos.replace(eos.find("\"eos_token_id\": 2"), 17, "\"eos_token_id\": 99");
    CHECK_THROWS_WITH(parse(eos),
                      doctest::Contains("eos_token_id 99 is outside the vocabulary (vocab_size 30)"));
    CHECK_THROWS_WITH(parse(llama_json, R"({"eos_token_id": "x"})"),
                      doctest::Contains("'eos_token_id' must be a token id or a list of them"));
    CHECK_THROWS_WITH(parse(R"({"model_type": "llama", "vocab_size": 30})"),
                      doctest::Contains("'hidden_size' is missing"));
}

TEST_CASE("decoder lm: a missing or misshapen tensor is named") {
    temporary_folder folder;
    write_model(folder.path, llama_json, "model.layers.1.mlp.up_proj.weight");
    CHECK_THROWS_WITH_AS(
        static_cast<void>(anvil::models::causal_lm::load(folder.path, cpu_options())),
        doctest::Contains("the tensor 'model.layers.1.mlp.up_proj.weight' is missing (expected shape "
                          "[20, 12])"),
        anvil::format_error);
    write_model(folder.path, llama_json, "lm_head.weight");
    CHECK_THROWS_WITH(static_cast<void>(anvil::models::causal_lm::load(folder.path, cpu_options())),
                      doctest::Contains("'lm_head.weight' is missing"));
    write_model(folder.path, gpt2_json, "", true);
    CHECK_THROWS_WITH_AS(
        static_cast<void>(anvil::models::causal_lm::load(folder.path, cpu_options())),
        doctest::Contains("'transformer.h.0.attn.c_attn.weight': expected shape [12, 36] (Conv1D "
                          "[in, out]), got [36, 12]"),
        anvil::shape_error);
    write_model(folder.path, gpt2_json, "transformer.wte.weight");
    CHECK_THROWS_WITH(static_cast<void>(anvil::models::causal_lm::load(folder.path, cpu_options())),
                      doctest::Contains("no gpt2 weights: the tensor 'wte.weight' is missing"));
}

TEST_CASE("decoder lm: RoPE tables of every scaling variant match Hugging Face's formulas") {
    using anvil::models::rope_scaling_kind;
    struct variant {
        rope_scaling_kind kind;
        double factor;
    };
    for (const variant v :
         {variant{rope_scaling_kind::none, 1.0}, variant{rope_scaling_kind::linear, 4.0},
          variant{rope_scaling_kind::dynamic, 2.0}, variant{rope_scaling_kind::llama3, 8.0}}) {
        anvil::models::rope_config c;
        c.rotary_dim = 16;
        c.theta = 10000.0;
        c.scaling = v.kind;
        c.factor = v.factor;
        c.max_position_embeddings = 12;
        c.original_max_position_embeddings = 24;  // llama3: wavelengths 2pi .. ~6000 span all three bands
        // Two rows: the second's largest position (30) passes max_position_embeddings (dynamic scaling grows
        // its base); -1 is an unused slot.
        const std::vector<std::int64_t> positions{0, 1, 2, 5, 7, -1, 20, 25, 30};
        const auto tables = anvil::models::make_rope_tables(c, positions, 3, 3);
        double worst = 0.0;
        for (std::size_t row = 0; row < 3; ++row) {
            std::int64_t largest = -1;
            for (std::size_t s = 0; s < 3; ++s)
                largest = std::max(largest, positions[row * 3 + s]);
            const auto inv = hf_inverse_frequencies(c, static_cast<double>(largest + 1));
            for (std::size_t s = 0; s < 3; ++s) {
                const std::int64_t p = positions[row * 3 + s];
                for (std::size_t i = 0; i < 8; ++i) {
                    const double angle = p < 0 ? 0.0 : inv[i] * static_cast<double>(p);
                    worst = std::max(worst, std::fabs(tables.cos[(row * 3 + s) * 8 + i] - std::cos(angle)));
                    worst = std::max(worst, std::fabs(tables.sin[(row * 3 + s) * 8 + i] - std::sin(angle)));
                }
            }
        }
        CAPTURE(static_cast<int>(v.kind));
        CHECK(worst < 2e-5);
    }
    // Dynamic scaling changes nothing up to max_position_embeddings, and something past it.
    anvil::models::rope_config plain;
    plain.rotary_dim = 8;
    anvil::models::rope_config dynamic = plain;
    dynamic.scaling = rope_scaling_kind::dynamic;
    dynamic.factor = 2.0;
    dynamic.max_position_embeddings = 12;
    CHECK(anvil::models::rope_inverse_frequencies(dynamic, 12) ==
          anvil::models::rope_inverse_frequencies(plain, 12));
    CHECK(anvil::models::rope_inverse_frequencies(dynamic, 13)[1] <
          anvil::models::rope_inverse_frequencies(plain, 13)[1]);
}

TEST_CASE("decoder lm: chunked prefill, greedy decoding and batching agree with full-sequence logits") {
    for (const std::string& config : {llama_json, gpt2_json}) {
        temporary_folder folder;
        write_model(folder.path, config);
        auto options = cpu_options();
        options.context_ladder = {8, 16, 32};
        auto one = anvil::models::causal_lm::load(folder.path, options);
        CHECK(one.max_context() == 32);
        const std::vector<std::int32_t> prompt{3, 17, 5, 9, 22, 11, 4, 8, 13, 2, 6};
        const auto full = one.logits(prompt);
        options.prefill_chunk = 4;
        auto chunked = anvil::models::causal_lm::load(folder.path, options);
        CHECK(anvil_test::max_relative_error(chunked.logits(prompt), full) < 1e-5);

        // Greedy generation is the argmax of the full logits, token after token (across the rung at 16).
        anvil::models::generation_options g;
        g.max_new_tokens = 9;
        g.stop_at_eos = false;
        const auto generated = chunked.generate(prompt, g);
        REQUIRE(generated.tokens.size() == 9);
        CHECK(generated.stop_reason == "max_new_tokens");
        std::vector<std::int32_t> sequence = prompt;
        for (const std::int32_t token : generated.tokens) {
            const auto logits = one.logits(sequence).to_f32();
            const auto last = logits.end() - 30;
            const auto best = static_cast<std::int32_t>(std::max_element(last, logits.end()) - last);
            CHECK(token == best);
            sequence.push_back(best);
        }
        // The same prompt in a batch with shorter and longer ones gives the same tokens.
        const std::vector<std::vector<std::int32_t>> prompts{
            {5, 6}, prompt, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}};
        const auto batch = chunked.generate_batch(prompts, g);
        REQUIRE(batch.size() == 3);
        CHECK(batch[1].tokens == generated.tokens);
        CHECK(batch[0].tokens == chunked.generate(prompts[0], g).tokens);
        CHECK(batch[2].tokens == chunked.generate(prompts[2], g).tokens);

        // Errors: a prompt past max_context, an empty one, an id outside the vocabulary.
        const std::vector<std::int32_t> too_long(33, 1);
        CHECK_THROWS_WITH(static_cast<void>(one.logits(too_long)),
                          doctest::Contains("the prompt has 33 tokens, more than max_context 32"));
        CHECK_THROWS_WITH(one.generate(std::vector<std::int32_t>{}, g),
                          doctest::Contains("the prompt is empty"));
        CHECK_THROWS_WITH(static_cast<void>(one.logits(std::vector<std::int32_t>{1, 30})),
                          doctest::Contains("token id 30 is outside the vocabulary (30 ids)"));
        // Context full: 32 slots hold the 11 prompt tokens and 21 more.
        g.max_new_tokens = 100;
        const auto full_context = one.generate(prompt, g);
        CHECK(full_context.stop_reason == "context_full");
        CHECK(full_context.tokens.size() == 22);
    }
}

TEST_CASE("decoder lm: decoding through a window gives the logits of writing the cache directly") {
    using logits_rows = std::vector<std::vector<std::vector<float>>>;  // [stream][step][vocab]
    // Sliding window 5 (Mistral) checks that window slots carry their real positions.
    std::string mistral = llama_json;
    mistral.replace(mistral.find("\"llama\""), 7, "\"mistral\"");
    mistral.insert(mistral.size() - 1, R"(, "sliding_window": 5)");
    for (const std::string& config : {llama_json, gpt2_json, mistral}) {
        temporary_folder folder;
        write_model(folder.path, config);
        // Three streams of different lengths, 14 new tokens each: decoding starts in rung 16 (the longest
        // prompt has 11 tokens) and moves to 32 with 2 (window 3) or 5 (window 8) tokens in the window.
        const std::vector<std::vector<std::int32_t>> prompts{
            {5, 6}, {3, 17, 5, 9, 22, 11, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}};
        anvil::models::generation_options g;
        g.max_new_tokens = 14;
        g.stop_at_eos = false;
        auto run = [&](std::int64_t window, std::vector<std::vector<std::int32_t>>& tokens) {
            auto options = cpu_options();
            options.context_ladder = {8, 16, 32};
            options.decode_window = window;
            auto lm = anvil::models::causal_lm::load(folder.path, options);
            CHECK(lm.decode_window() == window);
            logits_rows rows(prompts.size());
            anvil::models::recipe_detail::causal_lm_access::observe_logits(
                lm, [&](std::size_t stream, std::span<const float> row) {
                    rows.at(stream).emplace_back(row.begin(), row.end());
                });
            for (const auto& r : lm.generate_batch(prompts, g))
                tokens.push_back(r.tokens);
            return rows;
        };
        std::vector<std::vector<std::int32_t>> want_tokens;
        const logits_rows want = run(0, want_tokens);
        for (const std::int64_t window : {1, 3, 8}) {
            CAPTURE(window);
            std::vector<std::vector<std::int32_t>> tokens;
            const logits_rows got = run(window, tokens);
            CHECK(tokens == want_tokens);
            double worst = 0.0;
            REQUIRE(got.size() == want.size());
            for (std::size_t s = 0; s < got.size(); ++s) {
                REQUIRE(got[s].size() == 14);
                REQUIRE(got[s].size() == want[s].size());
                for (std::size_t step = 0; step < got[s].size(); ++step)
                    for (std::size_t v = 0; v < got[s][step].size(); ++v)
                        worst = std::max(worst,
                                         static_cast<double>(std::fabs(got[s][step][v] - want[s][step][v])) /
                                             std::max(1.0, std::fabs(static_cast<double>(want[s][step][v]))));
            }
            MESSAGE("decode window ", window, ": largest logits difference from no window ", worst);
            CHECK(worst < 1e-5);
        }
    }
    auto options = cpu_options();
    options.decode_window = -2;
    temporary_folder folder;
    write_model(folder.path, llama_json);
    CHECK_THROWS_WITH(static_cast<void>(anvil::models::causal_lm::load(folder.path, options)),
                      doctest::Contains("decode_window (-2) -1 (automatic), 0 or positive"));
}

}  // namespace test_decoder_lm
