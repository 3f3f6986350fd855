// The ANE simulator's MIL part: parsing both dialects, validation against mil_ops.json and CONSTRAINTS.md,
// BLOBFILE records, and fp16 execution checked against naive loops.
#include <doctest/doctest.h>
#include <anvil/core/half.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "mil_harness.hpp"

namespace test_mil {

using namespace ane_sim_mil;

// A weight.bin as MIL.md §1.5 lays it out: 64-byte storage header {count, version 2}, then per blob a 64-byte
// record {0xDEADBEEF, dtype code, size, data offset} and the data, both 64-byte aligned. Blobs go at the
// given metadata offsets.
struct blob_spec {
    std::uint64_t offset;
    std::uint32_t code;
    std::vector<std::byte> bytes;
    std::uint64_t padding_bits = 0;  // sub-byte types: the last byte's unused bits
};

std::vector<std::byte> make_weight_file(const std::vector<blob_spec>& blobs) {
    std::vector<std::byte> file(64);
    put<std::uint32_t>(file, 0, static_cast<std::uint32_t>(blobs.size()));
    put<std::uint32_t>(file, 4, 2);
    for (const auto& b : blobs) {
        put<std::uint32_t>(file, b.offset, 0xDEADBEEF);
        put<std::uint32_t>(file, b.offset + 4, b.code);
        put<std::uint64_t>(file, b.offset + 8, b.bytes.size());
        put<std::uint64_t>(file, b.offset + 16, b.offset + 64);
        put<std::uint64_t>(file, b.offset + 24, b.padding_bits);
        file.resize(std::max(file.size(), static_cast<std::size_t>(b.offset + 64 + b.bytes.size())));
        std::memcpy(file.data() + b.offset + 64, b.bytes.data(), b.bytes.size());
        file.resize((file.size() + 63) / 64 * 64);
    }
    return file;
}

std::vector<std::byte> fp16_bytes(const std::vector<float>& values) {
    std::vector<std::byte> bytes(values.size() * 2);
    for (std::size_t i = 0; i < values.size(); ++i) {
        const std::uint16_t h = anvil::float_to_half_bits(values[i]);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
    return bytes;
}

// ---- MIL.md's examples
// ---------------------------------------------------------------------------------------

const char* const example_1 = R"(program(1.0)
[buildInfo = dict<tensor<string, []>, tensor<string, []>>({{"coremlc-component-MIL", "3405.2.1"}, {"coremlc-version", "3404.23.1"}, {"coremltools-component-torch", "2.7.1"}, {"coremltools-source-dialect", "TorchScript"}, {"coremltools-version", "8.3.0"}})]
{
    func main<ios16>(tensor<fp16, [1025]> logits) {
            tensor<int32, []> var_4_axis_0 = const()[name = tensor<string, []>("op_4_axis_0"), val = tensor<int32, []>(-1)];
            tensor<bool, []> var_4_keep_dims_0 = const()[name = tensor<string, []>("op_4_keep_dims_0"), val = tensor<bool, []>(true)];
            tensor<int32, [1]> index = reduce_argmax(axis = var_4_axis_0, keep_dims = var_4_keep_dims_0, x = logits)[name = tensor<string, []>("op_4_cast_fp16")];
            tensor<int32, [1]> reduce_max_0_axes_0 = const()[name = tensor<string, []>("reduce_max_0_axes_0"), val = tensor<int32, [1]>([-1])];
            tensor<bool, []> reduce_max_0_keep_dims_0 = const()[name = tensor<string, []>("reduce_max_0_keep_dims_0"), val = tensor<bool, []>(true)];
            tensor<fp16, [1]> score = reduce_max(axes = reduce_max_0_axes_0, keep_dims = reduce_max_0_keep_dims_0, x = logits)[name = tensor<string, []>("reduce_max_0_cast_fp16")];
        } -> (index, score);
}
)";

const char* const example_2 = R"(program(1.0)
{
    func main<ios17>(tensor<fp16, [1, 256, 9, 33]> input_11_cast_fp16) {
            tensor<string, []> input_13_pad_type_0 = const()[name = tensor<string, []>("input_13_pad_type_0"), val = tensor<string, []>("valid")];
            tensor<int32, [2]> input_13_strides_0 = const()[name = tensor<string, []>("input_13_strides_0"), val = tensor<int32, [2]>([1, 1])];
            tensor<int32, [4]> input_13_pad_0 = const()[name = tensor<string, []>("input_13_pad_0"), val = tensor<int32, [4]>([0, 0, 0, 0])];
            tensor<int32, [2]> input_13_dilations_0 = const()[name = tensor<string, []>("input_13_dilations_0"), val = tensor<int32, [2]>([1, 1])];
            tensor<int32, []> input_13_groups_0 = const()[name = tensor<string, []>("input_13_groups_0"), val = tensor<int32, []>(1)];
            tensor<fp16, [256, 256, 1, 1]> encoder_pre_encode_conv_3_weight_to_fp16 = const()[name = tensor<string, []>("encoder_pre_encode_conv_3_weight_to_fp16"), val = tensor<fp16, [256, 256, 1, 1]>(BLOBFILE(path = tensor<string, []>("@model_path/weights/weight.bin"), offset = tensor<uint64, []>(10560)))];
            tensor<fp16, [256]> encoder_pre_encode_conv_3_bias_to_fp16 = const()[name = tensor<string, []>("encoder_pre_encode_conv_3_bias_to_fp16"), val = tensor<fp16, [256]>(BLOBFILE(path = tensor<string, []>("@model_path/weights/weight.bin"), offset = tensor<uint64, []>(141696)))];
            tensor<fp16, [1, 256, 9, 33]> input_13_cast_fp16 = conv(bias = encoder_pre_encode_conv_3_bias_to_fp16, dilations = input_13_dilations_0, groups = input_13_groups_0, pad = input_13_pad_0, pad_type = input_13_pad_type_0, strides = input_13_strides_0, weight = encoder_pre_encode_conv_3_weight_to_fp16, x = input_11_cast_fp16)[name = tensor<string, []>("input_13_cast_fp16")];
            tensor<fp16, [1, 256, 9, 33]> input_15_cast_fp16 = relu(x = input_13_cast_fp16)[name = tensor<string, []>("input_15_cast_fp16")];
        } -> (input_15_cast_fp16);
}
)";

std::vector<weight_file> example_2_weights(std::vector<float>& weight, std::vector<float>& bias) {
    weight = ramp(256 * 256, 0.01f, -0.11f);
    bias = ramp(256, 0.05f, -0.5f);
    return {{"@model_path/weights/weight.bin", 0,
             make_weight_file({{10560, 1, fp16_bytes(weight)}, {141696, 1, fp16_bytes(bias)}})}};
}

TEST_CASE(
    "ane sim mil: MIL.md example 2 (conv with bias + relu) is rejected by default and computes when "
    "allowed") {
    std::vector<float> weight, bias;
    const auto weights = example_2_weights(weight, bias);
    const std::string message = error_of(example_2, {}, weights);
    CHECK(message.find("line 11: conv: 'bias' on conv") != std::string::npos);

    rules allow;
    allow.conv_bias = anvil_sim::rule_mode::allow;
    auto program = mil_program::compile(example_2, weights, allow);
    REQUIRE(program->inputs().size() == 1);
    CHECK(program->inputs()[0].name == "input_11_cast_fp16");
    CHECK(program->outputs()[0].channels == 256);
    CHECK(program->outputs()[0].height == 9);
    CHECK(program->outputs()[0].width == 33);
    surface in(256, 9, 33, 128), out(256, 9, 33, 128);  // 66 bytes of data per row, rows padded to 128
    const auto x = ramp(256 * 9 * 33, 0.03f, -0.3f);
    in.write(x);
    const surface_view iv = in.view(), ov = out.view();
    program->evaluate({&iv, 1}, {&ov, 1});
    const auto y = out.read();
    std::vector<float> expected(y.size());
    for (int o = 0; o < 256; ++o)
        for (int p = 0; p < 9 * 33; ++p) {
            float sum = bias[static_cast<std::size_t>(o)];
            for (int i = 0; i < 256; ++i)
                sum +=
                    weight[static_cast<std::size_t>(o * 256 + i)] * x[static_cast<std::size_t>(i * 297 + p)];
            expected[static_cast<std::size_t>(o * 297 + p)] = std::max(sum, 0.0f);
        }
    check_close(y, expected, 4e-3f);
}

