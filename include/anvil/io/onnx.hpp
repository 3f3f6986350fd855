// anvil: the ONNX model reader (onnx.proto's ModelProto, read with io/protobuf.hpp; no generated code). A
// model file is memory-mapped and parsed in one step: its opsets, and its graph's nodes (op type, domain,
// inputs, outputs, attributes, subgraphs), initializers (dims, type, data as raw bytes viewed in the mapping,
// typed lists, or external data), inputs, outputs and value infos with their element types and shapes,
// symbolic dims kept by name. Every byte is hostile: lengths, wire types, tensor sizes against their dims,
// nesting depth, and external data (a file inside the model's folder, no `..`, no absolute path, offset and
// length inside it) are checked, and every failure is an anvil::format_error naming the file, the message
// path and the defect. Field numbers: onnx.proto (ONNX 1.12), ModelProto 1/2/3/7/8, GraphProto
// 1/2/5/11/12/13, NodeProto 1-5/7, AttributeProto 1-11/20, TensorProto 1/2/4-11/13/14, ValueInfoProto 1/2,
// TypeProto 1/4/5/8/9, TensorShapeProto 1 (Dimension 1/2), OperatorSetIdProto 1/2.
#pragma once

#include "anvil/compilation.hpp"
#include "anvil/core/dtype.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/core/mapped_file.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace anvil {

// TensorProto.DataType.
enum class onnx_type : std::int32_t {
    undefined = 0,
    float32 = 1,
    uint8 = 2,
    int8 = 3,
    uint16 = 4,
    int16 = 5,
    int32 = 6,
    int64 = 7,
    string = 8,
    boolean = 9,
    float16 = 10,
    float64 = 11,
    uint32 = 12,
    uint64 = 13,
    complex64 = 14,
    complex128 = 15,
    bfloat16 = 16,
};

// "float32", "int64", ...; "type 42" for a number onnx.proto does not define.
[[nodiscard]] std::string onnx_type_name(std::int32_t type);
// Bytes per element, 0 for strings and undefined types.
[[nodiscard]] std::size_t onnx_type_size(std::int32_t type) noexcept;
// anvil's dtype for an ONNX element type, when anvil has one.
[[nodiscard]] std::optional<dtype> onnx_dtype(std::int32_t type) noexcept;

// A dimension of a declared shape: a number, or a name (dim_param) that the given inputs resolve; neither
// when the model leaves it unknown.
struct onnx_dim {
    std::optional<std::int64_t> value;
    std::string param;
};

// A graph input, output or value info: a tensor's element type and (when declared) shape, or another kind
// of value (a sequence, map, optional or sparse tensor), which `kind` names.
struct onnx_value_info {
    std::string name;
    std::string kind = "tensor";
    std::int32_t elem_type = 0;
    bool has_shape = false;
    std::vector<onnx_dim> shape;
};

// A tensor: an initializer, a Constant node's value or a tensor attribute. Its data is exactly one of raw
// bytes (raw_data, or external data: views of a mapping the model keeps), typed lists (float_data, int32_data
// and the 16- and 8-bit types stored there, int64_data, double_data, uint64_data, string_data) or nothing (an
// empty tensor); the reader checked that it holds element_count() values.
struct onnx_tensor {
    std::string name;
    std::int32_t data_type = 0;
    std::vector<std::int64_t> dims;
    std::span<const std::byte> raw;
    std::vector<float> floats;
    std::vector<std::int64_t> integers;  // int32_data, int64_data or uint64_data (as stored bits)
    std::vector<double> doubles;
    std::vector<std::string> strings;
    std::string external_location;  // set when the data lives in another file of the model's folder
    // Keeps `raw` alive when it views a mapped file (the model's or an external one); null when it views
    // bytes the caller keeps (onnx_model::parse, parse_onnx_tensor).
    std::shared_ptr<const void> owner;

    [[nodiscard]] std::uint64_t element_count() const;
    // The values as anvil's host bytes of onnx_dtype(data_type): raw data as stored, typed lists narrowed.
    [[nodiscard]] std::vector<std::byte> to_bytes() const;
};

