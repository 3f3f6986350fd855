// anvil: model_spec's definitions (see model_spec.hpp; compilation.hpp says when this file is compiled).
// Field numbers are those of COREML.md §2 (Model.proto, FeatureTypes.proto, MIL.proto).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "anvil/backend/coreml/model_spec.hpp"
#include "anvil/backend/coreml/protobuf.hpp"
#include "anvil/core/error.hpp"

namespace anvil::detail::coreml {

namespace model_spec_detail {

using ane::mil_constant;
using ane::mil_constant_kind;
using ane::mil_function;
using ane::mil_ref;
using ane::mil_statement;
using ane::mil_value;

// MILSpec.DataType.
inline constexpr std::uint64_t mil_bool = 1, mil_string = 2, mil_fp16 = 10, mil_int32 = 23;

inline std::uint64_t mil_data_type(std::string_view dtype) {
    struct entry {
        std::string_view name;
        std::uint64_t code;
    };
    static constexpr entry table[] = {
        {"bool", mil_bool}, {"string", mil_string}, {"fp16", mil_fp16}, {"fp32", 11},         {"fp64", 12},
        {"bf16", 13},       {"int8", 21},           {"int16", 22},      {"int32", mil_int32}, {"int64", 24},
        {"uint8", 31},      {"uint16", 32},         {"uint32", 33},     {"uint64", 34},       {"int4", 25},
        {"uint4", 35},      {"uint2", 36},          {"uint1", 37},      {"uint6", 38},        {"uint3", 39},
    };
    for (const entry& e : table) {
        if (e.name == dtype) return e.code;
    }
    throw unsupported_error(message("Core ML model: the MIL type ", dtype, " has no MILSpec.DataType here"));
}

// `[A-Za-z_][A-Za-z0-9_@]*` (MIL.proto's rule for every name).
inline void require_identifier(std::string_view name, std::string_view what) {
    const auto letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
    bool valid = !name.empty() && letter(name[0]);
    for (const char c : name)
        valid = valid && (letter(c) || (c >= '0' && c <= '9') || c == '@');
    if (!valid) {
        throw error(message("Core ML model: ", what, " '", name,
                            "' is not a MIL identifier ([A-Za-z_][A-Za-z0-9_@]*)"));
    }
}

// TensorType{dataType = 1, rank = 2, dimensions = 3: Dimension{constant = 1: {size = 1}}}; rank 0 is left
// out, as proto3 leaves out every default.
inline protobuf_writer tensor_type(std::uint64_t dtype, std::span<const std::int64_t> shape) {
    protobuf_writer tensor;
    tensor.varint(1, dtype);
    if (!shape.empty()) tensor.varint(2, shape.size());
    for (const std::int64_t extent : shape) {
        protobuf_writer constant;
        if (extent != 0) constant.varint(1, static_cast<std::uint64_t>(extent));
        protobuf_writer dimension;
        dimension.message(1, constant);
        tensor.message(3, dimension);
    }
    return tensor;
}

// ValueType{tensorType = 1}.
inline protobuf_writer value_type(std::uint64_t dtype, std::span<const std::int64_t> shape) {
    protobuf_writer type;
    type.message(1, tensor_type(dtype, shape));
    return type;
}

// NamedValueType{name = 1, type = 2}; a state's type is ValueType{stateType = 5: StateType{wrappedType = 1:
// ValueType{tensorType}}}.
inline protobuf_writer named_value_type(const mil_value& value) {
    protobuf_writer type = value_type(mil_data_type(value.dtype), value.shape);
    if (value.is_state) {
        protobuf_writer state;
        state.message(1, type);
        type = protobuf_writer();
        type.message(5, state);
    }
    protobuf_writer named;
    named.string(1, value.name).message(2, type);
    return named;
}

// Value{type = 2, immediateValue = 3: {tensor = 1: TensorValue}}.
inline protobuf_writer immediate(std::uint64_t dtype, std::span<const std::int64_t> shape,
                                 const protobuf_writer& tensor_value) {
    protobuf_writer immediate_value;
    immediate_value.message(1, tensor_value);
    protobuf_writer value;
    value.message(2, value_type(dtype, shape)).message(3, immediate_value);
    return value;
}

// A scalar string: TensorValue.strings = 4: RepeatedStrings{values = 1}.
inline protobuf_writer string_value(std::string_view text) {
    protobuf_writer strings;
    strings.string(1, text);
    protobuf_writer tensor_value;
    tensor_value.message(4, strings);
    return immediate(mil_string, {}, tensor_value);
}

// A const's `val` or a constexpr parameter: the TensorValue field coremltools picks for the type
// (helper._tensor_field_by_type): fp16, int8, uint8 and uint32 as raw little-endian `bytes` (7), int32 as
// packed `ints` (2), bool as packed `bools` (3), strings (4); a blob as BlobFileValue{fileName = 1, offset =
// 2} (field 5 of Value).
inline protobuf_writer literal_value(std::string_view dtype_name, std::span<const std::int64_t> shape,
                                     const mil_constant& constant) {
    const std::uint64_t dtype = mil_data_type(dtype_name);
    protobuf_writer repeated;
    protobuf_writer tensor_value;
    switch (constant.kind) {
        case mil_constant_kind::int32:
            repeated.packed_varints(1, std::span<const std::int32_t>(constant.ints));
            tensor_value.message(2, repeated);
            break;
        case mil_constant_kind::uint32: {
            std::vector<std::byte> raw;
            for (const std::uint32_t number : constant.uints)
                for (int b = 0; b < 4; ++b)
                    raw.push_back(static_cast<std::byte>((number >> (8 * b)) & 0xFFu));
            repeated.bytes(1, raw);
            tensor_value.message(7, repeated);
            break;
        }
        case mil_constant_kind::boolean:
            repeated.packed_varints(1, std::span<const std::uint8_t>(constant.bools));
            tensor_value.message(3, repeated);
            break;
        case mil_constant_kind::string:
            repeated.string(1, constant.text);
            tensor_value.message(4, repeated);
            break;
        case mil_constant_kind::fp16: {
            std::vector<std::byte> raw;
            for (const half h : constant.halves) {
                const std::uint16_t bits = h.bits;
                raw.push_back(static_cast<std::byte>(bits & 0xFFu));
                raw.push_back(static_cast<std::byte>(bits >> 8));
            }
            repeated.bytes(1, raw);
            tensor_value.message(7, repeated);
            break;
        }
        case mil_constant_kind::bytes:
            repeated.bytes(1, std::as_bytes(std::span<const std::uint8_t>(constant.raw)));
            tensor_value.message(7, repeated);
            break;
        case mil_constant_kind::blob: {
            protobuf_writer blob;
            blob.string(1, constant.blob_path).varint(2, constant.blob_offset);
            protobuf_writer blob_value;
            blob_value.message(2, value_type(dtype, shape)).message(5, blob);
            return blob_value;
        }
    }
    return immediate(dtype, shape, tensor_value);
}

// Operation{type = 1, inputs = 2: map<string, Argument{arguments = 1: Binding{name = 1}}>, outputs = 3,
// attributes = 5: {"name", and a const's "val"}}. A const has no inputs (the milproto loader refuses one
// that has); write_state has no outputs.
inline protobuf_writer operation(const mil_function& function, const mil_statement& statement) {
    protobuf_writer op;
    op.string(1, statement.op);
    for (const auto& argument : statement.arguments) {
        protobuf_writer bindings;
        for (const mil_ref ref : argument.values) {
            protobuf_writer binding;
            binding.string(1, function.values.at(ref).name);
            bindings.message(1, binding);
        }
        op.map_entry(2, argument.name, bindings);
    }
    // A constexpr op's parameters: up to ios17 attributes, from ios18 inputs bound to their values
    // (Binding.value = 2), as coremltools' translate_constexpr writes them.
    const bool as_inputs = function.dialect == ane::mil_dialect::ios18;
    for (const auto& [name, literal] : statement.parameters) {
        const protobuf_writer value = literal_value(literal.dtype, literal.shape, literal.value);
        if (!as_inputs) {
            op.map_entry(5, name, value);
            continue;
        }
        protobuf_writer binding;
        binding.message(2, value);
        protobuf_writer bindings;
        bindings.message(1, binding);
        op.map_entry(2, name, bindings);
    }
    if (statement.result == ane::no_result) {  // write_state: named by the writer, no outputs
        op.map_entry(5, "name", string_value(statement.name));
        return op;
    }
    const mil_value& result = function.values.at(statement.result);
    op.message(3, named_value_type(result));
    op.map_entry(5, "name", string_value(statement.name.empty() ? result.name : statement.name));
    if (statement.op == "const")
        op.map_entry(5, "val", literal_value(result.dtype, result.shape, statement.value));
    return op;
}

// Function{inputs = 1, opset = 2, block_specializations = 3: {opset: Block{outputs = 2, operations = 3}}}.
inline protobuf_writer mil_function_message(const mil_function& function, std::span<const mil_ref> outputs) {
    const std::string_view opset = opset_name(function.dialect);
    protobuf_writer block;
    for (const mil_ref ref : outputs)
        block.string(2, function.values.at(ref).name);
    for (const auto& statement : function.statements)
        block.message(3, operation(function, statement));
    protobuf_writer message_body;
    for (const mil_ref ref : function.inputs)
        message_body.message(1, named_value_type(function.values.at(ref)));
    message_body.string(2, opset).map_entry(3, opset, block);
    return message_body;
}

// FeatureDescription{name = 1, shortDescription = 2, type = 3: FeatureType{multiArrayType = 5:
// ArrayFeatureType{shape = 1 (packed), dataType = 2}}}; a state's FeatureType is stateType = 8:
// StateFeatureType{arrayType = 1: ArrayFeatureType}.
inline protobuf_writer feature(const feature_description& description, bool state = false) {
    protobuf_writer array;
    array.packed_varints(1, std::span<const std::int64_t>(description.shape))
        .varint(2, static_cast<std::uint64_t>(description.dtype));
    protobuf_writer type;
    if (state) {
        protobuf_writer state_type;
        state_type.message(1, array);
        type.message(8, state_type);
    } else {
        type.message(5, array);
    }
    protobuf_writer message_body;
    message_body.string(1, description.name);
    if (!description.short_description.empty()) message_body.string(2, description.short_description);
    message_body.message(3, type);
    return message_body;
}

inline array_dtype array_type_of(const mil_value& value) {
    if (value.dtype == "fp16") return array_dtype::float16;
    if (value.dtype == "fp32") return array_dtype::float32;
    if (value.dtype == "int32") return array_dtype::int32;
    throw unsupported_error(message("Core ML model: ", value.name, " is ", value.dtype,
                                    "; a MultiArray holds fp16, fp32 or int32 (COREML.md §2.2)"));
}

inline std::string shape_text_of(std::span<const std::int64_t> shape) {
    std::string text = "[";
    for (std::size_t i = 0; i < shape.size(); ++i)
        text += (i ? ", " : "") + std::to_string(shape[i]);
    return text + "]";
}

// The interface must be the function's: same names, shapes and element types, in the same order.
inline void check_features(std::string_view function_name, std::string_view what,
                           const std::vector<feature_description>& features,
                           const std::vector<feature_description>& expected) {
    if (features.size() != expected.size()) {
        throw error(message("Core ML model: function ", function_name, " has ", expected.size(), " ", what,
                            " but its description lists ", features.size()));
    }
    for (std::size_t i = 0; i < features.size(); ++i) {
        const feature_description& got = features[i];
        const feature_description& want = expected[i];
        if (got.name != want.name || got.shape != want.shape || got.dtype != want.dtype) {
            throw error(message("Core ML model: function ", function_name, " ", what, " ", i, " is ",
                                want.name, " ", shape_text_of(want.shape), " but its description says ",
                                got.name, " ", shape_text_of(got.shape)));
        }
    }
}

}  // namespace model_spec_detail

ANVIL_INLINE int specification_version(ane::mil_dialect dialect) noexcept {
    return dialect == ane::mil_dialect::ios16 ? 7 : 9;
}

ANVIL_INLINE std::string_view opset_name(ane::mil_dialect dialect) noexcept {
    return dialect == ane::mil_dialect::ios16 ? "CoreML6" : "CoreML8";
}

ANVIL_INLINE std::vector<feature_description> describe_inputs(const ane::mil_function& function) {
    std::vector<feature_description> features;
    for (const ane::mil_ref ref : function.inputs) {
        const ane::mil_value& value = function.values.at(ref);
        if (!value.is_state)
            features.push_back({value.name, {}, value.shape, model_spec_detail::array_type_of(value)});
    }
    return features;
}

ANVIL_INLINE std::vector<feature_description> describe_states(const ane::mil_function& function) {
    std::vector<feature_description> features;
    for (const ane::mil_ref ref : function.inputs) {
        const ane::mil_value& value = function.values.at(ref);
        if (value.is_state) features.push_back({value.name, {}, value.shape, array_dtype::float16});
    }
    return features;
}

ANVIL_INLINE std::vector<feature_description> describe_outputs(const ane::mil_function& function,
                                                               std::span<const ane::mil_ref> outputs) {
    std::vector<feature_description> features;
    for (const ane::mil_ref ref : outputs) {
        const ane::mil_value& value = function.values.at(ref);
        features.push_back({value.name, {}, value.shape, model_spec_detail::array_type_of(value)});
    }
    return features;
}

ANVIL_INLINE std::vector<std::byte> encode_model(const model_spec& spec) {
    using namespace model_spec_detail;
    if (spec.functions.empty()) throw error("Core ML model: a model needs at least one function");
    const ane::mil_dialect dialect = spec.functions.front().function->dialect;
    const bool several = spec.functions.size() > 1;
    if (several && dialect != ane::mil_dialect::ios18) {
        throw unsupported_error(
            "Core ML model: several functions need spec 9 (iOS 18 / macOS 15), so the ios18 dialect");
    }
    struct described {
        const function_spec* spec;
        std::vector<feature_description> inputs, outputs, states;
    };
    std::vector<described> functions;
    for (const function_spec& f : spec.functions) {
        if (f.function == nullptr)
            throw error(message("Core ML model: function ", f.name, " has no program"));
        if (f.function->dialect != dialect) {
            throw error(message("Core ML model: function ", f.name,
                                " is in another MIL dialect than the first; one model has one spec version"));
        }
        require_identifier(f.name, "the function name");
        if (f.outputs.empty()) throw error(message("Core ML model: function ", f.name, " returns nothing"));
        if (f.function->inputs.empty() && dialect != ane::mil_dialect::ios18) {
            throw unsupported_error(message("Core ML model: function ", f.name,
                                            " has no inputs, which Core ML accepts only from spec 9"));
        }
        for (const auto& value : f.function->values)
            require_identifier(value.name, "the value");
        described d{&f, describe_inputs(*f.function), describe_outputs(*f.function, f.outputs),
                    describe_states(*f.function)};
        if (!f.inputs.empty()) {
            check_features(f.name, "inputs", f.inputs, d.inputs);
            d.inputs = f.inputs;
        }
        if (!f.output_features.empty()) {
            check_features(f.name, "outputs", f.output_features, d.outputs);
            d.outputs = f.output_features;
        }
        functions.push_back(std::move(d));
    }
    std::sort(functions.begin(), functions.end(),
              [](const described& a, const described& b) { return a.spec->name < b.spec->name; });
    for (std::size_t i = 1; i < functions.size(); ++i) {
        if (functions[i].spec->name == functions[i - 1].spec->name)
            throw error(message("Core ML model: two functions are named ", functions[i].spec->name));
    }

    // ModelDescription{input = 1, output = 10, state = 13, functions = 20, defaultFunctionName = 21,
    // metadata = 100}. A multi-function model describes each function (FunctionDescription{name = 1,
    // input = 2, output = 3, state = 6}) and leaves the top level empty (COREML.md §3).
    protobuf_writer description;
    if (!several) {
        for (const auto& input : functions.front().inputs)
            description.message(1, feature(input));
        for (const auto& output : functions.front().outputs)
            description.message(10, feature(output));
        for (const auto& state : functions.front().states)
            description.message(13, feature(state, true));
    } else {
        const std::string& default_name =
            spec.default_function.empty() ? spec.functions.front().name : spec.default_function;
        bool found = false;
        for (const described& d : functions) {
            protobuf_writer function_description;  // FunctionDescription{name = 1, input = 2, output = 3}
            function_description.string(1, d.spec->name);
            for (const auto& input : d.inputs)
                function_description.message(2, feature(input));
            for (const auto& output : d.outputs)
                function_description.message(3, feature(output));
            for (const auto& state : d.states)
                function_description.message(6, feature(state, true));
            description.message(20, function_description);
            found = found || d.spec->name == default_name;
        }
        if (!found) {
            throw error(
                message("Core ML model: the default function ", default_name, " is not in the model"));
        }
        description.string(21, default_name);
    }
    const model_metadata& meta = spec.metadata;
    protobuf_writer metadata;  // Metadata{shortDescription = 1, versionString = 2, author = 3, license = 4}
    if (!meta.short_description.empty()) metadata.string(1, meta.short_description);
    if (!meta.version.empty()) metadata.string(2, meta.version);
    if (!meta.author.empty()) metadata.string(3, meta.author);
    if (!meta.license.empty()) metadata.string(4, meta.license);
    auto user_defined = meta.user_defined;
    std::sort(user_defined.begin(), user_defined.end());
    for (const auto& [key, value] : user_defined)
        metadata.map_entry(100, key, value);
    if (!metadata.empty()) description.message(100, metadata);

    // Program{version = 1, functions = 2: map<string, Function>}.
    protobuf_writer program;
    program.varint(1, 1);
    for (const described& d : functions)
        program.map_entry(2, d.spec->name, mil_function_message(*d.spec->function, d.spec->outputs));

    protobuf_writer model;  // Model{specificationVersion = 1, description = 2, mlProgram = 502}
    model.varint(1, static_cast<std::uint64_t>(specification_version(dialect)))
        .message(2, description)
        .message(502, program);
    return model.release();
}

}  // namespace anvil::detail::coreml
