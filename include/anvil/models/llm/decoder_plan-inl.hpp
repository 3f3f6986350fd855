// anvil: decoder_plan's definitions (see decoder_plan.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "anvil/backend/ane/program_cache.hpp"
#include "anvil/backend/ane/support.hpp"
#include "anvil/backend/ane/tiling.hpp"
#include "anvil/core/error.hpp"
#include "anvil/io/gguf.hpp"
#include "anvil/models/import/gguf_decoder.hpp"
#include "anvil/models/llm/decoder_plan.hpp"

namespace anvil::models::recipe_detail {

ANVIL_INLINE std::vector<planned_stage> decoder_stages(const decoder_config& c,
                                                       std::size_t max_program_weight_bytes,
                                                       weight_compression compression) {
    const std::int64_t max_dimension = anvil::detail::ane::lowering_options{}.max_dimension;
    std::vector<planned_stage> stages;
    const auto begin = [&](std::string label) { stages.push_back({std::move(label), {}, 0}); };
    // One node reading `bytes` of weights (fp16), `compressed` as a Core ML program stores them.
    const auto read = [&](std::size_t bytes, std::size_t compressed) {
        planned_stage& stage = stages.back();
        stage.weights.bytes += bytes;
        stage.weights.pieces.push_back(bytes);
        stage.compressed_bytes += compressed;
    };
    // A norm's weight (and bias): one node reads both.
    const auto norm = [&](std::int64_t size, bool bias) {
        const auto bytes = static_cast<std::size_t>(2 * size * (bias ? 2 : 1));
        read(bytes, bytes);
    };
    // A linear [out, in] (+ bias [out]), in the row tiles the backend cuts it into (tile_wide_linears), one
    // node each; `compressible`: compress_weights compresses its weight (not a head tied to the embeddings).
    const auto linear = [&](std::int64_t out, std::int64_t in, bool bias, bool compressible) {
        const std::int64_t tiles = anvil::detail::ane::linear_tiles(
            out, static_cast<std::size_t>(2 * out * in), max_dimension, max_program_weight_bytes);
        const std::int64_t per_tile = (out + tiles - 1) / tiles;
        for (std::int64_t first = 0; first < out; first += per_tile) {
            const std::int64_t rows = std::min(per_tile, out - first);
            const auto weight = static_cast<std::size_t>(2 * rows * in);
            const auto bias_bytes = static_cast<std::size_t>(bias ? 2 * rows : 0);
            const std::size_t stored = compressible ? compressed_weight_bytes(rows, in, compression) : weight;
            read(weight + bias_bytes, stored + bias_bytes);
        }
    };
    const bool gpt2 = c.learned_positions();
    const std::int64_t h = c.hidden, i = c.intermediate, q = c.heads * c.head_dim,
                       kv = c.kv_heads * c.head_dim;
    begin(std::string(embedding_stage_label));  // gathers: the host's work, no weights on the Neural Engine
    for (std::int64_t layer = 0; layer < c.layers; ++layer) {
        begin(layer_stage_label(layer));
        // In the order decoder_step's nodes read them (blocks.hpp: norm, q, k, v, q/k norms, output, norm,
        // MLP).
        norm(h, gpt2);
        linear(q, h, c.qkv_bias, true);
        linear(kv, h, c.qkv_bias, true);
        linear(kv, h, c.qkv_bias, true);
        if (c.qk_norm) {
            norm(c.head_dim, false);
            norm(c.head_dim, false);
        }
        linear(h, q, c.output_bias, true);
        norm(h, gpt2);
        if (!gpt2) linear(i, h, c.mlp_bias, true);  // gate
        linear(i, h, c.mlp_bias, true);             // up (GPT-2's c_fc)
        linear(h, i, c.mlp_bias, true);             // down (GPT-2's c_proj)
    }
    begin(std::string(head_stage_label));
    norm(h, gpt2);
    linear(c.vocab_size, h, false, !c.tie_word_embeddings);
    return stages;
}

}  // namespace anvil::models::recipe_detail

