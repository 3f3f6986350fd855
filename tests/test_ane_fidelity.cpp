// The Neural Engine path as real Macs run it (RUNTIME.md §0), on the simulator: outputs bound under their
// "@output" symbols and by position, PlaneStride as the channel stride, inputs and outputs padded to the I/O
// width, no matmul on M1/M2, pooling without max_pool/avg_pool, programs anchored by a conv, wide kernels on
// the CPU, positive epsilons, load retries with backoff, an unknown chip, the soft compile budget, the
// per-segment CPU fallback with its placement report and warning (and strict_device's error), and the
// capability record chosen variants come from.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

#include "ane_simulator.hpp"
#include "model_test_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace test_ane_fidelity {

#ifdef ANVIL_ANE_SIM_PATH

using anvil::dims;
using anvil::dtype;
using anvil::host_tensor;
using anvil::op;
using anvil_test::scoped_option;
using anvil_test::sim;
using anvil_test::temporary_folder;

std::vector<float> pattern(std::size_t count, int mod, float scale, int shift = 0) {
    std::vector<float> values(count);
    for (std::size_t i = 0; i < count; ++i)
        values[i] = static_cast<float>(static_cast<int>((i * 7 + static_cast<std::size_t>(shift)) %
                                                        static_cast<std::size_t>(mod)) -
                                       mod / 2) *
                    scale;
    return values;
}

// linear -> gelu -> layer_norm -> softmax over [S, 48] inputs: one ANE program.
struct block {
    anvil::graph g;
    anvil::value out;
    std::vector<anvil::named_tensor> inputs;

    explicit block(std::int64_t rows = 5) {
        const auto x = g.input("x", dtype::f32, dims{rows, 48});
        auto h =
            g.apply(op::linear, {x, g.constant(host_tensor::from(pattern(32 * 48, 29, 0.01f), dims{32, 48})),
                                 g.constant(host_tensor::from(pattern(32, 5, 0.1f), dims{32}))});
        h = g.apply(op::gelu, {h});
        anvil::attributes norm;
        norm.epsilon = 1e-5f;
        h = g.apply(op::layer_norm,
                    {h, g.constant(host_tensor::from(std::vector<float>(32, 1.0f), dims{32})),
                     g.constant(host_tensor::from(std::vector<float>(32, 0.0f), dims{32}))},
                    norm);
        anvil::attributes soft;
        soft.axis = 1;
        out = g.apply(op::softmax, {h}, soft);
        inputs.push_back(
            {"x", host_tensor::from(pattern(static_cast<std::size_t>(rows) * 48, 19, 0.1f), dims{rows, 48})});
    }
};

anvil::compile_options ane_options(const temporary_folder& cache) {
    anvil::compile_options options;
    options.target = anvil::device::ane;
    options.cache_dir = cache.path.string();
    return options;
}

using anvil_test::max_difference;

using anvil_test::captured_warnings;

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

TEST_CASE("ane fidelity: outputs bind as name@output, and by position when Live entries carry no names") {
    temporary_folder cache;
    block b;
    const auto want = anvil::compile({b.out}).run(b.inputs);
    for (const char* names : {"present", "omit"}) {
        CAPTURE(names);
        scoped_option live("live_names", names, "present");
        anvil::program p = anvil::compile({b.out}, ane_options(cache));
        CHECK(p.placement().refused() == 0);
        CHECK(max_difference(want[0], p.run(b.inputs)[0]) < 1e-2);
    }
    CHECK(sim().violations() == "");
}

TEST_CASE("ane fidelity: a PlaneStride past the row is the channel stride of every surface") {
    temporary_folder cache;
    block b;
    const auto want = anvil::compile({b.out}).run(b.inputs);
    scoped_option pad("plane_stride_pad", "256", "0");
    scoped_option live("live_names", "omit", "present");
    anvil::program p = anvil::compile({b.out}, ane_options(cache));
    CHECK(p.placement().refused() == 0);
    CHECK(max_difference(want[0], p.run(b.inputs)[0]) < 1e-2);
    CHECK(sim().violations() == "");
}

