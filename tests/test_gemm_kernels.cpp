// The CPU backend's GEMM-based kernels — linear, batched matmul and conv2d — against the reference kernels on
// random shapes: odd sizes, size 1, empty batches, transposed and broadcast operands, strides, padding,
// dilation, groups (depthwise too), and weights stored as f32, f16, bf16, int8, palette indices and ggml
// blocks.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "ggml_block_scales.hpp"

// A namespace of its own, so the test files can be compiled together (a unity build).
namespace test_gemm_kernels {

using anvil::dims;
using anvil::dtype;
using anvil::op;

namespace {

anvil::host_tensor random_tensor(dims shape, std::mt19937& rng, dtype type = dtype::f32) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> values(static_cast<std::size_t>(shape.element_count()));
    for (auto& v : values)
        v = normal(rng);
    anvil::host_tensor f32 = anvil::host_tensor::from(values, shape);
    if (type == dtype::f32) return f32;
    anvil::host_tensor out(type, shape);
    if (type == dtype::f16)
        anvil::convert_f32_to_f16(values.data(), values.size(), out.values<anvil::half>().data());
    if (type == dtype::bf16)
        anvil::convert_f32_to_bf16(values.data(), values.size(), out.values<anvil::bfloat16>().data());
    return out;
}

// Runs the graph's output with the optimised and the reference kernels (1 and 2 threads) and compares.
void check_parity(const anvil::value& output, const std::vector<anvil::named_tensor>& inputs) {
    anvil::compile_options reference;
    reference.kernels = anvil::cpu_kernels::reference;
    const auto expected = anvil::compile({output}, reference).run(inputs)[0].to_f32();
    for (const std::size_t threads : {1, 2}) {
        anvil::compile_options fast;
        fast.threads = threads;
        const auto got = anvil::compile({output}, fast).run(inputs)[0].to_f32();
        REQUIRE(got.size() == expected.size());
        for (std::size_t i = 0; i < got.size(); ++i) {
            const double tolerance = 1e-4 * std::max(1.0, std::fabs(double{expected[i]}));
            if (std::fabs(double{got[i]} - double{expected[i]}) > tolerance) {
                FAIL_CHECK("element " << i << ": " << got[i] << " vs reference " << expected[i] << " ("
                                      << threads << " threads)");
                return;
            }
        }
    }
}

}  // namespace

TEST_CASE("linear: optimised matches reference for every weight type, with and without bias") {
    std::mt19937 rng(1);
    const std::vector<std::vector<std::int64_t>> shapes{{1, 1}, {3, 7},   {2, 5, 33},
                                                        {0, 4}, {17, 70}, {1, 1, 129}};
    for (const auto& leading : shapes) {
        for (const dtype type : {dtype::f32, dtype::f16, dtype::bf16}) {
            for (const bool bias : {false, true}) {
                const std::int64_t in = leading.back(), out = 1 + static_cast<std::int64_t>(rng() % 40);
                anvil::graph g;
                auto x = g.input("x", dtype::f32, dims(leading));
                auto w = g.constant(random_tensor(dims{out, in}, rng, type), "w");
                anvil::attributes to_f32;
                to_f32.to = dtype::f32;
                auto weight = type == dtype::f32 ? w : g.apply(op::cast, {w}, to_f32);
                auto y = bias ? g.apply(op::linear, {x, weight, g.constant(random_tensor(dims{out}, rng))})
                              : g.apply(op::linear, {x, weight});
                CAPTURE(dims(leading));
                CAPTURE(anvil::dtype_name(type));
                check_parity(y, {{"x", random_tensor(dims(leading), rng)}});
            }
        }
    }
    // A weight computed at run time is an ordinary f32 operand.
    anvil::graph g;
    auto x = g.input("x", dtype::f32, dims{4, 9});
    auto w = g.input("w", dtype::f32, dims{6, 9});
    check_parity(g.apply(op::linear, {x, w}),
                 {{"x", random_tensor(dims{4, 9}, rng)}, {"w", random_tensor(dims{6, 9}, rng)}});
}

