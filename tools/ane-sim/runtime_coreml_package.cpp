// anvil's ANE simulator: reading and validating Core ML packages (runtime_coreml_package.hpp).
#include "runtime_coreml_package.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <string_view>

#include <anvil/core/half.hpp>
#include <anvil/core/json.hpp>

#include "mil_ops_table.hpp"
#include "mil_program.hpp"

namespace anvil_sim::coreml {

namespace {

[[noreturn]] void fail(const std::string& message, long code = error_codes::invalid_model) {
    throw sim_failure(code, message);
}

// ---- the wire format -----------------------------------------------------------------------------------

struct field {
    std::uint32_t number = 0;
    int wire = 0;
    std::uint64_t number_value = 0;  // varint, fixed32, fixed64
    std::string_view bytes;          // length-delimited
};

// The fields of one message, in order. Refuses what protobuf's parser refuses: truncation, a varint longer
// than ten bytes, field number 0, wire types 3, 4, 6 and 7 (groups are not in these schemas).
std::vector<field> parse_message(std::string_view data, const std::string& where) {
    std::vector<field> fields;
    std::size_t at = 0;
    const auto varint = [&](const char* what) {
        std::uint64_t value = 0;
        for (int shift = 0; shift < 70; shift += 7) {
            if (at >= data.size()) fail(where + ": truncated " + what);
            const auto byte = static_cast<unsigned char>(data[at++]);
            if (shift == 63 && byte > 1) fail(where + ": a varint overflows 64 bits");
            value |= static_cast<std::uint64_t>(byte & 0x7Fu) << shift;
            if ((byte & 0x80u) == 0) return value;
        }
        fail(where + ": a varint is longer than ten bytes");
    };
    while (at < data.size()) {
        const std::uint64_t key = varint("key");
        field f;
        f.wire = static_cast<int>(key & 7u);
        if ((key >> 3) == 0 || (key >> 3) > 0x1FFFFFFFu)
            fail(where + ": field number " + std::to_string(key >> 3));
        f.number = static_cast<std::uint32_t>(key >> 3);
        switch (f.wire) {
            case 0:
                f.number_value = varint("varint");
                break;
            case 1:
            case 5: {
                const std::size_t n = f.wire == 1 ? 8 : 4;
                if (data.size() - at < n)
                    fail(where + ": truncated fixed-size field " + std::to_string(f.number));
                for (std::size_t i = 0; i < n; ++i)
                    f.number_value |= static_cast<std::uint64_t>(static_cast<unsigned char>(data[at + i]))
                                      << (8 * i);
                at += n;
                break;
            }
            case 2: {
                const std::uint64_t length = varint("length");
                if (length > data.size() - at)
                    fail(where + ": field " + std::to_string(f.number) + " claims " + std::to_string(length) +
                         " bytes, " + std::to_string(data.size() - at) + " remain");
                f.bytes = data.substr(at, static_cast<std::size_t>(length));
                at += static_cast<std::size_t>(length);
                break;
            }
            default:
                fail(where + ": field " + std::to_string(f.number) + " has wire type " +
                     std::to_string(f.wire));
        }
        fields.push_back(f);
    }
    return fields;
}

void expect_wire(const field& f, int wire, const std::string& where) {
    if (f.wire != wire)
        fail(where + ": field " + std::to_string(f.number) + " has wire type " + std::to_string(f.wire) +
             ", the schema says " + std::to_string(wire));
}

// A length-delimited field's bytes: a view into the message being read (which outlives every use).
std::string_view view_of(const field& f, const std::string& where) {
    expect_wire(f, 2, where);
    return f.bytes;
}

std::string text_of(const field& f, const std::string& where) {
    return std::string(view_of(f, where));
}

std::vector<std::int64_t> packed_or_single(const field& f, const std::string& where) {
    if (f.wire == 0) return {static_cast<std::int64_t>(f.number_value)};
    expect_wire(f, 2, where);
    std::vector<std::int64_t> values;
    std::size_t at = 0;
    while (at < f.bytes.size()) {
        std::uint64_t value = 0;
        int shift = 0;
        for (;; shift += 7) {
            if (at >= f.bytes.size() || shift > 63) fail(where + ": a malformed packed varint");
            const auto byte = static_cast<unsigned char>(f.bytes[at++]);
            value |= static_cast<std::uint64_t>(byte & 0x7Fu) << shift;
            if ((byte & 0x80u) == 0) break;
        }
        values.push_back(static_cast<std::int64_t>(value));
    }
    return values;
}

// ---- MIL.proto ------------------------------------------------------------------------------------------

const char* data_type_name(std::uint64_t code) {
    switch (code) {
        case 1:
            return "bool";
        case 2:
            return "string";
        case 10:
            return "fp16";
        case 11:
            return "fp32";
        case 12:
            return "fp64";
        case 13:
            return "bf16";
        case 21:
            return "int8";
        case 22:
            return "int16";
        case 23:
            return "int32";
        case 24:
            return "int64";
        case 25:
            return "int4";
        case 31:
            return "uint8";
        case 32:
            return "uint16";
        case 33:
            return "uint32";
        case 34:
            return "uint64";
        case 35:
            return "uint4";
        case 36:
            return "uint2";
        case 37:
            return "uint1";
        case 38:
            return "uint6";
        case 39:
            return "uint3";
        default:
            return nullptr;
    }
}

struct tensor_type {
    std::string dtype;
    std::vector<std::int64_t> shape;
    bool state = false;  // a StateType wrapping the tensor
};

tensor_type read_tensor_type(std::string_view bytes, const std::string& where) {
    tensor_type t;
    std::optional<std::uint64_t> rank;
    std::uint64_t code = 0;
    for (const field& f : parse_message(bytes, where)) {
        if (f.number == 1) {
            expect_wire(f, 0, where);
            code = f.number_value;
        } else if (f.number == 2) {
            expect_wire(f, 0, where);
            rank = f.number_value;
        } else if (f.number == 3) {
            expect_wire(f, 2, where);
            bool constant = false;
            for (const field& d : parse_message(f.bytes, where + " dimension")) {
                if (d.number == 2)
                    fail(where + ": an unknown (symbolic) dimension; the simulator runs fixed shapes");
                if (d.number != 1) continue;
                expect_wire(d, 2, where);
                constant = true;
                std::int64_t size = 0;
                for (const field& s : parse_message(d.bytes, where + " dimension"))
                    if (s.number == 1) size = static_cast<std::int64_t>(s.number_value);
                t.shape.push_back(size);
            }
            if (!constant) fail(where + ": a dimension sets neither constant nor unknown");
        }
    }
    const char* name = data_type_name(code);
    if (name == nullptr) fail(where + ": MILSpec.DataType " + std::to_string(code) + " is not known here");
    t.dtype = name;
    if (rank.value_or(0) != t.shape.size())
        fail(where + ": rank " + std::to_string(rank.value_or(0)) + " but " + std::to_string(t.shape.size()) +
             " dimensions");
    return t;
}

tensor_type read_value_type(std::string_view bytes, const std::string& where) {
    for (const field& f : parse_message(bytes, where)) {
        if (f.number == 1) return read_tensor_type(view_of(f, where), where);
        if (f.number == 5) {
            for (const field& w : parse_message(f.bytes, where + " state")) {
                if (w.number != 1) continue;
                tensor_type t = read_value_type(view_of(w, where), where + " state");
                t.state = true;
                return t;
            }
            fail(where + ": a StateType without its wrapped type");
        }
        if (f.number >= 2 && f.number <= 4)
            fail(where + ": list, tuple and dictionary types are not simulated");
    }
    fail(where + ": a ValueType that sets no type");
}

bool is_identifier(std::string_view name) {
    const auto letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
    if (name.empty() || !letter(name[0])) return false;
    return std::all_of(name.begin(), name.end(),
                       [&](char c) { return letter(c) || (c >= '0' && c <= '9') || c == '@'; });
}

void require_identifier(const std::string& name, const std::string& where) {
    if (!is_identifier(name))
        fail(where + ": '" + name + "' is not a MIL identifier ([A-Za-z_][A-Za-z0-9_@]*)");
}

struct named_type {
    std::string name;
    tensor_type type;
};

named_type read_named_value_type(std::string_view bytes, const std::string& where) {
    named_type n;
    bool typed = false;
    for (const field& f : parse_message(bytes, where)) {
        if (f.number == 1) n.name = text_of(f, where);
        if (f.number == 2) {
            n.type = read_value_type(view_of(f, where), where + " '" + n.name + "'");
            typed = true;
        }
    }
    require_identifier(n.name, where);
    if (!typed) fail(where + ": '" + n.name + "' has no type");
    return n;
}

// How the text writes a type: ios18 short scalars, older dialects tensor<T, []>.
std::string type_text(const tensor_type& t, bool short_scalars) {
    if (t.shape.empty()) return short_scalars ? t.dtype : "tensor<" + t.dtype + ", []>";
    std::string text = "tensor<" + t.dtype + ", [";
    for (std::size_t i = 0; i < t.shape.size(); ++i)
        text += (i ? ", " : "") + std::to_string(t.shape[i]);
    return text + "]>";
}

std::string quote(const std::string& text) {
    std::string out = "\"";
    for (const char c : text) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
    }
    return out + "\"";
}

std::string float_text(double value) {
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, "%a", value);
    return buffer;
}

