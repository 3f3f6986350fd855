// anvil: the MIL text writer for the ANE backend. It builds one `main` function statement by statement and
// prints it in either dialect (MIL.md §1.4, RUNTIME.md §4):
//   ios18: `program(1.3)`, `func main<ios18>`, short scalar types (`int32`, `string("x")`);
//   ios16: `program(1.0)`, `func main<ios16>`, verbose scalar types (`tensor<int32, []>`), which M1/M2 need.
// As coremltools does, every op parameter is its own named `const` (never an inline literal), arguments print
// in alphabetical order, every op carries `[name = ...]`, fp16 literals are C99 hex floats, and consts of 10
// or more elements live in the weight file (BLOBFILE offset = the blob's metadata record, weight_blob.hpp).
// Output is deterministic: names come from the caller, made unique in order of creation.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "anvil/backend/ane/weight_blob.hpp"
#include "anvil/backend/ane/weight_file.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/half.hpp"

namespace anvil::detail::ane {

enum class mil_dialect : std::uint8_t { ios18, ios16 };

// The path coremltools always writes (MIL.md §1.5); the bridge keys the weights dictionary by it.
inline constexpr std::string_view default_weight_path = "@model_path/weights/weight.bin";

// A value of the function being written: an input, a const or an op result.
using mil_ref = std::size_t;

// One argument of an op: `name = value`, or `name = (a, b, ...)` for a tuple input (concat's values).
struct mil_argument {
    std::string name;
    std::vector<mil_ref> values;
    bool tuple = false;
};

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

// A name MIL accepts ([A-Za-z_][A-Za-z0-9_]*, MIL.md §1.1).
[[nodiscard]] inline std::string sanitise_mil_name(std::string_view raw) {
    std::string name;
    for (const char c : raw) {
        const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        const bool digit = c >= '0' && c <= '9';
        name += letter || digit || c == '_' ? c : '_';
    }
    if (name.empty() || (name[0] >= '0' && name[0] <= '9')) name.insert(name.begin(), '_');
    return name;
}

class mil_writer {
public:
    explicit mil_writer(mil_dialect dialect, bool one_file_per_weight = false)
        : dialect_(dialect), one_file_per_weight_(one_file_per_weight) {}

    [[nodiscard]] mil_dialect dialect() const noexcept { return dialect_; }

    // A function input: an fp16 tensor (rank 4 [1, C, 1, W] for the ANE; RUNTIME.md §3).
    mil_ref input(std::string_view name, std::vector<std::int64_t> shape) {
        const mil_ref ref = new_value(std::string(name), "fp16", std::move(shape), true);
        inputs_.push_back(ref);
        return ref;
    }

    // Scalar and small integer consts (op parameters).
    mil_ref const_int(std::string_view base, std::int64_t number) {
        return add_const(base, "int32", {}, std::to_string(checked_int32(number, base)));
    }
    mil_ref const_bool(std::string_view base, bool flag) {
        return add_const(base, "bool", {}, flag ? "true" : "false");
    }
    mil_ref const_string(std::string_view base, std::string_view text) {
        return add_const(base, "string", {}, message("\"", text, "\""));
    }
    mil_ref const_fp16_scalar(std::string_view base, float number) {
        return add_const(base, "fp16", {}, fp16_literal(half(number)));
    }
    mil_ref const_ints(std::string_view base, std::span<const std::int64_t> numbers) {
        std::string list;
        for (std::size_t i = 0; i < numbers.size(); ++i)
            list += (i ? ", " : "") + std::to_string(checked_int32(numbers[i], base));
        return add_const(base, "int32", {static_cast<std::int64_t>(numbers.size())}, "[" + list + "]");
    }
    mil_ref const_bools(std::string_view base, const std::vector<bool>& flags) {
        std::string list;
        for (std::size_t i = 0; i < flags.size(); ++i)
            list += std::string(i ? ", " : "") + (flags[i] ? "true" : "false");
        return add_const(base, "bool", {static_cast<std::int64_t>(flags.size())}, "[" + list + "]");
    }
    // An fp16 tensor const: inline below 10 elements, else a blob in the weight file (MIL.md §1.5).
    mil_ref const_fp16(std::string_view base, std::vector<std::int64_t> shape, std::span<const half> values) {
        if (values.size() < 10) {
            std::string list;
            for (std::size_t i = 0; i < values.size(); ++i)
                list += (i ? ", " : "") + fp16_literal(values[i]);
            return add_const(base, "fp16", std::move(shape), "[" + list + "]");
        }
        std::string path(default_weight_path);
        if (one_file_per_weight_) {
            path = message("@model_path/weights/w", blobs_.size(), ".bin");
            blobs_.emplace_back(path, weight_blob_writer{});
        } else if (blobs_.empty()) {
            blobs_.emplace_back(path, weight_blob_writer{});
        }
        const std::uint64_t offset = blobs_.back().second.append(blob_dtype::float16, std::as_bytes(values));
        const std::string blob =
            message("BLOBFILE(path = ", scalar_literal("string", "\"" + path + "\""),
                    ", offset = ", scalar_literal("uint64", std::to_string(offset)), ")");
        return add_const(base, "fp16", std::move(shape), blob, true);
    }

