// anvil: the ONNX model reader's definitions (see onnx.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "anvil/core/checked_math.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/mapped_file.hpp"
#include "anvil/core/shape.hpp"
#include "anvil/io/onnx.hpp"
#include "anvil/io/protobuf.hpp"

namespace anvil {

using detail::message;

ANVIL_INLINE std::string onnx_type_name(std::int32_t type) {
    constexpr std::string_view names[] = {
        "undefined", "float32", "uint8",   "int8",   "uint16", "int16",     "int32",      "int64",   "string",
        "bool",      "float16", "float64", "uint32", "uint64", "complex64", "complex128", "bfloat16"};
    if (type >= 0 && type < static_cast<std::int32_t>(std::size(names)))
        return std::string(names[static_cast<std::size_t>(type)]);
    return detail::message("type ", type);
}

ANVIL_INLINE std::size_t onnx_type_size(std::int32_t type) noexcept {
    switch (static_cast<onnx_type>(type)) {
        case onnx_type::uint8:
        case onnx_type::int8:
        case onnx_type::boolean:
            return 1;
        case onnx_type::uint16:
        case onnx_type::int16:
        case onnx_type::float16:
        case onnx_type::bfloat16:
            return 2;
        case onnx_type::float32:
        case onnx_type::int32:
        case onnx_type::uint32:
            return 4;
        case onnx_type::int64:
        case onnx_type::float64:
        case onnx_type::uint64:
        case onnx_type::complex64:
            return 8;
        case onnx_type::complex128:
            return 16;
        default:
            return 0;
    }
}

ANVIL_INLINE std::optional<dtype> onnx_dtype(std::int32_t type) noexcept {
    switch (static_cast<onnx_type>(type)) {
        case onnx_type::float32:
            return dtype::f32;
        case onnx_type::uint8:
            return dtype::u8;
        case onnx_type::int8:
            return dtype::i8;
        case onnx_type::uint16:
            return dtype::u16;
        case onnx_type::int16:
            return dtype::i16;
        case onnx_type::int32:
            return dtype::i32;
        case onnx_type::int64:
            return dtype::i64;
        case onnx_type::boolean:
            return dtype::boolean;
        case onnx_type::float16:
            return dtype::f16;
        case onnx_type::float64:
            return dtype::f64;
        case onnx_type::uint32:
            return dtype::u32;
        case onnx_type::uint64:
            return dtype::u64;
        case onnx_type::bfloat16:
            return dtype::bf16;
        default:
            return std::nullopt;
    }
}

ANVIL_INLINE std::uint64_t onnx_tensor::element_count() const {
    std::uint64_t count = 1;
    for (const std::int64_t d : dims) {
        const auto next = detail::checked_mul(count, static_cast<std::uint64_t>(d));
        if (d < 0 || !next) return std::numeric_limits<std::uint64_t>::max();
        count = *next;
    }
    return count;
}

ANVIL_INLINE std::vector<std::byte> onnx_tensor::to_bytes() const {
    const std::size_t size = onnx_type_size(data_type);
    const auto count = static_cast<std::size_t>(element_count());
    std::vector<std::byte> out(count * size);
    if (!raw.empty()) {
        std::memcpy(out.data(), raw.data(), out.size());
    } else if (!floats.empty()) {
        std::memcpy(out.data(), floats.data(), out.size());
    } else if (!doubles.empty()) {
        std::memcpy(out.data(), doubles.data(), out.size());
    } else {
        // int32_data holds int32 and the narrower integer, bool and 16-bit float types (their bits);
        // int64_data and uint64_data their own: each value's low `size` bytes, little-endian.
        for (std::size_t i = 0; i < count && i < integers.size(); ++i) {
            const auto bits = static_cast<std::uint64_t>(integers[i]);
            for (std::size_t b = 0; b < size; ++b)
                out[i * size + b] = static_cast<std::byte>((bits >> (8 * b)) & 0xffu);
        }
    }
    return out;
}

ANVIL_INLINE std::string onnx_attribute::type_name() const {
    constexpr std::string_view names[] = {"undefined",      "float",      "int",        "string",
                                          "tensor",         "graph",      "floats",     "ints",
                                          "strings",        "tensors",    "graphs",     "sparse tensor",
                                          "sparse tensors", "type proto", "type protos"};
    if (type >= 0 && type < static_cast<std::int32_t>(std::size(names)))
        return std::string(names[static_cast<std::size_t>(type)]);
    return detail::message("type ", type);
}

ANVIL_INLINE const onnx_attribute* onnx_node::find(std::string_view attribute) const noexcept {
    for (const onnx_attribute& a : attributes)
        if (a.name == attribute) return &a;
    return nullptr;
}

namespace detail {

// Parses one model's messages: the folder external data may come from (none for bytes given without a
// file), the external files mapped so far (each once), and the nesting depth (subgraphs in attributes, types
// in types), bounded so a crafted file cannot exhaust the stack.
class onnx_parser {
public:
    onnx_parser(const std::filesystem::path* folder,
                std::map<std::string, std::shared_ptr<const mapped_file>, std::less<>>& external,
                std::shared_ptr<const void> owner = nullptr)
        : folder_(folder), external_(external), owner_(std::move(owner)) {}