TEST_CASE("ane fidelity: the on-disk cache stages model.mil and weights/ in the model-URL directory") {
    temporary_folder cache;
    block b;
    {
        anvil::program p = anvil::compile({b.out}, ane_options(cache));
        REQUIRE(p.placement().segments.size() == 1);
        CHECK_FALSE(p.placement().segments[0].cached);
    }
    std::size_t programs = 0;
    for (const auto& entry : std::filesystem::directory_iterator(cache.path / "ane")) {
        if (!entry.is_directory()) continue;
        ++programs;
        CHECK(std::filesystem::exists(entry.path() / "model.mil"));
        // One weight.bin, or on M1/M2 one file per weight (RUNTIME.md §0 #15: the `weight_files` default).
        const bool per_weight = anvil::detail::ane::is_h13_or_h14(anvil_test::simulated_architecture());
        CHECK(std::filesystem::exists(entry.path() / "weights" / (per_weight ? "w0.bin" : "weight.bin")));
        CHECK(std::filesystem::exists(entry.path() / "weights" / "w1.bin") == per_weight);
    }
    CHECK(programs == 1);
    anvil::program again = anvil::compile({b.out}, ane_options(cache));
    CHECK(again.placement().segments[0].cached);
}

TEST_CASE(
    "ane fidelity: narrow inputs and outputs are padded to a multiple of 32 on the host, sliced inside") {
    temporary_folder cache;
    // One row of 48 features to 24: a decode step's shape.
    anvil::graph g;
    const auto x = g.input("x", dtype::f32, dims{1, 48});
    const auto y =
        g.apply(op::linear, {x, g.constant(host_tensor::from(pattern(24 * 48, 23, 0.02f), dims{24, 48}))});
    const std::vector<anvil::named_tensor> inputs{
        {"x", host_tensor::from(pattern(48, 17, 0.1f), dims{1, 48})}};
    const auto want = anvil::compile({y}).run(inputs);
    anvil::program p = anvil::compile({y}, ane_options(cache));
    CHECK(p.placement().refused() == 0);
    CHECK(max_difference(want[0], p.run(inputs)[0]) < 1e-2);
    const std::string mil = p.dump();
    // [1, 48] moves as one row of 48 padded to 64, not as [1, 48, 1, 32]; the output [1, 24] as 32.
    CHECK(contains(mil, "tensor<fp16, [1, 1, 1, 64]> in000_x"));
    CHECK(contains(mil, "tensor<fp16, [1, 1, 1, 32]> out000 = pad("));
    // At their own width the simulator refuses the evaluate (RUNTIME.md §0 #3), so the segment runs on the
    // CPU.
    auto unpadded = ane_options(cache);
    unpadded.ane_lowering["io_width"] = "native";
    captured_warnings warnings;
    anvil::program refused = anvil::compile({y}, unpadded);
    REQUIRE(refused.placement().refused() == 1);
    CHECK(refused.placement().segments[0].refused_at == "evaluate");
    CHECK(contains(refused.placement().segments[0].framework_error, "32"));
    CHECK(max_difference(want[0], refused.run(inputs)[0]) < 1e-6);
    CHECK(warnings.lines.size() == 1);
}