TEST_CASE("linear: compressed weights (int8, palettes, ggml blocks) are read as stored, as the reference") {
    std::mt19937 rng(3);
    std::uniform_int_distribution<int> byte(0, 255);
    const auto linear_of = [](anvil::graph& g, const anvil::value& x, const anvil::value& weight) {
        return g.apply(op::linear, {x, weight});
    };
    for (const std::int64_t rows : {1, 3, 17}) {
        const std::int64_t in = 64, out = 12;
        const auto input = random_tensor(dims{rows, in}, rng);
        // int8 with a zero point along the output channels.
        {
            anvil::graph g;
            anvil::host_tensor q(dtype::i8, dims{out, in});
            for (auto& v : q.values<std::int8_t>())
                v = static_cast<std::int8_t>(byte(rng) - 128);
            auto weight =
                g.apply(op::dequantize_int8, {g.constant(q), g.constant(random_tensor(dims{out}, rng)),
                                              g.constant(random_tensor(dims{out}, rng))});
            CAPTURE(rows);
            check_parity(linear_of(g, g.input("x", dtype::f32, dims{rows, in}), weight), {{"x", input}});
        }
        // Palettes: shared and one per group of rows, 16, 64 and 200 values.
        for (const auto& palette :
             {std::pair{1, 16}, std::pair{3, 16}, std::pair{4, 64}, std::pair{1, 200}}) {
            const int groups = palette.first, length = palette.second;
            anvil::graph g;
            anvil::host_tensor indices(dtype::u8, dims{out, in});
            for (auto& v : indices.values<std::uint8_t>())
                v = static_cast<std::uint8_t>(byte(rng) % length);
            const dims table = groups == 1 ? dims{length} : dims{groups, length};
            auto weight =
                g.apply(op::dequantize_lut, {g.constant(indices), g.constant(random_tensor(table, rng))});
            CAPTURE(rows);
            CAPTURE(groups);
            CAPTURE(length);
            check_parity(linear_of(g, g.input("x", dtype::f32, dims{rows, in}), weight), {{"x", input}});
        }
    }
    // ggml blocks (read by rows for 1 and 2 rows, dequantised while packing for 9), 256 inputs.
    for (const anvil::ggml_type type :
         {anvil::ggml_type::Q8_0, anvil::ggml_type::Q4_0, anvil::ggml_type::Q4_1, anvil::ggml_type::Q5_0,
          anvil::ggml_type::Q5_1, anvil::ggml_type::IQ4_NL, anvil::ggml_type::Q4_K, anvil::ggml_type::Q5_K,
          anvil::ggml_type::Q6_K, anvil::ggml_type::Q8_K}) {
        for (const std::int64_t rows : {1, 2, 9}) {
            const std::int64_t in = 256, out = 10;
            const auto layout = *anvil::ggml_layout(static_cast<std::uint32_t>(type));
            const std::int64_t row_bytes = in / layout.block * layout.bytes;
            anvil::host_tensor blocks(dtype::u8, dims{out, row_bytes});
            auto bytes = blocks.values<std::uint8_t>();
            for (auto& v : bytes)
                v = static_cast<std::uint8_t>(byte(rng));
            // Finite scales.
            for (std::int64_t at = 0; at < out * row_bytes; at += layout.bytes) {
                anvil_test::set_ggml_block_scales(type, reinterpret_cast<std::byte*>(bytes.data() + at),
                                                  [] { return 0.01f; });
            }
            anvil::graph g;
            anvil::attributes attrs;
            attrs.ggml_type = static_cast<std::uint32_t>(type);
            auto weight = g.apply(op::dequantize_ggml, {g.constant(blocks)}, attrs);
            CAPTURE(anvil::ggml_type_name(type));
            CAPTURE(rows);
            check_parity(linear_of(g, g.input("x", dtype::f32, dims{rows, in}), weight),
                         {{"x", random_tensor(dims{rows, in}, rng)}});
        }
    }
}

TEST_CASE("linear: a palette index out of range is refused when the program is compiled") {
    anvil::graph g;
    anvil::host_tensor indices(dtype::u8, dims{4, 8});
    indices.values<std::uint8_t>()[5] = 9;
    auto weight = g.apply(op::dequantize_lut,
                          {g.constant(indices, "w"),
                           g.constant(anvil::host_tensor::from(std::vector<float>(8, 1.0f), dims{8}))});
    auto y = g.apply(op::linear, {g.input("x", dtype::f32, dims{1, 8}), weight});
    anvil::compile_options cpu;
    cpu.target = anvil::device::cpu;
    CHECK_THROWS_WITH_AS(
        (void)anvil::compile({y}, cpu),
        doctest::Contains("index 9 (element 5 of the weight 'w') is out of range for its palette of 8"),
        anvil::error);
}

