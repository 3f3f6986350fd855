// The CPU's fast mode for quantised weights (compile_options::int8_activations, backend/cpu/gemm_int8.hpp):
// the activations' rounding against its definition and against numbers worked out by hand, gemm_int8 on
// every instruction set against gemm_int8_reference, the reference against the plain product of the rounded
// activations and the dequantised weights, the rounding error's bound against the exact product, refused
// operands, and linear nodes compiled with the option.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

#include <anvil/backend/cpu/gemm_int8.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ggml_block_scales.hpp"

// A namespace of its own, so the test files can be compiled together (a unity build).
namespace test_gemm_int8 {

using anvil::dtype;
using anvil::detail::gemm_epilogue;
using anvil::detail::int8_isa;
using anvil::detail::matrix_operand;

namespace {

// A weight W [n, k] as the GEMM's B = Wᵀ: Q8_0 or Q4_0 blocks (random bytes, f16 scales in ±[0.002, 0.02]),
// or i8 by rows with a scale (and a zero point) per row. F32 stands for i8 here.
struct test_weight {
    anvil::ggml_type type = anvil::ggml_type::F32;
    std::int64_t n = 0, k = 0;
    std::vector<std::byte> bytes;
    std::vector<float> scale, zero_point;
    matrix_operand operand;
    std::vector<float> dense;  // W dequantised, [n, k]
};

test_weight random_weight(std::mt19937& random, anvil::ggml_type type, std::int64_t n, std::int64_t k,
                          bool zero_point) {
    test_weight w;
    w.type = type;
    w.n = n;
    w.k = k;
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> uniform(0.002f, 0.02f);
    w.dense.resize(static_cast<std::size_t>(n * k));
    if (type == anvil::ggml_type::F32) {
        w.bytes.resize(static_cast<std::size_t>(n * k));
        for (std::byte& b : w.bytes)
            b = static_cast<std::byte>(byte(random));
        for (std::int64_t j = 0; j < n; ++j) {
            w.scale.push_back(uniform(random));
            if (zero_point) w.zero_point.push_back(static_cast<float>(j % 7) - 3.0f);
        }
        w.operand = {w.bytes.data(), dtype::i8, 1, k};
        w.operand.scale = w.scale.data();
        w.operand.zero_point = zero_point ? w.zero_point.data() : nullptr;
        for (std::int64_t j = 0; j < n; ++j) {
            for (std::int64_t p = 0; p < k; ++p) {
                const auto q = static_cast<float>(
                    static_cast<std::int8_t>(w.bytes[static_cast<std::size_t>(j * k + p)]));
                w.dense[static_cast<std::size_t>(j * k + p)] =
                    (q - (zero_point ? w.zero_point[static_cast<std::size_t>(j)] : 0.0f)) *
                    w.scale[static_cast<std::size_t>(j)];
            }
        }
        return w;
    }
    const auto layout = *anvil::ggml_layout(static_cast<std::uint32_t>(type));
    const auto row_bytes = static_cast<std::size_t>(k) / layout.block * layout.bytes;
    w.bytes.resize(row_bytes * static_cast<std::size_t>(n));
    for (std::byte& b : w.bytes)
        b = static_cast<std::byte>(byte(random));
    for (std::size_t at = 0; at < w.bytes.size(); at += layout.bytes) {
        // Finite scales.
        anvil_test::set_ggml_block_scales(type, w.bytes.data() + at, [&] {
            return uniform(random) * (byte(random) % 2 == 0 ? 1.0f : -1.0f);
        });
    }
    anvil::dequantize_ggml(type, w.bytes, w.dense);
    w.operand.data = w.bytes.data();
    w.operand.type = dtype::u8;
    w.operand.blocks = type;
    w.operand.block_row_bytes = static_cast<std::int64_t>(row_bytes);
    return w;
}

std::string weight_name(const test_weight& w) {
    if (w.type != anvil::ggml_type::F32) return anvil::ggml_type_name(w.type);
    return w.zero_point.empty() ? "i8" : "i8 with zero points";
}

std::vector<float> random_activations(std::mt19937& random, std::int64_t count) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> values(static_cast<std::size_t>(count));
    for (float& v : values)
        v = normal(random);
    return values;
}

// gemm_int8 with `isa` against gemm_int8_reference: the same rounded activations, so the two differ by the
// f32 rounding of the block sums' scaling and accumulation (k / 32 + a few terms).
void check_against_reference(const test_weight& w, std::int64_t m, int8_isa isa, anvil::thread_pool& pool,
                             std::mt19937& random, bool bias_and_accumulate) {
    const std::int64_t n = w.n, k = w.k;
    const std::vector<float> a = random_activations(random, m * k);
    std::vector<float> bias(static_cast<std::size_t>(n), 0.25f);
    std::vector<float> fast(static_cast<std::size_t>(m * n), 0.5f), reference = fast;
    const gemm_epilogue epilogue{bias_and_accumulate ? bias.data() : nullptr, bias_and_accumulate};
    anvil::detail::gemm_int8(m, n, k, a.data(), k, w.operand, fast.data(), n, epilogue, &pool, isa);
    // The reference reads B's elements as gemm_reference does; W dequantised is the same B, read faster.
    const matrix_operand dense{w.dense.data(), dtype::f32, 1, k};
    anvil::detail::gemm_int8_reference(m, n, k, a.data(), k, dense, reference.data(), n, epilogue);
    INFO(weight_name(w), " m=", m, " n=", n, " k=", k, " isa=", anvil::detail::int8_isa_name(isa),
         " threads=", pool.size());
    int failures = 0;
    for (std::int64_t i = 0; i < m && failures < 5; ++i) {
        for (std::int64_t j = 0; j < n && failures < 5; ++j) {
            double magnitude = bias_and_accumulate ? 0.75 : 0.0;
            for (std::int64_t p = 0; p < k; ++p)
                magnitude += std::fabs(double{a[static_cast<std::size_t>(i * k + p)]} *
                                       w.dense[static_cast<std::size_t>(j * k + p)]);
            const double tolerance = (static_cast<double>(k) / 8.0 + 8.0) * 0x1p-24 * magnitude + 1e-30;
            const auto at = static_cast<std::size_t>(i * n + j);
            if (!(std::fabs(double{fast[at]} - double{reference[at]}) <= tolerance)) {
                FAIL_CHECK("C[", i, ", ", j, "] = ", fast[at], ", reference ", reference[at], " (tolerance ",
                           tolerance, ")");
                ++failures;
            }
        }
    }
}

}  // namespace

