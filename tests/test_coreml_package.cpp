// Tests of the Core ML writers: the protobuf encoder, the Model spec written from the lowering's in-memory
// MIL program, and the .mlpackage writer.
//
// Where the expected values come from:
// - Tag and varint bytes: the list in COREML.md §2 ("20/L = A2 01", ..., FLOAT16 = `90 80 04`), typed in from
//   that document, and protobuf's encoding of negative int64 (ten bytes).
// - The example package (tests/data/coreml/example, copied from ../shared/coreml/example): hand-encoded by
//   an independent Python script from coremltools' field numbers (minimal_mlpackage.py, in that folder's
//   origin), decoded in example_dump.txt. anvil's writers must reproduce its model.mlmodel and weight.bin
//   byte for byte; Manifest.json differs only in the two item identifiers (random UUIDs there,
//   content-derived here).
// - Lowered segments: the same function printed as MIL text must name the same ops, in the same order, as
//   the protobuf holds (protoc checks the encoding itself: tests/coreml/check_mlpackage.py).
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>
#include <anvil/backend/ane/ane_program.hpp>
#include <anvil/backend/coreml/mlpackage.hpp>
#include <anvil/backend/coreml/model_spec.hpp>
#include <anvil/backend/coreml/protobuf.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace test_coreml_package {

using namespace anvil;
using namespace anvil::detail;
using namespace anvil::detail::coreml;
using ane::mil_dialect;
using ane::mil_writer;

std::vector<std::byte> bytes_of(std::initializer_list<int> values) {
    std::vector<std::byte> out;
    for (const int v : values)
        out.push_back(static_cast<std::byte>(v));
    return out;
}

std::vector<std::byte> read_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    REQUIRE_MESSAGE(in, "cannot open ", path.string());
    const std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::byte> out(chars.size());
    std::memcpy(out.data(), chars.data(), chars.size());
    return out;
}

std::string read_text(const std::filesystem::path& path) {
    const auto raw = read_file(path);
    return std::string(reinterpret_cast<const char*>(raw.data()), raw.size());
}

const std::filesystem::path example_dir =
    std::filesystem::path(ANVIL_TEST_DATA_DIR) / "coreml" / "example" / "Minimal.mlpackage";

TEST_CASE("coreml protobuf: keys and varints are the bytes COREML.md lists") {
    struct tag {
        std::uint32_t field;
        bool length_delimited;
        std::vector<std::byte> expected;
    };
    const std::vector<tag> tags{
        {20, true, bytes_of({0xA2, 0x01})},    {21, true, bytes_of({0xAA, 0x01})},
        {31, true, bytes_of({0xFA, 0x01})},    {50, true, bytes_of({0x92, 0x03})},
        {100, true, bytes_of({0xA2, 0x06})},   {502, true, bytes_of({0xB2, 0x1F})},
        {1000, false, bytes_of({0xC0, 0x3E})},
    };
    for (const auto& t : tags) {
        protobuf_writer w;
        if (t.length_delimited) {
            w.string(t.field, "");  // the key, then a zero length
            const std::vector<std::byte> key(w.bytes().begin(), w.bytes().end() - 1);
            CHECK_MESSAGE(key == t.expected, "field ", t.field);
        } else {
            w.varint(t.field, 0);  // the key, then a zero
            const std::vector<std::byte> key(w.bytes().begin(), w.bytes().end() - 1);
            CHECK_MESSAGE(key == t.expected, "field ", t.field);
        }
    }
    const auto data_type = [](array_dtype type) {
        protobuf_writer w;
        w.varint(2, static_cast<std::uint64_t>(type));
        const auto& out = w.bytes();
        return std::vector<std::byte>(out.begin() + 1, out.end());
    };
    CHECK(data_type(array_dtype::float16) == bytes_of({0x90, 0x80, 0x04}));
    CHECK(data_type(array_dtype::float32) == bytes_of({0xA0, 0x80, 0x04}));
    CHECK(data_type(array_dtype::int32) == bytes_of({0xA0, 0x80, 0x08}));
    CHECK(data_type(array_dtype::float64) == bytes_of({0xC0, 0x80, 0x04}));

    protobuf_writer negative;
    negative.signed_varint(2, -1);
    CHECK(negative.bytes() == bytes_of({0x10, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01}));

    protobuf_writer packed;
    const std::vector<std::int64_t> shape{1, 4};
    packed.packed_varints(1, std::span<const std::int64_t>(shape));
    CHECK(packed.bytes() == bytes_of({0x0A, 0x02, 0x01, 0x04}));  // the example's `0a0201 04`

    protobuf_writer floats;
    const std::vector<float> one{1.0f};
    floats.packed_floats(1, std::span<const float>(one));
    CHECK(floats.bytes() == bytes_of({0x0A, 0x04, 0x00, 0x00, 0x80, 0x3F}));
}