std::uint64_t element_count(const std::vector<std::int64_t>& shape) {
    std::uint64_t n = 1;
    for (const std::int64_t d : shape)
        n *= static_cast<std::uint64_t>(d);
    return n;
}

struct value_context {
    bool short_scalars = false;
    std::set<std::string>* blob_files = nullptr;
};

// A Value as MIL text: an immediate literal or a BLOBFILE reference.
std::string value_text(std::string_view bytes, const std::string& where, const value_context& context,
                       tensor_type* type_out = nullptr) {
    std::optional<tensor_type> type;
    std::optional<field> immediate, blob;
    for (const field& f : parse_message(bytes, where)) {
        if (f.number == 2) type = read_value_type(view_of(f, where), where);
        if (f.number == 3) immediate = f;
        if (f.number == 5) blob = f;
    }
    if (!type) fail(where + ": a Value without its type");
    if (type_out != nullptr) *type_out = *type;
    const std::string type_string = type_text(*type, context.short_scalars);
    const auto scalar_or_list = [&](const std::vector<std::string>& items) {
        if (type->shape.empty()) {
            if (items.size() != 1)
                fail(where + ": a scalar with " + std::to_string(items.size()) + " values");
            return type_string + "(" + items[0] + ")";
        }
        if (items.size() != element_count(type->shape))
            fail(where + ": " + std::to_string(items.size()) + " values for " + type_string);
        std::string list;
        for (std::size_t i = 0; i < items.size(); ++i)
            list += (i ? ", " : "") + items[i];
        return type_string + "([" + list + "])";
    };
    if (blob) {
        std::string file;
        std::uint64_t offset = 0;
        for (const field& f : parse_message(view_of(*blob, where), where + " blob")) {
            if (f.number == 1) file = text_of(f, where);
            if (f.number == 2) offset = f.number_value;
        }
        if (!file.starts_with("@model_path/weights/") || file.find("/..") != std::string::npos)
            fail(where + ": the blob file '" + file + "' is not under @model_path/weights/");
        if (context.blob_files != nullptr)
            context.blob_files->insert(file.substr(std::strlen("@model_path/weights/")));
        const std::string path =
            context.short_scalars ? "string(" + quote(file) + ")" : "tensor<string, []>(" + quote(file) + ")";
        const std::string at = context.short_scalars ? "uint64(" + std::to_string(offset) + ")"
                                                     : "tensor<uint64, []>(" + std::to_string(offset) + ")";
        return type_string + "(BLOBFILE(path = " + path + ", offset = " + at + "))";
    }
    if (!immediate) fail(where + ": a Value that is neither immediate nor a blob");
    std::optional<field> tensor;
    for (const field& f : parse_message(view_of(*immediate, where), where + " immediate"))
        if (f.number == 1) tensor = f;
    if (!tensor) fail(where + ": an immediate value that is not a tensor (tuples, lists, dictionaries)");
    std::vector<std::string> items;
    for (const field& kind : parse_message(view_of(*tensor, where), where + " tensor")) {
        const auto inner = parse_message(view_of(kind, where), where + " tensor values");
        switch (kind.number) {
            case 1:  // floats: packed fixed32
                for (const field& v : inner) {
                    if (v.number != 1) continue;
                    if (v.wire == 5) {
                        float f = 0;
                        const auto bits = static_cast<std::uint32_t>(v.number_value);
                        std::memcpy(&f, &bits, 4);
                        items.push_back(float_text(f));
                        continue;
                    }
                    expect_wire(v, 2, where);
                    if (v.bytes.size() % 4)
                        fail(where + ": packed floats of " + std::to_string(v.bytes.size()) + " bytes");
                    for (std::size_t i = 0; i < v.bytes.size(); i += 4) {
                        float f = 0;
                        std::memcpy(&f, v.bytes.data() + i, 4);
                        items.push_back(float_text(f));
                    }
                }
                break;
            case 2:  // ints
            case 5:  // longInts
                for (const field& v : inner)
                    if (v.number == 1)
                        for (const std::int64_t n : packed_or_single(v, where))
                            items.push_back(
                                std::to_string(kind.number == 2 ? static_cast<std::int32_t>(n) : n));
                break;
            case 3:  // bools
                for (const field& v : inner)
                    if (v.number == 1)
                        for (const std::int64_t n : packed_or_single(v, where))
                            items.push_back(n ? "true" : "false");
                break;
            case 4:  // strings
                for (const field& v : inner)
                    if (v.number == 1) items.push_back(quote(text_of(v, where)));
                break;
            case 7: {  // bytes: raw little-endian
                std::string raw;
                for (const field& v : inner)
                    if (v.number == 1) raw += text_of(v, where);
                if (type->dtype == "fp16") {
                    if (raw.size() % 2) fail(where + ": fp16 bytes of odd length");
                    for (std::size_t i = 0; i < raw.size(); i += 2) {
                        const auto bits =
                            static_cast<std::uint16_t>(static_cast<unsigned char>(raw[i]) |
                                                       (static_cast<unsigned char>(raw[i + 1]) << 8));
                        items.push_back(float_text(anvil::half_bits_to_float(bits)));
                    }
                } else if (type->dtype == "int8" || type->dtype == "uint8") {
                    for (const char c : raw)
                        items.push_back(std::to_string(
                            type->dtype == "int8" ? static_cast<int>(static_cast<signed char>(c))
                                                  : static_cast<int>(static_cast<unsigned char>(c))));
                } else if (type->dtype == "uint32") {  // coremltools writes uint32 immediates as bytes
                    if (raw.size() % 4) fail(where + ": uint32 bytes of a length not a multiple of 4");
                    for (std::size_t i = 0; i < raw.size(); i += 4) {
                        std::uint32_t number = 0;
                        for (std::size_t b = 0; b < 4; ++b)
                            number |= static_cast<std::uint32_t>(static_cast<unsigned char>(raw[i + b]))
                                      << (8 * b);
                        items.push_back(std::to_string(number));
                    }
                } else {
                    fail(where + ": raw bytes for " + type->dtype + " are not simulated");
                }
                break;
            }
            default:
                fail(where + ": TensorValue field " + std::to_string(kind.number) + " is not simulated");
        }
    }
    return scalar_or_list(items);
}

