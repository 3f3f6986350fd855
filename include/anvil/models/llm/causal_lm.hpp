// anvil: running a decoder language model (decoder_lm.hpp) — prefill in chunks, decode in windows, up to
// max_streams streams batched per decode call, sampling (sampling.hpp), stop tokens, streaming text.
//
// The KV cache lives in the programs: each compiled step (one per {batch, new tokens, context, select,
// window}) binds its k<i>/v<i> inputs as resident (program::write_input), and after every call the runner
// writes only the new tokens' keys and values into it — never the whole cache. Contexts come in a ladder of
// sizes: a stream starts in the smallest program its tokens fit and moves up a rung (one read_input/
// write_input of the cache) when it would overflow, so short conversations run small programs.
//
// Decode windows: a decode step takes one new token per stream. With decode_window W > 0 each decode program
// also binds, per layer, a small resident window wk<i>/wv<i> [B, kv_heads, W, D] read after the cache
// (keys = cache, window, new). Each step's new keys and values go into the next free window slot, and once
// W tokens are there the runner flushes them into the cache with one write_input per tensor (from a host
// copy) and the window empties. Why: on the Neural Engine a resident input is an IOSurface the host must
// lock to write, and locking and unlocking a surface costs in proportion to its size (cache maintenance), so
// the per-token writes go to a small surface and the large cache is written once per W tokens. The mask
// gives window slots their real positions, exactly as cache slots, so the results are those of writing the
// cache directly. Prefill programs (many tokens per call) write the cache directly and have no window.
//
// Streams of a batch write their new tokens at one shared cache slot per step (a window slot is a cache
// slot not yet flushed): each stream's tokens sit right-aligned in its row (slot = position + offset), its
// positions go in through the RoPE tables (or GPT-2's position ids) and the mask hides the slots before its
// first token.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "anvil/backend/coreml/export.hpp"
#include "anvil/backend/program.hpp"
#include "anvil/compilation.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/io/token_stream.hpp"
#include "anvil/io/tokenizer.hpp"
#include "anvil/models/common/chat_template.hpp"
#include "anvil/models/common/compiled_shapes.hpp"
#include "anvil/models/common/sampling.hpp"
#include "anvil/models/llm/decoder_lm.hpp"
#include "anvil/models/llm/fp16_rescale.hpp"

namespace anvil::models {

// What causal_lm calibrates fp16 rescaling on (fp16_rescale.hpp): token ids, or a text encoded with the
// model's tokenizer (special tokens added as encode() adds them) — one of the two.
struct fp16_calibration {
    std::vector<std::int32_t> ids;
    std::string text;
    fp16_rescale_options rescale;
};

struct causal_lm_options {
    load_options load;  // device (automatic by default), compile options
    // 0: the ladder's last rung, else min(max_position_embeddings, 8192) (8192 with dynamic RoPE scaling)
    std::int64_t max_context = 0;
    // Empty: 512, 1024, ... up to max_context on the Neural Engine (64, 128, ... on the CPU).
    std::vector<std::int64_t> context_ladder;
    std::int64_t prefill_chunk = 256;  // tokens per prefill call
    // Window slots (tokens) per stream a decode step writes before one flush into the cache (see above);
    // 0: none, every step writes the cache; -1: 8 on the ANE, 0 on the CPU.
    std::int64_t decode_window = -1;
    std::int64_t max_streams = 8;  // streams batched in one decode call
    // Calibrate at load and fold per-layer powers of two into the weights so that fp16 activations (the
    // Neural Engine's, Core ML's, ane_numerics') stay in range; fp32 results are unchanged bit for bit.
    std::optional<fp16_calibration> fp16_rescale;
};

struct generation_options {
    std::int64_t max_new_tokens = 128;
    sampling_options sampling;              // greedy by default
    std::vector<std::int32_t> stop_tokens;  // added to the model's eos ids (generation_config.json / config)
    bool stop_at_eos = true;
};

struct generation_stats {
    std::int64_t prompt_tokens = 0, generated_tokens = 0;
    double time_to_first_token_s = 0, prefill_tokens_per_s = 0, decode_tokens_per_s = 0;
};

struct generation_result {
    std::vector<std::int32_t> tokens;  // the new tokens (stop token excluded)
    std::string text;                  // decoded (empty when the folder has no tokenizer)
    std::string stop_reason;           // "eos", "stop_token", "max_new_tokens", "context_full", "callback"
    generation_stats stats;
};

// Called for every new token of stream `stream` with the text that token completed; return false to stop
// that stream.
using token_callback = std::function<bool(std::size_t stream, std::int32_t token, std::string_view text)>;

class causal_lm;

namespace recipe_detail {

struct causal_lm_access;

// Slots [begin, end) of axis 2 of a [B, H, S, D] f32 tensor.
[[nodiscard]] host_tensor slice_slots(const host_tensor& t, std::int64_t begin, std::int64_t end);

// The context sizes a runner uses, ascending, the last the largest context.
// Without a ladder in the options the rungs double from `first_rung` (512 on the Neural Engine, where each
// program is a costly compile; 64 on the CPU, where attention over empty slots would cost more than a
// compile).
[[nodiscard]] std::vector<std::int64_t> context_rungs(const decoder_config& c, const causal_lm_options& o,
                                                      std::int64_t first_rung);

}  // namespace recipe_detail

class causal_lm {
public:
    // `folder`: a Hugging Face folder, or a llama.cpp .gguf file (gguf_decoder.hpp; its tokenizer and chat
    // template come from its metadata, io/gguf_tokenizer.hpp).
    [[nodiscard]] static causal_lm load(const std::filesystem::path& folder,
                                        const causal_lm_options& options = {});