TEST_CASE("int8 activations: rounding a block as llama.cpp's Q8_0, worked out by hand") {
    // max |x| = 127: d = 1, so q is x rounded to the nearest integer, ties to even.
    std::vector<float> x(32, 0.0f);
    x[0] = 127.0f;
    x[1] = 2.5f;
    x[2] = 3.5f;
    x[3] = -2.5f;
    x[4] = -0.4f;
    x[5] = 0.6f;
    x[6] = -127.0f;
    std::vector<std::int8_t> q(32);
    float d = 0.0f;
    std::int32_t sum = 0;
    anvil::detail::int8_activations_reference(x.data(), 32, q.data(), &d, &sum);
    CHECK(d == 1.0f);
    CHECK(q[0] == 127);
    CHECK(q[1] == 2);
    CHECK(q[2] == 4);
    CHECK(q[3] == -2);
    CHECK(q[4] == 0);
    CHECK(q[5] == 1);
    CHECK(q[6] == -127);
    CHECK(sum == 127 + 2 + 4 - 2 + 1 - 127);
    // A block of zeros: d = 0, every q 0. A block holding an infinity or a NaN: d = NaN, every q 0.
    std::vector<float> two(64, 0.0f);
    two[40] = std::numeric_limits<float>::infinity();
    float scales[2];
    std::int32_t sums[2];
    std::vector<std::int8_t> q2(64);
    anvil::detail::int8_activations_reference(two.data(), 64, q2.data(), scales, sums);
    CHECK(scales[0] == 0.0f);
    CHECK(sums[0] == 0);
    CHECK(std::isnan(scales[1]));
    CHECK(sums[1] == 0);
    CHECK(std::all_of(q2.begin(), q2.end(), [](std::int8_t v) { return v == 0; }));
}

