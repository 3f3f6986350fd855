// device::coreml end to end on the simulator, which implements the Core ML classes the backend calls
// (tools/ane-sim/runtime_coreml.cpp) and reads the packages it compiles as Core ML does: numbers against the
// CPU backend, the compile-once cache (the permanent .mlmodelc path, in this process and in a second one),
// strided outputs, resident inputs, refused packages, and no leaked objects.
//
// Where the expected values come from: the CPU backend (itself checked against PyTorch in the family tests),
// with the fp16 tolerance the ANE backend's tests use; the simulator's counters for what was compiled.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>
#include <anvil/backend/ane/ane_program.hpp>

#include "ane_simulator.hpp"
#include "ane_test_block.hpp"
#include "model_test_support.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace test_coreml_backend {

#ifdef ANVIL_ANE_SIM_PATH

using anvil::dims;
using anvil::dtype;
using anvil::host_tensor;
using anvil::op;
using anvil_test::max_difference;
using anvil_test::sim;
using anvil_test::temporary_folder;

using block = anvil_test::ane_block;  // linear, gelu, layer_norm and softmax: one Core ML model

// A simulator counter, 0 before its first count (the simulator reports -1 for a counter never counted).
long count(const char* name) {
    return std::max(0L, sim().counter(name));
}

anvil::compile_options coreml_options(const std::filesystem::path& cache) {
    anvil::compile_options options;
    options.target = anvil::device::coreml;
    options.cache_dir = cache.string();
    return options;
}

anvil::compile_options cpu_options() {
    anvil::compile_options options;
    options.target = anvil::device::cpu;
    return options;
}

TEST_CASE("coreml route: a block runs as a Core ML model and equals the CPU within fp16 tolerance") {
    sim();
    const long live_before = sim().counter("live_objects");
    temporary_folder cache("anvil-coreml-cache");
    block b;
    const auto expected = anvil::compile({b.out}, cpu_options()).run(b.inputs);
    const long compiles = count("coreml_compiles");
    const long device_compiles = count("coreml_device_compiles");
    const long predictions = count("coreml_predictions");
    {
        auto program = anvil::compile({b.out}, coreml_options(cache.path));
        const auto placement = program.placement();
        CHECK(placement.backend == "coreml");
        REQUIRE(placement.segments.size() == 1);
        CHECK(placement.segments[0].device == "coreml");
        CHECK_FALSE(placement.segments[0].cached);
        const auto got = program.run(b.inputs);
        const double error = max_difference(got[0], expected[0]);
        MESSAGE("Core ML route vs CPU: max abs difference ", error);
        CHECK(error < 2e-3);
        CHECK(program.dump().find("Core ML program") != std::string::npos);
    }
    CHECK(count("coreml_compiles") == compiles + 1);
    CHECK(count("coreml_device_compiles") == device_compiles + 1);
    CHECK(count("coreml_predictions") == predictions + 2);  // the first evaluation, then run
    // The compiled model stayed at its permanent path, keyed by the package digest; the package did not.
    std::size_t compiled_models = 0;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(cache.path)) {
        if (entry.path().extension() == ".mlmodelc") ++compiled_models;
        CHECK(entry.path().extension() != ".mlpackage");
    }
    CHECK(compiled_models == 1);
    CHECK(sim().counter("live_objects") == live_before);
    CHECK(sim().violations() == "");
}

// The bytes of the weight files of the models compiled into `cache` (their .mlmodelc folders).
std::uintmax_t weight_bytes(const std::filesystem::path& cache) {
    std::uintmax_t bytes = 0;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(cache))
        if (entry.is_regular_file() && entry.path().extension() == ".bin" &&
            entry.path().parent_path().filename() == "weights")
            bytes += entry.file_size();
    return bytes;
}

