// anvil: fp16 rescaling for the decoder LMs (decoder_lm.hpp). The Neural Engine computes in fp16, whose
// largest value is 65504, and some checkpoints carry activations past it that fp32 holds with ease: the
// fp16 result is inf, then NaN. Between two projections where the second reads the first's output linearly,
// a power of two moves freely: the producer's weight (and bias) times 2^-s, the consumer's weight times 2^s,
// and the fp32 result is the same bit for bit — scaling by a power of two is exact, and (a 2^s)(b 2^-s) is
// the product ab itself. Calibration runs the model in fp32 on the CPU over given token ids, measures per
// layer and pair the largest |x| the scale divides (the producer's output and the consumer's input), picks
// the smallest s >= 0 that brings it under a limit, and folds 2^-s and 2^s into the weights before anything
// is compiled, so the CPU, the Neural Engine and Core ML packages all run the rescaled weights.
//
// The pairs, per layer:
//   attention  v_proj -> o_proj (GPT-2: the value third of c_attn -> attn.c_proj). softmax(q k^T) v is
//              linear in v, so the values (and the KV cache's v), attention's output and o_proj's input all
//              shrink by 2^s; o_proj's bias stays as it is.
//   mlp        up_proj -> down_proj, when the MLP is gated — down(act(gate) * up) is linear in up (SwiGLU:
//              Llama, Qwen, Mistral) — or when its activation is relu (relu(x / 2^s) = relu(x) / 2^s).
//              Between GPT-2's c_fc and c_proj lies gelu, which no power of two passes through exactly:
//              that pair is reported with the reason and keeps its weights.
// What no pair moves stays as it was: values before a producer (the gate, queries and keys, the residual
// stream) and each consumer's output (what the pair adds to the residual stream). The ane_numerics reports
// taken before and after rescaling show whatever still overflows.
//
// Weights: f32 ones are scaled into a copy. f16 and bf16 keep their type when every scaled value is exactly
// representable there (none overflows or loses bits among the subnormals), else the scaled matrix is stored
// as f32; any other type, and GGUF's quantised blocks, are dequantised to f32 and scaled — only the matrices
// of the pairs that need a scale are copied. The consumer's scale is capped so that its largest weight stays
// within fp16, the type the Neural Engine stores weights in (the pair's note says so when that bites).
//
//   anvil::models::causal_lm_options options;
//   options.fp16_rescale.emplace();
//   options.fp16_rescale->text = "A few paragraphs of ordinary text.";
//   auto lm = anvil::models::causal_lm::load("models/Qwen2.5-0.5B", options);
//   std::fputs(lm.fp16_rescale()->to_string().c_str(), stderr);  // the scales, the overflow before and after
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "anvil/backend/program.hpp"
#include "anvil/compilation.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/models/llm/decoder_lm.hpp"

namespace anvil::models {

enum class projection_pair : std::uint8_t {
    attention,  // v_proj -> o_proj
    mlp,        // up_proj -> down_proj
};

[[nodiscard]] std::string_view projection_pair_name(projection_pair pair) noexcept;  // "attention", "mlp"

struct fp16_rescale_options {
    // The largest |x| a rescaled pair's values may reach on the calibration ids: 2^14, a quarter of fp16's
    // 65504, so text that drives activations up to 4x past the calibration's still fits. A lower limit buys
    // headroom at a price: a consumer's weights end up near (its output) / limit, and fp16 weights below
    // 2^-14 lose bits.
    double limit = 16384.0;
    // Also run the calibration ids with ane_numerics (every op's output rounded to fp16) on the checkpoint's
    // weights and on the rescaled ones, for the report's `before` and `after`.
    bool check_numerics = true;
};

// One pair of projections of one layer: what calibration measured and the power of two it chose.
struct fp16_pair_scale {
    std::int64_t layer = 0;
    projection_pair pair = projection_pair::attention;
    std::string producer, consumer;  // the weights' names without ".weight": "model.layers.0.mlp.up_proj"
    // fp32 max |x| over the calibration ids, on the checkpoint's weights: of what 2^-shift divides (the
    // producer's output and the consumer's input), and of the consumer's output, which no shift changes.
    double peak = 0.0;
    double output_peak = 0.0;
    int shift = 0;  // the producer's weight and bias times 2^-shift, the consumer's weight times 2^shift
    // Why the shift is smaller than `peak` asks for (the pair is not linear; the consumer's weights would
    // leave fp16), else empty.
    std::string note;
};

struct fp16_rescale_report {
    std::int64_t calibration_tokens = 0;
    double limit = 0.0;
    std::vector<fp16_pair_scale> pairs;  // layer by layer: attention, then mlp
    // With check_numerics: the ops whose values left fp16 on the calibration ids, with the checkpoint's
    // weights and with the rescaled ones. An op is listed where finite inputs gave values past 65504; the
    // infinities that follow it (and overflows they hide) are not.
    std::optional<numerics_report> before, after;

    // Pairs whose weights changed (shift > 0).
    [[nodiscard]] std::size_t rescaled_pairs() const noexcept;
    // A line per pair, then the overflow before and after, one line per op.
    [[nodiscard]] std::string to_string() const;
};

struct fp16_rescaled {
    fp16_rescale_report report;
    // The checkpoint's weights with the scales folded in (the given source itself when no pair needs one).
    std::shared_ptr<const decoder_weight_source> weights;
};

// Calibrates on `ids` (one sequence, positions 0..n-1, in one n x n attention: a few hundred tokens is the
// intended size) and folds the scales into the weights. `cpu` lends
// its threads and kernels; every calibration program runs on the CPU, uncompressed. Throws error for empty
// ids, ids outside the vocabulary, more ids than learned positions, or a model whose fp32 values are not
// finite on them.
[[nodiscard]] fp16_rescaled calibrate_fp16_rescale(
    const decoder_config& c, const std::shared_ptr<const decoder_weight_source>& weights,
    std::span<const std::int32_t> ids, const fp16_rescale_options& options = {},
    const compile_options& cpu = {});

// The smallest s >= 0 with peak / 2^s <= limit.
[[nodiscard]] int fp16_rescale_shift(double peak, double limit);

namespace recipe_detail {

// `values` (as the graph computes with them, f32) times 2^exponent, as a tensor of `shape`: of type `stored`
// (f16 or bf16) when every product is exactly representable there, else f32. Throws error naming `name`
// when a product is not exact in f32 either.
[[nodiscard]] host_tensor scaled_by_power_of_two(std::span<const float> values, const dims& shape,
                                                 dtype stored, int exponent, std::string_view name);

}  // namespace recipe_detail

}  // namespace anvil::models

#if ANVIL_DEFINITIONS
#include "anvil/models/llm/fp16_rescale-inl.hpp"
#endif
