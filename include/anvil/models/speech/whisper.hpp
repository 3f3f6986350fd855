// anvil: Whisper speech-to-text (Hugging Face's WhisperForConditionalGeneration), every size from tiny to
// large-v3, English-only and multilingual. Read top to bottom:
//
//   audio 16 kHz -> log-mel [n_mels, 3000] per 30 s window (io/log_mel.hpp, WhisperFeatureExtractor's)
//   encoder: conv1 (k3) + GELU, conv2 (k3, stride 2) + GELU -> [1500, d_model] + sinusoidal positions
//            -> pre-norm layers -> layer_norm; and, once per window, each decoder layer's cross-attention
//            keys and values of that output
//   decoder: one token per step: token + learned position embeddings -> layers of (causal self-attention
//            over the cached keys and values, cross-attention over the window's, MLP) -> layer_norm
//            -> logits against the token embeddings (proj_out is tied)
//
// Both caches stay resident in the decoder's program (compile_options::resident_inputs): the cross keys and
// values are written once per window, and a step writes only its own token's key and value, so a decode
// step is one evaluate that moves one token's bytes. Generation follows Hugging Face's generate: the prompt
// is <|startoftranscript|> then the language, the task and <|notimestamps|> (generation_config.json's
// forced ids); suppress_tokens on every step, begin_suppress_tokens on the first; with timestamps, the
// WhisperTimeStampLogitsProcessor rules; greedy, stopping at <|endoftext|> or the maximum length. Audio past
// 30 s is decoded in consecutive 30 s windows, each with the same prompt (sequential long-form without
// timestamps), and the texts are joined.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "anvil/backend/coreml/export.hpp"
#include "anvil/compilation.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/expr/tensor.hpp"
#include "anvil/fwd.hpp"
#include "anvil/io/tokenizer.hpp"
#include "anvil/io/wav.hpp"
#include "anvil/models/common/blocks.hpp"
#include "anvil/models/common/compiled_shapes.hpp"
#include "anvil/models/common/config.hpp"
#include "anvil/models/common/weights.hpp"

namespace anvil::models {

// WhisperConfig (config.json), with transformers' defaults, and what generation_config.json adds.
struct whisper_config {
    std::int64_t vocab_size = 51865;
    std::int64_t mel_bins = 80;  // num_mel_bins (128 for large-v3)
    std::int64_t d_model = 384;
    std::int64_t encoder_layers = 4;
    std::int64_t encoder_heads = 6;
    std::int64_t decoder_layers = 4;
    std::int64_t decoder_heads = 6;
    std::int64_t encoder_ffn = 1536;
    std::int64_t decoder_ffn = 1536;
    std::int64_t max_source_positions = 1500;  // encoder positions: 3000 frames after the stride-2 conv
    std::int64_t max_target_positions = 448;   // decoder positions: the prompt and the generated tokens
    activation act = activation::gelu;         // activation_function
    bool scale_embedding = false;              // token embeddings times sqrt(d_model)
    double layer_norm_eps = 1e-5;              // nn.LayerNorm's default: Whisper's config has no field

    // generation_config.json (config.json's values where it has none)
    std::int32_t decoder_start_token_id = 50257;
    std::int32_t eos_token_id = 50256;
    std::int64_t max_length = 448;
    std::vector<std::int32_t> suppress_tokens;
    std::vector<std::int32_t> begin_suppress_tokens;
    std::optional<std::int32_t> no_timestamps_token_id;  // the first timestamp token is the next id
    std::int64_t max_initial_timestamp_index = 50;       // the first timestamp at most 1.00 s
    bool multilingual = true;                            // is_multilingual
    std::map<std::string, std::int32_t> language_ids;    // lang_to_id: "<|en|>" -> id
    std::map<std::string, std::int32_t> task_ids;        // task_to_id: "transcribe", "translate"

    [[nodiscard]] std::int64_t frames() const noexcept { return 2 * max_source_positions; }
    [[nodiscard]] std::int64_t encoder_head_dim() const noexcept { return d_model / encoder_heads; }
    [[nodiscard]] std::int64_t decoder_head_dim() const noexcept { return d_model / decoder_heads; }
    [[nodiscard]] std::optional<std::int32_t> timestamp_begin() const {
        if (!no_timestamps_token_id) return std::nullopt;
        return *no_timestamps_token_id + 1;
    }

