// Resident program inputs (a KV cache bound to the program): write_input / read_input, runs that see what
// was written and nothing else, on the CPU (optimised and reference kernels) and on the Neural Engine
// simulator, where a step moves only the bytes write_input wrote. The reference is always the same graph
// compiled with ordinary inputs and given the full tensors.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

#include "ane_simulator.hpp"
#include "model_test_support.hpp"

#ifdef ANVIL_ANE_SIM_PATH
#include <dlfcn.h>
#endif

#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace test_resident_inputs {

using anvil::dims;
using anvil::dtype;
using anvil::host_tensor;
using anvil::op;

namespace {

// Deterministic values in [-1, 1) that are never zero's fp16 bytes (so every written byte changes).
std::vector<float> values_for(std::size_t count, std::uint32_t seed) {
    std::vector<float> v(count);
    std::uint32_t state = seed * 2654435761u + 12345u;
    for (auto& x : v) {
        state = state * 1664525u + 1013904223u;
        x = static_cast<float>(state >> 8) / static_cast<float>(1u << 24) * 2.0f - 1.0f;
        if (std::fabs(x) < 0.01f) x = 0.37f;
    }
    return v;
}

constexpr std::int64_t heads = 2, window = 3, context = 8, depth = 4;
const dims step_shape{1, heads, window, depth};
const dims cache_shape{1, heads, context, depth};
const dims mask_shape{1, 1, window, context + window};

// One KV-cache step: attention of q over concat(cache, new) along the sequence axis. With `gathered`, q also
// adds rows of k_cache picked by `ids` (a gather: a host-only op, so a CPU segment reads the resident cache).
struct kv_step {
    anvil::graph g;
    anvil::value out;

    explicit kv_step(bool gathered = false) {
        auto q = g.input("q", dtype::f32, step_shape);
        const auto k_new = g.input("k_new", dtype::f32, step_shape);
        const auto v_new = g.input("v_new", dtype::f32, step_shape);
        const auto k_cache = g.input("k_cache", dtype::f32, cache_shape);
        const auto v_cache = g.input("v_cache", dtype::f32, cache_shape);
        const auto mask = g.input("mask", dtype::f32, mask_shape);
        if (gathered) {
            const auto ids = g.input("ids", dtype::i32, dims{window});
            anvil::attributes along;
            along.axis = 2;
            q = g.apply(op::add, {q, g.apply(op::gather, {k_cache, ids}, along)});
        }
        // q through an identity linear: the 1x1 conv every ANE program needs (RUNTIME.md §0 #6; on M1/M2
        // attention has no matmul to anchor it).
        std::vector<float> identity(static_cast<std::size_t>(depth * depth), 0.0f);
        for (std::int64_t d = 0; d < depth; ++d)
            identity[static_cast<std::size_t>(d * depth + d)] = 1.0f;
        q = g.apply(op::linear, {q, g.constant(host_tensor::from(identity, dims{depth, depth}))});
        anvil::attributes sequence;
        sequence.axis = 2;
        const auto k = g.apply(op::concat, {k_cache, k_new}, sequence);
        const auto v = g.apply(op::concat, {v_cache, v_new}, sequence);
        out = g.apply(op::attention, {q, k, v, mask});
    }
};

// The host's copy of the cache: what the resident inputs should hold.
struct kv_state {
    std::vector<float> k = std::vector<float>(static_cast<std::size_t>(cache_shape.element_count()), 0.0f);
    std::vector<float> v = std::vector<float>(static_cast<std::size_t>(cache_shape.element_count()), 0.0f);
    std::int64_t filled = 0;  // positions written so far