TEST_CASE("ane fidelity: on M1/M2 attention and products run without matmul, matching the CPU") {
    temporary_folder cache;
    scoped_option chip("architecture", "h13g", "h16g");
    anvil::graph g;
    const auto q = g.input("q", dtype::f32, dims{1, 4, 8, 16});
    const auto k = g.input("k", dtype::f32, dims{1, 2, 8, 16});
    const auto v = g.input("v", dtype::f32, dims{1, 2, 8, 16});
    anvil::attributes causal;
    causal.causal = true;
    const auto projected =
        g.apply(op::linear, {q, g.constant(host_tensor::from(pattern(16 * 16, 13, 0.05f), dims{16, 16}))});
    const auto out = g.apply(op::attention, {projected, k, v}, causal);
    const std::vector<anvil::named_tensor> inputs{
        {"q", host_tensor::from(pattern(512, 11, 0.1f), dims{1, 4, 8, 16})},
        {"k", host_tensor::from(pattern(256, 13, 0.1f, 3), dims{1, 2, 8, 16})},
        {"v", host_tensor::from(pattern(256, 7, 0.1f, 5), dims{1, 2, 8, 16})}};
    const auto want = anvil::compile({out}).run(inputs);
    sim().reset();
    anvil::program p = anvil::compile({out}, ane_options(cache));
    CHECK(p.placement().refused() == 0);
    CHECK(max_difference(want[0], p.run(inputs)[0]) < 1e-2);
    CHECK(sim().counter("op:matmul") == 0);
    CHECK(sim().counter("op:reduce_sum") >= 2);
    CHECK(contains(p.dump(), "program(1.0)/ios16"));
    // Forcing matmul there is refused at compile and the segment runs on the CPU.
    auto native = ane_options(cache);
    native.ane_lowering["matmul"] = "native";
    native.ane_lowering["dialect"] = "decomposed";
    captured_warnings warnings;
    anvil::program refused = anvil::compile({out}, native);
    REQUIRE(refused.placement().refused() == 1);
    CHECK(refused.placement().segments[0].refused_at == "compile");
    CHECK(contains(refused.placement().segments[0].framework_error, "matmul"));
    CHECK(max_difference(want[0], refused.run(inputs)[0]) < 1e-5);
    CHECK(sim().violations() == "");
}

// Self-attention as the model recipes build it: projections of x [1, S, 32] split into heads, attention
// (with a padding mask input, causal, or grouped-query), the heads merged and projected back.
struct attention_block {
    anvil::graph g;
    anvil::value out;
    std::vector<anvil::named_tensor> inputs;
    std::int64_t heads = 4;

    attention_block(std::int64_t positions, const std::string& variant) {
        const std::int64_t kv_heads = variant == "grouped" ? 2 : heads, depth = 8;
        const auto x = g.input("x", dtype::f32, dims{1, positions, 32});
        int seed = 3;
        const auto project = [&](std::int64_t outputs) {
            seed += 2;
            return g.apply(op::linear,
                           {x, g.constant(host_tensor::from(
                                   pattern(static_cast<std::size_t>(outputs) * 32, 23, 0.02f, seed),
                                   dims{outputs, 32}))});
        };
        const auto split = [&](anvil::value projected, std::int64_t count) {
            anvil::attributes shape;
            shape.sizes = {1, positions, count, depth};
            anvil::attributes order;
            order.axes = {0, 2, 1, 3};
            return g.apply(op::permute, {g.apply(op::reshape, {projected}, shape)}, order);
        };
        const auto q = split(project(heads * depth), heads);
        const auto k = split(project(kv_heads * depth), kv_heads);
        const auto v = split(project(kv_heads * depth), kv_heads);
        anvil::attributes a;
        a.causal = variant == "causal";
        inputs.push_back({"x", host_tensor::from(pattern(static_cast<std::size_t>(positions) * 32, 17, 0.1f),
                                                 dims{1, positions, 32})});
        anvil::value context;
        if (variant == "mask") {
            const auto mask = g.input("mask", dtype::f32, dims{1, 1, 1, positions});
            context = g.apply(op::attention, {q, k, v, mask}, a);
            std::vector<float> padding(static_cast<std::size_t>(positions), 0.0f);
            for (std::size_t i = padding.size() - 3; i < padding.size(); ++i)
                padding[i] = -1e4f;  // the last three positions are padding (finite, MIL.md §2.3)
            inputs.push_back({"mask", host_tensor::from(padding, dims{1, 1, 1, positions})});
        } else {
            context = g.apply(op::attention, {q, k, v}, a);
        }
        anvil::attributes order;
        order.axes = {0, 2, 1, 3};
        anvil::attributes merged;
        merged.sizes = {1, positions, heads * depth};
        const auto joined = g.apply(op::reshape, {g.apply(op::permute, {context}, order)}, merged);
        out = g.apply(op::linear,
                      {joined, g.constant(host_tensor::from(pattern(32 * 32, 19, 0.02f), dims{32, 32}))});
    }
};