TEST_CASE("coreml route: compressed weights stay compressed in the Core ML model and equal the CPU's") {
    sim();
    block b;
    temporary_folder plain_cache("anvil-coreml-cache");
    (void)anvil::compile({b.out}, coreml_options(plain_cache.path)).run(b.inputs);
    const std::uintmax_t plain = weight_bytes(plain_cache.path);
    for (const auto how : {anvil::weight_compression::int8, anvil::weight_compression::lut4}) {
        CAPTURE(anvil::weight_compression_name(how));
        anvil::compile_options cpu = cpu_options();
        cpu.weight_compression = how;
        const auto expected = anvil::compile({b.out}, cpu).run(b.inputs);
        temporary_folder cache("anvil-coreml-cache");
        anvil::compile_options options = coreml_options(cache.path);
        options.weight_compression = how;
        const auto got = anvil::compile({b.out}, options).run(b.inputs);
        const double error = max_difference(got[0], expected[0]);
        MESSAGE(anvil::weight_compression_name(how),
                ": Core ML route vs the CPU with the same weights, max abs ", "difference ", error,
                "; weight file ", weight_bytes(cache.path), " bytes against ", plain, " in fp16");
        CHECK(error < 2e-3);
        // The [32, 48] weight's 3072 fp16 bytes become 1536 int8 or 768 palette-index bytes (and a scale or a
        // palette).
        CHECK(weight_bytes(cache.path) + (how == anvil::weight_compression::int8 ? 1200 : 1900) < plain);
        // The private path keeps them compressed too: its program holds the int8 values or palette indices,
        // as the Neural Engine's resident weight bytes show against the same program in fp16.
        anvil::compile_options private_path = options;
        private_path.target = anvil::device::ane;
        private_path.weight_compression = anvil::weight_compression::none;
        std::size_t fp16_bytes = 0;
        {
            const auto program = anvil::compile({b.out}, private_path);
            fp16_bytes = anvil::resident_weight_bytes().ane_bytes;
        }
        private_path.weight_compression = how;
        auto compressed = anvil::compile({b.out}, private_path);
        const std::size_t held = anvil::resident_weight_bytes().ane_bytes;
        MESSAGE(anvil::weight_compression_name(how), ": the private path's program holds ", held,
                " weight bytes, against ", fp16_bytes, " in fp16");
        CHECK(held + (how == anvil::weight_compression::int8 ? 1200 : 1900) < fp16_bytes);
        CHECK(compressed.placement().segments[0].device == "ane");
        CHECK(max_difference(compressed.run(b.inputs)[0], expected[0]) < 2e-3);
    }
    CHECK(sim().violations() == "");
}

TEST_CASE(
    "private path: a compiler that refuses compressed weights gets them expanded to fp16, and says so") {
    sim();
    block b;
    anvil::compile_options cpu = cpu_options();
    cpu.weight_compression = anvil::weight_compression::lut4;
    const auto expected = anvil::compile({b.out}, cpu).run(b.inputs);
    temporary_folder cache("anvil-private-cache");
    anvil::compile_options private_path;
    private_path.target = anvil::device::ane;
    private_path.cache_dir = cache.path.string();
    private_path.weight_compression = anvil::weight_compression::lut4;
    const anvil_test::scoped_option refuse_palettes("fail_compile_op", "constexpr_lut_to_dense", "");
    auto program = anvil::compile({b.out}, private_path);
    const auto placement = program.placement();
    REQUIRE(placement.segments.size() == 1);
    CHECK(placement.segments[0].device == "ane");
    CAPTURE(placement.segments[0].reason);
    CHECK(placement.segments[0].reason.find("it runs with its compressed weights expanded to fp16") !=
          std::string::npos);
    CHECK(placement.segments[0].reason.find("constexpr_lut_to_dense") != std::string::npos);
    CHECK(max_difference(program.run(b.inputs)[0], expected[0]) < 2e-3);
    // Under strict_device too: the segment still runs on the Neural Engine.
    private_path.strict_device = true;
    CHECK(anvil::compile({b.out}, private_path).placement().segments[0].device == "ane");
    CHECK(sim().violations() == "");
    sim().reset();
}

