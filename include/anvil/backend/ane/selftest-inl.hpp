// anvil: selftest's definitions (see selftest.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "anvil/backend/ane/ane_program.hpp"
#include "anvil/backend/ane/capabilities.hpp"
#include "anvil/backend/ane/selftest.hpp"
#include "anvil/backend/ane/support.hpp"
#include "anvil/backend/compile.hpp"
#include "anvil/core/json.hpp"
#include "anvil/graph/graph.hpp"

namespace anvil {

namespace detail::ane {

ANVIL_INLINE host_tensor random_tensor(const dims& shape, std::mt19937& random, float low, float high) {
    std::uniform_real_distribution<float> distribution(low, high);
    std::vector<float> values(static_cast<std::size_t>(shape.element_count()));
    for (auto& v : values)
        v = distribution(random);
    return host_tensor::from(values, shape);
}

ANVIL_INLINE value random_input(graph& g, std::vector<named_tensor>& inputs, std::mt19937& random,
                                const std::string& name, const dims& shape, float low = -2.0f,
                                float high = 2.0f) {
    inputs.push_back({name, random_tensor(shape, random, low, high)});
    return g.input(name, dtype::f32, shape);
}

ANVIL_INLINE value random_constant(graph& g, std::mt19937& random, const dims& shape, float low = -1.0f,
                                   float high = 1.0f) {
    return g.constant(random_tensor(shape, random, low, high));
}

ANVIL_INLINE attributes with(std::function<void(attributes&)> set) {
    attributes a;
    set(a);
    return a;
}

ANVIL_INLINE std::vector<selftest_case> selftest_cases() {
    using rng = std::mt19937;
    using ins = std::vector<named_tensor>;
    std::vector<selftest_case> cases;
    auto unary = [&](op kind, float low, float high, double tolerance, attributes attrs = {}) {
        cases.push_back(
            {std::string(op_name(kind)), kind, tolerance, [=](graph& g, ins& in, rng& r) {
                 return g.apply(kind, {random_input(g, in, r, "x", dims{6, 40}, low, high)}, attrs);
             }});
    };
    unary(op::relu, -2, 2, 2e-3);
    unary(op::gelu, -3, 3, 4e-3);
    unary(op::gelu_tanh, -3, 3, 4e-3);
    unary(op::quick_gelu, -3, 3, 4e-3);
    unary(op::silu, -3, 3, 4e-3);
    unary(op::sigmoid, -4, 4, 4e-3);
    unary(op::tanh, -2, 2, 4e-3);
    unary(op::exp, -2, 2, 4e-3);
    unary(op::log, 0.1f, 4, 4e-3);
    unary(op::sqrt, 0.05f, 4, 4e-3);
    unary(op::rsqrt, 0.25f, 4, 4e-3);
    unary(op::abs, -2, 2, 2e-3);
    unary(op::neg, -2, 2, 2e-3);
    unary(op::clamp, -2, 2, 2e-3, with([](attributes& a) {
              a.min = -0.5f;
              a.max = 0.75f;
          }));
    unary(op::cast, -2, 2, 2e-3, with([](attributes& a) { a.to = dtype::f16; }));

    auto binary = [&](op kind, float low, float high) {
        cases.push_back({std::string(op_name(kind)), kind, 4e-3, [=](graph& g, ins& in, rng& r) {
                             const value a = random_input(g, in, r, "a", dims{6, 40}, 0.5f, 2.0f);
                             const value b = random_input(g, in, r, "b", dims{6, 40}, low, high);
                             return g.apply(kind, {a, b});
                         }});
    };
    binary(op::add, -2, 2);
    binary(op::sub, -2, 2);
    binary(op::mul, -2, 2);
    binary(op::div, 0.5f, 2);
    binary(op::pow, -1.5f, 1.5f);
    binary(op::maximum, -2, 2);
    binary(op::minimum, -2, 2);
    unary(op::erf, -3, 3, 4e-3);
    // Quarters in [-2, 2], zeros among them: exact in fp16, so comparisons of them are exact and ties common.
    const auto quarters = [](graph& g, ins& in, rng& r, const std::string& name, const dims& shape) {
        std::uniform_int_distribution<int> quarter(-8, 8);
        std::vector<float> values(static_cast<std::size_t>(shape.element_count()));
        for (auto& v : values)
            v = static_cast<float>(quarter(r)) * 0.25f;
        in.push_back({name, host_tensor::from(values, shape)});
        return g.input(name, dtype::f32, shape);
    };
    cases.push_back({"sign", op::sign, 2e-3, [=](graph& g, ins& in, rng& r) {
                         return g.apply(op::sign, {quarters(g, in, r, "x", dims{6, 40})});
                     }});
    for (const op kind : {op::equal, op::less, op::less_equal, op::greater, op::greater_equal}) {
        cases.push_back({std::string(op_name(kind)), kind, 0.0, [=](graph& g, ins& in, rng& r) {
                             const value a = quarters(g, in, r, "a", dims{6, 40});
                             return g.apply(kind, {a, quarters(g, in, r, "b", dims{40})});
                         }});
    }
    for (const op kind : {op::logical_and, op::logical_or, op::logical_xor, op::logical_not}) {
        cases.push_back({std::string(op_name(kind)), kind, 0.0, [=](graph& g, ins& in, rng& r) {
                             const value a = quarters(g, in, r, "a", dims{6, 40});
                             const value less = g.apply(op::less, {a, quarters(g, in, r, "b", dims{6, 40})});
                             if (kind == op::logical_not) return g.apply(kind, {less});
                             const value zero =
                                 g.constant(host_tensor::from(std::vector<float>{0.0f}, dims{}));
                             return g.apply(kind, {less, g.apply(op::greater, {a, zero})});
                         }});
    }
    cases.push_back({"add (broadcast constant)", op::add, 4e-3, [](graph& g, ins& in, rng& r) {
                         const value x = random_input(g, in, r, "x", dims{6, 40});
                         return g.apply(op::add, {x, random_constant(g, r, dims{40})});
                     }});
    cases.push_back({"mul (broadcast input)", op::mul, 4e-3, [](graph& g, ins& in, rng& r) {
                         const value x = random_input(g, in, r, "x", dims{2, 6, 40});
                         const value s = random_input(g, in, r, "s", dims{2, 6, 1});
                         return g.apply(op::mul, {x, s});
                     }});
    cases.push_back({"where", op::where, 2e-3, [](graph& g, ins& in, rng& r) {
                         std::vector<float> mask(240);
                         for (std::size_t i = 0; i < mask.size(); ++i)
                             mask[i] = (i * 7 % 3 == 0) ? 1.0f : 0.0f;
                         in.push_back({"c", host_tensor::from(mask, dims{6, 40})});
                         const value c = g.input("c", dtype::f32, dims{6, 40});
                         return g.apply(op::where, {c, random_input(g, in, r, "a", dims{6, 40}),
                                                    random_input(g, in, r, "b", dims{6, 40})});
                     }});
    cases.push_back({"matmul", op::matmul, 1e-2, [](graph& g, ins& in, rng& r) {
                         return g.apply(op::matmul, {random_input(g, in, r, "a", dims{2, 8, 24}),
                                                     random_input(g, in, r, "b", dims{2, 24, 12})});
                     }});
    cases.push_back({"matmul (transpose_b)", op::matmul, 1e-2, [](graph& g, ins& in, rng& r) {
                         return g.apply(op::matmul,
                                        {random_input(g, in, r, "a", dims{2, 8, 24}),
                                         random_input(g, in, r, "b", dims{2, 12, 24})},
                                        with([](attributes& a) { a.transpose_b = true; }));
                     }});
    cases.push_back({"linear", op::linear, 1e-2, [](graph& g, ins& in, rng& r) {
                         return g.apply(op::linear, {random_input(g, in, r, "x", dims{7, 40}),
                                                     random_constant(g, r, dims{24, 40}, -0.3f, 0.3f),
                                                     random_constant(g, r, dims{24})});
                     }});
    cases.push_back({"linear (fp16 weights)", op::linear, 1e-2, [](graph& g, ins& in, rng& r) {
                         const value w = g.apply(op::cast, {random_constant(g, r, dims{24, 40}, -0.3f, 0.3f)},
                                                 with([](attributes& a) { a.to = dtype::f16; }));
                         const value w32 =
                             g.apply(op::cast, {w}, with([](attributes& a) { a.to = dtype::f32; }));
                         return g.apply(op::linear, {random_input(g, in, r, "x", dims{7, 40}), w32});
                     }});
    cases.push_back({"conv2d", op::conv2d, 1e-2, [](graph& g, ins& in, rng& r) {
                         return g.apply(op::conv2d,
                                        {random_input(g, in, r, "x", dims{1, 8, 10, 10}),
                                         random_constant(g, r, dims{16, 8, 3, 3}, -0.2f, 0.2f),
                                         random_constant(g, r, dims{16})},
                                        with([](attributes& a) {
                                            a.kernel = {3, 3};
                                            a.padding = {1, 1, 1, 1};
                                        }));
                     }});
    cases.push_back({"conv2d (stride 2, depthwise)", op::conv2d, 1e-2, [](graph& g, ins& in, rng& r) {
                         return g.apply(op::conv2d,
                                        {random_input(g, in, r, "x", dims{1, 8, 9, 9}),
                                         random_constant(g, r, dims{8, 1, 3, 3}, -0.3f, 0.3f)},
                                        with([](attributes& a) {
                                            a.kernel = {3, 3};
                                            a.stride = {2, 2};
                                            a.padding = {1, 1, 1, 1};
                                            a.groups = 8;
                                        }));
                     }});
    auto pooling = [&](op kind) {
        cases.push_back({std::string(op_name(kind)), kind, 4e-3, [=](graph& g, ins& in, rng& r) {
                             return g.apply(kind, {random_input(g, in, r, "x", dims{1, 4, 8, 8})},
                                            with([](attributes& a) {
                                                a.kernel = {2, 2};
                                                a.stride = {2, 2};
                                            }));
                         }});
    };
    pooling(op::max_pool2d);
    pooling(op::avg_pool2d);
    auto upsample = [&](op kind) {
        cases.push_back({std::string(op_name(kind)), kind, 4e-3, [=](graph& g, ins& in, rng& r) {
                             return g.apply(kind, {random_input(g, in, r, "x", dims{1, 4, 5, 6})},
                                            with([](attributes& a) {
                                                a.sizes = {10, 12};
                                            }));
                         }});
    };
    upsample(op::upsample_nearest);
    upsample(op::upsample_bilinear);
    cases.push_back({"layer_norm", op::layer_norm, 1e-2, [](graph& g, ins& in, rng& r) {
                         return g.apply(op::layer_norm,
                                        {random_input(g, in, r, "x", dims{7, 40}),
                                         random_constant(g, r, dims{40}), random_constant(g, r, dims{40})},
                                        with([](attributes& a) { a.epsilon = 1e-5f; }));
                     }});
    cases.push_back({"rms_norm (large values)", op::rms_norm, 1e-2, [](graph& g, ins& in, rng& r) {
                         // x^2 past fp16's range: a naive decomposition overflows (RUNTIME.md §6, TMC).
                         return g.apply(op::rms_norm,
                                        {random_input(g, in, r, "x", dims{7, 40}, -400.0f, 400.0f),
                                         random_constant(g, r, dims{40})},
                                        with([](attributes& a) { a.epsilon = 1e-6f; }));
                     }});
    cases.push_back({"group_norm", op::group_norm, 1e-2, [](graph& g, ins& in, rng& r) {
                         return g.apply(op::group_norm,
                                        {random_input(g, in, r, "x", dims{1, 8, 4, 4}),
                                         random_constant(g, r, dims{8}), random_constant(g, r, dims{8})},
                                        with([](attributes& a) {
                                            a.groups = 4;
                                            a.epsilon = 1e-5f;
                                        }));
                     }});
    cases.push_back({"batch_norm", op::batch_norm, 1e-2, [](graph& g, ins& in, rng& r) {
                         return g.apply(
                             op::batch_norm,
                             {random_input(g, in, r, "x", dims{1, 8, 4, 4}), random_constant(g, r, dims{8}),
                              random_constant(g, r, dims{8}, 0.5f, 2.0f), random_constant(g, r, dims{8}),
                              random_constant(g, r, dims{8})},
                             with([](attributes& a) { a.epsilon = 1e-5f; }));
                     }});
    cases.push_back({"softmax", op::softmax, 4e-3, [](graph& g, ins& in, rng& r) {
                         return g.apply(op::softmax, {random_input(g, in, r, "x", dims{6, 40}, -4, 4)},
                                        with([](attributes& a) { a.axis = 1; }));
                     }});
    cases.push_back({"softmax (masked)", op::softmax, 4e-3, [](graph& g, ins& in, rng& r) {
                         return g.apply(op::softmax,
                                        {random_input(g, in, r, "x", dims{2, 6, 40}, -4, 4),
                                         random_input(g, in, r, "mask", dims{2, 1, 40}, -3, 0)},
                                        with([](attributes& a) { a.axis = 2; }));
                     }});
    auto reduction = [&](op kind) {
        cases.push_back({std::string(op_name(kind)), kind, 1e-2, [=](graph& g, ins& in, rng& r) {
                             return g.apply(kind, {random_input(g, in, r, "x", dims{3, 6, 40})},
                                            with([](attributes& a) {
                                                a.axes = {2};
                                                a.keep_dims = true;
                                            }));
                         }});
    };
    reduction(op::reduce_sum);
    reduction(op::reduce_mean);
    reduction(op::reduce_max);
    reduction(op::reduce_min);
    reduction(op::reduce_prod);  // host only: reported unsupported on the Neural Engine
    cases.push_back({"cumsum (exclusive, reverse)", op::cumsum, 1e-5, [](graph& g, ins& in, rng& r) {
                         return g.apply(op::cumsum, {random_input(g, in, r, "x", dims{6, 40})},
                                        with([](attributes& a) {
                                            a.axis = 1;
                                            a.exclusive = true;
                                            a.reverse = true;
                                        }));
                     }});
    cases.push_back({"argmax", op::argmax, 0.0, [](graph& g, ins& in, rng& r) {
                         return g.apply(op::argmax, {random_input(g, in, r, "x", dims{6, 40})},
                                        with([](attributes& a) { a.axis = 1; }));
                     }});
    cases.push_back(
        {"reshape", op::reshape, 2e-3, [](graph& g, ins& in, rng& r) {
             const value x = random_input(g, in, r, "x", dims{6, 40});
             const value y = g.apply(op::reshape, {x}, with([](attributes& a) { a.sizes = {4, 60}; }));
             return g.apply(op::relu, {y});
         }});
    cases.push_back({"permute", op::permute, 2e-3, [](graph& g, ins& in, rng& r) {
                         return g.apply(op::permute, {random_input(g, in, r, "x", dims{2, 6, 40})},
                                        with([](attributes& a) {
                                            a.axes = {2, 0, 1};
                                        }));
                     }});
    cases.push_back({"concat", op::concat, 2e-3, [](graph& g, ins& in, rng& r) {
                         return g.apply(op::concat,
                                        {random_input(g, in, r, "a", dims{6, 40}),
                                         random_input(g, in, r, "b", dims{6, 24})},
                                        with([](attributes& a) { a.axis = 1; }));
                     }});
    cases.push_back({"slice", op::slice, 2e-3, [](graph& g, ins& in, rng& r) {
                         return g.apply(op::slice, {random_input(g, in, r, "x", dims{6, 40})},
                                        with([](attributes& a) {
                                            a.begin = {1, 3};
                                            a.end = {5, 35};
                                            a.step = {1, 2};
                                        }));
                     }});
    cases.push_back({"pad", op::pad, 2e-3, [](graph& g, ins& in, rng& r) {
                         return g.apply(op::pad, {random_input(g, in, r, "x", dims{1, 4, 6, 40})},
                                        with([](attributes& a) {
                                            a.begin = {0, 0, 1, 2};
                                            a.end = {0, 0, 2, 1};
                                            a.value = 0.5f;
                                        }));
                     }});
    cases.push_back(
        {"gather", op::gather, 0.0, [](graph& g, ins& in, rng& r) {
             const value table = random_constant(g, r, dims{50, 40});
             in.push_back({"ids", host_tensor::from(std::vector<std::int32_t>{3, 1, 49, 0, 7}, dims{5})});
             return g.apply(op::gather, {table, g.input("ids", dtype::i32, dims{5})});
         }});
    cases.push_back({"gather_elements", op::gather_elements, 0.0, [](graph& g, ins& in, rng& r) {
                         std::vector<std::int32_t> ids(6 * 40);
                         for (std::size_t i = 0; i < ids.size(); ++i)
                             ids[i] = static_cast<std::int32_t>(i * 7 % 50) - 25;  // negative ones too
                         in.push_back({"ids", host_tensor::from(ids, dims{6, 40})});
                         return g.apply(
                             op::gather_elements,
                             {random_constant(g, r, dims{6, 50}), g.input("ids", dtype::i32, dims{6, 40})},
                             with([](attributes& a) { a.axis = 1; }));
                     }});
    cases.push_back(
        {"scatter_add (repeated rows)", op::scatter_add, 0.0, [](graph& g, ins& in, rng& r) {
             in.push_back({"ids", host_tensor::from(std::vector<std::int32_t>{3, 1, 49, 3, 7}, dims{5})});
             return g.apply(op::scatter_add,
                            {random_input(g, in, r, "x", dims{5, 40}), g.input("ids", dtype::i32, dims{5})},
                            with([](attributes& a) {
                                a.sizes = {50, 40};
                            }));
         }});
    cases.push_back({"attention (grouped-query, causal)", op::attention, 1e-2, [](graph& g, ins& in, rng& r) {
                         return g.apply(op::attention,
                                        {random_input(g, in, r, "q", dims{1, 4, 8, 16}),
                                         random_input(g, in, r, "k", dims{1, 2, 8, 16}),
                                         random_input(g, in, r, "v", dims{1, 2, 8, 16})},
                                        with([](attributes& a) { a.causal = true; }));
                     }});
    cases.push_back({"attention (additive mask)", op::attention, 1e-2, [](graph& g, ins& in, rng& r) {
                         return g.apply(op::attention,
                                        {random_input(g, in, r, "q", dims{2, 2, 6, 16}),
                                         random_input(g, in, r, "k", dims{2, 2, 10, 16}),
                                         random_input(g, in, r, "v", dims{2, 2, 10, 16}),
                                         random_input(g, in, r, "mask", dims{2, 1, 1, 10}, -3, 0)});
                     }});
    cases.push_back({"rotary", op::rotary, 4e-3, [](graph& g, ins& in, rng& r) {
                         return g.apply(op::rotary, {random_input(g, in, r, "x", dims{1, 2, 8, 32}),
                                                     random_input(g, in, r, "cos", dims{8, 8}, -1, 1),
                                                     random_input(g, in, r, "sin", dims{8, 8}, -1, 1)});
                     }});
    cases.push_back({"rotary (interleaved)", op::rotary, 4e-3, [](graph& g, ins& in, rng& r) {
                         return g.apply(op::rotary,
                                        {random_input(g, in, r, "x", dims{1, 2, 8, 32}),
                                         random_input(g, in, r, "cos", dims{8, 16}, -1, 1),
                                         random_input(g, in, r, "sin", dims{8, 16}, -1, 1)},
                                        with([](attributes& a) { a.interleaved = true; }));
                     }});
    cases.push_back({"dequantize_int8 (weights)", op::dequantize_int8, 1e-2, [](graph& g, ins& in, rng& r) {
                         std::vector<std::int8_t> q(24 * 40);
                         for (std::size_t i = 0; i < q.size(); ++i)
                             q[i] = static_cast<std::int8_t>(static_cast<int>(i * 37 % 255) - 127);
                         const value w =
                             g.apply(op::dequantize_int8, {g.constant(host_tensor::from(q, dims{24, 40})),
                                                           random_constant(g, r, dims{24}, 0.001f, 0.01f)});
                         return g.apply(op::linear, {random_input(g, in, r, "x", dims{5, 40}), w});
                     }});
    cases.push_back({"dequantize_lut (weights)", op::dequantize_lut, 1e-2, [](graph& g, ins& in, rng& r) {
                         std::vector<std::uint8_t> indices(24 * 40);
                         for (std::size_t i = 0; i < indices.size(); ++i)
                             indices[i] = static_cast<std::uint8_t>(i * 5 % 16);
                         const value w = g.apply(op::dequantize_lut,
                                                 {g.constant(host_tensor::from(indices, dims{24, 40})),
                                                  random_constant(g, r, dims{16}, -0.3f, 0.3f)});
                         return g.apply(op::linear, {random_input(g, in, r, "x", dims{5, 40}), w});
                     }});
    return cases;
}

}  // namespace detail::ane

namespace detail::ane {

// max |a - e| / max(1, max |e|), infinite when NaNs differ.
ANVIL_INLINE double relative_error(const host_tensor& expected, const host_tensor& actual) {
    const std::vector<float> e = expected.to_f32();
    const std::vector<float> a = actual.to_f32();
    double magnitude = 1.0;
    for (const float v : e)
        magnitude = std::max(magnitude, static_cast<double>(std::fabs(v)));
    double worst = 0.0;
    for (std::size_t i = 0; i < e.size() && i < a.size(); ++i) {
        if (std::isnan(a[i]) != std::isnan(e[i]) || !std::isfinite(a[i])) return INFINITY;
        worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - static_cast<double>(e[i])));
    }
    return e.size() == a.size() ? worst / magnitude : INFINITY;
}