struct argument {
    std::string name;
    std::vector<std::string> bindings;  // names, or a value's literal text (`literal`)
    bool literal = false;               // Binding.value: a constexpr parameter bound in place (ios18)
};

int opset_version(const std::string& opset) {
    if (opset == "CoreML5") return 15;
    if (opset == "CoreML6") return 16;
    if (opset == "CoreML7") return 17;
    if (opset == "CoreML8") return 18;
    if (opset == "CoreML9") return 19;
    return 0;
}

// One Operation as a MIL statement (its outputs declared, its arguments by name, `name` and `val`).
std::string operation_text(std::string_view bytes, const std::string& where, const value_context& context,
                           int version, std::map<std::string, tensor_type>& defined) {
    std::string type;
    std::vector<argument> arguments;
    std::vector<named_type> outputs;
    std::map<std::string, std::string> attributes;
    for (const field& f : parse_message(bytes, where)) {
        switch (f.number) {
            case 1:
                type = text_of(f, where);
                break;
            case 2: {
                argument a;
                for (const field& e : parse_message(view_of(f, where), where + " input")) {
                    if (e.number == 1) a.name = text_of(e, where);
                    if (e.number != 2) continue;
                    for (const field& b : parse_message(view_of(e, where), where + " argument")) {
                        if (b.number != 1) continue;
                        for (const field& n : parse_message(view_of(b, where), where + " binding")) {
                            if (n.number == 2) {
                                a.bindings.push_back(value_text(view_of(n, where),
                                                                where + " input '" + a.name + "'", context));
                                a.literal = true;
                            }
                            if (n.number == 1) a.bindings.push_back(text_of(n, where));
                        }
                    }
                }
                if (a.bindings.empty()) fail(where + ": input '" + a.name + "' binds nothing");
                arguments.push_back(std::move(a));
                break;
            }
            case 3:
                outputs.push_back(read_named_value_type(view_of(f, where), where + " output"));
                break;
            case 4:
                fail(where + ": nested blocks (cond, while) are not simulated");
            case 5: {
                std::string key;
                std::string_view value;
                for (const field& e : parse_message(view_of(f, where), where + " attribute")) {
                    if (e.number == 1) key = text_of(e, where);
                    if (e.number == 2) value = e.bytes;
                }
                attributes[key] = std::string(value);
                break;
            }
            default:
                break;
        }
    }
    const std::string label = where + " (" + (type.empty() ? "?" : type) + ")";
    if (type.empty()) fail(label + ": an operation without its type");
    // write_state is the one op without a result (coremltools exports coreml_update_state as write_state
    // with no outputs, COREML.md §2.4); every other op the simulator runs has one.
    const bool output_less = type == "write_state";
    if (outputs.size() != (output_less ? 0u : 1u))
        fail(label + ": " + std::to_string(outputs.size()) + " outputs; " +
             (output_less ? "write_state has none" : "the simulator runs ops with one"));
    const auto name = attributes.find("name");
    if (name == attributes.end()) fail(label + ": no `name` attribute (coremltools gives every op one)");
    tensor_type name_type;
    const std::string name_text = value_text(name->second, label + " name", context, &name_type);
    if (name_type.dtype != "string" || !name_type.shape.empty()) fail(label + ": `name` is not a string");
    // Values bound in place are constexpr parameters (COREML.md §2.4: from ios18 translate_constexpr binds
    // them so); every other input names a value defined before it.
    const bool constexpr_op = type.rfind("constexpr_", 0) == 0;
    for (const auto& a : arguments) {
        if (a.literal && !constexpr_op)
            fail(label + ": input '" + a.name + "' binds a value in place; only constexpr_* ops take those");
        if (a.literal && a.bindings.size() != 1)
            fail(label + ": input '" + a.name + "' binds a value in place among other bindings");
        for (const auto& b : a.bindings)
            if (!a.literal && !defined.contains(b))
                fail(label + ": input '" + a.name + "' reads '" + b + "', which is not defined before it");
    }
    // Up to ios17 a constexpr op's parameters are attributes (MIL.md §1.6); any other op has only `name`
    // (and a const its `val`).
    std::string extra_attributes;
    for (const auto& [key, value] : attributes) {
        if (key == "name" || (type == "const" && key == "val")) continue;
        if (!constexpr_op)
            fail(label + ": attribute '" + key + "' (ops other than constexpr_* take only name)");
        extra_attributes += ", " + key + " = " + value_text(value, label + " attribute " + key, context);
    }
    const named_type* out = output_less ? nullptr : &outputs[0];
    if (out != nullptr && defined.contains(out->name)) fail(label + ": '" + out->name + "' is defined twice");
    std::string text = "            " +
                       (out != nullptr ? type_text(out->type, context.short_scalars) + " " + out->name + " = "
                                       : std::string()) +
                       type + "(";
    if (type == "const") {
        if (!arguments.empty()) fail(label + ": a const with inputs (the milproto loader refuses it)");
        const auto val = attributes.find("val");
        if (val == attributes.end()) fail(label + ": a const without `val`");
        tensor_type val_type;
        const std::string literal = value_text(val->second, label + " val", context, &val_type);
        if (val_type.dtype != out->type.dtype || val_type.shape != out->type.shape)
            fail(label + ": `val` is " + type_text(val_type, true) + ", the output " +
                 type_text(out->type, true));
        text += ")[name = " + name_text + ", val = " + literal + "];\n";
    } else {
        std::sort(arguments.begin(), arguments.end(),
                  [](const argument& a, const argument& b) { return a.name < b.name; });
        const std::optional<mil::op_spec> spec = mil::find_op(type, version);
        for (std::size_t i = 0; i < arguments.size(); ++i) {
            const argument& a = arguments[i];
            const mil::input_spec* input = spec ? spec->find(a.name) : nullptr;
            const bool tuple =
                a.bindings.size() > 1 || (input != nullptr && input->form == mil::input_form::tuple);
            text += (i ? ", " : "") + a.name + " = ";
            if (tuple) text += "(";
            for (std::size_t b = 0; b < a.bindings.size(); ++b)
                text += (b ? ", " : "") + a.bindings[b];
            if (tuple) text += ")";
        }
        text += ")[name = " + name_text + extra_attributes + "];\n";
    }
    if (out != nullptr) defined[out->name] = out->type;
    return text;
}

