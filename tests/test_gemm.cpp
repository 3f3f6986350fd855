#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

#include <anvil/backend/cpu/gemm.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ggml_block_scales.hpp"

// A namespace of its own, so the test files can be compiled together (a unity build).
namespace test_gemm {

namespace {

using anvil::dtype;
using anvil::detail::gemm_epilogue;
using anvil::detail::gemm_isa;
using anvil::detail::matrix_operand;

// An operand's storage: bytes of any dtype, laid out with given strides, plus the i8 scale and zero point.
struct test_matrix {
    std::int64_t rows = 0, cols = 0;
    dtype type = dtype::f32;
    std::int64_t row_stride = 0, col_stride = 1, offset_bytes = 0;
    std::vector<unsigned char> bytes;
    std::vector<float> scale, zero_point;

    [[nodiscard]] matrix_operand operand() const {
        matrix_operand result;
        result.data = bytes.empty() ? nullptr : bytes.data() + offset_bytes;
        result.type = type;
        result.row_stride = row_stride;
        result.col_stride = col_stride;
        if (type == dtype::i8) {
            result.scale = scale.data();
            result.zero_point = zero_point.empty() ? nullptr : zero_point.data();
        }
        return result;
    }
};

enum class layout { row_major, col_major, strided };

// Random values stored as `type`: floats in [-1, 1] (then rounded to f16 / bf16), or i8 in [-128, 127] with
// a scale and zero point per column. The offset puts f32 data at an address that is not 4-byte aligned.
test_matrix random_matrix(std::mt19937& random, std::int64_t rows, std::int64_t cols, dtype type,
                          layout order, std::int64_t offset_bytes = 0) {
    test_matrix m;
    m.rows = rows;
    m.cols = cols;
    m.type = type;
    m.offset_bytes = offset_bytes;
    std::int64_t extent = 0;
    if (order == layout::row_major) {
        m.row_stride = cols;
        m.col_stride = 1;
        extent = rows * cols;
    } else if (order == layout::col_major) {
        m.row_stride = 1;
        m.col_stride = rows;
        extent = rows * cols;
    } else {
        // Gaps between rows and between elements: neither stride is 1.
        m.col_stride = 2;
        m.row_stride = 2 * cols + 3;
        extent = rows * m.row_stride;
    }
    const auto size = static_cast<std::int64_t>(anvil::dtype_size(type));
    m.bytes.assign(static_cast<std::size_t>(extent * size + offset_bytes), 0xA5);  // gaps hold junk
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::uniform_int_distribution<int> byte(-128, 127);
    for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t c = 0; c < cols; ++c) {
            unsigned char* at = m.bytes.data() + offset_bytes + (r * m.row_stride + c * m.col_stride) * size;
            const float value = uniform(random);
            if (type == dtype::f32) {
                std::memcpy(at, &value, sizeof value);
            } else if (type == dtype::f16) {
                const std::uint16_t bits = anvil::float_to_half_bits(value);
                std::memcpy(at, &bits, sizeof bits);
            } else if (type == dtype::bf16) {
                const std::uint16_t bits = anvil::float_to_bfloat16_bits(value);
                std::memcpy(at, &bits, sizeof bits);
            } else {
                *at = static_cast<unsigned char>(static_cast<std::int8_t>(byte(random)));
            }
        }
    }
    if (type == dtype::i8) {
        for (std::int64_t c = 0; c < cols; ++c) {
            m.scale.push_back(0.01f + 0.001f * static_cast<float>(c % 7));
            m.zero_point.push_back(static_cast<float>(c % 5) - 2.0f);
        }
    }
    return m;
}

