#include <doctest/doctest.h>
#include <anvil/anvil.hpp>
#include <anvil/backend/cpu/executor.hpp>

#include "op_cases.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

// A namespace of its own, so the test files can be compiled together (a unity build).
namespace test_reference_kernels {

// The CPU reference kernels against PyTorch: tests/data/ops/ holds inputs and outputs that
// tools/fixtures/make_op_goldens.py computed with torch 1.13, and cases.json says which op and attributes
// each case runs. Every node is built with graph::apply, so shape inference and the canonical attributes
// it leaves are exercised on the way.

namespace {

namespace fs = std::filesystem;
namespace json = anvil::json;
namespace cpu = anvil::detail::cpu;
using anvil::attributes;
using anvil::dims;
using anvil::dtype;
using anvil::op;
using op_cases::op_from_name;
using op_cases::ops_folder;
using op_cases::parse_attributes;

// A node's inputs bound to host data, and the reference's output.
struct bound_node {
    anvil::graph graph;
    anvil::value result;
    std::vector<std::vector<float>> inputs;
};

std::vector<float> evaluate(const bound_node& bound) {
    const anvil::node& n = bound.result.producer();
    std::vector<cpu::const_tensor_span> spans;
    for (std::size_t i = 0; i < n.inputs.size(); ++i) {
        spans.push_back({bound.inputs[i].data(), bound.graph[n.inputs[i]].result.shape});
    }
    std::vector<float> out(static_cast<std::size_t>(n.result.shape.element_count()));
    cpu::evaluate_reference(n, spans, {out.data(), n.result.shape});
    return out;
}

bool close(float got, float want, double atol, double rtol) {
    if (std::isnan(want)) return std::isnan(got);
    if (std::isinf(want)) return got == want;
    return std::fabs(static_cast<double>(got) - want) <= atol + rtol * std::fabs(static_cast<double>(want));
}

json::value load_cases() {
    return json::parse_file(ops_folder() / "cases.json");
}

}  // namespace

TEST_CASE("reference kernels: every op matches PyTorch's goldens") {
    const json::value document = load_cases();
    const auto& cases = document.at("cases").as_array();
    REQUIRE(cases.size() > 50);
    for (const auto& c : cases) {
        const std::string& name = c.at("name").as_string();
        INFO("case ", name);
        const auto kind = op_from_name(c.at("op").as_string());
        REQUIRE(kind.has_value());

        bound_node bound;
        std::vector<anvil::value> operands;
        for (const auto& file : c.at("inputs").as_array()) {
            const auto array = anvil::npy::read(ops_folder() / file.as_string());
            operands.push_back(bound.graph.input(file.as_string(), array.type, dims(array.shape)));
            bound.inputs.push_back(array.to_f32());
        }
        bound.result = bound.graph.apply(*kind, operands, parse_attributes(c.at("attrs")));

        const auto expected = anvil::npy::read(ops_folder() / c.at("output").as_string());
        REQUIRE(bound.result.shape() == dims(expected.shape));
        const std::vector<float> want = expected.to_f32();
        const std::vector<float> got = evaluate(bound);
        REQUIRE(got.size() == want.size());

        const double atol = c.at("atol").as_double();
        const double rtol = c.at("rtol").as_double();
        std::size_t mismatches = 0;
        std::size_t first = 0;
        for (std::size_t i = 0; i < got.size(); ++i) {
            if (!close(got[i], want[i], atol, rtol) && mismatches++ == 0) first = i;
        }
        CHECK_MESSAGE(mismatches == 0, mismatches, " of ", got.size(),
                      " elements differ; first at flat index ", first, ": got ", got[first], ", want ",
                      want[first]);
    }
}

TEST_CASE("reference kernels: the goldens cover every op") {
    const json::value document = load_cases();
    std::map<std::string, int> counts;
    for (const auto& c : document.at("cases").as_array())
        ++counts[c.at("op").as_string()];
    for (std::size_t i = 0; i < anvil::op_count; ++i) {
        const auto kind = static_cast<op>(i);
        if (kind == op::input || kind == op::constant) continue;
        CHECK_MESSAGE(counts[std::string(anvil::op_name(kind))] > 0, anvil::op_name(kind),
                      " has no golden case");
    }
}

namespace {

// A graph with one op applied to inputs of the given types and shapes, bound to the given data.
bound_node make_node(op kind, const std::vector<std::pair<dtype, dims>>& inputs,
                     std::vector<std::vector<float>> data, attributes attrs = {}) {
    bound_node bound;
    std::vector<anvil::value> operands;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        operands.push_back(bound.graph.input("in" + std::to_string(i), inputs[i].first, inputs[i].second));
    }
    bound.result = bound.graph.apply(kind, operands, std::move(attrs));
    bound.inputs = std::move(data);
    return bound;
}

std::string error_text(const bound_node& bound) {
    try {
        evaluate(bound);
    } catch (const anvil::error& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace

TEST_CASE("gather: an index out of range throws, naming the index, the axis and the table") {
    attributes attrs;
    attrs.axis = 0;
    const std::vector<float> table(24, 1.0f);
    const auto with_indices = [&](std::vector<float> indices) {
        return make_node(op::gather, {{dtype::f32, dims{6, 4}}, {dtype::i64, dims{3}}},
                         {table, std::move(indices)}, attrs);
    };
    CHECK_NOTHROW(evaluate(with_indices({0, 5, 3})));
    const std::string past_end = error_text(with_indices({1, 6, 2}));
    CHECK(past_end.find("gather: index 6") != std::string::npos);
    CHECK(past_end.find("axis 0") != std::string::npos);
    CHECK(past_end.find("table [6, 4]") != std::string::npos);
    CHECK(error_text(with_indices({-1, 0, 0})).find("index -1") != std::string::npos);
    CHECK(error_text(with_indices({0, 1.5f, 0})).find("index 1.5") != std::string::npos);

    attrs.axis = -1;
    const auto inner =
        make_node(op::gather, {{dtype::f32, dims{6, 4}}, {dtype::i64, dims{2}}}, {table, {0, 4}}, attrs);
    const std::string inner_error = error_text(inner);
    CHECK(inner_error.find("index 4") != std::string::npos);
    CHECK(inner_error.find("axis 1") != std::string::npos);
}

TEST_CASE("dequantize_lut: an index past the table throws, naming it and the table") {
    const std::vector<float> lut(8, 0.5f);
    const auto bound = make_node(op::dequantize_lut, {{dtype::u8, dims{2, 3}}, {dtype::f32, dims{2, 4}}},
                                 {{0, 1, 2, 3, 4, 0}, lut});
    const std::string text = error_text(bound);
    CHECK(text.find("dequantize_lut: index 4") != std::string::npos);
    CHECK(text.find("table [2, 4]") != std::string::npos);
    const auto shared = make_node(op::dequantize_lut, {{dtype::u8, dims{3}}, {dtype::f32, dims{4}}},
                                  {{3, 0, 9}, {1, 2, 3, 4}});
    CHECK(error_text(shared).find("index 9") != std::string::npos);
}

TEST_CASE("shape inference: graph::apply names the op and the shapes it rejects") {
    anvil::graph g;
    const auto f32 = [&](std::string name, dims shape) {
        return g.input(std::move(name), dtype::f32, shape);
    };
    const auto message_of = [&](op kind, std::initializer_list<anvil::value> operands,
                                attributes attrs = {}) {
        try {
            g.apply(kind, operands, std::move(attrs));
        } catch (const anvil::error& e) {
            return std::string(e.what());
        }
        return std::string("(no error)");
    };
    CHECK(message_of(op::matmul, {f32("a", dims{2, 3}), f32("b", dims{4, 5})}) ==
          "matmul: inner extents differ: [2, 3] and [4, 5] (3 vs 4)");
    CHECK(message_of(op::add, {f32("c", dims{2, 3}), f32("d", dims{4})}) ==
          "add: shapes [2, 3] and [4] do not broadcast");

    attributes groups;
    groups.groups = 2;
    const std::string conv =
        message_of(op::conv2d, {f32("x", dims{1, 4, 5, 5}), f32("w", dims{6, 3, 3, 3})}, groups);
    CHECK(conv.find("conv2d: input [1, 4, 5, 5] and weight [6, 3, 3, 3] do not fit groups = 2") == 0);

    const std::string attention = message_of(
        op::attention, {f32("q", dims{1, 3, 4, 8}), f32("k", dims{1, 2, 4, 8}), f32("v", dims{1, 2, 4, 8})});
    CHECK(attention.find("attention: q [1, 3, 4, 8], k [1, 2, 4, 8], v [1, 2, 4, 8] do not fit") == 0);

    attributes axes;
    axes.axes = {3};
    CHECK(message_of(op::reduce_sum, {f32("r", dims{2, 3, 4})}, axes) ==
          "reduce_sum: axis 3 is out of range for shape [2, 3, 4] (rank 3)");

    const std::string rotary =
        message_of(op::rotary, {f32("rx", dims{5, 4}), f32("cos", dims{5, 3}), f32("sin", dims{5, 3})});
    CHECK(rotary.find("rotary: cos [5, 3] and sin [5, 3] must both be [5, R / 2] with R <= 4 for x [5, 4]") ==
          0);

    CHECK(message_of(op::gather, {f32("t", dims{4, 2}), f32("i", dims{3})}) ==
          "gather: indices must be integers, got f32");
}

TEST_CASE("evaluate_reference: refuses leaves, wrong output shapes and malformed fused steps") {
    anvil::graph g;
    const auto x = g.input("x", dtype::f32, dims{2, 3});
    const std::vector<float> data(6, 1.0f);
    std::vector<float> out(6);
    const cpu::const_tensor_span in{data.data(), dims{2, 3}};
    CHECK_THROWS_WITH_AS(cpu::evaluate_reference(x.producer(), {}, {out.data(), dims{2, 3}}),
                         doctest::Contains("input nodes hold no computation"), anvil::error);

    const auto y = g.apply(op::relu, {x});
    CHECK_THROWS_WITH_AS(cpu::evaluate_reference(y.producer(), std::span(&in, 1), {out.data(), dims{3, 2}}),
                         "evaluate_reference: relu produces [2, 3], but the output tensor is [3, 2]",
                         anvil::shape_error);
    const cpu::const_tensor_span wrong{data.data(), dims{6}};
    CHECK_THROWS_AS(cpu::evaluate_reference(y.producer(), std::span(&wrong, 1), {out.data(), dims{2, 3}}),
                    anvil::shape_error);

    attributes fused;
    fused.steps = {{op::relu, {1, 0, 0}, 0.0f, 0.0f}};  // reads value 1, which only its own result would be
    CHECK_THROWS_WITH_AS(g.apply(op::fused_elementwise, {x}, fused),
                         doctest::Contains("step 0 (relu) reads value 1, but only 1 values"), anvil::error);
    // A node built by hand, bypassing graph::apply, is refused by the kernel all the same.
    anvil::node hand = y.producer();
    hand.kind = op::fused_elementwise;
    hand.attrs = fused;
    CHECK_THROWS_WITH_AS(cpu::evaluate_reference(hand, std::span(&in, 1), {out.data(), dims{2, 3}}),
                         doctest::Contains("step 0 (relu) reads value 1, but only 1 values"), anvil::error);
}

TEST_CASE("cast_value: fp8 rounding and integer wrapping, worked out by hand") {
    // e4m3fn: 3 mantissa bits, max 448, no infinity. 0.3 lies between 0.28125 and 0.3125, nearer the latter;
    // 464 is the tie between 448 and 480 (not representable) and goes to even (448); above it is NaN.
    CHECK(cpu::cast_value(0.3f, dtype::f8_e4m3) == 0.3125f);
    CHECK(cpu::cast_value(464.0f, dtype::f8_e4m3) == 448.0f);
    CHECK(std::isnan(cpu::cast_value(470.0f, dtype::f8_e4m3)));
    CHECK(cpu::cast_value(-0x1p-9f, dtype::f8_e4m3) == -0x1p-9f);  // the smallest subnormal
    // e5m2: 2 mantissa bits, max 57344; from 61440 up, infinity.
    CHECK(cpu::cast_value(0.3f, dtype::f8_e5m2) == 0.3125f);
    CHECK(cpu::cast_value(57344.0f, dtype::f8_e5m2) == 57344.0f);
    CHECK(cpu::cast_value(70000.0f, dtype::f8_e5m2) == std::numeric_limits<float>::infinity());
    // Integers truncate, then wrap modulo 2^bits; non-finite values give 0.
    CHECK(cpu::cast_value(-7.9f, dtype::i16) == -7.0f);
    CHECK(cpu::cast_value(40000.0f, dtype::i16) == 40000.0f - 65536.0f);
    CHECK(cpu::cast_value(70000.5f, dtype::u16) == 70000.0f - 65536.0f);
    CHECK(cpu::cast_value(0x1p31f, dtype::i32) == -0x1p31f);
    CHECK(cpu::cast_value(-1.0f, dtype::u16) == 65535.0f);
    CHECK(cpu::cast_value(std::numeric_limits<float>::quiet_NaN(), dtype::i32) == 0.0f);
    CHECK(cpu::cast_value(-std::numeric_limits<float>::infinity(), dtype::u8) == 0.0f);
    CHECK(cpu::cast_value(-5.5f, dtype::i64) == -5.0f);
    CHECK(cpu::cast_value(1e-3f, dtype::f64) == 1e-3f);
}

TEST_CASE("evaluate_reference: a node built by hand runs with its attributes put in canonical form") {
    // A pass may build nodes without graph::apply; axes -1 and 0 given unsorted and negative must still
    // reduce the right axes. x [2, 3] = 0..5; the sum of everything is 15.
    anvil::node n;
    n.kind = op::reduce_sum;
    n.inputs = {0};
    n.attrs.axes = {-1, 0};
    n.result = {dtype::f32, dims{}};
    const std::vector<float> x{0, 1, 2, 3, 4, 5};
    const cpu::const_tensor_span in{x.data(), dims{2, 3}};
    float out = -1.0f;
    cpu::evaluate_reference(n, std::span(&in, 1), {&out, dims{}});
    CHECK(out == 15.0f);
    n.attrs.axes = {-1};
    n.result = {dtype::f32, dims{2}};
    float rows[2] = {-1.0f, -1.0f};
    cpu::evaluate_reference(n, std::span(&in, 1), {rows, dims{2}});
    CHECK(rows[0] == 3.0f);   // 0 + 1 + 2
    CHECK(rows[1] == 12.0f);  // 3 + 4 + 5
}

}  // namespace test_reference_kernels