// ---- Model.proto / FeatureTypes.proto --------------------------------------------------------------------

feature read_feature(std::string_view bytes, const std::string& where, bool& is_state, int spec) {
    feature f;
    std::optional<std::string_view> type;
    for (const field& x : parse_message(bytes, where)) {
        if (x.number == 1) f.name = text_of(x, where);
        if (x.number == 3) type = x.bytes;
    }
    const std::string label = where + " '" + f.name + "'";
    if (!type) fail(label + ": no type");
    std::optional<std::string_view> array;
    bool optional = false;
    is_state = false;
    for (const field& x : parse_message(*type, label)) {
        if (x.number == 5) array = x.bytes;
        if (x.number == 8) {
            is_state = true;
            for (const field& s : parse_message(view_of(x, label), label + " state"))
                if (s.number == 1) array = s.bytes;
        }
        if (x.number == 1000) optional = x.number_value != 0;
        if (x.number >= 1 && x.number <= 7 && x.number != 5)
            fail(label + ": only MultiArray features are simulated (FeatureType field " +
                 std::to_string(x.number) + ")");
    }
    if (!array) fail(label + ": no MultiArray type");
    bool flexible = false, defaulted = false;
    for (const field& x : parse_message(*array, label)) {
        if (x.number == 1)
            for (const std::int64_t d : packed_or_single(x, label))
                f.shape.push_back(d);
        if (x.number == 2) f.array_type = static_cast<long>(x.number_value);
        if (x.number == 21 || x.number == 31) flexible = true;
        if (x.number == 41 || x.number == 51 || x.number == 61) defaulted = true;
    }
    switch (f.array_type) {
        case 65552:
            if (spec < 7)
                fail(label + ": FLOAT16 MultiArrays need spec 7 (iOS 16), this model is spec " +
                     std::to_string(spec));
            break;
        case 65568:
        case 65600:
        case 131104:
            break;
        case 131080:
            if (spec < 10)
                fail(label + ": INT8 MultiArrays need spec 10, this model is spec " + std::to_string(spec));
            break;
        default:
            fail(label + ": ArrayDataType " + std::to_string(f.array_type) + " is not one Core ML accepts");
    }
    if (is_state) {
        if (spec < 9)
            fail(label + ": states need spec 9 (iOS 18), this model is spec " + std::to_string(spec));
        if (optional) fail(label + ": a state cannot be optional");
        if (flexible || defaulted) fail(label + ": a state cannot have a flexible shape or a default value");
        if (f.shape.empty()) fail(label + ": a state needs an explicit shape");
        if (f.array_type != 65552) fail(label + ": a state must be FLOAT16");
    }
    if (flexible) fail(label + ": flexible shapes are not simulated; anvil declares fixed shapes");
    for (const std::int64_t d : f.shape)
        if (d < 0) fail(label + ": a negative extent");
    return f;
}