// Element (r, c) as float, decoded here with anvil's scalar conversions (independently of the GEMM).
float element(const test_matrix& m, std::int64_t r, std::int64_t c) {
    const auto size = static_cast<std::int64_t>(anvil::dtype_size(m.type));
    const unsigned char* at = m.bytes.data() + m.offset_bytes + (r * m.row_stride + c * m.col_stride) * size;
    if (m.type == dtype::f32) {
        float value;
        std::memcpy(&value, at, sizeof value);
        return value;
    }
    std::uint16_t bits = 0;
    if (m.type == dtype::f16 || m.type == dtype::bf16) std::memcpy(&bits, at, sizeof bits);
    if (m.type == dtype::f16) return anvil::half_bits_to_float(bits);
    if (m.type == dtype::bf16) return anvil::bfloat16_bits_to_float(bits);
    const auto q = static_cast<float>(static_cast<std::int8_t>(*at));
    return (q - m.zero_point[static_cast<std::size_t>(c)]) * m.scale[static_cast<std::size_t>(c)];
}

struct product_case {
    std::int64_t m, n, k;
    dtype a_type = dtype::f32, b_type = dtype::f32;
    layout a_layout = layout::row_major, b_layout = layout::row_major;
    bool bias = false, accumulate = false;
    std::int64_t ldc_padding = 0, a_offset = 0, b_offset = 0;
};

std::string describe(const product_case& p, gemm_isa isa, std::size_t threads) {
    return anvil::detail::message("m=", p.m, " n=", p.n, " k=", p.k, " A ", anvil::dtype_name(p.a_type), "/",
                                  static_cast<int>(p.a_layout), " B ", anvil::dtype_name(p.b_type), "/",
                                  static_cast<int>(p.b_layout), " bias=", p.bias,
                                  " accumulate=", p.accumulate, " isa=", anvil::detail::gemm_isa_name(isa),
                                  " threads=", threads);
}

// Runs gemm (with `isa`, on `pool`) and gemm_reference on the same inputs and checks every element of C,
// the padding columns of C included (which must stay untouched). Both sum in float in different orders, so
// they may differ by the rounding bound of a k-term dot product (k * 2^-24 each, relative to the sum of
// |a * b|), plus the rounding of the bias and the old C.
void check_product(const product_case& p, gemm_isa isa, anvil::thread_pool& pool, std::mt19937& random) {
    const test_matrix a = random_matrix(random, p.m, p.k, p.a_type, p.a_layout, p.a_offset);
    const test_matrix b = random_matrix(random, p.k, p.n, p.b_type, p.b_layout, p.b_offset);
    const std::int64_t ldc = p.n + p.ldc_padding;
    std::vector<float> bias(static_cast<std::size_t>(p.n));
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (float& value : bias)
        value = uniform(random);
    std::vector<float> initial(static_cast<std::size_t>(std::max<std::int64_t>(p.m * ldc, 1)));
    for (float& value : initial)
        value = uniform(random);
    std::vector<float> fast = initial, reference = initial;
    const gemm_epilogue epilogue{p.bias ? bias.data() : nullptr, p.accumulate};
    anvil::detail::gemm(p.m, p.n, p.k, a.operand(), b.operand(), fast.data(), ldc, epilogue, &pool, isa);
    anvil::detail::gemm_reference(p.m, p.n, p.k, a.operand(), b.operand(), reference.data(), ldc, epilogue);

    INFO(describe(p, isa, pool.size()));
    int failures = 0;
    for (std::int64_t i = 0; i < p.m && failures < 5; ++i) {
        for (std::int64_t j = 0; j < ldc && failures < 5; ++j) {
            const auto at = static_cast<std::size_t>(i * ldc + j);
            if (j >= p.n) {
                if (fast[at] != initial[at]) {
                    FAIL_CHECK("C[", i, ", ", j, "] is past column n and was written");
                    ++failures;
                }
                continue;
            }
            double magnitude = 0;
            for (std::int64_t q = 0; q < p.k; ++q)
                magnitude += std::fabs(static_cast<double>(element(a, i, q)) * element(b, q, j));
            const double extra = (p.bias ? std::fabs(bias[static_cast<std::size_t>(j)]) : 0.0) +
                                 (p.accumulate ? std::fabs(initial[at]) : 0.0);
            const double tolerance =
                (2.0 * static_cast<double>(p.k) + 4.0) * 0x1p-24 * (magnitude + extra) + 1e-30;
            if (!(std::fabs(static_cast<double>(fast[at]) - reference[at]) <= tolerance)) {
                FAIL_CHECK("C[", i, ", ", j, "] = ", fast[at], ", reference ", reference[at], " (tolerance ",
                           tolerance, ")");
                ++failures;
            }
        }
    }
}

