// Tests of the ANE lowering: weight blobs, MIL text in both dialects, supports() decisions, symbol order.
//
// Where the expected values come from:
// - Blob bytes: the offsets 64 -> 655488 -> 656832 of a real coremlc file (MIL.md §1.5) and the single-tensor
//   layout MDX/ORI/OMLX write (RUNTIME.md §5), typed in here from those documents.
// - fp16 literals: spellings in real coremlc files (MIL.md §1.4/§1.9: 0x1.5p-17 for 1e-5, 0x1p-1,
// -0x1.388p+13,
//   0x0p+0).
// - Golden MIL files (tests/data/ane/golden/*.mil): written by the lowering once, then checked by hand line
// by
//   line against MIL.md's real coremlc examples (§1.2 header/footer, §1.9 Example 2 conv with its five named
//   parameter consts, Example 3 layer_norm/matmul/softmax argument names and const style) and RUNTIME.md §4
//   Examples 1/2 (program(1.3) short scalars `int32(1)`, `string("valid")`, `bool(false)`; program(1.0)
//   verbose `tensor<int32, []>(1)`, BLOBFILE with `tensor<uint64, []>(64)`), against mil_ops.json for input
//   names and defaults (conv: dilations, groups, pad, pad_type, strides, weight, x; matmul transpose_x/y;
//   concat interleave; layer_norm axes/epsilon/gamma/beta), and against CONSTRAINTS.md (no conv bias: a
//   separate add of a [1, C, 1, 1] const; rank-4 fp16 [1, C, 1, W] function inputs and outputs; a finite
//   full-shape causal mask). The attention golden's mask blob is also decoded and compared with the causal
//   rule of the CPU reference (key j visible iff j <= i + Sk - Sq) below. A golden diff means the text
//   changed: re-check it by the same list before replacing the file.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>
#include <anvil/backend/ane/ane_program.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