TEST_CASE("int8 activations: every instruction set rounds to the reference's bytes") {
    std::mt19937 random(4);
    const std::int64_t k = 32 * 9;
    for (int trial = 0; trial < 20; ++trial) {
        std::vector<float> x = random_activations(random, 3 * k);
        // Magnitudes from 1e-30 to 1e30, exact halves, zero blocks and non-finite values.
        for (std::size_t i = 0; i < x.size(); ++i)
            x[i] *= std::pow(10.0f, static_cast<float>(static_cast<int>(i / 32 % 7) * 10 - 30));
        for (std::size_t i = 64; i < 96; ++i)
            x[i] = 0.0f;
        if (trial % 4 == 1) x[static_cast<std::size_t>(trial * 7)] = std::numeric_limits<float>::quiet_NaN();
        if (trial % 4 == 2) x[static_cast<std::size_t>(trial * 5)] = -std::numeric_limits<float>::infinity();
        if (trial % 4 == 3) {
            for (std::size_t i = 128; i < 160; ++i)
                x[i] = static_cast<float>(static_cast<int>(i) - 144) + 0.5f;  // max 15.5: q = x * 127 / 15.5
        }
        std::vector<std::int8_t> expected(x.size());
        std::vector<float> expected_scales(x.size() / 32);
        std::vector<std::int32_t> expected_sums(x.size() / 32);
        for (std::int64_t i = 0; i < 3; ++i)
            anvil::detail::int8_activations_reference(x.data() + i * k, k, expected.data() + i * k,
                                                      expected_scales.data() + i * k / 32,
                                                      expected_sums.data() + i * k / 32);
        for (const int8_isa isa : anvil::detail::available_int8_isas()) {
            anvil::detail::int8_activation_rows rounded;
            anvil::detail::round_activations(x.data(), k, 3, k, isa, rounded);
            CAPTURE(anvil::detail::int8_isa_name(isa));
            CAPTURE(trial);
            for (std::size_t i = 0; i < expected.size(); ++i)
                REQUIRE(rounded.values[i] == expected[i]);
            for (std::size_t b = 0; b < expected_scales.size(); ++b) {
                CHECK((rounded.scales[b] == expected_scales[b] ||
                       (std::isnan(rounded.scales[b]) && std::isnan(expected_scales[b]))));
                CHECK(rounded.sums[b] == expected_sums[b]);
            }
        }
    }
}