    void graph(protobuf_reader r, onnx_graph& g) {
        const depth_guard guard(*this, r);
        protobuf_field f;
        while (r.next(f)) {
            switch (f.number) {
                case 1:
                    g.nodes.push_back(node(r.nested(f, message(r.where(), ".node[", g.nodes.size(), "]"))));
                    break;
                case 2:
                    g.name = std::string(r.string(f, "name"));
                    break;
                case 5:
                    g.initializers.push_back(
                        tensor(r.nested(f, message(r.where(), ".initializer[", g.initializers.size(), "]"))));
                    break;
                case 11:
                    g.inputs.push_back(
                        value_info(r.nested(f, message(r.where(), ".input[", g.inputs.size(), "]"))));
                    break;
                case 12:
                    g.outputs.push_back(
                        value_info(r.nested(f, message(r.where(), ".output[", g.outputs.size(), "]"))));
                    break;
                case 13:
                    g.value_info.push_back(value_info(
                        r.nested(f, message(r.where(), ".value_info[", g.value_info.size(), "]"))));
                    break;
                case 15:
                    r.fail(f, "sparse initializers are not supported");
                    break;
                default:
                    break;  // doc_string, quantization annotations: not needed
            }
        }
    }

    onnx_node node(protobuf_reader r) {
        onnx_node n;
        protobuf_field f;
        while (r.next(f)) {
            switch (f.number) {
                case 1:
                    n.inputs.emplace_back(r.string(f, "input"));
                    break;
                case 2:
                    n.outputs.emplace_back(r.string(f, "output"));
                    break;
                case 3:
                    n.name = std::string(r.string(f, "name"));
                    break;
                case 4:
                    n.op_type = std::string(r.string(f, "op_type"));
                    break;
                case 5:
                    n.attributes.push_back(
                        attribute(r.nested(f, message(r.where(), ".attribute[", n.attributes.size(), "]"))));
                    break;
                case 7:
                    n.domain = std::string(r.string(f, "domain"));
                    break;
                default:
                    break;
            }
        }
        return n;
    }

    onnx_attribute attribute(protobuf_reader r) {
        const depth_guard guard(*this, r);
        onnx_attribute a;
        protobuf_field f;
        while (r.next(f)) {
            switch (f.number) {
                case 1:
                    a.name = std::string(r.string(f, "name"));
                    break;
                case 2:
                    a.f = r.float32(f, "f");
                    break;
                case 3:
                    a.i = r.int64(f, "i");
                    break;
                case 4:
                    a.s = std::string(r.string(f, "s"));
                    break;
                case 5:
                    a.tensors.push_back(tensor(r.nested(f, message(r.where(), ".t"))));
                    break;
                case 6:
                    a.graphs.push_back(subgraph(r.nested(f, message(r.where(), ".g"))));
                    break;
                case 7:
                    r.append_floats(f, "floats", a.floats);
                    break;
                case 8:
                    r.append_int64s(f, "ints", a.ints);
                    break;
                case 9:
                    a.strings.emplace_back(r.string(f, "strings"));
                    break;
                case 10:
                    a.tensors.push_back(
                        tensor(r.nested(f, message(r.where(), ".tensors[", a.tensors.size(), "]"))));
                    break;
                case 11:
                    a.graphs.push_back(
                        subgraph(r.nested(f, message(r.where(), ".graphs[", a.graphs.size(), "]"))));
                    break;
                case 20:
                    a.type = static_cast<std::int32_t>(r.int64(f, "type"));
                    break;
                default:
                    break;
            }
        }
        return a;
    }