// The example's model: y = linear(x, W, b), fp16 [1, 4], W in the weight file, b immediate.
struct example_model {
    mil_writer mil{mil_dialect::ios16};
    ane::mil_ref y = 0;

    example_model() {
        std::vector<half> w, b;
        for (int r = 0; r < 4; ++r) {
            for (int c = 0; c < 4; ++c)
                w.push_back(half(r == c ? 1.0f : 0.5f));
        }
        for (const float v : {0.25f, -0.25f, 1.0f, 2.0f})
            b.push_back(half(v));
        const auto x = mil.input("x", {1, 4});
        const auto weight = mil.const_fp16("w", {4, 4}, w);
        const auto bias = mil.const_fp16("b", {4}, b);
        y = mil.op("linear", "y", {1, 4}, {{"x", {x}}, {"weight", {weight}}, {"bias", {bias}}});
        mil.name_op(y, "linear_0");
    }

    [[nodiscard]] model_spec spec() const {
        model_spec s;
        s.functions.push_back({"main", &mil.function(), {y}, {}, {}});
        return s;
    }
};

TEST_CASE("coreml package: the hand-encoded example is reproduced byte for byte") {
    const example_model example;
    const auto model = encode_model(example.spec());
    const auto expected_model = read_file(example_dir / "Data/com.apple.CoreML/model.mlmodel");
    CHECK(model.size() == 435);
    CHECK(model == expected_model);

    const auto weights = example.mil.weights();
    REQUIRE(weights.size() == 1);
    CHECK(weights[0].path == "@model_path/weights/weight.bin");
    CHECK(weights[0].bytes == read_file(example_dir / "Data/com.apple.CoreML/weights/weight.bin"));
    CHECK(weights[0].bytes.size() == 160);  // no padding after the last payload, as coremltools writes it

    // The text route prints the same function.
    const std::vector<ane::mil_ref> outputs{example.y};
    const std::string text = example.mil.text(outputs);
    CHECK(text.find("func main<ios16>(tensor<fp16, [1, 4]> x)") != std::string::npos);
    CHECK(text.find("tensor<fp16, [1, 4]> y = linear(bias = b, weight = w, x = x)[name = "
                    "tensor<string, []>(\"linear_0\")];") != std::string::npos);

    const auto dir =
        std::filesystem::temp_directory_path() / "anvil_test_coreml_example" / "Minimal.mlpackage";
    std::filesystem::remove_all(dir.parent_path());
    write_mlpackage(dir, {model, weights});
    CHECK(read_file(dir / "Data/com.apple.CoreML/model.mlmodel") == expected_model);
    CHECK(read_file(dir / "Data/com.apple.CoreML/weights/weight.bin") == weights[0].bytes);
    // Manifest.json: the same text but for the two identifiers.
    const std::regex uuid("[0-9A-F]{8}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{12}");
    const std::string ours = read_text(dir / "Manifest.json");
    const std::string theirs = read_text(example_dir / "Manifest.json");
    CHECK(std::regex_replace(ours, uuid, "ID") == std::regex_replace(theirs, uuid, "ID"));
    CHECK(ours != theirs);
    // Content-derived: writing again gives the same identifiers; another model gets other ones.
    const auto again = dir.parent_path() / "Again.mlpackage";
    write_mlpackage(again, {model, weights});
    CHECK(read_text(again / "Manifest.json") == ours);
    auto other = model;
    other.push_back(std::byte{0x50});  // field 10 (isUpdatable), varint
    other.push_back(std::byte{0x00});
    write_mlpackage(again, {other, weights});
    CHECK(read_text(again / "Manifest.json") != ours);
    std::filesystem::remove_all(dir.parent_path());
}

