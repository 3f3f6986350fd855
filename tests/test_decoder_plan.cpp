// Decoder LMs larger than one Neural Engine program: the plan from a config alone
// (models/llm/decoder_plan.hpp) for a Llama-2-7B config.json with no weights, its numbers worked out here by
// hand from the shapes; a GGUF file planned from its metadata; the errors; and, on the ANE simulator, a tiny
// random-weight Llama whose weights pass a tiny limit running in chunks of whole layers (or split within each
// layer when one layer alone passes it) exactly as planned, with the logits of one program and of the CPU for
// prefill and decode, and a decode step that writes one token's keys and values, never a cache.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

#include <sys/resource.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ane_simulator.hpp"
#include "decoder_checkpoints.hpp"
#include "model_test_support.hpp"

namespace test_decoder_plan {

namespace {

using anvil::models::causal_lm;
using anvil::models::causal_lm_options;
using anvil::models::decoder_config;
using anvil::models::decoder_plan;
using anvil::models::plan_decoder;
using anvil_test::temporary_folder;
using anvil_test::write_text;

// Llama-2-7B's shapes (meta-llama/Llama-2-7b-hf config.json).
const std::string llama2_7b_json = R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"],
    "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 32, "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": false, "bos_token_id": 1,
    "eos_token_id": 2, "hidden_act": "silu", "torch_dtype": "float16"})";

// The peak resident set so far, in bytes (Linux: getrusage's kilobytes).
long long peak_resident_bytes() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return static_cast<long long>(usage.ru_maxrss) * 1024;
}

causal_lm_options with_limit(std::size_t bytes) {
    causal_lm_options o;
    o.load.compile.ane_max_program_weight_bytes = bytes;
    o.load.compile.ane_compile_budget = 119;  // not the environment's
    return o;
}

}  // namespace

