// Compiling and running programs on the CPU backend: binding inputs, the passes against the unfused graphs,
// the optimised kernels against the reference kernels on whole graphs, the memory plan, ane_numerics, and
// programs used from several threads.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>
#include <anvil/backend/cpu/executor.hpp>

#include <cmath>
#include <random>
#include <thread>
#include <vector>

// A namespace of its own, so the test files can be compiled together (a unity build).
namespace test_program {

using anvil::dims;
using anvil::dtype;
using anvil::op;

namespace {

anvil::host_tensor random_tensor(dims shape, std::uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, scale);
    anvil::host_tensor t(dtype::f32, shape);
    for (auto& v : t.values<float>())
        v = normal(rng);
    return t;
}

double max_relative_difference(const anvil::host_tensor& a, const anvil::host_tensor& b) {
    REQUIRE(a.shape() == b.shape());
    const auto x = a.to_f32();
    const auto y = b.to_f32();
    double worst = 0.0;
    for (std::size_t i = 0; i < x.size(); ++i) {
        const double scale = std::max({1.0, std::fabs(double{x[i]}), std::fabs(double{y[i]})});
        worst = std::max(worst, std::fabs(double{x[i]} - double{y[i]}) / scale);
    }
    return worst;
}

// A small network touching the passes: conv + batch_norm (folded), an elementwise chain (fused), a linear
// with f16 weights (read natively by the GEMM), constants that fold.
struct test_network {
    anvil::graph g;
    anvil::value output;

    test_network() {
        auto x = g.input("x", dtype::f32, dims{2, 3, 9, 7});
        auto w = g.constant(random_tensor(dims{8, 3, 3, 3}, 1, 0.3f), "conv.weight");
        auto b = g.constant(random_tensor(dims{8}, 2), "conv.bias");
        anvil::attributes conv_attrs;
        conv_attrs.padding = {1, 1, 0, 2};
        conv_attrs.stride = {2, 1};
        auto conv = g.apply(op::conv2d, {x, w, b}, conv_attrs);
        auto mean = g.constant(random_tensor(dims{8}, 3));
        auto variance = g.apply(op::abs, {g.constant(random_tensor(dims{8}, 4))});  // folds to a constant
        auto gamma = g.constant(random_tensor(dims{8}, 5));
        auto beta = g.constant(random_tensor(dims{8}, 6));
        anvil::attributes bn_attrs;
        bn_attrs.epsilon = 1e-3f;
        auto bn = g.apply(op::batch_norm, {conv, mean, variance, gamma, beta}, bn_attrs);
        auto scaled = g.apply(op::mul, {bn, g.scalar(0.5)});
        auto activated = g.apply(op::gelu, {g.apply(op::add, {scaled, g.scalar(0.25)})});
        anvil::attributes flat;
        flat.sizes = {2, -1};
        auto flattened = g.apply(op::reshape, {activated}, flat);
        const auto features = flattened.shape()[1];
        anvil::host_tensor w16(dtype::f16, dims{5, features});
        const auto values = random_tensor(dims{5, features}, 7, 0.1f).to_f32();
        anvil::convert_f32_to_f16(values.data(), values.size(), w16.values<anvil::half>().data());
        auto logits = g.apply(
            op::linear, {flattened, g.constant(w16, "head.weight"), g.constant(random_tensor(dims{5}, 8))});
        anvil::attributes axis;
        axis.axis = -1;
        output = g.apply(op::softmax, {logits}, axis);
    }
};

}  // namespace