TEST_CASE("coreml route: weights the graph dequantises itself stay compressed too") {
    sim();
    // A palette the graph was built with (as a checkpoint stored in palettes would give it): indices [32, 48]
    // into 16 values, read by a linear.
    anvil::graph g;
    std::vector<std::uint8_t> indices(32 * 48);
    for (std::size_t i = 0; i < indices.size(); ++i)
        indices[i] = static_cast<std::uint8_t>(i * 7 % 16);
    std::vector<float> palette(16), x(5 * 48);
    for (std::size_t i = 0; i < palette.size(); ++i)
        palette[i] = (static_cast<float>(i) - 7.5f) * 0.02f;
    for (std::size_t i = 0; i < x.size(); ++i)
        x[i] = static_cast<float>(static_cast<int>(i * 5 % 17) - 8) * 0.1f;
    const auto input = g.input("x", dtype::f32, dims{5, 48});
    const auto w = g.apply(op::dequantize_lut, {g.constant(host_tensor::from(indices, dims{32, 48})),
                                                g.constant(host_tensor::from(palette, dims{16}))});
    const auto y = g.apply(op::linear, {input, w});
    const std::vector<anvil::named_tensor> inputs{{"x", host_tensor::from(x, dims{5, 48})}};
    const auto expected = anvil::compile({y}, cpu_options()).run(inputs);
    temporary_folder cache("anvil-coreml-cache");
    const auto got = anvil::compile({y}, coreml_options(cache.path)).run(inputs);
    CHECK(max_difference(got[0], expected[0]) < 2e-3);
    // 1536 indices of 4 bits, not 3072 bytes of fp16.
    const std::uintmax_t bytes = weight_bytes(cache.path);
    MESSAGE("weight file: ", bytes, " bytes");
    CHECK(bytes < 1536);
    CHECK(sim().violations() == "");
}

TEST_CASE("coreml route: loading the same model again compiles nothing, in this process and in another") {
    sim();
    temporary_folder cache("anvil-coreml-cache");
    block b;
    { (void)anvil::compile({b.out}, coreml_options(cache.path)).run(b.inputs); }
    const long compiles = count("coreml_compiles");
    const long device_compiles = count("coreml_device_compiles");
    const long hits = count("coreml_cache_hits");
    {
        auto again = anvil::compile({b.out}, coreml_options(cache.path));
        CHECK(again.placement().segments[0].cached);
        (void)again.run(b.inputs);
    }
    CHECK(count("coreml_compiles") == compiles);                // no compileModelAtURL:
    CHECK(count("coreml_device_compiles") == device_compiles);  // the same .mlmodelc path
    CHECK(count("coreml_cache_hits") == hits + 1);
    // A second process: the permanent path survives, so it compiles nothing either. Core ML called the
    // compute plan's handler on a thread of its own, which takes the simulator's lock once the handler
    // has returned: fork only once it is done (counting live objects waits for it), or the child inherits
    // the lock held and waits forever (this test hung CI so).
    (void)count("live_objects");
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        int status = 1;
        try {
            auto third = anvil::compile({b.out}, coreml_options(cache.path));
            const bool cached = third.placement().segments[0].cached;
            (void)third.run(b.inputs);
            status = cached && count("coreml_compiles") == compiles &&
                             count("coreml_device_compiles") == device_compiles
                         ? 0
                         : 2;
        } catch (...) {
            status = 3;
        }
        _exit(status);
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(sim().violations() == "");
}

TEST_CASE("coreml route: a damaged cache entry is compiled again, not trusted") {
    sim();
    temporary_folder cache("anvil-coreml-cache");
    block b;
    { (void)anvil::compile({b.out}, coreml_options(cache.path)); }
    for (const auto& entry : std::filesystem::recursive_directory_iterator(cache.path)) {
        if (entry.path().filename() == "coremldata.bin") {
            std::ofstream(entry.path(), std::ios::trunc) << "not a model";
            break;
        }
    }
    const long compiles = count("coreml_compiles");
    auto program = anvil::compile({b.out}, coreml_options(cache.path));
    CHECK(count("coreml_compiles") == compiles + 1);
    CHECK_FALSE(program.placement().segments[0].cached);
    const auto expected = anvil::compile({b.out}, cpu_options()).run(b.inputs);
    CHECK(max_difference(program.run(b.inputs)[0], expected[0]) < 2e-3);
}