    [[nodiscard]] const decoder_config& config() const noexcept { return state_->config; }
    [[nodiscard]] bool has_tokenizer() const noexcept { return tokenizer_ != nullptr; }
    [[nodiscard]] const tokenizer& tokens() const;
    [[nodiscard]] std::int64_t max_context() const noexcept { return rungs_.back(); }
    [[nodiscard]] const std::vector<std::int64_t>& context_ladder() const noexcept { return rungs_; }
    [[nodiscard]] std::int64_t decode_window() const noexcept { return window_; }
    [[nodiscard]] std::size_t compiled_programs() const;
    // The scales fp16 rescaling chose, and the overflow before and after (when the options asked for it).
    [[nodiscard]] const std::optional<fp16_rescale_report>& fp16_rescale() const noexcept { return rescale_; }

    // The graph an exported Core ML package runs (anvil export): decoder_state_step at `tokens` new tokens
    // and `context` cache slots, with this model's weights. Outputs: logits, then the updated k0, v0, ...
    // (the states' names are cache_key_name / cache_value_name).
    [[nodiscard]] std::vector<value> build_stateful_graph(graph& g, std::int64_t tokens,
                                                          std::int64_t context) const;

    // That graph as one function of a Core ML package (export_mlpackage): in a graph of its own, its first
    // output named `logits`, and each cache k<i>/v<i> a state written from its update. One binding for
    // `anvil export` and every caller that writes decoder packages.
    [[nodiscard]] mlpackage_function export_function(std::string name, std::int64_t tokens,
                                                     std::int64_t context) const;

    // The logits [S, V] (f32) at every position of `ids`, computed by chunked prefill.
    [[nodiscard]] host_tensor logits(std::span<const std::int32_t> ids);

    generation_result generate(std::span<const std::int32_t> prompt, const generation_options& options = {},
                               const token_callback& callback = {});

    generation_result generate(std::string_view prompt_text, const generation_options& options = {},
                               const token_callback& callback = {});

    // A conversation from chat(): encoded without adding special tokens (the template wrote them).
    generation_result generate(const chat_prompt& prompt, const generation_options& options = {},
                               const token_callback& callback = {});

    // The same, streaming each piece of text (whole UTF-8 characters) to `on_text`.
    generation_result generate(const chat_prompt& prompt, const generation_options& options,
                               const std::function<void(std::string_view)>& on_text);

    // The ids of a rendered conversation, as Hugging Face's apply_chat_template(tokenize=True) gives them.
    [[nodiscard]] std::vector<std::int32_t> chat_ids(const chat_prompt& prompt) const;