    // An op with one result of `dtype` and `shape` (rank 0 = scalar).
    mil_ref op(std::string_view type, std::string_view base, std::vector<std::int64_t> shape,
               std::vector<mil_argument> arguments, std::string_view dtype = "fp16") {
        for (const auto& argument : arguments) {
            for (const mil_ref ref : argument.values) {
                if (ref >= values_.size()) {
                    throw error(message("MIL writer: op ", type, " argument ", argument.name,
                                        " reads an undefined value"));
                }
            }
        }
        std::sort(arguments.begin(), arguments.end(),
                  [](const mil_argument& a, const mil_argument& b) { return a.name < b.name; });
        const mil_ref ref = new_value(std::string(base), std::string(dtype), std::move(shape), false);
        statements_.push_back({ref, std::string(type), std::move(arguments), {}});
        return ref;
    }

    // By value: a reference would dangle once the next value is added.
    [[nodiscard]] std::vector<std::int64_t> shape(mil_ref ref) const { return values_.at(ref).shape; }
    [[nodiscard]] const std::string& name(mil_ref ref) const { return values_.at(ref).name; }
    [[nodiscard]] bool is_const(mil_ref ref) const { return values_.at(ref).is_const; }
    [[nodiscard]] bool is_input(mil_ref ref) const {
        return std::find(inputs_.begin(), inputs_.end(), ref) != inputs_.end();
    }

    // Gives an op result its final name (a function output's symbol); false when the name is taken or the
    // value is not an op result (inputs and consts keep theirs).
    bool rename(mil_ref ref, const std::string& name) {
        mil_value& value = values_.at(ref);
        if (value.is_const || is_input(ref) || taken_.contains(name)) return false;
        taken_.erase(value.name);
        taken_.insert(name);
        value.name = name;
        return true;
    }

    // The whole program, returning `outputs` in this order.
    [[nodiscard]] std::string text(std::span<const mil_ref> outputs) const {
        const bool short_form = dialect_ == mil_dialect::ios18;
        std::string out = short_form ? "program(1.3)\n" : "program(1.0)\n";
        out += short_form
                   ? "[buildInfo = dict<string, string>({{\"coremlc-component-MIL\", \"3510.2.1\"}, "
                     "{\"coremlc-version\", \"3505.4.1\"}, {\"coremltools-component-milinternal\", \"\"}, "
                     "{\"coremltools-version\", \"9.0\"}})]\n"
                   : "[buildInfo = dict<tensor<string, []>, tensor<string, []>>({{\"coremlc-version\", "
                     "\"3505.4.1\"}})]\n";
        out += "{\n    func main<";
        out += short_form ? "ios18" : "ios16";
        out += ">(";
        for (std::size_t i = 0; i < inputs_.size(); ++i) {
            out += (i ? ", " : "") + type_of(inputs_[i]) + " " + values_[inputs_[i]].name;
        }
        out += ") {\n";
        for (const auto& statement : statements_) {
            const mil_value& result = values_[statement.result];
            out +=
                "            " + type_of(statement.result) + " " + result.name + " = " + statement.op + "(";
            for (std::size_t a = 0; a < statement.arguments.size(); ++a) {
                const mil_argument& argument = statement.arguments[a];
                out += (a ? ", " : "") + argument.name + " = ";
                if (argument.tuple) out += "(";
                for (std::size_t v = 0; v < argument.values.size(); ++v)
                    out += (v ? ", " : "") + values_[argument.values[v]].name;
                if (argument.tuple) out += ")";
            }
            out += ")[name = " + scalar_literal("string", "\"" + result.name + "\"");
            if (!statement.literal.empty()) out += ", val = " + statement.literal;
            out += "];\n";
        }
        out += "        } -> (";
        for (std::size_t i = 0; i < outputs.size(); ++i)
            out += (i ? ", " : "") + values_.at(outputs[i]).name;
        out += ");\n}\n";
        return out;
    }