TEST_CASE("ane sim mil: MIL.md example 1 parses; its rank-1 I/O is rejected; a rank-4 variant runs") {
    CHECK(error_of(example_1).find(
              "line 4: function input 'logits' is tensor<fp16, [1025]>; function inputs and "
              "outputs must be rank 4") != std::string::npos);
    std::string variant = example_1;
    variant.replace(variant.find("tensor<fp16, [1025]>"), 20, "tensor<fp16, [1, 1, 1, 1025]>");
    variant.replace(variant.find("tensor<int32, [1]> index"), 24, "tensor<int32, [1, 1, 1, 1]> index");
    variant.replace(variant.find("tensor<fp16, [1]> score"), 23, "tensor<fp16, [1, 1, 1, 1]> score");
    variant.replace(variant.find("-> (index, score)"), 17, "-> (score)");
    auto program = mil_program::compile(variant, {}, {});
    surface in(1, 1, 1025), out(1, 1, 1);
    std::vector<float> x = ramp(1025);
    x[700] = 7.5f;
    in.write(x);
    const surface_view iv = in.view(), ov = out.view();
    program->evaluate({&iv, 1}, {&ov, 1});
    CHECK(out.read()[0] == 7.5f);
}

TEST_CASE("ane sim mil: the program(1.3) ios18 dialect with short scalars and inline literals") {
    const std::string text = R"(program(1.3)
[buildInfo = dict<string, string>({{"coremlc-version", "3505.4.1"}})]
{
    func main<ios18>(tensor<fp16, [1, 2, 1, 4]> x) {
        string pt = const()[name = string("pt"), val = string("valid")];
        fp16 eps = const()[name = string("eps"), val = fp16(0x1.0p-3)];
        tensor<fp16, [3, 2, 1, 1]> w = const()[name = string("w"), val = tensor<fp16, [3, 2, 1, 1]>([1.0, 2.0, -1.0, 0.5, 0x1p-1, -0x1.8p+0])];
        tensor<fp16, [1, 3, 1, 4]> c = conv(x = x, weight = w, pad_type = pt, strides = tensor<int32, [2]>([1, 1]), groups = int32(1))[name = string("c")];
        tensor<fp16, [1, 3, 1, 4]> y = add(x = c, y = eps)[name = string("y")];
    } -> (y);
}
)";
    auto program = mil_program::compile(text, {}, {});
    surface in(2, 1, 4), out(3, 1, 4);
    const std::vector<float> x = {1, 2, 3, 4, -1, 0.5f, 0.25f, 2};
    in.write(x);
    const surface_view iv = in.view(), ov = out.view();
    program->evaluate({&iv, 1}, {&ov, 1});
    const float w[3][2] = {{1, 2}, {-1, 0.5f}, {0.5f, -1.5f}};
    std::vector<float> expected;
    for (auto& row : w)
        for (int s = 0; s < 4; ++s)
            expected.push_back(row[0] * x[static_cast<std::size_t>(s)] +
                               row[1] * x[static_cast<std::size_t>(4 + s)] + 0.125f);
    check_close(out.read(), expected);
    // The short spelling belongs to program(1.3).
    std::string old = text;
    old.replace(old.find("program(1.3)"), 12, "program(1.0)");
    CHECK(error_of(old).find("line 5: the short scalar type 'string' needs program(1.3)") !=
          std::string::npos);
}

// ---- validation errors
// ---------------------------------------------------------------------------------------

const std::string valid_body =
    scalar("int32", "ax", "-1") + scalar("bool", "kd", "true") + ints("axes", {3}) +
    "tensor<fp16, [1, 4, 1, 8]> s = softmax(axis = ax, x = x)[name = tensor<string, []>(\"s\")];\n"
    "tensor<fp16, [1, 4, 1, 1]> m = reduce_max(axes = axes, keep_dims = kd, x = s)[name = tensor<string, "
    "[]>(\"m\")];\n"
    "tensor<fp16, [1, 4, 1, 8]> y = sub(x = s, y = m)[name = tensor<string, []>(\"y\")];\n";

