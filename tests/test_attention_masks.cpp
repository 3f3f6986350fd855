// The additive masks of every model family keep headroom in fp16 (anvil::masked_score, core/masking.hpp): on
// the Neural Engine, score + mask must stay finite, because its softmax returns NaN for a row holding -inf
// (RUNTIME.md §0b #24; the simulator does the same, CONSTRAINTS.md:97). fp16's lowest, -65504, overflows to
// -inf as soon as the score is below -16: each test here puts masked scores near -40, so a mask of -65504
// turns the rows to NaN, and compares the simulator's results with the CPU's exact ones. Then the mask
// constants an exported graph carries (PyTorch's (1 - m) * finfo(float32).min), which the lowering gives the
// same headroom.

#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "ane_simulator.hpp"
#include "model_test_support.hpp"

namespace test_attention_masks {

namespace {

using anvil::dims;
using anvil::dtype;
using anvil::host_tensor;
using anvil::op;

constexpr std::int64_t heads = 2, depth = 8;

// Values in [-1, 1) from a fixed sequence, so the test needs no random generator.
std::vector<float> pattern(std::size_t count, std::size_t seed) {
    std::vector<float> v(count);
    for (std::size_t i = 0; i < count; ++i)
        v[i] = static_cast<float>(static_cast<int>((i * 37 + seed * 11) % 29) - 14) / 14.5f;
    return v;
}

// Queries of all ones, and keys [B, H, K, D] whose masked rows score -40 against them (q . k / sqrt(D)):
// far below -16, so the masked scores plus -65504 leave fp16's range.
host_tensor keys_scoring_low(std::int64_t batch, std::int64_t keys, const std::vector<bool>& masked_key) {
    std::vector<float> k = pattern(static_cast<std::size_t>(batch * heads * keys * depth), 1);
    const float low = -40.0f * std::sqrt(static_cast<float>(depth)) / static_cast<float>(depth);
    for (std::int64_t b = 0; b < batch; ++b)
        for (std::int64_t h = 0; h < heads; ++h)
            for (std::int64_t j = 0; j < keys; ++j) {
                if (!masked_key[static_cast<std::size_t>(b * keys + j)]) continue;
                for (std::int64_t d = 0; d < depth; ++d)
                    k[static_cast<std::size_t>(((b * heads + h) * keys + j) * depth + d)] = low;
            }
    return host_tensor::from(k, dims{batch, heads, keys, depth});
}

host_tensor ones(const dims& shape) {
    return host_tensor::from(std::vector<float>(static_cast<std::size_t>(shape.element_count()), 1.0f),
                             shape);
}

bool all_finite(const host_tensor& t) {
    const auto values = t.to_f32();
    return std::all_of(values.begin(), values.end(), [](float v) { return std::isfinite(v); });
}

// `outputs` run on the CPU and on the simulated Neural Engine: the simulator's results are finite, within
// fp16 precision of the CPU's, and no softmax there saw -inf.
void check_on_simulator(const std::vector<anvil::value>& outputs,
                        const std::vector<anvil::named_tensor>& inputs, const std::string& what) {
    INFO(what);
    anvil::compile_options cpu;
    cpu.target = anvil::device::cpu;
    const std::vector<host_tensor> want = anvil::compile(outputs, cpu).run(inputs);
    anvil_test::ane_target ane;
    if (!anvil_test::use_ane_simulator(ane)) return;
#ifdef ANVIL_ANE_SIM_PATH
    anvil_test::sim().reset();
    const std::vector<host_tensor> got = anvil::compile(outputs, ane.options).run(inputs);
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
        CHECK(all_finite(got[i]));
        const double error = anvil_test::max_relative_error(got[i], want[i]);
        MESSAGE(what, ": simulated Neural Engine vs CPU, max relative error ", error);
        // Attention weights and values of magnitude <= 1 in fp16 (unit roundoff 4.9e-4): a few 1e-3 at most.
        CHECK(error < 1e-2);
    }
    const std::string violations = anvil_test::sim().violations();
    CHECK(violations.find("holds -inf") == std::string::npos);
    CHECK(violations.find("passed the fp16 range") == std::string::npos);
#endif
}

}  // namespace

TEST_CASE("attention masks: the masked score leaves fp16 headroom where fp16's lowest would overflow") {
    // A score below -16 plus -65504 is past fp16's range (the simulator's softmax then returns NaN); plus the
    // masked score it is finite down to scores of -55000, and still far enough below any real score that
    // softmax gives it no weight (exp(-1e4) is 0 in fp32).
    CHECK(std::isinf(static_cast<float>(anvil::half(-17.0f + -65504.0f))));
    for (const float score : {-17.0f, -40.0f, -1000.0f, -55000.0f})
        CHECK(std::isfinite(static_cast<float>(anvil::half(score + anvil::masked_score))));
    CHECK(std::exp(anvil::masked_score) == 0.0f);

    // Every family's masks use it: the encoders' padding mask (also CLIP's, the cross-encoders', ...),
    // and the decoder LMs' step mask (Whisper's decoder builds its own with the same constant).
    anvil::graph g;
    const auto padding = g.input("padding", dtype::f32, dims{1, 4});
    const auto additive = anvil::models::additive_padding_mask(anvil::tensor<float>(padding)).value();
    anvil::compile_options cpu;
    cpu.target = anvil::device::cpu;
    const auto encoder_mask =
        anvil::compile({additive}, cpu)
            .run({{"padding", host_tensor::from(std::vector<float>{1, 1, 0, 0}, dims{1, 4})}})
            .at(0)
            .to_f32();
    CHECK(encoder_mask == std::vector<float>{0.0f, 0.0f, anvil::masked_score, anvil::masked_score});

    anvil::models::decoder_config c;
    c.family = anvil::models::decoder_family::gpt2;
    const std::vector<std::int32_t> ids{5, 6};
    const std::vector<std::int64_t> positions{3, 4}, cache_positions{0, 1, 2, -1};
    for (const auto& input :
         anvil::models::decoder_step_inputs(c, ids, positions, cache_positions, 1, 2, 4, {})) {
        if (input.name != anvil::models::step_mask_name) continue;
        const auto mask = input.tensor.to_f32();
        CHECK(*std::min_element(mask.begin(), mask.end()) == anvil::masked_score);
    }
}