const char* array_type_mil(long array_type) {
    switch (array_type) {
        case 65552:
            return "fp16";
        case 65568:
            return "fp32";
        case 65600:
            return "fp64";
        case 131104:
            return "int32";
        case 131080:
            return "int8";
        default:
            return "?";
    }
}

struct described_function {
    std::string name;
    std::vector<feature> inputs, outputs, states;
};

std::vector<feature> read_features(const std::vector<field>& fields, std::uint32_t number,
                                   const std::string& where, int spec, bool want_state) {
    std::vector<feature> out;
    for (const field& f : fields) {
        if (f.number != number) continue;
        bool is_state = false;
        feature made = read_feature(view_of(f, where), where, is_state, spec);
        if (is_state != want_state)
            fail(where + " '" + made.name + "': " +
                 (is_state ? "a state declared as an input or output; states belong in `state`"
                           : "a MultiArray in `state`"));
        out.push_back(std::move(made));
    }
    return out;
}

void check_interface(const described_function& described, const std::vector<named_type>& inputs,
                     const std::vector<std::string>& outputs,
                     const std::map<std::string, tensor_type>& produced, int spec) {
    const std::string where = "function " + described.name;
    std::size_t plain_inputs = 0, state_inputs = 0;
    for (const auto& in : inputs)
        (in.type.state ? state_inputs : plain_inputs) += 1;
    if (plain_inputs == 0 && spec < 9) fail(where + ": an ML Program with no inputs needs spec 9 (iOS 18)");
    const auto match = [&](const feature& f, const tensor_type& t, const char* kind) {
        if (f.shape.empty() && std::string(kind) == "input")
            fail(where + ": input '" + f.name + "' has missing shape constraints");
        if (array_type_mil(f.array_type) != t.dtype || (!f.shape.empty() && f.shape != t.shape))
            fail(where + ": " + kind + " '" + f.name + "' is described as " + array_type_mil(f.array_type) +
                 " but the program has " + type_text(t, true));
    };
    if (described.inputs.size() != plain_inputs || described.states.size() != state_inputs)
        fail(where + ": the description lists " + std::to_string(described.inputs.size()) + " inputs and " +
             std::to_string(described.states.size()) + " states, the program has " +
             std::to_string(plain_inputs) + " and " + std::to_string(state_inputs));
    for (const auto& f : described.inputs) {
        const auto it = std::find_if(inputs.begin(), inputs.end(),
                                     [&](const named_type& n) { return n.name == f.name && !n.type.state; });
        if (it == inputs.end()) fail(where + ": input '" + f.name + "' is not an input of the program");
        match(f, it->type, "input");
    }
    for (const auto& f : described.states) {
        const auto it = std::find_if(inputs.begin(), inputs.end(),
                                     [&](const named_type& n) { return n.name == f.name && n.type.state; });
        if (it == inputs.end()) fail(where + ": state '" + f.name + "' is not a state input of the program");
        match(f, it->type, "state");
    }
    if (described.outputs.size() != outputs.size())
        fail(where + ": the description lists " + std::to_string(described.outputs.size()) +
             " outputs, the program returns " + std::to_string(outputs.size()));
    for (const auto& f : described.outputs) {
        if (std::find(outputs.begin(), outputs.end(), f.name) == outputs.end())
            fail(where + ": output '" + f.name + "' is not returned by the program");
        match(f, produced.at(f.name), "output");
    }
}

