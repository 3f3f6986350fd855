// resident_weight_bytes(): the weights live programs hold, by device, each buffer counted once. Expected
// values come from the graphs' own sizes (elements times bytes per element), not from the backend: an f16
// weight the GEMM reads as stored is its k * n * 2 bytes; a constant an elementwise op reads is its f32 copy;
// an f32 weight is packed once into panels at least its own size, shared by every program compiled from it;
// on the Neural Engine (simulator) the blob the framework holds is at least the fp16 weight.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

#include "model_test_support.hpp"

#include <cstddef>
#include <optional>
#include <vector>

namespace test_resident_weights {

using anvil::dims;
using anvil::dtype;
using anvil::host_tensor;
using anvil::op;

namespace {

// The change in resident_weight_bytes() since construction.
struct delta {
    anvil::resident_weights before = anvil::resident_weight_bytes();
    [[nodiscard]] std::ptrdiff_t cpu() const {
        return static_cast<std::ptrdiff_t>(anvil::resident_weight_bytes().cpu_bytes) -
               static_cast<std::ptrdiff_t>(before.cpu_bytes);
    }
    [[nodiscard]] std::ptrdiff_t ane() const {
        return static_cast<std::ptrdiff_t>(anvil::resident_weight_bytes().ane_bytes) -
               static_cast<std::ptrdiff_t>(before.ane_bytes);
    }
};

std::vector<float> ramp(std::size_t count) {
    std::vector<float> values(count);
    for (std::size_t i = 0; i < count; ++i)
        values[i] = static_cast<float>(i % 17) / 17.0f - 0.5f;
    return values;
}

constexpr std::int64_t rows = 4, k = 64, n = 96;

host_tensor f16(const std::vector<float>& values, dims shape) {
    std::vector<anvil::half> halves;
    for (const float v : values)
        halves.emplace_back(v);
    return host_tensor::from(halves, shape);
}

// The weight as f32: an f16 one through a cast, as the recipes write it (the GEMM looks through the cast).
anvil::value as_f32(anvil::graph& g, host_tensor data) {
    const dtype stored = data.type();
    const anvil::value constant = g.constant(std::move(data), "w");
    if (stored == dtype::f32) return constant;
    anvil::attributes to_f32;
    to_f32.to = dtype::f32;
    return g.apply(op::cast, {constant}, to_f32);
}

anvil::value linear_of(anvil::graph& g, host_tensor weight) {
    const auto x = g.input("x", dtype::f32, dims{rows, k});
    return g.apply(op::linear, {x, as_f32(g, std::move(weight))});
}

}  // namespace

TEST_CASE("resident weights: an f16 weight the GEMM reads as stored counts its own bytes, once") {
    const delta d;
    anvil::graph g;
    const auto y = linear_of(g, f16(ramp(n * k), dims{n, k}));
    {
        anvil::program p = anvil::compile({y});
        CHECK(d.cpu() == n * k * 2);
        anvil::program q = anvil::compile({y});  // the same weight: still one buffer
        CHECK(d.cpu() == n * k * 2);
        CHECK(d.ane() == 0);
    }
    CHECK(d.cpu() == 0);  // both programs gone
}

TEST_CASE(
    "resident weights: an elementwise constant counts its f32 copy, shared; a packed f32 weight its panels") {
    // Wide enough that compile does not fold the f16 constant's cast into a per-program f32 constant (it
    // folds only values under 4 KiB, or those that do not grow).
    constexpr std::int64_t wide = 2048;
    const delta d;
    anvil::graph g;
    const auto x = g.input("x", dtype::f32, dims{rows, wide});
    const auto shifted = g.apply(op::add, {x, as_f32(g, f16(ramp(wide), dims{wide}))});
    {
        anvil::program p = anvil::compile({shifted});
        CHECK(d.cpu() == wide * 4);  // the f16 constant's f32 copy
        anvil::program q = anvil::compile({shifted});
        CHECK(d.cpu() == wide * 4);  // shared with the second program
        anvil::compile_options rounded;
        rounded.ane_numerics = true;
        anvil::program r = anvil::compile({shifted}, rounded);
        CHECK(d.cpu() == 2 * wide * 4);  // a copy rounded to fp16 is another buffer
        // The shared copy still computes x + c.
        const std::vector<float> x_values(static_cast<std::size_t>(rows * wide), 1.0f);
        const auto out = q.run({{"x", host_tensor::from(x_values, dims{rows, wide})}})[0].to_f32();
        const auto constant = ramp(wide);
        bool exact = true;
        for (std::size_t i = 0; i < out.size(); ++i)
            exact = exact && out[i] == 1.0f + static_cast<float>(anvil::half(constant[i % wide]));
        CHECK(exact);
    }
    CHECK(d.cpu() == 0);

    // An f32 constant is read in place: its own bytes, no copy, once for both programs.
    anvil::graph f;
    const auto fx = f.input("x", dtype::f32, dims{rows, wide});
    const auto plus = f.apply(op::add, {fx, f.constant(host_tensor::from(ramp(wide), dims{wide}))});
    {
        anvil::program p = anvil::compile({plus});
        anvil::program q = anvil::compile({plus});
        CHECK(d.cpu() == wide * 4);
    }

    anvil::graph h;
    const auto y = linear_of(h, host_tensor::from(ramp(n * k), dims{n, k}));
    anvil::program p = anvil::compile({y});
    const std::ptrdiff_t packed = d.cpu();
    CHECK(packed >= n * k * 4);     // every weight is in the panels ...
    CHECK(packed < n * k * 4 * 2);  // ... padded to whole panels, not copied twice
    anvil::program q = anvil::compile({y});
    CHECK(d.cpu() == packed);  // shared between the programs
    MESSAGE("f32 weight of ", n * k * 4, " bytes packed into ", packed, " bytes");
}

TEST_CASE("resident weights: on the ANE simulator the framework holds the fp16 weights, the CPU none") {
    anvil_test::ane_target target;
    if (!anvil_test::use_ane_simulator(target)) {
        MESSAGE("no ANE simulator in this build: the Neural Engine case is not run");
        return;
    }
    const delta d;
    anvil::graph g;
    const auto y = linear_of(g, host_tensor::from(ramp(n * k), dims{n, k}));
    {
        anvil::program p = anvil::compile({y}, target.options);
        REQUIRE(p.placement().segments.size() == 1);
        REQUIRE(p.placement().segments[0].device == "ane");
        CHECK(d.ane() >= n * k * 2);
        CHECK(d.ane() < n * k * 2 + 4096);  // the blob's headers and alignment, no second copy
        CHECK(d.cpu() == 0);
        MESSAGE("ANE program holds ", d.ane(), " bytes of weights for ", n * k * 2, " bytes of fp16");
    }
    CHECK(d.ane() == 0);
}

}  // namespace test_resident_weights