TEST_CASE("program: runs a graph and binds its inputs by name") {
    anvil::graph g;
    auto x = g.input("x", dtype::f32, dims{2, 3});
    auto y = g.input("y", dtype::f32, dims{3});
    auto sum = g.apply(op::add, {x, y});
    auto program = anvil::compile({sum});
    const auto out =
        program.run({{"x", anvil::host_tensor::from(std::vector<float>{1, 2, 3, 4, 5, 6}, dims{2, 3})},
                     {"y", anvil::host_tensor::from(std::vector<float>{10, 20, 30}, dims{3})}});
    REQUIRE(out.size() == 1);
    CHECK(out[0].to_f32() == std::vector<float>{11, 22, 33, 14, 25, 36});
    REQUIRE(program.inputs().size() == 2);
    CHECK(program.inputs()[0].name == "x");
    CHECK(program.outputs()[0].shape == dims{2, 3});

    const auto x_value = anvil::host_tensor::from(std::vector<float>{1, 2, 3, 4, 5, 6}, dims{2, 3});
    const auto y_value = anvil::host_tensor::from(std::vector<float>{1, 2, 3}, dims{3});
    CHECK_THROWS_WITH_AS(program.run({{"x", x_value}}), doctest::Contains("input 'y' is missing"),
                         anvil::error);
    CHECK_THROWS_WITH_AS(program.run({{"x", x_value}, {"y", y_value}, {"z", y_value}}),
                         doctest::Contains("no input named 'z' (inputs: x, y)"), anvil::error);
    CHECK_THROWS_WITH_AS(program.run({{"x", x_value}, {"x", x_value}, {"y", y_value}}),
                         doctest::Contains("input 'x' is given twice"), anvil::error);
    CHECK_THROWS_WITH_AS(program.run({{"x", y_value}, {"y", y_value}}),
                         doctest::Contains("input 'x' has shape [3], expected [2, 3]"), anvil::shape_error);
    const auto ids = anvil::host_tensor::from(std::vector<std::int64_t>{1, 2, 3}, dims{3});
    CHECK_THROWS_WITH_AS(program.run({{"x", x_value}, {"y", ids}}),
                         doctest::Contains("input 'y' is i64, expected f32 (or another floating type)"),
                         anvil::type_error);
    CHECK_THROWS_WITH_AS(anvil::program().run({}), doctest::Contains("this program is empty"), anvil::error);
}

TEST_CASE("program: integer inputs are exact up to 2^24 and rejected beyond") {
    anvil::graph g;
    auto table = g.constant(random_tensor(dims{10, 4}, 3));
    auto ids = g.input("ids", dtype::i64, dims{3});
    auto rows = g.apply(op::gather, {table, ids});
    auto program = anvil::compile({rows});
    const auto out =
        program.run({{"ids", anvil::host_tensor::from(std::vector<std::int64_t>{9, 0, 4}, dims{3})}});
    const auto expected = g[table.id()].data.to_f32();
    const auto got = out[0].to_f32();
    for (int i = 0; i < 4; ++i) {
        CHECK(got[static_cast<std::size_t>(i)] == expected[static_cast<std::size_t>(36 + i)]);
        CHECK(got[static_cast<std::size_t>(8 + i)] == expected[static_cast<std::size_t>(16 + i)]);
    }
    CHECK_THROWS_WITH_AS(
        program.run({{"ids", anvil::host_tensor::from(std::vector<std::int64_t>{1, 16777217, 2}, dims{3})}}),
        doctest::Contains("integer 16777217 at index 1 is beyond 2^24"), anvil::error);
}

TEST_CASE(
    "program: the passes change no result: fused and folded against plain, optimised against reference") {
    test_network net;
    const auto input = random_tensor(dims{2, 3, 9, 7}, 11);
    anvil::compile_options plain;
    plain.fold_batch_norm = false;
    plain.fold_constants = false;
    plain.fuse_elementwise = false;
    plain.kernels = anvil::cpu_kernels::reference;
    auto reference = anvil::compile({net.output}, plain).run({{"x", input}})[0];

    anvil::compile_options optimized;
    auto fast = anvil::compile({net.output}, optimized);
    const auto dumped = fast.dump();
    CHECK(dumped.find("batch_norm") == std::string::npos);
    CHECK(dumped.find("fused_elementwise") != std::string::npos);
    CHECK(dumped.find(" abs") == std::string::npos);
    CHECK(max_relative_difference(fast.run({{"x", input}})[0], reference) < 1e-5);

    for (const bool fold_bn : {false, true}) {
        for (const bool fuse : {false, true}) {
            anvil::compile_options options;
            options.fold_batch_norm = fold_bn;
            options.fuse_elementwise = fuse;
            options.threads = fuse ? 2 : 1;
            auto program = anvil::compile({net.output}, options);
            CAPTURE(fold_bn);
            CAPTURE(fuse);
            CHECK(max_relative_difference(program.run({{"x", input}})[0], reference) < 1e-5);
        }
    }
}

