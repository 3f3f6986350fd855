// anvil: causal_lm's definitions (see causal_lm.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/backend/ane/ane_program.hpp"
#include "anvil/backend/compile.hpp"
#include "anvil/core/error.hpp"
#include "anvil/io/checkpoint.hpp"
#include "anvil/models/common/lora_adapter.hpp"
#include "anvil/models/import/gguf_decoder.hpp"
#include "anvil/models/llm/causal_lm.hpp"

namespace anvil::models::recipe_detail {

ANVIL_INLINE host_tensor slice_slots(const host_tensor& t, std::int64_t begin, std::int64_t end) {
    const dims& s = t.shape();
    host_tensor out(dtype::f32, dims{s[0], s[1], end - begin, s[3]});
    const std::vector<float> from = t.type() == dtype::f32 ? std::vector<float>() : t.to_f32();
    const float* src = t.type() == dtype::f32 ? t.values<float>().data() : from.data();
    float* dst = out.values<float>().data();
    const auto d = static_cast<std::size_t>(s[3]);
    const auto rows = static_cast<std::size_t>(s[0] * s[1]);
    const auto n = static_cast<std::size_t>(end - begin);
    for (std::size_t r = 0; r < rows; ++r) {
        std::memcpy(dst + r * n * d,
                    src + (r * static_cast<std::size_t>(s[2]) + static_cast<std::size_t>(begin)) * d,
                    n * d * sizeof(float));
    }
    return out;
}

ANVIL_INLINE std::vector<std::int64_t> context_rungs(const decoder_config& c, const causal_lm_options& o,
                                                     std::int64_t first_rung) {
    std::int64_t max_context = o.max_context;
    if (max_context == 0) {
        // Dynamic NTK scaling exists to run past max_position_embeddings (the frequencies stretch with the
        // length), so only the 8192 cap applies to it.
        const std::int64_t trained =
            c.rope.scaling == rope_scaling_kind::dynamic ? std::int64_t{8192} : c.max_position_embeddings;
        max_context =
            o.context_ladder.empty() ? std::min<std::int64_t>(trained, 8192) : o.context_ladder.back();
    }
    if (max_context < 1)
        throw error(anvil::detail::message("causal_lm: max_context must be positive, got ", max_context));
    if (c.learned_positions() && max_context > c.max_position_embeddings) {
        throw error(anvil::detail::message("causal_lm: max_context ", max_context, " exceeds the ",
                                           c.max_position_embeddings, " positions ", c.model_type,
                                           " has embeddings for (n_positions)"));
    }
    std::vector<std::int64_t> rungs;
    if (o.context_ladder.empty()) {
        for (std::int64_t r = first_rung; r < max_context; r *= 2)
            rungs.push_back(r);
    } else {
        for (const std::int64_t r : o.context_ladder) {
            if (r < 1 || (!rungs.empty() && r <= rungs.back()) || r > max_context) {
                throw error(
                    anvil::detail::message("causal_lm: context_ladder must be increasing positive sizes up "
                                           "to max_context ",
                                           max_context, ", got ", r));
            }
            rungs.push_back(r);
        }
    }
    if (rungs.empty() || rungs.back() < max_context) rungs.push_back(max_context);
    return rungs;
}

}  // namespace anvil::models::recipe_detail