TEST_CASE("ane sim mil: each validation rule fails with the line and the problem") {
    CHECK(error_of(program_of(valid_body)) == "(compiled)");
    struct failing {
        std::string body;
        std::string expected;
        std::string opset = "ios17";
    };
    const std::string f = "tensor<fp16, [1, 4, 1, 8]> ";
    const std::vector<failing> cases = {
        {f + "y = frobnicate(x = x)" + nm, "line 4: unknown op 'frobnicate'"},
        {scalar("string", "d", "\"int32\"") +
             "tensor<int32, [1, 4, 1, 1]> y = reduce_argmax(output_dtype = d, x = x)" + nm,
         "line 5: reduce_argmax: 'output_dtype' is not an input of reduce_argmax in ios16", "ios16"},
        {f + "y = relu(x = x, alpha = x)" + nm, "line 4: relu: 'alpha' is not an input of relu"},
        {f + "y = clip(x = x)" + nm, "line 4: clip: required input 'alpha' is missing"},
        {f + "r = relu(x = x)" + nm + f + "y = softmax(axis = r, x = x)" + nm,
         "line 5: softmax: input 'axis' must be a constant"},
        {"tensor<int32, [1, 4, 1, 8]> i = cast(dtype = tensor<string, []>(\"int32\"), x = x)" + nm + f +
             "y = sqrt(x = i)" + nm,
         "line 5: sqrt: input 'x' has dtype int32; ios17 allows fp16, fp32"},
        {"tensor<fp32, [1, 4, 1, 8]> c = cast(dtype = tensor<string, []>(\"fp32\"), x = x)" + nm + f +
             "y = add(x = x, y = c)" + nm,
         "line 5: add: input 'y' has dtype fp32 but another input of type T has fp16"},
        {f + "y = relu(x = q)" + nm, "line 4: relu: 'q' is not defined before use"},
        {f + "y = relu(x = x)" + nm + f + "y = relu(x = x)" + nm, "line 5: 'y' is already defined (line 4)"},
        {f + "z = relu(x = x)" + nm, "line 5: the function returns 'y', which is not defined"},
        {"tensor<fp16, [1, 4, 1, 9]> y = relu(x = x)" + nm,
         "line 4: relu: 'y' is declared tensor<fp16, [1, 4, 1, 9]> but its inputs give tensor<fp16, [1, 4, "
         "1, 8]>"},
        {"tensor<fp16, [1, 1, 1, 1, 1, 1]> r = const()[name = tensor<string, []>(\"r\"), val = tensor<fp16, "
         "[1, 1, 1, 1, 1, 1]>([0.0])];\n" +
             f + "y = relu(x = x)" + nm,
         "line 4: result 'r' tensor<fp16, [1, 1, 1, 1, 1, 1]> has rank 6; the ANE allows rank <= 5"},
        {ints("sh", {1, 4, 1, 8}) + "tensor<fp16, [1, 20000]> r = reshape(shape = sh, x = x)" + nm + f +
             "y = relu(x = x)" + nm,
         "line 5: result 'r' tensor<fp16, [1, 20000]> has a dimension of 20000, more than the limit of "
         "16384"},
        {"tensor<fp16, [8]> b = const()[name = tensor<string, []>(\"b\"), val = tensor<fp16, [8]>([1.0, 2.0, "
         "3.0, 4.0, 1.0, 2.0, 3.0, 4.0])];\n" +
             f + "y = mul(x = x, y = b)" + nm,
         "line 5: mul: const operand 'y' has shape [8]; a broadcast const must be a scalar"},
        {"tensor<fp16, [1, 1, 1, 8]> b = const()[name = tensor<string, []>(\"b\"), val = tensor<fp16, [1, 1, "
         "1, 8]>([1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0])];\n" +
             f + "y = add(x = x, y = b)" + nm,
         "line 5: add: const operand 'y' has shape [1, 1, 1, 8]"},
        {"tensor<fp16, [1, 4, 8, 8]> y = matmul(transpose_x = tensor<bool, []>(false), x = x, y = x)" + nm,
         "line 4: matmul: 'transpose_x' must be bound to a named const, not an inline literal"},
        {ints("a", {3}) +
             "tensor<fp16, [1, 4, 1, 1]> y = reduce_sum(axes = a, keep_dims = tensor<bool, []>(true), x = "
             "x)" +
             nm,
         "line 5: reduce_sum: 'keep_dims' must be bound to a named const"},
        {f + "y = scaled_dot_product_attention(query = x, key = x, value = x, attn_mask = x)" + nm,
         "line 4: scaled_dot_product_attention: attn_mask is ignored", "ios18"},
        {f + "y = read_state(input = x)" + nm, "line 4: read_state: state ops fail", "ios18"},
        {f + "y = scaled_dot_product_attention(query = x, key = x, value = x)" + nm,
         "line 4: scaled_dot_product_attention needs opset ios18; function main is ios17"},
        {"tensor<fp16, [1, 4, 1, 1]> mk = const()[name = tensor<string, []>(\"mk\"), val = tensor<fp16, [1, "
         "4, 1, 1]>([0.0, -inf, 0.0, 0.0])];\n" +
             f + "a = add(x = x, y = mk)" + nm + f + "y = softmax(axis = tensor<int32, []>(-1), x = a)" + nm,
         "line 6: softmax: its input adds a mask constant 'mk' holding infinity"},
        {"tensor<int32, [1, 4, 1, 8]> y = cast(dtype = tensor<string, []>(\"int32\"), x = x)" + nm,
         "line 5: function output 'y' is tensor<int32, [1, 4, 1, 8]>; function inputs and outputs must be "
         "rank 4"},
        {f + "y = conv(x = x, weight = x, bias = x)" + nm, "line 4: conv: 'bias' on conv is not honoured"},
    };
    rules
        relaxed;  // the const-broadcast and conv-bias checks run with defaults; others must not trip on them
    for (const auto& c : cases) {
        INFO(c.body);
        const std::string message = error_of(program_of(c.body, c.opset));
        INFO(message);
        CHECK(message.find(c.expected) != std::string::npos);
        CHECK(cited_line(message) > 0);
    }
    // [1, C, 1, 1] consts broadcast fine; the [C] case is allowed when the option says so.
    CHECK(error_of(program_of("tensor<fp16, [1, 4, 1, 1]> b = const()[name = tensor<string, []>(\"b\"), val "
                              "= tensor<fp16, [1, 4, 1, 1]>([1.0, 2.0, 3.0, 4.0])];\n" +
                              f + "y = add(x = x, y = b)" + nm)) == "(compiled)");
    relaxed.const_broadcast = anvil_sim::rule_mode::allow;
    CHECK(error_of(program_of("tensor<fp16, [8]> b = const()[name = tensor<string, []>(\"b\"), val = "
                              "tensor<fp16, [8]>([1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0])];\n" +
                              f + "y = mul(x = x, y = b)" + nm),
                   relaxed) == "(compiled)");
    // A long softmax axis, under a lowered limit.
    rules short_softmax;
    short_softmax.softmax_max_axis = 4;
    CHECK(
        error_of(program_of(valid_body), short_softmax).find("line 7: softmax over an axis of 8 elements") !=
        std::string::npos);
    // Garbage is a syntax error with a line.
    CHECK(error_of("program(1.0)\n{\n  func main<ios17>(tensor<fp16, [1, 4, 1, 8]> x) {\n  @@@\n") ==
          "line 4: unexpected character '@' [CONSTRAINTS.md:45]");
    CHECK(error_of("program(2.0)\n").find("line 1: program version '2.0' is not supported") !=
          std::string::npos);
}

TEST_CASE("ane sim mil: gelu, rsqrt and reduce_prod follow their modes") {
    const std::string gelu = program_of(
        scalar("string", "md", "\"EXACT\"") +
        "tensor<fp16, [1, 4, 1, 8]> y = gelu(mode = md, x = x)[name = tensor<string, []>(\"g\")];\n");
    auto program = mil_program::compile(gelu, {}, {});
    CHECK(program->warnings().find("line 5: gelu is reported to fail") != std::string::npos);
    rules strict;
    strict.gelu = strict.rsqrt = strict.reduce_prod = anvil_sim::rule_mode::error;
    CHECK(error_of(gelu, strict).find("line 5: gelu is reported to fail") != std::string::npos);
    CHECK(error_of(
              program_of("tensor<fp16, [1, 4, 1, 8]> y = rsqrt(x = x)[name = tensor<string, []>(\"r\")];\n"),
              strict)
              .find("line 4: rsqrt is reported to fail") != std::string::npos);
    CHECK(error_of(program_of(ints("a", {3}) + scalar("bool", "k", "true") +
                              "tensor<fp16, [1, 4, 1, 1]> y = reduce_prod(axes = a, keep_dims = k, x = "
                              "x)[name = tensor<string, []>(\"r\")];\n"),
                   strict)
              .find("line 6: reduce_prod is reported to fail") != std::string::npos);
    rules limit;
    limit.blobfile_limit = 1;
    std::vector<float> weight, bias;
    const auto weights = example_2_weights(weight, bias);
    limit.conv_bias = anvil_sim::rule_mode::allow;
    CHECK(error_of(example_2, limit, weights).find("2 BLOBFILE-backed constants, more than the limit of 1") !=
          std::string::npos);
}

// ---- BLOBFILE records
// ----------------------------------------------------------------------------------------

std::string blob_program(std::uint64_t offset, const std::string& type = "fp16") {
    return program_of(
        "tensor<" + type + ", [1, 4, 1, 8]> b = const()[name = tensor<string, []>(\"b\"), val = tensor<" +
        type +
        ", [1, 4, 1, 8]>(BLOBFILE(path = tensor<string, []>(\"@model_path/weights/weight.bin\"), offset = "
        "tensor<uint64, []>(" +
        std::to_string(offset) +
        ")))];\n"
        "tensor<fp16, [1, 4, 1, 8]> y = add(x = x, y = b)[name = tensor<string, []>(\"y\")];\n");
}

