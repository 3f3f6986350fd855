// Decoder LMs from llama.cpp GGUF files (models/import/gguf_decoder.hpp). Where the expected values come
// from: tools/reference/gguf_models.py writes each file as llama.cpp's converter lays it out (its names, ne
// order, llama's q/k row permutation, matrices in F32, F16, Q8_0 or Q4_0 by its own quantisers) from
// decoder_lms.py's plain-PyTorch Llama/Qwen2 with seeded random weights, and computes the logits of the
// weights each file decodes to in float64. The refused files come from the same script, one defect each.
// tokenization.json holds the ids the script's own encoders give its texts (llama.cpp's SentencePiece
// algorithm; Hugging Face's byte-level BPE over the file's pre-tokenizer regex); llama.cpp 3.21.1 gives the
// same ids and logits on every file (tools/reference/llama_cpp_check.mjs).
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

#include "model_test_support.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace test_gguf_decoder {

namespace {

using anvil::models::causal_lm;
using anvil_test::data_path;

std::vector<std::int32_t> prompt_ids() {
    std::vector<std::int32_t> ids;
    const auto document = anvil::json::parse_file(data_path("gguf/models/prompt.json"));
    for (const auto& id : document.find("ids")->as_array())
        ids.push_back(static_cast<std::int32_t>(id.as_int()));
    return ids;
}

causal_lm load_cpu(const std::string& file) {
    anvil::models::causal_lm_options options;
    options.load = anvil_test::cpu();
    return causal_lm::load(data_path("gguf/models/" + file), options);
}

}  // namespace

TEST_CASE("gguf decoder: logits equal PyTorch's for the weights each file holds, F32 to the K-quants") {
    const std::vector<std::int32_t> ids = prompt_ids();
    // legacy_mix: Q4_1, Q5_0, Q5_1 and IQ4_NL matrices; k_mix: Q4_K, Q5_K and Q6_K (gguf_models.py MIXES).
    for (const std::string name :
         {"llama_gqa_f32", "llama_gqa_f16", "llama_gqa_q8_0", "llama_gqa_q4_0", "llama_gqa_legacy_mix",
          "llama_k256_k_mix", "qwen2_tied_q8_0", "gpt2_f16", "gpt2_q8_0"}) {
        CAPTURE(name);
        auto lm = load_cpu(name + ".gguf");
        const anvil::host_tensor want =
            anvil_test::load_npy(data_path("gguf/models/" + name + "_logits.npy"));
        const double error = anvil_test::max_relative_error(lm.logits(ids), want);
        MESSAGE(name, ": logits max relative error ", error);
        // fp32 against the float64 reference of the same (dequantised) weights, as the safetensors fixtures
        // (test_causal_lm.cpp): the quantised weights are decoded exactly, so they add nothing.
        CHECK(error < 1e-4);
        CHECK(lm.has_tokenizer());
    }
    // A wrong permutation (or none) would still run: check it changes the numbers. The Q4_0 file's logits
    // are not the F32 file's, so the files really hold different weights.
    const auto f32 = anvil_test::load_npy(data_path("gguf/models/llama_gqa_f32_logits.npy"));
    const auto q4 = anvil_test::load_npy(data_path("gguf/models/llama_gqa_q4_0_logits.npy"));
    CHECK(anvil_test::max_relative_error(q4, f32) > 1e-2);
}