TEST_CASE("decoder plan: a Llama-2-7B config.json is planned in milliseconds, without weights") {
    temporary_folder folder;
    write_text(folder.path / "config.json", llama2_7b_json);
    // fp16 bytes by hand. A layer: four h x h attention matrices (no GQA), three h x i MLP matrices, two
    // norms of h. The head: the vocabulary's rows and the final norm. K and V of a layer at 4096 slots.
    const std::size_t h = 4096, i = 11008, vocab = 32000, layers = 32;
    const std::size_t layer = 2 * (4 * h * h + 3 * h * i) + 2 * 2 * h;
    const std::size_t head = 2 * vocab * h + 2 * h;
    const std::size_t kv_layer = 2 * 2 * 32 * 128 * 4096;
    CHECK(layer == 404766720);
    CHECK(head == 262152192);

    const long long peak_before = peak_resident_bytes();
    const auto start = std::chrono::steady_clock::now();
    const std::size_t limit = std::size_t{256} << 20;  // the default
    const decoder_plan plan = plan_decoder(folder.path, with_limit(limit));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const long long grown = peak_resident_bytes() - peak_before;
    MESSAGE("Llama-2-7B planned in ", seconds * 1e3, " ms; the peak resident set grew by ", grown, " bytes");
    CHECK(seconds < 0.25);
    CHECK(grown < (32ll << 20));  // its 13.5 GB of fp16 weights were never there
    CHECK(plan.source == (folder.path / "config.json").string());

    // 256 MiB: one layer alone passes it, so each layer is a chunk, split before the MLP's second matrix
    // (norm, q, k, v, o, norm and gate fit; up does not; up and down fit together).
    CHECK(layer > limit);
    const std::size_t first_program = 2 * h + 4 * 2 * h * h + 2 * h + 2 * h * i;
    CHECK(first_program <= limit);
    CHECK(first_program + 2 * h * i > limit);
    CHECK(2 * 2 * h * i <= limit);
    CHECK(head <= limit);  // the head (tiled by rows for the 16384-channel limit) is one program
    REQUIRE(plan.chunks.size() == layers + 1);
    for (std::size_t l = 0; l < layers; ++l) {
        CAPTURE(l);
        const auto& chunk = plan.chunks[l];
        CHECK(chunk.stages == "layer " + std::to_string(l));
        CHECK(chunk.first_layer == static_cast<std::int64_t>(l));
        CHECK(chunk.layers == 1);
        CHECK_FALSE(chunk.head);
        CHECK(chunk.weight_bytes == layer);
        CHECK(chunk.compressed_bytes == layer);
        CHECK(chunk.kv_cache_bytes == kv_layer);
        CHECK(chunk.programs == 2);
    }
    CHECK(plan.chunks.back().stages == "head");
    CHECK(plan.chunks.back().head);
    CHECK(plan.chunks.back().layers == 0);
    CHECK(plan.chunks.back().weight_bytes == head);
    CHECK(plan.chunks.back().programs == 1);
    CHECK(plan.weight_bytes == layers * layer + head);
    CHECK(plan.kv_cache_bytes == layers * kv_layer);
    CHECK(plan.embedding_bytes == 2 * vocab * h);
    CHECK(plan.context == 4096);
    CHECK(plan.context_ladder == std::vector<std::int64_t>{512, 1024, 2048, 4096});
    CHECK(plan.programs_per_shape == 2 * layers + 1);
    CHECK(plan.programs == 2 * (2 * layers + 1));  // prefill and decode
    CHECK(plan.ladder_programs == 4 * plan.programs);
    CHECK_FALSE(plan.fits_compile_budget);  // 130 > 119
    CHECK_FALSE(plan.fits_live_programs);
    bool head_note = false;
    for (const std::string& note : plan.notes)
        head_note = head_note || note.find("32000 logits come from row tiles") != std::string::npos;
    CHECK(head_note);

    // 1 GiB: two layers per chunk (three pass it), and the head fits beside the last two.
    const std::size_t gib = std::size_t{1} << 30;
    CHECK(2 * layer <= gib);
    CHECK(3 * layer > gib);
    CHECK(2 * layer + head <= gib);
    const decoder_plan big = plan_decoder(folder.path, with_limit(gib));
    REQUIRE(big.chunks.size() == layers / 2);
    for (std::size_t k = 0; k < big.chunks.size(); ++k) {
        CAPTURE(k);
        const bool last = k + 1 == big.chunks.size();
        const auto& chunk = big.chunks[k];
        CHECK(chunk.first_layer == static_cast<std::int64_t>(2 * k));
        CHECK(chunk.layers == 2);
        CHECK(chunk.head == last);
        CHECK(chunk.stages == "layer " + std::to_string(2 * k) + " to " +
                                  (last ? std::string("head") : "layer " + std::to_string(2 * k + 1)));
        CHECK(chunk.weight_bytes == 2 * layer + (last ? head : 0));
        CHECK(chunk.programs == 1);
    }
    CHECK(big.programs == 2 * layers / 2);
    CHECK(big.fits_compile_budget);
    CHECK_FALSE(big.fits_live_programs);  // 32 loaded programs pass the ~15 some devices allow

    // int8 (what a Core ML program stores): a byte a weight and an fp16 scale per row; norms stay fp16. The
    // chunks stay those of the fp16 bytes. A 1024-slot context scales the caches.
    causal_lm_options compressed = with_limit(limit);
    compressed.load.compile.weight_compression = anvil::weight_compression::int8;
    compressed.max_context = 1024;
    const decoder_plan small = plan_decoder(folder.path, compressed);
    const std::size_t int8_layer = 4 * (h * h + 2 * h) + 2 * (i * h + 2 * i) + (h * i + 2 * h) + 2 * 2 * h;
    REQUIRE(small.chunks.size() == layers + 1);
    CHECK(small.chunks[0].weight_bytes == layer);
    CHECK(small.chunks[0].compressed_bytes == int8_layer);
    CHECK(small.chunks[0].kv_cache_bytes == kv_layer / 4);
    CHECK(small.chunks.back().compressed_bytes == vocab * h + 2 * vocab + 2 * h);
    CHECK(small.context_ladder == std::vector<std::int64_t>{512, 1024});
}

TEST_CASE("decoder plan: a GGUF file is planned from its metadata as from the config it stands for") {
    const std::string file = anvil_test::data_path("gguf/models/llama_gqa_f16.gguf");
    const causal_lm_options options = with_limit(40000);
    const decoder_plan from_file = plan_decoder(file, options);
    const anvil::models::gguf_decoder read = anvil::models::read_gguf_decoder(file);
    const decoder_plan from_config =
        plan_decoder(decoder_config::from_json(read.config, "metadata"), options);
    CHECK(from_file.source == file);
    CHECK(from_file.config.layers == 2);
    CHECK(from_file.config.hidden == 64);
    CHECK(from_file.config.kv_heads == 2);
    REQUIRE(from_file.chunks.size() == from_config.chunks.size());
    CHECK(from_file.chunks.size() > 1);
    for (std::size_t k = 0; k < from_file.chunks.size(); ++k) {
        CAPTURE(k);
        CHECK(from_file.chunks[k].stages == from_config.chunks[k].stages);
        CHECK(from_file.chunks[k].weight_bytes == from_config.chunks[k].weight_bytes);
        CHECK(from_file.chunks[k].programs == from_config.chunks[k].programs);
    }
}