TEST_CASE(
    "gemm_int8: every instruction set matches gemm_int8_reference, for Q8_0, Q4_0, Q4_K, Q6_K and i8 "
    "weights") {
    std::mt19937 random(11);
    anvil::thread_pool one(1), two(2);
    for (const int8_isa isa : anvil::detail::available_int8_isas()) {
        for (const anvil::ggml_type type :
             {anvil::ggml_type::Q8_0, anvil::ggml_type::Q4_0, anvil::ggml_type::Q4_K, anvil::ggml_type::Q6_K,
              anvil::ggml_type::F32}) {
            const bool k_quant = type == anvil::ggml_type::Q4_K || type == anvil::ggml_type::Q6_K;
            for (const bool zero_point : {false, true}) {
                if (zero_point && type != anvil::ggml_type::F32) continue;
                // 1-5 rows (tiles of 2 and 4 and their remainders), 9 and 70 (panels); 1, 3 and 5 blocks (an
                // odd last block beside the pairs; Q4_K 8 and 16); W rows 1, 6 and 37 (tiles of 4 and single
                // rows).
                for (const std::int64_t m : {1, 2, 3, 4, 5, 9, 70}) {
                    for (const std::int64_t n : {1, 6, 37}) {
                        const std::int64_t k =
                            k_quant ? 256 * (1 + (m + n) % 2) : 32 * (1 + 2 * ((m + n) % 3));
                        const test_weight w = random_weight(random, type, n, k, zero_point);
                        check_against_reference(w, m, isa, m % 2 == 0 ? two : one, random, n % 2 == 1);
                    }
                }
                const test_weight wide = random_weight(random, type, 80, 768, zero_point);
                check_against_reference(wide, 1, isa, two, random, true);
                check_against_reference(wide, 9, isa, two, random, false);
            }
        }
    }
}

TEST_CASE(
    "gemm_int8_reference: the rounded activations' plain product, within the rounding's bound of the "
    "exact one") {
    std::mt19937 random(5);
    const std::int64_t m = 3, n = 7, k = 256;
    for (const anvil::ggml_type type :
         {anvil::ggml_type::Q8_0, anvil::ggml_type::Q4_0, anvil::ggml_type::Q4_K, anvil::ggml_type::Q6_K,
          anvil::ggml_type::F32}) {
        const test_weight w = random_weight(random, type, n, k, type == anvil::ggml_type::F32);
        const std::vector<float> a = random_activations(random, m * k);
        std::vector<float> c(static_cast<std::size_t>(m * n));
        anvil::detail::gemm_int8_reference(m, n, k, a.data(), k, w.operand, c.data(), n);
        for (std::int64_t i = 0; i < m; ++i) {
            // The rounding done here, independently: per block, d = max |x| / 127, q = round(x / d).
            std::vector<double> rounded(static_cast<std::size_t>(k));
            std::vector<double> half_step(static_cast<std::size_t>(k));
            for (std::int64_t b = 0; b < k / 32; ++b) {
                double amax = 0.0;
                for (std::int64_t p = b * 32; p < b * 32 + 32; ++p)
                    amax = std::max(amax, std::fabs(double{a[static_cast<std::size_t>(i * k + p)]}));
                const double d = amax / 127.0;
                for (std::int64_t p = b * 32; p < b * 32 + 32; ++p) {
                    rounded[static_cast<std::size_t>(p)] =
                        d * std::nearbyint(a[static_cast<std::size_t>(i * k + p)] / d);
                    half_step[static_cast<std::size_t>(p)] = d / 2.0;
                }
            }
            for (std::int64_t j = 0; j < n; ++j) {
                double plain = 0.0, exact = 0.0, bound = 0.0, magnitude = 0.0;
                for (std::int64_t p = 0; p < k; ++p) {
                    const double weight = w.dense[static_cast<std::size_t>(j * k + p)];
                    plain += rounded[static_cast<std::size_t>(p)] * weight;
                    exact += double{a[static_cast<std::size_t>(i * k + p)]} * weight;
                    bound += half_step[static_cast<std::size_t>(p)] * std::fabs(weight);
                    magnitude += std::fabs(rounded[static_cast<std::size_t>(p)] * weight);
                }
                const double got = c[static_cast<std::size_t>(i * n + j)];
                CAPTURE(weight_name(w));
                CHECK(std::fabs(got - plain) <= 1e-5 * magnitude + 1e-6);
                CHECK(std::fabs(got - exact) <= bound * 1.0001 + 1e-5 * magnitude);
            }
        }
    }
}