std::string read_file(const std::filesystem::path& path, long code) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("cannot read '" + path.string() + "'", code);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

package read_model(const std::string& bytes, const std::filesystem::path& model_directory) {
    package result;
    result.model_directory = model_directory;
    std::optional<std::string_view> description_bytes, program_bytes;
    for (const field& f : parse_message(bytes, "model.mlmodel")) {
        if (f.number == 1) {
            expect_wire(f, 0, "Model");
            result.specification_version = static_cast<int>(f.number_value);
        } else if (f.number == 2) {
            expect_wire(f, 2, "Model");
            description_bytes = f.bytes;
        } else if (f.number == 502) {
            expect_wire(f, 2, "Model");
            program_bytes = f.bytes;
        } else if (f.number >= 200 && f.number != 502) {
            fail("Model: field " + std::to_string(f.number) + " is a model type other than an ML Program");
        }
    }
    const int spec = result.specification_version;
    if (spec < 6 || spec > 10)
        fail("Model: specificationVersion " + std::to_string(spec) + "; an ML Program needs 6 to 10");
    if (!program_bytes) fail("Model: not an ML Program (no mlProgram, field 502)");
    if (!description_bytes) fail("Model: no description");

    // The description.
    const std::vector<field> description = parse_message(*description_bytes, "ModelDescription");
    std::vector<described_function> described;
    described_function top{"main", read_features(description, 1, "input", spec, false),
                           read_features(description, 10, "output", spec, false),
                           read_features(description, 13, "state", spec, true)};
    for (const field& f : description) {
        if (f.number == 21) result.default_function = text_of(f, "ModelDescription");
        if (f.number != 20) continue;
        const std::vector<field> fd = parse_message(view_of(f, "FunctionDescription"), "FunctionDescription");
        described_function d;
        for (const field& x : fd)
            if (x.number == 1) d.name = text_of(x, "FunctionDescription");
        d.inputs = read_features(fd, 2, "function " + d.name + " input", spec, false);
        d.outputs = read_features(fd, 3, "function " + d.name + " output", spec, false);
        d.states = read_features(fd, 6, "function " + d.name + " state", spec, true);
        described.push_back(std::move(d));
    }
    if (!described.empty()) {
        if (spec < 9)
            fail("ModelDescription: several functions need spec 9 (iOS 18), this model is spec " +
                 std::to_string(spec));
        if (!top.inputs.empty() || !top.outputs.empty() || !top.states.empty())
            fail(
                "ModelDescription: a multi-function model must leave the top-level inputs, outputs and "
                "states empty");
        if (std::none_of(described.begin(), described.end(),
                         [&](const described_function& d) { return d.name == result.default_function; }))
            fail("ModelDescription: defaultFunctionName '" + result.default_function + "' names no function");
    } else {
        described.push_back(std::move(top));
        result.default_function = "main";
    }

    // The program.
    std::map<std::string, std::string_view> functions;
    bool versioned = false;
    for (const field& f : parse_message(*program_bytes, "Program")) {
        if (f.number == 1) {
            if (f.number_value != 1)
                fail("Program: version " + std::to_string(f.number_value) + ", expected 1");
            versioned = true;
        }
        if (f.number != 2) continue;
        std::string key;
        std::string_view value;
        for (const field& e : parse_message(view_of(f, "Program"), "Program.functions"))
            if (e.number == 1)
                key = text_of(e, "Program.functions");
            else if (e.number == 2)
                value = e.bytes;
        if (functions.contains(key)) fail("Program: function '" + key + "' appears twice");
        functions[key] = value;
    }
    if (!versioned) fail("Program: no version");
    if (functions.size() != described.size())
        fail("Program: " + std::to_string(functions.size()) + " functions, the description " +
             std::to_string(described.size()));
    static const char* const expected_opsets[] = {"CoreML5", "CoreML6", "CoreML7", "CoreML8", "CoreML9"};
    const std::string expected_opset = expected_opsets[spec - 6];
    std::set<std::string> blob_files;
    for (const described_function& d : described) {
        const auto found = functions.find(d.name);
        if (found == functions.end())
            fail("Program: the description's function '" + d.name + "' is not in the program");
        const std::string where = "function " + d.name;
        std::vector<named_type> inputs;
        std::string opset;
        std::map<std::string, std::string_view> blocks;
        for (const field& f : parse_message(found->second, where)) {
            if (f.number == 1) inputs.push_back(read_named_value_type(view_of(f, where), where + " input"));
            if (f.number == 2) opset = text_of(f, where);
            if (f.number != 3) continue;
            std::string key;
            std::string_view value;
            for (const field& e : parse_message(view_of(f, where), where + " block"))
                if (e.number == 1)
                    key = text_of(e, where);
                else if (e.number == 2)
                    value = e.bytes;
            blocks[key] = value;
        }
        if (opset != expected_opset)
            fail(where + ": opset '" + opset + "' does not pair with spec " + std::to_string(spec) + " (" +
                 expected_opset + ")");
        const auto block = blocks.find(opset);
        if (block == blocks.end()) fail(where + ": no block specialisation for its opset " + opset);
        const int version = opset_version(opset);
        value_context context{version >= 18, &blob_files};
        std::map<std::string, tensor_type> defined;
        std::string signature;
        for (const auto& in : inputs) {
            if (defined.contains(in.name)) fail(where + ": input '" + in.name + "' declared twice");
            defined[in.name] = in.type;
            signature += (signature.empty() ? "" : ", ") +
                         (in.type.state ? "state<" + type_text(in.type, false) + ">"
                                        : type_text(in.type, context.short_scalars)) +
                         " " + in.name;
        }
        std::vector<std::string> outputs;
        std::string body;
        std::size_t index = 0;
        for (const field& f : parse_message(block->second, where + " block")) {
            if (f.number == 1) fail(where + ": the block declares inputs (only nested blocks do)");
            if (f.number == 2) outputs.push_back(text_of(f, where));
            if (f.number != 3) continue;
            const std::string op_where = where + " operation " + std::to_string(index++);
            body += operation_text(f.bytes, op_where, context, version, defined);
        }
        if (outputs.empty()) fail(where + ": the block returns nothing");
        for (const auto& o : outputs)
            if (!defined.contains(o)) fail(where + ": returns '" + o + "', which the block does not define");
        check_interface(d, inputs, outputs, defined, spec);
        const bool short_form = version >= 18;
        std::string text = short_form ? "program(1.3)\n" : "program(1.0)\n";
        text += "{\n    func main<ios" + std::to_string(version) + ">(" + signature + ") {\n" + body +
                "        } -> (";
        for (std::size_t i = 0; i < outputs.size(); ++i)
            text += (i ? ", " : "") + outputs[i];
        text += ");\n}\n";
        result.functions.push_back({d.name, opset, std::move(text), d.inputs, d.outputs, d.states});
    }
    for (const auto& file : blob_files) {
        if (!model_directory.empty() && !std::filesystem::is_regular_file(model_directory / "weights" / file))
            fail("the program references weights/" + file + ", which the package does not hold",
                 error_codes::io);
        result.weight_files.push_back(file);
    }
    return result;
}