    // Positions [begin, begin + part's extent) of `cache` along the sequence axis.
    static void write(std::vector<float>& cache, std::int64_t begin, const std::vector<float>& part,
                      std::int64_t length) {
        for (std::int64_t h = 0; h < heads; ++h)
            for (std::int64_t t = 0; t < length; ++t)
                for (std::int64_t d = 0; d < depth; ++d)
                    cache[static_cast<std::size_t>((h * context + begin + t) * depth + d)] =
                        part[static_cast<std::size_t>((h * length + t) * depth + d)];
    }
};

// The additive mask of a step: cache positions >= filled are invalid; the new tokens see themselves
// causally.
host_tensor mask_for(std::int64_t filled) {
    host_tensor mask(dtype::f32, mask_shape);
    auto m = mask.values<float>();
    for (std::int64_t s = 0; s < window; ++s)
        for (std::int64_t k = 0; k < context + window; ++k) {
            const bool visible = k < context ? k < filled : k - context <= s;
            m[static_cast<std::size_t>(s * (context + window) + k)] = visible ? 0.0f : -1e4f;
        }
    return mask;
}

std::vector<anvil::named_tensor> per_run_inputs(std::uint32_t seed, std::int64_t filled) {
    return {{"q", host_tensor::from(values_for(24, seed), step_shape)},
            {"k_new", host_tensor::from(values_for(24, seed + 1), step_shape)},
            {"v_new", host_tensor::from(values_for(24, seed + 2), step_shape)},
            {"mask", mask_for(filled)}};
}

std::vector<anvil::named_tensor> with_cache(std::vector<anvil::named_tensor> inputs, const kv_state& state) {
    inputs.push_back({"k_cache", host_tensor::from(state.k, cache_shape)});
    inputs.push_back({"v_cache", host_tensor::from(state.v, cache_shape)});
    return inputs;
}

anvil::compile_options resident(anvil::compile_options options) {
    options.resident_inputs = {"k_cache", "v_cache"};
    return options;
}

using anvil_test::max_difference;

// Runs several steps on `p` (resident cache) and `reference` (the whole cache given each run): one position
// written, then two, then one f16 part (write_input converts any floating type); every step's outputs and the
// cache contents agree. Returns the largest output difference.
double run_steps(anvil::program& p, anvil::program& reference, double tolerance) {
    kv_state state;
    double worst = 0.0;
    const std::int64_t lengths[] = {1, 2, 1, 3};
    for (std::size_t step = 0; step < 4; ++step) {
        const std::int64_t length = lengths[step];
        const dims part_shape{1, heads, length, depth};
        const auto count = static_cast<std::size_t>(part_shape.element_count());
        std::vector<float> k = values_for(count, 100 + static_cast<std::uint32_t>(step));
        std::vector<float> v = values_for(count, 200 + static_cast<std::uint32_t>(step));
        if (step == 2) {
            std::vector<anvil::half> k16, v16;
            for (std::size_t i = 0; i < count; ++i) {
                k16.emplace_back(k[i]);
                v16.emplace_back(v[i]);
                k[i] = static_cast<float>(k16.back());  // what the cache will hold
                v[i] = static_cast<float>(v16.back());
            }
            p.write_input("k_cache", 2, state.filled, host_tensor::from(k16, part_shape));
            p.write_input("v_cache", -2, state.filled, host_tensor::from(v16, part_shape));
        } else {
            p.write_input("k_cache", 2, state.filled, host_tensor::from(k, part_shape));
            p.write_input("v_cache", 2, state.filled, host_tensor::from(v, part_shape));
        }
        kv_state::write(state.k, state.filled, k, length);
        kv_state::write(state.v, state.filled, v, length);
        state.filled += length;
        const auto inputs = per_run_inputs(static_cast<std::uint32_t>(step) * 7, state.filled);
        // Twice: a run changes nothing of the state.
        for (int repeat = 0; repeat < 2; ++repeat) {
            const auto got = p.run(inputs);
            const auto want = reference.run(with_cache(inputs, state));
            INFO("step ", step, ", run ", repeat);
            const double difference = max_difference(got[0], want[0]);
            CHECK(difference <= tolerance);
            worst = std::max(worst, difference);
        }
        const host_tensor k_now = p.read_input("k_cache");
        const host_tensor v_now = p.read_input("v_cache");
        CHECK(k_now.type() == dtype::f32);
        CHECK(k_now.to_f32() == state.k);
        CHECK(v_now.to_f32() == state.v);
    }
    return worst;
}

template <class F>
std::string message_of(F&& f) {
    try {
        f();
    } catch (const anvil::error& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace

TEST_CASE("resident inputs: a KV-cache step on the CPU matches the same graph given the whole cache") {
    for (const auto kernels : {anvil::cpu_kernels::optimized, anvil::cpu_kernels::reference}) {
        INFO((kernels == anvil::cpu_kernels::optimized ? "optimized kernels" : "reference kernels"));
        kv_step graph;
        anvil::compile_options options;
        options.kernels = kernels;
        anvil::program p = anvil::compile({graph.out}, resident(options));
        anvil::compile_options plain;
        plain.kernels = anvil::cpu_kernels::reference;
        anvil::program reference = anvil::compile({graph.out}, plain);

        // inputs() lists every input, the resident ones flagged.
        std::vector<std::string> flagged;
        for (const auto& input : p.inputs()) {
            if (input.resident) flagged.push_back(input.name);
        }
        CHECK(p.inputs().size() == 6);
        CHECK(flagged == std::vector<std::string>{"k_cache", "v_cache"});
        // Zero at compile.
        CHECK(p.read_input("k_cache").to_f32() == std::vector<float>(64, 0.0f));

        const double worst = run_steps(p, reference, 1e-5);
        MESSAGE("CPU: largest difference from the non-resident program ", worst);
    }
}

TEST_CASE("resident inputs: the slot survives aliasing reshapes, elementwise ops and f16 rounding") {
    // A reshape of the resident input is an output (it shares the slot), an elementwise op reads it, and its
    // type is f16: written values are rounded as a run's inputs are.
    anvil::graph g;
    const auto x = g.input("x", dtype::f16, dims{2, 6});
    const auto cache = g.input("cache", dtype::f16, dims{2, 6});
    anvil::attributes flat;
    flat.sizes = {12};
    const auto reshaped = g.apply(op::reshape, {cache}, flat);
    const auto product = g.apply(op::mul, {g.apply(op::add, {cache, x}), cache});
    const auto doubled = g.apply(op::add, {product, product});
    anvil::compile_options options;
    options.resident_inputs = {"cache"};
    anvil::program p = anvil::compile({reshaped, doubled}, options);
    anvil::program reference = anvil::compile({reshaped, doubled});

    std::vector<float> expected(12, 0.0f);
    for (std::int64_t column = 0; column < 6; ++column) {
        const std::vector<float> part = values_for(2, 300 + static_cast<std::uint32_t>(column));
        p.write_input("cache", 1, column, host_tensor::from(part, dims{2, 1}));
        for (std::size_t r = 0; r < 2; ++r)
            expected[r * 6 + static_cast<std::size_t>(column)] = static_cast<float>(anvil::half(part[r]));
        const host_tensor input =
            host_tensor::from(values_for(12, 400 + static_cast<std::uint32_t>(column)), dims{2, 6});
        for (int repeat = 0; repeat < 3; ++repeat) {
            const auto got = p.run({{"x", input}});
            const auto want =
                reference.run({{"x", input}, {"cache", host_tensor::from(expected, dims{2, 6})}});
            CHECK(got[0].to_f32() == want[0].to_f32());
            CHECK(got[1].to_f32() == want[1].to_f32());
        }
        CHECK(p.read_input("cache").to_f32() == expected);
    }
}

TEST_CASE("resident inputs: a box write updates one stream of a batched cache") {
    // A batched cache [B, H, T, D]: each stream writes its own rows at its own position.
    anvil::graph g;
    const dims batched{2, 2, 8, 4};
    const auto x = g.input("x", dtype::f32, batched);
    const auto cache = g.input("cache", dtype::f32, batched);
    const auto out = g.apply(op::mul, {g.apply(op::add, {cache, x}), x});
    anvil::compile_options options;
    options.resident_inputs = {"cache"};
    anvil::program p = anvil::compile({out}, options);
    anvil::program reference = anvil::compile({out});
    std::vector<float> expected(64 * 2, 0.0f);
    const std::int64_t positions[2] = {0, 5};
    for (int step = 0; step < 3; ++step) {
        for (std::int64_t stream = 0; stream < 2; ++stream) {
            const auto part = values_for(8, 1000 + static_cast<std::uint32_t>(step * 2 + stream));
            const std::array<std::int64_t, 4> at{stream, 0, positions[stream] + step, 0};
            p.write_input("cache", at, host_tensor::from(part, dims{1, 2, 1, 4}));
            for (std::size_t h = 0; h < 2; ++h)
                for (std::size_t d = 0; d < 4; ++d)
                    expected[((static_cast<std::size_t>(stream) * 2 + h) * 8 +
                              static_cast<std::size_t>(at[2])) *
                                 4 +
                             d] = part[h * 4 + d];
        }
        const host_tensor input =
            host_tensor::from(values_for(128, 1100 + static_cast<std::uint32_t>(step)), batched);
        CHECK(p.run({{"x", input}})[0].to_f32() ==
              reference.run({{"x", input}, {"cache", host_tensor::from(expected, batched)}})[0].to_f32());
        CHECK(p.read_input("cache").to_f32() == expected);
    }
    const host_tensor row(dtype::f32, dims{1, 2, 1, 4});
    CHECK_THROWS_WITH(p.write_input("cache", {0, 0, 0}, row),
                      doctest::Contains("3 offsets for input 'cache' [2, 2, 8, 4] of rank 4"));
    CHECK_THROWS_WITH(p.write_input("cache", {2, 0, 0, 0}, row),
                      doctest::Contains("part [1, 2, 1, 4] at offset 2 of axis 0 is outside input 'cache' "
                                        "[2, 2, 8, 4] (positions [2, 3) of 0 to 2)"));
    CHECK_THROWS_WITH(p.write_input("cache", {0, 0, -1, 0}, row),
                      doctest::Contains("at offset -1 of axis 2"));
}

TEST_CASE("resident inputs: bad names, shapes, bounds and types get errors naming them") {
    kv_step graph;
    anvil::program p = anvil::compile({graph.out}, resident({}));
    const host_tensor column(dtype::f32, dims{1, 2, 1, 4});
    using doctest::Contains;

    anvil::compile_options unknown;
    unknown.resident_inputs = {"k_cache", "kv"};
    CHECK(message_of([&] { (void)anvil::compile({graph.out}, unknown); }) ==
          "compile: resident input 'kv' is not an input of the graph (inputs: q, k_new, v_new, k_cache, "
          "v_cache, mask)");
    anvil::compile_options twice;
    twice.resident_inputs = {"k_cache", "k_cache"};
    CHECK_THROWS_WITH((void)anvil::compile({graph.out}, twice),
                      Contains("resident input 'k_cache' is listed twice"));

    auto inputs = per_run_inputs(1, 0);
    inputs.push_back({"k_cache", host_tensor(dtype::f32, cache_shape)});
    CHECK_THROWS_WITH(p.run(inputs),
                      Contains("input 'k_cache' is resident: update it with program::write_input"));
    auto missing = per_run_inputs(1, 0);
    missing.erase(missing.begin());
    CHECK_THROWS_WITH(p.run(missing), Contains("input 'q' is missing"));
    CHECK_NOTHROW((void)p.run(per_run_inputs(1, 0)));

    CHECK_THROWS_WITH(p.write_input("kv", 2, 0, column),
                      Contains("there is no input named 'kv' (resident inputs: k_cache, v_cache)"));
    CHECK_THROWS_WITH(p.write_input("q", 2, 0, column), Contains("input 'q' is not resident"));
    CHECK_THROWS_WITH((void)p.read_input("mask"),
                      Contains("program::read_input: input 'mask' is not resident"));
    CHECK_THROWS_WITH(p.write_input("k_cache", 4, 0, column),
                      Contains("axis 4 is out of range for input 'k_cache' [1, 2, 8, 4] (rank 4)"));
    CHECK_THROWS_WITH(
        p.write_input("k_cache", 2, 0, host_tensor(dtype::f32, dims{1, 2, 1, 5})),
        Contains("part [1, 2, 1, 5] for input 'k_cache' [1, 2, 8, 4] along axis 2: axis 3 is 5, "
                 "expected 4"));
    CHECK_THROWS_WITH(p.write_input("k_cache", 2, 0, host_tensor(dtype::f32, dims{2, 1, 4})),
                      Contains("has rank 3, expected 4"));
    CHECK_THROWS_WITH(
        p.write_input("k_cache", 2, 7, host_tensor(dtype::f32, dims{1, 2, 2, 4})),
        Contains("positions [7, 9) along axis 2 are outside input 'k_cache' [1, 2, 8, 4] (0 to 8)"));
    CHECK_THROWS_WITH(p.write_input("v_cache", 2, -1, column), Contains("positions [-1, 0) along axis 2"));
    CHECK_THROWS_WITH(
        p.write_input("k_cache", 2, 0, host_tensor(dtype::i32, dims{1, 2, 1, 4})),
        Contains("the part for input 'k_cache' is i32, expected f32 (or another floating type)"));
    // A failed write changes nothing; an empty part at the end is a valid no-op.
    CHECK(p.read_input("k_cache").to_f32() == std::vector<float>(64, 0.0f));
    CHECK_NOTHROW(p.write_input("k_cache", 2, 8, host_tensor(dtype::f32, dims{1, 2, 0, 4})));
}

#ifdef ANVIL_ANE_SIM_PATH

namespace {

using anvil_test::sim;

// The bytes that differ between the fp16 encodings of `before` and `after`: what a surface update changes.
long changed_fp16_bytes(const std::vector<float>& before, const std::vector<float>& after) {
    long changed = 0;
    for (std::size_t i = 0; i < before.size(); ++i) {
        const std::uint16_t a = anvil::half(before[i]).bits, b = anvil::half(after[i]).bits;
        changed += ((a ^ b) & 0xFFu) != 0;
        changed += ((a ^ b) >> 8) != 0;
    }
    return changed;
}

}  // namespace

TEST_CASE("resident inputs: on the ANE simulator a step moves only what write_input wrote") {
    anvil_test::ane_target target;
    REQUIRE(anvil_test::use_ane_simulator(target));
    sim();
    kv_step graph;
    anvil::program p = anvil::compile({graph.out}, resident(target.options));
    anvil::program ane_plain = anvil::compile({graph.out}, target.options);
    anvil::compile_options cpu;
    cpu.kernels = anvil::cpu_kernels::reference;
    anvil::program reference = anvil::compile({graph.out}, cpu);
    REQUIRE(p.dump().find("host:") == std::string::npos);  // the whole step is one ANE program
    REQUIRE(p.placement().segments.size() == 1);
    REQUIRE(p.placement().segments[0].device == "ane");

    // Steps against the CPU's reference kernels (fp16 tolerance) ...
    const double worst = run_steps(p, reference, 2e-2);
    MESSAGE("ANE simulator: largest difference from the CPU reference ", worst);

    // ... and against the same ANE program given the whole cache: the same fp16 arithmetic, so equal.
    anvil::program q = anvil::compile({graph.out}, resident(target.options));
    kv_state state;
    const std::vector<float> k = values_for(8, 900), v = values_for(8, 901);
    q.write_input("k_cache", 2, 0, host_tensor::from(k, dims{1, 2, 1, 4}));
    q.write_input("v_cache", 2, 0, host_tensor::from(v, dims{1, 2, 1, 4}));
    kv_state::write(state.k, 0, k, 1);
    kv_state::write(state.v, 0, v, 1);
    const auto inputs = per_run_inputs(5, 1);
    CHECK(q.run(inputs)[0].to_f32() == ane_plain.run(with_cache(inputs, state))[0].to_f32());

    // Byte accounting: a run with the same per-run inputs and no write changes no input byte ...
    const long before = sim().counter("bytes_changed_in");
    (void)q.run(inputs);
    CHECK(sim().counter("bytes_changed_in") == before);
    // ... a write of one position changes that position's bytes and nothing more (the cache is 128 bytes
    // per input; one position of both heads is 8 fp16 values, 16 bytes) ...
    const std::vector<float> k2 = values_for(8, 902);
    q.write_input("k_cache", 2, 1, host_tensor::from(k2, dims{1, 2, 1, 4}));
    (void)q.run(inputs);
    const long expected = changed_fp16_bytes(std::vector<float>(8, 0.0f), k2);
    CHECK(expected > 8);
    CHECK(sim().counter("bytes_changed_in") == before + expected);
    // ... overwriting a position with new values changes only the bytes that differ ...
    const long after_one = sim().counter("bytes_changed_in");
    const std::vector<float> k3 = values_for(8, 903);
    q.write_input("k_cache", 2, 1, host_tensor::from(k3, dims{1, 2, 1, 4}));
    q.write_input("v_cache", 2, 7, host_tensor::from(k3, dims{1, 2, 1, 4}));
    (void)q.run(inputs);
    CHECK(sim().counter("bytes_changed_in") ==
          after_one + changed_fp16_bytes(k2, k3) + changed_fp16_bytes(std::vector<float>(8, 0.0f), k3));
    // ... and new per-run inputs add their own bytes, never the cache's.
    const long after_two = sim().counter("bytes_changed_in");
    (void)q.run(per_run_inputs(6, 1));
    const long per_run = sim().counter("bytes_changed_in") - after_two;
    CHECK(per_run > 0);
    CHECK(per_run <= 3 * 24 * 2 + 33 * 2);  // q, k_new, v_new and the mask, fp16
    CHECK(sim().violations() == "");
}

TEST_CASE("resident inputs: partial writes into surfaces laid out as rows and as columns") {
    // `a` feeds a linear, so its surface is channels-first (columns: the host transposes while packing);
    // `b` feeds an add (rows). Writes along either axis touch only their elements in either layout.
    anvil_test::ane_target target;
    REQUIRE(anvil_test::use_ane_simulator(target));
    sim();
    anvil::graph g;
    const auto a = g.input("a", dtype::f32, dims{5, 48});
    const auto b = g.input("b", dtype::f32, dims{5, 32});
    std::vector<float> w = values_for(32 * 48, 700);
    for (auto& x : w)
        x *= 0.1f;
    const auto h = g.apply(op::linear, {a, g.constant(host_tensor::from(w, dims{32, 48}))});
    const auto out = g.apply(op::add, {h, b});
    auto options = target.options;
    options.resident_inputs = {"a", "b"};
    // `b` is also an output: a run returns a copy of its current contents.
    anvil::program p = anvil::compile({out, b}, options);
    anvil::program plain = anvil::compile({out, b}, target.options);
    const std::string dump = p.dump();
    CHECK(dump.find("[1, 48, 1, 5]> in000_a") != std::string::npos);  // columns
    CHECK(dump.find("[1, 5, 1, 32]> in001_b") != std::string::npos);  // rows

    std::vector<float> a_now(5 * 48, 0.0f), b_now(5 * 32, 0.0f);
    struct write {
        const char* name;
        std::int64_t axis, begin, rows, columns;
    };
    const write writes[] = {{"a", 0, 2, 1, 48}, {"a", 1, 40, 5, 3}, {"b", 0, 4, 1, 32}, {"b", 1, 0, 5, 2},
                            {"a", 1, 0, 5, 48}, {"b", 1, 31, 5, 1}, {"a", 2, 1, 2, 5},  {"b", 2, 3, 2, 7}};
    (void)p.run({});  // the simulator counts every byte of a request's first evaluation as changed
    std::uint32_t seed = 800;
    for (const write& wr : writes) {
        INFO(std::string(wr.name), " axis ", wr.axis, " at ", wr.begin);
        const std::vector<float> part = values_for(static_cast<std::size_t>(wr.rows * wr.columns), seed++);
        std::vector<float>& now = std::string(wr.name) == "a" ? a_now : b_now;
        const std::int64_t width = std::string(wr.name) == "a" ? 48 : 32;
        std::vector<float> before = now;
        // axis 2 stands for the box form: the part lands at {begin, begin + 9}.
        for (std::int64_t r = 0; r < wr.rows; ++r)
            for (std::int64_t c = 0; c < wr.columns; ++c) {
                const std::int64_t row = wr.axis == 1 ? r : wr.begin + r;
                const std::int64_t column = wr.axis == 0 ? c : wr.axis == 1 ? wr.begin + c : wr.begin + 9 + c;
                now[static_cast<std::size_t>(row * width + column)] =
                    part[static_cast<std::size_t>(r * wr.columns + c)];
            }
        const long changed_before = sim().counter("bytes_changed_in");
        const host_tensor part_tensor = host_tensor::from(part, dims{wr.rows, wr.columns});
        if (wr.axis == 2) {
            p.write_input(wr.name, {wr.begin, wr.begin + 9}, part_tensor);
        } else {
            p.write_input(wr.name, wr.axis, wr.begin, part_tensor);
        }
        const auto got = p.run({});
        CHECK(sim().counter("bytes_changed_in") - changed_before == changed_fp16_bytes(before, now));
        const auto want = plain.run(
            {{"a", host_tensor::from(a_now, dims{5, 48})}, {"b", host_tensor::from(b_now, dims{5, 32})}});
        CHECK(got[0].to_f32() == want[0].to_f32());
        CHECK(got[1].to_f32() == b_now);
        CHECK(p.read_input(wr.name).to_f32() == now);
    }
    CHECK(sim().violations() == "");
}

TEST_CASE("resident inputs: a resident cache read by a host segment and an ANE segment") {
    anvil_test::ane_target target;
    REQUIRE(anvil_test::use_ane_simulator(target));
    sim();
    kv_step graph(true);
    anvil::program p = anvil::compile({graph.out}, resident(target.options));
    anvil::compile_options cpu;
    cpu.kernels = anvil::cpu_kernels::reference;
    anvil::program reference = anvil::compile({graph.out}, cpu);
    anvil::program cpu_resident = anvil::compile({graph.out}, resident({}));
    const std::string dump = p.dump();
    CHECK(dump.find(": CPU") != std::string::npos);
    CHECK(dump.find(": ANE (") != std::string::npos);

    kv_state state;
    for (std::int64_t position = 0; position < 4; ++position) {
        const std::vector<float> k = values_for(8, 500 + static_cast<std::uint32_t>(position));
        const std::vector<float> v = values_for(8, 600 + static_cast<std::uint32_t>(position));
        for (anvil::program* program : {&p, &cpu_resident}) {
            program->write_input("k_cache", 2, position, host_tensor::from(k, dims{1, 2, 1, 4}));
            program->write_input("v_cache", 2, position, host_tensor::from(v, dims{1, 2, 1, 4}));
        }
        kv_state::write(state.k, position, k, 1);
        kv_state::write(state.v, position, v, 1);
        auto inputs = per_run_inputs(30 + static_cast<std::uint32_t>(position), position + 1);
        inputs.push_back(
            {"ids", host_tensor::from(std::vector<std::int32_t>{static_cast<std::int32_t>(position), 0, 7},
                                      dims{3})});
        const auto want = reference.run(with_cache(inputs, state));
        INFO("position ", position);
        CHECK(max_difference(p.run(inputs)[0], want[0]) <= 2e-2);
        CHECK(max_difference(cpu_resident.run(inputs)[0], want[0]) <= 1e-5);
        CHECK(p.read_input("k_cache").to_f32() == state.k);
    }
    CHECK(sim().violations() == "");
}

#endif  // ANVIL_ANE_SIM_PATH

}  // namespace test_resident_inputs