TEST_CASE("ane fidelity: attention over projections runs per head in split-einsum form, matching the CPU") {
    temporary_folder cache;
    for (const char* chip : {"h16g", "h13g"}) {
        scoped_option architecture("architecture", chip, "h16g");
        for (const std::string variant : {"mask", "causal", "grouped"}) {
            INFO(std::string(chip) << " " << variant);
            attention_block b(64, variant);  // 64 positions: the I/O surfaces need no transpose either
            const auto want = anvil::compile({b.out}).run(b.inputs);
            sim().reset();
            auto options = ane_options(cache);
            options.strict_device = true;
            anvil::program p = anvil::compile({b.out}, options);
            CHECK(p.placement().segments.size() == 1);
            CHECK(max_difference(want[0], p.run(b.inputs)[0]) < 1e-2);
            CHECK(sim().counter("op:matmul") == 0);
            // The width axis moves once, for k; q, v and the result stay [1, C, 1, S].
            CHECK(sim().counter("op:transpose") == 1);
            if (std::string(chip) == "h16g") {
                CHECK(sim().counter("op:einsum") == 2 * b.heads);
                CHECK(sim().counter("op:softmax") == b.heads);
            } else {
                // No product of two computed tensors on M1/M2: mul and reduce_sum in the same layout.
                CHECK(sim().counter("op:einsum") == 0);
                CHECK(sim().counter("op:reduce_sum") == 2 * b.heads);
            }
            CHECK(sim().violations() == "");
        }
    }
}

TEST_CASE("ane fidelity: pooling becomes slices and maximum, and a depthwise conv, matching the CPU") {
    temporary_folder cache;
    anvil::graph g;
    const auto x = g.input("x", dtype::f32, dims{1, 4, 9, 9});
    const auto mixed =
        g.apply(op::conv2d, {x, g.constant(host_tensor::from(pattern(16, 5, 0.2f), dims{4, 4, 1, 1}))}, [] {
            anvil::attributes a;
            a.kernel = {1, 1};
            return a;
        }());
    anvil::attributes window;
    window.kernel = {3, 3};
    window.stride = {2, 2};
    window.padding = {1, 1, 1, 1};
    window.count_include_pad = false;
    const auto biggest = g.apply(op::max_pool2d, {mixed}, window);
    const auto mean = g.apply(op::avg_pool2d, {mixed}, window);
    anvil::attributes counted = window;
    counted.count_include_pad = true;
    const auto mean_counted = g.apply(op::avg_pool2d, {mixed}, counted);
    const std::vector<anvil::named_tensor> inputs{
        {"x", host_tensor::from(pattern(324, 31, 0.1f), dims{1, 4, 9, 9})}};
    const auto want = anvil::compile({biggest, mean, mean_counted}).run(inputs);
    sim().reset();
    anvil::program p = anvil::compile({biggest, mean, mean_counted}, ane_options(cache));
    CHECK(p.placement().refused() == 0);
    const auto got = p.run(inputs);
    for (std::size_t i = 0; i < 3; ++i) {
        CAPTURE(i);
        CHECK(max_difference(want[i], got[i]) < 5e-3);
    }
    CHECK(sim().counter("op:max_pool") == 0);
    CHECK(sim().counter("op:avg_pool") == 0);
    CHECK(sim().counter("op:maximum") == 8);
}

TEST_CASE("ane fidelity: a segment with no conv or matmul runs on the CPU, or is an error when strict") {
    temporary_folder cache;
    anvil::graph g;
    const auto a = g.input("a", dtype::f32, dims{4, 64});
    const auto b = g.input("b", dtype::f32, dims{4, 64});
    const auto y = g.apply(op::relu, {g.apply(op::add, {a, b})});
    const std::vector<anvil::named_tensor> inputs{
        {"a", host_tensor::from(pattern(256, 9, 0.1f), dims{4, 64})},
        {"b", host_tensor::from(pattern(256, 7, 0.1f), dims{4, 64})}};
    const long compiles = sim().counter("compiles");
    anvil::program p = anvil::compile({y}, ane_options(cache));
    REQUIRE(p.placement().segments.size() == 1);
    CHECK(p.placement().segments[0].device == "cpu");
    CHECK(contains(p.placement().segments[0].reason, "no conv or matmul"));
    CHECK(sim().counter("compiles") == compiles);
    CHECK(max_difference(anvil::compile({y}).run(inputs)[0], p.run(inputs)[0]) == 0.0);
    auto strict = ane_options(cache);
    strict.strict_device = true;
    CHECK_THROWS_WITH_AS((void)anvil::compile({y}, strict), doctest::Contains("holds no conv or matmul"),
                         anvil::unsupported_error);
}