TEST_CASE("gemm_int8: operands it cannot take are refused, naming what is wrong") {
    std::vector<float> a(64), c(4);
    std::vector<std::uint16_t> halves(64 * 2);
    const matrix_operand f16{halves.data(), dtype::f16, 1, 64};
    CHECK_THROWS_WITH_AS(
        anvil::detail::gemm_int8(1, 2, 64, a.data(), 64, f16, c.data(), 2),
        "gemm_int8: B (64x2, f16) is not Q8_0, Q4_0, Q4_K or Q6_K blocks or i8 stored by columns, or k=64 is "
        "not a whole number of blocks of 32 (of 256 for Q4_K and Q6_K)",
        anvil::type_error);
    std::mt19937 random(1);
    const test_weight w = random_weight(random, anvil::ggml_type::Q4_0, 2, 64, false);
    CHECK_FALSE(anvil::detail::int8_products_take(w.operand, 48));
    CHECK(anvil::detail::int8_products_take(w.operand, 64));
    const auto available = anvil::detail::available_int8_isas();
    for (const int8_isa isa : {int8_isa::avx2, int8_isa::avx512_vnni}) {
        if (std::find(available.begin(), available.end(), isa) != available.end()) continue;
        CHECK_THROWS_AS(
            anvil::detail::gemm_int8(1, 2, 64, a.data(), 64, w.operand, c.data(), 2, {}, nullptr, isa),
            anvil::unsupported_error);
    }
}

TEST_CASE(
    "linear with int8_activations: quantised weights take the integer products, the others stay "
    "exact") {
    std::mt19937 random(8);
    // 24 x 96 f32 values are more than constant folding expands (4 KiB): the weight stays in its blocks.
    const std::int64_t rows = 3, in = 96, out = 24;
    const std::vector<float> x = random_activations(random, rows * in);
    const test_weight w = random_weight(random, anvil::ggml_type::Q4_0, out, in, false);
    anvil::graph g;
    anvil::host_tensor blocks(dtype::u8, anvil::dims{out, static_cast<std::int64_t>(w.bytes.size()) / out});
    std::memcpy(blocks.values<std::uint8_t>().data(), w.bytes.data(), w.bytes.size());
    anvil::attributes attrs;
    attrs.ggml_type = static_cast<std::uint32_t>(anvil::ggml_type::Q4_0);
    const auto input = g.input("x", dtype::f32, anvil::dims{rows, in});
    const auto quantised =
        g.apply(anvil::op::linear, {input, g.apply(anvil::op::dequantize_ggml, {g.constant(blocks)}, attrs)});
    const auto dense = g.apply(anvil::op::linear,
                               {input, g.constant(anvil::host_tensor::from(w.dense, anvil::dims{out, in}))});
    const anvil::host_tensor x_tensor = anvil::host_tensor::from(x, anvil::dims{rows, in});
    anvil::compile_options options;
    options.int8_activations = true;
    const auto got = anvil::compile({quantised, dense}, options).run({{"x", x_tensor}});
    std::vector<float> expected(static_cast<std::size_t>(rows * out));
    anvil::detail::gemm_int8_reference(rows, out, in, x.data(), in, w.operand, expected.data(), out);
    const auto integer = got[0].to_f32();
    const auto exact = got[1].to_f32();
    double rounding_seen = 0.0;
    for (std::size_t i = 0; i < expected.size(); ++i) {
        CHECK(integer[i] == doctest::Approx(expected[i]).epsilon(1e-5));
        // The f32 weight's product is exact: the plain sum of x * w.
        double sum = 0.0;
        for (std::int64_t p = 0; p < in; ++p)
            sum += double{x[i / out * in + static_cast<std::size_t>(p)]} *
                   w.dense[(i % out) * static_cast<std::size_t>(in) + static_cast<std::size_t>(p)];
        CHECK(exact[i] == doctest::Approx(sum).epsilon(1e-5));
        rounding_seen = std::max(rounding_seen, std::fabs(double{integer[i]} - sum));
    }
    CHECK(rounding_seen > 0.0);  // the integer products did round the activations
}

}  // namespace test_gemm_int8