std::vector<gemm_isa> isas_to_test() {
    return anvil::detail::available_gemm_isas();
}

}  // namespace

TEST_CASE("gemm_reference: a product computed by hand, with bias and accumulation") {
    // [1 2 3; 4 5 6] * [1 0; 0 1; 2 -1] = [7 -1; 16 -1]
    const std::vector<float> a{1, 2, 3, 4, 5, 6};
    const std::vector<float> b{1, 0, 0, 1, 2, -1};
    const std::vector<float> bias{10, 20};
    std::vector<float> c(4, 99.0f);
    const matrix_operand a_operand{a.data(), dtype::f32, 3, 1};
    const matrix_operand b_operand{b.data(), dtype::f32, 2, 1};
    anvil::detail::gemm_reference(2, 2, 3, a_operand, b_operand, c.data(), 2);
    CHECK(c == std::vector<float>{7, -1, 16, -1});
    anvil::detail::gemm_reference(2, 2, 3, a_operand, b_operand, c.data(), 2, {bias.data(), true});
    CHECK(c == std::vector<float>{24, 18, 42, 18});
    // The same B transposed through its strides: B^T stored row-major [2, 3].
    const std::vector<float> b_transposed{1, 0, 2, 0, 1, -1};
    anvil::detail::gemm_reference(2, 2, 3, a_operand, {b_transposed.data(), dtype::f32, 1, 3}, c.data(), 2,
                                  {bias.data(), false});
    CHECK(c == std::vector<float>{17, 19, 26, 19});
    // i8: (q - zero_point[c]) * scale[c].
    const std::vector<std::int8_t> q{3, -2, 1, 0, 5, 4};
    const std::vector<float> scale{0.5f, 2.0f}, zero{1.0f, 0.0f};
    matrix_operand q_operand{q.data(), dtype::i8, 2, 1};
    q_operand.scale = scale.data();
    q_operand.zero_point = zero.data();
    // dequantised: [1 -4; 0 0; 2 8]
    anvil::detail::gemm_reference(2, 2, 3, a_operand, q_operand, c.data(), 2);
    CHECK(c == std::vector<float>{7, 20, 16, 32});
}

TEST_CASE("gemm: matches the reference on odd and edge sizes, every kernel, 1 and 2 threads") {
    std::mt19937 random(1);
    anvil::thread_pool one(1), two(2);
    const std::int64_t sizes[] = {0, 1, 2, 3, 5, 6, 7, 8, 13, 16, 17, 31, 33, 70};
    std::uniform_int_distribution<std::size_t> pick(0, std::size(sizes) - 1);
    for (const gemm_isa isa : isas_to_test()) {
        for (int trial = 0; trial < 60; ++trial) {
            product_case p{sizes[pick(random)], sizes[pick(random)], sizes[pick(random)]};
            p.bias = trial % 3 == 0;
            p.accumulate = trial % 4 == 1;
            p.ldc_padding = trial % 5 == 2 ? 3 : 0;
            check_product(p, isa, trial % 2 == 0 ? one : two, random);
        }
        // Larger than one cache block in every direction (KC = 256, MC = 128..144), with partial tiles.
        for (const product_case p : {product_case{150, 70, 300}, product_case{290, 33, 257},
                                     product_case{19, 300, 520}, product_case{130, 130, 130}}) {
            check_product(p, isa, one, random);
            check_product(p, isa, two, random);
        }
        // Enough work for several rectangles per thread, taken from the queue.
        check_product({800, 801, 8}, isa, two, random);
        check_product({2, 2100, 20}, isa, two, random);
    }
}

