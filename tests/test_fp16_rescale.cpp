// fp16 rescaling of the decoder LMs (models/llm/fp16_rescale.hpp) on a random-weight Llama built to overflow
// fp16 (tools/reference/fp16_rescale.py wrote tests/data/fp16_rescale/llama_overflow/): calibration chooses
// the shifts the PyTorch reference predicts from its own measured peaks, the ane_numerics report goes from
// overflowing to clean, the fp16 logits come back to the fp32 ones within fp16's tolerance, and the fp32
// logits do not move at all — on that model, on every decoder fixture (f32, f16, bf16, biases, GPT-2's
// gelu MLP that cannot be rescaled) and on GGUF files whose quantised blocks are dequantised to scale them.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "model_test_support.hpp"

namespace test_fp16_rescale {

namespace {

using anvil::models::causal_lm;
using ids = std::vector<std::int32_t>;

std::string overflow_fixture() {
    return anvil_test::data_path("fp16_rescale/llama_overflow");
}

ids to_ids(const anvil::json::value& v) {
    ids out;
    for (const auto& item : v.as_array())
        out.push_back(static_cast<std::int32_t>(item.as_int()));
    return out;
}

anvil::models::causal_lm_options options(bool ane_numerics, const std::optional<ids>& calibration = {}) {
    anvil::models::causal_lm_options o;
    o.load = anvil_test::cpu();
    o.load.compile.ane_numerics = ane_numerics;
    o.max_context = 64;
    if (calibration) o.fp16_rescale = anvil::models::fp16_calibration{*calibration, {}, {}};
    return o;
}

bool all_finite(const anvil::host_tensor& t) {
    for (const float x : t.to_f32())
        if (!std::isfinite(x)) return false;
    return true;
}

}  // namespace

TEST_CASE(
    "fp16 rescale: the overflowing Llama gets the reference's shifts, a clean report and its logits back") {
    const auto expected = anvil::json::parse_file(overflow_fixture() + "/expected.json");
    const ids calibration = to_ids(*expected.find("calibration_ids"));
    const auto reference = anvil_test::load_npy(overflow_fixture() + "/logits.npy");

    auto plain = causal_lm::load(overflow_fixture(), options(false));
    CHECK_FALSE(plain.fp16_rescale().has_value());
    const auto fp32 = plain.logits(calibration);
    CHECK(anvil_test::max_relative_error(fp32, reference) < 1e-4);

    // (a) As stored, fp16 numerics overflow: the logits are no longer numbers.
    auto fp16 = causal_lm::load(overflow_fixture(), options(true));
    CHECK_FALSE(all_finite(fp16.logits(calibration)));

    auto rescaled = causal_lm::load(overflow_fixture(), options(false, calibration));
    REQUIRE(rescaled.fp16_rescale().has_value());
    const anvil::models::fp16_rescale_report& report = *rescaled.fp16_rescale();
    MESSAGE(report.to_string());
    CHECK(report.calibration_tokens == static_cast<std::int64_t>(calibration.size()));
    CHECK(report.limit == 16384.0);

    // (d) Per layer and pair, the peak the reference measured in float64 and the shift it predicts from it.
    const auto& want = expected.find("pairs")->as_array();
    REQUIRE(report.pairs.size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
        const auto& got = report.pairs[i];
        const auto& pair = want[i];
        CAPTURE(i);
        CHECK(got.layer == pair.find("layer")->as_int());
        CHECK(anvil::models::projection_pair_name(got.pair) == pair.find("pair")->as_string());
        CHECK(got.producer == pair.find("producer")->as_string());
        CHECK(got.consumer == pair.find("consumer")->as_string());
        CHECK(got.peak == doctest::Approx(pair.find("peak")->as_double()).epsilon(1e-4));
        CHECK(got.output_peak == doctest::Approx(pair.find("output_peak")->as_double()).epsilon(1e-4));
        CHECK(got.shift == pair.find("shift")->as_int());
        CHECK(got.note.empty());
    }
    CHECK(report.rescaled_pairs() == 3);

    // (a, b) ane_numerics on the calibration ids: overflow before, none after.
    REQUIRE(report.before.has_value());
    REQUIRE(report.after.has_value());
    CHECK_FALSE(report.before->clean());
    CHECK(report.after->clean());
    for (const auto& o : report.before->overflows)
        CHECK(o.max_abs > 65504.0f);

    // (c) fp32 is unchanged bit for bit: powers of two move between the weights of each pair exactly.
    CHECK(anvil_test::max_difference(rescaled.logits(calibration), fp32) == 0.0);

    // A Core ML export builds its graph from the same folded weights: up_proj's constant is 2^-4 of the
    // file's.
    const auto exported = rescaled.export_function("main", 1, 16);
    const auto stored =
        anvil::checkpoint::open(overflow_fixture()).tensor("model.layers.0.mlp.up_proj.weight").to_f32();
    std::size_t seen = 0;
    for (const anvil::node& n : anvil::graph::of(exported.outputs.front()).nodes()) {
        if (n.kind != anvil::op::constant || n.name != "model.layers.0.mlp.up_proj.weight") continue;
        ++seen;
        const auto values = n.data.to_f32();
        REQUIRE(values.size() == stored.size());
        bool scaled = true;
        for (std::size_t i = 0; i < values.size(); ++i)
            scaled = scaled && values[i] == std::ldexp(stored[i], -4);
        CHECK(scaled);
    }
    CHECK(seen == 1);

    // (b) fp16 numerics on the rescaled weights: finite, and as close to fp32 as fp16 allows. The reference's
    // fp16 emulation lands at 2.0e-2 rescaled and 1.9e-2 for the model without its disguise, so the shifts
    // cost no accuracy of their own.
    auto rescaled16 = causal_lm::load(overflow_fixture(), options(true, calibration));
    const auto fp16_logits = rescaled16.logits(calibration);
    const double error = anvil_test::max_relative_error(fp16_logits, reference);
    MESSAGE("fp16 numerics after rescaling: logits max relative error ", error);
    CHECK(error < 5e-2);
}

TEST_CASE("fp16 rescale: calibration on a text, through the model's tokenizer") {
    const std::string text = "the mill wheel turns all day by the river";
    anvil::models::causal_lm_options o = options(false);
    o.fp16_rescale = anvil::models::fp16_calibration{{}, text, {}};
    auto lm = causal_lm::load(overflow_fixture(), o);
    REQUIRE(lm.fp16_rescale().has_value());
    const auto& report = *lm.fp16_rescale();
    CHECK(report.calibration_tokens == static_cast<std::int64_t>(lm.tokens().encode(text).ids.size()));
    CHECK_FALSE(report.before->clean());
    CHECK(report.after->clean());
    CHECK(report.rescaled_pairs() >= 2);
}

TEST_CASE(
    "fp16 rescale: exact in fp32 on every decoder family and weight type; GPT-2's gelu MLP is left alone") {
    // A limit of 1/4 shifts every pair that can be rescaled (peaks are O(1) to O(10) here), so each folds
    // into its weights: f32, f16 (qwen3), bf16 (llama_dynamic), q/k/v biases (qwen2), GPT-2's Conv1D pieces,
    // and GGUF's Q8_0 blocks, dequantised to scale them.
    const ids prompt{3, 141, 27, 250, 99, 12, 286, 7, 201};
    struct model {
        std::string path;
        double
            tolerance;  // the GGUF GEMM reads Q8_0 blocks in place; its dequantised copy runs another kernel
    };
    const std::vector<model> models{{"decoder_lms/gpt2", 0.0},
                                    {"decoder_lms/llama", 0.0},
                                    {"decoder_lms/llama_dynamic", 0.0},
                                    {"decoder_lms/qwen2", 0.0},
                                    {"decoder_lms/qwen3", 0.0},
                                    {"decoder_lms/mistral", 0.0},
                                    {"gguf/models/llama_gqa_q8_0.gguf", 1e-5},
                                    {"gguf/models/qwen2_tied_q8_0.gguf", 1e-5}};
    for (const model& m : models) {
        CAPTURE(m.path);
        const std::string path = anvil_test::data_path(m.path);
        auto plain = causal_lm::load(path, options(false));
        anvil::models::causal_lm_options o = options(false, prompt);
        o.fp16_rescale->rescale.limit = 0.25;
        o.fp16_rescale->rescale.check_numerics = false;
        auto rescaled = causal_lm::load(path, o);
        const auto& report = *rescaled.fp16_rescale();
        CHECK_FALSE(report.before.has_value());
        const bool gpt2 = rescaled.config().family == anvil::models::decoder_family::gpt2;
        for (const auto& pair : report.pairs) {
            CAPTURE(pair.producer);
            if (gpt2 && pair.pair == anvil::models::projection_pair::mlp) {
                CHECK(pair.shift == 0);
                CHECK(pair.note.find("not rescalable") != std::string::npos);
            } else {
                CHECK(pair.shift == anvil::models::fp16_rescale_shift(pair.peak, 0.25));
                CHECK(pair.shift > 0);
            }
        }
        const auto want = plain.logits(prompt);
        const auto got = rescaled.logits(prompt);
        if (m.tolerance == 0.0) {
            CHECK(anvil_test::max_difference(got, want) == 0.0);
        } else {
            CHECK(anvil_test::max_relative_error(got, want) < m.tolerance);
        }
    }
}

TEST_CASE("fp16 rescale: a consumer's weights stay within fp16, however small the limit") {
    // A limit of 2^-20 asks for shifts near 2^22, which would take o_proj's and down_proj's weights (O(0.1)
    // to O(1)) past 65504: each is capped where its largest weight still fits, and fp32 is still exact.
    const std::string path = anvil_test::data_path("decoder_lms/llama");
    const ids prompt{3, 141, 27, 250};
    anvil::models::causal_lm_options o = options(false, prompt);
    o.fp16_rescale->rescale.limit = std::ldexp(1.0, -20);
    auto rescaled = causal_lm::load(path, o);
    auto plain = causal_lm::load(path, options(false));
    const auto& report = *rescaled.fp16_rescale();
    for (const auto& pair : report.pairs) {
        CAPTURE(pair.consumer);
        const int wanted = anvil::models::fp16_rescale_shift(pair.peak, o.fp16_rescale->rescale.limit);
        CHECK(pair.shift > 0);
        CHECK(pair.shift < wanted);
        CHECK(pair.note == anvil::detail::message("2^", wanted, " would take ", pair.consumer,
                                                  "'s largest weight past fp16; capped at 2^", pair.shift));
        const auto checkpoint = anvil::checkpoint::open(path);
        double largest = 0.0;
        for (const float w : checkpoint.tensor(pair.consumer + ".weight").to_f32())
            largest = std::max(largest, std::fabs(double{w}));
        CHECK(std::ldexp(largest, pair.shift) <= 65504.0);
        CHECK(std::ldexp(largest, pair.shift + 1) > 65504.0);
    }
    CHECK(anvil_test::max_difference(rescaled.logits(prompt), plain.logits(prompt)) == 0.0);
}

TEST_CASE("fp16 rescale: the shift is the smallest power of two that brings the peak under the limit") {
    using anvil::models::fp16_rescale_shift;
    CHECK(fp16_rescale_shift(0.0, 16384.0) == 0);
    CHECK(fp16_rescale_shift(16384.0, 16384.0) == 0);
    CHECK(fp16_rescale_shift(16384.5, 16384.0) == 1);
    CHECK(fp16_rescale_shift(65536.0, 16384.0) == 2);
    CHECK(fp16_rescale_shift(65537.0, 16384.0) == 3);
    CHECK(fp16_rescale_shift(3.0, 0.25) == 4);
    CHECK_THROWS_WITH_AS(static_cast<void>(fp16_rescale_shift(1.0, 70000.0)),
                         "fp16 rescale: the limit must be in (0, 65504], got 70000", anvil::error);
    CHECK_THROWS_WITH_AS(static_cast<void>(fp16_rescale_shift(1.0, 0.0)),
                         "fp16 rescale: the limit must be in (0, 65504], got 0", anvil::error);
    CHECK_THROWS_AS(static_cast<void>(fp16_rescale_shift(INFINITY, 16384.0)), anvil::error);
}

TEST_CASE("fp16 rescale: scaled weights keep f16 or bf16 where every value is exact there, else become f32") {
    using anvil::models::recipe_detail::scaled_by_power_of_two;
    const anvil::dims three{3};
    const std::vector<float> plain{1.0f, -0.5f, 3.0f};
    auto kept = scaled_by_power_of_two(plain, three, anvil::dtype::f16, -2, "w");
    CHECK(kept.type() == anvil::dtype::f16);
    CHECK(kept.to_f32() == std::vector<float>{0.25f, -0.125f, 0.75f});
    // 2^-14 (fp16's smallest normal) times 2^-11 is 2^-25, below fp16's smallest subnormal: f32 it is.
    const std::vector<float> small{1.0f, std::ldexp(1.0f, -14)};
    auto widened = scaled_by_power_of_two(small, anvil::dims{2}, anvil::dtype::f16, -11, "w");
    CHECK(widened.type() == anvil::dtype::f32);
    CHECK(widened.to_f32() == std::vector<float>{std::ldexp(1.0f, -11), std::ldexp(1.0f, -25)});
    // Past fp16's 65504 too.
    CHECK(scaled_by_power_of_two(std::vector<float>{60000.0f}, anvil::dims{1}, anvil::dtype::f16, 1, "w")
              .type() == anvil::dtype::f32);
    // bf16 has float32's exponent range: a large shift stays exact.
    const auto bf16 =
        scaled_by_power_of_two(std::vector<float>{1.5f}, anvil::dims{1}, anvil::dtype::bf16, -100, "w");
    CHECK(bf16.type() == anvil::dtype::bf16);
    CHECK(bf16.to_f32().front() == std::ldexp(1.5f, -100));
    // f32 itself: a value pushed into float32's subnormals loses bits, which rescaling must never do.
    CHECK_THROWS_WITH_AS(
        static_cast<void>(scaled_by_power_of_two(std::vector<float>{1.25e-38f}, anvil::dims{1},
                                                 anvil::dtype::f32, -10, "layers.0.mlp.up_proj")),
        doctest::Contains("fp16 rescale: 'layers.0.mlp.up_proj' times 2^-10 is not exact in float32"),
        anvil::error);
}

TEST_CASE("fp16 rescale: bad calibration input is refused with a message that says what is wrong") {
    CHECK_THROWS_WITH_AS(static_cast<void>(causal_lm::load(overflow_fixture(), options(false, ids{}))),
                         "fp16 rescale: no calibration token ids (give ids, or a text to encode)",
                         anvil::error);
    CHECK_THROWS_WITH_AS(
        static_cast<void>(causal_lm::load(overflow_fixture(), options(false, ids{5, 320, 7}))),
        "fp16 rescale: calibration token id 320 is outside the vocabulary (320 ids)", anvil::error);
    CHECK_THROWS_WITH_AS(static_cast<void>(causal_lm::load(overflow_fixture(), options(false, ids{5, -1}))),
                         "fp16 rescale: calibration token id -1 is outside the vocabulary (320 ids)",
                         anvil::error);
    anvil::models::causal_lm_options both = options(false, ids{5});
    both.fp16_rescale->text = "the mill";
    CHECK_THROWS_WITH_AS(static_cast<void>(causal_lm::load(overflow_fixture(), both)),
                         "causal_lm: fp16_rescale calibrates on ids or on a text, not both", anvil::error);
    anvil::models::causal_lm_options bad_limit = options(false, ids{5});
    bad_limit.fp16_rescale->rescale.limit = -1.0;
    CHECK_THROWS_WITH_AS(static_cast<void>(causal_lm::load(overflow_fixture(), bad_limit)),
                         "fp16 rescale: the limit must be in (0, 65504], got -1", anvil::error);
    // GPT-2 has learned positions for 64 tokens only.
    CHECK_THROWS_WITH_AS(
        static_cast<void>(
            causal_lm::load(anvil_test::data_path("decoder_lms/gpt2"), options(false, ids(65, 7)))),
        "fp16 rescale: 65 calibration tokens, more than the 64 positions gpt2 has embeddings for",
        anvil::error);
}

TEST_CASE("fp16 rescale: on the Neural Engine simulator the overflow is gone too") {
    anvil_test::ane_target ane;
    if (!anvil_test::use_ane_simulator(ane)) return;
    const auto expected = anvil::json::parse_file(overflow_fixture() + "/expected.json");
    const ids calibration = to_ids(*expected.find("calibration_ids"));
    const auto reference = anvil_test::load_npy(overflow_fixture() + "/logits.npy");
    anvil::models::causal_lm_options o;
    o.load.compile = ane.options;
    o.max_context = 64;
    o.prefill_chunk = 16;
    auto stored = causal_lm::load(overflow_fixture(), o);
    if (all_finite(stored.logits(calibration))) {
        // Only a segment moved to the CPU (fp32) computes these weights without overflow: the CTest runs
        // that inject a fault into the simulator (fail_compile_op, fail_load_op, fail_eval_op) do that.
        const char* faults = std::getenv("ANVIL_ANE_SIM_OPTIONS");
        const std::string injected = faults != nullptr ? faults : "";
        MESSAGE("finite logits before rescaling, with ANVIL_ANE_SIM_OPTIONS='", injected, "'");
        CHECK(injected.find("fail_") != std::string::npos);
    }
    o.fp16_rescale = anvil::models::fp16_calibration{calibration, {}, {}};
    auto rescaled = causal_lm::load(overflow_fixture(), o);
    const double error = anvil_test::max_relative_error(rescaled.logits(calibration), reference);
    MESSAGE("the ANE simulator after rescaling: logits max relative error ", error);
    CHECK(error < 5e-2);
}

}  // namespace test_fp16_rescale