    // `generation` is generation_config.json's document (may be null).
    [[nodiscard]] static whisper_config from_json(const config_reader& config,
                                                  const config_reader* generation = nullptr);
};

struct whisper_encoder_weights {
    tensor<float> conv1_weight, conv1_bias;  // [d_model, n_mels, 1, 3], [d_model]
    tensor<float> conv2_weight, conv2_bias;  // [d_model, d_model, 1, 3], [d_model]
    tensor<float> positions;                 // [max_source_positions, d_model]
    std::vector<pre_norm_encoder_layer> layers;
    norm_layer final_norm;
};

struct whisper_decoder_layer {
    norm_layer self_norm;
    attention_layer self_attention;
    norm_layer cross_norm;
    attention_layer cross_attention;  // query from the decoder; key and value project the encoder's output
    norm_layer mlp_norm;
    mlp_layer mlp;
};

struct whisper_decoder_weights {
    tensor<float> tokens;     // [vocab, d_model], also the output projection
    tensor<float> positions;  // [max_target_positions, d_model]
    std::vector<whisper_decoder_layer> layers;
    norm_layer final_norm;
};

// The checkpoint's prefix: "model." for WhisperForConditionalGeneration, "" for a bare WhisperModel.
[[nodiscard]] whisper_encoder_weights load_whisper_encoder(weight_loader& weights, const whisper_config& c,
                                                           const std::string& prefix);
[[nodiscard]] whisper_decoder_weights load_whisper_decoder(weight_loader& weights, const whisper_config& c,
                                                           const std::string& prefix);

// features [B, n_mels, 3000] -> the encoder's last hidden state [B, 1500, d_model].
[[nodiscard]] tensor<float> whisper_encode(const whisper_encoder_weights& w, const whisper_config& c,
                                           const tensor<float>& features);

// The graph names of a decoder step (contract: ids [1, 1] i32 and positions [1, 1] i32, the token and its
// position; mask [1, 1, 1, T + 1] additive over the T cache slots then the token itself; resident
// self-attention caches k<i>, v<i> [1, heads, T, head_dim] and cross-attention keys and values xk<i>, xv<i>
// [1, heads, 1500, head_dim]) and outputs (logits [1, 1, vocab], then per layer the token's key and value
// [1, heads, 1, head_dim]).
[[nodiscard]] std::string whisper_cross_key_name(std::int64_t layer);
[[nodiscard]] std::string whisper_cross_value_name(std::int64_t layer);

// One decoder step with a context of `context` cache slots: the outputs above.
[[nodiscard]] std::vector<value> whisper_decoder_step(graph& g, const whisper_decoder_weights& w,
                                                      const whisper_config& c, std::int64_t context);

// The encoder's program: features [1, n_mels, 3000] -> hidden [1, 1500, d_model], then xk0, xv0, xk1, ...
// [1, heads, 1500, head_dim], each decoder layer's cross-attention keys and values.
[[nodiscard]] std::vector<value> whisper_encoder_program(graph& g, const whisper_encoder_weights& encoder,
                                                         const whisper_decoder_weights& decoder,
                                                         const whisper_config& c);

namespace recipe_detail {

// Hugging Face's logits processors on one row of logits, for the tokens `generated` after the prompt:
// SuppressTokens, SuppressTokensAtBegin (no token generated yet) and, with timestamps,
// WhisperTimeStampLogitsProcessor. Suppressed entries become -infinity.
void process_whisper_logits(const whisper_config& c, std::span<const std::int32_t> generated, bool timestamps,
                            std::span<float> logits);

}  // namespace recipe_detail

struct transcribe_options {
    std::string language;             // "en", "de", "<|fr|>"...; empty: detected (multilingual models)
    std::string task = "transcribe";  // or "translate" (multilingual models)
    bool timestamps = false;          // timestamp tokens, with HF's timestamp rules
    std::int64_t max_new_tokens = 0;  // per 30 s window; 0: up to generation_config's max_length
    // Called with each generated token as it comes (the end-of-text token excluded), e.g. to stream text.
    std::function<void(std::int32_t token)> on_token;
};

// One 30 s window's result.
struct transcribed_window {
    std::vector<std::int32_t> prompt;     // <|startoftranscript|>, the language, the task, ...
    std::vector<std::int32_t> generated;  // the tokens after the prompt (<|endoftext|> excluded)
    std::string stop_reason;              // "eos", "max_new_tokens" or "max_length"
};

struct transcription {
    std::string text;               // every window's text, special and timestamp tokens skipped
    std::vector<std::int32_t> ids;  // every window's generated tokens, one after the other
    std::vector<transcribed_window> windows;
    std::string language;  // the language token used ("<|en|>"), empty for English-only models
};

// A Whisper model loaded from a Hugging Face folder: config.json, generation_config.json, safetensors, the
// tokenizer files, preprocessor_config.json.
class whisper {
public:
    [[nodiscard]] static whisper load(const std::filesystem::path& folder, const load_options& options = {});

    // The log-mel features of 16 kHz samples: [n_mels, 3000] for up to 30 s (padded with silence), else
    // [n_mels, samples / 160], the whole clip at once (what long-form transcription cuts into windows).
    [[nodiscard]] host_tensor features(std::span<const float> samples) const;