    std::shared_ptr<onnx_graph> subgraph(protobuf_reader r) {
        auto g = std::make_shared<onnx_graph>();
        graph(std::move(r), *g);
        return g;
    }

    onnx_value_info value_info(protobuf_reader r) {
        onnx_value_info v;
        protobuf_field f;
        while (r.next(f)) {
            if (f.number == 1) v.name = std::string(r.string(f, "name"));
            if (f.number == 2) type(r.nested(f, message(r.where(), ".type")), v);
        }
        return v;
    }

    // TypeProto: a tensor's element type and shape; another kind is named (its element types are not read).
    void type(protobuf_reader r, onnx_value_info& v) {
        const depth_guard guard(*this, r);
        protobuf_field f;
        while (r.next(f)) {
            switch (f.number) {
                case 1:
                    tensor_type(r.nested(f, message(r.where(), ".tensor_type")), v);
                    break;
                case 4:
                    v.kind = "sequence";
                    break;
                case 5:
                    v.kind = "map";
                    break;
                case 8:
                    v.kind = "sparse tensor";
                    break;
                case 9:
                    v.kind = "optional";
                    break;
                default:
                    break;
            }
        }
    }

    void tensor_type(protobuf_reader r, onnx_value_info& v) {
        protobuf_field f;
        while (r.next(f)) {
            if (f.number == 1) v.elem_type = static_cast<std::int32_t>(r.int64(f, "elem_type"));
            if (f.number == 2) {
                v.has_shape = true;
                protobuf_reader shape = r.nested(f, message(r.where(), ".shape"));
                protobuf_field d;
                while (shape.next(d)) {
                    if (d.number != 1) continue;
                    protobuf_reader dim =
                        shape.nested(d, message(shape.where(), ".dim[", v.shape.size(), "]"));
                    onnx_dim value;
                    protobuf_field e;
                    while (dim.next(e)) {
                        if (e.number == 1) value.value = dim.int64(e, "dim_value");
                        if (e.number == 2) value.param = std::string(dim.string(e, "dim_param"));
                    }
                    if (value.value && *value.value < 0) {
                        throw format_error(
                            message(dim.where(), ": dim_value ", *value.value, " is negative"));
                    }
                    v.shape.push_back(std::move(value));
                }
            }
        }
    }

    onnx_tensor tensor(protobuf_reader r) {
        onnx_tensor t;
        bool external = false;
        std::vector<std::pair<std::string, std::string>> external_data;
        protobuf_field f;
        while (r.next(f)) {
            switch (f.number) {
                case 1:
                    r.append_int64s(f, "dims", t.dims);
                    break;
                case 2:
                    t.data_type = static_cast<std::int32_t>(r.int64(f, "data_type"));
                    break;
                case 3:
                    r.fail(f, "segmented tensors are not supported");
                    break;
                case 4:
                    r.append_floats(f, "float_data", t.floats);
                    break;
                case 5:
                    r.append_int64s(f, "int32_data", t.integers);
                    break;
                case 6:
                    t.strings.emplace_back(r.string(f, "string_data"));
                    break;
                case 7:
                    r.append_int64s(f, "int64_data", t.integers);
                    break;
                case 8:
                    t.name = std::string(r.string(f, "name"));
                    break;
                case 9:
                    t.raw = r.bytes(f, "raw_data");
                    t.owner = owner_;
                    break;
                case 10:
                    r.append_doubles(f, "double_data", t.doubles);
                    break;
                case 11:
                    r.append_int64s(f, "uint64_data", t.integers);
                    break;
                case 13: {
                    protobuf_reader entry = r.nested(f, message(r.where(), ".external_data"));
                    std::pair<std::string, std::string> kv;
                    protobuf_field e;
                    while (entry.next(e)) {
                        if (e.number == 1) kv.first = std::string(entry.string(e, "key"));
                        if (e.number == 2) kv.second = std::string(entry.string(e, "value"));
                    }
                    external_data.push_back(std::move(kv));
                    break;
                }
                case 14:
                    external = r.int64(f, "data_location") == 1;
                    break;
                default:
                    break;
            }
        }
        const std::string where = t.name.empty() ? r.where() : message(r.where(), " ('", t.name, "')");
        for (const std::int64_t d : t.dims)
            if (d < 0) throw format_error(message(where, ": dimension ", d, " is negative"));
        const std::uint64_t count = t.element_count();
        if (count == std::numeric_limits<std::uint64_t>::max())
            throw format_error(message(where, ": its dims' product overflows"));
        if (t.data_type == 0 || (onnx_type_size(t.data_type) == 0 && t.data_type != 8)) {
            throw format_error(message(where, ": data_type ", onnx_type_name(t.data_type),
                                       t.data_type == 0 ? " (unset)" : " is not a tensor element type"));
        }
        if (external) read_external(t, where, external_data);
        check_data(t, where, count);
        return t;
    }

private:
    struct depth_guard {
        depth_guard(onnx_parser& p, const protobuf_reader& r) : parser(p) {
            if (++parser.depth_ > max_depth) {
                throw format_error(message(r.where(), ": nested more than ", max_depth,
                                           " deep (subgraphs or types within each other)"));
            }
        }
        ~depth_guard() { --parser.depth_; }
        depth_guard(const depth_guard&) = delete;
        depth_guard& operator=(const depth_guard&) = delete;
        onnx_parser& parser;
    };
    static constexpr int max_depth = 64;