// A TensorProto on its own, as ONNX's test data stores each input and output (test_data_set_N/input_0.pb).
// Raw data stays a view of `bytes`, which the caller keeps alive; external data is refused (no folder).
[[nodiscard]] onnx_tensor parse_onnx_tensor(std::span<const std::byte> bytes, std::string_view source_name);
// The tensor's values in anvil's host layout: a view of the mapped file when its raw data lies there aligned
// for its type (a model's weights are not copied), else a copy. An unsupported_error naming it when anvil has
// no dtype for its element type (strings, complex numbers).
[[nodiscard]] host_tensor onnx_host_tensor(const onnx_tensor& t);

struct onnx_graph;

struct onnx_attribute {
    std::string name;
    std::int32_t type = 0;  // AttributeProto.AttributeType: 1 float, 2 int, 3 string, 4 tensor, 5 graph,
                            // 6 floats, 7 ints, 8 strings, 9 tensors, 10 graphs
    float f = 0.0f;
    std::int64_t i = 0;
    std::string s;
    std::vector<float> floats;
    std::vector<std::int64_t> ints;
    std::vector<std::string> strings;
    std::vector<onnx_tensor> tensors;                 // t (one), or tensors
    std::vector<std::shared_ptr<onnx_graph>> graphs;  // g (one), or graphs

    // "float", "ints", ...
    [[nodiscard]] std::string type_name() const;
};

struct onnx_node {
    std::string name;
    std::string op_type;
    std::string domain;               // "" and "ai.onnx" are the default domain
    std::vector<std::string> inputs;  // "" marks an omitted optional input
    std::vector<std::string> outputs;
    std::vector<onnx_attribute> attributes;

    [[nodiscard]] const onnx_attribute* find(std::string_view attribute) const noexcept;
};

struct onnx_graph {
    std::string name;
    std::vector<onnx_node> nodes;
    std::vector<onnx_tensor> initializers;
    std::vector<onnx_value_info> inputs, outputs, value_info;
};

struct onnx_opset {
    std::string domain;  // "" (ai.onnx), "ai.onnx.ml", ...
    std::int64_t version = 0;
};

class onnx_model {
public:
    // Maps and parses `path`; external data is read from `path`'s folder.
    [[nodiscard]] static onnx_model open(const std::filesystem::path& path);
    // Parses bytes the caller keeps alive; external data is refused (no folder), `source_name` names errors.
    [[nodiscard]] static onnx_model parse(std::span<const std::byte> bytes, std::string source_name);

    [[nodiscard]] const std::string& source_name() const noexcept { return source_; }
    [[nodiscard]] std::int64_t ir_version() const noexcept { return ir_version_; }
    [[nodiscard]] const std::string& producer() const noexcept { return producer_; }
    [[nodiscard]] const std::vector<onnx_opset>& opsets() const noexcept { return opsets_; }
    // The version imported for `domain` ("" and "ai.onnx" alike), or nullopt.
    [[nodiscard]] std::optional<std::int64_t> opset(std::string_view domain = "") const noexcept;
    [[nodiscard]] const onnx_graph& graph() const noexcept { return *graph_; }
    // Bytes of initializer data, raw and external (typed lists counted at their element type's size).
    [[nodiscard]] std::uint64_t initializer_bytes() const;

private:
    void parse_bytes(std::span<const std::byte> bytes, const std::filesystem::path* folder);

    std::string source_;
    std::int64_t ir_version_ = 0;
    std::string producer_;
    std::vector<onnx_opset> opsets_;
    std::shared_ptr<onnx_graph> graph_ = std::make_shared<onnx_graph>();
    std::shared_ptr<const mapped_file> mapping_;
    std::map<std::string, std::shared_ptr<const mapped_file>, std::less<>> external_;
};

}  // namespace anvil

#if ANVIL_DEFINITIONS
#include "anvil/io/onnx-inl.hpp"
#endif