TEST_CASE("ane fidelity: a conv kernel 16 or wider runs on the CPU with the reason") {
    temporary_folder cache;
    anvil::graph g;
    const auto x = g.input("x", dtype::f32, dims{1, 2, 4, 40});
    anvil::attributes wide;
    wide.kernel = {1, 16};
    const auto y = g.apply(
        op::conv2d, {x, g.constant(host_tensor::from(pattern(64, 9, 0.05f), dims{2, 2, 1, 16}))}, wide);
    anvil::program p = anvil::compile({y}, ane_options(cache));
    REQUIRE(p.placement().host_nodes.size() == 1);
    CHECK(contains(p.placement().host_nodes[0], "kernel"));
    CHECK(contains(p.placement().host_nodes[0], "§0 #7"));
    const std::vector<anvil::named_tensor> inputs{
        {"x", host_tensor::from(pattern(320, 11, 0.1f), dims{1, 2, 4, 40})}};
    CHECK(max_difference(anvil::compile({y}).run(inputs)[0], p.run(inputs)[0]) == 0.0);
}

TEST_CASE("ane fidelity: a patch conv of any size runs as a space-to-depth rearrangement and a 1x1 conv") {
    // kernel = stride = P, no padding: ViT's, DeiT's, CLIP's and SigLIP's patch embeddings (RUNTIME.md §0b
    // #26). A kernel 16 or wider fails to compile as a conv (§0 #7), so every size is rearranged. One graph
    // holds the four sizes, so the test costs one compile of the process's budget.
    const std::vector<std::int64_t> sizes{8, 14, 16, 32};
    temporary_folder cache;
    anvil::graph g;
    std::vector<anvil::value> outputs;
    std::vector<anvil::named_tensor> inputs;
    for (const std::int64_t p : sizes) {
        // Two images of 2 x 3 patches, and p / 2 columns past the last patch that the conv never reads.
        const dims shape{2, 3, 2 * p, 3 * p + p / 2};
        const std::string name = "x" + std::to_string(p);
        const auto x = g.input(name, dtype::f32, shape);
        anvil::attributes patch;
        patch.stride = {p, p};
        const auto weight = g.constant(
            host_tensor::from(pattern(static_cast<std::size_t>(8 * 3 * p * p), 23, 0.01f), dims{8, 3, p, p}));
        const auto bias = g.constant(host_tensor::from(pattern(8, 5, 0.1f), dims{8}));
        outputs.push_back(g.apply(op::conv2d, {x, weight, bias}, patch));
        CHECK(outputs.back().shape() == dims{2, 8, 2, 3});
        inputs.push_back(
            {name, host_tensor::from(pattern(static_cast<std::size_t>(shape.element_count()), 17, 0.1f, 5),
                                     shape)});
    }
    sim().reset();
    auto options = ane_options(cache);
    options.strict_device = true;  // a conv left on the CPU would be an error
    anvil::program program = anvil::compile(outputs, options);
    CHECK(sim().counter("op:conv") == 4);
    CHECK(sim().counter("op:transpose") >= 4);
    const anvil::placement_report report = program.placement();
    CHECK(report.host_nodes.empty());
    for (const auto& segment : report.segments)
        CHECK(segment.device == "ane");
    const std::string dump = program.dump();
    const std::vector<host_tensor> want = anvil::compile(outputs).run(inputs);
    const std::vector<host_tensor> got = program.run(inputs);
    for (std::size_t i = 0; i < sizes.size(); ++i) {
        const std::int64_t p = sizes[i];
        CAPTURE(p);
        // The conv's weight [8, 3, p, p] read as a 1x1 conv's [8, 3 * p * p, 1, 1] (the MIL in the dump).
        CHECK(contains(dump, "[8, " + std::to_string(3 * p * p) + ", 1, 1]"));
        double largest = 0.0;
        for (const float v : want[i].to_f32())
            largest = std::max(largest, static_cast<double>(std::fabs(v)));
        const auto values = got[i].to_f32();
        CHECK(std::all_of(values.begin(), values.end(), [](float v) { return std::isfinite(v); }));
        // fp16 inputs, weights and sums of 3 * p * p products: well within 1% of the largest output.
        const double error = max_difference(want[i], got[i]);
        MESSAGE("patch ", p, ": max error ", error, " of outputs up to ", largest);
        CHECK(error < 1e-2 * largest);
    }
    CHECK(sim().violations() == "");
}