TEST_CASE("ane sim mil: BLOBFILE offsets must point at a valid metadata record") {
    const auto file = make_weight_file({{64, 1, fp16_bytes(ramp(32))}});
    const std::vector<weight_file> good = {{"@model_path/weights/weight.bin", 0, file}};
    auto program = mil_program::compile(blob_program(64), good, {});
    surface in(4, 1, 8), out(4, 1, 8);
    in.write(std::vector<float>(32, 1.0f));
    const surface_view iv = in.view(), ov = out.view();
    program->evaluate({&iv, 1}, {&ov, 1});
    std::vector<float> expected = ramp(32);
    for (float& v : expected)
        v = to_fp16(v + 1.0f);
    check_close(out.read(), expected);

    CHECK(
        error_of(blob_program(128), {}, good)
            .find("line 4: BLOBFILE \"@model_path/weights/weight.bin\" offset 128: no blob metadata there") !=
        std::string::npos);
    CHECK(error_of(blob_program(64, "fp32"), {}, good).find("the blob's dtype code is 1") !=
          std::string::npos);
    auto truncated = file;
    truncated.resize(128 + 40);
    CHECK(error_of(blob_program(64), {}, {{"@model_path/weights/weight.bin", 0, truncated}})
              .find("runs past the end") != std::string::npos);
    auto old_version = file;
    old_version[4] = std::byte{1};
    CHECK(error_of(blob_program(64), {}, {{"@model_path/weights/weight.bin", 0, old_version}})
              .find("version 1") != std::string::npos);
    auto wrong_size = make_weight_file({{64, 1, fp16_bytes(ramp(16))}});
    CHECK(error_of(blob_program(64), {}, {{"@model_path/weights/weight.bin", 0, wrong_size}})
              .find("holds 32 bytes, tensor<fp16, [1, 4, 1, 8]> needs 64") != std::string::npos);
    CHECK(error_of(blob_program(64), {}, {{"@model_path/weights/other.bin", 0, file}})
              .find("is not a key of the weights dictionary") != std::string::npos);
    try {
        (void)mil_program::compile(blob_program(128), good, {});
    } catch (const sim_failure& e) {
        CHECK(e.code == anvil_sim::codes::invalid_weights);
    }
}

TEST_CASE("ane sim mil: random mutations of a valid program fail cleanly") {
    const std::string base = program_of(valid_body);
    std::mt19937 random(1234);
    const std::string alphabet = "()[]{}<>,=;\"-0123456789.xpfintensor_ ";
    int compiled = 0;
    for (int round = 0; round < 300; ++round) {
        std::string text = base;
        const int edits = 1 + static_cast<int>(random() % 4);
        for (int e = 0; e < edits; ++e) {
            const std::size_t at = random() % text.size();
            switch (random() % 3) {
                case 0:
                    text[at] = alphabet[random() % alphabet.size()];
                    break;
                case 1:
                    text.erase(at, 1 + random() % 8);
                    break;
                default:
                    text.insert(at, 1, alphabet[random() % alphabet.size()]);
                    break;
            }
            if (text.empty()) text = "x";
        }
        try {
            auto program = mil_program::compile(text, {}, {});
            ++compiled;
        } catch (const sim_failure& e) {
            CHECK(std::string(e.what()).rfind("line ", 0) == 0);
        }
    }
    CHECK(compiled < 300);
}

// ---- numerics against naive loops
// ---------------------------------------------------------------------------

TEST_CASE("ane sim mil: elementwise ops match naive loops in fp16") {
    const auto x = ramp(32);
    struct unary {
        std::string body;
        std::function<float(float)> f;
    };
    const std::string two = scalar("fp16", "two", "0x1p+1");
    const std::vector<unary> cases = {
        {t48 + "y = relu(x = x)" + nm, [](float v) { return std::max(v, 0.0f); }},
        {t48 + "y = sigmoid(x = x)" + nm, [](float v) { return 1.0f / (1.0f + std::exp(-v)); }},
        {t48 + "y = tanh(x = x)" + nm, [](float v) { return std::tanh(v); }},
        {t48 + "y = exp(x = x)" + nm, [](float v) { return std::exp(v); }},
        {t48 + "y = silu(x = x)" + nm, [](float v) { return v / (1.0f + std::exp(-v)); }},
        {t48 + "y = erf(x = x)" + nm, [](float v) { return std::erf(v); }},
        {t48 + "a = abs(x = x)" + nm + t48 + "y = sqrt(x = a)" + nm,
         [](float v) { return std::sqrt(std::fabs(v)); }},
        {t48 + "y = square(x = x)" + nm, [](float v) { return v * v; }},
        {scalar("string", "md", "\"TANH_APPROXIMATION\"") + t48 + "y = gelu(mode = md, x = x)" + nm,
         [](float v) {
             return 0.5f * v *
                    (1.0f + std::tanh(std::sqrt(2.0f / 3.14159265f) * (v + 0.044715f * v * v * v)));
         }},
        {scalar("fp16", "lo", "-0x1p-1") + scalar("fp16", "hi", "0x1p-2") + t48 +
             "y = clip(alpha = lo, beta = hi, x = x)" + nm,
         [](float v) { return std::min(std::max(v, -0.5f), 0.25f); }},
        {two + t48 + "y = real_div(x = x, y = two)" + nm, [](float v) { return v / 2; }},
        {two + t48 + "y = pow(x = x, y = two)" + nm, [](float v) { return v * v; }},
        {two + t48 + "m = mul(x = x, y = two)" + nm + t48 + "s = sub(x = x, y = two)" + nm + t48 +
             "y = maximum(x = m, y = s)" + nm,
         [](float v) { return std::max(2 * v, v - 2); }},
        {scalar("fp16", "z", "0x0p+0") + "tensor<bool, [1, 4, 1, 8]> g = greater(x = x, y = z)" + nm + t48 +
             "n2 = minimum(x = x, y = z)" + nm + t48 + "y = select(cond = g, a = x, b = n2)" + nm,
         [](float v) { return v; }},
        {scalar("fp16", "e", "0x1p-4") + t48 + "a = abs(x = x)" + nm + t48 + "y = rsqrt(epsilon = e, x = a)" +
             nm,
         [](float v) { return 1.0f / std::sqrt(std::fabs(v) + 0.0625f); }},
    };
    for (const auto& c : cases) {
        INFO(c.body);
        std::vector<float> expected;
        for (float v : x)
            expected.push_back(c.f(v));
        rules options;
        options.rsqrt = options.gelu = anvil_sim::rule_mode::allow;
        const auto got = run_body(c.body, {4, 1, 8}, {4, 1, 8}, x, nullptr, options);
        check_close(got, expected, 3e-3f);
    }
}

TEST_CASE("ane sim mil: softmax, layer_norm and reductions match naive loops") {
    const auto x = ramp(32, 0.2f, -2.0f);
    // softmax over channels (axis 1), the split-einsum layout
    auto softmax =
        run_body(t48 + "y = softmax(axis = tensor<int32, []>(1), x = x)" + nm, {4, 1, 8}, {4, 1, 8}, x);
    std::vector<float> expected(32);
    for (int s = 0; s < 8; ++s) {
        float sum = 0;
        for (int c = 0; c < 4; ++c)
            sum += std::exp(x[static_cast<std::size_t>(c * 8 + s)]);
        for (int c = 0; c < 4; ++c)
            expected[static_cast<std::size_t>(c * 8 + s)] =
                std::exp(x[static_cast<std::size_t>(c * 8 + s)]) / sum;
    }
    check_close(softmax, expected);
    // layer_norm over channels with gamma and beta
    const std::string ln = ints("ax", {1}) +
                           "tensor<fp16, [4]> g = const()[name = tensor<string, []>(\"g\"), val = "
                           "tensor<fp16, [4]>([1.0, 2.0, 0.5, -1.0])];\n"
                           "tensor<fp16, [4]> b = const()[name = tensor<string, []>(\"b\"), val = "
                           "tensor<fp16, [4]>([0.0, 0.5, 0.25, 1.0])];\n" +
                           scalar("fp16", "eps", "0x1.5p-10") + t48 +
                           "y = layer_norm(axes = ax, beta = b, epsilon = eps, gamma = g, x = x)" + nm;
    const float gamma[4] = {1, 2, 0.5f, -1}, beta[4] = {0, 0.5f, 0.25f, 1};
    for (int s = 0; s < 8; ++s) {
        float mean = 0, var = 0;
        for (int c = 0; c < 4; ++c)
            mean += x[static_cast<std::size_t>(c * 8 + s)] / 4;
        for (int c = 0; c < 4; ++c)
            var += std::pow(x[static_cast<std::size_t>(c * 8 + s)] - mean, 2.0f) / 4;
        for (int c = 0; c < 4; ++c)
            expected[static_cast<std::size_t>(c * 8 + s)] =
                (x[static_cast<std::size_t>(c * 8 + s)] - mean) / std::sqrt(var + 0.00128174f) * gamma[c] +
                beta[c];
    }
    check_close(run_body(ln, {4, 1, 8}, {4, 1, 8}, x), expected, 4e-3f);
    // reduce_mean / reduce_sum / reduce_min over the last axis, kept dims
    for (const std::string op : {"reduce_mean", "reduce_sum", "reduce_min"}) {
        const auto got =
            run_body(ints("a", {-1}) + scalar("bool", "k", "true") + "tensor<fp16, [1, 4, 1, 1]> y = " + op +
                         "(axes = a, keep_dims = k, x = x)" + nm,
                     {4, 1, 8}, {4, 1, 1}, x);
        std::vector<float> want;
        for (int c = 0; c < 4; ++c) {
            float sum = 0, low = 1e9f;
            for (int s = 0; s < 8; ++s) {
                sum += x[static_cast<std::size_t>(c * 8 + s)];
                low = std::min(low, x[static_cast<std::size_t>(c * 8 + s)]);
            }
            want.push_back(op == "reduce_mean" ? sum / 8 : op == "reduce_sum" ? sum : low);
        }
        INFO(op);
        check_close(got, want);
    }
}

