// Tests of the ONNX model reader (io/onnx.hpp, io/protobuf.hpp). Where the expected values come from:
// tools/fixtures/make_onnx_fixtures.py wrote the models with the `onnx` package itself (raw and typed tensor
// data, a Constant node, subgraphs, external data) and recorded in expected.json what onnx reads back from
// each; the malformed corpus (one defect per file, encoded by that script's own protobuf writer) lists the
// phrase each error must contain.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>
#include <anvil/io/onnx.hpp>

#include "malformed_corpus.hpp"
#include "model_test_support.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace test_onnx_reader {

using anvil::onnx_model;
using anvil_test::data_path;

// A tensor's values as doubles, through to_bytes() and its anvil dtype.
std::vector<double> values_of(const anvil::onnx_tensor& t) {
    const std::vector<std::byte> bytes = t.to_bytes();
    const std::optional<anvil::dtype> type = anvil::onnx_dtype(t.data_type);
    REQUIRE(type.has_value());
    const auto count = static_cast<std::int64_t>(t.element_count());
    const anvil::host_tensor host(*type, anvil::dims{count}, bytes.data(), nullptr);
    if (*type == anvil::dtype::f64) {  // to the last bit, not through float
        const auto doubles = host.values<double>();
        return {doubles.begin(), doubles.end()};
    }
    const std::vector<float> floats = host.to_f32();
    return {floats.begin(), floats.end()};
}

// The names op_counts() in the generator uses: the op type, counting subgraphs' nodes.
void count_ops(const anvil::onnx_graph& g, std::map<std::string, std::int64_t>& counts) {
    for (const anvil::onnx_node& n : g.nodes) {
        ++counts[n.op_type];
        for (const anvil::onnx_attribute& a : n.attributes)
            for (const auto& sub : a.graphs)
                count_ops(*sub, counts);
    }
}

void check_values(const std::vector<anvil::onnx_value_info>& got, const anvil::json::value& want) {
    const auto& list = want.as_array();
    REQUIRE(got.size() == list.size());
    for (std::size_t i = 0; i < list.size(); ++i) {
        CAPTURE(i);
        CHECK(got[i].name == list[i].find("name")->as_string());
        CHECK(got[i].elem_type == list[i].find("type")->as_int());
        const auto& shape = list[i].find("shape")->as_array();
        REQUIRE(got[i].shape.size() == shape.size());
        for (std::size_t d = 0; d < shape.size(); ++d) {
            if (shape[d].type() == anvil::json::kind::string) {
                CHECK_FALSE(got[i].shape[d].value.has_value());
                CHECK(got[i].shape[d].param == shape[d].as_string());
            } else {
                CHECK(got[i].shape[d].value == shape[d].as_int());
            }
        }
    }
}

TEST_CASE("onnx reader: models written by the onnx package read back as onnx reads them") {
    const anvil::json::value expected = anvil::json::parse_file(data_path("onnx/expected.json"));
    for (const auto& entry : expected.as_object()) {
        const std::string& name = entry.first;
        const anvil::json::value& want = entry.second;
        CAPTURE(name);
        const onnx_model model = onnx_model::open(data_path("onnx/" + name));
        CHECK(model.ir_version() == want.find("ir_version")->as_int());
        for (const auto& [domain, version] : want.find("opsets")->as_object())
            CHECK(model.opset(domain) == version.as_int());
        CHECK(model.opsets().size() == want.find("opsets")->as_object().size());
        check_values(model.graph().inputs, *want.find("inputs"));
        check_values(model.graph().outputs, *want.find("outputs"));
        std::map<std::string, std::int64_t> counts;
        count_ops(model.graph(), counts);
        const auto& want_counts = want.find("op_counts")->as_object();
        CHECK(counts.size() == want_counts.size());
        for (const auto& [op, count] : want_counts)
            CHECK(counts[op] == count.as_int());
        const auto& initializers = want.find("initializers")->as_array();
        REQUIRE(model.graph().initializers.size() == initializers.size());
        for (std::size_t i = 0; i < initializers.size(); ++i) {
            const anvil::onnx_tensor& t = model.graph().initializers[i];
            CAPTURE(t.name);
            CHECK(t.name == initializers[i].find("name")->as_string());
            CHECK(t.data_type == initializers[i].find("type")->as_int());
            std::vector<std::int64_t> dims;
            for (const auto& d : initializers[i].find("dims")->as_array())
                dims.push_back(d.as_int());
            CHECK(t.dims == dims);
            const std::vector<double> got = values_of(t);
            const auto& values = initializers[i].find("values")->as_array();
            REQUIRE(got.size() == values.size());
            for (std::size_t v = 0; v < values.size(); ++v)
                CHECK(got[v] == values[v].as_double());
        }
    }
}

