// The ANE backend end to end on the simulator: every op against the CPU backend, partitioning and
// strict_device, the program cache (in this process and in a second one), the compile budget, and many
// compile/load/evaluate/unload cycles without leaked objects.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>
#include <anvil/backend/ane/ane_program.hpp>

#include "ane_simulator.hpp"
#include "ane_test_block.hpp"
#include "model_test_support.hpp"

#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace test_ane_backend {

#ifdef ANVIL_ANE_SIM_PATH

using anvil::dims;
using anvil::dtype;
using anvil::host_tensor;
using anvil::op;

using anvil_test::sim;
using anvil_test::temporary_folder;

using block = anvil_test::ane_block;

anvil::compile_options ane_options(const std::filesystem::path& cache) {
    anvil::compile_options options;
    options.target = anvil::device::ane;
    options.cache_dir = cache.string();
    return options;
}

using anvil_test::max_difference;

void expect_clean(const char* when) {
    INFO(when);
    CHECK(sim().violations() == "");
    CHECK(sim().counter("live_programs") == 0);
}

TEST_CASE("ane backend: every op runs on the simulator and matches the CPU within its fp16 tolerance") {
    sim();
    const long live_before = sim().counter("live_objects");
    anvil::ane_selftest_options options;
    options.ane.cache_dir = "none";
    options.repeats = 1;
    const auto rows = anvil::ane_selftest(options);
    REQUIRE(rows.size() >= 50);
    for (const auto& row : rows) {
        INFO(row.name, ": ", row.placement, ", error ", row.max_error, " (tolerance ", row.tolerance, ") ",
             row.note);
        CHECK(row.passed);
    }
    // The placements the README's table lists.
    std::map<std::string, std::string> placement;
    for (const auto& row : rows)
        placement[row.name] = row.placement;
    CHECK(placement["relu"] == "native");
    CHECK(placement["linear"] == "native");
    CHECK(placement["conv2d"] == "native");
    CHECK(placement["layer_norm"] == "native");
    CHECK(placement["gelu"] == "decomposed");
    CHECK(placement["rsqrt"] == "decomposed");
    CHECK(placement["attention (grouped-query, causal)"] == "decomposed");
    CHECK(placement["rms_norm (large values)"] == "decomposed");
    CHECK(placement["gather"] == "host");
    CHECK(placement["argmax"] == "host");
    CHECK(sim().counter("live_objects") == live_before);
    expect_clean("after the op table");
}

TEST_CASE(
    "ane backend: a graph with host-only ops is split between the ANE and the CPU, or refused when strict") {
    sim();
    anvil::graph g;
    std::vector<float> table(50 * 24);
    for (std::size_t i = 0; i < table.size(); ++i)
        table[i] = static_cast<float>(static_cast<int>(i * 11 % 23) - 11) * 0.05f;
    std::vector<float> w(16 * 24);
    for (std::size_t i = 0; i < w.size(); ++i)
        w[i] = static_cast<float>(static_cast<int>(i * 5 % 13) - 6) * 0.03f;
    const auto ids = g.input("ids", dtype::i32, dims{6});
    auto h = g.apply(op::gather, {g.constant(host_tensor::from(table, dims{50, 24}), "embeddings"), ids});
    h = g.apply(op::linear, {h, g.constant(host_tensor::from(w, dims{16, 24}))});
    h = g.apply(op::silu, {h});
    anvil::attributes arg;
    arg.axis = 1;
    const auto best = g.apply(op::argmax, {h}, arg);
    const std::vector<anvil::named_tensor> inputs{
        {"ids", host_tensor::from(std::vector<std::int32_t>{4, 0, 49, 17, 17, 3}, dims{6})}};

    temporary_folder cache;
    anvil::program cpu = anvil::compile({h, best});
    auto ane = std::make_unique<anvil::program>(anvil::compile({h, best}, ane_options(cache.path)));
    const auto want = cpu.run(inputs);
    const auto got = ane->run(inputs);
    CHECK(max_difference(want[0], got[0]) < 1e-2);
    CHECK(got[1].type() == dtype::i64);
    CHECK(max_difference(want[1], got[1]) == 0.0);
    const std::string dump = ane->dump();
    ane.reset();
    CHECK(dump.find("host: node") != std::string::npos);
    CHECK(dump.find("gather of 'embeddings'") != std::string::npos);
    CHECK(dump.find(": ANE (") != std::string::npos);
    CHECK(dump.find(": CPU") != std::string::npos);

    // strict_device leaves integer work (the embedding lookup, argmax) on the host, where it belongs, but
    // refuses a node the Neural Engine could run and will not: here a conv kernel 16 wide.
    auto strict = ane_options(cache.path);
    strict.strict_device = true;
    CHECK_NOTHROW((void)anvil::compile({h, best}, strict));
    anvil::attributes wide;
    wide.kernel = {1, 16};
    const auto image = g.apply(op::reshape, {h}, [] {
        anvil::attributes a;
        a.sizes = {1, 1, 6, 16};
        return a;
    }());
    const auto convolved = g.apply(
        op::conv2d,
        {image, g.constant(host_tensor::from(std::vector<float>(16, 0.1f), dims{1, 1, 1, 16}), "wide")},
        wide);
    try {
        (void)anvil::compile({convolved}, strict);
        FAIL("strict_device accepted a conv kernel 16 wide");
    } catch (const anvil::unsupported_error& e) {
        const std::string text = e.what();
        CHECK(text.find("strict_device") != std::string::npos);
        CHECK(text.find("conv2d") != std::string::npos);
        CHECK(text.find("cannot run on the Neural Engine") != std::string::npos);
    }
    expect_clean("after the split graph");
}