TEST_CASE("coreml route: host-only ops run on the CPU between Core ML models, resident inputs stay put") {
    sim();
    temporary_folder cache("anvil-coreml-cache");
    anvil::graph g;
    std::vector<float> table(40 * 32), w(24 * 32);
    for (std::size_t i = 0; i < table.size(); ++i)
        table[i] = static_cast<float>(static_cast<int>(i * 11 % 23) - 11) * 0.05f;
    for (std::size_t i = 0; i < w.size(); ++i)
        w[i] = static_cast<float>(static_cast<int>(i * 5 % 13) - 6) * 0.03f;
    const auto ids = g.input("ids", dtype::i32, dims{6});
    const auto bias = g.input("bias", dtype::f32, dims{6, 24});
    auto embedded = g.apply(op::gather, {g.constant(host_tensor::from(table, dims{40, 32})), ids});
    auto h = g.apply(op::linear, {embedded, g.constant(host_tensor::from(w, dims{24, 32}))});
    h = g.apply(op::add, {h, bias});
    const auto out = g.apply(op::relu, {h});
    auto options = coreml_options(cache.path);
    options.resident_inputs = {"bias"};
    auto program = anvil::compile({out}, options);
    auto reference = anvil::compile({out}, [] {
        auto o = cpu_options();
        o.resident_inputs = {"bias"};
        return o;
    }());
    const auto placement = program.placement();
    bool has_cpu = false, has_coreml = false;
    for (const auto& segment : placement.segments) {
        has_cpu = has_cpu || segment.device == "cpu";
        has_coreml = has_coreml || segment.device == "coreml";
    }
    CHECK(has_cpu);
    CHECK(has_coreml);
    const std::vector<std::int32_t> id_values{3, 0, 39, 7, 7, 21};
    const auto id_tensor = host_tensor::from(id_values, dims{6});
    std::vector<float> row(24);
    for (int step = 0; step < 3; ++step) {
        for (std::size_t i = 0; i < row.size(); ++i)
            row[i] = static_cast<float>(step) * 0.25f - static_cast<float>(i) * 0.01f;
        const std::vector<std::int64_t> at{step, 0};
        program.write_input("bias", at, host_tensor::from(row, dims{1, 24}));
        reference.write_input("bias", at, host_tensor::from(row, dims{1, 24}));
        const auto got = program.run({{"ids", id_tensor}});
        const auto want = reference.run({{"ids", id_tensor}});
        CAPTURE(step);
        CHECK(max_difference(got[0], want[0]) < 5e-3);
    }
    CHECK(sim().violations() == "");
}

// A cache-like resident input [8, 48] (a width that is no multiple of 32) added to a fresh input before a
// linear: the Core ML segment reads the resident input as an MLState buffer (macOS 15), which write_input
// writes in place, or, without MLState, as an input passed to every prediction.
struct resident_block {
    anvil::graph g;
    anvil::value out;
    host_tensor x;

    resident_block() {
        std::vector<float> w(32 * 48), xs(8 * 48);
        for (std::size_t i = 0; i < w.size(); ++i)
            w[i] = static_cast<float>(static_cast<int>(i * 7 % 17) - 8) * 0.02f;
        for (std::size_t i = 0; i < xs.size(); ++i)
            xs[i] = static_cast<float>(static_cast<int>(i * 3 % 11) - 5) * 0.1f;
        x = host_tensor::from(xs, dims{8, 48});
        const auto input = g.input("x", dtype::f32, dims{8, 48});
        const auto cache = g.input("cache", dtype::f32, dims{8, 48});
        out = g.apply(op::linear,
                      {g.apply(op::add, {input, cache}), g.constant(host_tensor::from(w, dims{32, 48}))});
    }