TEST_CASE("onnx reader: nodes, attributes, a Constant's tensor, subgraphs and external data") {
    const onnx_model typed = onnx_model::open(data_path("onnx/typed_data.onnx"));
    const auto& nodes = typed.graph().nodes;
    REQUIRE(nodes.size() == 8);
    CHECK(nodes[0].op_type == "Constant");
    CHECK(nodes[0].outputs == std::vector<std::string>{"bias"});
    const anvil::onnx_attribute* value = nodes[0].find("value");
    REQUIRE(value != nullptr);
    CHECK(value->type_name() == "tensor");
    REQUIRE(value->tensors.size() == 1);
    CHECK(values_of(value->tensors[0]) == std::vector<double>{1, 2, 3});
    CHECK(nodes[1].inputs == std::vector<std::string>{"a", "scale"});
    CHECK(nodes[4].find("perm")->ints == std::vector<std::int64_t>{1, 0});
    CHECK(nodes[5].find("alpha")->f == 0.25f);
    CHECK(nodes[6].find("keepdims")->i == 1);
    CHECK(nodes[6].name == "reduce");
    CHECK(typed.opset("ai.onnx.ml") == 2);
    CHECK_FALSE(typed.opset("com.microsoft").has_value());

    const onnx_model branches = onnx_model::open(data_path("onnx/subgraphs.onnx"));
    const anvil::onnx_attribute* else_branch = branches.graph().nodes.at(0).find("else_branch");
    REQUIRE(else_branch != nullptr);
    REQUIRE(else_branch->graphs.size() == 1);
    CHECK(else_branch->graphs[0]->nodes.size() == 2);
    CHECK(else_branch->graphs[0]->outputs.at(0).name == "else_r");

    // The larger weight lives in external.onnx.data: a view of that file's mapping.
    const onnx_model external = onnx_model::open(data_path("onnx/external.onnx"));
    REQUIRE(external.graph().initializers.size() == 2);
    CHECK(external.graph().initializers[0].external_location == "external.onnx.data");
    CHECK(external.graph().initializers[1].external_location.empty());
    CHECK(external.initializer_bytes() == 64 * 4 + 8 * 4);
    // Bytes parsed without their file have no folder to take external data from.
    const anvil::mapped_file file = anvil::mapped_file::open(data_path("onnx/external.onnx"));
    CHECK_THROWS_WITH_AS((void)onnx_model::parse(file.bytes(), "external.onnx"),
                         doctest::Contains("external data ('external.onnx.data') needs the model's folder"),
                         anvil::format_error);
}

TEST_CASE("onnx reader: initializers in a mapped file become views of it, not copies") {
    // external.onnx keeps its weights in external.onnx.data (mapped page-aligned) and small ones inline.
    const onnx_model model = onnx_model::open(data_path("onnx/external.onnx"));
    int viewed = 0;
    for (const anvil::onnx_tensor& t : model.graph().initializers) {
        CAPTURE(t.name);
        const anvil::host_tensor h = anvil::onnx_host_tensor(t);
        if (t.raw.empty()) continue;
        CHECK(t.owner != nullptr);
        REQUIRE(h.byte_size() == t.raw.size());
        CHECK(std::memcmp(h.raw(), t.raw.data(), t.raw.size()) == 0);
        const bool aligned =
            reinterpret_cast<std::uintptr_t>(t.raw.data()) % anvil::dtype_size(h.type()) == 0;
        // Aligned data is viewed in place; misaligned data is copied (kernels read whole elements).
        CHECK((h.raw() == static_cast<const void*>(t.raw.data())) == aligned);
        viewed += aligned ? 1 : 0;
    }
    CHECK(viewed >= 1);
    // Bytes the caller keeps are copied: the tensor must not outlive them.
    const anvil::mapped_file file = anvil::mapped_file::open(data_path("onnx/tiny.onnx"));
    const onnx_model parsed = onnx_model::parse(file.bytes(), "tiny.onnx");
    for (const anvil::onnx_tensor& t : parsed.graph().initializers) {
        CHECK(t.owner == nullptr);
        if (!t.raw.empty()) CHECK(anvil::onnx_host_tensor(t).raw() != static_cast<const void*>(t.raw.data()));
    }
}

TEST_CASE("onnx reader: every file of the malformed corpus is refused with an error that names its defect") {
    check_malformed_corpus("onnx", 20,
                           [](const std::filesystem::path& path) { (void)onnx_model::open(path); });
}

}  // namespace test_onnx_reader