TEST_CASE("ane fidelity: log gets a positive epsilon, so the simulator warns of none") {
    temporary_folder cache;
    anvil::graph g;
    const auto x = g.input("x", dtype::f32, dims{6, 64});
    const auto y = g.apply(
        op::linear,
        {g.apply(op::log, {x}), g.constant(host_tensor::from(pattern(32 * 64, 21, 0.02f), dims{32, 64}))});
    std::vector<float> positive = pattern(384, 13, 0.1f);
    for (float& v : positive)
        v = std::fabs(v) + 0.2f;
    const std::vector<anvil::named_tensor> inputs{{"x", host_tensor::from(positive, dims{6, 64})}};
    sim().reset();
    anvil::program p = anvil::compile({y}, ane_options(cache));
    CHECK(contains(p.dump(), "epsilon"));
    CHECK(max_difference(anvil::compile({y}).run(inputs)[0], p.run(inputs)[0]) < 2e-2);
    CHECK(sim().violations() == "");
}

TEST_CASE("ane fidelity: loads are retried with backoff; a lasting refusal runs the segment on the CPU") {
    temporary_folder cache;
    block b;
    const auto want = anvil::compile({b.out}).run(b.inputs);
    auto options = ane_options(cache);
    options.cache_dir = "none";
    options.ane_load_first_retry_delay = std::chrono::milliseconds(1);
    {
        scoped_option failures("inject_load_failures", "3", "0");
        anvil::program p = anvil::compile({b.out}, options);
        CHECK(p.placement().refused() == 0);
        CHECK(max_difference(want[0], p.run(b.inputs)[0]) < 1e-2);
    }
    {
        // Refused in every form it is lowered in (ios18, ios16, decomposed): 7 tries each.
        scoped_option failures("inject_load_failures", "100", "0");
        captured_warnings warnings;
        anvil::program p = anvil::compile({b.out}, options);
        REQUIRE(p.placement().refused() == 1);
        CHECK(p.placement().segments[0].refused_at == "load");
        CHECK(contains(p.placement().segments[0].framework_error, "after 7 tries"));
        if (!anvil::detail::ane::is_h13_or_h14(anvil_test::simulated_architecture()))  // M1/M2: ios16 already
            CHECK(contains(p.placement().segments[0].framework_error,
                           "lowered as program(1.0)/ios16, refused at load"));
        CHECK(max_difference(want[0], p.run(b.inputs)[0]) < 1e-6);
        REQUIRE(warnings.lines.size() == 1);
        CHECK(contains(warnings.lines[0], "refused at load"));
    }
    {
        // The backoff one program spends is capped across its forms: 300 ms, where 100 ms doubling over 7
        // tries in 3 forms would wait 19 s.
        scoped_option failures("inject_load_failures", "100", "0");
        options.ane_load_first_retry_delay = std::chrono::milliseconds(100);
        options.ane_load_max_backoff = std::chrono::milliseconds(300);
        const auto start = std::chrono::steady_clock::now();
        captured_warnings warnings;
        anvil::program p = anvil::compile({b.out}, options);
        const auto waited = std::chrono::steady_clock::now() - start;
        REQUIRE(p.placement().refused() == 1);
        CHECK(contains(p.placement().segments[0].framework_error, "the program's backoff is spent"));
        CHECK(waited < std::chrono::seconds(3));
    }
    CHECK(sim().counter("live_programs") == 0);
}