namespace anvil::models {

ANVIL_INLINE std::vector<value> causal_lm::build_stateful_graph(graph& g, std::int64_t tokens,
                                                                std::int64_t context) const {
    weight_loader loader(g, state_->source->file());
    const auto w = load_decoder_weights(loader, *state_->source, state_->config);
    return decoder_state_step(g, w, state_->config, tokens, context);
}

ANVIL_INLINE mlpackage_function causal_lm::export_function(std::string name, std::int64_t tokens,
                                                           std::int64_t context) const {
    mlpackage_function f;
    f.name = std::move(name);
    graph own;
    f.outputs = build_stateful_graph(own, tokens, context);
    f.output_names = {"logits"};
    for (std::int64_t i = 0; i < state_->config.layers; ++i) {  // outputs: logits, k0, v0, k1, v1, ...
        f.states.push_back({cache_key_name(i), static_cast<std::size_t>(1 + 2 * i)});
        f.states.push_back({cache_value_name(i), static_cast<std::size_t>(2 + 2 * i)});
    }
    return f;
}

ANVIL_INLINE causal_lm causal_lm::load(const std::filesystem::path& folder, const causal_lm_options& given) {
    causal_lm_options options = given;
    options.load = with_model_source(given.load, folder);
    causal_lm lm;
    auto state = std::make_shared<shared_state>();
    std::optional<gguf_vocabulary> file_vocabulary;
    if (is_gguf_path(folder)) {  // a llama.cpp file: its metadata as config.json, its tensors renamed
        if (!options.load.adapter.empty()) {
            throw unsupported_error(anvil::detail::message(
                folder.string(), ": a LoRA adapter applies to a safetensors model folder, not a GGUF file"));
        }
        gguf_decoder read = read_gguf_decoder(folder);
        file_vocabulary = std::move(read.vocabulary);
        state->config = decoder_config::from_json(read.config, folder.string() + " (metadata)");
        state->source = std::make_shared<const decoder_weight_source>(std::move(read.weights), state->config);
    } else {
        state->config = decoder_config::load(folder);
        state->source =
            std::make_shared<const decoder_weight_source>(open_weights(folder, options.load), state->config);
    }
    {  // every tensor is found and shape-checked now, not at the first call
        graph scratch;
        weight_loader loader(scratch, state->source->file());
        static_cast<void>(load_decoder_weights(loader, *state->source, state->config));
    }
    lm.state_ = state;
    lm.options_ = options;
    lm.gguf_ = is_gguf_path(folder);
    if (file_vocabulary) {  // the file's tokenizer.ggml.* as the tokenizer.json it stands for
        lm.tokenizer_ = std::make_shared<const tokenizer>(
            tokenizer::from_json(file_vocabulary->tokenizer_json, folder.string() + " (tokenizer.ggml.*)"));
        if (!file_vocabulary->chat_template.empty()) {
            lm.chat_ = make_chat_template(file_vocabulary->chat_template, file_vocabulary->bos_token,
                                          file_vocabulary->eos_token);
        }
    } else if (std::filesystem::exists(folder / "tokenizer.json") ||
               (std::filesystem::exists(folder / "vocab.json") &&
                std::filesystem::exists(folder / "merges.txt"))) {
        lm.tokenizer_ = std::make_shared<const tokenizer>(tokenizer::load(folder));
        lm.chat_ = read_chat_template(folder);
    }
    if (options.fp16_rescale) {
        const fp16_calibration& calibration = *options.fp16_rescale;
        if (!calibration.ids.empty() && !calibration.text.empty())
            throw error("causal_lm: fp16_rescale calibrates on ids or on a text, not both");
        const std::vector<std::int32_t> ids =
            calibration.text.empty() ? calibration.ids : lm.tokens().encode(calibration.text).ids;
        fp16_rescaled rescaled = calibrate_fp16_rescale(state->config, state->source, ids,
                                                        calibration.rescale, options.load.compile);
        state->source = std::move(rescaled.weights);  // before any program reads a weight
        lm.rescale_ = std::move(rescaled.report);
    }
    const device target = options.load.compile.target;
    const bool on_ane = target == device::ane || target == device::coreml ||
                        (target == device::automatic && anvil::detail::ane::available());
    lm.on_ane_ = on_ane;
    lm.rungs_ = recipe_detail::context_rungs(state->config, options, on_ane ? 512 : 64);
    if (options.decode_window < -1 || options.prefill_chunk < 1 || options.max_streams < 1) {
        throw error(anvil::detail::message("causal_lm: prefill_chunk (", options.prefill_chunk,
                                           ") and max_streams (", options.max_streams,
                                           ") must be positive and decode_window (", options.decode_window,
                                           ") -1 (automatic), 0 or positive"));
    }
    lm.window_ = options.decode_window >= 0 ? options.decode_window : (on_ane ? 8 : 0);
    compile_options compile = options.load.compile;
    for (std::int64_t i = 0; i < state->config.layers; ++i) {
        compile.resident_inputs.push_back(cache_key_name(i));
        compile.resident_inputs.push_back(cache_value_name(i));
    }
    const compiled_shapes::builder build = [state](graph& g,
                                                   std::span<const std::int64_t> key) -> std::vector<value> {
        weight_loader loader(g, state->source->file());
        const auto w = load_decoder_weights(loader, *state->source, state->config);
        return decoder_step(g, w, state->config, {key[0], key[1], key[2], key[3] != 0, key[4]});
    };
    lm.programs_ = std::make_unique<compiled_shapes>(compile, build);
    if (lm.window_ > 0) {  // decode programs: their window inputs are resident too
        for (std::int64_t i = 0; i < state->config.layers; ++i) {
            compile.resident_inputs.push_back(window_key_name(i));
            compile.resident_inputs.push_back(window_value_name(i));
        }
        lm.windowed_ = std::make_unique<compiled_shapes>(compile, build);
    }
    for (const std::int32_t id : state->config.eos_token_ids)
        lm.eos_.push_back(id);
    return lm;
}

ANVIL_INLINE const tokenizer& causal_lm::tokens() const {
    if (!tokenizer_ && gguf_)
        throw io_error("causal_lm: the GGUF file has no tokenizer (no tokenizer.ggml.model): give token ids");
    if (!tokenizer_)
        throw io_error(
            "causal_lm: the model folder has no tokenizer (tokenizer.json or vocab.json + merges.txt)");
    return *tokenizer_;
}

ANVIL_INLINE std::size_t causal_lm::compiled_programs() const {
    return programs_->count() + (windowed_ ? windowed_->count() : 0);
}

ANVIL_INLINE host_tensor causal_lm::logits(std::span<const std::int32_t> ids) {
    check_prompt(ids);
    const auto n = static_cast<std::int64_t>(ids.size());
    const std::int64_t vocab = config().vocab_size;
    host_tensor out(dtype::f32, dims{n, vocab});
    prefill(ids, false, [&](std::int64_t start, std::int64_t count, const host_tensor& logits) {
        const std::vector<float> values = logits.to_f32();
        std::copy_n(values.begin(), count * vocab, out.values<float>().begin() + start * vocab);
    });
    return out;
}

ANVIL_INLINE generation_result causal_lm::generate(std::span<const std::int32_t> prompt,
                                                   const generation_options& options,
                                                   const token_callback& callback) {
    const std::vector<std::vector<std::int32_t>> prompts{
        std::vector<std::int32_t>(prompt.begin(), prompt.end())};
    return generate_batch(prompts, options, callback).front();
}

ANVIL_INLINE generation_result causal_lm::generate(std::string_view prompt_text,
                                                   const generation_options& options,
                                                   const token_callback& callback) {
    const auto encoded = tokens().encode(prompt_text);
    return generate(std::span<const std::int32_t>(encoded.ids), options, callback);
}

ANVIL_INLINE generation_result causal_lm::generate(const chat_prompt& prompt,
                                                   const generation_options& options,
                                                   const token_callback& callback) {
    return generate(std::span<const std::int32_t>(chat_ids(prompt)), options, callback);
}

ANVIL_INLINE generation_result causal_lm::generate(const chat_prompt& prompt,
                                                   const generation_options& options,
                                                   const std::function<void(std::string_view)>& on_text) {
    return generate(prompt, options, [&](std::size_t, std::int32_t, std::string_view piece) {
        on_text(piece);
        return true;
    });
}

ANVIL_INLINE std::vector<std::int32_t> causal_lm::chat_ids(const chat_prompt& prompt) const {
    anvil::encode_options no_specials;
    no_specials.add_special_tokens = false;
    return tokens().encode(prompt.text, no_specials).ids;
}

ANVIL_INLINE std::vector<generation_result> causal_lm::generate_batch(
    std::span<const std::vector<std::int32_t>> prompts, const generation_options& options,
    const token_callback& callback) {
    for (const auto& p : prompts)
        check_prompt(p);
    if (options.max_new_tokens < 0)
        throw error(
            anvil::detail::message("generate: max_new_tokens must be >= 0, got ", options.max_new_tokens));
    recipe_detail::validate_sampling_options(options.sampling);
    std::vector<generation_result> results(prompts.size());
    const auto group = static_cast<std::size_t>(options_.max_streams);
    for (std::size_t first = 0; first < prompts.size(); first += group) {
        const std::size_t count = std::min(group, prompts.size() - first);
        generate_group(prompts.subspan(first, count), first, options, callback,
                       std::span<generation_result>(results).subspan(first, count));
    }
    return results;
}

ANVIL_INLINE chat_prompt causal_lm::chat(std::initializer_list<chat_message> messages,
                                         bool add_generation_prompt) const {
    return chat(std::span<const chat_message>(messages.begin(), messages.size()), add_generation_prompt);
}

ANVIL_INLINE chat_prompt causal_lm::chat(std::span<const chat_message> messages,
                                         bool add_generation_prompt) const {
    if (!chat_ && gguf_)
        throw unsupported_error("causal_lm: the GGUF file has no chat template (tokenizer.chat_template)");
    if (!chat_)
        throw unsupported_error("causal_lm: the model folder has no chat template (tokenizer_config.json)");
    return {render_chat(*chat_, messages, add_generation_prompt)};
}

ANVIL_INLINE void causal_lm::check_prompt(std::span<const std::int32_t> ids) const {
    if (ids.empty()) throw error("causal_lm: the prompt is empty (at least one token id is needed)");
    if (static_cast<std::int64_t>(ids.size()) > max_context()) {
        throw error(anvil::detail::message("causal_lm: the prompt has ", ids.size(),
                                           " tokens, more than max_context ", max_context()));
    }
    for (const std::int32_t id : ids) {
        if (id < 0 || id >= config().vocab_size) {
            throw error(anvil::detail::message("causal_lm: token id ", id, " is outside the vocabulary (",
                                               config().vocab_size, " ids)"));
        }
    }
}

ANVIL_INLINE std::int64_t causal_lm::rung_for(std::int64_t tokens) const {
    for (const std::int64_t r : rungs_)
        if (r >= tokens) return r;
    return -1;
}

ANVIL_INLINE program& causal_lm::step_program(std::int64_t batch, std::int64_t tokens, std::int64_t context,
                                              bool select, std::int64_t window) {
    return (window > 0 ? *windowed_ : *programs_).at({batch, tokens, context, select ? 1 : 0, window});
}

ANVIL_INLINE void causal_lm::keep_in_window(program& p, const std::vector<host_tensor>& outputs,
                                            std::vector<host_tensor>& pending, std::int64_t fill) const {
    for (std::size_t k = 0; k < pending.size(); ++k) {
        const host_tensor& out = outputs.at(1 + k);
        const std::vector<float> values = out.to_f32();
        const dims& shape = pending[k].shape();
        const auto d = static_cast<std::size_t>(shape[3]);
        const auto rows = static_cast<std::size_t>(shape[0] * shape[1]);
        const auto w = static_cast<std::size_t>(shape[2]);
        float* to = pending[k].values<float>().data();
        for (std::size_t r = 0; r < rows; ++r)
            std::memcpy(to + (r * w + static_cast<std::size_t>(fill)) * d, values.data() + r * d,
                        d * sizeof(float));
        if (fill + 1 < shape[2]) {
            const auto layer = static_cast<std::int64_t>(k / 2);
            p.write_input(k % 2 == 0 ? window_key_name(layer) : window_value_name(layer), 2, fill, out);
        }
    }
}

ANVIL_INLINE void causal_lm::write_new(program& p, const std::vector<host_tensor>& outputs,
                                       std::int64_t count, std::int64_t slot) const {
    for (std::int64_t i = 0; i < config().layers; ++i) {
        const auto k = static_cast<std::size_t>(1 + 2 * i);
        p.write_input(cache_key_name(i), 2, slot, recipe_detail::slice_slots(outputs[k], 0, count));
        p.write_input(cache_value_name(i), 2, slot, recipe_detail::slice_slots(outputs[k + 1], 0, count));
    }
}

ANVIL_INLINE program& causal_lm::prefill(
    std::span<const std::int32_t> ids, bool select,
    const std::function<void(std::int64_t, std::int64_t, const host_tensor&)>& consume) {
    const auto n = static_cast<std::int64_t>(ids.size());
    const std::int64_t context = rung_for(n);
    // On the CPU a short prompt gets a chunk of its own size (a power of two from 16), not a full
    // prefill_chunk of padding; on the Neural Engine every chunk size would be one more compile.
    const std::int64_t fitted =
        on_ane_ ? options_.prefill_chunk
                : std::max<std::int64_t>(
                      16, static_cast<std::int64_t>(std::bit_ceil(static_cast<std::uint64_t>(n))));
    const std::int64_t chunk = std::min({options_.prefill_chunk, context, fitted});
    program& p = step_program(1, chunk, context, select);
    std::vector<std::int64_t> cache_positions(static_cast<std::size_t>(context), -1);
    for (std::int64_t start = 0; start < n; start += chunk) {
        const std::int64_t count = std::min(chunk, n - start);
        std::vector<std::int32_t> chunk_ids(static_cast<std::size_t>(chunk), 0);
        std::vector<std::int64_t> positions(static_cast<std::size_t>(chunk), -1);
        for (std::int64_t i = 0; i < count; ++i) {
            chunk_ids[static_cast<std::size_t>(i)] = ids[static_cast<std::size_t>(start + i)];
            positions[static_cast<std::size_t>(i)] = start + i;
        }
        const std::vector<std::int64_t> last{count - 1};
        const auto inputs = decoder_step_inputs(
            config(), chunk_ids, positions, cache_positions, 1, chunk, context,
            select ? std::span<const std::int64_t>(last) : std::span<const std::int64_t>());
        const auto outputs = p.run(inputs);
        write_new(p, outputs, count, start);
        for (std::int64_t i = 0; i < count; ++i)
            cache_positions[static_cast<std::size_t>(start + i)] = start + i;
        consume(start, count, outputs.at(0));
    }
    return p;
}

ANVIL_INLINE void causal_lm::take_token(stream_state& s, std::size_t index, std::span<const float> row,
                                        const generation_options& options, const token_callback& callback,
                                        generation_result& result) {
    if (observe_logits_) observe_logits_(index, row);
    const std::int32_t token = s.pick->next(row, s.seen);
    const bool eos = options.stop_at_eos && std::find(eos_.begin(), eos_.end(), token) != eos_.end();
    const bool stop =
        std::find(options.stop_tokens.begin(), options.stop_tokens.end(), token) != options.stop_tokens.end();
    if (eos || stop) {
        result.stop_reason = eos ? "eos" : "stop_token";
        s.active = false;
        return;
    }
    s.seen.push_back(token);
    result.tokens.push_back(token);
    std::string piece = s.text ? s.text->push(token) : std::string();
    if (callback && !callback(index, token, piece)) {
        result.stop_reason = "callback";
        s.active = false;
        return;
    }
    if (static_cast<std::int64_t>(result.tokens.size()) >= options.max_new_tokens) {
        result.stop_reason = "max_new_tokens";
        s.active = false;
    }
}

ANVIL_INLINE void causal_lm::generate_group(std::span<const std::vector<std::int32_t>> prompts,
                                            std::size_t first, const generation_options& options,
                                            const token_callback& callback,
                                            std::span<generation_result> results) {
    const auto batch = static_cast<std::int64_t>(prompts.size());
    const decoder_config& c = config();
    std::vector<stream_state> streams(prompts.size());
    std::int64_t longest = 0;
    for (const auto& p : prompts)
        longest = std::max(longest, static_cast<std::int64_t>(p.size()));
    // The decode program: the smallest rung with room for the longest prompt plus one token.
    std::int64_t context = rung_for(longest + 1);
    program* decode = nullptr;
    const std::int64_t vocab = c.vocab_size;
    for (std::size_t b = 0; b < prompts.size(); ++b) {
        stream_state& s = streams[b];
        generation_result& r = results[b];
        s.seen = prompts[b];
        s.prompt = static_cast<std::int64_t>(prompts[b].size());
        s.offset = longest - s.prompt;
        sampling_options so = options.sampling;
        so.seed += first + b;
        s.pick.emplace(so);
        if (tokenizer_) s.text.emplace(*tokenizer_);
        r.stats.prompt_tokens = s.prompt;
        if (options.max_new_tokens == 0) {
            r.stop_reason = "max_new_tokens";
            s.active = false;
            continue;
        }
        const auto start = clock::now();
        std::vector<float> last;
        program& p = prefill(prompts[b], true, [&](std::int64_t, std::int64_t, const host_tensor& logits) {
            last = logits.to_f32();
        });
        r.stats.time_to_first_token_s = std::chrono::duration<double>(clock::now() - start).count();
        r.stats.prefill_tokens_per_s =
            static_cast<double>(s.prompt) / std::max(r.stats.time_to_first_token_s, 1e-9);
        take_token(s, first + b, std::span<const float>(last).first(static_cast<std::size_t>(vocab)), options,
                   callback, r);
        if (!s.active) continue;
        if (context < 0) {  // the longest prompt fills the largest context
            r.stop_reason = "context_full";
            s.active = false;
            continue;
        }
        // The stream's cache, right-aligned, into its row of the decode program (once per stream).
        if (decode == nullptr) decode = &step_program(batch, 1, context, true, window_);
        for (std::int64_t i = 0; i < c.layers; ++i) {
            for (const std::string& name : {cache_key_name(i), cache_value_name(i)}) {
                const host_tensor cached = p.read_input(name);
                const dims& from = cached.shape();
                host_tensor row(dtype::f32, dims{1, from[1], context, from[3]});
                const auto d = static_cast<std::size_t>(from[3]);
                for (std::int64_t h = 0; h < from[1]; ++h) {
                    std::memcpy(
                        row.values<float>().data() + static_cast<std::size_t>(h * context + s.offset) * d,
                        cached.values<float>().data() + static_cast<std::size_t>(h * from[2]) * d,
                        static_cast<std::size_t>(s.prompt) * d * sizeof(float));
                }
                decode->write_input(name, 0, static_cast<std::int64_t>(b), row);
            }
        }
        s.decode_start = clock::now();
    }
    // Decode: every active stream feeds its last token; all streams write at the shared slot
    // cursor + fill (`fill` tokens wait in the window, with their host copy in `pending`: k0, v0, k1,
    // ...).
    std::int64_t cursor = longest;
    const std::int64_t w = window_;
    std::int64_t fill = 0;
    std::vector<host_tensor> pending;
    if (w > 0) {
        for (std::int64_t i = 0; i < 2 * c.layers; ++i)
            pending.emplace_back(dtype::f32, dims{batch, c.kv_heads, w, c.head_dim});
    }
    // The window's tokens into the cache: one write per tensor.
    auto flush = [&] {
        if (fill == 0) return;
        for (std::int64_t i = 0; i < c.layers; ++i) {
            const auto k = static_cast<std::size_t>(2 * i);
            decode->write_input(cache_key_name(i), 2, cursor,
                                fill == w ? pending[k] : recipe_detail::slice_slots(pending[k], 0, fill));
            decode->write_input(
                cache_value_name(i), 2, cursor,
                fill == w ? pending[k + 1] : recipe_detail::slice_slots(pending[k + 1], 0, fill));
        }
        cursor += fill;
        fill = 0;
    };
    while (std::any_of(streams.begin(), streams.end(), [](const stream_state& s) { return s.active; })) {
        if (cursor + fill + 1 > context) {
            const std::int64_t next = rung_for(cursor + fill + 1);
            if (next < 0) {
                for (std::size_t b = 0; b < streams.size(); ++b) {
                    if (!streams[b].active) continue;
                    streams[b].active = false;
                    results[b].stop_reason = "context_full";
                }
                break;
            }
            flush();
            program& bigger = step_program(batch, 1, next, true, w);
            for (std::int64_t i = 0; i < c.layers; ++i) {
                for (const std::string& name : {cache_key_name(i), cache_value_name(i)})
                    bigger.write_input(name, 2, 0, decode->read_input(name));
            }
            decode = &bigger;
            context = next;
        }
        const std::int64_t slots = context + w;  // the mask's cache and window columns
        std::vector<std::int32_t> ids(static_cast<std::size_t>(batch), 0);
        std::vector<std::int64_t> positions(static_cast<std::size_t>(batch), -1);
        std::vector<std::int64_t> cache_positions(static_cast<std::size_t>(batch * slots), -1);
        const std::vector<std::int64_t> select(static_cast<std::size_t>(batch), 0);
        for (std::int64_t b = 0; b < batch; ++b) {
            const stream_state& s = streams[static_cast<std::size_t>(b)];
            if (!s.active) continue;
            const auto known = static_cast<std::int64_t>(s.seen.size()) - 1;  // tokens in cache + window
            ids[static_cast<std::size_t>(b)] = s.seen.back();
            positions[static_cast<std::size_t>(b)] = known;
            for (std::int64_t j = s.offset; j < cursor; ++j)
                cache_positions[static_cast<std::size_t>(b * slots + j)] = j - s.offset;
            for (std::int64_t j = 0; j < fill; ++j)
                cache_positions[static_cast<std::size_t>(b * slots + context + j)] = cursor + j - s.offset;
        }
        const auto inputs = decoder_step_inputs(c, ids, positions, cache_positions, batch, 1, slots, select);
        const auto outputs = decode->run(inputs);
        if (w == 0) {
            write_new(*decode, outputs, 1, cursor);
            ++cursor;
        } else {
            keep_in_window(*decode, outputs, pending, fill);
            if (++fill == w) flush();
        }
        // Read in place when f32 (the CPU's logits): a copy of [B, V] each step cost 3% of decoding.
        const host_tensor& logits_tensor = outputs.at(0);
        const std::vector<float> converted =
            logits_tensor.type() == dtype::f32 ? std::vector<float>() : logits_tensor.to_f32();
        const std::span<const float> logits = logits_tensor.type() == dtype::f32
                                                  ? logits_tensor.values<float>()
                                                  : std::span<const float>(converted);
        for (std::size_t b = 0; b < streams.size(); ++b) {
            stream_state& s = streams[b];
            if (!s.active) continue;
            const auto row =
                logits.subspan(b * static_cast<std::size_t>(vocab), static_cast<std::size_t>(vocab));
            take_token(s, first + b, row, options, callback, results[b]);
        }
    }
    for (std::size_t b = 0; b < streams.size(); ++b) {
        generation_result& r = results[b];
        r.stats.generated_tokens = static_cast<std::int64_t>(r.tokens.size());
        if (r.tokens.size() > 1) {
            const double seconds =
                std::chrono::duration<double>(clock::now() - streams[b].decode_start).count();
            r.stats.decode_tokens_per_s = static_cast<double>(r.tokens.size() - 1) / std::max(seconds, 1e-9);
        }
        if (tokenizer_) r.text = tokenizer_->decode(r.tokens);
    }
}

}  // namespace anvil::models

namespace anvil::models::recipe_detail {

ANVIL_INLINE void causal_lm_access::observe_logits(
    causal_lm& lm, std::function<void(std::size_t, std::span<const float>)> f) {
    lm.observe_logits_ = std::move(f);
}

}  // namespace anvil::models::recipe_detail