// The best of `repeats` runs of `p`, in milliseconds; the last run's outputs land in `result`.
ANVIL_INLINE double best_of(program& p, std::span<const named_tensor> inputs, int repeats,
                            std::vector<host_tensor>& result) {
    using clock = std::chrono::steady_clock;
    double best = 1e300;
    for (int i = 0; i < std::max(1, repeats); ++i) {
        const auto start = clock::now();
        result = p.run(inputs);
        best = std::min(best, std::chrono::duration<double, std::milli>(clock::now() - start).count());
    }
    return best;
}

ANVIL_INLINE std::vector<feature_probe> feature_probes() {
    using rng = std::mt19937;
    using ins = std::vector<named_tensor>;
    using f = lowering_feature;
    std::vector<feature_probe> probes;
    const auto linear = [](graph& g, rng& r, value x, std::int64_t in, std::int64_t out) {
        return g.apply(op::linear, {x, random_constant(g, r, dims{out, in}, -0.3f, 0.3f)});
    };
    const auto after_linear = [&](f feature, double tolerance, dims shape, op kind, attributes attrs = {}) {
        probes.push_back({feature, tolerance, [=](graph& g, ins& in, rng& r) {
                              const value x = random_input(g, in, r, "x", shape);
                              const std::int64_t last = shape[shape.rank() - 1];
                              return g.apply(kind, {linear(g, r, x, last, last)}, attrs);
                          }});
    };
    const auto before_linear = [&](f feature, double tolerance, op kind, float low, float high) {
        probes.push_back({feature, tolerance, [=](graph& g, ins& in, rng& r) {
                              const value x = random_input(g, in, r, "x", dims{6, 64}, low, high);
                              return linear(g, r, g.apply(kind, {x}), 64, 32);
                          }});
    };
    // Both products of two computed tensors: matmul, and the einsum of attention over projections (the
    // split-einsum form), which the variant also chooses.
    probes.push_back(
        {f::matmul, 1e-2, [=](graph& g, ins& in, rng& r) {
             const value x = random_input(g, in, r, "a", dims{1, 32, 32});
             const value product =
                 g.apply(op::matmul, {linear(g, r, x, 32, 32), random_input(g, in, r, "b", dims{1, 32, 32})});
             const auto heads = [&](value projected) {
                 const value split = g.apply(op::reshape, {projected}, with([](attributes& a) {
                                                 a.sizes = {1, 32, 2, 16};
                                             }));
                 return g.apply(op::permute, {split}, with([](attributes& a) { a.axes = {0, 2, 1, 3}; }));
             };
             const value q = heads(linear(g, r, x, 32, 32));
             const value k = heads(linear(g, r, x, 32, 32));
             const value v = heads(linear(g, r, x, 32, 32));
             const value context =
                 g.apply(op::permute, {g.apply(op::attention, {q, k, v})}, with([](attributes& a) {
                             a.axes = {0, 2, 1, 3};
                         }));
             const value merged = g.apply(op::reshape, {context}, with([](attributes& a) {
                                              a.sizes = {1, 32, 32};
                                          }));
             return g.apply(op::add, {product, linear(g, r, merged, 32, 32)});
         }});
    const auto pool = [&](f feature, op kind) {
        probes.push_back({feature, 4e-3, [=](graph& g, ins& in, rng& r) {
                              const value x = random_input(g, in, r, "x", dims{1, 4, 8, 8});
                              const value mixed = g.apply(
                                  op::conv2d, {x, random_constant(g, r, dims{4, 4, 1, 1}, -0.5f, 0.5f)},
                                  with([](attributes& a) {
                                      a.kernel = {1, 1};
                                  }));
                              return g.apply(kind, {mixed}, with([](attributes& a) {
                                                 a.kernel = {3, 3};
                                                 a.stride = {2, 2};
                                                 a.padding = {1, 1, 1, 1};
                                                 a.count_include_pad = false;
                                             }));
                          }});
    };
    pool(f::max_pool, op::max_pool2d);
    pool(f::avg_pool, op::avg_pool2d);
    after_linear(f::softmax, 4e-3, dims{6, 64}, op::softmax, with([](attributes& a) { a.axis = 1; }));
    after_linear(f::gelu, 4e-3, dims{6, 64}, op::gelu);
    before_linear(f::rsqrt, 1e-2, op::rsqrt, 0.25f, 4.0f);
    after_linear(f::reduce_mean, 1e-2, dims{3, 6, 64}, op::reduce_mean, with([](attributes& a) {
                     a.axes = {2};
                     a.keep_dims = true;
                 }));
    after_linear(f::exp, 1e-2, dims{6, 64}, op::exp);
    before_linear(f::log, 1e-2, op::log, 0.1f, 4.0f);
    before_linear(f::sqrt, 1e-2, op::sqrt, 0.05f, 4.0f);
    // A decode step's shape: one row, whose surfaces are narrower than 32 unless padded.
    probes.push_back({f::io_width, 1e-2, [=](graph& g, ins& in, rng& r) {
                          return linear(g, r, random_input(g, in, r, "x", dims{1, 48}), 48, 24);
                      }});
    probes.push_back(
        {f::anchorless, 2e-3, [](graph& g, ins& in, rng& r) {
             const value a = random_input(g, in, r, "a", dims{4, 64});
             return g.apply(op::relu, {g.apply(op::add, {a, random_input(g, in, r, "b", dims{4, 64})})});
         }});
    probes.push_back(
        {f::dialect, 1e-2, [=](graph& g, ins& in, rng& r) {
             return g.apply(op::gelu_tanh, {linear(g, r, random_input(g, in, r, "x", dims{6, 64}), 64, 64)});
         }});
    // Two weights, so the program's weight file holds two blobs (or each its own file).
    probes.push_back(
        {f::weight_files, 1e-2, [=](graph& g, ins& in, rng& r) {
             return linear(g, r, linear(g, r, random_input(g, in, r, "x", dims{6, 64}), 64, 64), 64, 32);
         }});
    // A linear whose weight is a palette of 16 values (4-bit indices), as compressed checkpoints give them.
    probes.push_back({f::palette, 1e-2, [](graph& g, ins& in, rng& r) {
                          std::vector<std::uint8_t> indices(32 * 64);
                          for (auto& index : indices)
                              index = static_cast<std::uint8_t>(r() % 16);
                          std::vector<float> palette(16);
                          for (std::size_t i = 0; i < palette.size(); ++i)
                              palette[i] = (static_cast<float>(i) - 7.5f) * 0.04f;
                          const value w = g.apply(op::dequantize_lut,
                                                  {g.constant(host_tensor::from(indices, dims{32, 64})),
                                                   g.constant(host_tensor::from(palette, dims{16}))});
                          return g.apply(op::linear, {random_input(g, in, r, "x", dims{6, 64}), w});
                      }});
    return probes;
}