TEST_CASE("ane sim mil: data movement ops match index arithmetic") {
    const auto x = ramp(32);
    auto at = [&](int c, int s) { return x[static_cast<std::size_t>(c * 8 + s)]; };
    // transpose [1,4,1,8] -> [1,8,1,4]
    auto t =
        run_body(ints("p", {0, 3, 2, 1}) + "tensor<fp16, [1, 8, 1, 4]> y = transpose(perm = p, x = x)" + nm,
                 {4, 1, 8}, {8, 1, 4}, x);
    std::vector<float> want;
    for (int s = 0; s < 8; ++s)
        for (int c = 0; c < 4; ++c)
            want.push_back(at(c, s));
    check_close(t, want);
    // reshape with -1, split on channels, concat back in swapped order
    const std::string body = ints("sh", {1, -1, 1, 8}) + t48 + "r = reshape(shape = sh, x = x)" + nm +
                             ints("sz", {1, 3}) + scalar("int32", "one", "1") +
                             "tensor<fp16, [1, 1, 1, 8]> a, tensor<fp16, [1, 3, 1, 8]> b = split(axis = one, "
                             "split_sizes = sz, x = r)" +
                             nm + scalar("bool", "il", "false") + t48 +
                             "y = concat(axis = one, interleave = il, values = (b, a))" + nm;
    want.clear();
    for (int c : {1, 2, 3, 0})
        for (int s = 0; s < 8; ++s)
            want.push_back(at(c, s));
    check_close(run_body(body, {4, 1, 8}, {4, 1, 8}, x), want);
    // slice_by_index with stride and end mask, then tile and pad
    const std::string slice =
        ints("b0", {0, 1, 0, 1}) + ints("e0", {1, 3, 1, 0}) + ints("st", {1, 1, 1, 2}) +
        "tensor<bool, [4]> em = const()[name = tensor<string, []>(\"em\"), val = tensor<bool, [4]>([false, "
        "false, false, true])];\n"
        "tensor<fp16, [1, 2, 1, 4]> s = slice_by_index(begin = b0, end = e0, end_mask = em, stride = st, x = "
        "x)" +
        nm + ints("rp", {1, 2, 1, 1}) + "tensor<fp16, [1, 4, 1, 4]> tl = tile(reps = rp, x = s)" + nm +
        ints("pd", {0, 0, 1, 3}) + scalar("string", "mo", "\"constant\"") + scalar("fp16", "cv", "0x1p+0") +
        t48 + "y = pad(constant_val = cv, mode = mo, pad = pd, x = tl)" + nm;
    want.clear();
    for (int c = 0; c < 4; ++c) {
        want.push_back(1.0f);
        for (int s = 0; s < 4; ++s)
            want.push_back(at(1 + c % 2, 1 + 2 * s));
        for (int k = 0; k < 3; ++k)
            want.push_back(1.0f);
    }
    check_close(run_body(slice, {4, 1, 8}, {4, 1, 8}, x), want);
    // squeeze + expand_dims round trip, slice_by_size
    const std::string sq = ints("a0", {2}) + "tensor<fp16, [1, 4, 8]> q = squeeze(axes = a0, x = x)" + nm +
                           t48 + "e = expand_dims(axes = a0, x = q)" + nm + ints("bg", {0, 2, 0, 4}) +
                           ints("sz", {1, 2, 1, -1}) +
                           "tensor<fp16, [1, 2, 1, 4]> y = slice_by_size(begin = bg, size = sz, x = e)" + nm;
    want.clear();
    for (int c = 2; c < 4; ++c)
        for (int s = 4; s < 8; ++s)
            want.push_back(at(c, s));
    check_close(run_body(sq, {4, 1, 8}, {2, 1, 4}, x), want);
}