    // Writes row `step` of the cache in both programs, runs both and returns the largest difference.
    static double step(anvil::program& program, anvil::program& reference, int step, const host_tensor& x) {
        std::vector<float> row(48);
        for (std::size_t i = 0; i < row.size(); ++i)
            row[i] = static_cast<float>(step + 1) * 0.3f - static_cast<float>(i) * 0.02f;
        const std::vector<std::int64_t> at{step, 0};
        program.write_input("cache", at, host_tensor::from(row, dims{1, 48}));
        reference.write_input("cache", at, host_tensor::from(row, dims{1, 48}));
        return max_difference(program.run({{"x", x}})[0], reference.run({{"x", x}})[0]);
    }
};

anvil::compile_options with_resident_cache(anvil::compile_options options) {
    options.resident_inputs = {"cache"};
    return options;
}

TEST_CASE("coreml route: a resident input is an MLState buffer written in place, not passed to predictions") {
    sim();
    const long live_before = sim().counter("live_objects");
    temporary_folder cache("anvil-coreml-cache");
    resident_block b;
    auto reference = anvil::compile({b.out}, with_resident_cache(cpu_options()));
    {
        auto program = anvil::compile({b.out}, with_resident_cache(coreml_options(cache.path)));
        const auto placement = program.placement();
        REQUIRE(placement.segments.size() == 1);
        CHECK(placement.segments[0].device == "coreml");
        CHECK(placement.segments[0].reason.find("MLState") == std::string::npos);
        // The state is [1, 8, 1, 64]: its width 48 rounded up to a multiple of 32 (COREML.md §4.5), which the
        // simulator's compute plan requires for read_state to stay on the Neural Engine.
        const std::string dump = program.dump();
        CHECK(dump.find("state<tensor<fp16, [1, 8, 1, 64]>>") != std::string::npos);
        CHECK(dump.find("read_state") != std::string::npos);
        for (int step = 0; step < 4; ++step) {
            const long passed = count("coreml_input_bytes");
            const long accesses = count("coreml_state_accesses");
            CAPTURE(step);
            CHECK(resident_block::step(program, reference, step, b.x) < 5e-3);
            // Only x's [1, 8, 1, 64] fp16 surface goes with the prediction; the one-row write opened the
            // state.
            CHECK(count("coreml_input_bytes") - passed == 8 * 64 * 2);
            CHECK(count("coreml_state_accesses") - accesses == 1);
        }
        CHECK(program.read_input("cache").shape() == dims{8, 48});
    }
    CHECK(sim().counter("live_objects") == live_before);
    CHECK(sim().violations() == "");
}

TEST_CASE(
    "coreml route: before macOS 15, or under ios16, a resident input is passed and the report says why") {
    sim();
    temporary_folder cache("anvil-coreml-cache");
    resident_block b;
    const auto check_passed = [&](const anvil::compile_options& options, const char* why) {
        auto reference = anvil::compile({b.out}, with_resident_cache(cpu_options()));
        auto program = anvil::compile({b.out}, options);
        const auto placement = program.placement();
        REQUIRE(placement.segments.size() == 1);
        CHECK(placement.segments[0].device == "coreml");
        CHECK(placement.segments[0].reason.find("the resident inputs cache are passed to every prediction") !=
              std::string::npos);
        CHECK(placement.segments[0].reason.find(why) != std::string::npos);
        CHECK(program.dump().find("read_state") == std::string::npos);
        for (int step = 0; step < 3; ++step) {
            const long passed = count("coreml_input_bytes");
            CAPTURE(step);
            CHECK(resident_block::step(program, reference, step, b.x) < 5e-3);
            CHECK(count("coreml_input_bytes") - passed == 2 * 8 * 64 * 2);  // x and the cache
        }
    };
    {
        const anvil_test::scoped_option no_states("states", "absent", "present");
        check_passed(with_resident_cache(coreml_options(cache.path)), "before macOS 15");
    }
    auto ios16 = with_resident_cache(coreml_options(cache.path));
    ios16.ane_mil = anvil::mil_version::ios16;
    check_passed(ios16, "the ios16 dialect was asked for");
    CHECK(sim().violations() == "");
}