TEST_CASE("program: int8 weights are dequantised while the GEMM packs them") {
    anvil::graph g;
    auto x = g.input("x", dtype::f32, dims{3, 6});
    anvil::host_tensor q(dtype::i8, dims{4, 6});
    std::mt19937 rng(5);
    for (auto& v : q.values<std::int8_t>())
        v = static_cast<std::int8_t>(static_cast<int>(rng() % 255) - 127);
    auto scale =
        g.constant(anvil::host_tensor::from(std::vector<float>{0.01f, 0.02f, 0.03f, 0.04f}, dims{4}));
    auto zero = g.constant(anvil::host_tensor::from(std::vector<float>{0, 1, -2, 3}, dims{4}));
    auto weight = g.apply(op::dequantize_int8, {g.constant(q), scale, zero});
    auto y = g.apply(op::linear, {x, weight});
    const auto input = random_tensor(dims{3, 6}, 9);
    auto fast = anvil::compile({y}).run({{"x", input}})[0];
    anvil::compile_options reference_options;
    reference_options.kernels = anvil::cpu_kernels::reference;
    auto reference = anvil::compile({y}, reference_options).run({{"x", input}})[0];
    CHECK(max_relative_difference(fast, reference) < 1e-5);
    // By hand for one element: y[0][1] = sum_k x[0][k] * (q[1][k] - 1) * 0.02.
    double expected = 0.0;
    for (std::size_t k = 0; k < 6; ++k) {
        expected += double{input.values<float>()[k]} * (q.values<std::int8_t>()[6 + k] - 1) * 0.02;
    }
    CHECK(fast.to_f32()[1] == doctest::Approx(expected).epsilon(1e-5));
}

TEST_CASE("program: ane_numerics rounds to fp16 and reports a planted overflow") {
    anvil::graph g;
    auto x = g.input("x", dtype::f32, dims{4});
    auto squared = g.apply(op::mul, {x, x});  // 300^2 = 90000 > 65504
    auto y = g.apply(op::div, {squared, g.scalar(1000.0)});
    anvil::compile_options options;
    options.ane_numerics = true;
    auto program = anvil::compile({y}, options);
    const auto small = anvil::host_tensor::from(std::vector<float>{1.0f, 2.0f, 1e-3f, 0.1f}, dims{4});
    const auto out = program.run({{"x", small}})[0].to_f32();
    CHECK(program.numerics().clean());
    // fp16 rounding of 0.1^2 / 1000 = 1e-5 is a denormal in fp16: flushed to zero, as on the ANE.
    CHECK(out[3] == 0.0f);
    CHECK(out[0] == static_cast<float>(anvil::half(1.0f / 1000.0f)));

    const auto large = anvil::host_tensor::from(std::vector<float>{300.0f, 2.0f, -400.0f, 1.0f}, dims{4});
    const auto overflowed = program.run({{"x", large}})[0].to_f32();
    CHECK(std::isinf(overflowed[0]));
    const auto report = program.numerics();
    REQUIRE(report.overflows.size() == 1);
    CHECK(report.overflows[0].kind == op::mul);
    CHECK(report.overflows[0].overflowed == 2);
    CHECK(report.overflows[0].max_abs == 160000.0f);
    CHECK(report.to_string().find("mul [4]: 2 of 4 values beyond fp16") != std::string::npos);

    // Without ane_numerics the same program computes in fp32 and reports nothing.
    auto exact = anvil::compile({y});
    CHECK(exact.run({{"x", large}})[0].to_f32()[0] == doctest::Approx(90.0));
    CHECK(exact.numerics().clean());
}

TEST_CASE("program: the arena is shared along a chain") {
    anvil::graph g;
    auto x = g.input("x", dtype::f32, dims{1000});
    anvil::value v = x;
    for (int i = 0; i < 12; ++i)
        v = g.apply(i % 2 ? op::exp : op::neg, {v});
    anvil::compile_options options;
    options.fuse_elementwise = false;
    anvil::detail::cpu::cpu_program program(anvil::graph_body{g.nodes(), {v.id()}}, options);
    // The input, then each value alive with the one before it: two 4000-byte buffers suffice.
    CHECK(program.arena_bytes() <= 2 * 4032);
}