TEST_CASE("gemm: few rows (the decoding shapes) with wide and deep B") {
    std::mt19937 random(2);
    anvil::thread_pool one(1), two(2);
    for (const gemm_isa isa : isas_to_test()) {
        // Several column blocks and k blocks of the streaming path, and a partial last panel.
        for (const std::int64_t m : {1, 2, 3, 4, 5, 8, 13, 16}) {
            product_case p{m, 650 - m, 150 + m};
            p.bias = m % 2 == 1;
            p.accumulate = m % 3 == 1;
            check_product(p, isa, m % 4 < 2 ? one : two, random);
        }
        // Narrow and deep, f32 B not 4-byte aligned (so it is packed rather than read in place).
        product_case p{3, 37, 700};
        p.b_offset = 1;
        check_product(p, isa, one, random);
        p.b_layout = layout::col_major;
        check_product(p, isa, two, random);
    }
}

TEST_CASE("gemm: transposed and strided operands") {
    std::mt19937 random(3);
    anvil::thread_pool two(2);
    for (const gemm_isa isa : isas_to_test()) {
        for (const layout a_layout : {layout::row_major, layout::col_major, layout::strided}) {
            for (const layout b_layout : {layout::row_major, layout::col_major, layout::strided}) {
                for (const product_case shape : {product_case{37, 29, 45}, product_case{2, 61, 300}}) {
                    product_case p = shape;
                    p.a_layout = a_layout;
                    p.b_layout = b_layout;
                    p.bias = true;
                    check_product(p, isa, two, random);
                }
            }
        }
    }
}

TEST_CASE("gemm: f16, bf16 and i8 operands are converted while packing") {
    std::mt19937 random(4);
    anvil::thread_pool one(1), two(2);
    for (const gemm_isa isa : isas_to_test()) {
        for (const dtype b_type : {dtype::f16, dtype::bf16, dtype::i8}) {
            for (const layout b_layout : {layout::row_major, layout::col_major, layout::strided}) {
                for (const product_case shape :
                     {product_case{1, 45, 270}, product_case{8, 33, 64}, product_case{40, 50, 30}}) {
                    product_case p = shape;
                    p.b_type = b_type;
                    p.b_layout = b_layout;
                    p.b_offset = 1;
                    p.bias = true;
                    check_product(p, isa, p.m % 2 == 0 ? two : one, random);
                }
            }
        }
        for (const dtype a_type : {dtype::f16, dtype::bf16}) {
            for (const layout a_layout : {layout::row_major, layout::col_major}) {
                product_case p{21, 19, 40, a_type, dtype::bf16, a_layout};
                check_product(p, isa, two, random);
            }
        }
    }
}

// Rows of random ggml blocks for a weight W [n, k] (B = Wᵀ): every scale an f16 in ±[0.002, 0.02], every
// quantised byte random. Q4_K's sub-block scales and mins are random 6-bit values.
std::vector<std::byte> random_blocks(std::mt19937& random, anvil::ggml_type type, std::int64_t n,
                                     std::int64_t k) {
    const auto layout = *anvil::ggml_layout(static_cast<std::uint32_t>(type));
    const std::size_t per_row = static_cast<std::size_t>(k) / layout.block * layout.bytes;
    std::vector<std::byte> bytes(per_row * static_cast<std::size_t>(n));
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> scale(0.002f, 0.02f);
    for (std::byte& b : bytes)
        b = static_cast<std::byte>(byte(random));
    for (std::size_t at = 0; at < bytes.size(); at += layout.bytes) {
        anvil_test::set_ggml_block_scales(
            type, bytes.data() + at, [&] { return scale(random) * (byte(random) % 2 == 0 ? 1.0f : -1.0f); });
    }
    return bytes;
}