TEST_CASE("coreml route: strided outputs are read through their strides") {
    // The simulator pads every output row to 64 bytes (as the Neural Engine does, COREML.md §4.6) and fills
    // the padding with NaN bit patterns: an output read as if packed would carry them into the result.
    sim();
    temporary_folder cache("anvil-coreml-cache");
    anvil::graph g;
    std::vector<float> w(5 * 12);
    for (std::size_t i = 0; i < w.size(); ++i)
        w[i] = static_cast<float>(i % 7) * 0.1f - 0.3f;
    const auto x = g.input("x", dtype::f32, dims{3, 12});
    const auto y = g.apply(op::linear, {x, g.constant(host_tensor::from(w, dims{5, 12}))});
    std::vector<float> xs(36);
    for (std::size_t i = 0; i < xs.size(); ++i)
        xs[i] = static_cast<float>(i % 9) * 0.2f - 0.8f;
    const std::vector<anvil::named_tensor> inputs{{"x", host_tensor::from(xs, dims{3, 12})}};
    const auto got = anvil::compile({y}, coreml_options(cache.path)).run(inputs);
    const auto want = anvil::compile({y}, cpu_options()).run(inputs);
    CHECK(max_difference(got[0], want[0]) < 2e-3);
}

TEST_CASE("coreml route: a model Core ML cannot load runs on the CPU, or fails under strict_device") {
    // coreml_fail_loads=N makes the next N model loads fail, as a device Core ML refuses would.
    sim();
    temporary_folder cache("anvil-coreml-cache");
    block b;
    {
        const anvil_test::scoped_option fail_one_load("coreml_fail_loads", "1", "0");
        auto program = anvil::compile({b.out}, coreml_options(cache.path));
        const auto placement = program.placement();
        REQUIRE(placement.segments.size() == 1);
        CHECK(placement.segments[0].device == "cpu");
        CHECK(placement.segments[0].refused_at == "load");
        CHECK(placement.segments[0].framework_error.find("coreml_fail_loads") != std::string::npos);
        const auto expected = anvil::compile({b.out}, cpu_options()).run(b.inputs);
        CHECK(max_difference(program.run(b.inputs)[0], expected[0]) < 1e-5);
    }
    {
        const anvil_test::scoped_option fail_one_load("coreml_fail_loads", "1", "0");
        temporary_folder fresh("anvil-coreml-cache");
        auto strict = coreml_options(fresh.path);
        strict.strict_device = true;
        CHECK_THROWS_WITH_AS((void)anvil::compile({b.out}, strict), doctest::Contains("by Core ML"),
                             anvil::unsupported_error);
    }
    sim().reset();
}

TEST_CASE("coreml route: the compute plan names each op Core ML keeps off the ANE; strict_device refuses") {
    // Core ML runs an op its device compiler refuses on the CPU instead of failing (COREML.md §4.1); the
    // simulator's compute plan applies the ANE rulebook the same way. fail_compile_op=layer_norm makes the
    // rulebook refuse layer_norm, so the plan has it on the CPU and everything else on the Neural Engine.
    sim();
    temporary_folder cache("anvil-coreml-cache");
    block b;
    const long plans_before = count("coreml_compute_plans");
    {
        auto program = anvil::compile({b.out}, coreml_options(cache.path));
        const auto placement = program.placement();
        REQUIRE(placement.segments.size() == 1);
        CHECK(placement.segments[0].device == "coreml");
        CHECK(placement.segments[0].reason == "");  // every op on the Neural Engine
        CHECK(count("coreml_compute_plans") == plans_before + 1);
    }
    const anvil_test::scoped_option refuse_layer_norm("fail_compile_op", "layer_norm", "");
    temporary_folder second("anvil-coreml-cache");
    auto program = anvil::compile({b.out}, coreml_options(second.path));
    const auto placement = program.placement();
    REQUIRE(placement.segments.size() == 1);
    CHECK(placement.segments[0].device == "coreml");
    const std::string& reason = placement.segments[0].reason;
    CAPTURE(reason);
    CHECK(reason.find(".layer_norm (") != std::string::npos);  // "ios18.layer_norm (...)"
    CHECK(reason.find(") on the CPU") != std::string::npos);
    CHECK(reason.substr(reason.find("Neural Engine:")).find("linear") == std::string::npos);  // only it
    const auto expected = anvil::compile({b.out}, cpu_options()).run(b.inputs);
    CHECK(max_difference(program.run(b.inputs)[0], expected[0]) < 5e-3);
    auto strict = coreml_options(second.path);
    strict.strict_device = true;
    CHECK_THROWS_WITH_AS((void)anvil::compile({b.out}, strict), doctest::Contains("layer_norm"),
                         anvil::unsupported_error);
    CHECK(sim().violations() == "");
    sim().reset();
}