TEST_CASE("program: one program from several threads, and several programs at once") {
    test_network net;
    auto program = anvil::compile({net.output});
    const auto input = random_tensor(dims{2, 3, 9, 7}, 21);
    const auto expected = program.run({{"x", input}})[0].to_f32();
    std::vector<std::thread> threads;
    std::vector<int> matches(4, 0);
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            for (int i = 0; i < 5; ++i)
                matches[static_cast<std::size_t>(t)] += program.run({{"x", input}})[0].to_f32() == expected;
        });
    }
    for (auto& thread : threads)
        thread.join();
    CHECK(matches == std::vector<int>(4, 5));

    // Two programs of the same graph, each on its own thread with a pool of its own, at the same time.
    anvil::compile_options one_thread;
    one_thread.threads = 1;
    auto first = anvil::compile({net.output}, one_thread);
    auto second = anvil::compile({net.output}, one_thread);
    const auto reference = anvil::host_tensor::from(expected, program.outputs()[0].shape);
    double first_error = 1.0, second_error = 1.0;
    std::thread a([&] {
        for (int i = 0; i < 5; ++i)
            first_error = max_relative_difference(first.run({{"x", input}})[0], reference);
    });
    std::thread b([&] {
        for (int i = 0; i < 5; ++i)
            second_error = max_relative_difference(second.run({{"x", input}})[0], reference);
    });
    a.join();
    b.join();
    CHECK(first_error < 1e-6);
    CHECK(second_error < 1e-6);
}

anvil::attributes sizes_attribute(std::vector<std::int64_t> sizes) {
    anvil::attributes a;
    a.sizes = std::move(sizes);
    return a;
}

anvil::attributes axes_attribute(std::vector<std::int64_t> axes) {
    anvil::attributes a;
    a.axes = std::move(axes);
    return a;
}

anvil::attributes cast_attribute(dtype to) {
    anvil::attributes a;
    a.to = to;
    return a;
}

// Float64 graphs run in double (float64_program). The expected values are IEEE double arithmetic done here,
// and formats' rounding worked out by hand.
TEST_CASE("program: a float64 graph is computed in float64, not rounded to float32") {
    anvil::graph g;
    auto a = g.input("a", dtype::f64, dims{2, 3});
    auto b = g.input("b", dtype::f64, dims{3});
    auto sum = g.apply(op::add, {a, b});
    // A product of two constants past float's range folds in double: 1e200 * 1e100.
    auto big = g.apply(op::mul, {g.constant(anvil::host_tensor::from(std::vector<double>{1e200}, dims{1})),
                                 g.constant(anvil::host_tensor::from(std::vector<double>{1e100}, dims{1}))});
    auto scaled = g.apply(op::mul, {sum, big});
    auto product = g.apply(op::matmul, {a, g.apply(op::reshape, {b}, sizes_attribute({3, 1}))});
    auto reduced = g.apply(op::reduce_sum, {a}, axes_attribute({1}));
    auto program = anvil::compile({sum, scaled, product, reduced});
    const std::vector<double> av{1e223, -2e223, 1.0 + 0x1p-40, 3.0, 0x1p-1060, 7e-310};
    const std::vector<double> bv{2e223, 1e-300, 0x1p-45};
    const auto out = program.run(
        {{"a", anvil::host_tensor::from(av, dims{2, 3})}, {"b", anvil::host_tensor::from(bv, dims{3})}});
    REQUIRE(out.size() == 4);
    for (const auto& t : out)
        CHECK(t.type() == dtype::f64);
    for (std::size_t i = 0; i < 6; ++i) {
        const double s = av[i] + bv[i % 3];
        CHECK(out[0].values<double>()[i] == s);
        CHECK(out[1].values<double>()[i] == s * 1e300);
    }
    for (std::size_t row = 0; row < 2; ++row) {
        double dot = 0.0, total = 0.0;
        for (std::size_t k = 0; k < 3; ++k) {
            dot += av[row * 3 + k] * bv[k];
            total += av[row * 3 + k];
        }
        CHECK(out[2].values<double>()[row] == dot);
        CHECK(out[3].values<double>()[row] == total);
    }
    CHECK(std::isfinite(out[0].values<double>()[0]));  // 3e223: float32 would give infinity
}