TEST_CASE("ane sim mil: conv, matmul, einsum, linear, pooling and upsampling match naive loops") {
    const auto x = ramp(4 * 4 * 6, 0.05f, -0.5f);  // [1, 4, 4, 6]
    auto xv = [&](int c, int h, int w) { return x[static_cast<std::size_t>((c * 4 + h) * 6 + w)]; };
    // 3x3 grouped conv, pad same
    std::vector<float> w(4 * 2 * 9);
    std::string wl;
    for (std::size_t i = 0; i < w.size(); ++i) {
        w[i] = to_fp16(0.1f * static_cast<float>(static_cast<int>(i % 7) - 3));
        wl += (i ? ", " : "") + std::to_string(w[i]);
    }
    const std::string conv =
        "tensor<fp16, [4, 2, 3, 3]> wt = const()[name = tensor<string, []>(\"wt\"), val = tensor<fp16, [4, "
        "2, 3, 3]>([" +
        wl + "])];\n" + scalar("string", "pt", "\"same\"") + ints("st", {1, 1}) + ints("dl", {1, 1}) +
        scalar("int32", "gr", "2") + ints("pd", {0, 0, 0, 0}) +
        "tensor<fp16, [1, 4, 4, 6]> y = conv(dilations = dl, groups = gr, pad = pd, pad_type = pt, strides = "
        "st, weight = wt, x = x)" +
        nm;
    std::vector<float> want;
    for (int o = 0; o < 4; ++o)
        for (int h = 0; h < 4; ++h)
            for (int q = 0; q < 6; ++q) {
                float sum = 0;
                for (int i = 0; i < 2; ++i)
                    for (int kh = 0; kh < 3; ++kh)
                        for (int kw = 0; kw < 3; ++kw) {
                            const int ih = h + kh - 1, iw = q + kw - 1;
                            if (ih < 0 || ih >= 4 || iw < 0 || iw >= 6) continue;
                            sum += w[static_cast<std::size_t>(((o * 2 + i) * 3 + kh) * 3 + kw)] *
                                   xv((o / 2) * 2 + i, ih, iw);
                        }
                want.push_back(sum);
            }
    check_close(run_body(conv, {4, 4, 6}, {4, 4, 6}, x), want, 4e-3f);
    // matmul x [1,4,4,6] @ x^T -> [1,4,4,4] (transpose_y through a named const)
    const std::string mm =
        scalar("bool", "f", "false") + scalar("bool", "tr", "true") +
        "tensor<fp16, [1, 4, 4, 4]> y = matmul(transpose_x = f, transpose_y = tr, x = x, y = x)" + nm;
    want.clear();
    for (int c = 0; c < 4; ++c)
        for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 4; ++j) {
                float sum = 0;
                for (int k = 0; k < 6; ++k)
                    sum += xv(c, i, k) * xv(c, j, k);
                want.push_back(sum);
            }
    check_close(run_body(mm, {4, 4, 6}, {4, 4, 4}, x), want, 4e-3f);
    // einsum in MIL's one form, under a relabelling ('abcd,adce->abce' is 'nchw,nwhu->nchu'): x [1,4,4,6]
    // and its transpose t [1,6,4,4] (t[w, h, u] = x[u, h, w]) give out[c, h, u] = sum_w x[c,h,w] x[u,h,w].
    const std::string es = ints("ep", {0, 3, 2, 1}) +
                           "tensor<fp16, [1, 6, 4, 4]> t = transpose(perm = ep, x = x)[name = "
                           "tensor<string, []>(\"t\")];\n" +
                           scalar("string", "eq", "\"abcd,adce->abce\"") +
                           "tensor<fp16, [1, 4, 4, 4]> y = einsum(equation = eq, values = (x, t))" + nm;
    want.clear();
    for (int c = 0; c < 4; ++c)
        for (int h = 0; h < 4; ++h)
            for (int u = 0; u < 4; ++u) {
                float sum = 0;
                for (int k = 0; k < 6; ++k)
                    sum += xv(c, h, k) * xv(u, h, k);
                want.push_back(sum);
            }
    check_close(run_body(es, {4, 4, 6}, {4, 4, 4}, x), want, 4e-3f);
    // Any other equation, or operands that do not fit it, fail at compile naming the form MIL has.
    const auto einsum_error = [](const std::string& equation, const std::string& second) {
        return error_of(program_of(scalar("string", "eq", "\"" + equation + "\"") +
                                       "tensor<fp16, [1, 4, 1, 4]> y = einsum(equation = eq, values = (x, " +
                                       second + "))" + nm,
                                   "ios17", "tensor<fp16, [1, 4, 1, 4]> x"));
    };
    CHECK(einsum_error("nchw,nwhu->nchu", "x") == "(compiled)");
    CHECK(einsum_error("nchw,nhwu->nchu", "x").find("is not MIL's einsum form 'nchw,nwhu->nchu'") !=
          std::string::npos);
    CHECK(einsum_error("nchw,nwhu->nuhc", "x").find("is not MIL's einsum form") != std::string::npos);
    CHECK(einsum_error("nchw,nwhu", "x").find("is not of the form") != std::string::npos);
    // linear over the last axis: weight [2, 6], bias [2]
    const std::string lin =
        "tensor<fp16, [2, 6]> lw = const()[name = tensor<string, []>(\"lw\"), val = tensor<fp16, [2, "
        "6]>([1.0, 0.5, -1.0, 0.25, 0.0, 2.0, -0.5, 1.0, 1.0, 1.0, -2.0, 0.125])];\n"
        "tensor<fp16, [2]> lb = const()[name = tensor<string, []>(\"lb\"), val = tensor<fp16, [2]>([0.5, "
        "-0.25])];\n"
        "tensor<fp16, [1, 4, 4, 2]> y = linear(bias = lb, weight = lw, x = x)" +
        nm;
    const float lw[2][6] = {{1, 0.5f, -1, 0.25f, 0, 2}, {-0.5f, 1, 1, 1, -2, 0.125f}}, lb[2] = {0.5f, -0.25f};
    want.clear();
    for (int c = 0; c < 4; ++c)
        for (int h = 0; h < 4; ++h)
            for (int o = 0; o < 2; ++o) {
                float sum = lb[o];
                for (int k = 0; k < 6; ++k)
                    sum += lw[o][k] * xv(c, h, k);
                want.push_back(sum);
            }
    check_close(run_body(lin, {4, 4, 6}, {4, 4, 2}, x), want, 4e-3f);
    // max_pool 2x2 stride 2 and avg_pool 2x2 stride 2 added together
    const std::string pool =
        ints("k", {2, 2}) + ints("s2", {2, 2}) + scalar("string", "v", "\"valid\"") +
        scalar("bool", "cm", "false") + scalar("bool", "ex", "false") + ints("pd", {0, 0, 0, 0}) +
        "tensor<fp16, [1, 4, 2, 3]> mp = max_pool(ceil_mode = cm, kernel_sizes = k, pad = pd, pad_type = v, "
        "strides = s2, x = x)" +
        nm +
        "tensor<fp16, [1, 4, 2, 3]> ap = avg_pool(ceil_mode = cm, exclude_padding_from_average = ex, "
        "kernel_sizes = k, pad = pd, pad_type = v, strides = s2, x = x)" +
        nm + "tensor<fp16, [1, 4, 2, 3]> y = add(x = mp, y = ap)" + nm;
    want.clear();
    for (int c = 0; c < 4; ++c)
        for (int h = 0; h < 2; ++h)
            for (int q = 0; q < 3; ++q) {
                const float a = xv(c, 2 * h, 2 * q), b = xv(c, 2 * h, 2 * q + 1), d = xv(c, 2 * h + 1, 2 * q),
                            e = xv(c, 2 * h + 1, 2 * q + 1);
                want.push_back(std::max(std::max(a, b), std::max(d, e)) + to_fp16((a + b + d + e) / 4));
            }
    rules pooling;  // rejected by default (CONSTRAINTS.md: max_pool / avg_pool rejected at compile)
    pooling.pooling = anvil_sim::rule_mode::allow;
    check_close(run_body(pool, {4, 4, 6}, {4, 2, 3}, x, nullptr, pooling), want, 4e-3f);
    // nearest-neighbour upsampling x2
    const std::string up = scalar("fp32", "sf", "0x1p+1") +
                           "tensor<fp16, [1, 4, 8, 12]> y = upsample_nearest_neighbor(scale_factor_height = "
                           "sf, scale_factor_width = sf, x = x)" +
                           nm;
    want.clear();
    for (int c = 0; c < 4; ++c)
        for (int h = 0; h < 8; ++h)
            for (int q = 0; q < 12; ++q)
                want.push_back(xv(c, h / 2, q / 2));
    check_close(run_body(up, {4, 4, 6}, {4, 8, 12}, x), want);
}

TEST_CASE("ane sim mil: casts, affine dequantization and fp16 overflow") {
    const auto x = ramp(32);
    // int8 weights * scale - zero point, folded at compile time, then multiplied
    const std::string dq =
        "tensor<fp16, [1, 4, 1, 1]> w = constexpr_affine_dequantize()[axis = tensor<int32, []>(1), name = "
        "tensor<string, []>(\"w\"), "
        "quantized_data = tensor<int8, [1, 4, 1, 1]>([-2, 0, 3, 8]), scale = tensor<fp16, []>(0x1p-2), "
        "zero_point = tensor<int8, []>(1)];\n" +
        t48 + "y = mul(x = x, y = w)" + nm;
    std::vector<float> want;
    const float w[4] = {-0.75f, -0.25f, 0.5f, 1.75f};
    for (int c = 0; c < 4; ++c)
        for (int s = 0; s < 8; ++s)
            want.push_back(x[static_cast<std::size_t>(c * 8 + s)] * w[c]);
    // Its rank-4 data is written inline, which only Core ML accepts (RUNTIME.md §0b #19).
    rules core_ml;
    core_ml.coreml_program = true;
    check_close(run_body(dq, {4, 1, 8}, {4, 1, 8}, x, nullptr, core_ml), want);
    CHECK_THROWS_WITH_AS(run_body(dq, {4, 1, 8}, {4, 1, 8}, x),
                         doctest::Contains("'quantized_data' is a rank-4 tensor written inline"),
                         sim_failure);
    // fp32 round trip keeps fp16 values
    const std::string cast =
        "tensor<fp32, [1, 4, 1, 8]> c = cast(dtype = tensor<string, []>(\"fp32\"), x = x)" + nm + t48 +
        "y = cast(dtype = tensor<string, []>(\"fp16\"), x = c)" + nm;
    check_close(run_body(cast, {4, 1, 8}, {4, 1, 8}, x), x, 0.0f);
    // 100 * 1000 overflows fp16: the result is inf and the warning names the op's line
    std::string warnings;
    const std::string big = scalar("fp16", "k", "0x1.f4p+9") + t48 + "y = mul(x = x, y = k)" + nm;
    std::vector<float> hundred(32, 100.0f);
    const auto got = run_body(big, {4, 1, 8}, {4, 1, 8}, hundred, &warnings);
    CHECK(std::isinf(got[0]));
    CHECK(warnings.find("line 5: mul 'y': a result passed the fp16 range") != std::string::npos);
    // values below 2^-14 are flushed
    const auto tiny = run_body(scalar("fp16", "k", "0x1p-10") + t48 + "y = mul(x = x, y = k)" + nm, {4, 1, 8},
                               {4, 1, 8}, std::vector<float>(32, 0.01f));
    CHECK(tiny[0] == 0.0f);
}

