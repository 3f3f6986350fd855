// The ANE simulator's Core ML half, linked in: the package reader (runtime_coreml_package.cpp, written from
// COREML.md, not from anvil's writer) on the hand-encoded example, on what anvil's writer encodes (it must
// print back to exactly the MIL text anvil prints for the private path), and on the malformed corpus
// (tests/data/malformed/coreml, one broken rule per file); and the validator's Core ML mode, which places
// what the Neural Engine refuses on the CPU (the compute plan) instead of failing.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>
#include <anvil/backend/ane/mil_writer.hpp>
#include <anvil/backend/coreml/model_spec.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "mil_harness.hpp"
#include "runtime_coreml_package.hpp"

namespace test_coreml_package {

namespace {

namespace sim_coreml = anvil_sim::coreml;
using ane_sim_mil::rules;
using ane_sim_mil::sim_failure;

const std::filesystem::path example =
    std::filesystem::path(ANVIL_TEST_DATA_DIR) / "coreml/example/Minimal.mlpackage";

std::string read(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    REQUIRE(in);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// MIL text without its buildInfo attribute line (the reader prints none; anvil prints coremltools').
std::string without_build_info(const std::string& text) {
    std::string out;
    std::size_t start = 0;
    while (start < text.size()) {
        const std::size_t end = std::min(text.find('\n', start), text.size());
        const std::string line = text.substr(start, end - start);
        if (line.find("buildInfo") == std::string::npos) out += line + "\n";
        start = end + 1;
    }
    return out;
}

// The example's weights dictionary, as a load hands it to the MIL part.
std::vector<anvil_sim::weight_file> example_weights() {
    std::vector<anvil_sim::weight_file> weights{{"@model_path/weights/weight.bin", 0, {}}};
    const std::string blob = read(example / "Data/com.apple.CoreML/weights/weight.bin");
    weights[0].data.resize(blob.size());
    std::memcpy(weights[0].data.data(), blob.data(), blob.size());
    return weights;
}

rules core_ml() {
    rules options;
    options.coreml_program = true;
    return options;
}

}  // namespace

TEST_CASE("coreml package reader: the hand-encoded example reads as COREML.md describes") {
    const sim_coreml::package p = sim_coreml::read_package(example);
    CHECK(p.specification_version == 7);
    CHECK(p.default_function == "main");
    REQUIRE(p.functions.size() == 1);
    const auto& f = p.functions[0];
    CHECK(f.opset == "CoreML6");
    REQUIRE(f.inputs.size() == 1);
    CHECK(f.inputs[0].name == "x");
    CHECK(f.inputs[0].shape == std::vector<std::int64_t>{1, 4});
    CHECK(f.inputs[0].array_type == 65552);  // FLOAT16
    REQUIRE(f.outputs.size() == 1);
    CHECK(f.outputs[0].name == "y");
    CHECK(p.weight_files == std::vector<std::string>{"weight.bin"});
    CHECK(f.mil.find("linear(") != std::string::npos);
    // The printed function compiles as a Core ML program (rank-2 fp16 I/O) and not as a Neural Engine one.
    const auto weights = example_weights();
    CHECK_NOTHROW((void)anvil_sim::mil_program::compile(f.mil, weights, core_ml()));
    CHECK_THROWS_AS((void)anvil_sim::mil_program::compile(f.mil, weights, rules{}), sim_failure);
}

TEST_CASE("coreml package reader: anvil's encoded model prints back to the MIL text anvil prints") {
    namespace ane = anvil::detail::ane;
    for (const auto dialect : {ane::mil_dialect::ios16, ane::mil_dialect::ios18}) {
        ane::mil_writer mil(dialect);
        const ane::mil_ref x = mil.input("x", {1, 16, 1, 32});
        std::vector<anvil::half> w(16 * 16);
        for (std::size_t i = 0; i < w.size(); ++i)
            w[i] = anvil::half(static_cast<float>(i % 5) * 0.25f - 0.5f);
        const ane::mil_ref weight = mil.const_fp16("w", {16, 16, 1, 1}, w);
        const ane::mil_ref conv =
            mil.op("conv", "conv_0", {1, 16, 1, 32}, {{"x", {x}}, {"weight", {weight}}});
        const ane::mil_ref y = mil.op("relu", "y", {1, 16, 1, 32}, {{"x", {conv}}});
        const std::vector<ane::mil_ref> outputs{y};
        anvil::detail::coreml::model_spec spec;
        spec.functions.push_back({"main", &mil.function(), outputs, {}, {}});
        const std::vector<std::byte> bytes = anvil::detail::coreml::encode_model(spec);
        const sim_coreml::package p = sim_coreml::read_model(
            std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()), {});
        REQUIRE(p.functions.size() == 1);
        CAPTURE(p.functions[0].mil);
        CHECK(without_build_info(p.functions[0].mil) == without_build_info(mil.text(outputs)));
        CHECK(p.specification_version == (dialect == ane::mil_dialect::ios16 ? 7 : 9));
    }
}

TEST_CASE("coreml package reader: every file of the malformed corpus is refused with a message") {
    const std::filesystem::path corpus = std::filesystem::path(ANVIL_TEST_DATA_DIR) / "malformed/coreml";
    const std::filesystem::path model_directory = example / "Data/com.apple.CoreML";
    std::size_t files = 0;
    for (const auto& entry : std::filesystem::directory_iterator(corpus)) {
        if (entry.path().extension() != ".mlmodel") continue;
        ++files;
        CAPTURE(entry.path().filename().string());
        std::string refusal;
        try {
            const sim_coreml::package p = sim_coreml::read_model(read(entry.path()), model_directory);
            // What the reader accepts must fail where Core ML would look next: the program itself.
            for (const auto& f : p.functions)
                (void)anvil_sim::mil_program::compile(f.mil, example_weights(), core_ml());
        } catch (const sim_failure& e) {
            refusal = e.what();
        }
        CAPTURE(refusal);
        CHECK(refusal.size() > 10);
        CHECK(refusal.find("weights dictionary") == std::string::npos);  // refused for its own fault
    }
    CHECK(files == 11);
}

TEST_CASE(
    "coreml package reader: Core ML refuses an op that leaves out an input coremltools gives a default") {
    // RUNTIME.md §0b #17: "optional" in Core ML's documentation, required by its ML Program parser; linear's
    // bias excepted. The private path requires only the required inputs.
    const auto program = [](const std::string& function, const std::string& body) {
        return "program(1.3)\n{\n    func main<ios18>(" + function + ") {\n" + body + "    } -> (y);\n}\n";
    };
    const std::string gather_args =
        "        tensor<fp16, [5, 4]> table = const()[name = string(\"table\"), val = tensor<fp16, [5, "
        "4]>([1, 2, "
        "3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20])];\n"
        "        int32 axis = const()[name = string(\"axis\"), val = int32(0)];\n"
        "        int32 batch_dims = const()[name = string(\"batch_dims\"), val = int32(0)];\n";
    const std::string gather =
        program("tensor<int32, [1, 3]> ids", gather_args +
                                                 "        tensor<fp16, [1, 3, 4]> y = gather(axis = axis, "
                                                 "batch_dims = batch_dims, indices = ids, x = "
                                                 "table)[name = string(\"y\")];\n");
    std::string refusal;
    try {
        (void)anvil_sim::mil_program::compile(gather, {}, core_ml());
    } catch (const sim_failure& e) {
        refusal = e.what();
    }
    CHECK(refusal.find("gather: input 'validate_indices' is left out") != std::string::npos);
    CHECK(refusal.find("[CONSTRAINTS.md:92]") != std::string::npos);
    // softmax's axis: refused by Core ML, taken by the private path.
    const std::string softmax =
        program("tensor<fp16, [1, 4, 1, 8]> a",
                "        tensor<fp16, [1, 4, 1, 8]> y = softmax(x = a)[name = string(\"y\")];\n");
    CHECK_THROWS_WITH_AS((void)anvil_sim::mil_program::compile(softmax, {}, core_ml()),
                         doctest::Contains("softmax: input 'axis' is left out"), sim_failure);
    CHECK_NOTHROW((void)anvil_sim::mil_program::compile(softmax, {}, rules{}));
    // matmul's transpose flags; an ios16 program's gather has no validate_indices to leave out.
    const std::string matmul = program(
        "tensor<fp16, [1, 4, 8]> a, tensor<fp16, [1, 8, 4]> b",
        "        bool f = const()[name = string(\"f\"), val = bool(false)];\n"
        "        tensor<fp16, [1, 4, 4]> y = matmul(transpose_x = f, x = a, y = b)[name = string(\"y\")];\n");
    CHECK_THROWS_WITH_AS((void)anvil_sim::mil_program::compile(matmul, {}, core_ml()),
                         doctest::Contains("matmul: input 'transpose_y' is left out"), sim_failure);
    std::string old_gather = gather;
    old_gather.replace(old_gather.find("program(1.3)"), 12, "program(1.0)");
    old_gather.replace(old_gather.find("<ios18>"), 7, "<ios16>");
    for (const auto& [from, to] : {std::pair<std::string, std::string>{"string(", "tensor<string, []>("},
                                   {"int32 axis", "tensor<int32, []> axis"},
                                   {"int32 batch_dims", "tensor<int32, []> batch_dims"},
                                   {"int32(0)", "tensor<int32, []>(0)"}}) {
        for (std::size_t at = old_gather.find(from); at != std::string::npos;
             at = old_gather.find(from, at + to.size()))
            old_gather.replace(at, from.size(), to);
    }
    CHECK_NOTHROW((void)anvil_sim::mil_program::compile(old_gather, {}, core_ml()));
    // linear without a bias is accepted (ONNX Runtime's Core ML builder writes it so).
    const std::string linear =
        program("tensor<fp16, [2, 4]> x",
                "        tensor<fp16, [3, 4]> w = const()[name = string(\"w\"), val = tensor<fp16, [3, "
                "4]>([1, 2, 3, 4, "
                "5, 6, 7, 8, 9, 10, 11, 12])];\n"
                "        tensor<fp16, [2, 3]> y = linear(weight = w, x = x)[name = string(\"y\")];\n");
    CHECK_NOTHROW((void)anvil_sim::mil_program::compile(linear, {}, core_ml()));
}

TEST_CASE("coreml package reader: the validator's Core ML mode places what the Neural Engine refuses") {
    const std::string program = R"(program(1.3)
[buildInfo = dict<string, string>({{"coremltools-version", "8.1"}})]
{
    func main<ios18>(tensor<int32, [1, 3]> ids, tensor<fp16, [1, 3, 4]> h) {
        tensor<fp16, [5, 4]> table = const()[name = string("table"), val = tensor<fp16, [5, 4]>([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20])];
        int32 axis = const()[name = string("axis"), val = int32(0)];
        int32 batch_dims = const()[name = string("batch_dims"), val = int32(0)];
        bool validate = const()[name = string("validate"), val = bool(false)];
        tensor<fp16, [1, 3, 4]> e = gather(axis = axis, batch_dims = batch_dims, indices = ids, validate_indices = validate, x = table)[name = string("e")];
        tensor<fp16, [1, 3, 4]> s = add(x = e, y = h)[name = string("s")];
        tensor<fp16, [1, 3, 4]> y = relu(x = s)[name = string("y")];
    } -> (y);
}
)";
    const auto placed = anvil_sim::mil_program::compile(program, {}, core_ml());
    const auto& plan = placed->placement();
    REQUIRE(plan.size() == 3);
    CHECK(plan[0].op == "gather");
    CHECK(plan[0].device == "cpu");
    CHECK(plan[0].reason.find("MIL.md §2.5") != std::string::npos);
    CHECK(plan[1].device == "ane");
    CHECK(plan[2].device == "ane");
    CHECK(plan[2].output == "y");
    // An op the Neural Engine's rulebook refuses goes to the CPU in Core ML, and fails the private path.
    rules refusing = core_ml();
    refusing.fail_compile_op = "relu";
    const auto faulted = anvil_sim::mil_program::compile(program, {}, refusing);
    CHECK(faulted->placement()[2].device == "cpu");
    CHECK(faulted->placement()[2].reason.find("fail_compile_op=relu") != std::string::npos);
    CHECK_THROWS_AS((void)anvil_sim::mil_program::compile(program, {}, rules{}), sim_failure);

    // The gather executes: rows 0, 4, 2 of the table, plus h, through relu.
    std::vector<std::int32_t> ids{0, 4, 2};
    std::vector<anvil::half> h(12, anvil::half(-2.0f));
    std::vector<anvil::half> y(12);
    anvil_sim::surface_view in_ids{reinterpret_cast<std::byte*>(ids.data()), 12, 12, 12};
    anvil_sim::surface_view in_h{reinterpret_cast<std::byte*>(h.data()), 24, 8, 24};
    anvil_sim::surface_view out{reinterpret_cast<std::byte*>(y.data()), 24, 8, 24};
    const std::vector<anvil_sim::surface_view> inputs{in_h, in_ids};  // symbol order: h, ids
    const std::vector<anvil_sim::surface_view> outputs{out};
    placed->evaluate(inputs, outputs);
    const float expected[] = {0, 0, 1, 2, 15, 16, 17, 18, 7, 8, 9, 10};
    for (std::size_t i = 0; i < 12; ++i)
        CHECK(static_cast<float>(y[i]) == expected[i]);
}

}  // namespace test_coreml_package