TEST_CASE("coreml package: bad destinations and weight paths are errors that name them") {
    const example_model example;
    const auto root = std::filesystem::temp_directory_path() / "anvil_test_coreml_errors";
    std::filesystem::remove_all(root);
    std::filesystem::create_directories(root / "NotAPackage.mlpackage");
    const mlpackage_contents contents{encode_model(example.spec()), example.mil.weights()};
    CHECK_THROWS_WITH_AS(write_mlpackage(root / "model.bin", contents),
                         doctest::Contains("must end in .mlpackage"), io_error);
    CHECK_THROWS_WITH_AS(write_mlpackage(root / "NotAPackage.mlpackage", contents),
                         doctest::Contains("is not a package"), io_error);
    mlpackage_contents climbing = contents;
    climbing.weight_files[0].path = "@model_path/weights/../../escape.bin";
    CHECK_THROWS_WITH(write_mlpackage(root / "Climb.mlpackage", climbing),
                      doctest::Contains("not of the form @model_path/weights/<file>"));
    CHECK_FALSE(std::filesystem::exists(root / "Climb.mlpackage"));
    CHECK_FALSE(std::filesystem::exists(root / "escape.bin"));
    std::filesystem::remove_all(root);
}

TEST_CASE("coreml model: what Core ML's validator refuses is refused here, naming it") {
    const example_model example;
    model_spec none;
    CHECK_THROWS_WITH((void)encode_model(none), doctest::Contains("at least one function"));

    model_spec wrong_shape = example.spec();
    wrong_shape.functions[0].inputs = {{"x", {}, {1, 8}, array_dtype::float16}};
    CHECK_THROWS_WITH((void)encode_model(wrong_shape), doctest::Contains("input"));

    model_spec wrong_type = example.spec();
    wrong_type.functions[0].output_features = {{"y", {}, {1, 4}, array_dtype::float32}};
    CHECK_THROWS_WITH((void)encode_model(wrong_type), doctest::Contains("outputs 0 is y"));

    model_spec two = example.spec();
    two.functions.push_back(two.functions[0]);
    two.functions[1].name = "decode";
    CHECK_THROWS_WITH_AS((void)encode_model(two), doctest::Contains("spec 9"), unsupported_error);

    model_spec bad_name = example.spec();
    bad_name.functions[0].name = "9main";
    CHECK_THROWS_WITH((void)encode_model(bad_name), doctest::Contains("not a MIL identifier"));

    mil_writer no_inputs(mil_dialect::ios16);
    const auto c = no_inputs.const_fp16("c", {1, 4}, std::vector<half>(4, half(1.0f)));
    const auto y = no_inputs.op("relu", "y", {1, 4}, {{"x", {c}}});
    model_spec empty_input;
    empty_input.functions.push_back({"main", &no_inputs.function(), {y}, {}, {}});
    CHECK_THROWS_WITH((void)encode_model(empty_input), doctest::Contains("only from spec 9"));
}