package read_package(const std::filesystem::path& directory) {
    const std::filesystem::path manifest_path = directory / "Manifest.json";
    if (!std::filesystem::is_regular_file(manifest_path))
        fail("'" + directory.string() + "' is not a model package: it has no Manifest.json", error_codes::io);
    anvil::json::value manifest;
    try {
        manifest = anvil::json::parse(read_file(manifest_path, error_codes::io), "Manifest.json");
    } catch (const std::exception& e) {
        fail(std::string("Manifest.json: ") + e.what());
    }
    const auto string_member = [&](const anvil::json::value& object, const char* key,
                                   const std::string& where) {
        const anvil::json::value* v = object.is_object() ? object.find(key) : nullptr;
        if (v == nullptr || !v->is_string()) fail("Manifest.json: " + where + " has no string '" + key + "'");
        return v->as_string();
    };
    const std::string version = string_member(manifest, "fileFormatVersion", "the manifest");
    int major = 0, minor = 0, patch = 0;
    char end = 0;
    if (std::sscanf(version.c_str(), "%d.%d.%d%c", &major, &minor, &patch, &end) != 3)
        fail("Manifest.json: fileFormatVersion '" + version + "' is not major.minor.patch");
    if (major > 1 || (major == 1 && (minor > 0 || patch > 0)))
        fail("Manifest.json: fileFormatVersion " + version + " is newer than 1.0.0");
    const anvil::json::value* entries = manifest.find("itemInfoEntries");
    if (entries == nullptr || !entries->is_object()) fail("Manifest.json: no itemInfoEntries object");
    const std::string root = string_member(manifest, "rootModelIdentifier", "the manifest");
    std::filesystem::path model_path;
    for (const auto& [id, item] : entries->as_object()) {
        const std::string path = string_member(item, "path", "item " + id);
        (void)string_member(item, "name", "item " + id);
        (void)string_member(item, "author", "item " + id);
        (void)string_member(item, "description", "item " + id);
        if (path.find("..") != std::string::npos)
            fail("Manifest.json: item " + id + "'s path climbs out of Data/");
        if (!std::filesystem::exists(directory / "Data" / path))
            fail("Manifest.json: item " + id + "'s path Data/" + path + " does not exist", error_codes::io);
        if (id == root) model_path = directory / "Data" / path;
    }
    if (model_path.empty()) fail("Manifest.json: rootModelIdentifier '" + root + "' names no item");
    return read_model(read_file(model_path, error_codes::io), model_path.parent_path());
}

}  // namespace anvil_sim::coreml
