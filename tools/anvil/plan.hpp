// `anvil bench --plan`: how a decoder LM would run on the Neural Engine, from its config.json or a GGUF
// file's metadata alone (models/llm/decoder_plan.hpp) — the chunks of whole layers its weights split into,
// each chunk's weights and KV cache, the programs a generation compiles, and whether they fit the compile
// budget and the live-program limit. Nothing is loaded, so a 7B model is planned on any machine in
// milliseconds.
#pragma once

#include "arguments.hpp"
#include "lm_commands.hpp"
#include "model_commands.hpp"

#include <anvil/models/llm/decoder_plan.hpp>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

namespace anvil::cli {

namespace detail_plan {

// "268435456", "512K", "256M", "1G" (binary multiples) -> bytes; usage_error for anything else.
inline std::size_t parse_size(const std::string& text, std::string_view option, std::string_view command) {
    const auto bad = [&] {
        return usage_error(detail::message(command, ": --", option,
                                           " must be a positive size in bytes, optionally with K, M or G "
                                           "(binary multiples), got '",
                                           text, "'"));
    };
    char* end = nullptr;
    errno = 0;
    const unsigned long long number = std::strtoull(text.c_str(), &end, 10);
    if (text.empty() || end == text.c_str() || errno != 0 || number == 0 || text.front() == '-') throw bad();
    const std::string_view unit(end);
    int shift = 0;
    if (unit == "K" || unit == "KiB") {
        shift = 10;
    } else if (unit == "M" || unit == "MiB") {
        shift = 20;
    } else if (unit == "G" || unit == "GiB") {
        shift = 30;
    } else if (!unit.empty()) {
        throw bad();
    }
    if (number > (~0ull >> shift)) throw bad();
    return static_cast<std::size_t>(number << shift);
}

// "386.0 MiB", "1.2 GiB", "15.1 KiB", "96 B": the unit that keeps a table readable for models of any size.
inline std::string sized(std::size_t bytes) {
    char text[32];
    const auto value = static_cast<double>(bytes);
    if (bytes >= (std::size_t{10} << 30)) {
        std::snprintf(text, sizeof text, "%.1f GiB", value / 1073741824.0);
    } else if (bytes >= (std::size_t{1} << 20)) {
        std::snprintf(text, sizeof text, "%.1f MiB", value / 1048576.0);
    } else if (bytes >= (std::size_t{1} << 10)) {
        std::snprintf(text, sizeof text, "%.1f KiB", value / 1024.0);
    } else {
        std::snprintf(text, sizeof text, "%zu B", bytes);
    }
    return text;
}

inline json::value to_json(const models::decoder_plan& plan) {
    const models::decoder_config& c = plan.config;
    json::object out;
    out["source"] = plan.source;
    out["model_type"] = c.model_type;
    out["layers"] = c.layers;
    out["hidden"] = c.hidden;
    out["heads"] = c.heads;
    out["kv_heads"] = c.kv_heads;
    out["head_dim"] = c.head_dim;
    out["intermediate"] = c.intermediate;
    out["vocab_size"] = c.vocab_size;
    out["context"] = plan.context;
    json::array ladder;
    for (const std::int64_t rung : plan.context_ladder)
        ladder.emplace_back(rung);
    out["context_ladder"] = json::value(std::move(ladder));
    out["prefill_tokens"] = plan.prefill_tokens;
    out["decode_window"] = plan.decode_window;
    out["max_program_weight_bytes"] = static_cast<std::int64_t>(plan.max_program_weight_bytes);
    out["compression"] = std::string(weight_compression_name(plan.compression));
    out["embedding_bytes"] = static_cast<std::int64_t>(plan.embedding_bytes);
    json::array chunks;
    for (const models::decoder_plan_chunk& chunk : plan.chunks) {
        json::object item;
        item["stages"] = chunk.stages;
        item["first_layer"] = chunk.first_layer;
        item["layers"] = chunk.layers;
        item["head"] = json::value(chunk.head);
        item["weight_bytes"] = static_cast<std::int64_t>(chunk.weight_bytes);
        item["compressed_bytes"] = static_cast<std::int64_t>(chunk.compressed_bytes);
        item["kv_cache_bytes"] = static_cast<std::int64_t>(chunk.kv_cache_bytes);
        item["programs"] = static_cast<std::int64_t>(chunk.programs);
        chunks.emplace_back(std::move(item));
    }
    out["chunks"] = json::value(std::move(chunks));
    out["weight_bytes"] = static_cast<std::int64_t>(plan.weight_bytes);
    out["compressed_bytes"] = static_cast<std::int64_t>(plan.compressed_bytes);
    out["kv_cache_bytes"] = static_cast<std::int64_t>(plan.kv_cache_bytes);
    out["programs_per_shape"] = static_cast<std::int64_t>(plan.programs_per_shape);
    out["programs"] = static_cast<std::int64_t>(plan.programs);
    out["ladder_programs"] = static_cast<std::int64_t>(plan.ladder_programs);
    out["compile_budget"] = static_cast<std::int64_t>(plan.compile_budget);
    out["fits_compile_budget"] = json::value(plan.fits_compile_budget);
    out["live_program_limit"] = static_cast<std::int64_t>(plan.live_program_limit);
    out["fits_live_programs"] = json::value(plan.fits_live_programs);
    json::array notes;
    for (const std::string& note : plan.notes)
        notes.emplace_back(note);
    out["notes"] = json::value(std::move(notes));
    return json::value(std::move(out));
}

inline void print(const models::decoder_plan& plan) {
    const models::decoder_config& c = plan.config;
    std::printf(
        "%s: %s, %lld layers, hidden %lld, %lld heads (%lld KV) of %lld, intermediate %lld, vocabulary "
        "%lld\n",
        plan.source.c_str(), c.model_type.c_str(), static_cast<long long>(c.layers),
        static_cast<long long>(c.hidden), static_cast<long long>(c.heads), static_cast<long long>(c.kv_heads),
        static_cast<long long>(c.head_dim), static_cast<long long>(c.intermediate),
        static_cast<long long>(c.vocab_size));
    std::string ladder;
    for (const std::int64_t rung : plan.context_ladder)
        ladder += detail::message(ladder.empty() ? "" : ", ", rung);
    std::printf(
        "Neural Engine: at most %zu weight bytes (%s) per program; context %lld (ladder %s); prefill %lld "
        "tokens per call, decode window %lld\n",
        plan.max_program_weight_bytes, sized(plan.max_program_weight_bytes).c_str(),
        static_cast<long long>(plan.context), ladder.c_str(), static_cast<long long>(plan.prefill_tokens),
        static_cast<long long>(plan.decode_window));
    std::printf("embedding: %s (fp16), a gather on the CPU\n\n", sized(plan.embedding_bytes).c_str());
    // Columns: chunk, stages, layers, weights (fp16), [compressed,] KV cache, programs.
    const bool compressed = plan.compression != weight_compression::none;
    const auto row = [&](const std::string& chunk, const std::string& stages, const std::string& layers,
                         const std::string& weights, const std::string& stored, const std::string& cache,
                         const std::string& programs) {
        std::printf("%5s  %-24s %6s  %14s", chunk.c_str(), stages.c_str(), layers.c_str(), weights.c_str());
        if (compressed) std::printf("  %14s", stored.c_str());
        std::printf("  %14s  %8s\n", cache.c_str(), programs.c_str());
    };
    row("chunk", "stages", "layers", "weights (fp16)",
        detail::message(weight_compression_name(plan.compression), " (Core ML)"), "KV cache", "programs");
    for (std::size_t i = 0; i < plan.chunks.size(); ++i) {
        const models::decoder_plan_chunk& chunk = plan.chunks[i];
        row(std::to_string(i), chunk.stages, std::to_string(chunk.layers), sized(chunk.weight_bytes),
            sized(chunk.compressed_bytes), sized(chunk.kv_cache_bytes), std::to_string(chunk.programs));
    }
    row("total", "", std::to_string(c.layers), sized(plan.weight_bytes), sized(plan.compressed_bytes),
        sized(plan.kv_cache_bytes), std::to_string(plan.programs_per_shape));
    std::printf(
        "\nprograms: %zu per step shape; %zu for prefill and decode at context %lld (%zu over the %zu "
        "rungs of the ladder)\n",
        plan.programs_per_shape, plan.programs, static_cast<long long>(plan.context), plan.ladder_programs,
        plan.context_ladder.size());
    std::printf("compile budget: %zu programs of %ld per process: %s\n", plan.programs, plan.compile_budget,
                plan.fits_compile_budget ? "fits" : "exceeded");
    std::printf("loaded at once: %zu programs of the ~%zu a device may keep: %s\n", plan.programs,
                plan.live_program_limit, plan.fits_live_programs ? "fits" : "exceeded");
    std::printf("KV caches: %s per step shape (fp16, one stream at context %lld)\n",
                sized(plan.kv_cache_bytes).c_str(), static_cast<long long>(plan.context));
    for (const std::string& note : plan.notes)
        std::printf("note: %s\n", note.c_str());
}

}  // namespace detail_plan

// bench --plan: `args` were read by run_bench, which accepts the options of both modes.
inline int run_plan(const arguments& args) {
    for (const std::string_view timing_only :
         {"task", "batch", "runs", "prompt-tokens", "new-tokens", "backend", "strict-device"}) {
        if (args.flag(timing_only) || args.value(timing_only)) {
            throw usage_error(
                detail::message("bench: --plan takes --model, --context, --compress, "
                                "--max-program-weights and --json; --",
                                timing_only, " is for timing runs"));
        }
    }
    const std::string model = model_folder(args, "bench --plan");
    if (!args.positional().empty())
        throw usage_error(detail::message("bench: unexpected argument '", args.positional().front(), "'"));
    models::causal_lm_options options;
    options.max_context = detail_lm::parse_integer(args, "context", 0, 1, "bench --plan");
    if (const auto size = args.value("max-program-weights"))
        options.load.compile.ane_max_program_weight_bytes =
            detail_plan::parse_size(*size, "max-program-weights", "bench --plan");
    if (const auto text = args.value("compress")) {
        const auto parsed = parse_weight_compression(*text);
        if (!parsed || *parsed == weight_compression::none) {
            throw usage_error(detail::message(
                "bench --plan: --compress must be int8, lut4, lut4g32 or lut6, got '", *text, "'"));
        }
        options.load.compile.weight_compression = *parsed;
    }
    models::decoder_plan plan;
    try {
        plan = models::plan_decoder(model, options);
    } catch (const error& e) {
        throw error(detail::message("bench --plan: ", e.what()));
    }
    if (args.flag("json")) {
        std::printf("%s\n", json::dump(detail_plan::to_json(plan), 2).c_str());
    } else {
        detail_plan::print(plan);
    }
    return 0;
}

}  // namespace anvil::cli