TEST_CASE("decoder plan: a folder without config.json, a model that is not a decoder LM, a bad file") {
    temporary_folder empty;
    CHECK_THROWS_WITH_AS(static_cast<void>(plan_decoder(empty.path)), doctest::Contains("no config.json"),
                         anvil::io_error);
    temporary_folder bert;
    write_text(bert.path / "config.json", R"({"model_type": "bert", "vocab_size": 30, "hidden_size": 12})");
    CHECK_THROWS_WITH_AS(static_cast<void>(plan_decoder(bert.path)),
                         doctest::Contains("model_type 'bert' is not a supported decoder language model"),
                         anvil::unsupported_error);
    CHECK_THROWS_WITH_AS(static_cast<void>(plan_decoder(empty.path / "missing.gguf")),
                         doctest::Contains("missing.gguf: no such file"), anvil::io_error);
    write_text(empty.path / "text.gguf", "not a gguf file at all");
    CHECK_THROWS_WITH_AS(static_cast<void>(plan_decoder(empty.path / "text.gguf")),
                         doctest::Contains("not a GGUF file"), anvil::format_error);
    // GPT-2 has learned positions for n_positions only.
    temporary_folder gpt2;
    write_text(gpt2.path / "config.json", R"({"model_type": "gpt2", "vocab_size": 30, "n_embd": 12,
        "n_layer": 2, "n_head": 3, "n_positions": 40})");
    causal_lm_options long_context;
    long_context.max_context = 100;
    CHECK_THROWS_WITH(static_cast<void>(plan_decoder(gpt2.path, long_context)),
                      doctest::Contains("max_context 100 exceeds the 40 positions"));
}

#ifdef ANVIL_ANE_SIM_PATH

namespace {

// Four layers of hidden 32 (4 heads of 8, 2 KV heads), intermediate 48, vocabulary 64.
const std::string four_layers_json = R"({"model_type": "llama", "vocab_size": 64, "hidden_size": 32,
    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48,
    "rms_norm_eps": 1e-5, "rope_theta": 500.0, "max_position_embeddings": 64, "eos_token_id": 2,
    "bos_token_id": 1, "tie_word_embeddings": false})";

// fp16 bytes by hand: norm, q [32, 32], k and v [16, 32], o [32, 32], norm, gate and up [48, 32], down
// [32, 48]; the head: final norm and [64, 32].
constexpr std::size_t tiny_layer = 2 * (32 + 32 * 32 + 2 * 16 * 32 + 32 * 32 + 32 + 3 * 48 * 32);
constexpr std::size_t tiny_head = 2 * (32 + 64 * 32);

// What one compiled step placed on the Neural Engine, in order: each program's stages and weight bytes.
struct ane_program_report {
    std::vector<std::string> stages;
    std::vector<std::size_t> weight_bytes;
    std::vector<std::size_t> chunk;
};

std::vector<ane_program_report> ane_segments(const anvil::placement_journal& journal) {
    std::vector<ane_program_report> out;
    for (const anvil::placement_report& report : journal.reports()) {
        ane_program_report r;
        for (const anvil::placement_segment& s : report.segments) {
            if (s.device != "ane") continue;
            r.stages.push_back(s.stages);
            r.weight_bytes.push_back(s.weight_bytes);
            r.chunk.push_back(s.chunk);
        }
        out.push_back(std::move(r));
    }
    return out;
}