TEST_CASE("ane backend: a program compiled once is loaded from the cache, in this process and in another") {
    sim();
    temporary_folder cache;
    block b;
    const long compiles = sim().counter("compiles");
    const long hits = sim().counter("compile_cache_hits");
    std::vector<host_tensor> first;
    {
        anvil::program p = anvil::compile({b.out}, ane_options(cache.path));
        first = p.run(b.inputs);
    }
    CHECK(sim().counter("compiles") == compiles + 1);
    {
        anvil::program p = anvil::compile({b.out}, ane_options(cache.path));
        CHECK(max_difference(first[0], p.run(b.inputs)[0]) == 0.0);
    }
    CHECK(sim().counter("compiles") == compiles + 1);
    CHECK(sim().counter("compile_cache_hits") == hits + 1);

    // A second process (forked: the cache on disk is all it shares with this one that matters). Counting
    // live objects first waits for any Core ML handler thread an earlier test left finishing, which takes
    // the simulator's lock (test_coreml_backend.cpp).
    (void)sim().counter("live_objects");
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        int status = 10;
        try {
            const long child_compiles = sim().counter("compiles");
            const long child_hits = sim().counter("compile_cache_hits");
            block again;
            auto options = ane_options(cache.path);
            options.threads = 1;
            anvil::program p = anvil::compile({again.out}, options);
            const auto result = p.run(again.inputs);
            status = sim().counter("compiles") != child_compiles             ? 11
                     : sim().counter("compile_cache_hits") != child_hits + 1 ? 12
                     : max_difference(first[0], result[0]) != 0.0            ? 13
                                                                             : 0;
        } catch (...) {
            status = 14;
        }
        _exit(status);
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);  // 11: it compiled; 12: no cache hit; 13: another result; 14: it threw

    // Other weights are another program.
    block other(0.01f);
    (void)anvil::compile({other.out}, ane_options(cache.path));
    CHECK(sim().counter("compiles") == compiles + 2);
    expect_clean("after the cache");
}

TEST_CASE("ane backend: 500 compile/load/evaluate/unload cycles leak nothing and stay within the budget") {
    sim();
    temporary_folder cache;
    block b;
    const long live_before = sim().counter("live_objects");
    const long compiles = sim().counter("compiles");
    const long evaluations = sim().counter("evaluations");
    std::vector<host_tensor> first;
    for (int cycle = 0; cycle < 500; ++cycle) {
        anvil::program p = anvil::compile({b.out}, ane_options(cache.path));
        auto result = p.run(b.inputs);
        if (cycle == 0) {
            first = std::move(result);
        } else if (max_difference(first[0], result[0]) != 0.0) {
            FAIL("cycle ", cycle, " computed another result");
        }
    }
    CHECK(sim().counter("compiles") == compiles + 1);
    // Each program is evaluated once as it is built (a first evaluation the device refuses sends the segment
    // to the CPU), then once per run.
    CHECK(sim().counter("evaluations") == evaluations + 2 * 500);
    CHECK(sim().counter("live_objects") == live_before);
    INFO(sim().live_objects());
    expect_clean("after 500 cycles");
}