    // The data must be exactly the dims' element count: raw bytes of the type's size, or that many values in
    // the one typed list the type uses.
    static void check_data(const onnx_tensor& t, const std::string& where, std::uint64_t count) {
        const std::size_t size = onnx_type_size(t.data_type);
        const int lists = int{!t.raw.empty()} + int{!t.floats.empty()} + int{!t.integers.empty()} +
                          int{!t.doubles.empty()} + int{!t.strings.empty()};
        if (lists > 1) throw format_error(message(where, ": holds its data in more than one field"));
        std::uint64_t held = 0;
        if (!t.raw.empty()) {
            if (size == 0) throw format_error(message(where, ": raw_data for string elements"));
            if (t.raw.size() % size != 0 || t.raw.size() / size != count) {
                throw format_error(message(where, ": raw_data holds ", t.raw.size(), " bytes, and ", count,
                                           " ", onnx_type_name(t.data_type), " elements (dims ",
                                           extents_to_string(t.dims, false), ") take ", count * size));
            }
            return;
        }
        const auto type = static_cast<onnx_type>(t.data_type);
        if (!t.floats.empty()) {
            if (type != onnx_type::float32 && type != onnx_type::complex64)
                throw format_error(
                    message(where, ": float_data for ", onnx_type_name(t.data_type), " elements"));
            held = type == onnx_type::complex64 ? t.floats.size() / 2 : t.floats.size();
        } else if (!t.doubles.empty()) {
            if (type != onnx_type::float64)
                throw format_error(
                    message(where, ": double_data for ", onnx_type_name(t.data_type), " elements"));
            held = t.doubles.size();
        } else if (!t.integers.empty()) {
            held = t.integers.size();
        } else if (!t.strings.empty()) {
            if (type != onnx_type::string)
                throw format_error(
                    message(where, ": string_data for ", onnx_type_name(t.data_type), " elements"));
            held = t.strings.size();
        }
        if (held != count && !(held == 0 && count == 0)) {
            if (held == 0) {
                throw format_error(message(where, ": no data for its ", count, " elements (dims ",
                                           extents_to_string(t.dims, false), ")"));
            }
            throw format_error(message(where, ": ", held, " values for ", count, " elements (dims ",
                                       extents_to_string(t.dims, false), ")"));
        }
    }