// gemm with B = Wᵀ for W [n, k] of ggml blocks against gemm_reference with the same W dequantised to f32 by
// the naive dequantiser (dequantize_ggml), within the rounding bound of a k-term dot product.
void check_block_product(anvil::ggml_type type, std::int64_t m, std::int64_t n, std::int64_t k, gemm_isa isa,
                         anvil::thread_pool& pool, std::mt19937& random, bool bias_and_accumulate) {
    const std::vector<std::byte> blocks = random_blocks(random, type, n, k);
    std::vector<float> weights(static_cast<std::size_t>(n * k));
    anvil::dequantize_ggml(type, blocks, weights);
    const test_matrix a = random_matrix(random, m, k, dtype::f32, layout::row_major);
    matrix_operand b;
    b.data = blocks.data();
    b.type = dtype::u8;
    b.blocks = type;
    b.block_row_bytes = static_cast<std::int64_t>(blocks.size()) / n;
    const matrix_operand dense{weights.data(), dtype::f32, 1, k};
    std::vector<float> bias(static_cast<std::size_t>(n), 0.25f);
    std::vector<float> fast(static_cast<std::size_t>(m * n), 0.5f), reference = fast;
    const gemm_epilogue epilogue{bias_and_accumulate ? bias.data() : nullptr, bias_and_accumulate};
    anvil::detail::gemm(m, n, k, a.operand(), b, fast.data(), n, epilogue, &pool, isa);
    anvil::detail::gemm_reference(m, n, k, a.operand(), dense, reference.data(), n, epilogue);
    INFO(anvil::ggml_type_name(type), " m=", m, " n=", n, " k=", k,
         " isa=", anvil::detail::gemm_isa_name(isa), " threads=", pool.size());
    int failures = 0;
    for (std::int64_t i = 0; i < m && failures < 5; ++i) {
        for (std::int64_t j = 0; j < n && failures < 5; ++j) {
            double magnitude = bias_and_accumulate ? 0.75 : 0.0;
            for (std::int64_t q = 0; q < k; ++q)
                magnitude += std::fabs(static_cast<double>(element(a, i, q)) *
                                       weights[static_cast<std::size_t>(j * k + q)]);
            const double tolerance = (2.0 * static_cast<double>(k) + 4.0) * 0x1p-24 * magnitude + 1e-30;
            const auto at = static_cast<std::size_t>(i * n + j);
            if (!(std::fabs(static_cast<double>(fast[at]) - reference[at]) <= tolerance)) {
                FAIL_CHECK("C[", i, ", ", j, "] = ", fast[at], ", reference ", reference[at], " (tolerance ",
                           tolerance, ")");
                ++failures;
            }
        }
    }
}

TEST_CASE("gemm: a B of ggml blocks, read by rows when decoding and dequantised while packing otherwise") {
    std::mt19937 random(9);
    anvil::thread_pool one(1), two(2);
    for (const gemm_isa isa : isas_to_test()) {
        for (const anvil::ggml_type type :
             {anvil::ggml_type::Q8_0, anvil::ggml_type::Q4_0, anvil::ggml_type::Q4_1, anvil::ggml_type::Q5_0,
              anvil::ggml_type::Q5_1, anvil::ggml_type::IQ4_NL, anvil::ggml_type::Q4_K,
              anvil::ggml_type::Q5_K, anvil::ggml_type::Q6_K, anvil::ggml_type::Q8_K}) {
            const bool k_quant = anvil::ggml_layout(static_cast<std::uint32_t>(type))->block == 256;
            const std::int64_t depth = k_quant ? 256 : 32;
            // 1-4 rows: dot products over W's rows; more: the streaming and packed paths.
            for (const std::int64_t m : {1, 2, 3, 4, 5, 17, 40}) {
                for (const std::int64_t n : {1, 6, 37}) {
                    const std::int64_t k = depth * (m % 3 + 1) * (k_quant ? 1 : 3);
                    check_block_product(type, m, n, k, isa, m % 2 == 0 ? two : one, random, n % 2 == 1);
                }
            }
            // Deep enough for several k blocks of the packed path (KC = 192 or 256), and wide for two
            // threads.
            check_block_product(type, 1, 300, 512 + 256, isa, two, random, true);
            check_block_product(type, 70, 50, 512 + 256, isa, two, random, false);
        }
    }
}