namespace test_ane_lowering {

using namespace anvil;
using namespace anvil::detail::ane;

std::uint64_t read_u64(const std::vector<std::byte>& bytes, std::size_t at) {
    std::uint64_t value = 0;
    for (std::size_t i = 0; i < 8; ++i)
        value |= static_cast<std::uint64_t>(bytes.at(at + i)) << (8 * i);
    return value;
}
std::uint32_t read_u32(const std::vector<std::byte>& bytes, std::size_t at) {
    return static_cast<std::uint32_t>(read_u64(bytes, at) & 0xFFFFFFFFu);
}
float read_half(const std::vector<std::byte>& bytes, std::size_t at) {
    const auto bits = static_cast<std::uint16_t>(static_cast<unsigned>(bytes.at(at)) |
                                                 (static_cast<unsigned>(bytes.at(at + 1)) << 8));
    return static_cast<float>(half::from_bits(bits));
}

host_tensor filled(dims shape, float start) {
    host_tensor t(dtype::f32, shape);
    auto v = t.values<float>();
    for (std::size_t i = 0; i < v.size(); ++i)
        v[i] = start + 0.25f * static_cast<float>(i % 7);
    return t;
}

struct segment_graph {
    graph g;
    std::vector<value_id> nodes, inputs, outputs;
    lowered_segment lower_with(const lowering_options& options) const {
        return lower(*g.body(), nodes, inputs, outputs, options);
    }
};

// The golden graphs (the same four the golden files were written from).
segment_graph golden_graph(const std::string& which) {
    segment_graph s;
    graph& g = s.g;
    if (which == "linear") {
        auto x = g.input("x", dtype::f16, dims{32, 16});
        auto w = g.constant(filled(dims{8, 16}, 0.5f), "w");
        auto b = g.constant(filled(dims{8}, 1.0f), "b");
        auto y = g.apply(op::linear, {x, w, b});
        s.inputs = {x.id()};
        s.nodes = {y.id()};
        s.outputs = {y.id()};
    } else if (which == "attention") {
        auto q = g.input("q", dtype::f16, dims{1, 2, 4, 8});
        auto k = g.input("k", dtype::f16, dims{1, 1, 4, 8});
        auto v = g.input("v", dtype::f16, dims{1, 1, 4, 8});
        attributes a;
        a.causal = true;
        auto y = g.apply(op::attention, {q, k, v}, a);
        s.inputs = {q.id(), k.id(), v.id()};
        s.nodes = {y.id()};
        s.outputs = {y.id()};
    } else if (which == "conv_block") {
        auto x = g.input("x", dtype::f16, dims{1, 4, 8, 8});
        auto w = g.constant(filled(dims{8, 4, 3, 3}, -0.5f), "w");
        auto b = g.constant(filled(dims{8}, 0.1f), "b");
        attributes a;
        a.padding = {1, 1, 1, 1};
        auto c = g.apply(op::conv2d, {x, w, b}, a);
        auto r = g.apply(op::relu, {c});
        s.inputs = {x.id()};
        s.nodes = {c.id(), r.id()};
        s.outputs = {r.id()};
    } else {
        auto x = g.input("x", dtype::f16, dims{32, 16});
        auto w = g.constant(filled(dims{16}, 1.0f), "gamma");
        auto b = g.constant(filled(dims{16}, 0.0f), "beta");
        attributes a;
        a.epsilon = 1e-5f;
        auto y = g.apply(op::layer_norm, {x, w, b}, a);
        s.inputs = {x.id()};
        s.nodes = {y.id()};
        s.outputs = {y.id()};
    }
    return s;
}

std::string read_text(const std::string& path) {
    std::ifstream file(path, std::ios::binary);
    REQUIRE_MESSAGE(file.good(), "cannot open " << path);
    return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

TEST_CASE("ane lowering: the blob writer puts records at coremlc's real offsets") {
    weight_blob_writer writer;
    const std::vector<std::byte> big(640 * 512 * 2, std::byte{0x11});
    const std::vector<std::byte> small(640 * 2, std::byte{0x22});
    CHECK(writer.append(blob_dtype::float16, big) == 64);
    CHECK(writer.append(blob_dtype::float16, small) == 655488);
    CHECK(writer.append(blob_dtype::float16, small) == 656832);
    const std::vector<std::byte>& bytes = writer.bytes();
    CHECK(read_u32(bytes, 0) == 3);  // count
    CHECK(read_u32(bytes, 4) == 2);  // version
    for (std::size_t at = 8; at < 64; ++at)
        CHECK(bytes[at] == std::byte{0});
    for (const std::uint64_t metadata : {64ull, 655488ull, 656832ull}) {
        CHECK(read_u32(bytes, metadata) == 0xDEADBEEFu);
        CHECK(read_u32(bytes, metadata + 4) == 1);  // Float16
        CHECK(read_u64(bytes, metadata + 16) == metadata + 64);
        CHECK(read_u64(bytes, metadata + 24) == 0);
    }
    CHECK(read_u64(bytes, 64 + 8) == 655360);
    CHECK(read_u64(bytes, 655488 + 8) == 1280);
    CHECK(bytes[128] == std::byte{0x11});
    CHECK(bytes[655488 + 64] == std::byte{0x22});
    CHECK(bytes.size() == 656832 + 64 + 1280);
}

TEST_CASE("ane lowering: a single blob has RUNTIME.md's byte layout") {
    weight_blob_writer writer;
    std::vector<std::byte> payload(64 * 64 * 2);
    for (std::size_t i = 0; i < payload.size(); ++i)
        payload[i] = static_cast<std::byte>(i * 7 % 251);
    writer.append(blob_dtype::float16, payload);
    const std::vector<std::byte>& b = writer.bytes();
    REQUIRE(b.size() == 128 + payload.size());
    CHECK(b[0] == std::byte{1});
    CHECK(b[4] == std::byte{2});
    CHECK(b[64] == std::byte{0xEF});
    CHECK(b[65] == std::byte{0xBE});
    CHECK(b[66] == std::byte{0xAD});
    CHECK(b[67] == std::byte{0xDE});
    CHECK(b[68] == std::byte{1});
    CHECK(read_u32(b, 72) == 8192);
    CHECK(read_u32(b, 80) == 128);
    CHECK(std::equal(payload.begin(), payload.end(), b.begin() + 128));
}

TEST_CASE("ane lowering: fp16 literals are coremlc's hex floats") {
    CHECK(fp16_literal(half(1e-5f)) == "0x1.5p-17");
    CHECK(fp16_literal(half(0.5f)) == "0x1p-1");
    CHECK(fp16_literal(half(-10000.0f)) == "-0x1.388p+13");
    CHECK(fp16_literal(half(0.0f)) == "0x0p+0");
    CHECK_THROWS_AS((void)fp16_literal(half(1e6f)), unsupported_error);  // infinity is never written
}

TEST_CASE("ane lowering: golden MIL in both dialects") {
    for (const std::string which : {"linear", "conv_block", "attention", "layer_norm"}) {
        for (const mil_dialect dialect : {mil_dialect::ios18, mil_dialect::ios16}) {
            lowering_options options;
            options.dialect = dialect;
            const std::string file = std::string(ANVIL_TEST_DATA_DIR) + "/ane/golden/" + which +
                                     (dialect == mil_dialect::ios18 ? "_ios18.mil" : "_ios16.mil");
            CAPTURE(file);
            const std::string mil = golden_graph(which).lower_with(options).mil;
            // ANVIL_TEST_REWRITE_GOLDEN=1 writes the files afresh; re-check the diff by the list above.
            if (const char* rewrite = std::getenv("ANVIL_TEST_REWRITE_GOLDEN"); rewrite && *rewrite == '1')
                std::ofstream(file, std::ios::binary) << mil;
            CHECK(mil == read_text(file));
        }
    }
}

TEST_CASE("ane lowering: the text carries a digest of its weights, so other weights make another text") {
    // RUNTIME.md §0b #21: a program's compiled identity is reported to come from its text alone.
    const lowered_segment s = golden_graph("linear").lower_with({});
    REQUIRE(s.weights.size() == 1);
    anvil::detail::sha256 digest;
    digest.update(s.weights[0].path).update(":" + std::to_string(s.weights[0].bytes.size()) + ":");
    digest.update(std::span<const std::byte>(s.weights[0].bytes));
    CHECK(s.mil.find("{\"anvil-weights-sha256\", \"" + digest.finish_hex() + "\"}") != std::string::npos);
    // Another weight value: the same program but for its digest.
    const segment_graph golden = golden_graph("linear");
    anvil::graph_body body = *golden.g.body();
    for (auto& n : body.nodes) {
        if (n.kind != op::constant || n.data.element_count() != 8 * 16) continue;
        std::vector<float> values(n.data.values<float>().begin(), n.data.values<float>().end());
        values[0] += 1.0f;
        n.data = host_tensor::from(std::span<const float>(values), n.data.shape());
    }
    const lowered_segment t = lower(body, golden.nodes, golden.inputs, golden.outputs, {});
    CHECK(t.mil != s.mil);
    CHECK(t.mil.substr(t.mil.find("]\n{")) == s.mil.substr(s.mil.find("]\n{")));
}

TEST_CASE("ane lowering: a linear becomes a 1x1 conv with the bias as a separate add") {
    const lowered_segment s = golden_graph("linear").lower_with({});
    CHECK(s.mil.find("conv(") != std::string::npos);
    CHECK(s.mil.find("(bias = ") == std::string::npos);
    CHECK(s.mil.find("tensor<fp16, [1, 8, 1, 1]> linear_3_bias") != std::string::npos);
    // Channels-first at both edges: no transpose inside, the host packs columns.
    CHECK(s.mil.find("transpose(") == std::string::npos);
    REQUIRE(s.inputs.size() == 1);
    CHECK(s.inputs[0].order == surface_order::columns);
    CHECK(s.inputs[0].channels == 16);
    CHECK(s.inputs[0].width == 32);
    CHECK(s.inputs[0].surface_width == 32);
    CHECK(s.inputs[0].channel_stride == 64);
    REQUIRE(s.outputs.size() == 1);
    CHECK(s.outputs[0].order == surface_order::columns);
    CHECK(s.outputs[0].channels == 8);
    // One weight file: the [8, 16] weight (256 bytes) after the header and its record; the bias is inline.
    REQUIRE(s.weights.size() == 1);
    CHECK(s.weights[0].path == "@model_path/weights/weight.bin");
    CHECK(s.weights[0].bytes.size() == 64 + 64 + 256);
    // Row-major [N, K]: element (o, i) at o * K + i (RUNTIME.md §5); w[1][2] = 0.5 + 0.25 * (18 % 7).
    CHECK(read_half(s.weights[0].bytes, 128 + 2 * (16 + 2)) == 0.5f + 0.25f * 4);
}

TEST_CASE("ane lowering: a chain of linears and elementwise ops stays channels-first") {
    graph g;
    auto x = g.input("x", dtype::f32, dims{2, 8, 16});
    auto h = g.apply(op::linear, {x, g.constant(filled(dims{24, 16}, 0.0f), "up")});
    auto a = g.apply(op::silu, {h});
    auto m = g.apply(op::mul, {a, g.scalar(2.0)});
    auto y = g.apply(op::linear, {m, g.constant(filled(dims{16, 24}, 0.0f), "down")});
    auto r = g.apply(op::add, {y, x});
    const std::vector<value_id> nodes{h.id(), a.id(), m.id(), y.id(), r.id()};
    const lowered_segment s =
        lower(*g.body(), nodes, std::vector<value_id>{x.id()}, std::vector<value_id>{r.id()}, {});
    CHECK(s.mil.find("transpose(") == std::string::npos);
    CHECK(s.mil.find("reshape(") == std::string::npos);
    CHECK(s.mil.find("sigmoid(") != std::string::npos);
    CHECK(s.mil.find("silu(") == std::string::npos);
    CHECK(s.inputs[0].order == surface_order::columns);
    CHECK(s.inputs[0].channels == 16);
    CHECK(s.inputs[0].width == 16);
    CHECK(s.outputs[0].order == surface_order::columns);
}

TEST_CASE("ane lowering: the attention mask is finite, full-shape and causal from the end") {
    segment_graph sg;
    graph& g = sg.g;
    auto q = g.input("q", dtype::f16, dims{1, 1, 2, 4});
    auto k = g.input("k", dtype::f16, dims{1, 1, 5, 4});
    auto v = g.input("v", dtype::f16, dims{1, 1, 5, 4});
    attributes a;
    a.causal = true;
    auto y = g.apply(op::attention, {q, k, v}, a);
    const lowered_segment s =
        lower(*g.body(), std::vector<value_id>{y.id()}, std::vector<value_id>{q.id(), k.id(), v.id()},
              std::vector<value_id>{y.id()}, {});
    CHECK(s.mil.find("scaled_dot_product_attention") == std::string::npos);
    CHECK(s.mil.find("tensor<fp16, [1, 1, 2, 5]> attention_3_mask") != std::string::npos);
    REQUIRE(s.weights.size() == 1);
    // Query i (of the last 2 positions) sees key j iff j <= i + 5 - 2.
    for (int i = 0; i < 2; ++i) {
        for (int j = 0; j < 5; ++j) {
            CAPTURE(i);
            CAPTURE(j);
            const float expected = j <= i + 3 ? 0.0f : -10000.0f;
            CHECK(read_half(s.weights[0].bytes, 128 + 2 * static_cast<std::size_t>(i * 5 + j)) ==
                  static_cast<float>(half(expected)));
        }
    }
}

TEST_CASE("ane lowering: products without matmul keep every intermediate under a few MB, in tiles") {
    // Whisper's encoder attention (1500 positions, a head of 64) on a chip without matmul (RUNTIME.md §0 #4):
    // untiled, q k^T's broadcast mul holds 1500 x 64 x 1500 fp16 terms, 288 MB per head (RUNTIME.md §0b).
    lowering_options options;
    options.choices.set(lowering_feature::matmul, lowering_variant::decomposed);
    const auto largest_value_bytes = [](const lowered_segment& s) {
        std::int64_t largest = 0;
        for (const auto& value : s.program.values) {
            std::int64_t elements = 1;
            for (const std::int64_t extent : value.shape)
                elements *= extent;
            largest = std::max(largest, 2 * elements);
        }
        return largest;
    };
    for (const bool plain_matmul : {false, true}) {
        CAPTURE(plain_matmul);
        graph g;
        auto q = g.input("q", dtype::f16, dims{1, 6, 1500, 64});
        auto k = g.input("k", dtype::f16, dims{1, 6, 1500, 64});
        auto v = g.input("v", dtype::f16, dims{1, 6, 1500, 64});
        value y = g.apply(op::attention, {q, k, v});
        if (plain_matmul) {  // a matmul of two computed tensors, q k^T
            attributes t;
            t.transpose_b = true;
            y = g.apply(op::matmul, {q, k}, t);
        }
        const lowered_segment s =
            lower(*g.body(), std::vector<value_id>{y.id()}, std::vector<value_id>{q.id(), k.id(), v.id()},
                  std::vector<value_id>{y.id()}, options);
        CHECK(s.mil.find("matmul(") == std::string::npos);
        CHECK(s.mil.find("einsum(") == std::string::npos);
        MESSAGE("largest intermediate: ", largest_value_bytes(s), " bytes");
        // The attention's own [S, S] scores (1500 x 1500 x 6 heads, 27 MB) are the result's size class, not a
        // product's terms; every broadcast mul stays within 4 MiB.
        for (const auto& statement : s.program.statements) {
            if (statement.op != "mul" || statement.result == no_result) continue;
            std::int64_t elements = 1;
            for (const std::int64_t extent : s.program.values[statement.result].shape)
                elements *= extent;
            CHECK(2 * elements <= (std::int64_t{4} << 20));
        }
        CHECK(s.mil.find("concat(") != std::string::npos);
    }
}

TEST_CASE("ane lowering: rms_norm is the exact layer_norm of [x, -x]") {
    graph g;
    auto x = g.input("x", dtype::f16, dims{4, 16});
    attributes a;
    a.epsilon = 1e-6f;
    auto y = g.apply(op::rms_norm, {x, g.constant(filled(dims{16}, 1.0f), "w")}, a);
    const lowered_segment s = lower(*g.body(), std::vector<value_id>{y.id()}, std::vector<value_id>{x.id()},
                                    std::vector<value_id>{y.id()}, {});
    CHECK(s.mil.find("tensor<fp16, [1, 32, 1, 4]> rms_norm_2_both = concat(") != std::string::npos);
    CHECK(s.mil.find("layer_norm(") != std::string::npos);
    CHECK(s.mil.find("slice_by_index(") != std::string::npos);
    CHECK(s.mil.find("rsqrt") == std::string::npos);
}

TEST_CASE("ane lowering: a norm's epsilon below fp16's range does not round to zero") {
    graph g;
    auto x = g.input("x", dtype::f16, dims{4, 16});
    attributes a;
    a.epsilon = 1e-12f;  // BERT's, 0 in fp16
    auto y = g.apply(op::layer_norm, {x, g.constant(filled(dims{16}, 1.0f), "w")}, a);
    const lowered_segment s = lower(*g.body(), std::vector<value_id>{y.id()}, std::vector<value_id>{x.id()},
                                    std::vector<value_id>{y.id()}, {});
    const auto epsilon = s.mil.find("_epsilon = const()");
    REQUIRE(epsilon != std::string::npos);
    const std::string line = s.mil.substr(epsilon, s.mil.find('\n', epsilon) - epsilon);
    CAPTURE(line);
    CHECK(line.find("0x1p-24") != std::string::npos);
}

TEST_CASE("ane lowering: symbols sort in binding order") {
    graph g;
    std::vector<value> inputs;
    std::vector<value_id> ids;
    for (int i = 0; i < 12; ++i) {
        inputs.push_back(g.input("t" + std::to_string(11 - i) + "-x", dtype::f16, dims{2, 32}));
        ids.push_back(inputs.back().id());
    }
    value sum = inputs[0];
    std::vector<value_id> nodes;
    for (int i = 1; i < 12; ++i) {
        sum = g.apply(op::add, {sum, inputs[static_cast<std::size_t>(i)]});
        nodes.push_back(sum.id());
    }
    auto other = g.apply(op::relu, {sum});
    nodes.push_back(other.id());
    const lowered_segment s = lower(*g.body(), nodes, ids, std::vector<value_id>{other.id(), sum.id()}, {});
    REQUIRE(s.inputs.size() == 12);
    CHECK(s.inputs[0].symbol == "in000_t11_x");
    CHECK(s.inputs[10].symbol == "in010_t1_x");
    for (std::size_t i = 0; i < 12; ++i)
        CHECK(s.inputs[i].value == ids[i]);
    CHECK(
        std::is_sorted(s.inputs.begin(), s.inputs.end(),
                       [](const surface_layout& a, const surface_layout& b) { return a.symbol < b.symbol; }));
    REQUIRE(s.outputs.size() == 2);
    CHECK(s.outputs[0].symbol == "out000");
    CHECK(s.outputs[0].value == other.id());
    CHECK(s.outputs[1].symbol == "out001");
    CHECK(s.mil.find("} -> (out000, out001);") != std::string::npos);
    CHECK(s.mil.find("(tensor<fp16, [1, 2, 1, 32]> in000_t11_x, tensor<fp16, [1, 2, 1, 32]> in001_t10_x,") !=
          std::string::npos);
}

TEST_CASE("ane lowering: one file per weight puts every blob at offset 64") {
    lowering_options options;
    options.one_file_per_weight = true;
    graph g;
    auto x = g.input("x", dtype::f16, dims{4, 16});
    auto h = g.apply(op::linear, {x, g.constant(filled(dims{16, 16}, 0.0f), "a")});
    auto y = g.apply(op::linear, {h, g.constant(filled(dims{16, 16}, 1.0f), "b")});
    const lowered_segment s = lower(*g.body(), std::vector<value_id>{h.id(), y.id()},
                                    std::vector<value_id>{x.id()}, std::vector<value_id>{y.id()}, options);
    REQUIRE(s.weights.size() == 2);
    CHECK(s.weights[0].path != s.weights[1].path);
    for (const auto& file : s.weights) {
        CHECK(read_u32(file.bytes, 0) == 1);
        CHECK(s.mil.find("BLOBFILE(path = string(\"" + file.path + "\"), offset = uint64(64))") !=
              std::string::npos);
    }
}

TEST_CASE("ane lowering: host-only decisions name the reason") {
    lowering_options options;
    graph g;
    auto x = g.input("x", dtype::f32, dims{4, 16});
    auto ids = g.input("ids", dtype::i32, dims{4});
    auto table = g.constant(filled(dims{10, 16}, 0.0f), "embed");
    auto gathered = g.apply(op::gather, {table, ids});
    attributes axis;
    axis.axis = 1;
    auto best = g.apply(op::argmax, {x}, axis);
    auto integer = g.apply(op::add, {ids, ids});
    auto head = g.apply(op::linear, {x, g.constant(host_tensor(dtype::f16, dims{20000, 16}), "lm_head")});
    auto image = g.input("image", dtype::f32, dims{1, 2, 4, 4});
    auto dynamic_weight = g.input("w", dtype::f32, dims{2, 2, 1, 1});
    auto conv = g.apply(op::conv2d, {image, dynamic_weight});
    attributes resize;
    resize.sizes = {6, 6};
    auto odd = g.apply(op::upsample_nearest, {image}, resize);
    auto deep = g.input("deep", dtype::f32, dims{1, 1, 1, 1, 1, 2});
    auto deep_relu = g.apply(op::relu, {deep});
    auto q = g.input("q", dtype::f32, dims{1, 1, 4, 8});
    auto k = g.input("k", dtype::f32, dims{1, 1, 2, 8});
    attributes causal;
    causal.causal = true;
    auto attention = g.apply(op::attention, {q, k, k}, causal);
    auto wide = g.input("wide", dtype::f32, dims{2, 10000});
    attributes last;
    last.axis = -1;
    auto soft = g.apply(op::softmax, {wide}, last);

    const auto check_host = [&](const value& v, const char* needle) {
        const support_result r = supports(*g.body(), v.id(), options);
        CAPTURE(r.reason);
        CHECK(r.where == placement::host_only);
        CHECK(r.reason.find(needle) != std::string::npos);
    };
    check_host(gathered, "gather");
    check_host(best, "integer");
    check_host(integer, "fp16");
    check_host(head, "max_dimension 16384");
    check_host(head, "tiling");
    check_host(conv, "weight is not constant");
    check_host(odd, "integer scale");
    check_host(deep_relu, "rank 6");
    check_host(attention, "fully masked");
    const support_result decomposed = supports(*g.body(), soft.id(), options);
    CHECK(decomposed.where == placement::decomposed);
    CHECK(decomposed.reason.find("reduce_max") != std::string::npos);
    options.max_dimension = 65536;
    CHECK(supports(*g.body(), head.id(), options).where == placement::native);
    CHECK_THROWS_AS(
        (void)lower(*g.body(), std::vector<value_id>{gathered.id()}, std::vector<value_id>{ids.id()},
                    std::vector<value_id>{gathered.id()}, lowering_options{}),
        unsupported_error);
}

// One small graph per op: every op either lowers (and the MIL shows the expected spelling) or is host_only
// with a reason.
struct op_case {
    op kind;
    const char* expect;  // a MIL fragment of the lowering; nullptr for host_only ops
};

value build_op(graph& g, op kind, std::vector<value_id>& inputs) {
    const auto in = [&](const char* name, dims shape, dtype type = dtype::f32) {
        value v = g.input(name, type, shape);
        inputs.push_back(v.id());
        return v;
    };
    attributes a;
    switch (kind) {
        case op::logical_and:
        case op::logical_or:
        case op::logical_xor:
            return g.apply(kind,
                           {in("a", dims{2, 32}, dtype::boolean), in("b", dims{2, 32}, dtype::boolean)});
        case op::logical_not:
            return g.apply(kind, {in("x", dims{2, 32}, dtype::boolean)});
        case op::input:
            return in("x", dims{2, 32});
        case op::constant:
            return g.constant(filled(dims{2, 32}, 0.0f));
        case op::clamp:
            a.min = -1.0f;
            a.max = 2.0f;
            return g.apply(kind, {in("x", dims{2, 32})}, a);
        case op::cast:
            a.to = dtype::f16;
            return g.apply(kind, {in("x", dims{2, 32})}, a);
        case op::where:
            return g.apply(kind, {in("c", dims{2, 32}), in("a", dims{2, 32}), in("b", dims{2, 32})});
        case op::fused_elementwise:
            a.to = dtype::f32;
            a.steps = {fused_step{op::mul, {0, 1, 0}}, fused_step{op::gelu, {2, 0, 0}}};
            return g.apply(kind, {in("a", dims{2, 32}), in("b", dims{2, 32})}, a);
        case op::matmul:
            a.transpose_b = true;
            return g.apply(kind, {in("a", dims{2, 4, 8}), in("b", dims{2, 6, 8})}, a);
        case op::linear:
            return g.apply(kind, {in("x", dims{2, 32}), g.constant(filled(dims{8, 32}, 0.0f))});
        case op::conv2d:
            a.stride = {2, 2};
            return g.apply(kind, {in("x", dims{1, 2, 8, 8}), g.constant(filled(dims{4, 2, 3, 3}, 0.0f))}, a);
        case op::max_pool2d:
        case op::avg_pool2d:
            a.kernel = {2, 2};
            a.stride = {2, 2};
            return g.apply(kind, {in("x", dims{1, 2, 8, 8})}, a);
        case op::upsample_nearest:
        case op::upsample_bilinear:
            a.sizes = {16, 16};
            return g.apply(kind, {in("x", dims{1, 2, 8, 8})}, a);
        case op::layer_norm:
        case op::rms_norm:
            a.epsilon = 1e-5f;
            return g.apply(kind, {in("x", dims{2, 32})}, a);
        case op::group_norm:
            a.groups = 2;
            a.epsilon = 1e-5f;
            return g.apply(kind,
                           {in("x", dims{1, 4, 8, 8}), g.constant(filled(dims{4}, 1.0f)),
                            g.constant(filled(dims{4}, 0.0f))},
                           a);
        case op::batch_norm:
            a.epsilon = 1e-5f;
            return g.apply(kind,
                           {in("x", dims{1, 4, 8, 8}), g.constant(filled(dims{4}, 0.0f)),
                            g.constant(filled(dims{4}, 1.0f))},
                           a);
        case op::softmax:
            a.axis = -1;
            return g.apply(kind, {in("x", dims{2, 32}), g.constant(filled(dims{32}, -1.0f))}, a);
        case op::reduce_sum:
        case op::reduce_mean:
        case op::reduce_max:
        case op::reduce_min:
        case op::reduce_prod:
            a.axes = {1};
            return g.apply(kind, {in("x", dims{2, 32})}, a);
        case op::cumsum:
            a.axis = 1;
            a.exclusive = true;
            return g.apply(kind, {in("x", dims{2, 32})}, a);
        case op::argmax:
            a.axis = 1;
            return g.apply(kind, {in("x", dims{2, 32})}, a);
        case op::reshape:
            a.sizes = {4, 16};
            return g.apply(kind, {in("x", dims{2, 32})}, a);
        case op::permute:
            a.axes = {1, 0};
            return g.apply(kind, {in("x", dims{2, 32})}, a);
        case op::concat:
            a.axis = 0;
            return g.apply(kind, {in("a", dims{2, 32}), in("b", dims{3, 32})}, a);
        case op::slice:
            a.begin = {0, 1};
            a.end = {2, 32};
            a.step = {1, 2};
            return g.apply(kind, {in("x", dims{2, 32})}, a);
        case op::pad:
            a.begin = {0, 1};
            a.end = {1, 0};
            a.value = 0.5f;
            return g.apply(kind, {in("x", dims{2, 32})}, a);
        case op::gather: {
            value ids = g.input("ids", dtype::i32, dims{3});
            inputs.push_back(ids.id());
            return g.apply(kind, {g.constant(filled(dims{10, 32}, 0.0f)), ids});
        }
        case op::gather_elements: {
            value ids = g.input("ids", dtype::i32, dims{2, 3});
            inputs.push_back(ids.id());
            a.axis = 1;
            return g.apply(kind, {in("x", dims{2, 32}), ids}, a);
        }
        case op::scatter_add: {
            value ids = g.input("ids", dtype::i32, dims{3});
            inputs.push_back(ids.id());
            a.sizes = {10, 32};
            return g.apply(kind, {in("x", dims{3, 32}), ids}, a);
        }
        case op::attention:
            a.causal = true;
            return g.apply(kind,
                           {in("q", dims{1, 4, 3, 8}), in("k", dims{1, 2, 5, 8}), in("v", dims{1, 2, 5, 8}),
                            g.constant(filled(dims{1, 1, 3, 5}, -1.0f))},
                           a);
        case op::rotary:
            return g.apply(kind, {in("x", dims{1, 2, 4, 8}), g.constant(filled(dims{4, 2}, 0.0f)),
                                  g.constant(filled(dims{4, 2}, 0.5f))});
        case op::dequantize_int8: {
            host_tensor q(dtype::i8, dims{8, 32});
            return g.apply(kind, {g.constant(q), g.constant(filled(dims{8}, 0.5f))}, a);
        }
        case op::dequantize_lut: {
            host_tensor indices(dtype::u8, dims{8, 32});
            return g.apply(kind, {g.constant(indices), g.constant(filled(dims{4}, 0.5f))});
        }
        case op::dequantize_ggml: {
            host_tensor blocks(dtype::u8, dims{8, 34});  // one Q8_0 block a row, all zeros
            a.ggml_type = static_cast<std::uint32_t>(anvil::ggml_type::Q8_0);
            return g.apply(kind, {g.constant(blocks)}, a);
        }
        default:
            return g.apply(kind,
                           info(kind).category == op_category::binary
                               ? std::initializer_list<value>{in("a", dims{2, 32}), in("b", dims{2, 32})}
                               : std::initializer_list<value>{in("x", dims{2, 32})});
    }
}

TEST_CASE("ane lowering: every op lowers or is host-only with a reason") {
    const std::vector<op_case> cases{
        {op::input, ""},
        {op::constant, ""},
        {op::relu, "relu("},
        {op::gelu, "erf("},
        {op::gelu_tanh, "tanh("},
        {op::quick_gelu, "sigmoid("},
        {op::silu, "sigmoid("},
        {op::sigmoid, "sigmoid("},
        {op::tanh, "tanh("},
        {op::exp, "exp("},
        {op::log, "log("},
        {op::sqrt, "sqrt("},
        {op::rsqrt, "pow("},
        {op::abs, "abs("},
        {op::neg, "mul("},
        {op::erf, "erf("},
        {op::floor, nullptr},
        {op::ceil, nullptr},
        {op::round, nullptr},
        {op::sign, "select("},
        {op::sin, nullptr},
        {op::cos, nullptr},
        {op::clamp, "clip("},
        {op::cast, ""},
        {op::add, "add("},
        {op::sub, "sub("},
        {op::mul, "mul("},
        {op::div, "real_div("},
        {op::pow, "pow("},
        {op::maximum, "maximum("},
        {op::minimum, "minimum("},
        {op::equal, "equal("},
        {op::less, "less("},
        {op::less_equal, "less_equal("},
        {op::greater, "greater("},
        {op::greater_equal, "greater_equal("},
        {op::logical_and, "mul("},
        {op::logical_or, "maximum("},
        {op::logical_xor, "not_equal("},
        {op::logical_not, "sub("},
        {op::where, "select("},
        {op::fused_elementwise, "erf("},
        {op::matmul, "matmul("},
        {op::linear, "conv("},
        {op::conv2d, "conv("},
        {op::max_pool2d, "max_pool("},
        {op::avg_pool2d, "avg_pool("},
        {op::upsample_nearest, "upsample_nearest_neighbor("},
        {op::upsample_bilinear, "upsample_bilinear("},
        {op::layer_norm, "layer_norm("},
        {op::rms_norm, "concat("},
        {op::group_norm, "layer_norm("},
        {op::batch_norm, "add("},
        {op::softmax, "softmax("},
        {op::reduce_sum, "reduce_sum("},
        {op::reduce_mean, "reduce_mean("},
        {op::reduce_max, "reduce_max("},
        {op::reduce_min, "reduce_min("},
        {op::reduce_prod, nullptr},
        {op::argmax, nullptr},
        {op::cumsum, nullptr},
        {op::reshape, ""},
        {op::permute, "transpose("},
        {op::concat, "concat("},
        {op::slice, "slice_by_index("},
        {op::pad, "pad("},
        {op::gather, nullptr},
        {op::gather_elements, nullptr},
        {op::scatter_add, nullptr},
        {op::attention, "softmax("},
        {op::rotary, "concat("},
        {op::dequantize_int8, ""},
        {op::dequantize_lut, ""},
        {op::dequantize_ggml, ""},
    };
    REQUIRE(cases.size() == op_count);
    for (std::size_t i = 0; i < op_count; ++i) {
        const op kind = static_cast<op>(i);
        CAPTURE(op_name(kind));
        REQUIRE(cases[i].kind == kind);
        CHECK(!lowering_summary(kind).empty());
        graph g;
        std::vector<value_id> inputs;
        const value result = build_op(g, kind, inputs);
        const support_result support = supports(*g.body(), result.id(), {});
        CAPTURE(support.reason);
        if (cases[i].expect == nullptr) {
            CHECK(support.where == placement::host_only);
            CHECK(default_placement(kind) == placement::host_only);
            CHECK(!support.reason.empty());
            continue;
        }
        CHECK(support.where != placement::host_only);
        CHECK((support.where == placement::native) == support.reason.empty());
        if (kind == op::input || kind == op::constant) continue;
        const lowered_segment s = lower(*g.body(), std::vector<value_id>{result.id()}, inputs,
                                        std::vector<value_id>{result.id()}, {});
        CHECK(s.mil.find(cases[i].expect) != std::string::npos);
        // Nothing the ANE rejects (RUNTIME.md §6, CONSTRAINTS.md).
        CHECK(s.mil.find("gelu(") == std::string::npos);
        CHECK(s.mil.find("rsqrt(") == std::string::npos);
        CHECK(s.mil.find("(bias = ") == std::string::npos);
        CHECK(s.mil.find("scaled_dot_product_attention") == std::string::npos);
        CHECK(s.mil.find("inf") == std::string::npos);
        REQUIRE(!s.outputs.empty());
        CHECK(s.mil.find("} -> (out000);") != std::string::npos);
    }
}

}  // namespace test_ane_lowering