TEST_CASE("coreml model: metadata and several functions go where Model.proto puts them") {
    mil_writer prefill(mil_dialect::ios18), decode(mil_dialect::ios18);
    const auto a = prefill.input("x", {1, 4, 1, 8});
    const auto ya = prefill.op("relu", "y", {1, 4, 1, 8}, {{"x", {a}}});
    const auto b = decode.input("x", {1, 4, 1, 1});
    const auto yb = decode.op("relu", "y", {1, 4, 1, 1}, {{"x", {b}}});
    model_spec spec;
    spec.functions.push_back({"prefill", &prefill.function(), {ya}, {}, {}});
    spec.functions.push_back({"decode", &decode.function(), {yb}, {}, {}});
    spec.default_function = "prefill";
    spec.metadata.author = "anvil";
    spec.metadata.license = "Apache-2.0";
    spec.metadata.user_defined = {{"z", "last"}, {"a", "first"}};
    const auto model = encode_model(spec);
    const std::string text(reinterpret_cast<const char*>(model.data()), model.size());
    CHECK(model[0] == std::byte{0x08});
    CHECK(model[1] == std::byte{9});  // spec 9 for ios18
    // Functions sorted by name in both the description and the program; the default function named.
    CHECK(text.find("decode") < text.find("prefill"));
    CHECK(text.find("\xAA\x01\x07prefill") != std::string::npos);  // defaultFunctionName = 21
    CHECK(text.find("CoreML8") != std::string::npos);
    CHECK(text.find("Apache-2.0") != std::string::npos);
    CHECK(text.find("first") < text.find("last"));
    spec.default_function = "missing";
    CHECK_THROWS_WITH((void)encode_model(spec), doctest::Contains("the default function missing"));
}

TEST_CASE("coreml model: a lowered segment's protobuf holds the statements its MIL text prints") {
    graph g;
    host_tensor w(dtype::f32, dims{64, 64});
    auto values = w.values<float>();
    for (std::size_t i = 0; i < values.size(); ++i)
        values[i] = static_cast<float>(i % 7) * 0.01f;
    auto x = g.input("x", dtype::f16, dims{4, 64});
    auto h = g.apply(op::linear, {x, g.constant(w, "w")});
    auto y = g.apply(op::gelu, {h});
    attributes norm;
    norm.epsilon = 1e-5f;
    host_tensor ones(dtype::f32, dims{64});
    for (auto& v : ones.values<float>())
        v = 1.0f;
    auto z = g.apply(op::layer_norm, {y, g.constant(ones, "gamma"), g.constant(ones, "beta")}, norm);
    const std::vector<value_id> nodes{h.id(), y.id(), z.id()}, inputs{x.id()}, outputs{z.id()};
    for (const mil_dialect dialect : {mil_dialect::ios16, mil_dialect::ios18}) {
        ane::lowering_options options;
        options.dialect = dialect;
        const ane::lowered_segment segment = ane::lower(*g.body(), nodes, inputs, outputs, options);
        model_spec spec;
        spec.functions.push_back({"main", &segment.program, segment.program_outputs, {}, {}});
        const auto model = encode_model(spec);
        const std::string proto(reinterpret_cast<const char*>(model.data()), model.size());
        CHECK(model[1] == std::byte(dialect == mil_dialect::ios16 ? 7 : 9));
        // Every op the text prints is an Operation of the protobuf, in the same order.
        // (Each statement line: `<type> <name> = <op>(...)[name = ...];`.)
        std::size_t at = 0;
        std::size_t count = 0;
        std::istringstream lines(segment.mil);
        for (std::string line; std::getline(lines, line);) {
            const std::size_t equals = line.find(" = ");
            if (!line.starts_with("            ") || equals == std::string::npos) continue;
            const std::string op_type = line.substr(equals + 3, line.find('(', equals) - equals - 3);
            protobuf_writer type;
            type.string(1, op_type);
            const std::string key(reinterpret_cast<const char*>(type.bytes().data()), type.bytes().size());
            const std::size_t found = proto.find(key, at);
            REQUIRE_MESSAGE(found != std::string::npos, "op ", op_type, " is missing from the protobuf");
            at = found + key.size();
            ++count;
        }
        CHECK(count == segment.program.statements.size());
        CHECK(count > 10);
        REQUIRE_FALSE(segment.weights.empty());
        for (const auto& file : segment.weights)
            CHECK(proto.find(file.path) != std::string::npos);
    }
}

}  // namespace test_coreml_package