TEST_CASE("ane sim mil: softmax returns NaN for a row that holds -inf, as the Neural Engine's does") {
    const float minus_infinity = -std::numeric_limits<float>::infinity();
    // softmax(x) over the last axis of [1, 4, 1, 8], computed exactly, row by row; `masked` gets no weight.
    const auto exact = [](const std::vector<float>& x, std::size_t masked) {
        std::vector<float> out(x.size());
        for (std::size_t r = 0; r < 4; ++r) {
            float sum = 0;
            for (std::size_t s = 0; s < 8; ++s)
                sum += r * 8 + s == masked ? 0.0f : std::exp(x[r * 8 + s]);
            for (std::size_t s = 0; s < 8; ++s)
                out[r * 8 + s] = r * 8 + s == masked ? 0.0f : std::exp(x[r * 8 + s]) / sum;
        }
        return out;
    };
    const std::string softmax = t48 + "y = softmax(axis = tensor<int32, []>(-1), x = x)" + nm;
    std::vector<float> x = ramp(32, 0.2f, -2.0f);
    x[1 * 8 + 3] = minus_infinity;
    const std::vector<float> want = exact(x, 1 * 8 + 3);
    std::string warnings;
    const auto got = run_body(softmax, {4, 1, 8}, {4, 1, 8}, x, &warnings);
    for (std::size_t i = 0; i < got.size(); ++i) {
        INFO("element " << i);
        if (i / 8 == 1) {
            CHECK(std::isnan(got[i]));  // the whole row, not only the -inf position
        } else {
            CHECK(std::fabs(got[i] - want[i]) <= 2e-3f);  // the other rows untouched
        }
    }
    CHECK(
        warnings.rfind("line 4: softmax 'y': a row of its input holds -inf, and the Neural Engine's softmax "
                       "returns NaN for that row",
                       0) == 0);
    CHECK(cites(warnings.substr(0, warnings.find('\n')), 97));
    // A Core ML op that Core ML places on the CPU (here: an axis past softmax_max_axis) computes exactly.
    rules core_ml;
    core_ml.coreml_program = true;
    core_ml.softmax_max_axis = 4;
    warnings.clear();
    check_close(run_body(softmax, {4, 1, 8}, {4, 1, 8}, x, &warnings, core_ml), want);
    CHECK(warnings.find("softmax 'y'") == std::string::npos);

    // How -inf arises from a finite mask: in fp16, a score of -20 plus fp16's lowest (-65504) is -65524,
    // past the range, so -inf, and the row turns to NaN; -1e4 leaves headroom: -10020, and no weight.
    x = ramp(32, 0.2f, -2.0f);
    x[2 * 8 + 5] = -20.0f;
    for (const std::string value : {"-65504.0", "-10000.0"}) {
        CAPTURE(value);
        std::string mask;
        for (std::size_t i = 0; i < 32; ++i)
            mask += std::string(i ? ", " : "") + (i == 2 * 8 + 5 ? value : "0.0");
        const std::string masked =
            t48 + "mk = const()[name = tensor<string, []>(\"mk\"), val = " + "tensor<fp16, [1, 4, 1, 8]>([" +
            mask + "])];\n" + t48 + "a = add(x = x, y = mk)" + nm + t48 +
            "y = softmax(axis = tensor<int32, []>(-1), x = a)" + nm;
        const auto result = run_body(masked, {4, 1, 8}, {4, 1, 8}, x);
        if (value == "-65504.0") {
            for (std::size_t s = 0; s < 8; ++s)
                CHECK(std::isnan(result[2 * 8 + s]));
        } else {
            check_close(result, exact(x, 2 * 8 + 5));
        }
    }
}

TEST_CASE("ane sim mil: ops outside the simulated set validate but do not execute") {
    const std::string body =
        scalar("int32", "k", "1") + "tensor<fp16, [1, 4, 1, 8]> y = cumsum(axis = k, x = x)" + nm;
    auto program = mil_program::compile(program_of(body), {}, {});
    surface in(4, 1, 8), out(4, 1, 8);
    const surface_view iv = in.view(), ov = out.view();
    try {
        program->evaluate({&iv, 1}, {&ov, 1});
        CHECK(false);
    } catch (const sim_failure& e) {
        CHECK(std::string(e.what()) == "line 5: the simulator cannot execute cumsum");
        CHECK(e.code == anvil_sim::codes::program_inference);
    }
}
// ---- compressed weights (constexpr_*), as coremltools defines them (iOS16/iOS18 compression.py): expected
// values worked out by hand from those definitions
// ---------------------------------------------------------------------------------------

// A one-input one-output ios18 program (program(1.3), short scalars): `body` computes `y` from x [1, C, 1,
// 8].
// The ios18 forms' semantics, as Core ML decompresses them: the private compiler's refusals of sub-byte ios18
// weights and of inline rank-4 parameters are tested on their own below.
rules decompressing_sub_byte() {
    rules options;
    options.coreml_program = true;
    return options;
}

std::vector<float> run_ios18(const std::string& body, const std::vector<float>& input,
                             const std::vector<weight_file>& weights = {}, int channels = 4) {
    const std::string text = "program(1.3)\n{\n    func main<ios18>(tensor<fp16, [1, " +
                             std::to_string(channels) + ", 1, 8]> x) {\n" + body + "    } -> (y);\n}\n";
    auto program = mil_program::compile(text, weights, decompressing_sub_byte());
    surface a(channels, 1, 8), b(channels, 1, 8);
    a.write(input);
    const surface_view iv = a.view(), ov = b.view();
    program->evaluate({&iv, 1}, {&ov, 1});
    return b.read();
}

// x [1, C, 1, 8] times a per-channel weight w [C].
std::vector<float> scaled_rows(const std::vector<float>& x, const std::vector<float>& w) {
    std::vector<float> out;
    for (std::size_t c = 0; c < w.size(); ++c)
        for (std::size_t s = 0; s < 8; ++s)
            out.push_back(x[c * 8 + s] * w[c]);
    return out;
}