TEST_CASE("ane fidelity: without _ANEDeviceInfo the chip is unknown and the lowering most conservative") {
    temporary_folder cache;
    block b;
    const auto want = anvil::compile({b.out}).run(b.inputs);
    scoped_option absent("device_info", "absent", "present");
    anvil::program p = anvil::compile({b.out}, ane_options(cache));
    CHECK(p.placement().device == "unknown");
    CHECK(contains(p.placement().lowering, "the chip is unknown"));
    CHECK(contains(p.placement().lowering, "matmul=decomposed"));
    CHECK(contains(p.dump(), "program(1.0)/ios16"));
    CHECK(max_difference(want[0], p.run(b.inputs)[0]) < 1e-2);
}

TEST_CASE(
    "ane fidelity: the compile budget warns near its end; a compile the framework refuses runs on the CPU") {
    temporary_folder cache;
    auto options = ane_options(cache);
    options.cache_dir = "none";
    const long done = anvil::detail::ane::compiles_in_process().load();
    options.ane_compile_budget = done + 14;  // the warning comes 10 before it: at the 4th compile from here
    captured_warnings warnings;
    for (int i = 0; i < 3; ++i) {
        block b(static_cast<std::int64_t>(3 + i));
        (void)anvil::compile({b.out}, options);
    }
    CHECK(warnings.lines.empty());
    {
        block b(6);
        (void)anvil::compile({b.out}, options);
    }
    REQUIRE(warnings.lines.size() == 1);
    CHECK(contains(warnings.lines[0], "compiled"));
    CHECK(contains(warnings.lines[0], "ANVIL_ANE_COMPILE_BUDGET"));
    // The framework's own refusal: the segment runs on the CPU, with the framework's message.
    {
        scoped_option low("compile_budget", "0", "119");
        block b(7);
        anvil::program p = anvil::compile({b.out}, options);
        REQUIRE(p.placement().refused() == 1);
        CHECK(p.placement().segments[0].refused_at == "compile");
        CHECK(max_difference(anvil::compile({b.out}).run(b.inputs)[0], p.run(b.inputs)[0]) < 1e-6);
    }
}

TEST_CASE(
    "ane fidelity: a segment refused at compile, load or evaluate falls back to the CPU and is reported") {
    temporary_folder cache;
    block b;
    const auto want = anvil::compile({b.out}).run(b.inputs);
    for (const char* fault : {"fail_compile_op", "fail_load_op", "fail_eval_op"}) {
        CAPTURE(fault);
        // layer_norm: no form of the segment does without it (softmax, decomposed, does: the next case).
        scoped_option injected(fault, "layer_norm", "");
        captured_warnings warnings;
        auto options = ane_options(cache);
        options.cache_dir = "none";
        options.ane_load_first_retry_delay = std::chrono::milliseconds(1);  // a refused load is tried 7 times
        anvil::program p = anvil::compile({b.out}, options);
        const anvil::placement_report report = p.placement();
        REQUIRE(report.refused() == 1);
        const std::string stage = std::string(fault) == "fail_compile_op" ? "compile"
                                  : std::string(fault) == "fail_load_op"  ? "load"
                                                                          : "evaluate";
        CHECK(report.segments[0].refused_at == stage);
        CHECK(report.segments[0].device == "cpu");
        CHECK(contains(report.segments[0].framework_error, "layer_norm"));
        CHECK(max_difference(want[0], p.run(b.inputs)[0]) < 1e-6);
        REQUIRE(warnings.lines.size() == 1);
        CHECK(contains(warnings.lines[0], "layer_norm"));
        CHECK(contains(p.dump(), "refused"));
        CHECK(contains(p.dump(), report.segments[0].framework_error));

        options.strict_device = true;
        CHECK_THROWS_WITH_AS((void)anvil::compile({b.out}, options), doctest::Contains("layer_norm"),
                             anvil::unsupported_error);
    }
    CHECK(sim().counter("live_programs") == 0);
}