TEST_CASE("gguf decoder: with int8 activations the logits move by llama.cpp's rounding, no more") {
    // compile_options::int8_activations rounds each linear's input to 8 bits, as llama.cpp does; on these
    // files llama.cpp's own logits differ from the exact reference by up to 0.76% of the logits' range
    // (tools/reference/llama_cpp_check.mjs). The rounding must show (the integer products ran) and stay
    // within a few times that.
    const std::vector<std::int32_t> ids = prompt_ids();
    // k_mix: the Q4_K and Q6_K matrices in integers, the Q5_K ones exactly.
    for (const std::string name :
         {"llama_gqa_q8_0", "llama_gqa_q4_0", "llama_k256_k_mix", "qwen2_tied_q8_0", "gpt2_q8_0"}) {
        CAPTURE(name);
        anvil::models::causal_lm_options options;
        options.load = anvil_test::cpu();
        options.load.compile.int8_activations = true;
        auto lm = causal_lm::load(data_path("gguf/models/" + name + ".gguf"), options);
        const auto got = lm.logits(ids).to_f32();
        const auto want = anvil_test::load_npy(data_path("gguf/models/" + name + "_logits.npy")).to_f32();
        REQUIRE(got.size() == want.size());
        const std::size_t vocab = want.size() / ids.size();
        double range = 0.0, error = 0.0;
        std::size_t same_best = 0;
        for (std::size_t s = 0; s < ids.size(); ++s) {
            std::size_t best_got = 0, best_want = 0;
            for (std::size_t v = 0; v < vocab; ++v) {
                const std::size_t at = s * vocab + v;
                range = std::max(range, std::fabs(double{want[at]}));
                error = std::max(error, std::fabs(double{got[at]} - double{want[at]}));
                if (got[at] > got[s * vocab + best_got]) best_got = v;
                if (want[at] > want[s * vocab + best_want]) best_want = v;
            }
            same_best += best_got == best_want ? 1 : 0;
        }
        MESSAGE(name, ": int8 activations: logits error ", error / range, " of the range, top-1 ", same_best,
                " of ", ids.size());
        CHECK(error / range > 1e-5);
        CHECK(error / range < 0.03);
        CHECK(same_best * 10 >= ids.size() * 9);
    }
}

TEST_CASE("gguf decoder: quantised matrices keep their blocks, and the CPU program holds those bytes") {
    using anvil::ggml_type;
    struct file_types {
        std::string name;
        std::vector<ggml_type> types;  // what its matrices hold
    };
    for (const file_types& entry :
         {file_types{"llama_gqa_q4_0", {ggml_type::Q4_0}}, file_types{"llama_gqa_q8_0", {ggml_type::Q8_0}},
          file_types{"qwen2_tied_q8_0", {ggml_type::Q8_0}}, file_types{"gpt2_q8_0", {ggml_type::Q8_0}},
          file_types{"llama_gqa_legacy_mix",
                     {ggml_type::Q4_1, ggml_type::Q5_0, ggml_type::Q5_1, ggml_type::IQ4_NL}},
          file_types{"llama_k256_k_mix", {ggml_type::Q4_K, ggml_type::Q5_K, ggml_type::Q6_K}}}) {
        const std::string& name = entry.name;
        CAPTURE(name);
        const auto file = data_path("gguf/models/" + name + ".gguf");
        const anvil::models::gguf_decoder read = anvil::models::read_gguf_decoder(file);
        std::size_t blocks = 0, dense = 0, folded = 0, linear = 0;
        for (const anvil::tensor_view* each : read.weights->tensors()) {
            const anvil::tensor_view& view = *each;
            const std::string& tensor = view.name();
            // Every matrix (the token embeddings too) but GPT-2's position embeddings, stored as F32.
            const bool is_linear = view.rank() == 2 && tensor.find(".wpe.") == std::string::npos;
            CAPTURE(tensor);
            if (is_linear) {
                ++linear;
                REQUIRE(view.blocks());
                CHECK(std::find(entry.types.begin(), entry.types.end(), *view.blocks()) != entry.types.end());
                const auto layout = *anvil::ggml_layout(static_cast<std::uint32_t>(*view.blocks()));
                CHECK(view.type() == anvil::dtype::f32);
                CHECK(view.byte_size() == view.element_count() / layout.block * layout.bytes);
                // A matrix of at most 4 KiB as f32 is folded into an f32 constant when compiled (as every
                // tiny constant is), so the program holds it packed instead.
                if (view.element_count() * sizeof(float) <= 4096) {
                    folded += static_cast<std::size_t>(view.element_count()) * sizeof(float);
                } else {
                    blocks += view.byte_size();
                }
            } else {
                CHECK(!view.blocks());  // norms, biases and positions
                dense += static_cast<std::size_t>(view.element_count()) * sizeof(float);
            }
        }
        CHECK(linear >= 7);
        // The blocks are what the GEMM and the gather read: the programs hold them, plus f32 copies of the
        // rest (packed GEMM panels: up to twice the values with the padding), never the matrices as f32.
        const std::size_t before = anvil::resident_weight_bytes().cpu_bytes;
        auto lm = load_cpu(name + ".gguf");
        (void)lm.logits(prompt_ids());
        const std::size_t held = anvil::resident_weight_bytes().cpu_bytes - before;
        MESSAGE(name, ": ", blocks, " bytes of blocks, ", dense + folded, " of f32 tensors; programs hold ",
                held);
        CHECK(held >= blocks);
        CHECK(held <= blocks + 3 * (dense + folded));
    }
    // GPT-2's matrices are the file's linear weights, untransposed: F16 stays F16, q/k/v are row views.
    const anvil::models::gguf_decoder gpt2 =
        anvil::models::read_gguf_decoder(data_path("gguf/models/gpt2_f16.gguf"));
    for (const char* piece : {"q", "k", "v"}) {
        const anvil::tensor_view& q =
            gpt2.weights->tensor(std::string("transformer.h.0.attn.") + piece + ".weight");
        CHECK(q.type() == anvil::dtype::f16);
        CHECK(q.shape()[0] == q.shape()[1]);
        CHECK(!gpt2.weights->contains("transformer.h.0.attn.c_attn.weight"));
    }
}