    // External data: `location` relative to the model's folder and inside it; `offset` and `length` (default:
    // the rest of the file) inside the file. The file is mapped once per model.
    void read_external(onnx_tensor& t, const std::string& where,
                       const std::vector<std::pair<std::string, std::string>>& entries) {
        std::string location;
        std::optional<std::uint64_t> offset, length;
        for (const auto& [key, value] : entries) {
            if (key == "location") location = value;
            if (key == "offset" || key == "length") {
                std::uint64_t number = 0;
                const char* end = value.data() + value.size();
                const auto parsed = std::from_chars(value.data(), end, number);
                if (value.empty() || parsed.ec != std::errc{} || parsed.ptr != end) {
                    throw format_error(message(where, ": external data ", key, " '", value,
                                               "' is not a non-negative integer"));
                }
                (key == "offset" ? offset : length) = number;
            }
        }
        if (location.empty()) throw format_error(message(where, ": external data without a location"));
        if (folder_ == nullptr) {
            throw format_error(message(where, ": external data ('", location,
                                       "') needs the model's folder: open the model from its file"));
        }
        const std::filesystem::path relative(location);
        bool escapes = relative.is_absolute() || relative.has_root_name() || relative.has_root_directory();
        for (const auto& part : relative)
            if (part == "..") escapes = true;
        if (escapes) {
            throw format_error(
                message(where, ": external data location '", location,
                        "' leaves the model's folder (it must be a relative path without '..')"));
        }
        auto found = external_.find(location);
        if (found == external_.end()) {
            const std::filesystem::path path = *folder_ / relative;
            std::error_code ec;
            const auto canonical = std::filesystem::weakly_canonical(path, ec);
            const auto root = std::filesystem::weakly_canonical(*folder_, ec);
            const auto mismatch = std::mismatch(root.begin(), root.end(), canonical.begin(), canonical.end());
            if (ec || mismatch.first != root.end()) {
                throw format_error(message(where, ": external data location '", location,
                                           "' resolves outside the model's folder"));
            }
            if (!std::filesystem::is_regular_file(path, ec)) {
                throw format_error(
                    message(where, ": external data file '", path.string(), "' does not exist"));
            }
            found = external_.emplace(location, std::make_shared<const mapped_file>(mapped_file::open(path)))
                        .first;
        }
        const std::span<const std::byte> bytes = found->second->bytes();
        const std::uint64_t begin = offset.value_or(0);
        if (begin > bytes.size()) {
            throw format_error(message(where, ": external data offset ", begin, " is past the end of '",
                                       location, "' (", bytes.size(), " bytes)"));
        }
        const std::uint64_t size = length.value_or(bytes.size() - begin);
        if (size > bytes.size() - begin) {
            throw format_error(message(where, ": external data at offset ", begin, ", length ", size,
                                       ", runs past the end of '", location, "' (", bytes.size(), " bytes)"));
        }
        if (!t.raw.empty() || !t.floats.empty() || !t.integers.empty() || !t.doubles.empty())
            throw format_error(message(where, ": holds data in the model as well as external data"));
        t.raw = bytes.subspan(static_cast<std::size_t>(begin), static_cast<std::size_t>(size));
        t.owner = found->second;
        t.external_location = location;
        if (size == 0 && t.element_count() != 0) {
            throw format_error(
                message(where, ": external data of 0 bytes for ", t.element_count(), " elements"));
        }
    }

    const std::filesystem::path* folder_;
    std::map<std::string, std::shared_ptr<const mapped_file>, std::less<>>& external_;
    std::shared_ptr<const void> owner_;
    int depth_ = 0;
};

// The structural rules of ONNX's checker (onnx/checker.cc: check_graph, check_node), so that a model the
// checker rejects is refused when it is read — by `anvil info` as by the importer — with one line naming the
// node or value: every node has an op_type, from a domain an opset_import declares; each value has one
// producer (SSA: no node output repeats another's or a graph input's or an initializer's name); nodes come in
// topological order, each input a graph input, an initializer, an earlier node's output or (in a subgraph) a
// value of an enclosing graph, so a cycle is named as an input made by a later node; every graph output is
// produced. `outer` holds the names an enclosing graph has defined so far.
class onnx_graph_checker {
public:
    onnx_graph_checker(std::string_view source, const std::vector<onnx_opset>& opsets,
                       std::int64_t ir_version)
        : source_(source), opsets_(opsets), ir_version_(ir_version) {}