    // The window of features [n_mels, frames] (f32) that starts at frame `start`: [n_mels, 3000], zeros past
    // the end (as Hugging Face pads the last segment of long audio). What each decoded window reads.
    [[nodiscard]] host_tensor window(const host_tensor& features, std::int64_t start) const;

    // The encoder's last hidden state [1500, d_model] for features [n_mels, 3000] (or [1, n_mels, 3000]).
    [[nodiscard]] host_tensor encode(const host_tensor& features);

    // Speech at 16 kHz (any other rate is an anvil::error naming it): 30 s windows, each decoded.
    [[nodiscard]] transcription transcribe(const audio& speech, const transcribe_options& options = {});
    [[nodiscard]] transcription transcribe(std::span<const float> samples,
                                           const transcribe_options& options = {});
    // Features [n_mels, frames] (a multiple of 3000 frames is not needed: the last window is padded with
    // the features of silence).
    [[nodiscard]] transcription transcribe_features(const host_tensor& features,
                                                    const transcribe_options& options = {});

    // The prompt for `options`: <|startoftranscript|>, then (multilingual) the language and the task, then
    // <|notimestamps|> unless timestamps are on. An empty language here is an error: transcribe() detects it.
    [[nodiscard]] std::vector<std::int32_t> prompt(const transcribe_options& options) const;

    // The decoder's logits [S, vocab] for `ids` (a prompt and what follows) over one window's features
    // [n_mels, 3000]: row i predicts the token after ids[i].
    [[nodiscard]] host_tensor logits(const host_tensor& features, std::span<const std::int32_t> ids);

    [[nodiscard]] const whisper_config& config() const noexcept { return config_; }
    [[nodiscard]] bool has_tokenizer() const noexcept { return tokenizer_ != nullptr; }
    [[nodiscard]] const tokenizer& tokens() const;
    // The text of generated ids as WhisperTokenizer.decode(ids, skip_special_tokens=True) gives it: special
    // tokens skipped and timestamps removed (an older folder's added_tokens.json leaves them ordinary
    // tokens). Throws when the folder has no tokenizer.
    [[nodiscard]] std::string text(std::span<const std::int32_t> ids) const;
    [[nodiscard]] std::size_t compiled_programs() const { return encoder_->count() + decoder_->count(); }

    // The two functions of an exported Core ML package (anvil export; macOS 15 / iOS 18, for the states).
    // `encoder` takes input_features fp16 [1, n_mels, 3000] (features() of one 30 s window) and returns
    // each decoder layer's cross-attention keys and values xk<i>, xv<i> [1, decoder_heads, 1500, head_dim].
    // `decoder` is one token's step with `context` self-attention slots (at most max_target_positions): ids
    // and positions int32 [1, 1], an fp16 additive mask [1, 1, 1, T + 1] over the slots then the token
    // itself, and cache_write fp16 [1, 1, T, 1] (1 at the token's slot) -> logits [1, 1, vocab]. Its states
    // are the self-attention caches k<i>, v<i> [1, decoder_heads, T, head_dim], which each step updates,
    // and xk<i>, xv<i>, which it only reads: the app copies the encoder's outputs into them once per window
    // (getMultiArrayForStateNamed:handler:).
    [[nodiscard]] mlpackage_function export_encoder_function() const;
    [[nodiscard]] mlpackage_function export_decoder_function(std::int64_t context) const;

private:
    whisper() = default;

    // The language token for `name` ("en", "<|en|>"); anvil::error listing the known ones.
    [[nodiscard]] std::int32_t language_id(std::string_view name) const;

    // Runs the encoder on one window and writes its cross keys and values into the decoder's program.
    void start_window(const host_tensor& features);

    // One decoder step: `token` at position `position`, the cache holding positions [0, position). Writes
    // the token's key and value at slot `position` and returns its logits.
    [[nodiscard]] std::vector<float> step(std::int32_t token, std::int64_t position);

    // The most likely language token after the start token, and the start token's logits (the step the
    // window's decoding then does not repeat).
    struct detected_language {
        std::int32_t id = 0;
        std::vector<float> start_logits;
    };
    [[nodiscard]] detected_language detect_language();

    // Greedy decoding of the current window after `prompt`; `start_logits`, when given, are the logits
    // the start token (prompt[0], already at position 0 of the cache) gave.
    [[nodiscard]] transcribed_window decode_window(const std::vector<std::int32_t>& prompt,
                                                   const transcribe_options& options,
                                                   const std::vector<float>* start_logits = nullptr);

    whisper_config config_;
    std::shared_ptr<const tokenizer> tokenizer_;
    std::unique_ptr<compiled_shapes> encoder_, decoder_;
};

}  // namespace anvil::models

#if ANVIL_DEFINITIONS
#include "anvil/models/speech/whisper-inl.hpp"
#endif