TEST_CASE("gguf decoder: the tokenizer and chat template come from tokenizer.ggml.*") {
    const auto document = anvil::json::parse_file(data_path("gguf/models/tokenization.json"));
    const auto& texts = document.find("texts")->as_array();
    struct vocabulary_case {
        std::string model, file;
        bool specials_in_ids;  // the reference adds a BOS (SentencePiece files do by default)
    };
    for (const vocabulary_case& v : {vocabulary_case{"llama_gqa", "llama_gqa_q4_0.gguf", true},
                                     vocabulary_case{"qwen2_tied", "qwen2_tied_q8_0.gguf", false},
                                     vocabulary_case{"gpt2", "gpt2_f16.gguf", false}}) {
        CAPTURE(v.file);
        const auto lm = load_cpu(v.file);
        const auto& expected = document.find("ids")->find(v.model)->as_array();
        REQUIRE(expected.size() == texts.size());
        for (std::size_t i = 0; i < texts.size(); ++i) {
            const std::string& text = texts[i].as_string();
            CAPTURE(text);
            std::vector<std::int32_t> want;
            for (const auto& id : expected[i].as_array())
                want.push_back(static_cast<std::int32_t>(id.as_int()));
            const std::vector<std::int32_t> got = lm.tokens().encode(text).ids;
            CHECK(got == want);
            CHECK(v.specials_in_ids == (got.front() == 317));
            // Text without special tokens decodes back to itself (bytes the SentencePiece vocabulary lacks
            // included, through its <0xXX> tokens).
            if (text.find("<|") == std::string::npos) CHECK(lm.tokens().decode(got) == text);
        }
    }
    // The Qwen2 file carries ChatML; the Llama one no template, which --chat reports by its key.
    const auto qwen = load_cpu("qwen2_tied_q8_0.gguf");
    const std::vector<anvil::models::chat_message> messages{{"system", "You are terse."},
                                                            {"user", "Where is the mill?"}};
    const auto prompt = qwen.chat(messages, true);
    CHECK(prompt.text ==
          "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nWhere is the mill?<|im_end|>\n"
          "<|im_start|>assistant\n");
    CHECK(prompt.text == texts.back().as_string());  // the fixture's last text is this conversation
    std::vector<std::int32_t> chat_want;
    for (const auto& id : document.find("ids")->find("qwen2_tied")->as_array().back().as_array())
        chat_want.push_back(static_cast<std::int32_t>(id.as_int()));
    CHECK(qwen.chat_ids(prompt) == chat_want);
    const auto llama = load_cpu("llama_gqa_f16.gguf");
    CHECK_THROWS_WITH_AS((void)llama.chat(messages, true), doctest::Contains("tokenizer.chat_template"),
                         anvil::unsupported_error);
}