TEST_CASE("ane backend: a corrupt MIL text or weight blob is a clear error, never a crash") {
    sim();
    block b;
    // The MIL and weights of the block, as the backend lowers them.
    anvil::graph_body body;
    body.nodes = b.g.nodes();
    body.outputs = {b.out.id()};
    body = anvil::detail::ane::materialise_constants(anvil::eliminate_dead_code(body));
    const auto parts = anvil::detail::ane::partition(body, {}, true);
    REQUIRE(parts.segments.size() == 1);
    const auto& seg = parts.segments[0];
    const auto lowered = anvil::detail::ane::lower(body, seg.nodes, seg.inputs, seg.outputs, {});
    REQUIRE(!lowered.weights.empty());

    auto compile_error = [](const std::string& mil,
                            const std::vector<anvil::detail::ane::weight_file>& weights) {
        try {
            auto model = anvil::detail::ane::ane_model::create(mil, weights);
            model.compile();
            model.load();
        } catch (const anvil::error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    // Truncated text, a misspelt op, an undefined value.
    CHECK(compile_error(lowered.mil.substr(0, lowered.mil.size() / 2), lowered.weights) != "no error");
    std::string misspelt = lowered.mil;
    const auto at = misspelt.find("softmax(");
    REQUIRE(at != std::string::npos);
    misspelt.replace(at, 8, "softmux(");
    const std::string misspelt_error = compile_error(misspelt, lowered.weights);
    CHECK(misspelt_error.find("softmux") != std::string::npos);
    // A blob whose first metadata header lost its sentinel, and a truncated blob.
    auto broken = lowered.weights;
    broken[0].bytes[64] = std::byte{0};
    CHECK(compile_error(lowered.mil, broken).find("no error") == std::string::npos);
    auto truncated = lowered.weights;
    truncated[0].bytes.resize(truncated[0].bytes.size() / 2);
    CHECK(compile_error(lowered.mil, truncated).find("no error") == std::string::npos);
    expect_clean("after the corrupt inputs");
}

TEST_CASE(
    "ane backend: a vocabulary head past the dimension limit runs as tiles on the ANE, joined on the host") {
    sim();
    anvil::graph g;
    constexpr std::int64_t vocabulary = 20000;  // past the ANE's 16384 per axis
    constexpr std::int64_t hidden = 8;
    std::vector<float> w(static_cast<std::size_t>(vocabulary * hidden));
    for (std::size_t i = 0; i < w.size(); ++i)
        w[i] = static_cast<float>(static_cast<int>(i * 7919 % 41) - 20) * 0.02f;
    std::vector<float> x(3 * hidden);
    for (std::size_t i = 0; i < x.size(); ++i)
        x[i] = static_cast<float>(static_cast<int>(i % 9) - 4) * 0.25f;
    const auto input = g.input("x", dtype::f32, dims{3, hidden});
    const auto logits =
        g.apply(op::linear, {input, g.constant(host_tensor::from(w, dims{vocabulary, hidden}), "lm_head")});
    const std::vector<anvil::named_tensor> inputs{{"x", host_tensor::from(x, dims{3, hidden})}};
    temporary_folder cache;
    const auto want = anvil::compile({logits}).run(inputs);
    {
        anvil::program p = anvil::compile({logits}, ane_options(cache.path));
        const auto got = p.run(inputs);
        CHECK(got[0].shape() == dims{3, vocabulary});
        CHECK(max_difference(want[0], got[0]) < 1e-2);
        const std::string dump = p.dump();
        CHECK(dump.find("lm_head_0_10000") != std::string::npos);
        CHECK(dump.find("lm_head_10000_20000") != std::string::npos);
        CHECK(dump.find("concat") != std::string::npos);
    }
    expect_clean("after the tiled head");
}

TEST_CASE("ane backend: a program with more weights than the limit is split into several ANE programs") {
    sim();
    // linear (3 KiB of fp16 weights) -> gelu -> linear (2 KiB) -> softmax: each linear anchors a program.
    struct two_linears {
        anvil::graph g;
        anvil::value out;
        std::vector<anvil::named_tensor> inputs;
    } b;
    {
        std::vector<float> w1(32 * 48), w2(32 * 32), x(5 * 48);
        for (std::size_t i = 0; i < w1.size(); ++i)
            w1[i] = static_cast<float>(static_cast<int>(i * 13 % 29) - 14) * 0.01f;
        for (std::size_t i = 0; i < w2.size(); ++i)
            w2[i] = static_cast<float>(static_cast<int>(i * 11 % 23) - 11) * 0.02f;
        for (std::size_t i = 0; i < x.size(); ++i)
            x[i] = static_cast<float>(static_cast<int>(i * 7 % 19) - 9) * 0.1f;
        const auto input = b.g.input("x", dtype::f32, dims{5, 48});
        auto h = b.g.apply(op::linear, {input, b.g.constant(host_tensor::from(w1, dims{32, 48}))});
        h = b.g.apply(op::gelu, {h});
        h = b.g.apply(op::linear, {h, b.g.constant(host_tensor::from(w2, dims{32, 32}))});
        anvil::attributes soft;
        soft.axis = 1;
        b.out = b.g.apply(op::softmax, {h}, soft);
        b.inputs.push_back({"x", host_tensor::from(x, dims{5, 48})});
    }
    temporary_folder cache;
    const auto want = anvil::compile({b.out}).run(b.inputs);
    auto options = ane_options(cache.path);
    options.ane_max_program_weight_bytes = 1024;  // each linear's weights alone are past it
    const long compiles = sim().counter("compiles");
    {
        anvil::program p = anvil::compile({b.out}, options);
        CHECK(sim().counter("compiles") >= compiles + 2);
        CHECK(max_difference(want[0], p.run(b.inputs)[0]) < 1e-2);
        // The linear's result goes from the first program to the next in its IOSurface, not through the host.
        const std::string dump = p.dump();
        CHECK(dump.find("0 intermediate(s) passed") == std::string::npos);
        CHECK(dump.find("intermediate(s) passed between ANE programs by IOSurface") != std::string::npos);
        const long bytes_in = sim().counter("bytes_in");
        const long changed = sim().counter("bytes_changed_in");
        CHECK(max_difference(want[0], p.run(b.inputs)[0]) < 1e-2);
        // A second run with the same input: the host rewrote nothing; the ANE still read every input.
        CHECK(sim().counter("bytes_changed_in") == changed);
        CHECK(sim().counter("bytes_in") > bytes_in);
    }
    expect_clean("after the split program");
}

TEST_CASE("ane backend: a graph with stage marks past the weight limit splits between whole stages") {
    sim();
    // Two "layers" of three linears (768 + 1024 + 6144 fp16 weight bytes) and a "head" (1536) at a limit of
    // 10000 bytes. Node by node, the first program would take layer 1's first two linears too (9728 bytes);
    // by stages, layer 0 is one program and layer 1 with the head (9472) the next.
    const auto build = [](bool marked) {
        struct built {
            anvil::graph g;
            anvil::value out;
        } b;
        std::uint32_t seed = 7;
        const auto weights = [&](std::int64_t rows, std::int64_t columns) {
            std::vector<float> w(static_cast<std::size_t>(rows * columns));
            for (float& v : w) {
                seed = seed * 1664525u + 1013904223u;
                v = (static_cast<float>(seed >> 8) / 16777216.0f - 0.5f) * 0.4f;
            }
            return b.g.constant(host_tensor::from(w, dims{rows, columns}));
        };
        anvil::value h = b.g.input("x", dtype::f32, dims{5, 48});
        for (int layer = 0; layer < 2; ++layer) {
            if (marked) b.g.begin_stage("layer " + std::to_string(layer));
            const anvil::value a = b.g.apply(op::linear, {h, weights(8, 48)});
            const anvil::value c = b.g.apply(op::gelu, {b.g.apply(op::linear, {a, weights(64, 8)})});
            h = b.g.apply(op::add, {h, b.g.apply(op::linear, {c, weights(48, 64)})});
        }
        if (marked) b.g.begin_stage("head");
        b.out = b.g.apply(op::linear, {h, weights(16, 48)});
        return b;
    };
    std::vector<float> x(5 * 48);
    for (std::size_t i = 0; i < x.size(); ++i)
        x[i] = static_cast<float>(static_cast<int>(i * 7 % 19) - 9) * 0.1f;
    const std::vector<anvil::named_tensor> inputs{{"x", host_tensor::from(x, dims{5, 48})}};
    temporary_folder cache;
    auto options = ane_options(cache.path);
    options.ane_max_program_weight_bytes = 10000;
    const auto ane_weights = [](const anvil::placement_report& report) {
        std::vector<std::size_t> bytes;
        for (const auto& segment : report.segments)
            if (segment.device == "ane") bytes.push_back(segment.weight_bytes);
        return bytes;
    };
    {
        auto marked = build(true);
        const auto want = anvil::compile({marked.out}).run(inputs);
        anvil::program p = anvil::compile({marked.out}, options);
        CHECK(max_difference(want[0], p.run(inputs)[0]) < 1e-2);
        const anvil::placement_report report = p.placement();
        CHECK(report.chunks == 2);
        CHECK(ane_weights(report) == std::vector<std::size_t>{7936, 9472});
        std::vector<std::string> stages;
        std::vector<std::size_t> chunks;
        for (const auto& segment : report.segments) {
            stages.push_back(segment.stages);
            chunks.push_back(segment.chunk);
        }
        CHECK(stages == std::vector<std::string>{"layer 0", "layer 1 to head"});
        CHECK(chunks == std::vector<std::size_t>{0, 1});
        const std::string dump = p.dump();
        CHECK(dump.find("chunks: 2 of whole stages, by the limit of 10000 weight bytes per program") !=
              std::string::npos);
        CHECK(dump.find("chunk 1 of 2: layer 1 to head, 9472 weight bytes") != std::string::npos);
        CHECK(dump.find(" 1 intermediate(s) passed between ANE programs by IOSurface") != std::string::npos);
    }
    {
        // Without marks the graph is one stage, split node by node as before.
        auto unmarked = build(false);
        const auto want = anvil::compile({unmarked.out}).run(inputs);
        anvil::program p = anvil::compile({unmarked.out}, options);
        CHECK(max_difference(want[0], p.run(inputs)[0]) < 1e-2);
        CHECK(p.placement().chunks == 1);
        CHECK(ane_weights(p.placement()) == std::vector<std::size_t>{9728, 7680});
        CHECK(p.dump().find("chunk ") == std::string::npos);
    }
    expect_clean("after the programs split by stages");
}

TEST_CASE("ane backend: small inputs share one surface instead of each taking the largest one's size") {
    // Every input surface of a program is allocated like the largest (RUNTIME.md §3, ORI #12): a [64, 96]
    // activation with a [1, 32] bias row, a [1, 32] scale row and a [2, 32] table would take four surfaces of
    // the activation's size; the three small ones are packed into one, each a slice of its channels.
    sim().reset();
    anvil::graph g;
    const auto values = [](std::size_t n, int salt) {
        std::vector<float> v(n);
        for (std::size_t i = 0; i < n; ++i)
            v[i] = static_cast<float>(static_cast<int>((i * 29 + static_cast<std::size_t>(salt)) % 17) - 8) *
                   0.0625f;
        return v;
    };
    const auto x = g.input("x", dtype::f32, dims{64, 96});
    const auto bias = g.input("bias", dtype::f32, dims{1, 32});
    const auto scale = g.input("scale", dtype::f32, dims{1, 32});
    const auto table = g.input("table", dtype::f32, dims{2, 32});
    auto h = g.apply(op::linear, {x, g.constant(host_tensor::from(values(32 * 96, 3), dims{32, 96}))});
    h = g.apply(op::add, {h, bias});
    h = g.apply(op::mul, {h, scale});
    anvil::attributes first;
    first.begin = {0, 0};
    first.end = {1, 32};
    first.step = {1, 1};
    h = g.apply(op::add, {h, g.apply(op::slice, {table}, first)});
    const auto y = g.apply(op::gelu, {h});
    const std::vector<anvil::named_tensor> inputs{{"x", host_tensor::from(values(64 * 96, 1), dims{64, 96})},
                                                  {"bias", host_tensor::from(values(32, 5), dims{1, 32})},
                                                  {"scale", host_tensor::from(values(32, 7), dims{1, 32})},
                                                  {"table", host_tensor::from(values(64, 11), dims{2, 32})}};
    const auto want = anvil::compile({y}).run(inputs);
    temporary_folder cache;
    auto options = ane_options(cache.path);
    options.strict_device = true;
    anvil::program p = anvil::compile({y}, options);
    CHECK(p.placement().refused() == 0);
    const std::string text = p.dump();
    CAPTURE(text);
    // One packed input beside the activation's: two inputs in the program's signature.
    CHECK(text.find("_packed") != std::string::npos);
    const std::size_t signature = text.find("func main");
    REQUIRE(signature != std::string::npos);
    const std::string head = text.substr(signature, text.find('{', signature) - signature);
    std::size_t declared = 0;
    for (std::size_t at = head.find("tensor<"); at != std::string::npos; at = head.find("tensor<", at + 1))
        ++declared;
    CHECK(declared == 2);
    CHECK(head.find("tensor<fp16, [1, 4, 1, 32]> in001_packed") != std::string::npos);
    for (int round = 0; round < 2; ++round)
        CHECK(max_difference(want[0], p.run(inputs)[0]) < 1e-2);
    CHECK(sim().violations() == "");
}

TEST_CASE("ane backend: attention without matmul, taken in tiles of rows, matches the CPU") {
    sim().reset();
    // q k^T's terms, 256 x 64 x 256 fp16 (8 MiB), are past the 4 MiB a product without matmul may build at
    // once (RUNTIME.md §0b): the rows go in tiles. The numbers are the CPU's within fp16's precision.
    anvil::graph g;
    std::vector<float> data(256 * 64);
    const auto input = [&](const char* name, int salt) {
        for (std::size_t i = 0; i < data.size(); ++i)
            data[i] =
                static_cast<float>(static_cast<int>((i * 37 + static_cast<std::size_t>(salt)) % 23) - 11) *
                0.05f;
        return std::pair{g.input(name, dtype::f32, dims{1, 1, 256, 64}),
                         host_tensor::from(data, dims{1, 1, 256, 64})};
    };
    const auto [q, q_value] = input("q", 1);
    const auto [k, k_value] = input("k", 5);
    const auto [v, v_value] = input("v", 9);
    // A projection of the queries anchors the program (RUNTIME.md §0 #6).
    std::vector<float> w(64 * 64, 0.0f);
    for (std::size_t i = 0; i < 64; ++i)
        w[i * 64 + i] = 1.0f;
    const auto projected = g.apply(op::linear, {q, g.constant(host_tensor::from(w, dims{64, 64}))});
    const auto y = g.apply(op::attention, {projected, k, v});
    const std::vector<anvil::named_tensor> inputs{{"q", q_value}, {"k", k_value}, {"v", v_value}};
    const auto want = anvil::compile({y}).run(inputs);
    temporary_folder cache;
    auto options = ane_options(cache.path);
    options.ane_lowering["matmul"] = "decomposed";
    options.strict_device = true;
    anvil::program p = anvil::compile({y}, options);
    CHECK(p.placement().refused() == 0);
    CHECK(sim().counter("op:matmul") == 0);
    CHECK(sim().counter("op:concat") >= 2);  // the tiles of both products
    CHECK(max_difference(want[0], p.run(inputs)[0]) < 1e-2);
    CHECK(sim().violations() == "");
}

TEST_CASE("ane backend: a program the compiler refuses is split in half; the record keeps what compiled") {
    sim();
    // RUNTIME.md §0b #20: a per-program weight limit the device keeps to itself (the simulator's
    // max_program_weight_bytes, here 9 MiB of weight file). Three stages of two 1024 x 1024 linears (4 MiB of
    // fp16 each) in one program of 12 MiB are refused; split between stages where the weights are closest to
    // halved (4 and 8 MiB), both halves compile.
    anvil::graph g;
    std::uint32_t seed = 11;
    const auto weights = [&] {
        std::vector<float> w(1024 * 1024);
        for (float& v : w) {
            seed = seed * 1664525u + 1013904223u;
            v = (static_cast<float>(seed >> 8) / 16777216.0f - 0.5f) * 0.06f;
        }
        return g.constant(host_tensor::from(w, dims{1024, 1024}));
    };
    anvil::value h = g.input("x", dtype::f32, dims{5, 1024});
    for (int stage = 0; stage < 3; ++stage) {
        g.begin_stage("layer " + std::to_string(stage));
        h = g.apply(op::gelu, {g.apply(op::linear, {h, weights()})});
        h = g.apply(op::linear, {h, weights()});
    }
    std::vector<float> x(5 * 1024);
    for (std::size_t i = 0; i < x.size(); ++i)
        x[i] = static_cast<float>(static_cast<int>(i * 7 % 19) - 9) * 0.1f;
    const std::vector<anvil::named_tensor> inputs{{"x", host_tensor::from(x, dims{5, 1024})}};
    temporary_folder cache;
    const auto options = ane_options(cache.path);
    const auto want = anvil::compile({h}).run(inputs);
    const anvil_test::scoped_option limit("max_program_weight_bytes", "9437184", "0");
    constexpr std::size_t stage_bytes = 4u << 20;
    {
        anvil::program p = anvil::compile({h}, options);
        const anvil::placement_report report = p.placement();
        CHECK(report.refused() == 0);
        REQUIRE(report.segments.size() == 2);
        for (const auto& segment : report.segments) {
            CHECK(segment.device == "ane");
            CAPTURE(segment.reason);
            CHECK(segment.reason.find("half of a program of 12582912 weight bytes the compiler refused") !=
                  std::string::npos);
            CHECK(segment.reason.find("past this device's limit of 9437184 per program") !=
                  std::string::npos);
        }
        CHECK(report.segments[0].stages == "layer 0");
        CHECK(report.segments[1].stages == "layer 1 to layer 2");
        CHECK(report.segments[1].weight_bytes == 2 * stage_bytes);
        CHECK(report.max_program_weight_bytes_learned == 2 * stage_bytes);
        CHECK(max_difference(want[0], p.run(inputs)[0]) < 2e-2);
    }
    // The capability record keeps the largest program that compiled; the next compile partitions under it
    // and no compile is refused.
    const std::filesystem::path record = anvil::detail::ane::record_path(
        cache.path, anvil::detail::ane::os_build(), anvil_test::simulated_architecture());
    REQUIRE(std::filesystem::exists(record));
    std::ifstream in(record);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(text.find("\"max_program_weight_bytes\": 8388608") != std::string::npos);
    sim().reset();
    anvil::program again = anvil::compile({h}, options);
    CHECK(again.placement().chunks == 2);
    CHECK(again.placement().refused() == 0);
    for (const auto& segment : again.placement().segments)
        CHECK(segment.reason.empty());
    CHECK(sim().counter("compiles") == 2);
    CHECK(max_difference(want[0], again.run(inputs)[0]) < 2e-2);
    // A program under the smallest limit reported (~8 MB) is not split: it was refused for something else.
    const anvil_test::scoped_option tiny("max_program_weight_bytes", "4096", "0");
    anvil::graph small;
    const auto input = small.input("x", dtype::f32, dims{5, 64});
    const auto y = small.apply(
        op::linear, {small.apply(op::linear, {input, small.constant(host_tensor(dtype::f32, dims{64, 64}))}),
                     small.constant(host_tensor(dtype::f32, dims{64, 64}))});
    anvil::compile_options uncached = options;
    uncached.cache_dir = "none";
    anvil_test::captured_warnings warnings;
    CHECK(anvil::compile({y}, uncached).placement().refused() == 1);
    CHECK(sim().violations() == "");
}

#endif  // ANVIL_ANE_SIM_PATH

}  // namespace test_ane_backend
