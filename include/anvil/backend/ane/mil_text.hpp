// anvil: the MIL text writer — prints an in-memory function (mil_program.hpp) in either dialect (MIL.md §1.4,
// RUNTIME.md §4): ios18 with short scalar types (`int32`, `string("x")`), ios16 with verbose ones
// (`tensor<int32, []>`). As coremltools does, arguments print in alphabetical order, every op carries
// `[name = ...]`, fp16 literals are C99 hex floats and blob consts name their weight file and offset.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/backend/ane/mil_program.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/half.hpp"

namespace anvil::detail::ane {

// C99 %a of an fp16 value, as coremlc prints floats ("0x1.5p-17", "-0x1.388p+13", "0x0p+0").
[[nodiscard]] inline std::string fp16_literal(half value) {
    const float number = static_cast<float>(value);
    if (!std::isfinite(number)) {
        throw unsupported_error(
            message("MIL text: the fp16 literal ", number, " is not finite; constants must be finite"));
    }
    char text[64];
    std::snprintf(text, sizeof text, "%a", static_cast<double>(number));
    return text;
}

namespace mil_text_detail {

inline std::string scalar_type(mil_dialect dialect, std::string_view dtype) {
    return dialect == mil_dialect::ios18 ? std::string(dtype) : message("tensor<", dtype, ", []>");
}

inline std::string scalar_literal(mil_dialect dialect, std::string_view dtype, const std::string& value) {
    return scalar_type(dialect, dtype) + "(" + value + ")";
}

inline std::string type_of(mil_dialect dialect, std::string_view dtype,
                           const std::vector<std::int64_t>& shape) {
    if (shape.empty()) return scalar_type(dialect, dtype);
    std::string dims_text;
    for (std::size_t i = 0; i < shape.size(); ++i)
        dims_text += (i ? ", " : "") + std::to_string(shape[i]);
    return message("tensor<", dtype, ", [", dims_text, "]>");
}
inline std::string type_of(mil_dialect dialect, const mil_value& value) {
    return type_of(dialect, value.dtype, value.shape);
}

// A value's literal: what follows `val = ` in a const, or a constexpr parameter's `name = `.
inline std::string literal_text(mil_dialect dialect, std::string_view dtype,
                                const std::vector<std::int64_t>& shape, const mil_constant& constant) {
    const auto list = [&](std::size_t count, auto&& element) {
        std::string text;
        for (std::size_t i = 0; i < count; ++i)
            text += (i ? ", " : "") + element(i);
        return shape.empty() ? text : "[" + text + "]";
    };
    std::string body;
    switch (constant.kind) {
        case mil_constant_kind::int32:
            body =
                list(constant.ints.size(), [&](std::size_t i) { return std::to_string(constant.ints[i]); });
            break;
        case mil_constant_kind::uint32:
            body =
                list(constant.uints.size(), [&](std::size_t i) { return std::to_string(constant.uints[i]); });
            break;
        case mil_constant_kind::boolean:
            body = list(constant.bools.size(),
                        [&](std::size_t i) { return std::string(constant.bools[i] ? "true" : "false"); });
            break;
        case mil_constant_kind::string:
            body = "\"" + constant.text + "\"";
            break;
        case mil_constant_kind::fp16:
            body =
                list(constant.halves.size(), [&](std::size_t i) { return fp16_literal(constant.halves[i]); });
            break;
        case mil_constant_kind::bytes:
            body = list(constant.raw.size(), [&](std::size_t i) {
                return std::to_string(dtype == "int8"
                                          ? static_cast<int>(static_cast<std::int8_t>(constant.raw[i]))
                                          : static_cast<int>(constant.raw[i]));
            });
            break;
        case mil_constant_kind::blob:
            return type_of(dialect, dtype, shape) +
                   "(BLOBFILE(path = " + scalar_literal(dialect, "string", "\"" + constant.blob_path + "\"") +
                   ", offset = " + scalar_literal(dialect, "uint64", std::to_string(constant.blob_offset)) +
                   "))";
    }
    return shape.empty() ? scalar_literal(dialect, dtype, body)
                         : type_of(dialect, dtype, shape) + "(" + body + ")";
}

}  // namespace mil_text_detail

// The whole program, returning `outputs` in this order. `weights_digest` (hex, of the weight files the
// BLOBFILE consts name) goes into buildInfo as "anvil-weights-sha256": a program's compiled identity is
// reported to come from its text alone (RUNTIME.md §0b #21: 64 layers with one text ran the first layer's
// weights), so two programs that differ only in their weights must differ in their text. buildInfo's entries
// are not validated strictly (RUNTIME.md §4: OMLX writes other ones).
[[nodiscard]] inline std::string mil_text(const mil_function& function, std::span<const mil_ref> outputs,
                                          std::string_view weights_digest = {}) {
    using namespace mil_text_detail;
    const mil_dialect dialect = function.dialect;
    const bool short_form = dialect == mil_dialect::ios18;
    const auto& values = function.values;
    const std::string digest_entry = weights_digest.empty()
                                         ? std::string()
                                         : message(", {\"anvil-weights-sha256\", \"", weights_digest, "\"}");
    std::string out = short_form ? "program(1.3)\n" : "program(1.0)\n";
    out += short_form ? "[buildInfo = dict<string, string>({{\"coremlc-component-MIL\", \"3510.2.1\"}, "
                        "{\"coremlc-version\", \"3505.4.1\"}, {\"coremltools-component-milinternal\", \"\"}, "
                        "{\"coremltools-version\", \"9.0\"}" +
                            digest_entry + "})]\n"
                      : "[buildInfo = dict<tensor<string, []>, tensor<string, []>>({{\"coremlc-version\", "
                        "\"3505.4.1\"}" +
                            digest_entry + "})]\n";
    out += "{\n    func main<";
    out += short_form ? "ios18" : "ios16";
    out += ">(";
    for (std::size_t i = 0; i < function.inputs.size(); ++i) {
        const mil_value& input = values.at(function.inputs[i]);
        const std::string type = type_of(dialect, input);
        out += (i ? ", " : "") + (input.is_state ? "state<" + type + ">" : type) + " " + input.name;
    }
    out += ") {\n";
    for (const auto& statement : function.statements) {
        const bool has_result = statement.result != no_result;
        const mil_value* result = has_result ? &values.at(statement.result) : nullptr;
        out += "            ";
        if (has_result) out += type_of(dialect, *result) + " " + result->name + " = ";
        out += statement.op + "(";
        // From ios18 a constexpr op's parameters are inputs bound to their values; before, attributes.
        std::vector<std::pair<std::string, std::string>> in_place;
        for (const auto& [name, literal] : statement.parameters)
            in_place.emplace_back(name, literal_text(dialect, literal.dtype, literal.shape, literal.value));
        std::sort(in_place.begin(), in_place.end());
        std::vector<const mil_argument*> sorted;
        for (const auto& argument : statement.arguments)
            sorted.push_back(&argument);
        std::stable_sort(sorted.begin(), sorted.end(),
                         [](const mil_argument* a, const mil_argument* b) { return a->name < b->name; });
        for (std::size_t a = 0; a < sorted.size(); ++a) {
            const mil_argument& argument = *sorted[a];
            out += (a ? ", " : "") + argument.name + " = ";
            if (argument.tuple) out += "(";
            for (std::size_t v = 0; v < argument.values.size(); ++v)
                out += (v ? ", " : "") + values.at(argument.values[v]).name;
            if (argument.tuple) out += ")";
        }
        const bool as_inputs = short_form && !in_place.empty();
        if (as_inputs) {
            for (std::size_t p = 0; p < in_place.size(); ++p)
                out += (p || !sorted.empty() ? ", " : "") + in_place[p].first + " = " + in_place[p].second;
        }
        const std::string& op_name = statement.name.empty() ? result->name : statement.name;
        // Attributes in name order, `name` among them (MIL.md §1.6).
        std::vector<std::pair<std::string, std::string>> attributes =
            as_inputs ? decltype(in_place){} : in_place;
        attributes.emplace_back("name", scalar_literal(dialect, "string", "\"" + op_name + "\""));
        if (statement.op == "const")
            attributes.emplace_back("val",
                                    literal_text(dialect, result->dtype, result->shape, statement.value));
        std::sort(attributes.begin(), attributes.end());
        out += ")[";
        for (std::size_t a = 0; a < attributes.size(); ++a)
            out += (a ? ", " : "") + attributes[a].first + " = " + attributes[a].second;
        out += "];\n";
    }
    out += "        } -> (";
    for (std::size_t i = 0; i < outputs.size(); ++i)
        out += (i ? ", " : "") + values.at(outputs[i]).name;
    out += ");\n}\n";
    return out;
}

}  // namespace anvil::detail::ane