namespace anvil::models {

ANVIL_INLINE decoder_plan plan_decoder(const decoder_config& c, const causal_lm_options& options) {
    using anvil::detail::message;
    decoder_plan plan;
    plan.config = c;
    const compile_options& compile = options.load.compile;
    plan.context_ladder = recipe_detail::context_rungs(c, options, 512);  // the Neural Engine's ladder
    plan.context = plan.context_ladder.back();
    if (options.prefill_chunk < 1 || options.decode_window < -1) {
        throw error(message("plan: prefill_chunk (", options.prefill_chunk,
                            ") must be positive and decode_window (", options.decode_window,
                            ") -1 (automatic), 0 or positive"));
    }
    plan.prefill_tokens = std::min(options.prefill_chunk, plan.context);
    plan.decode_window = options.decode_window >= 0 ? options.decode_window : 8;
    plan.max_program_weight_bytes = compile.ane_max_program_weight_bytes;
    plan.compression = compile.weight_compression;
    plan.embedding_bytes = static_cast<std::size_t>(2 * c.vocab_size * c.hidden);
    if (c.learned_positions())
        plan.embedding_bytes += static_cast<std::size_t>(2 * c.max_position_embeddings * c.hidden);

    const std::vector<recipe_detail::planned_stage> stages =
        recipe_detail::decoder_stages(c, plan.max_program_weight_bytes, plan.compression);
    std::vector<stage_weights> weights;
    for (const auto& stage : stages)
        weights.push_back(stage.weights);
    const std::size_t head_stage = stages.size() - 1;
    const auto kv_per_layer = static_cast<std::size_t>(2 * 2 * c.kv_heads * c.head_dim * plan.context);
    for (const stage_chunk& chunk : chunk_stages(weights, plan.max_program_weight_bytes)) {
        decoder_plan_chunk out;
        // Named by the stages whose weights it holds, as the placement report names a program's.
        std::size_t first = chunk.last, last = chunk.first;
        for (std::size_t s = chunk.first; s <= chunk.last; ++s) {
            if (stages[s].weights.bytes == 0) continue;
            first = std::min(first, s);
            last = std::max(last, s);
            out.compressed_bytes += stages[s].compressed_bytes;
            if (s == head_stage) {
                out.head = true;
            } else if (s > 0) {
                if (out.layers == 0) out.first_layer = static_cast<std::int64_t>(s) - 1;
                ++out.layers;
            }
        }
        if (first > last) first = last = chunk.first;
        out.stages = stage_range(stages[first].label, stages[last].label);
        out.weight_bytes = chunk.weight_bytes;
        out.kv_cache_bytes = kv_per_layer * static_cast<std::size_t>(out.layers);
        out.programs = chunk.programs;
        plan.weight_bytes += out.weight_bytes;
        plan.compressed_bytes += out.compressed_bytes;
        plan.kv_cache_bytes += out.kv_cache_bytes;
        plan.programs_per_shape += out.programs;
        plan.chunks.push_back(std::move(out));
    }
    plan.programs = 2 * plan.programs_per_shape;
    plan.ladder_programs = plan.programs * plan.context_ladder.size();
    plan.compile_budget = anvil::detail::ane::compile_budget(compile.ane_compile_budget);
    plan.fits_compile_budget = static_cast<long>(plan.programs) <= plan.compile_budget;
    plan.fits_live_programs = plan.programs <= plan.live_program_limit;

    const std::int64_t max_dimension = anvil::detail::ane::lowering_options{}.max_dimension;
    const std::int64_t widest = std::max({c.hidden, c.intermediate, c.heads * c.head_dim});
    if (widest > max_dimension) {
        plan.notes.push_back(
            message("a layer has ", widest, " features, past the Neural Engine's ", max_dimension,
                    " per axis: the backend runs those ops on the CPU, and their weights are "
                    "counted here as if on the Neural Engine"));
    }
    if (c.vocab_size > max_dimension) {
        plan.notes.push_back(message("the LM head's ", c.vocab_size,
                                     " logits come from row tiles of at most ", max_dimension,
                                     "; their concat runs on the CPU"));
    }
    if (plan.context + plan.decode_window + plan.prefill_tokens > max_dimension) {
        plan.notes.push_back(message("attention over ", plan.context,
                                     " cache slots passes the Neural Engine's ", max_dimension,
                                     " per axis: those ops run on the CPU"));
    }
    if (plan.compression != weight_compression::none) {
        plan.notes.push_back(
            message("--compress ", weight_compression_name(plan.compression),
                    ": a Core ML program stores the compressed bytes; the private Neural Engine "
                    "path embeds fp16, and chunks by fp16 bytes either way"));
    }
    if (!plan.fits_compile_budget) {
        plan.notes.push_back(
            message(plan.programs, " programs pass the compile budget of ", plan.compile_budget,
                    " per process: later compiles may be refused (the program cache turns a "
                    "second run's compiles into loads); raise the weight limit per program"));
    }
    if (!plan.fits_live_programs) {
        plan.notes.push_back(
            message(plan.programs, " programs loaded at once pass the ~", plan.live_program_limit,
                    " some devices allow (RUNTIME.md §6; others ~55): past it each step unloads the least "
                    "recently used program and loads one again; raise the weight limit per program"));
    }
    return plan;
}

ANVIL_INLINE decoder_plan plan_decoder(const std::filesystem::path& model, const causal_lm_options& options) {
    using anvil::detail::message;
    decoder_config config;
    std::string source;
    if (is_gguf_path(model)) {
        if (!std::filesystem::exists(model)) throw io_error(message(model.string(), ": no such file"));
        // The file's metadata and tensor infos only: gguf_file maps the file and reads no tensor's bytes.
        // A head stored as a copy of the embeddings (GPT-2's converter) counts as untied here, which only
        // changes its compressed size.
        const gguf_file file = gguf_file::open(model);
        const bool tied = file.find_tensor("output.weight") == nullptr;
        source = model.string();
        config = decoder_config::from_json(gguf_decoder_config(file, tied), source + " (metadata)");
    } else {
        source = (model / "config.json").string();
        if (!std::filesystem::exists(model / "config.json")) {
            throw io_error(message(model.string(),
                                   ": no config.json (give a Hugging Face model folder or a .gguf file)"));
        }
        config = decoder_config::load(model);
    }
    decoder_plan plan = plan_decoder(config, options);
    plan.source = std::move(source);
    return plan;
}

}  // namespace anvil::models