TEST_CASE("program: casts from float64 round once, to nearest even") {
    anvil::graph g;
    auto x = g.input("x", dtype::f64, dims{4});
    auto to_f16 = g.apply(op::cast, {x}, cast_attribute(dtype::f16));
    auto to_bf16 = g.apply(op::cast, {x}, cast_attribute(dtype::bf16));
    auto to_f32 = g.apply(op::cast, {x}, cast_attribute(dtype::f32));
    auto program = anvil::compile({to_f16, to_bf16, to_f32});
    // 1 + 2^-11 + 2^-40 is just above the f16 tie between 1 and 1 + 2^-10: rounded to float first (the tie
    // 1 + 2^-11) and then to f16, it would give 1. The same for bf16 at 1 + 2^-8 + 2^-40.
    const std::vector<double> xv{1.0 + 0x1p-11 + 0x1p-40, 1.0 + 0x1p-8 + 0x1p-40, 1e300, -0x1p-1074};
    const auto out = program.run({{"x", anvil::host_tensor::from(xv, dims{4})}});
    const auto f16 = out[0].to_f32();
    const auto bf16 = out[1].to_f32();
    const auto f32 = out[2].values<float>();
    CHECK(f16[0] == 1.0f + 0x1p-10f);
    CHECK(bf16[1] == 1.0f + 0x1p-7f);
    CHECK(std::isinf(f16[2]));
    CHECK(std::isinf(bf16[2]));
    CHECK(std::isinf(f32[2]));
    CHECK(f32[0] == static_cast<float>(xv[0]));
    CHECK(f16[3] == 0.0f);
    CHECK(std::signbit(f16[3]));  // -0: the sign survives
}

TEST_CASE("program: a float64 graph holds integers exactly to 2^53 and refuses larger ones") {
    anvil::graph g;
    auto ids = g.input("ids", dtype::i64, dims{2});
    auto widened = g.apply(op::cast, {ids}, cast_attribute(dtype::f64));
    auto next =
        g.apply(op::add, {widened, g.constant(anvil::host_tensor::from(std::vector<double>{1.0}, dims{1}))});
    auto program = anvil::compile({next});
    const std::int64_t large = (std::int64_t{1} << 40) + 1;  // not exact in float32
    const auto out =
        program.run({{"ids", anvil::host_tensor::from(std::vector<std::int64_t>{large, -large}, dims{2})}});
    CHECK(out[0].values<double>()[0] == static_cast<double>(large + 1));
    CHECK(out[0].values<double>()[1] == static_cast<double>(-large + 1));
    const std::int64_t beyond = (std::int64_t{1} << 53) + 1;
    CHECK_THROWS_WITH_AS(
        program.run({{"ids", anvil::host_tensor::from(std::vector<std::int64_t>{1, beyond}, dims{2})}}),
        doctest::Contains("input 'ids': integer 9007199254740993 at index 1 is beyond 2^53"), anvil::error);
}

TEST_CASE("program: a float64 program's resident input is written in place") {
    anvil::graph g;
    auto cache = g.input("cache", dtype::f64, dims{2, 2});
    auto x = g.input("x", dtype::f64, dims{2});
    auto out_value = g.apply(op::add, {cache, x});
    anvil::compile_options options;
    options.resident_inputs = {"cache"};
    auto program = anvil::compile({out_value}, options);
    program.write_input("cache", 0, 1,
                        anvil::host_tensor::from(std::vector<double>{1e250, 2e-250}, dims{1, 2}));
    const auto out = program.run({{"x", anvil::host_tensor::from(std::vector<double>{1.0, 1e250}, dims{2})}});
    const auto values = out[0].values<double>();
    CHECK(values[0] == 1.0);
    CHECK(values[1] == 1e250);
    CHECK(values[2] == 1e250 + 1.0);
    CHECK(values[3] == 2e-250 + 1e250);
    const auto cache_now = program.read_input("cache");
    CHECK(cache_now.type() == dtype::f64);
    CHECK(cache_now.values<double>()[2] == 1e250);
}

}  // namespace test_program
