// anvil: how a decoder LM would run on the Neural Engine, planned from its config alone — no weight is read
// or allocated, so a 7B or 70B model is planned in milliseconds. A model whose weights pass one program's
// limit (compile_options::ane_max_program_weight_bytes) runs in chunks of whole layers, each chunk one
// program (or several, when one layer alone passes the limit), with its layers' KV caches resident in its
// program and the hidden state passed to the next chunk by IOSurface (backend/ane/partition.hpp). The plan
// sizes each stage's weights as the step graph would hold them (decoder_lm.hpp: fp16, linears tiled as the
// backend tiles them) and packs them with the backend's own chunk_stages (graph/stages.hpp), so the chunks
// it prints are the chunks causal_lm runs.
//
// What it does not see: ops the backend would send to the CPU (it warns where a dimension passes the
// Neural Engine's limit), and a device that refuses a program (anvil selftest probes that).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "anvil/compilation.hpp"
#include "anvil/graph/stages.hpp"
#include "anvil/graph/weight_compression.hpp"
#include "anvil/models/llm/causal_lm.hpp"
#include "anvil/models/llm/decoder_lm.hpp"

namespace anvil::models {

// Loaded programs the framework keeps at once before a compile fails with 0x50004 (RUNTIME.md §6: ~15 per
// TMC, the simulator's default; §0 #11: ironmill loads ~55). The plan checks against the lower figure.
inline constexpr std::size_t ane_live_program_limit = 15;

// One chunk: whole stages ("layer 4 to layer 7"; the head, with the final norm and the LM head, may share
// the last layers' chunk or be one of its own), one program per shape, or `programs` when its one stage
// alone passes the limit and is split between its nodes.
struct decoder_plan_chunk {
    std::string stages;            // "layer 0 to layer 3", "layer 30 to head", "head"
    std::int64_t first_layer = 0;  // its layers: [first_layer, first_layer + layers)
    std::int64_t layers = 0;
    bool head = false;                 // holds the final norm and the LM head
    std::size_t weight_bytes = 0;      // fp16, as its program embeds them
    std::size_t compressed_bytes = 0;  // as a Core ML program stores them under the plan's compression
    std::size_t kv_cache_bytes = 0;    // its layers' K and V caches, fp16, one stream at the plan's context
    std::size_t programs = 1;          // programs per step shape
};

struct decoder_plan {
    std::string source;  // the config.json or .gguf file it was planned from ("" from a config)
    decoder_config config;
    std::int64_t context = 0;                  // cache slots (max_context)
    std::vector<std::int64_t> context_ladder;  // the rungs causal_lm compiles steps for
    std::int64_t prefill_tokens = 0;           // tokens per prefill call
    std::int64_t decode_window = 0;            // window slots of a decode step
    std::size_t max_program_weight_bytes = 0;
    weight_compression compression = weight_compression::none;
    std::size_t embedding_bytes = 0;  // token (and GPT-2's position) embeddings, fp16: a gather on the CPU
    std::vector<decoder_plan_chunk> chunks;
    std::size_t weight_bytes = 0, compressed_bytes = 0, kv_cache_bytes = 0;  // over the chunks
    std::size_t programs_per_shape = 0;  // ANE programs one step shape compiles (over the chunks)
    // One generation within one rung compiles two step shapes (prefill, decode) and keeps them loaded;
    // climbing the whole ladder compiles two per rung.
    std::size_t programs = 0, ladder_programs = 0;
    long compile_budget = 0;  // compiles per process (compile_options::ane_compile_budget, else 119)
    std::size_t live_program_limit = ane_live_program_limit;
    bool fits_compile_budget = false;  // programs <= compile_budget
    bool fits_live_programs = false;   // programs <= live_program_limit
    std::vector<std::string> notes;    // what the plan cannot promise (dimension limits, ...)
};

// The plan for `c` run as causal_lm::load(..., options) would run it on the Neural Engine:
// options.max_context (0: causal_lm's default), the context ladder, prefill_chunk, decode_window (-1: 8, the
// Neural Engine's default), and from options.load.compile the weight limit, the compression and the compile
// budget.
[[nodiscard]] decoder_plan plan_decoder(const decoder_config& c, const causal_lm_options& options = {});

// The same from a model folder's config.json or a .gguf file's metadata (gguf_decoder_config), reading no
// weights: io_error when the folder has no config.json, unsupported_error when it is not a decoder LM.
[[nodiscard]] decoder_plan plan_decoder(const std::filesystem::path& model,
                                        const causal_lm_options& options = {});

namespace recipe_detail {

// The stages of a step graph (decoder_step: the embedding, each layer, the head) with the fp16 weights each
// reads on the Neural Engine, in the order its nodes read them, and their compressed bytes.
struct planned_stage {
    std::string label;
    stage_weights weights;
    std::size_t compressed_bytes = 0;
};
[[nodiscard]] std::vector<planned_stage> decoder_stages(const decoder_config& c,
                                                        std::size_t max_program_weight_bytes,
                                                        weight_compression compression);

}  // namespace recipe_detail

}  // namespace anvil::models

#if ANVIL_DEFINITIONS
#include "anvil/models/llm/decoder_plan-inl.hpp"
#endif
