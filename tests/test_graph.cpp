// The graph IR: building, the text dump, and the passes' structure (their numerics are checked in
// test_program.cpp, against the unfused graphs).
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>
#include <anvil/backend/cpu/memory_plan.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

// A namespace of its own, so the test files can be compiled together (a unity build).
namespace test_graph {

using anvil::dims;
using anvil::dtype;
using anvil::op;

namespace {

anvil::host_tensor filled(dtype type, dims shape, float value) {
    anvil::host_tensor t(dtype::f32, shape);
    for (auto& v : t.values<float>())
        v = value;
    if (type == dtype::f32) return t;
    anvil::host_tensor out(type, shape);
    anvil::convert_f32_to_f16(t.values<float>().data(), t.element_count(), out.values<anvil::half>().data());
    return out;
}

int count_kind(const anvil::graph_body& body, op kind) {
    int count = 0;
    for (const auto& n : body.nodes)
        count += n.kind == kind;
    return count;
}

}  // namespace

TEST_CASE("graph: the dump prints one line per node with canonical attributes") {
    anvil::graph g;
    auto x = g.input("x", dtype::f32, dims{2, 3, 4});
    anvil::attributes order;
    order.axes = {0, -1, 1};
    auto t = g.apply(op::permute, {x}, order);
    anvil::attributes sum;
    sum.axes = {-1};
    sum.keep_dims = true;
    auto s = g.apply(op::reduce_sum, {t}, sum);
    auto y = g.apply(op::add, {s, g.scalar(1.5)});
    anvil::graph_body body = *g.body();
    body.outputs = {y.id()};
    // Written from the ops' definitions: permute [2,3,4] by (0,2,1) gives [2,4,3]; summing the last axis
    // with keep_dims gives [2,4,1].
    CHECK(anvil::dump(body) ==
          "%0 = input \"x\" : f32 [2, 3, 4]\n"
          "%1 = permute(%0) {axes=[0, 2, 1]} : f32 [2, 4, 3]\n"
          "%2 = reduce_sum(%1) {axes=[2] keep_dims} : f32 [2, 4, 1]\n"
          "%3 = constant : f32 []\n"
          "%4 = add(%2, %3) : f32 [2, 4, 1]\n"
          "outputs: %4\n");
}

TEST_CASE("graph: building checks operands and names") {
    anvil::graph g;
    auto x = g.input("x", dtype::f32, dims{2, 3});
    CHECK_THROWS_WITH_AS(g.input("x", dtype::f32, dims{1}), doctest::Contains("already an input named 'x'"),
                         anvil::error);
    anvil::graph other;
    auto y = other.input("y", dtype::f32, dims{2, 3});
    CHECK_THROWS_WITH_AS(g.apply(op::add, {x, y}), doctest::Contains("belongs to another graph"),
                         anvil::error);
    CHECK_THROWS_WITH_AS(g.apply(op::add, {x, g.input("z", dtype::f32, dims{4})}),
                         doctest::Contains("add: shapes [2, 3] and [4] do not broadcast"),
                         anvil::shape_error);
    CHECK_THROWS_WITH_AS(g.apply(op::relu, {x, x}), doctest::Contains("relu: takes 1 operands, got 2"),
                         anvil::error);
    anvil::attributes bad_reshape;
    bad_reshape.sizes = {4, -1};
    CHECK_THROWS_WITH_AS(g.apply(op::reshape, {x}, bad_reshape),
                         doctest::Contains("reshape: cannot reshape [2, 3] (6 elements) with -1 in [4, -1]"),
                         anvil::shape_error);
    anvil::attributes bad_matmul;
    CHECK_THROWS_WITH_AS(g.apply(op::matmul, {x, x}, bad_matmul),
                         doctest::Contains("matmul: inner extents differ: [2, 3] and [2, 3] (3 vs 2)"),
                         anvil::shape_error);
    CHECK_THROWS_WITH_AS(g.apply(op::exp, {g.input("ids", dtype::i64, dims{3})}),
                         doctest::Contains("exp: the operand must be floating point, got i64"),
                         anvil::type_error);
}

TEST_CASE("graph: dequantize_ggml turns rows of ggml blocks into f32 rows, and refuses what does not fit") {
    anvil::graph g;
    anvil::attributes q8;
    q8.ggml_type = static_cast<std::uint32_t>(anvil::ggml_type::Q8_0);
    const anvil::value blocks =
        g.constant(anvil::host_tensor(dtype::u8, dims{5, 68}));  // two Q8_0 blocks a row
    const anvil::value values = g.apply(op::dequantize_ggml, {blocks}, q8);
    CHECK(values.type() == dtype::f32);
    CHECK(values.shape() == dims{5, 64});
    CHECK_THROWS_WITH_AS(
        g.apply(op::dequantize_ggml, {g.constant(anvil::host_tensor(dtype::u8, dims{5, 60}))}, q8),
        doctest::Contains("are not rows of whole Q8_0 blocks (34 bytes each)"), anvil::shape_error);
    CHECK_THROWS_WITH_AS(
        g.apply(op::dequantize_ggml, {g.constant(anvil::host_tensor(dtype::i8, dims{5, 68}))}, q8),
        doctest::Contains("the blocks must be u8, got i8"), anvil::type_error);
    anvil::attributes q8_1;
    q8_1.ggml_type = static_cast<std::uint32_t>(anvil::ggml_type::Q8_1);
    CHECK_THROWS_WITH_AS(g.apply(op::dequantize_ggml, {blocks}, q8_1),
                         doctest::Contains("ggml type 9 (Q8_1) has no dequantiser"),
                         anvil::unsupported_error);
    anvil::attributes unknown;
    unknown.ggml_type = 77;
    CHECK_THROWS_WITH_AS(g.apply(op::dequantize_ggml, {blocks}, unknown),
                         doctest::Contains("ggml type 77 has no dequantiser"), anvil::unsupported_error);
}

TEST_CASE("passes: dead-code elimination keeps what the outputs need, and every input") {
    anvil::graph g;
    auto x = g.input("x", dtype::f32, dims{4});
    auto unused_input = g.input("unused", dtype::f32, dims{4});
    auto dead = g.apply(op::exp, {x});
    auto y = g.apply(op::relu, {x});
    static_cast<void>(dead);
    static_cast<void>(unused_input);
    anvil::graph_body body = *g.body();
    body.outputs = {y.id()};
    const auto result = anvil::eliminate_dead_code(body);
    CHECK(result.nodes.size() == 3);
    CHECK(count_kind(result, op::exp) == 0);
    CHECK(count_kind(result, op::input) == 2);
    REQUIRE(result.outputs.size() == 1);
    CHECK(result.nodes[result.outputs[0]].kind == op::relu);
}

TEST_CASE("passes: constant folding replaces constant subgraphs but never expands weights") {
    anvil::graph g;
    auto x = g.input("x", dtype::f32, dims{4});
    auto a = g.constant(filled(dtype::f32, dims{4}, 2.0f));
    auto b = g.constant(filled(dtype::f32, dims{4}, 3.0f));
    auto folded = g.apply(op::mul, {a, b});
    auto y = g.apply(op::add, {x, folded});
    // A large f16 weight cast to f32 would double in size: it must stay a cast.
    auto weight = g.constant(filled(dtype::f16, dims{64, 64}, 1.0f));
    anvil::attributes to_f32;
    to_f32.to = dtype::f32;
    auto cast = g.apply(op::cast, {weight}, to_f32);
    anvil::graph_body body = *g.body();
    body.outputs = {y.id(), cast.id()};
    int evaluated = 0;
    const auto result =
        anvil::fold_constants(body, [&](const anvil::node& n, std::span<const anvil::host_tensor> in) {
            ++evaluated;
            CHECK(n.kind == op::mul);
            REQUIRE(in.size() == 2);
            std::vector<float> product(4);
            for (std::size_t i = 0; i < 4; ++i)
                product[i] = in[0].to_f32()[i] * in[1].to_f32()[i];
            return anvil::host_tensor::from(product, dims{4});
        });
    CHECK(evaluated == 1);
    CHECK(count_kind(result, op::mul) == 0);
    CHECK(count_kind(result, op::cast) == 1);
    const auto& add = result.nodes[result.outputs[0]];
    REQUIRE(add.kind == op::add);
    const auto& constant = result.nodes[add.inputs[1]];
    REQUIRE(constant.kind == op::constant);
    CHECK(constant.data.to_f32() == std::vector<float>{6, 6, 6, 6});
}

TEST_CASE("passes: elementwise fusion merges single-reader chains of the same shape") {
    anvil::graph g;
    auto x = g.input("x", dtype::f32, dims{8, 16});
    auto bias = g.input("bias", dtype::f32, dims{16});
    auto scaled = g.apply(op::mul, {x, g.scalar(2.0)});
    auto shifted = g.apply(op::add, {scaled, bias});
    anvil::attributes limits;
    limits.min = -1.0f;
    limits.max = 1.0f;
    auto clamped = g.apply(op::clamp, {shifted}, limits);
    auto activated = g.apply(op::gelu, {clamped});
    // `shared` has two readers, so it stays a node of its own and both readers take it as an input.
    auto shared = g.apply(op::exp, {x});
    auto left = g.apply(op::sigmoid, {shared});
    auto right = g.apply(op::tanh, {shared});
    anvil::graph_body body = *g.body();
    body.outputs = {activated.id(), left.id(), right.id()};
    const auto result = anvil::fuse_elementwise(body);
    CHECK(count_kind(result, op::fused_elementwise) == 1);
    CHECK(count_kind(result, op::exp) == 1);
    CHECK(count_kind(result, op::sigmoid) == 1);
    CHECK(count_kind(result, op::tanh) == 1);
    const auto& fused = result.nodes[result.outputs[0]];
    REQUIRE(fused.kind == op::fused_elementwise);
    // Inputs x, the scalar 2 and bias; steps in order mul, add, clamp, gelu, each reading the one before.
    REQUIRE(fused.inputs.size() == 3);
    REQUIRE(fused.attrs.steps.size() == 4);
    CHECK(fused.attrs.steps[0].kind == op::mul);
    CHECK(fused.attrs.steps[1].kind == op::add);
    CHECK(fused.attrs.steps[1].operands[0] == 3);
    CHECK(fused.attrs.steps[2].kind == op::clamp);
    CHECK(fused.attrs.steps[2].alpha == -1.0f);
    CHECK(fused.attrs.steps[2].beta == 1.0f);
    CHECK(fused.attrs.steps[3].kind == op::gelu);
    CHECK(fused.attrs.steps[3].operands[0] == 5);
    CHECK(anvil::dump(result).find(
              "steps=[$3=mul($0, $1); $4=add($3, $2); $5=clamp($4)[-1, 1]; $6=gelu($5)]") !=
          std::string::npos);
}

TEST_CASE("passes: batch_norm after conv2d folds into the convolution") {
    anvil::graph g;
    auto x = g.input("x", dtype::f32, dims{1, 3, 5, 5});
    auto w = g.constant(filled(dtype::f32, dims{4, 3, 3, 3}, 0.5f), "conv.weight");
    auto conv = g.apply(op::conv2d, {x, w});
    auto mean = g.constant(filled(dtype::f32, dims{4}, 0.25f));
    auto var = g.constant(filled(dtype::f32, dims{4}, 4.0f));
    auto gamma = g.constant(filled(dtype::f32, dims{4}, 3.0f));
    auto beta = g.constant(filled(dtype::f32, dims{4}, 1.0f));
    anvil::attributes eps;
    eps.epsilon = 0.0f;
    auto bn = g.apply(op::batch_norm, {conv, mean, var, gamma, beta}, eps);
    anvil::graph_body body = *g.body();
    body.outputs = {bn.id()};
    const auto result = anvil::fold_batch_norm(body);
    CHECK(count_kind(result, op::batch_norm) == 0);
    REQUIRE(count_kind(result, op::conv2d) == 1);
    const auto& folded = result.nodes[result.outputs[0]];
    REQUIRE(folded.kind == op::conv2d);
    REQUIRE(folded.inputs.size() == 3);
    // gamma / sqrt(var) = 1.5: weights 0.5 * 1.5; bias (0 - 0.25) * 1.5 + 1.
    CHECK(result.nodes[folded.inputs[1]].data.to_f32()[0] == doctest::Approx(0.75));
    CHECK(result.nodes[folded.inputs[2]].data.to_f32()[3] == doctest::Approx(0.625));
    CHECK(result.nodes[folded.inputs[1]].name == "conv.weight");
}

TEST_CASE("memory plan: values alive at once never share bytes, and a chain reuses two buffers") {
    using anvil::detail::cpu::buffer_request;
    std::mt19937 rng(7);
    for (int trial = 0; trial < 50; ++trial) {
        std::vector<buffer_request> requests;
        const int count = 1 + static_cast<int>(rng() % 40);
        for (int i = 0; i < count; ++i) {
            const std::size_t first = rng() % 30;
            requests.push_back({(rng() % 5000) + (rng() % 4 == 0 ? 0 : 1), first, first + rng() % 10});
        }
        const auto plan = anvil::detail::cpu::plan_memory(requests);
        CHECK(anvil::detail::cpu::plan_is_valid(requests, plan));
    }
    // A chain: value i is written at step i and read at step i + 1.
    std::vector<buffer_request> chain;
    for (std::size_t i = 0; i < 20; ++i)
        chain.push_back({1024, i, i + 1});
    const auto plan = anvil::detail::cpu::plan_memory(chain);
    CHECK(anvil::detail::cpu::plan_is_valid(chain, plan));
    CHECK(plan.arena_bytes == 2 * 1024);
}

namespace {

// Seeded weights, roughly normal (the sum of four uniforms), as a constant of `type`.
anvil::host_tensor random_weights(dims shape, unsigned seed, dtype type = dtype::f32) {
    std::mt19937 generator(seed);
    std::uniform_real_distribution<float> uniform(-0.5f, 0.5f);
    std::vector<float> values(static_cast<std::size_t>(shape.element_count()));
    for (float& v : values)
        v = (uniform(generator) + uniform(generator) + uniform(generator) + uniform(generator)) * 0.1f;
    anvil::host_tensor t = anvil::host_tensor::from(values, shape);
    if (type == dtype::f32) return t;
    anvil::host_tensor out(type, shape);
    anvil::convert_f32_to_f16(values.data(), values.size(), out.values<anvil::half>().data());
    return out;
}

const anvil::node* dequantisation_of(const anvil::graph_body& body, const std::string& name) {
    for (const auto& n : body.nodes)
        if ((n.kind == op::dequantize_int8 || n.kind == op::dequantize_lut) && n.name == name) return &n;
    return nullptr;
}

}  // namespace

TEST_CASE("weight compression: int8 holds each weight within half a step of its channel's scale") {
    anvil::graph g;
    auto x = g.input("x", dtype::f32, dims{3, 40});
    auto ids = g.input("ids", dtype::i32, dims{3});
    const anvil::host_tensor w = random_weights(dims{24, 40}, 1);
    auto linear = g.apply(op::linear, {x, g.constant(w, "proj.weight")});
    // A tied embedding (read by a gather too) and a weight under min_compressed_elements stay as they are.
    auto table = g.constant(random_weights(dims{50, 40}, 2), "embed.weight");
    auto gathered = g.apply(op::gather, {table, ids});
    auto tied = g.apply(op::linear, {x, table});
    auto small = g.apply(op::linear, {x, g.constant(random_weights(dims{6, 40}, 3), "small.weight")});
    const anvil::value outputs[] = {linear, gathered, tied, small};
    const anvil::graph_body body = anvil::body_of(outputs, "test");
    const anvil::graph_body compressed = anvil::compress_weights(body, anvil::weight_compression::int8);
    CHECK(count_kind(compressed, op::dequantize_int8) == 1);
    const anvil::node* dq = dequantisation_of(compressed, "proj.weight");
    REQUIRE(dq != nullptr);
    const anvil::node& q = compressed.nodes[dq->inputs[0]];
    const anvil::node& scale = compressed.nodes[dq->inputs[1]];
    REQUIRE(q.data.type() == dtype::i8);
    CHECK(q.data.shape() == dims{24, 40});
    CHECK(scale.data.shape() == dims{24});
    const auto original = w.values<float>();
    const auto levels = q.data.values<std::int8_t>();
    const auto scales = scale.data.values<float>();
    for (std::size_t c = 0; c < 24; ++c) {
        float largest = 0.0f;
        for (std::size_t i = 0; i < 40; ++i)
            largest = std::max(largest, std::fabs(original[c * 40 + i]));
        CHECK(scales[c] == doctest::Approx(largest / 127.0f));
        for (std::size_t i = 0; i < 40; ++i)
            CHECK(std::fabs(levels[c * 40 + i] * scales[c] - original[c * 40 + i]) <= scales[c] * 0.5001f);
    }
    for (const auto& n : compressed.nodes)
        if (n.name == "embed.weight" || n.name == "small.weight") CHECK(n.kind == op::constant);

    // The CPU computes with the dequantised weights: x . (q * scale)^T.
    anvil::compile_options options;
    options.weight_compression = anvil::weight_compression::int8;
    anvil::program program = anvil::compile({linear}, options);
    const anvil::host_tensor input = random_weights(dims{3, 40}, 4);
    const std::vector<std::int32_t> some_ids = {0, 7, 49};
    const auto got =
        program.run({{"x", input}, {"ids", anvil::host_tensor::from(some_ids, dims{3})}}).at(0).to_f32();
    const auto xs = input.values<float>();
    for (std::size_t r = 0; r < 3; ++r)
        for (std::size_t c = 0; c < 24; ++c) {
            double want = 0.0;
            for (std::size_t i = 0; i < 40; ++i)
                want += static_cast<double>(xs[r * 40 + i]) * levels[c * 40 + i] * scales[c];
            CHECK(got[r * 24 + c] == doctest::Approx(want).epsilon(1e-4));
        }
}

TEST_CASE("weight compression: palettes are k-means of the weights, per tensor or per group of channels") {
    anvil::graph g;
    auto x = g.input("x", dtype::f32, dims{2, 32});
    // f16 weights read through a cast to f32, as the checkpoint loader gives them: the cast goes.
    const anvil::host_tensor w = random_weights(dims{64, 32}, 5, dtype::f16);
    anvil::attributes to_f32;
    to_f32.to = dtype::f32;
    auto weight = g.apply(op::cast, {g.constant(w, "mlp.weight")}, to_f32);
    auto y = g.apply(op::linear, {x, weight});
    const anvil::graph_body body = anvil::body_of(std::span<const anvil::value>(&y, 1), "test");
    const std::vector<float> original = w.to_f32();

    for (const auto how : {anvil::weight_compression::lut4, anvil::weight_compression::lut6,
                           anvil::weight_compression::lut4g32}) {
        CAPTURE(anvil::weight_compression_name(how));
        const anvil::graph_body compressed = anvil::compress_weights(body, how);
        CHECK(count_kind(compressed, op::cast) == 0);
        const anvil::node* dq = dequantisation_of(compressed, "mlp.weight");
        REQUIRE(dq != nullptr);
        CHECK(dq->result.type == dtype::f32);
        const auto indices = compressed.nodes[dq->inputs[0]].data.values<std::uint8_t>();
        const anvil::host_tensor& lut = compressed.nodes[dq->inputs[1]].data;
        const std::size_t length = how == anvil::weight_compression::lut6 ? 64 : 16;
        const std::size_t groups =
            how == anvil::weight_compression::lut4g32 ? 2 : 1;  // 64 rows, 32 per group
        CHECK(lut.shape() == (groups == 1 ? dims{static_cast<std::int64_t>(length)}
                                          : dims{2, static_cast<std::int64_t>(length)}));
        const auto tables = lut.values<float>();
        const std::size_t per_group = original.size() / groups;
        double error = 0.0, uniform_error = 0.0;
        for (std::size_t group = 0; group < groups; ++group) {
            const auto table = tables.subspan(group * length, length);
            CHECK(std::is_sorted(table.begin(), table.end()));
            // Lloyd's fixed point: each weight takes its nearest entry, each used entry is its weights' mean.
            std::vector<double> sum(length, 0.0);
            std::vector<int> count(length, 0);
            const auto first = original.begin() + static_cast<std::ptrdiff_t>(group * per_group);
            const float lo = *std::min_element(first, first + static_cast<std::ptrdiff_t>(per_group));
            const float hi = *std::max_element(first, first + static_cast<std::ptrdiff_t>(per_group));
            for (std::size_t i = group * per_group; i < (group + 1) * per_group; ++i) {
                const std::size_t index = indices[i];
                REQUIRE(index < length);
                for (std::size_t e = 0; e < length; ++e)
                    CHECK(std::fabs(original[i] - table[index]) <= std::fabs(original[i] - table[e]) + 1e-7f);
                sum[index] += original[i];
                ++count[index];
                error += std::pow(original[i] - table[index], 2.0);
                // The baseline: the nearest of `length` evenly spaced levels over [lo, hi].
                const float step = (hi - lo) / static_cast<float>(length - 1);
                const float level = lo + step * std::round((original[i] - lo) / step);
                uniform_error += std::pow(original[i] - level, 2.0);
            }
            for (std::size_t e = 0; e < length; ++e)
                if (count[e] > 0) CHECK(table[e] == doctest::Approx(sum[e] / count[e]).epsilon(1e-5));
        }
        MESSAGE(anvil::weight_compression_name(how), ": squared error ", error, ", uniform levels ",
                uniform_error);
        CHECK(error < uniform_error);
        // Deterministic: the same weights give the same bytes.
        const anvil::graph_body again = anvil::compress_weights(body, how);
        const anvil::node* dq2 = dequantisation_of(again, "mlp.weight");
        REQUIRE(dq2 != nullptr);
        const auto& lut2 = again.nodes[dq2->inputs[1]].data;
        CHECK(std::equal(tables.begin(), tables.end(), lut2.values<float>().begin()));

        // The CPU runs the palettised weights: x . lut[g, index]^T.
        anvil::compile_options options;
        options.weight_compression = how;
        anvil::program program = anvil::compile({y}, options);
        const anvil::host_tensor input = random_weights(dims{2, 32}, 6);
        const auto got = program.run({{"x", input}}).at(0).to_f32();
        const auto xs = input.values<float>();
        for (std::size_t r = 0; r < 2; ++r)
            for (std::size_t c = 0; c < 64; ++c) {
                double want = 0.0;
                const std::size_t group = c * groups / 64;
                for (std::size_t i = 0; i < 32; ++i)
                    want +=
                        static_cast<double>(xs[r * 32 + i]) * tables[group * length + indices[c * 32 + i]];
                CHECK(got[r * 64 + c] == doctest::Approx(want).epsilon(1e-4));
            }
    }
    CHECK(anvil::parse_weight_compression("lut4g32") == anvil::weight_compression::lut4g32);
    CHECK_FALSE(anvil::parse_weight_compression("lut5").has_value());
}

}  // namespace test_graph