ANVIL_INLINE std::string architecture_or_unknown(const std::string& architecture) {
    return architecture.empty() ? std::string("unknown") : architecture;
}

}  // namespace detail::ane

ANVIL_INLINE detail::ane::capability_record ane_probe_capabilities(const ane_selftest_options& options,
                                                                   std::vector<ane_probe_row>* rows) {
    using namespace detail::ane;
    const device_info device = query_device();
    capability_record record;
    record.os_build = os_build();
    record.chip = architecture_or_unknown(device.architecture);
    record.anvil_version = version_string;
    record.simulated = runtime::get().simulated();
    std::mt19937 random(options.seed);
    for (const feature_probe& probe : feature_probes()) {
        const feature_description& d = describe_feature(probe.feature);
        for (const lowering_variant variant : {lowering_variant::native, lowering_variant::decomposed}) {
            if (variant == lowering_variant::decomposed && d.decomposed.empty()) continue;
            graph g;
            std::vector<named_tensor> inputs;
            const value out = probe.build(g, inputs, random);
            probe_outcome outcome;
            outcome.tolerance = probe.tolerance;
            try {
                compile_options cpu_options;
                program cpu = compile({out}, cpu_options);
                compile_options ane_options = options.ane;
                ane_options.target = device::ane;
                ane_options.strict_device = true;  // a refusal must fail the probe, not fall back to the CPU
                ane_options.ane_exact_lowering = true;  // nor be rescued by another form
                ane_options.ane_capabilities = "none";
                ane_options.cache_dir = "none";
                ane_options.placement_log.reset();
                // A probe's load fails for good more often than for lack of resources: one retry, not seven.
                ane_options.ane_load_attempts = std::min(ane_options.ane_load_attempts, 2);
                ane_options.ane_load_first_retry_delay = std::chrono::milliseconds(10);
                ane_options.ane_lowering[std::string(d.name)] = std::string(variant_name(variant));
                program ane = compile({out}, ane_options);
                std::vector<host_tensor> want, got;
                best_of(cpu, inputs, 1, want);
                outcome.ms = best_of(ane, inputs, options.repeats, got);
                outcome.max_error = relative_error(want.at(0), got.at(0));
                outcome.held = outcome.max_error <= std::max(probe.tolerance, 1e-6);
                if (!outcome.held)
                    outcome.error =
                        detail::message("its largest error against the CPU is ", outcome.max_error,
                                        ", past the tolerance ", probe.tolerance);
            } catch (const std::exception& e) {
                outcome.held = false;
                outcome.error = e.what();
            }
            if (rows != nullptr)
                rows->push_back({std::string(d.name), std::string(variant_name(variant)), outcome});
            record.features[std::string(d.name)][std::string(variant_name(variant))] = std::move(outcome);
        }
    }
    return record;
}