TEST_CASE("attention masks: a decoder step's mask on the Neural Engine simulator stays finite below -16") {
    // One row of two new tokens (positions 3 and 4) over four cache slots, three filled: the empty slot and
    // the later token are masked, as decoder_step_inputs builds the mask every decoder LM runs with.
    anvil::models::decoder_config c;
    c.family = anvil::models::decoder_family::gpt2;
    const std::vector<std::int32_t> ids{5, 6};
    const std::vector<std::int64_t> positions{3, 4}, cache_positions{0, 1, 2, -1};
    constexpr std::int64_t tokens = 2, context = 4, keys = context + tokens;
    host_tensor mask;
    for (const auto& input :
         anvil::models::decoder_step_inputs(c, ids, positions, cache_positions, 1, tokens, context, {}))
        if (input.name == anvil::models::step_mask_name) mask = input.tensor;
    REQUIRE(mask.shape() == dims{1, 1, tokens, keys});
    // Slot 3 is empty for both tokens, token 4 (key 5) is later than token 3: the scores of those keys are
    // -40.
    const std::vector<bool> masked_key{false, false, false, true, false, true};

    anvil::graph g;
    const auto q = g.input("q", dtype::f32, dims{1, heads, tokens, depth});
    const auto k = g.input("k", dtype::f32, dims{1, heads, keys, depth});
    const auto v = g.input("v", dtype::f32, dims{1, heads, keys, depth});
    const auto m = g.input("mask", dtype::f32, dims{1, 1, tokens, keys});
    const auto out = g.apply(op::attention, {q, k, v, m});
    check_on_simulator({out},
                       {{"q", ones(dims{1, heads, tokens, depth})},
                        {"k", keys_scoring_low(1, keys, masked_key)},
                        {"v", host_tensor::from(pattern(static_cast<std::size_t>(heads * keys * depth), 2),
                                                dims{1, heads, keys, depth})},
                        {"mask", mask}},
                       "decoder step mask");
}

TEST_CASE(
    "attention masks: padding masks, the encoders' and an exported graph's, on the Neural Engine "
    "simulator") {
    // Two sequences of six, the second padded after three tokens; the padding keys score -40.
    constexpr std::int64_t batch = 2, length = 6;
    const std::vector<float> padding{1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0};
    std::vector<bool> masked_key;
    for (const float p : padding)
        masked_key.push_back(p == 0.0f);
    const std::vector<anvil::named_tensor> inputs{
        {"q", ones(dims{batch, heads, length, depth})},
        {"k", keys_scoring_low(batch, length, masked_key)},
        {"v", host_tensor::from(pattern(static_cast<std::size_t>(batch * heads * length * depth), 3),
                                dims{batch, heads, length, depth})},
        {"padding", host_tensor::from(padding, dims{batch, length})}};

    {
        // The encoders' mask (BERT and every encoder family): (1 - padding) * masked_score, into attention.
        anvil::graph g;
        const auto q = g.input("q", dtype::f32, dims{batch, heads, length, depth});
        const auto k = g.input("k", dtype::f32, dims{batch, heads, length, depth});
        const auto v = g.input("v", dtype::f32, dims{batch, heads, length, depth});
        const auto p = g.input("padding", dtype::f32, dims{batch, length});
        const auto mask = anvil::models::additive_padding_mask(anvil::tensor<float>(p)).value();
        check_on_simulator({g.apply(op::attention, {q, k, v, mask})}, inputs, "encoder padding mask");
    }
    {
        // What torch.onnx.export writes for Hugging Face's BERT (tests/data/onnx/exported/bert): scores as a
        // product, (1 - mask) * finfo(float32).min added, softmax, the product with v — ops the ONNX importer
        // maps one to one. fp16 would saturate the constant to -65504; the lowering gives it headroom.
        anvil::graph g;
        const auto q = g.input("q", dtype::f32, dims{batch, heads, length, depth});
        const auto k = g.input("k", dtype::f32, dims{batch, heads, length, depth});
        const auto v = g.input("v", dtype::f32, dims{batch, heads, length, depth});
        const auto p = g.input("padding", dtype::f32, dims{batch, length});
        anvil::attributes transposed;
        transposed.transpose_b = true;
        const auto scores = g.apply(op::mul, {g.apply(op::matmul, {q, k}, transposed),
                                              g.scalar(1.0 / std::sqrt(static_cast<double>(depth)))});
        anvil::attributes by_key;
        by_key.sizes = {batch, 1, 1, length};
        const auto lowest = g.scalar(static_cast<double>(std::numeric_limits<float>::lowest()));
        const auto extended =
            g.apply(op::mul, {g.apply(op::sub, {g.scalar(1.0), g.apply(op::reshape, {p}, by_key)}), lowest});
        anvil::attributes last;
        last.axis = 3;
        const auto weights = g.apply(op::softmax, {g.apply(op::add, {scores, extended})}, last);
        check_on_simulator({g.apply(op::matmul, {weights, v})}, inputs, "exported float32-lowest mask");
    }
}

}  // namespace test_attention_masks