TEST_CASE("coreml route: products of computed tensors stay matmul, on the Neural Engine of an M1 too") {
    // RUNTIME.md §0b #25: Core ML runs matmul and einsum on every chip's Neural Engine; only the private
    // compiler refuses them on M1/M2 (§0 #4). The chip is unknown on this route, and the product stays native
    // rather than a broadcast mul and reduce_sum.
    sim();
    const anvil_test::scoped_option m1("architecture", "h13g", "h16g");
    anvil::graph g;
    std::vector<float> a(2 * 8 * 32), w(32 * 32), c(2 * 32 * 16);
    for (std::size_t i = 0; i < a.size(); ++i)
        a[i] = static_cast<float>(static_cast<int>(i * 5 % 13) - 6) * 0.05f;
    for (std::size_t i = 0; i < w.size(); ++i)
        w[i] = static_cast<float>(static_cast<int>(i * 7 % 17) - 8) * 0.02f;
    for (std::size_t i = 0; i < c.size(); ++i)
        c[i] = static_cast<float>(static_cast<int>(i * 3 % 11) - 5) * 0.1f;
    const auto x = g.input("a", dtype::f32, dims{2, 8, 32});
    const auto y = g.input("c", dtype::f32, dims{2, 32, 16});
    const auto product =
        g.apply(op::matmul, {g.apply(op::linear, {x, g.constant(host_tensor::from(w, dims{32, 32}))}), y});
    const std::vector<anvil::named_tensor> inputs{{"a", host_tensor::from(a, dims{2, 8, 32})},
                                                  {"c", host_tensor::from(c, dims{2, 32, 16})}};
    temporary_folder cache("anvil-coreml-cache");
    auto program = anvil::compile({product}, coreml_options(cache.path));
    const auto placement = program.placement();
    REQUIRE(placement.segments.size() == 1);
    CHECK(placement.segments[0].device == "coreml");
    CHECK(placement.segments[0].reason == "");  // every op on the Neural Engine
    CHECK(placement.lowering.find("matmul=native") != std::string::npos);
    CHECK(program.dump().find(" = matmul(") != std::string::npos);
    CHECK(program.dump().find("reduce_sum(") == std::string::npos);
    CHECK(max_difference(program.run(inputs)[0], anvil::compile({product}, cpu_options()).run(inputs)[0]) <
          1e-2);
    CHECK(sim().violations() == "");
    sim().reset();
}

TEST_CASE(
    "coreml route: without MLComputePlan (before macOS 14.4) the report says so; strict_device refuses") {
    sim();
    temporary_folder cache("anvil-coreml-cache");
    block b;
    {
        const anvil_test::scoped_option no_plan("compute_plan", "absent", "present");
        auto program = anvil::compile({b.out}, coreml_options(cache.path));
        const auto placement = program.placement();
        REQUIRE(placement.segments.size() == 1);
        CHECK(placement.segments[0].device == "coreml");
        CHECK(placement.segments[0].reason.find("MLComputePlan is missing") != std::string::npos);
        const auto expected = anvil::compile({b.out}, cpu_options()).run(b.inputs);
        CHECK(max_difference(program.run(b.inputs)[0], expected[0]) < 5e-3);
        auto strict = coreml_options(cache.path);
        strict.strict_device = true;
        CHECK_THROWS_WITH_AS((void)anvil::compile({b.out}, strict), doctest::Contains("macOS 14.4"),
                             anvil::unsupported_error);
    }
    sim().reset();
}

#endif  // ANVIL_ANE_SIM_PATH

}  // namespace test_coreml_backend