TEST_CASE("gguf decoder: the hyper-parameters come from the metadata") {
    const auto llama = load_cpu("llama_gqa_f16.gguf");
    const auto& c = llama.config();
    CHECK(c.model_type == "llama");
    CHECK(c.hidden == 64);
    CHECK(c.layers == 2);
    CHECK(c.heads == 4);
    CHECK(c.kv_heads == 2);
    CHECK(c.head_dim == 16);
    CHECK(c.vocab_size == 320);
    CHECK_FALSE(c.tie_word_embeddings);
    const auto qwen = load_cpu("qwen2_tied_q8_0.gguf");
    CHECK(qwen.config().model_type == "qwen2");
    CHECK(qwen.config().kv_heads == 1);
    CHECK(qwen.config().tie_word_embeddings);
    // Generation stops where llama.cpp's does: the EOS id the file names (<|im_end|>), then the control
    // tokens llama.cpp takes for ends of generation by their text (<|endoftext|>, id 317).
    CHECK(qwen.config().eos_token_ids == std::vector<std::int32_t>{319, 317});
    // GPT-2: the converter writes the tied head out as a copy of the embeddings; it is read as tied.
    const auto gpt2 = load_cpu("gpt2_q8_0.gguf");
    CHECK(gpt2.config().model_type == "gpt2");
    CHECK(gpt2.config().learned_positions());
    CHECK(gpt2.config().intermediate == 96);
    CHECK(gpt2.config().max_position_embeddings == 64);
    CHECK(gpt2.config().tie_word_embeddings);
}

TEST_CASE("gguf decoder: llama.cpp's interleaved q/k rows go back to Hugging Face's rotate-half order") {
    // One head of 4 rows, 2 columns: llama.cpp stores rows (0, 2, 1, 3) of Hugging Face's as rows 0..3.
    const std::vector<float> gguf{0, 0, 20, 20, 10, 10, 30, 30};
    std::vector<float> out(gguf.size());
    anvil::models::recipe_detail::unpermute_rope_rows(gguf, 1, 2, out);
    CHECK(out == std::vector<float>{0, 0, 10, 10, 20, 20, 30, 30});
    // Two heads of 4: each head on its own.
    const std::vector<float> two{0, 2, 1, 3, 4, 6, 5, 7};
    std::vector<float> back(two.size());
    anvil::models::recipe_detail::unpermute_rope_rows(two, 2, 1, back);
    CHECK(back == std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7});
}

TEST_CASE("gguf decoder: files anvil cannot run name what is wrong") {
    const std::string folder = data_path("gguf/models/refused");
    std::ifstream manifest(folder + "/expected.tsv");
    REQUIRE(manifest.good());
    std::size_t count = 0;
    for (std::string line; std::getline(manifest, line);) {
        if (line.empty()) continue;
        const auto first = line.find('\t'), second = line.find('\t', first + 1);
        REQUIRE(second != std::string::npos);
        const std::string file = line.substr(0, first), kind = line.substr(first + 1, second - first - 1),
                          words = line.substr(second + 1);
        CAPTURE(file);
        ++count;
        anvil::models::causal_lm_options options;
        options.load = anvil_test::cpu();
        const std::string path = folder + "/" + file;
        std::string message = "(loaded)";
        bool right_kind = false;
        try {
            (void)causal_lm::load(path, options);
        } catch (const anvil::unsupported_error& e) {
            message = e.what();
            right_kind = kind == "unsupported";
        } catch (const anvil::format_error& e) {
            message = e.what();
            right_kind = kind == "format";
        }
        CAPTURE(message);
        CHECK(right_kind);
        CHECK(message.find(words) != std::string::npos);
        CHECK(message.find(path) != std::string::npos);
    }
    CHECK(count == 15);
}

}  // namespace test_gguf_decoder