TEST_CASE("ane sim mil: palettes and blockwise int8 weights decompress as coremltools defines them") {
    const auto x = ramp(32);
    const std::string mul18 = "tensor<fp16, [1, 4, 1, 8]> y = mul(x = x, y = w)[name = string(\"n\")];\n";
    // iOS 16 form, every parameter an attribute: 2-bit indices [3, 0, 2, 1] packed LSB first into one byte,
    // 3 | 0 << 2 | 2 << 4 | 1 << 6 = 99.
    const std::string lut16 =
        "tensor<fp16, [1, 4, 1, 1]> w = constexpr_lut_to_dense()[indices = tensor<uint8, [1]>([99]), lut = "
        "tensor<fp16, [4]>([-1.0, 0.5, 2.0, 4.0]), name = tensor<string, []>(\"w\"), shape = tensor<uint32, "
        "[4]>([1, 4, 1, 1])];\n" +
        t48 + "y = mul(x = x, y = w)" + nm;
    check_close(run_body(lut16, {4, 1, 8}, {4, 1, 8}, x), scaled_rows(x, {4.0f, -1.0f, 2.0f, 0.5f}));
    // 6-bit indices [5, 63, 17, 40] cross byte boundaries: bytes 5 | 63 << 6 = 197, 63 >> 2 | (17 & 15) << 4
    // = 31, 17 >> 4 | 40 << 2 = 161. The palette is entry e -> (e - 32) / 4.
    std::string palette;
    for (int e = 0; e < 64; ++e)
        palette += (e ? ", " : "") + std::to_string((e - 32) / 4.0);
    const std::string lut6 =
        "tensor<fp16, [1, 4, 1, 1]> w = constexpr_lut_to_dense()[indices = tensor<uint8, "
        "[3]>([197, 31, 161]), lut = tensor<fp16, [64]>([" +
        palette + "]), name = tensor<string, []>(\"w\"), shape = tensor<uint32, [4]>([1, 4, 1, 1])];\n" +
        t48 + "y = mul(x = x, y = w)" + nm;
    check_close(run_body(lut6, {4, 1, 8}, {4, 1, 8}, x), scaled_rows(x, {-6.75f, 7.75f, -3.75f, 2.0f}));

    // iOS 18 form, parameters as inputs bound in place: a 1-bit palette per group of two channels
    // (lut [1, 2, 1, 1, 2, 1]), indices [1, 0, 0, 1] -> [a1, a0, b0, b1].
    const std::string grouped =
        "tensor<fp16, [1, 4, 1, 1]> w = constexpr_lut_to_dense(indices = tensor<uint1, [1, 4, 1, 1]>([1, 0, "
        "0, "
        "1]), lut = tensor<fp16, [1, 2, 1, 1, 2, 1]>([1.0, 2.0, -3.0, 0.5]))[name = string(\"w\")];\n" +
        mul18;
    check_close(run_ios18(grouped, x), scaled_rows(x, {2.0f, 1.0f, -3.0f, 0.5f}));
    // scale * (data - offset), one scale and offset per block of two channels.
    const std::string blockwise =
        "tensor<fp16, [1, 4, 1, 1]> w = constexpr_blockwise_shift_scale(data = tensor<int8, [1, 4, 1, "
        "1]>([-2, "
        "0, 3, 8]), offset = tensor<int8, [1, 2, 1, 1]>([1, 0]), scale = tensor<fp16, [1, 2, 1, 1]>([0.25, "
        "0.5]))[name = string(\"w\")];\n" +
        mul18;
    check_close(run_ios18(blockwise, x), scaled_rows(x, {-0.75f, -0.25f, 1.5f, 4.0f}));

    // A uint4 blob: 3 values [7, 1, 12] -> bytes 7 | 1 << 4 = 23 and 12, the record's padding 4 bits.
    const std::string from_blob =
        "tensor<fp16, [1, 3, 1, 1]> w = constexpr_lut_to_dense(indices = tensor<uint4, [1, 3, 1, "
        "1]>(BLOBFILE(path "
        "= string(\"@model_path/weights/weight.bin\"), offset = uint64(64))), lut = tensor<fp16, [1, 1, 1, "
        "1, 16, "
        "1]>([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0]))[name = "
        "string(\"w\")];\n"
        "tensor<fp16, [1, 3, 1, 8]> y = mul(x = x, y = w)[name = string(\"n\")];\n";
    const auto x3 = ramp(24);
    const auto packed = make_weight_file({{64, 11, {std::byte{23}, std::byte{12}}, 4}});
    check_close(run_ios18(from_blob, x3, {{"@model_path/weights/weight.bin", 0, packed}}, 3),
                scaled_rows(x3, {7.0f, 1.0f, 12.0f}));
    const auto unpadded = make_weight_file({{64, 11, {std::byte{23}, std::byte{12}}, 0}});
    CHECK_THROWS_WITH_AS(run_ios18(from_blob, x3, {{"@model_path/weights/weight.bin", 0, unpadded}}, 3),
                         doctest::Contains("padding_size_in_bits is 0; 3 values of 4 bits leave 4"),
                         sim_failure);

    // Refusals: the other opset's spelling, a palette that is not 2^bits, indices of the wrong width, packed
    // bytes that do not hold the shape.
    const auto ios18_text = [](const std::string& body) {
        return "program(1.3)\n{\n    func main<ios18>(tensor<fp16, [1, 4, 1, 8]> x) {\n" + body +
               "    } -> (y);\n}\n";
    };
    CHECK(
        error_of(
            ios18_text("tensor<fp16, [1, 4, 1, 1]> w = constexpr_lut_to_dense()[indices = tensor<uint1, [1, "
                       "4, 1, 1]>([1, 0, 0, 1]), lut = tensor<fp16, [1, 1, 1, 1, 2, 1]>([1.0, 2.0]), name = "
                       "string(\"w\")];\n" +
                       mul18))
            .find("from ios18 a constexpr op's parameters are inputs, not attributes") != std::string::npos);
    CHECK(
        error_of(program_of("tensor<fp16, [1, 4, 1, 1]> w = constexpr_affine_dequantize(axis = tensor<int32, "
                            "[]>(1), quantized_data = tensor<int8, [1, 4, 1, 1]>([-2, 0, 3, 8]), scale = "
                            "tensor<fp16, []>(0x1p-2), zero_point = tensor<int8, []>(1))" +
                            nm + t48 + "y = mul(x = x, y = w)" + nm))
            .find("up to ios17 a constexpr op's parameters are attributes, not inputs") != std::string::npos);
    std::string five = grouped;
    five.replace(five.find("[1, 2, 1, 1, 2, 1]>([1.0, 2.0, -3.0, 0.5])"), 42,
                 "[1, 1, 1, 1, 5, 1]>([1.0, 2.0, -3.0, 0.5, 1.0])");
    CHECK(error_of(ios18_text(five), decompressing_sub_byte()).find("the palette has 5 entries") !=
          std::string::npos);
    std::string wide = grouped;
    wide.replace(wide.find("uint1"), 5, "uint2");
    CHECK(error_of(ios18_text(wide), decompressing_sub_byte())
              .find("indices must be uint1 for a palette of 2 entries") != std::string::npos);
    std::string short_bytes = lut6;
    short_bytes.replace(short_bytes.find("[3]>([197, 31, 161])"), 20, "[2]>([197, 31])");
    CHECK(error_of(program_of(short_bytes))
              .find("indices must be tensor<uint8, [3]> (4 values of 6 bits, packed)") != std::string::npos);

    // The private compiler refuses sub-byte weights in an ios18 program (RUNTIME.md §0b #19), uint1 indices
    // and a uint4 blob alike, but not int8 data, nor the ios16 form's uint8-packed indices; Core ML
    // decompresses them itself.
    const std::string refused = error_of(ios18_text(grouped));
    CHECK(refused.find("'indices' is uint1; sub-byte constexpr weights in an ios18 program are refused") !=
          std::string::npos);
    CHECK(refused.find("[CONSTRAINTS.md:94]") != std::string::npos);
    const std::string three_channels =
        "program(1.3)\n{\n    func main<ios18>(tensor<fp16, [1, 3, 1, 8]> x) {\n" + from_blob +
        "    } -> (y);\n}\n";
    CHECK(error_of(three_channels, {}, {{"@model_path/weights/weight.bin", 0, packed}})
              .find("'indices' is uint4") != std::string::npos);
    // int8 data is not sub-byte; its inline rank-4 scale and offset are refused on their own (§0b #19).
    const std::string rank4 = error_of(ios18_text(blockwise));
    CHECK(rank4.find("is a rank-4 tensor written inline; the private compiler refuses it") !=
          std::string::npos);
    CHECK(rank4.find("[CONSTRAINTS.md:101]") != std::string::npos);
    CHECK(error_of(program_of(lut6)) == "(compiled)");
    rules core_ml;
    core_ml.coreml_program = true;
    CHECK(error_of(ios18_text(grouped), core_ml) == "(compiled)");
}

}  // namespace test_mil
