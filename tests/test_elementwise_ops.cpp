// The elementwise ops ONNX's Erf, Floor, Ceil, Round, Sign, Sin, Cos, Equal, Less, LessOrEqual, Greater,
// GreaterOrEqual, And, Or, Xor and Not map onto: on the CPU backend (the fast kernels, portable and fastest
// paths, and the reference kernels) against values computed here with libm and C++'s operators, special
// values included; their type rules; fusion next to booleans; the expression front end; and on the simulated
// Neural Engine, where erf, sign, the comparisons and the logical ops run (booleans as fp16 1 and 0) and
// floor, ceil, round, sin and cos run on the host with their reason, and in an exported Core ML package.
//
// Tolerances: floor, ceil, round, sign, comparisons and logic are exact (bit for bit, signed zeros
// included); erf, sin and cos within 2 ulp of double-precision libm on the CPU; the Neural Engine within
// fp16's 2e-3 of the output's magnitude, and exactly for booleans (the inputs there are quarters, exact in
// fp16).
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>
#include <anvil/backend/ane/ane_program.hpp>
#include <anvil/backend/coreml/coreml_framework.hpp>

#include "ane_simulator.hpp"
#include "model_test_support.hpp"

#include <bit>
#include <cfenv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

// A namespace of its own, so the test files can be compiled together (a unity build).
namespace test_elementwise_ops {

namespace {

using anvil::dims;
using anvil::dtype;
using anvil::host_tensor;
using anvil::op;

constexpr float nan = std::numeric_limits<float>::quiet_NaN();
constexpr float inf = std::numeric_limits<float>::infinity();

// The three ways the CPU backend runs an op: the fast kernels through the portable (4-lane) and the fastest
// (AVX2 where the CPU has it) entry points, and the reference kernels.
struct cpu_mode {
    const char* name;
    anvil::cpu_kernels kernels;
    bool portable;
};
constexpr cpu_mode cpu_modes[] = {{"fast, portable", anvil::cpu_kernels::optimized, true},
                                  {"fast, fastest", anvil::cpu_kernels::optimized, false},
                                  {"reference", anvil::cpu_kernels::reference, false}};

std::vector<host_tensor> run_on_cpu(std::span<const anvil::value> outputs,
                                    const std::vector<anvil::named_tensor>& inputs, const cpu_mode& mode) {
    anvil::compile_options options;
    options.kernels = mode.kernels;
    options.threads = 2;
    anvil::program p = anvil::compile(outputs, options);
    anvil::detail::cpu::force_portable_kernels = mode.portable;
    std::vector<host_tensor> results = p.run(inputs);
    anvil::detail::cpu::force_portable_kernels = false;
    return results;
}

host_tensor bools(const std::vector<int>& values, dims shape) {
    host_tensor t(dtype::boolean, shape);
    for (std::size_t i = 0; i < values.size(); ++i)
        t.values<bool>()[i] = values[i] != 0;
    return t;
}

// Awkward values first (signed zeros, infinities, NaN, ties of every kind, the edges of float's integer
// range, denormals), then quarters over [-10, 10], then a sweep over every exponent, both signs.
std::vector<float> unary_inputs() {
    std::vector<float> values{0.0f,         -0.0f,       inf,        -inf,        nan,        0.5f,
                              -0.5f,        1.5f,        -1.5f,      2.5f,        -2.5f,      0.49999997f,
                              -0.49999997f, 0.50000006f, 1e-40f,     -1e-40f,     -3e-39f,    1e-45f,
                              8388607.5f,   -8388607.5f, 4194304.5f, -4194303.5f, 8388608.0f, 16777215.0f,
                              1e30f,        -1e30f,      3.4e38f,    -3.4e38f,    100.0f,     -100.0f,
                              3.9f,         -3.9f,       0.3f,       -0.3f,       0.7f,       -0.7f};
    for (int k = -40; k <= 40; ++k)
        values.push_back(static_cast<float>(k) * 0.25f);
    for (std::uint32_t bits = 0; bits < 0x7f800000u; bits += 0x7ffffu) {
        values.push_back(std::bit_cast<float>(bits));
        values.push_back(-std::bit_cast<float>(bits));
    }
    return values;
}

// |got - want| in units in the last place of want rounded to float (at least the smallest normal's ulp).
double ulp_error(float got, double want) {
    if (std::isnan(want)) return std::isnan(got) ? 0.0 : 1e30;
    const auto rounded = static_cast<float>(want);
    if (std::isinf(rounded)) return got == rounded ? 0.0 : 1e30;
    const double ulp = std::max(std::fabs(static_cast<double>(std::nextafter(rounded, inf)) - rounded),
                                static_cast<double>(std::numeric_limits<float>::denorm_min()) * 0x1p23);
    return std::fabs(static_cast<double>(got) - want) / ulp;
}

bool same_bits_or_both_nan(float a, float b) {
    return (std::isnan(a) && std::isnan(b)) ||
           std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

}  // namespace

TEST_CASE("elementwise ops: floor, ceil, round and sign are exact, signed zeros and NaN included") {
    REQUIRE(std::fegetround() == FE_TONEAREST);  // std::nearbyint below is then numpy's rint
    const std::vector<float> xs = unary_inputs();
    const dims shape{static_cast<std::int64_t>(xs.size())};
    const std::pair<op, std::function<float(float)>> cases[] = {
        {op::floor, [](float x) { return std::floor(x); }},
        {op::ceil, [](float x) { return std::ceil(x); }},
        {op::round, [](float x) { return std::nearbyint(x); }},
        // numpy's sign: both zeros give +0, NaN stays NaN.
        {op::sign, [](float x) { return std::isnan(x) ? x
                                        : x > 0.0f    ? 1.0f
                                        : x < 0.0f    ? -1.0f
                                                      : 0.0f; }},
    };
    // Spot checks that pin down the rules, independent of libm.
    CHECK(std::nearbyint(2.5f) == 2.0f);
    CHECK(std::nearbyint(-3.5f) == -4.0f);
    CHECK(std::signbit(std::nearbyint(-0.3f)));
    for (const auto& c : cases) {
        const op kind = c.first;  // named, not bound: INFO captures it (Clang 14 refuses bindings)
        const auto& expected = c.second;
        anvil::graph g;
        const anvil::value x = g.input("x", dtype::f32, shape);
        const anvil::value y = g.apply(kind, {x});
        for (const cpu_mode& mode : cpu_modes) {
            const auto got = run_on_cpu(std::span(&y, 1), {{"x", host_tensor::from(xs, shape)}}, mode);
            REQUIRE(got[0].type() == dtype::f32);
            const auto values = got[0].values<float>();
            std::size_t wrong = 0;
            for (std::size_t i = 0; i < xs.size(); ++i) {
                if (same_bits_or_both_nan(values[i], expected(xs[i]))) continue;
                if (++wrong <= 3) {
                    INFO(anvil::op_name(kind), " (", mode.name, ") of ", xs[i], " gave ", values[i],
                         ", expected ", expected(xs[i]));
                    CHECK(false);
                }
            }
            CHECK(wrong == 0);
        }
    }
    // The ties and zeros named.
    anvil::graph g;
    const std::vector<float> ties{0.5f, 1.5f, 2.5f, -0.5f, -2.5f, -0.0f, 4194304.5f};
    const dims tie_shape{7};
    const anvil::value x = g.input("x", dtype::f32, tie_shape);
    const anvil::value r = g.apply(op::round, {x});
    const anvil::value s = g.apply(op::sign, {x});
    const anvil::value outputs[] = {r, s};
    for (const cpu_mode& mode : cpu_modes) {
        CAPTURE(mode.name);
        const auto got = run_on_cpu(outputs, {{"x", host_tensor::from(ties, tie_shape)}}, mode);
        CHECK(got[0].to_f32() == std::vector<float>{0.0f, 2.0f, 2.0f, -0.0f, -2.0f, -0.0f, 4194304.0f});
        CHECK(std::signbit(got[0].values<float>()[3]));
        CHECK(std::signbit(got[0].values<float>()[5]));
        CHECK(got[1].to_f32() == std::vector<float>{1.0f, 1.0f, 1.0f, -1.0f, -1.0f, 0.0f, 1.0f});
        CHECK(!std::signbit(got[1].values<float>()[5]));
    }
}

TEST_CASE("elementwise ops: erf, sin and cos are within 2 ulp of double-precision libm") {
    const std::vector<float> xs = unary_inputs();
    const dims shape{static_cast<std::int64_t>(xs.size())};
    const std::pair<op, double (*)(double)> cases[] = {
        {op::erf, [](double x) { return std::erf(x); }},
        {op::sin, [](double x) { return std::sin(x); }},
        {op::cos, [](double x) { return std::cos(x); }},
    };
    for (const auto& c : cases) {
        const op kind = c.first;  // named, not bound: INFO captures it (Clang 14 refuses bindings)
        const auto& expected = c.second;
        anvil::graph g;
        const anvil::value x = g.input("x", dtype::f32, shape);
        const anvil::value y = g.apply(kind, {x});
        for (const cpu_mode& mode : cpu_modes) {
            const auto got = run_on_cpu(std::span(&y, 1), {{"x", host_tensor::from(xs, shape)}}, mode);
            const auto values = got[0].values<float>();
            double worst = 0.0;
            float worst_at = 0.0f;
            for (std::size_t i = 0; i < xs.size(); ++i) {
                const double error = ulp_error(values[i], expected(static_cast<double>(xs[i])));
                if (error > worst) worst = error, worst_at = xs[i];
            }
            INFO(anvil::op_name(kind), " (", mode.name, "): ", worst, " ulp at ", worst_at);
            CHECK(worst <= 2.0);
        }
    }
    // Named values: erf's limits and odd symmetry, and NaN and infinities through sin and cos.
    anvil::graph g;
    const std::vector<float> named{0.0f, -0.0f, inf, -inf, nan, 1.0f, -1.0f};
    const dims named_shape{7};
    const anvil::value x = g.input("x", dtype::f32, named_shape);
    const anvil::value outputs[] = {g.apply(op::erf, {x}), g.apply(op::sin, {x}), g.apply(op::cos, {x})};
    for (const cpu_mode& mode : cpu_modes) {
        CAPTURE(mode.name);
        const auto got = run_on_cpu(outputs, {{"x", host_tensor::from(named, named_shape)}}, mode);
        const auto erfs = got[0].values<float>();
        CHECK(erfs[0] == 0.0f);
        CHECK(std::signbit(erfs[1]));
        CHECK(erfs[2] == 1.0f);
        CHECK(erfs[3] == -1.0f);
        CHECK(std::isnan(erfs[4]));
        CHECK(erfs[6] == -erfs[5]);
        const auto sines = got[1].values<float>();
        const auto cosines = got[2].values<float>();
        CHECK(std::signbit(sines[1]));
        CHECK(cosines[0] == 1.0f);
        for (const std::size_t i : {std::size_t{2}, std::size_t{3}, std::size_t{4}}) {
            CHECK(std::isnan(sines[i]));
            CHECK(std::isnan(cosines[i]));
        }
    }
}

TEST_CASE("elementwise ops: comparisons broadcast, give bool, and NaN compares false") {
    // a [2, 3, 1] against b [4]: the result is [2, 3, 4].
    const std::vector<float> a{nan, -0.0f, 1.0f, inf, 2.0f, -3.0f};
    const std::vector<float> b{0.0f, 1.0f, nan, inf};
    const std::pair<op, std::function<bool(float, float)>> cases[] = {
        {op::equal, [](float p, float q) { return p == q; }},
        {op::less, [](float p, float q) { return p < q; }},
        {op::less_equal, [](float p, float q) { return p <= q; }},
        {op::greater, [](float p, float q) { return p > q; }},
        {op::greater_equal, [](float p, float q) { return p >= q; }},
    };
    anvil::graph g;
    const anvil::value va = g.input("a", dtype::f32, dims{2, 3, 1});
    const anvil::value vb = g.input("b", dtype::f32, dims{4});
    std::vector<anvil::value> outputs;
    for (const auto& c : cases)
        outputs.push_back(g.apply(c.first, {va, vb}));
    // Integers compare as numbers; booleans compare for equality.
    const anvil::value ia = g.input("ia", dtype::i32, dims{3});
    const anvil::value ib = g.input("ib", dtype::i32, dims{});
    outputs.push_back(g.apply(op::less, {ia, ib}));
    const anvil::value p = g.input("p", dtype::boolean, dims{4});
    const anvil::value q = g.input("q", dtype::boolean, dims{4});
    outputs.push_back(g.apply(op::equal, {p, q}));
    const std::vector<anvil::named_tensor> inputs{
        {"a", host_tensor::from(a, dims{2, 3, 1})},
        {"b", host_tensor::from(b, dims{4})},
        {"ia", host_tensor::from(std::vector<std::int32_t>{-2, 0, 7}, dims{3})},
        {"ib", host_tensor::from(std::vector<std::int32_t>{0}, dims{})},
        {"p", bools({1, 1, 0, 0}, dims{4})},
        {"q", bools({1, 0, 1, 0}, dims{4})}};
    for (const cpu_mode& mode : cpu_modes) {
        CAPTURE(mode.name);
        const auto got = run_on_cpu(outputs, inputs, mode);
        for (std::size_t c = 0; c < std::size(cases); ++c) {
            CAPTURE(anvil::op_name(cases[c].first));
            REQUIRE(got[c].type() == dtype::boolean);
            REQUIRE(got[c].shape() == dims{2, 3, 4});
            const auto values = got[c].values<bool>();
            for (std::size_t i = 0; i < a.size(); ++i) {
                for (std::size_t j = 0; j < b.size(); ++j) {
                    INFO(a[i], " vs ", b[j]);
                    CHECK(values[i * b.size() + j] == cases[c].second(a[i], b[j]));
                }
            }
        }
        const auto integers = got[5].values<bool>();
        CHECK(got[5].type() == dtype::boolean);
        CHECK((integers[0] && !integers[1] && !integers[2]));
        const auto equal = got[6].values<bool>();
        CHECK((equal[0] && !equal[1] && !equal[2] && equal[3]));
    }
    // -0 equals +0; NaN equals nothing, itself included.
    CHECK(-0.0f == 0.0f);
    CHECK_FALSE(nan == nan);
}

TEST_CASE("elementwise ops: logical ops broadcast bool operands") {
    const std::vector<int> p{1, 0};
    const std::vector<int> q{1, 0, 1};
    anvil::graph g;
    const anvil::value vp = g.input("p", dtype::boolean, dims{2, 1});
    const anvil::value vq = g.input("q", dtype::boolean, dims{3});
    const anvil::value outputs[] = {g.apply(op::logical_and, {vp, vq}), g.apply(op::logical_or, {vp, vq}),
                                    g.apply(op::logical_xor, {vp, vq}), g.apply(op::logical_not, {vq})};
    const std::vector<anvil::named_tensor> inputs{{"p", bools(p, dims{2, 1})}, {"q", bools(q, dims{3})}};
    for (const cpu_mode& mode : cpu_modes) {
        CAPTURE(mode.name);
        const auto got = run_on_cpu(outputs, inputs, mode);
        for (const auto& t : got)
            CHECK(t.type() == dtype::boolean);
        REQUIRE(got[0].shape() == dims{2, 3});
        for (std::size_t i = 0; i < p.size(); ++i) {
            for (std::size_t j = 0; j < q.size(); ++j) {
                const bool a = p[i] != 0, b = q[j] != 0;
                CAPTURE(a);
                CAPTURE(b);
                CHECK(got[0].values<bool>()[i * 3 + j] == (a && b));
                CHECK(got[1].values<bool>()[i * 3 + j] == (a || b));
                CHECK(got[2].values<bool>()[i * 3 + j] == (a != b));
            }
        }
        CHECK(got[3].values<bool>()[0] == false);
        CHECK(got[3].values<bool>()[1] == true);
        CHECK(got[3].values<bool>()[2] == false);
    }
}

TEST_CASE("elementwise ops: operand types are checked, naming the op") {
    anvil::graph g;
    const anvil::value x = g.input("x", dtype::f32, dims{2, 3});
    const anvil::value h = g.input("h", dtype::f16, dims{2, 3});
    const anvil::value i = g.input("i", dtype::i32, dims{2, 3});
    const anvil::value b = g.input("b", dtype::boolean, dims{2, 3});
    const anvil::value w = g.input("w", dtype::f32, dims{4});
    CHECK_THROWS_WITH_AS(g.apply(op::logical_and, {x, b}),
                         "logical_and: operands must be bool, got f32 and bool (compare numbers first, or "
                         "cast them to bool)",
                         anvil::type_error);
    CHECK_THROWS_WITH_AS(g.apply(op::logical_not, {x}),
                         doctest::Contains("logical_not: the operand must be bool, got f32"),
                         anvil::type_error);
    CHECK_THROWS_WITH_AS(g.apply(op::less, {b, b}), "less: operands must be numeric, got bool and bool",
                         anvil::type_error);
    CHECK_THROWS_WITH_AS(g.apply(op::equal, {x, h}), "equal: operand types differ (f32 and f16)",
                         anvil::type_error);
    CHECK_THROWS_WITH_AS(g.apply(op::erf, {i}), "erf: the operand must be floating point, got i32",
                         anvil::type_error);
    CHECK_THROWS_WITH_AS(g.apply(op::round, {b}), "round: the operand must be floating point, got bool",
                         anvil::type_error);
    CHECK_THROWS_WITH_AS(g.apply(op::sign, {b}), "sign: the operand must be numeric, got bool",
                         anvil::type_error);
    CHECK_THROWS_WITH_AS(g.apply(op::greater, {x, w}),
                         doctest::Contains("greater: shapes [2, 3] and [4] do not broadcast"),
                         anvil::shape_error);
    // What does pass: sign of integers, equal of booleans, comparisons of f16.
    CHECK(g.apply(op::sign, {i}).type() == dtype::i32);
    CHECK(g.apply(op::equal, {b, b}).type() == dtype::boolean);
    CHECK(g.apply(op::greater_equal, {h, h}).type() == dtype::boolean);
    CHECK(g.apply(op::logical_xor, {b, g.apply(op::less, {x, x})}).shape() == dims{2, 3});
}

TEST_CASE("elementwise ops: a comparison feeding where stays out of the fused chain, which stays right") {
    const dims shape{3, 300};
    std::vector<float> xs(900), ys(300);
    for (std::size_t i = 0; i < xs.size(); ++i)
        xs[i] = static_cast<float>(static_cast<int>(i * 37 % 101) - 50) * 0.07f;
    for (std::size_t i = 0; i < ys.size(); ++i)
        ys[i] = static_cast<float>(static_cast<int>(i * 11 % 23) - 11) * 0.3f;
    xs[5] = nan;
    anvil::graph g;
    const anvil::value x = g.input("x", dtype::f32, shape);
    const anvil::value y = g.input("y", dtype::f32, dims{300});
    const anvil::value picked =
        g.apply(op::where, {g.apply(op::greater, {x, y}), g.apply(op::exp, {x}), g.apply(op::neg, {y})});
    const std::vector<anvil::named_tensor> inputs{{"x", host_tensor::from(xs, shape)},
                                                  {"y", host_tensor::from(ys, dims{300})}};
    anvil::program fused = anvil::compile({picked});
    const std::string dump = fused.dump();
    INFO(dump);
    CHECK(dump.find("fused_elementwise") != std::string::npos);  // where and exp
    CHECK(dump.find("= greater(") != std::string::npos);         // a node of its own, read as a leaf
    for (const cpu_mode& mode : cpu_modes) {
        CAPTURE(mode.name);
        const auto got = run_on_cpu(std::span(&picked, 1), inputs, mode);
        const auto values = got[0].values<float>();
        for (std::size_t i = 0; i < xs.size(); ++i) {
            const float yi = ys[i % 300];
            const double want = xs[i] > yi ? std::exp(static_cast<double>(xs[i])) : -yi;  // NaN > y is false
            CHECK(std::fabs(values[i] - want) <= 2e-6 * std::fabs(want));
        }
    }
    // A fused node built by hand may hold comparisons and logic: where(x < y and x > 0, x, y).
    anvil::attributes attrs;
    attrs.steps = {{op::less, {0, 1, 0}, 0.0f, 0.0f},
                   {op::greater, {0, 2, 0}, 0.0f, 0.0f},
                   {op::logical_and, {3, 4, 0}, 0.0f, 0.0f},
                   {op::where, {5, 0, 1}, 0.0f, 0.0f}};
    const anvil::value zero = g.constant(host_tensor::from(std::vector<float>{0.0f}, dims{}));
    const anvil::value chain = g.apply(op::fused_elementwise, {x, y, zero}, attrs);
    for (const cpu_mode& mode : cpu_modes) {
        CAPTURE(mode.name);
        const auto got = run_on_cpu(std::span(&chain, 1), inputs, mode);
        const auto values = got[0].values<float>();
        for (std::size_t i = 0; i < xs.size(); ++i) {
            const float yi = ys[i % 300];
            CHECK(same_bits_or_both_nan(values[i], xs[i] < yi && xs[i] > 0.0f ? xs[i] : yi));
        }
    }
}

TEST_CASE("elementwise ops: the expression front end spells them, comparisons as bool tensors") {
    anvil::graph g;
    const auto x = g.input<float>("x", anvil::shape<2, 3>{});
    const auto limit = g.input<float>("limit", anvil::shape<3>{});
    const auto rounded = anvil::round(x);
    const auto below = anvil::less(x, limit);
    const auto kept = anvil::logical_and(below, anvil::logical_not(anvil::equal(rounded, x)));
    const auto out = anvil::where(kept, anvil::sign(x) + anvil::erf(x) * 0.0f, anvil::floor(x));
    static_assert(std::is_same_v<decltype(below), const anvil::tensor<bool, anvil::shape<2, 3>>>);
    static_assert(std::is_same_v<decltype(out), const anvil::tensor<float, anvil::shape<2, 3>>>);
    CHECK(below.type() == dtype::boolean);
    CHECK(g[below.value().id()].kind == op::less);
    const std::vector<float> xs{-1.5f, 0.25f, 2.0f, 3.5f, -0.75f, 7.0f};
    const std::vector<anvil::named_tensor> inputs{
        {"x", host_tensor::from(xs, dims{2, 3})},
        {"limit", host_tensor::from(std::vector<float>{0.0f, 1.0f, 5.0f}, dims{3})}};
    const auto got = anvil::compile({out.value()}).run(inputs);
    // Below the limit and not whole: the sign, else the floor.
    CHECK(got[0].to_f32() == std::vector<float>{-1.0f, 1.0f, 2.0f, 3.0f, -1.0f, 7.0f});
}

#ifdef ANVIL_ANE_SIM_PATH

namespace {

// Quarters in [-2, 2] (exact in fp16, so the Neural Engine compares exactly what the CPU compares).
std::vector<float> quarters(std::size_t count, int seed) {
    std::vector<float> values(count);
    for (std::size_t i = 0; i < count; ++i)
        values[i] =
            static_cast<float>(static_cast<int>((i * 7 + static_cast<std::size_t>(seed)) % 17) - 8) * 0.25f;
    return values;
}

// An identity linear: it anchors the program with a conv (RUNTIME.md §0 #6) and leaves x exact.
anvil::value identity_linear(anvil::graph& g, const anvil::value& x, std::int64_t n) {
    std::vector<float> w(static_cast<std::size_t>(n * n), 0.0f);
    for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i)
        w[i * static_cast<std::size_t>(n) + i] = 1.0f;
    return g.apply(op::linear, {x, g.constant(host_tensor::from(w, dims{n, n}))});
}

}  // namespace

TEST_CASE(
    "elementwise ops: erf, sign, comparisons and logic run on the simulated Neural Engine; floor, ceil, "
    "round, sin and cos on the host, with the reason") {
    using anvil_test::sim;
    REQUIRE(anvil_test::ane_simulator_available());
    sim().reset();
    anvil::graph g;
    const anvil::value x = g.input("x", dtype::f32, dims{4, 64});
    const anvil::value y = g.input("y", dtype::f32, dims{64});
    const anvil::value h = identity_linear(g, x, 64);
    std::vector<anvil::value> outputs;
    for (const op kind : {op::erf, op::sign})
        outputs.push_back(g.apply(kind, {h}));
    for (const op kind : {op::equal, op::less, op::less_equal, op::greater, op::greater_equal})
        outputs.push_back(g.apply(kind, {h, y}));
    const anvil::value above = g.apply(op::greater, {h, y});
    const anvil::value small =
        g.apply(op::less, {h, g.constant(host_tensor::from(std::vector<float>{1.0f}, dims{}))});
    for (const op kind : {op::logical_and, op::logical_or, op::logical_xor})
        outputs.push_back(g.apply(kind, {above, small}));
    outputs.push_back(g.apply(op::logical_not, {above}));
    outputs.push_back(g.apply(op::where, {g.apply(op::logical_xor, {above, small}), h, y}));
    anvil::attributes to_bool;
    to_bool.to = dtype::boolean;
    outputs.push_back(g.apply(op::cast, {h}, to_bool));  // x != 0: zeros are among the quarters
    // The host-only ops, and a boolean from the Neural Engine read by a CPU segment (a cast to integers).
    for (const op kind : {op::floor, op::ceil, op::round, op::sin, op::cos})
        outputs.push_back(g.apply(kind, {h}));
    anvil::attributes to_i32;
    to_i32.to = dtype::i32;
    outputs.push_back(g.apply(op::cast, {g.apply(op::less_equal, {h, y})}, to_i32));
    const std::vector<anvil::named_tensor> inputs{{"x", host_tensor::from(quarters(256, 0), dims{4, 64})},
                                                  {"y", host_tensor::from(quarters(64, 5), dims{64})}};

    const auto want = anvil::compile(std::span<const anvil::value>(outputs)).run(inputs);
    anvil_test::temporary_folder cache;
    anvil::compile_options options;
    options.target = anvil::device::ane;
    options.cache_dir = cache.path.string();
    std::string dump;
    bool refused = false;  // CTest's fault-injection profiles (fail_load_op=conv) refuse the program
    {
        anvil::program ane = anvil::compile(std::span<const anvil::value>(outputs), options);
        const auto got = ane.run(inputs);
        REQUIRE(got.size() == want.size());
        for (std::size_t i = 0; i < got.size(); ++i) {
            const anvil::node& n = g[outputs[i].id()];
            INFO("output ", i, ": ", anvil::op_name(n.kind));
            CHECK(got[i].type() == want[i].type());
            const double tolerance = n.kind == op::erf ? 2e-3 : 0.0;  // booleans and the rest are exact
            CHECK(anvil_test::max_difference(got[i], want[i]) <= tolerance);
        }
        dump = ane.dump();
        const anvil::placement_report placement = ane.placement();
        refused = placement.refused() > 0;
        const auto host_reason = [&](std::string_view what) {
            for (const std::string& line : placement.host_nodes)
                if (line.find(what) != std::string::npos) return true;
            return false;
        };
        CHECK(host_reason(
            "(floor, f32 [4, 64]): floor is not among the MIL ops the Neural Engine is known to run "
            "(mil_ops.json)"));
        CHECK(host_reason("(ceil, f32 [4, 64]): ceil is not among"));
        CHECK(host_reason("(round, f32 [4, 64]): round is not among"));
        CHECK(host_reason(
            "(sin, f32 [4, 64]): sin is not verified on any Neural Engine, and is reported unusable "
            "on M5 / macOS 26.5 (RUNTIME.md §0 #9)"));
        CHECK(host_reason("(cos, f32 [4, 64]): cos is not verified"));
        for (const std::string& line : placement.host_nodes) {
            CHECK(line.find("(erf") == std::string::npos);
            CHECK(line.find("(less") == std::string::npos);
            CHECK(line.find("(logical") == std::string::npos);
            CHECK(line.find("(cast, bool") == std::string::npos);
        }
    }
    INFO(dump);
    if (!refused) {
        CHECK(dump.find("= erf(") != std::string::npos);
        CHECK(dump.find("= less_equal(") != std::string::npos);
        CHECK(dump.find("= greater_equal(") != std::string::npos);
        CHECK(dump.find("= not_equal(") != std::string::npos);
        CHECK(dump.find("= select(") != std::string::npos);
    }
    CHECK(sim().counter("op:erf") >= 1);
    CHECK(sim().counter("op:select") >= 5);
    CHECK(sim().violations() == "");
    CHECK(sim().counter("live_programs") == 0);

    // strict_device refuses the host-only ops, naming them: no Neural Engine limit makes them integer work.
    options.strict_device = true;
    const anvil::value floor = g.apply(op::floor, {h});
    CHECK_THROWS_WITH_AS((void)anvil::compile({floor}, options),
                         doctest::Contains("floor is not among the MIL ops"), anvil::unsupported_error);
}

TEST_CASE("elementwise ops: an exported Core ML package compares, ands and selects, booleans as fp16") {
    namespace coreml = anvil::detail::coreml;
    REQUIRE(anvil_test::ane_simulator_available());
    anvil::graph g;
    const dims shape{2, 32};
    const anvil::value x = g.input("x", dtype::f32, shape);
    const anvil::value mask = g.input("mask", dtype::boolean, shape);
    const anvil::value h = identity_linear(g, x, 32);
    const anvil::value below =
        g.apply(op::less, {h, g.constant(host_tensor::from(std::vector<float>{0.5f}, dims{}))});
    const anvil::value both = g.apply(op::logical_and, {below, mask});
    anvil::attributes to_bool;
    to_bool.to = dtype::boolean;
    const anvil::value outputs[] = {below, g.apply(op::where, {both, h, g.apply(op::erf, {h})}),
                                    g.apply(op::cast, {h}, to_bool)};
    anvil_test::temporary_folder where("anvil-export");
    anvil::mlpackage_options options;
    options.output_names = {"below", "picked", "nonzero"};
    const auto summary = anvil::export_mlpackage(outputs, where.path / "m.mlpackage", options);
    REQUIRE(summary.inputs.size() == 2);
    CHECK(summary.inputs[1].name == "mask");
    CHECK(summary.inputs[1].dtype == "fp16");
    REQUIRE(summary.outputs.size() == 3);
    for (const auto& port : summary.outputs)
        CHECK(port.dtype == "fp16");

    const std::vector<float> xs = quarters(64, 3);
    std::vector<int> mask_values(64);
    for (std::size_t i = 0; i < mask_values.size(); ++i)
        mask_values[i] = i % 3 != 0 ? 1 : 0;
    const auto want = anvil::compile(outputs).run(
        {{"x", host_tensor::from(xs, shape)}, {"mask", bools(mask_values, shape)}});

    const std::filesystem::path compiled = where.path / "model.mlmodelc";
    coreml::coreml_model::compile(where.path / "m.mlpackage", compiled);
    const coreml::coreml_model model = coreml::coreml_model::load(compiled);
    std::vector<anvil::half> x_half, mask_half;
    for (std::size_t i = 0; i < xs.size(); ++i) {
        x_half.emplace_back(xs[i]);
        mask_half.emplace_back(mask_values[i] != 0 ? 1.0f : 0.0f);
    }
    std::vector<std::vector<anvil::half>> out(3, std::vector<anvil::half>(64));
    const std::vector<std::int64_t> extents{2, 32};
    const std::vector<coreml::coreml_model::input> in{
        {"x", 0, 0, 0, reinterpret_cast<std::byte*>(x_half.data()), extents, coreml::multi_array_float16},
        {"mask", 0, 0, 0, reinterpret_cast<std::byte*>(mask_half.data()), extents,
         coreml::multi_array_float16}};
    std::vector<coreml::coreml_model::output> results;
    for (std::size_t i = 0; i < 3; ++i)
        results.push_back({options.output_names[i], 0, 0, 0, reinterpret_cast<std::byte*>(out[i].data()),
                           extents, coreml::multi_array_float16});
    model.predict(in, results);
    for (std::size_t i = 0; i < 3; ++i) {
        CAPTURE(options.output_names[i]);
        const std::vector<float> expected = want[i].to_f32();
        double worst = 0.0;
        for (std::size_t j = 0; j < expected.size(); ++j)
            worst =
                std::max(worst, static_cast<double>(std::fabs(static_cast<float>(out[i][j]) - expected[j])));
        CHECK(worst <= (i == 1 ? 2e-3 : 0.0));
    }

    // floor has no form there: the export says which node.
    const anvil::value floor = g.apply(op::floor, {h});
    CHECK_THROWS_WITH_AS(
        anvil::export_mlpackage(std::span(&floor, 1), where.path / "f.mlpackage"),
        doctest::Contains("(floor, f32 [2, 32]) has no form in a Core ML program: floor is not among"),
        anvil::unsupported_error);
}

#endif

}  // namespace test_elementwise_ops