TEST_CASE("matmul: optimised matches reference with transposes and broadcast batches") {
    std::mt19937 rng(2);
    struct shapes {
        std::vector<std::int64_t> a, b;
        bool transpose_a, transpose_b;
    };
    const std::vector<shapes> cases{
        {{3, 4}, {4, 5}, false, false},
        {{2, 3, 4}, {2, 4, 5}, false, false},
        {{2, 1, 3, 4}, {3, 4, 6}, false, false},
        {{5, 4, 3}, {1, 4, 6}, true, false},
        {{2, 12, 9, 8}, {2, 12, 9, 8}, false, true},
        {{1, 1}, {1, 1}, true, true},
        {{0, 3, 4}, {4, 2}, false, false},
        {{7, 1, 33}, {7, 33, 1}, false, false},
        {{3, 65, 17}, {17, 70}, false, false},
    };
    for (const auto& c : cases) {
        anvil::graph g;
        auto a = g.input("a", dtype::f32, dims(c.a));
        auto b = g.input("b", dtype::f32, dims(c.b));
        anvil::attributes attrs;
        attrs.transpose_a = c.transpose_a;
        attrs.transpose_b = c.transpose_b;
        auto y = g.apply(op::matmul, {a, b}, attrs);
        CAPTURE(dims(c.a));
        CAPTURE(dims(c.b));
        check_parity(y, {{"a", random_tensor(dims(c.a), rng)}, {"b", random_tensor(dims(c.b), rng)}});
    }
}

TEST_CASE("conv2d: optimised matches reference over strides, padding, dilation and groups") {
    std::mt19937 rng(3);
    struct conv_case {
        dims x;
        std::int64_t out, kh, kw, groups;
        std::array<std::int64_t, 2> stride, dilation;
        std::array<std::int64_t, 4> padding;
        dtype weight_type;
        bool bias;
    };
    const std::vector<conv_case> cases{
        {dims{1, 3, 8, 8}, 4, 3, 3, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}, dtype::f32, true},
        {dims{2, 4, 9, 7}, 6, 1, 1, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}, dtype::f32, false},   // pointwise
        {dims{1, 6, 11, 10}, 6, 3, 3, 6, {2, 2}, {1, 1}, {1, 1, 1, 1}, dtype::f32, true},  // depthwise
        {dims{1, 4, 12, 12}, 8, 3, 2, 2, {1, 3}, {2, 1}, {0, 2, 1, 0}, dtype::f16, true},  // groups,
                                                                                           // asymmetric
        {dims{1, 3, 15, 15}, 5, 7, 7, 1, {2, 2}, {1, 1}, {3, 3, 3, 3}, dtype::bf16, false},
        {dims{0, 3, 5, 5}, 2, 3, 3, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}, dtype::f32, true},  // empty batch
        {dims{1, 1, 1, 1}, 1, 1, 1, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}, dtype::f32, false},
        {dims{1, 2, 6, 5}, 3, 2, 2, 1, {2, 2}, {1, 1}, {0, 0, 0, 0}, dtype::f32, true},  // 1x1 output pixels
                                                                                         // odd
    };
    for (const auto& c : cases) {
        anvil::graph g;
        auto x = g.input("x", dtype::f32, c.x);
        auto w =
            g.constant(random_tensor(dims{c.out, c.x[1] / c.groups, c.kh, c.kw}, rng, c.weight_type), "w");
        anvil::attributes to_f32;
        to_f32.to = dtype::f32;
        auto weight = c.weight_type == dtype::f32 ? w : g.apply(op::cast, {w}, to_f32);
        anvil::attributes attrs;
        attrs.stride = c.stride;
        attrs.dilation = c.dilation;
        attrs.padding = c.padding;
        attrs.groups = c.groups;
        auto y = c.bias ? g.apply(op::conv2d, {x, weight, g.constant(random_tensor(dims{c.out}, rng))}, attrs)
                        : g.apply(op::conv2d, {x, weight}, attrs);
        CAPTURE(c.x);
        check_parity(y, {{"x", random_tensor(c.x, rng)}});
    }
}

}  // namespace test_gemm_kernels