    // Each prompt prefilled on its own, then up to max_streams decoded together, one batched call per step.
    std::vector<generation_result> generate_batch(std::span<const std::vector<std::int32_t>> prompts,
                                                  const generation_options& options = {},
                                                  const token_callback& callback = {});

    // The conversation rendered with the folder's chat template (tokenizer_config.json).
    [[nodiscard]] chat_prompt chat(std::initializer_list<chat_message> messages,
                                   bool add_generation_prompt = true) const;
    [[nodiscard]] chat_prompt chat(std::span<const chat_message> messages,
                                   bool add_generation_prompt = true) const;

private:
    struct shared_state {
        decoder_config config;
        std::shared_ptr<const decoder_weight_source> source;
    };

    using clock = std::chrono::steady_clock;

    // A prompt's token ids are in the vocabulary and fit the largest context.
    void check_prompt(std::span<const std::int32_t> ids) const;

    [[nodiscard]] std::int64_t rung_for(std::int64_t tokens) const;

    [[nodiscard]] program& step_program(std::int64_t batch, std::int64_t tokens, std::int64_t context,
                                        bool select, std::int64_t window = 0);

    // A decode step's new keys and values (outputs 1.., [B, kv_heads, 1, D]) into window slot `fill`: the
    // host copy `pending`, and `p`'s window unless this token fills it (the flush that follows writes the
    // cache, and the window's slots are masked again).
    void keep_in_window(program& p, const std::vector<host_tensor>& outputs,
                        std::vector<host_tensor>& pending, std::int64_t fill) const;

    // Writes slots [0, count) of a step's new keys and values (outputs 1..) into `p`'s cache at `slot`.
    void write_new(program& p, const std::vector<host_tensor>& outputs, std::int64_t count,
                   std::int64_t slot) const;

    // Runs `ids` through the B = 1 prefill program of the smallest rung that holds them, prefill_chunk tokens
    // per call; `consume(start, count, logits)` gets each chunk's logits ([1, S, V], or [1, 1, V] for the
    // chunk's last token with `select`). Returns the program, whose cache holds the tokens at slots 0..n-1.
    program& prefill(std::span<const std::int32_t> ids, bool select,
                     const std::function<void(std::int64_t, std::int64_t, const host_tensor&)>& consume);

    struct stream_state {
        std::vector<std::int32_t> seen;  // prompt + generated
        std::int64_t prompt = 0;
        std::int64_t offset = 0;  // cache slot of position 0
        bool active = true;
        std::optional<sampler> pick;
        std::optional<token_stream> text;
        clock::time_point decode_start;
    };

    // Picks the next token of stream `s` from `row`, reports it and decides whether the stream goes on.
    void take_token(stream_state& s, std::size_t index, std::span<const float> row,
                    const generation_options& options, const token_callback& callback,
                    generation_result& result);

    void generate_group(std::span<const std::vector<std::int32_t>> prompts, std::size_t first,
                        const generation_options& options, const token_callback& callback,
                        std::span<generation_result> results);

    std::shared_ptr<const shared_state> state_;
    std::shared_ptr<const tokenizer> tokenizer_;
    std::optional<chat_template> chat_;
    causal_lm_options options_;
    std::vector<std::int64_t> rungs_;
    bool on_ane_ = false;
    bool gguf_ = false;  // loaded from a .gguf file
    std::int64_t window_ = 0;
    std::unique_ptr<compiled_shapes> programs_;  // prefill, and decode without a window
    std::unique_ptr<compiled_shapes> windowed_;  // decode with a window (its inputs resident too)
    std::function<void(std::size_t, std::span<const float>)>
        observe_logits_;  // recipe_detail::causal_lm_access
    friend struct recipe_detail::causal_lm_access;
    std::vector<std::int32_t> eos_;
    std::optional<fp16_rescale_report> rescale_;
};

namespace recipe_detail {

// For tests: sees every row of logits a generation samples from (stream index, the row) — e.g. to compare
// decoding with and without a window.
struct causal_lm_access {
    static void observe_logits(causal_lm& lm, std::function<void(std::size_t, std::span<const float>)> f);
};

}  // namespace recipe_detail

}  // namespace anvil::models

#if ANVIL_DEFINITIONS
#include "anvil/models/llm/causal_lm-inl.hpp"
#endif