TEST_CASE("ane fidelity: the capability record decides each op's variant, and keys the program cache") {
    temporary_folder cache;
    anvil::ane_selftest_options options;
    options.repeats = 1;
    const std::filesystem::path record_file = cache.path / "record.json";
    anvil::graph g;
    const auto a = g.input("a", dtype::f32, dims{2, 8, 32});
    const auto b = g.input("b", dtype::f32, dims{2, 32, 32});
    const auto product = g.apply(
        op::matmul,
        {g.apply(op::linear, {a, g.constant(host_tensor::from(pattern(1024, 17, 0.02f), dims{32, 32}))}), b});
    const std::vector<anvil::named_tensor> inputs{
        {"a", host_tensor::from(pattern(512, 9, 0.1f), dims{2, 8, 32})},
        {"b", host_tensor::from(pattern(2048, 7, 0.1f), dims{2, 32, 32})}};
    const auto want = anvil::compile({product}).run(inputs);
    const auto compile_with_record = [&] {
        auto compile = ane_options(cache);
        compile.ane_capabilities = record_file.string();
        sim().reset();
        anvil::program p = anvil::compile({product}, compile);
        CHECK(max_difference(want[0], p.run(inputs)[0]) < 2e-2);
        CHECK(contains(p.placement().lowering, record_file.string()));
        return sim().counter("op:matmul");
    };
    {
        // On M1 the probe of native matmul fails, so the record sends products through reduce_sum.
        scoped_option chip("architecture", "h13g", "h16g");
        const auto record = anvil::ane_probe_capabilities(options);
        CHECK(record.chip == "h13g");
        CHECK_FALSE(record.features.at("matmul").at("native").held);
        CHECK(contains(record.features.at("matmul").at("native").error, "matmul"));
        CHECK(record.features.at("matmul").at("decomposed").held);
        CHECK(record.best(anvil::detail::ane::lowering_feature::matmul) ==
              anvil::detail::ane::lowering_variant::decomposed);
        // The simulator refuses pooling ops and narrow surfaces by default, and requires an anchor.
        CHECK_FALSE(record.features.at("max_pool").at("native").held);
        CHECK_FALSE(record.features.at("io_width").at("native").held);
        CHECK_FALSE(record.features.at("anchorless").at("native").held);
        anvil::write_capability_record(record, record_file);
        CHECK(compile_with_record() == 0);
    }
    {
        scoped_option chip("architecture", "h16g", "h16g");
        const auto record = anvil::ane_probe_capabilities(options);
        CHECK(record.features.at("matmul").at("native").held);
        anvil::write_capability_record(record, record_file);
        CHECK(compile_with_record() > 0);
        // A record for another chip is an error naming both, never a silent choice.
        scoped_option other("architecture", "h15g", "h16g");
        auto compile = ane_options(cache);
        compile.ane_capabilities = record_file.string();
        CHECK_THROWS_WITH((void)anvil::compile({product}, compile), doctest::Contains("h15g"));
    }
    // The digest of what held keys the cache: two records that differ compile to different keys.
    anvil::detail::ane::capability_record x, y;
    x.features["matmul"]["native"].held = true;
    y.features["matmul"]["native"].held = false;
    CHECK(x.digest() != y.digest());
    CHECK(anvil::detail::ane::program_key("mil", {}, "h16g", x.digest()) !=
          anvil::detail::ane::program_key("mil", {}, "h16g", y.digest()));
    // A malformed record is an error naming the file.
    {
        std::ofstream out(record_file, std::ios::trunc);
        out << "{\"format\": \"anvil-ane-capabilities/1\", \"features\": 3}";
    }
    auto compile = ane_options(cache);
    compile.ane_capabilities = record_file.string();
    const std::string named = record_file.string();
    CHECK_THROWS_WITH((void)anvil::compile({product}, compile), doctest::Contains(named.c_str()));
}

#endif  // ANVIL_ANE_SIM_PATH

}  // namespace test_ane_fidelity