TEST_CASE("gemm: a B of ggml blocks that do not fit it is refused, naming the type and sizes") {
    std::vector<std::byte> blocks(34 * 2);
    matrix_operand b;
    b.data = blocks.data();
    b.type = dtype::u8;
    b.blocks = anvil::ggml_type::Q8_0;
    b.block_row_bytes = 34;
    std::vector<float> a(48), c(2);
    const matrix_operand a_operand{a.data(), dtype::f32, 48, 1};
    CHECK_THROWS_WITH_AS(anvil::detail::gemm(1, 2, 48, a_operand, b, c.data(), 2),
                         doctest::Contains("48 values a column are not whole blocks of 32"),
                         anvil::shape_error);
    b.blocks = anvil::ggml_type::Q8_1;
    CHECK_THROWS_WITH_AS(anvil::detail::gemm(1, 2, 32, a_operand, b, c.data(), 2),
                         doctest::Contains("Q8_1 blocks; that type has no dequantiser"), anvil::type_error);
    b.blocks = anvil::ggml_type::Q8_0;
    CHECK_THROWS_WITH_AS(anvil::detail::gemm(1, 2, 32, b, a_operand, c.data(), 2),
                         doctest::Contains("only B may be quantised"), anvil::type_error);
}

TEST_CASE("gemm: k = 0 writes the bias (or zeros), or adds the bias when accumulating") {
    const std::vector<float> bias{1.5f, -2.0f, 3.0f};
    const matrix_operand none{nullptr, dtype::f32, 0, 1};
    std::vector<float> c(6, 7.0f);
    anvil::detail::gemm(2, 3, 0, none, none, c.data(), 3);
    CHECK(c == std::vector<float>(6, 0.0f));
    anvil::detail::gemm(2, 3, 0, none, none, c.data(), 3, {bias.data(), false});
    CHECK(c == std::vector<float>{1.5f, -2.0f, 3.0f, 1.5f, -2.0f, 3.0f});
    anvil::detail::gemm(2, 3, 0, none, none, c.data(), 3, {bias.data(), true});
    CHECK(c == std::vector<float>{3.0f, -4.0f, 6.0f, 3.0f, -4.0f, 6.0f});
    // m = 0 or n = 0: nothing to write; only an operand with elements needs data.
    const std::vector<float> data(12, 1.0f);
    anvil::detail::gemm(0, 3, 4, none, {data.data(), dtype::f32, 3, 1}, nullptr, 3);
    anvil::detail::gemm(3, 0, 4, {data.data(), dtype::f32, 4, 1}, none, nullptr, 0);
}

TEST_CASE("gemm: with a packed_matrix, as with B packed per call") {
    std::mt19937 random(5);
    anvil::thread_pool one(1), two(2);
    for (const gemm_isa isa : isas_to_test()) {
        for (const dtype b_type : {dtype::f32, dtype::f16, dtype::i8}) {
            for (const product_case p : {product_case{1, 50, 600}, product_case{9, 300, 257},
                                         product_case{100, 17, 31}, product_case{5, 1, 1}}) {
                const test_matrix a = random_matrix(random, p.m, p.k, dtype::f32, layout::row_major);
                const test_matrix b = random_matrix(random, p.k, p.n, b_type, layout::col_major);
                const anvil::detail::packed_matrix packed(p.k, p.n, b.operand(), isa);
                CHECK(packed.rows() == p.k);
                CHECK(packed.cols() == p.n);
                CHECK(packed.isa() == isa);
                std::vector<float> bias(static_cast<std::size_t>(p.n), 0.25f);
                std::vector<float> expected(static_cast<std::size_t>(p.m * p.n), 1.0f), actual = expected;
                anvil::detail::gemm_reference(p.m, p.n, p.k, a.operand(), b.operand(), expected.data(), p.n,
                                              {bias.data(), true});
                anvil::detail::gemm(p.m, a.operand(), packed, actual.data(), p.n, {bias.data(), true},
                                    p.m % 2 == 0 ? &two : &one);
                for (std::size_t i = 0; i < expected.size(); ++i) {
                    INFO("m=", p.m, " n=", p.n, " k=", p.k, " element ", i);
                    CHECK(std::fabs(actual[i] - expected[i]) <=
                          1e-4f * (1.0f + std::fabs(expected[i])) * static_cast<float>(p.k));
                }
            }
        }
    }
}