    void check(const onnx_graph& g, const std::set<std::string, std::less<>>& outer, bool subgraph) const {
        // The messages are built only when a check fails: a large model has many thousand nodes.
        const auto where = [&] { return message(source_, ": graph '", g.name, "'"); };
        std::map<std::string, std::size_t, std::less<>> defined;  // name -> what made it (made_by_*, a node)
        for (const onnx_value_info& input : g.inputs)
            if (!input.name.empty()) defined.emplace(input.name, made_by_input);
        for (const onnx_tensor& t : g.initializers)
            if (!t.name.empty()) defined.emplace(t.name, made_by_initializer);
        // Which node makes each name, for naming a cycle (an input made only by a later node).
        std::map<std::string, std::size_t, std::less<>> maker;
        for (std::size_t i = 0; i < g.nodes.size(); ++i)
            for (const std::string& output : g.nodes[i].outputs)
                if (!output.empty()) maker.emplace(output, i);
        std::set<std::string, std::less<>> visible = outer;
        for (const auto& [name, how] : defined)
            visible.insert(name);
        for (std::size_t i = 0; i < g.nodes.size(); ++i) {
            const onnx_node& n = g.nodes[i];
            const auto node = [&] { return describe(i, n); };
            if (n.op_type.empty())
                throw format_error(message(where(), ": ", node(), " has an empty op_type"));
            if (!domain_declared(n.domain)) {
                throw format_error(message(where(), ": ", node(), " is in the domain '", n.domain,
                                           "', which no opset_import of the model declares"));
            }
            for (const std::string& input : n.inputs) {
                if (input.empty() || visible.contains(input)) continue;
                const auto later = maker.find(input);
                if (later != maker.end()) {
                    throw format_error(
                        message(where(), ": input '", input, "' of ", node(), " is made by a later node, ",
                                describe(later->second, g.nodes[later->second]),
                                ": nodes are not in topological order, or the graph has a cycle"));
                }
                throw format_error(
                    message(where(), ": input '", input, "' of ", node(),
                            " is not a graph input, an initializer, nor the output of any node",
                            subgraph ? " of this graph or an enclosing one" : ""));
            }
            for (const onnx_attribute& a : n.attributes)
                for (const auto& body : a.graphs)
                    if (body) check(*body, visible, true);
            for (const std::string& output : n.outputs) {
                if (output.empty()) continue;
                const auto [at, fresh] = defined.emplace(output, i);
                if (!fresh) {
                    const std::size_t first = at->second;
                    const std::string first_maker = first == made_by_input ? "a graph input"
                                                    : first == made_by_initializer
                                                        ? "an initializer"
                                                        : "made by " + describe(first, g.nodes[first]);
                    throw format_error(message(where(), ": output '", output, "' of ", node(), " is also ",
                                               first_maker,
                                               "; ONNX graphs are in single static assignment form"));
                }
                visible.insert(output);
            }
        }
        for (const onnx_value_info& output : g.outputs) {
            if (output.name.empty() || defined.contains(output.name)) continue;
            if (subgraph && outer.contains(output.name)) continue;  // an enclosing graph's value, passed on
            throw format_error(message(where(), ": graph output '", output.name,
                                       "' is not a graph input, an initializer, nor the output of any node"));
        }
    }

private:
    // What made a name, where it is not a node's index.
    static constexpr std::size_t made_by_input = static_cast<std::size_t>(-1);
    static constexpr std::size_t made_by_initializer = static_cast<std::size_t>(-2);

    static std::string describe(std::size_t index, const onnx_node& n) {
        return message("node ", index, n.name.empty() ? std::string() : message(" ('", n.name, "')"),
                       n.op_type.empty() ? std::string() : message(" of op ", n.op_type));
    }

    [[nodiscard]] bool domain_declared(const std::string& domain) const {
        const bool default_domain = domain.empty() || domain == "ai.onnx";
        // Before IR version 3 no opset_import was required: the default domain's opset 1 applies.
        if (default_domain && opsets_.empty() && ir_version_ < 3) return true;
        return std::any_of(opsets_.begin(), opsets_.end(), [&](const onnx_opset& o) {
            return default_domain ? (o.domain.empty() || o.domain == "ai.onnx") : o.domain == domain;
        });
    }