// Every step program placed its ANE programs as `plan` says: per chunk, `programs` programs named by its
// stages, holding its weights (the graph adds a few scalar constants per layer to the plan's matrices).
void check_as_planned(const anvil::placement_journal& journal, const decoder_plan& plan) {
    const auto reports = ane_segments(journal);
    REQUIRE_FALSE(reports.empty());
    for (const auto& report : reports) {
        std::vector<std::string> want_stages;
        for (const auto& chunk : plan.chunks)
            for (std::size_t p = 0; p < chunk.programs; ++p)
                want_stages.push_back(chunk.stages);
        CHECK(report.stages == want_stages);
        if (report.stages != want_stages) continue;
        std::size_t at = 0;
        for (std::size_t c = 0; c < plan.chunks.size(); ++c) {
            std::size_t bytes = 0;
            for (std::size_t p = 0; p < plan.chunks[c].programs; ++p, ++at) {
                CHECK(report.chunk[at] == c);
                bytes += report.weight_bytes[at];
            }
            CAPTURE(c);
            CHECK(bytes >= plan.chunks[c].weight_bytes);
            CHECK(bytes <=
                  plan.chunks[c].weight_bytes + 64 * static_cast<std::size_t>(plan.chunks[c].layers + 1));
        }
    }
}

std::vector<std::vector<float>> greedy_rows(causal_lm& lm, const std::vector<std::int32_t>& prompt,
                                            std::size_t tokens, std::vector<std::int32_t>& generated,
                                            std::vector<long>* changed = nullptr) {
    std::vector<std::vector<float>> rows;
    anvil::models::recipe_detail::causal_lm_access::observe_logits(
        lm, [&](std::size_t, std::span<const float> row) { rows.emplace_back(row.begin(), row.end()); });
    anvil::models::generation_options g;
    g.max_new_tokens = static_cast<std::int64_t>(tokens);
    g.stop_at_eos = false;
    generated = lm.generate(prompt, g, [&](std::size_t, std::int32_t, std::string_view) {
                      if (changed != nullptr)
                          changed->push_back(anvil_test::sim().counter("bytes_changed_in"));
                      return true;
                  }).tokens;
    return rows;
}

double max_row_error(const std::vector<std::vector<float>>& got,
                     const std::vector<std::vector<float>>& want) {
    REQUIRE(got.size() == want.size());
    double worst = 0.0;
    for (std::size_t r = 0; r < got.size(); ++r) {
        REQUIRE(got[r].size() == want[r].size());
        for (std::size_t v = 0; v < got[r].size(); ++v)
            worst = std::max(worst, std::fabs(double{got[r][v]} - double{want[r][v]}) /
                                        std::max(1.0, std::fabs(double{want[r][v]})));
    }
    return worst;
}

}  // namespace