TEST_CASE("gemm: the same bits on 1 to 5 threads, however the product is cut into parts") {
    // Each thread count cuts the product into a different number of parts (rows at MC blocks, columns at
    // tiles; the skinny and dot-product paths by columns only), which must not change any element's sum.
    std::mt19937 random(41);
    std::vector<std::unique_ptr<anvil::thread_pool>> pools;
    for (std::size_t threads = 1; threads <= 5; ++threads)
        pools.push_back(std::make_unique<anvil::thread_pool>(threads));
    for (const gemm_isa isa : isas_to_test()) {
        for (const product_case p :
             {product_case{300, 200, 64}, product_case{160, 530, 100}, product_case{16, 768, 256},
              product_case{7, 1000, 300},
              product_case{3, 1000, 512, dtype::f32, dtype::f16, layout::row_major, layout::col_major}}) {
            const test_matrix a = random_matrix(random, p.m, p.k, p.a_type, p.a_layout);
            const test_matrix b = random_matrix(random, p.k, p.n, p.b_type, p.b_layout);
            std::vector<float> bias(static_cast<std::size_t>(p.n), 0.5f);
            std::vector<float> first;
            for (const auto& pool : pools) {
                std::vector<float> c(static_cast<std::size_t>(p.m * p.n), 1.0f);
                anvil::detail::gemm(p.m, p.n, p.k, a.operand(), b.operand(), c.data(), p.n,
                                    {bias.data(), true}, pool.get(), isa);
                if (first.empty()) first = c;
                INFO(describe(p, isa, pool->size()));
                CHECK(std::memcmp(c.data(), first.data(), c.size() * sizeof(float)) == 0);
            }
        }
    }
}

TEST_CASE("gemm: the global pool and the automatic kernel") {
    const std::vector<float> a{1, 2, 3, 4}, b{5, 6, 7, 8};
    std::vector<float> c(4);
    anvil::detail::gemm(2, 2, 2, {a.data(), dtype::f32, 2, 1}, {b.data(), dtype::f32, 2, 1}, c.data(), 2);
    CHECK(c == std::vector<float>{19, 22, 43, 50});
    CHECK(anvil::detail::best_gemm_isa() == anvil::detail::available_gemm_isas().front());
    CHECK(anvil::detail::available_gemm_isas().back() == gemm_isa::portable);
#if defined(__aarch64__)
    // Every arm64 CPU has NEON: its kernel is the one that runs (tools/test.sh's aarch64 stage checks it).
    CHECK(anvil::detail::best_gemm_isa() == gemm_isa::neon);
#endif
}