    // How many statements apply op `type` (consts excluded).
    [[nodiscard]] std::size_t count_ops(std::string_view type) const {
        return static_cast<std::size_t>(std::count_if(statements_.begin(), statements_.end(),
                                                      [&](const mil_statement& s) { return s.op == type; }));
    }

    // The weight files the BLOBFILE references name (none when every const is inline).
    [[nodiscard]] std::vector<weight_file> weights() const {
        std::vector<weight_file> files;
        for (const auto& [path, blob] : blobs_)
            files.push_back({path, blob.bytes()});
        return files;
    }

private:
    struct mil_value {
        std::string name;
        std::string dtype;
        std::vector<std::int64_t> shape;  // rank 0: a scalar
        bool is_const = false;
    };
    struct mil_statement {
        mil_ref result;
        std::string op;
        std::vector<mil_argument> arguments;
        std::string literal;  // const's val
    };

    static std::int32_t checked_int32(std::int64_t number, std::string_view what) {
        if (number < INT32_MIN || number > INT32_MAX) {
            throw unsupported_error(message("MIL text: ", what, " = ", number, " does not fit int32"));
        }
        return static_cast<std::int32_t>(number);
    }

    mil_ref new_value(std::string base, std::string dtype, std::vector<std::int64_t> shape, bool exact) {
        std::string name = sanitise_mil_name(base);
        if (taken_.contains(name)) {
            if (exact) throw error(message("MIL writer: the name ", name, " is used twice"));
            std::size_t suffix = 1;
            while (taken_.contains(message(name, "_", suffix)))
                ++suffix;
            name = message(name, "_", suffix);
        }
        taken_.insert(name);
        values_.push_back({std::move(name), std::move(dtype), std::move(shape), false});
        return values_.size() - 1;
    }

    mil_ref add_const(std::string_view base, std::string_view dtype, std::vector<std::int64_t> shape,
                      const std::string& value, bool blob = false) {
        const bool scalar = shape.empty();
        const mil_ref ref = new_value(std::string(base), std::string(dtype), std::move(shape), false);
        values_[ref].is_const = true;
        const std::string literal =
            scalar && !blob ? scalar_literal(dtype, value) : type_of(ref) + "(" + value + ")";
        statements_.push_back({ref, "const", {}, literal});
        return ref;
    }

    [[nodiscard]] std::string scalar_type(std::string_view dtype) const {
        return dialect_ == mil_dialect::ios18 ? std::string(dtype) : message("tensor<", dtype, ", []>");
    }
    [[nodiscard]] std::string scalar_literal(std::string_view dtype, const std::string& value) const {
        return scalar_type(dtype) + "(" + value + ")";
    }
    [[nodiscard]] std::string type_of(mil_ref ref) const {
        const mil_value& value = values_[ref];
        if (value.shape.empty()) return scalar_type(value.dtype);
        std::string dims_text;
        for (std::size_t i = 0; i < value.shape.size(); ++i)
            dims_text += (i ? ", " : "") + std::to_string(value.shape[i]);
        return message("tensor<", value.dtype, ", [", dims_text, "]>");
    }

    mil_dialect dialect_;
    bool one_file_per_weight_;
    std::vector<mil_value> values_;
    std::vector<mil_statement> statements_;
    std::vector<mil_ref> inputs_;
    std::unordered_set<std::string> taken_;
    std::vector<std::pair<std::string, weight_blob_writer>> blobs_;
};

}  // namespace anvil::detail::ane