TEST_CASE("decoder plan: on the ANE simulator a model past the weight limit runs in chunks of whole layers") {
    anvil_test::ane_target ane;
    REQUIRE(anvil_test::use_ane_simulator(ane));
    temporary_folder folder;
    const decoder_config config =
        decoder_config::from_json(anvil::json::parse(four_layers_json), "config.json");
    anvil_test::write_decoder_model(folder.path, config, four_layers_json);
    const std::vector<std::int32_t> prompt{3, 17, 5, 9, 22, 11, 4, 8, 13, 2, 6, 40};
    const std::size_t steps = 6;

    causal_lm_options base;
    base.max_context = 32;
    base.context_ladder = {32};
    base.prefill_chunk = 16;  // the prompt in one prefill call and a partial one
    base.load.compile = ane.options;
    base.load.compile.ane_compile_budget = 119;

    // The CPU's logits and greedy tokens, and one Neural Engine program per step (the default limit).
    causal_lm_options cpu = base;
    cpu.load.compile = {};
    cpu.load.compile.target = anvil::device::cpu;
    cpu.decode_window = 8;
    std::vector<std::int32_t> cpu_tokens, single_tokens, chunked_tokens;
    anvil::host_tensor cpu_logits, single_logits;
    std::vector<std::vector<float>> cpu_rows, single_rows;
    {
        auto lm = causal_lm::load(folder.path, cpu);
        cpu_logits = lm.logits(prompt);
        cpu_rows = greedy_rows(lm, prompt, steps, cpu_tokens);
    }
    {
        auto lm = causal_lm::load(folder.path, base);
        single_logits = lm.logits(prompt);
        single_rows = greedy_rows(lm, prompt, steps, single_tokens);
    }

    // 32000 bytes: two layers (30976) fit, three do not, and the head does not fit beside two.
    const std::size_t limit = 32000;
    CHECK(2 * tiny_layer <= limit);
    CHECK(3 * tiny_layer > limit);
    CHECK(2 * tiny_layer + tiny_head > limit);
    causal_lm_options chunked = base;
    chunked.load.compile.ane_max_program_weight_bytes = limit;
    auto journal = std::make_shared<anvil::placement_journal>();
    chunked.load.compile.placement_log = journal;
    const decoder_plan plan = plan_decoder(folder.path, chunked);
    REQUIRE(plan.chunks.size() == 3);
    CHECK(plan.chunks[0].stages == "layer 0 to layer 1");
    CHECK(plan.chunks[1].stages == "layer 2 to layer 3");
    CHECK(plan.chunks[2].stages == "head");
    CHECK(plan.chunks[0].weight_bytes == 2 * tiny_layer);
    CHECK(plan.chunks[2].weight_bytes == tiny_head);
    {
        auto lm = causal_lm::load(folder.path, chunked);
        const anvil::host_tensor logits = lm.logits(prompt);
        const double to_cpu = anvil_test::max_relative_error(logits, cpu_logits);
        const double to_single = anvil_test::max_relative_error(logits, single_logits);
        std::vector<long> changed;
        const auto rows = greedy_rows(lm, prompt, steps, chunked_tokens, &changed);
        const double decode_to_single = max_row_error(rows, single_rows);
        MESSAGE("chunked prefill logits: relative error ", to_cpu, " to the CPU, ", to_single,
                " to one program; decode rows: ", decode_to_single, " to one program");
        CHECK(to_cpu < 5e-2);  // fp16 throughout, as the sibling simulator tests allow
        CHECK(to_single < 1e-3);
        CHECK(decode_to_single < 1e-3);
        CHECK(chunked_tokens == single_tokens);
        CHECK(chunked_tokens == cpu_tokens);
        if (chunked_tokens == cpu_tokens) CHECK(max_row_error(rows, cpu_rows) < 5e-2);
        // Every step program (prefill for logits, prefill for generate, decode) ran the plan's chunks.
        CHECK(journal->reports().size() == 3);
        check_as_planned(*journal, plan);
        // A decode step's inputs change by its ordinary inputs in each chunk that reads them (mask, cos, sin,
        // select) and one token's keys and values in the window: never a cache (each chunk's caches are its
        // program's resident inputs, written by the runner, not passed between programs).
        const auto& c = lm.config();
        const long context = 32, window = 8;
        const long ordinary = 4 * (1 + c.rope.rotary_dim + (context + window + 1) + 1);
        const long one_token = 4 * 2 * c.layers * c.kv_heads * c.head_dim;
        const long cache = 2 * 2 * c.layers * c.kv_heads * context * c.head_dim;
        REQUIRE(changed.size() == steps);
        for (std::size_t step = 2; step < changed.size(); ++step) {
            CAPTURE(step);
            const long delta = changed[step] - changed[step - 1];
            CHECK(delta > 0);
            CHECK(delta <= 3 * ordinary + one_token);
            CHECK(delta < cache / 4);
        }
    }

    // 10000 bytes: one layer alone passes it, so each layer is a chunk split within it (norm, q, k, v, o,
    // norm and gate fit; up and down go to a second program) and the head is a chunk of its own.
    const std::size_t small = 10000;
    const std::size_t first_program = 2 * (32 + 32 * 32 + 2 * 16 * 32 + 32 * 32 + 32 + 48 * 32);
    CHECK(tiny_layer > small);
    CHECK(first_program <= small);
    CHECK(first_program + 2 * 48 * 32 > small);
    causal_lm_options split = base;
    split.load.compile.ane_max_program_weight_bytes = small;
    journal = std::make_shared<anvil::placement_journal>();
    split.load.compile.placement_log = journal;
    const decoder_plan split_plan = plan_decoder(folder.path, split);
    REQUIRE(split_plan.chunks.size() == 5);
    for (std::size_t l = 0; l < 4; ++l) {
        CHECK(split_plan.chunks[l].stages == "layer " + std::to_string(l));
        CHECK(split_plan.chunks[l].programs == 2);
    }
    CHECK(split_plan.chunks[4].programs == 1);
    {
        auto lm = causal_lm::load(folder.path, split);  // logits only: 9 programs of the ~15 loadable
        const double error = anvil_test::max_relative_error(lm.logits(prompt), single_logits);
        MESSAGE("split within layers: prefill logits relative error ", error, " to one program");
        CHECK(error < 1e-3);
        CHECK(journal->reports().size() == 1);
        check_as_planned(*journal, split_plan);
    }
    CHECK(anvil_test::sim().violations().empty());
}

#endif  // ANVIL_ANE_SIM_PATH

}  // namespace test_decoder_plan