TEST_CASE("gemm: invalid arguments are reported precisely") {
    const std::vector<float> data(64, 1.0f);
    std::vector<float> c(64);
    const matrix_operand f32{data.data(), dtype::f32, 4, 1};
    using anvil::detail::gemm;
    CHECK_THROWS_WITH_AS(gemm(-1, 4, 4, f32, f32, c.data(), 4),
                         "gemm: sizes must not be negative, got m=-1, n=4, k=4 (C[m,n] = A[m,k] * B[k,n])",
                         anvil::shape_error);
    CHECK_THROWS_WITH_AS(gemm(2, 4, 3, {nullptr, dtype::f32, 3, 1}, f32, c.data(), 4),
                         "gemm: operand A (2x3, f32) has no data (null pointer)", anvil::error);
    CHECK_THROWS_WITH_AS(gemm(2, 4, 3, f32, {nullptr, dtype::bf16, 4, 1}, c.data(), 4),
                         "gemm: operand B (3x4, bf16) has no data (null pointer)", anvil::error);
    CHECK_THROWS_WITH_AS(gemm(2, 4, 3, f32, f32, nullptr, 4), "gemm: C (2x4) has no data (null pointer)",
                         anvil::error);
    CHECK_THROWS_WITH_AS(
        gemm(2, 4, 3, f32, {data.data(), dtype::u8, 4, 1}, c.data(), 4),
        "gemm: operand B (3x4) has element type u8; B must be f32, f16 or bf16, or i8 with a "
        "per-column scale",
        anvil::type_error);
    CHECK_THROWS_WITH_AS(gemm(2, 4, 3, {data.data(), dtype::i8, 3, 1}, f32, c.data(), 4),
                         "gemm: operand A (2x3) has element type i8; A must be f32, f16 or bf16",
                         anvil::type_error);
    CHECK_THROWS_WITH_AS(gemm(2, 4, 3, f32, {data.data(), dtype::i8, 4, 1}, c.data(), 4),
                         "gemm: operand B (3x4) is i8 but has no scale; i8 needs scale[4] (and optionally "
                         "zero_point[4]), one per column",
                         anvil::type_error);
    CHECK_THROWS_WITH_AS(
        gemm(2, 4, 3, f32, {data.data(), static_cast<dtype>(200), 4, 1}, c.data(), 4),
        "gemm: operand B (3x4) has element type <invalid dtype 200>; B must be f32, f16 or bf16, "
        "or i8 with a per-column scale",
        anvil::type_error);
    CHECK_THROWS_WITH_AS(gemm(2, 4, 3, f32, f32, c.data(), 3),
                         "gemm: ldc=3 is less than n=4: rows of C (2x4) would overlap; expected ldc >= n",
                         anvil::shape_error);
    CHECK_THROWS_WITH_AS(
        anvil::detail::gemm_reference(2, 4, -3, f32, f32, c.data(), 4),
        "gemm_reference: sizes must not be negative, got m=2, n=4, k=-3 (C[m,n] = A[m,k] * B[k,n])",
        anvil::shape_error);
    CHECK_THROWS_WITH_AS(anvil::detail::packed_matrix(3, -1, f32),
                         "packed_matrix: sizes must not be negative, got k=3, n=-1", anvil::shape_error);
    CHECK_THROWS_WITH_AS(
        gemm(2, f32, anvil::detail::packed_matrix{}, c.data(), 4),
        "gemm: the packed B is empty (default-constructed packed_matrix); pack a matrix first", anvil::error);
    const anvil::detail::packed_matrix packed(3, 4, f32);
    CHECK_THROWS_WITH_AS(gemm(2, {nullptr, dtype::f32, 3, 1}, packed, c.data(), 4),
                         "gemm: operand A (2x3, f32) has no data (null pointer)", anvil::error);
    const auto available = anvil::detail::available_gemm_isas();
    for (const gemm_isa isa : {gemm_isa::avx2, gemm_isa::avx512, gemm_isa::neon}) {
        if (std::find(available.begin(), available.end(), isa) != available.end()) continue;
        CHECK_THROWS_AS(gemm(2, 4, 3, f32, f32, c.data(), 4, {}, nullptr, isa), anvil::unsupported_error);
        try {
            gemm(2, 4, 3, f32, f32, c.data(), 4, {}, nullptr, isa);
        } catch (const anvil::unsupported_error& e) {
            CHECK(std::string(e.what()).find(std::string("gemm: the ") + anvil::detail::gemm_isa_name(isa) +
                                             " kernel cannot run on this CPU (available: ") == 0);
        }
    }
}

}  // namespace test_gemm