    std::string_view source_;
    const std::vector<onnx_opset>& opsets_;
    std::int64_t ir_version_;
};

}  // namespace detail

ANVIL_INLINE void onnx_model::parse_bytes(std::span<const std::byte> bytes,
                                          const std::filesystem::path* folder) {
    detail::onnx_parser parser(folder, external_, mapping_);
    protobuf_reader r(bytes, source_);
    protobuf_field f;
    bool has_graph = false;
    while (r.next(f)) {
        switch (f.number) {
            case 1:
                ir_version_ = r.int64(f, "ir_version");
                break;
            case 2:
                producer_ = std::string(r.string(f, "producer_name"));
                break;
            case 7:
                if (has_graph) r.fail(f, "a second graph");
                parser.graph(r.nested(f, detail::message(source_, ": graph")), *graph_);
                has_graph = true;
                break;
            case 8: {
                protobuf_reader entry =
                    r.nested(f, detail::message(source_, ": opset_import[", opsets_.size(), "]"));
                onnx_opset opset;
                protobuf_field e;
                while (entry.next(e)) {
                    if (e.number == 1) opset.domain = std::string(entry.string(e, "domain"));
                    if (e.number == 2) opset.version = entry.int64(e, "version");
                }
                opsets_.push_back(std::move(opset));
                break;
            }
            default:
                break;
        }
    }
    if (!has_graph) throw format_error(detail::message(source_, ": not an ONNX model (no graph)"));
    if (ir_version_ <= 0) throw format_error(detail::message(source_, ": not an ONNX model (no ir_version)"));
    // IR version 3 (ONNX 1.1) made opset_import required; older files default to opset 1 of ai.onnx.
    if (opsets_.empty() && ir_version_ >= 3) {
        throw format_error(
            detail::message(source_, ": no opset_import (IR version ", ir_version_, " requires one)"));
    }
    detail::onnx_graph_checker(source_, opsets_, ir_version_).check(*graph_, {}, false);
}

ANVIL_INLINE onnx_tensor parse_onnx_tensor(std::span<const std::byte> bytes, std::string_view source_name) {
    std::map<std::string, std::shared_ptr<const mapped_file>, std::less<>> no_external;
    detail::onnx_parser parser(nullptr, no_external);
    return parser.tensor(protobuf_reader(bytes, std::string(source_name)));
}

ANVIL_INLINE host_tensor onnx_host_tensor(const onnx_tensor& t) {
    const std::optional<dtype> type = onnx_dtype(t.data_type);
    if (!type) {
        throw unsupported_error(detail::message("ONNX tensor '", t.name, "': unsupported element type ",
                                                onnx_type_name(t.data_type)));
    }
    const std::size_t size = dtype_size(*type);
    const bool aligned = reinterpret_cast<std::uintptr_t>(t.raw.data()) % size == 0;
    if (t.owner && !t.raw.empty() && aligned && t.raw.size() == t.element_count() * size)
        return host_tensor(*type, dims(t.dims), t.raw.data(), t.owner);
    host_tensor out(*type, dims(t.dims));
    const std::vector<std::byte> bytes = t.to_bytes();
    if (!bytes.empty()) std::memcpy(out.raw(), bytes.data(), bytes.size());
    return out;
}

ANVIL_INLINE onnx_model onnx_model::parse(std::span<const std::byte> bytes, std::string source_name) {
    onnx_model model;
    model.source_ = std::move(source_name);
    model.parse_bytes(bytes, nullptr);
    return model;
}

ANVIL_INLINE onnx_model onnx_model::open(const std::filesystem::path& path) {
    onnx_model model;
    model.source_ = path.string();
    model.mapping_ = std::make_shared<const mapped_file>(mapped_file::open(path));
    const std::filesystem::path folder =
        path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path();
    model.parse_bytes(model.mapping_->bytes(), &folder);
    return model;
}

ANVIL_INLINE std::optional<std::int64_t> onnx_model::opset(std::string_view domain) const noexcept {
    const bool default_domain = domain.empty() || domain == "ai.onnx";
    for (const onnx_opset& o : opsets_) {
        const bool matches =
            default_domain ? (o.domain.empty() || o.domain == "ai.onnx") : o.domain == domain;
        if (matches) return o.version;
    }
    if (default_domain && opsets_.empty()) return 1;
    return std::nullopt;
}

ANVIL_INLINE std::uint64_t onnx_model::initializer_bytes() const {
    std::uint64_t bytes = 0;
    for (const onnx_tensor& t : graph_->initializers) {
        if (!t.raw.empty()) {
            bytes += t.raw.size();
        } else if (t.data_type != static_cast<std::int32_t>(onnx_type::string)) {
            bytes += t.element_count() * onnx_type_size(t.data_type);
        }
    }
    return bytes;
}

}  // namespace anvil