ANVIL_INLINE void write_capability_record(const detail::ane::capability_record& record,
                                          const std::filesystem::path& path) {
    std::error_code code;
    std::filesystem::create_directories(path.parent_path(), code);
    std::filesystem::path staging = path;
    staging += ".tmp";
    {
        std::ofstream out(staging, std::ios::binary | std::ios::trunc);
        out << json::dump(record.to_json(), 2) << "\n";
        out.close();
        if (!out)
            throw io_error(
                detail::message("selftest: cannot write the capability record '", staging.string(), "'"));
    }
    std::filesystem::rename(staging, path, code);
    if (code) {
        throw io_error(detail::message("selftest: cannot move '", staging.string(), "' to '", path.string(),
                                       "': ", code.message()));
    }
}

ANVIL_INLINE std::vector<ane_selftest_row> ane_selftest(const ane_selftest_options& options) {
    std::vector<ane_selftest_row> rows;
    std::mt19937 random(options.seed);
    for (const auto& c : detail::ane::selftest_cases()) {
        ane_selftest_row row;
        row.name = c.name;
        row.kind = c.kind;
        row.tolerance = c.tolerance;
        graph g;
        std::vector<named_tensor> inputs;
        const value out = c.build(g, inputs, random);
        // A second output anchors the program with a linear of the first input (a 1x1 conv), as real programs
        // are: a program of one elementwise op alone may not load (RUNTIME.md §0 #6), which is not what this
        // case tests.
        std::optional<value> anchor;
        for (std::size_t id = 0; id < g.nodes().size(); ++id) {
            const node& n = g.nodes()[id];
            if (n.kind != op::input || !is_floating(n.result.type) || n.result.shape.rank() == 0) continue;
            const std::int64_t last = n.result.shape[n.result.shape.rank() - 1];
            const value x(out.owner(), static_cast<value_id>(id));
            anchor = g.apply(op::linear, {x, detail::ane::random_constant(g, random, dims{32, last})});
            break;
        }
        const std::vector<value> outputs =
            anchor ? std::vector<value>{out, *anchor} : std::vector<value>{out};
        try {
            compile_options cpu_options;
            program cpu = compile(outputs, cpu_options);
            compile_options ane_options = options.ane;
            ane_options.target = device::ane;
            ane_options.strict_device = false;
            program ane = compile(outputs, ane_options);
            // Where the node of the case's op landed, with the choices the program was lowered with.
            const placement_report placement = ane.placement();
            {
                graph_body body;
                body.nodes = g.nodes();
                body.outputs = {out.id()};
                detail::ane::lowering_options lowering;
                lowering.choices = detail::ane::choices_for(
                    ane_options, placement.device == "unknown" ? std::string() : placement.device,
                    detail::ane::macos_major_version());
                for (std::size_t id = body.nodes.size(); id-- > 0;) {
                    if (body.nodes[id].kind != c.kind) continue;
                    const auto support = detail::ane::supports(body, static_cast<value_id>(id), lowering);
                    row.placement = support.where == detail::ane::placement::native       ? "native"
                                    : support.where == detail::ane::placement::decomposed ? "decomposed"
                                                                                          : "host";
                    row.note = support.reason;
                    break;
                }
            }
            std::vector<host_tensor> want;
            std::vector<host_tensor> got;
            row.cpu_ms = detail::ane::best_of(cpu, inputs, options.repeats, want);
            row.ane_ms = detail::ane::best_of(ane, inputs, options.repeats, got);
            row.max_error = detail::ane::relative_error(want.at(0), got.at(0));
            row.passed = row.max_error <= std::max(row.tolerance, 1e-6);
            if (std::none_of(placement.segments.begin(), placement.segments.end(),
                             [](const placement_segment& s) { return s.device == "ane"; })) {
                row.placement = "host";
                if (!placement.segments.empty()) row.note = placement.segments.front().reason;
            }
            for (const auto& segment : placement.segments) {
                if (segment.refused_at.empty()) continue;
                row.placement = "refused";
                row.passed = false;
                row.note = detail::message("the Neural Engine refused its program at ", segment.refused_at,
                                           ": ", segment.framework_error);
                break;
            }
        } catch (const std::exception& e) {
            row.passed = false;
            row.note = e.what();
        }
        rows.push_back(std::move(row));
    }
    return rows;
}

}  // namespace anvil
