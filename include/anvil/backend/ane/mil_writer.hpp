// anvil: the builder of the ANE backend's MIL programs. The lowering adds one `main` function's inputs,
// consts and ops statement by statement; the result is an in-memory program (mil_program.hpp) that
// mil_text.hpp prints for the private path and backend/coreml encodes as Core ML's protobuf. As coremltools
// does, every op parameter is its own named `const` (never an inline literal); arguments are kept in the
// caller's order (the text prints them sorted, the protobuf as given, as coremltools writes an op's inputs in
// its spec's order); and fp16 consts of 10 or more elements live in the weight file (the const names the
// blob's metadata record, weight_blob.hpp). Output is deterministic: names come from the caller, made unique
// in order of creation.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "anvil/backend/ane/mil_op_defaults.hpp"
#include "anvil/backend/ane/mil_program.hpp"
#include "anvil/backend/ane/mil_text.hpp"
#include "anvil/backend/ane/weight_blob.hpp"
#include "anvil/backend/ane/weight_file.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/half.hpp"
#include "anvil/core/sha256.hpp"

namespace anvil::detail::ane {

// The path coremltools always writes (MIL.md §1.5); the bridge keys the weights dictionary by it.
inline constexpr std::string_view default_weight_path = "@model_path/weights/weight.bin";

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
        : one_file_per_weight_(one_file_per_weight) {
        function_.dialect = dialect;
    }

    [[nodiscard]] mil_dialect dialect() const noexcept { return function_.dialect; }

    // A function input: an fp16 tensor (rank 4 [1, C, 1, W] for the ANE; RUNTIME.md §3), or for a Core ML
    // program any rank and "int32".
    mil_ref input(std::string_view name, std::vector<std::int64_t> shape, std::string_view dtype = "fp16") {
        const mil_ref ref = new_value(std::string(name), std::string(dtype), std::move(shape), true);
        function_.inputs.push_back(ref);
        return ref;
    }

    // A Core ML state input (spec 9, COREML.md §3): an fp16 buffer the model keeps between predictions
    // (MLState). The function reads it with read_state and replaces it with write_state (see state_write).
    mil_ref state_input(std::string_view name, std::vector<std::int64_t> shape) {
        if (function_.dialect != mil_dialect::ios18) {
            throw unsupported_error(message("MIL writer: the state ", name,
                                            " needs the ios18 dialect (Core ML spec 9, macOS 15)"));
        }
        const mil_ref ref = new_value(std::string(name), "fp16", std::move(shape), true);
        function_.values[ref].is_state = true;
        function_.inputs.push_back(ref);
        return ref;
    }

    // `read_state(input = state)`: the state's current value.
    mil_ref state_read(mil_ref state, std::string_view base) {
        require_state(state, "read_state");
        return op("read_state", base, shape(state), {{"input", {state}}});
    }

    // `write_state(data = value, input = state)`: replaces the state's value once the function returns;
    // the statement has no result (coremltools exports coreml_update_state so, COREML.md §2.4).
    void state_write(mil_ref state, mil_ref data, std::string_view op_name) {
        require_state(state, "write_state");
        if (data >= function_.values.size() || shape(data) != shape(state) ||
            function_.values[data].dtype != "fp16") {
            throw error(
                message("MIL writer: write_state of ", name(state), " needs an fp16 value of its shape"));
        }
        std::string unique = sanitise_mil_name(op_name);
        for (std::size_t suffix = 1; taken_.contains(unique); ++suffix)
            unique = message(sanitise_mil_name(op_name), "_", suffix);
        taken_.insert(unique);
        mil_statement statement;
        statement.result = no_result;
        statement.op = "write_state";
        statement.name = unique;
        statement.arguments = {{"data", {data}}, {"input", {state}}};
        function_.statements.push_back(std::move(statement));
    }

    // Scalar and small integer consts (op parameters).
    mil_ref const_int(std::string_view base, std::int64_t number) {
        mil_constant value;
        value.kind = mil_constant_kind::int32;
        value.ints.push_back(checked_int32(number, base));
        return add_const(base, "int32", {}, std::move(value));
    }
    mil_ref const_bool(std::string_view base, bool flag) {
        mil_constant value;
        value.kind = mil_constant_kind::boolean;
        value.bools.push_back(flag ? 1 : 0);
        return add_const(base, "bool", {}, std::move(value));
    }
    mil_ref const_string(std::string_view base, std::string_view text) {
        mil_constant value;
        value.kind = mil_constant_kind::string;
        value.text = std::string(text);
        return add_const(base, "string", {}, std::move(value));
    }
    mil_ref const_fp16_scalar(std::string_view base, float number) {
        mil_constant value;
        value.kind = mil_constant_kind::fp16;
        value.halves.push_back(half(number));
        require_finite(value.halves.back());
        return add_const(base, "fp16", {}, std::move(value));
    }
    mil_ref const_ints(std::string_view base, std::span<const std::int64_t> numbers) {
        mil_constant value;
        value.kind = mil_constant_kind::int32;
        for (const std::int64_t number : numbers)
            value.ints.push_back(checked_int32(number, base));
        return add_const(base, "int32", {static_cast<std::int64_t>(numbers.size())}, std::move(value));
    }
    // An int32 tensor const of any shape (inline: coremltools moves int32 to the weight file only from
    // iOS 18, MIL.md §1.5).
    mil_ref const_int_tensor(std::string_view base, std::vector<std::int64_t> shape,
                             std::span<const std::int64_t> numbers) {
        mil_constant value;
        value.kind = mil_constant_kind::int32;
        for (const std::int64_t number : numbers)
            value.ints.push_back(checked_int32(number, base));
        return add_const(base, "int32", std::move(shape), std::move(value));
    }
    mil_ref const_bools(std::string_view base, const std::vector<bool>& flags) {
        mil_constant value;
        value.kind = mil_constant_kind::boolean;
        for (const bool flag : flags)
            value.bools.push_back(flag ? 1 : 0);
        return add_const(base, "bool", {static_cast<std::int64_t>(flags.size())}, std::move(value));
    }
    // An fp16 tensor const: inline below 10 elements, else a blob in the weight file (MIL.md §1.5).
    mil_ref const_fp16(std::string_view base, std::vector<std::int64_t> shape, std::span<const half> values) {
        if (values.size() < 10) {
            mil_constant value;
            value.kind = mil_constant_kind::fp16;
            value.halves.assign(values.begin(), values.end());
            for (const half h : value.halves)
                require_finite(h);
            return add_const(base, "fp16", std::move(shape), std::move(value));
        }
        mil_constant value = blob(blob_dtype::float16, std::as_bytes(values));
        return add_const(base, "fp16", std::move(shape), std::move(value));
    }

    // A constexpr_* op's parameters (written in place, mil_program.hpp mil_literal): an fp16 tensor (inline
    // below 10 elements and rank 4, else a blob); int8 or uint8 values (the same rule); values of a
    // sub-byte type ("uint4", "uint6", ...), always a blob, packed LSB first; a scalar int32; a uint32
    // vector.
    mil_literal literal_fp16(std::vector<std::int64_t> shape, std::span<const half> values) {
        for (const half h : values)
            require_finite(h);
        // An inline rank-4 scale is reported to fail on the private route (RUNTIME.md §0b #19): a parameter
        // of rank 4 or more lives in the weight file, however small.
        const bool inline_allowed = shape.size() < 4;
        mil_literal literal{"fp16", std::move(shape), {}};
        if (values.size() < 10 && inline_allowed) {
            literal.value.kind = mil_constant_kind::fp16;
            literal.value.halves.assign(values.begin(), values.end());
        } else {
            literal.value = blob(blob_dtype::float16, std::as_bytes(values));
        }
        return literal;
    }
    mil_literal literal_bytes(std::string_view dtype, std::vector<std::int64_t> shape,
                              std::span<const std::uint8_t> values) {
        if (dtype != "int8" && dtype != "uint8")
            throw error(message("MIL writer: byte values must be int8 or uint8, got ", dtype));
        const bool inline_allowed = shape.size() < 4;  // as literal_fp16: no rank-4 parameter inline
        mil_literal literal{std::string(dtype), std::move(shape), {}};
        if (values.size() < 10 && inline_allowed) {
            literal.value.kind = mil_constant_kind::bytes;
            literal.value.raw.assign(values.begin(), values.end());
        } else {
            literal.value =
                blob(dtype == "int8" ? blob_dtype::int8 : blob_dtype::uint8, std::as_bytes(values));
        }
        return literal;
    }
    mil_literal literal_sub_byte(unsigned bits, std::vector<std::int64_t> shape,
                                 std::span<const std::uint8_t> values) {
        static constexpr std::pair<unsigned, blob_dtype> types[] = {{1, blob_dtype::uint1},
                                                                    {2, blob_dtype::uint2},
                                                                    {3, blob_dtype::uint3},
                                                                    {4, blob_dtype::uint4},
                                                                    {6, blob_dtype::uint6}};
        const auto type = std::find_if(std::begin(types), std::end(types),
                                       [&](const auto& entry) { return entry.first == bits; });
        if (type == std::end(types))
            throw error(message("MIL writer: no sub-byte type of ", bits, " bits (1, 2, 3, 4 or 6)"));
        for (const std::uint8_t v : values)
            if (v >= (1u << bits))
                throw error(message("MIL writer: the value ", int{v}, " does not fit uint", bits));
        const packed_sub_byte packed = pack_sub_byte(values, bits);
        return {message("uint", bits), std::move(shape),
                blob(type->second, packed.bytes, packed.padding_bits)};
    }
    static mil_literal literal_int(std::int64_t number, std::string_view what) {
        mil_literal literal{"int32", {}, {}};
        literal.value.kind = mil_constant_kind::int32;
        literal.value.ints.push_back(checked_int32(number, what));
        return literal;
    }
    static mil_literal literal_uint32s(std::span<const std::int64_t> numbers, std::string_view what) {
        mil_literal literal{"uint32", {static_cast<std::int64_t>(numbers.size())}, {}};
        literal.value.kind = mil_constant_kind::uint32;
        for (const std::int64_t number : numbers) {
            if (number < 0 || number > UINT32_MAX)
                throw unsupported_error(message("MIL text: ", what, " = ", number, " does not fit uint32"));
            literal.value.uints.push_back(static_cast<std::uint32_t>(number));
        }
        return literal;
    }

    // A constexpr_* op (constexpr_affine_dequantize, constexpr_lut_to_dense,
    // constexpr_blockwise_shift_scale): a weight known when the program compiles, stored compressed; its
    // result is a const to every reader.
    mil_ref constexpr_op(std::string_view type, std::string_view base, std::vector<std::int64_t> shape,
                         std::vector<std::pair<std::string, mil_literal>> parameters) {
        const mil_ref ref = op(type, base, std::move(shape), {});
        function_.values[ref].is_const = true;
        function_.statements.back().parameters = std::move(parameters);
        return ref;
    }

    // An op with one result of `dtype` and `shape` (rank 0 = scalar). Every input coremltools' definition
    // gives a default that `arguments` leave out is added as a named const (mil_op_defaults.hpp).
    mil_ref op(std::string_view type, std::string_view base, std::vector<std::int64_t> shape,
               std::vector<mil_argument> arguments, std::string_view dtype = "fp16") {
        for (const auto& argument : arguments) {
            for (const mil_ref ref : argument.values) {
                if (ref >= function_.values.size()) {
                    throw error(message("MIL writer: op ", type, " argument ", argument.name,
                                        " reads an undefined value"));
                }
            }
        }
        add_default_inputs(type, base, arguments);
        const mil_ref ref = new_value(std::string(base), std::string(dtype), std::move(shape), false);
        mil_statement statement;
        statement.result = ref;
        statement.op = std::string(type);
        statement.arguments = std::move(arguments);
        function_.statements.push_back(std::move(statement));
        return ref;
    }

    // By value: a reference would dangle once the next value is added.
    [[nodiscard]] std::vector<std::int64_t> shape(mil_ref ref) const {
        return function_.values.at(ref).shape;
    }
    [[nodiscard]] const std::string& name(mil_ref ref) const { return function_.values.at(ref).name; }
    [[nodiscard]] bool is_const(mil_ref ref) const { return function_.values.at(ref).is_const; }
    [[nodiscard]] bool is_input(mil_ref ref) const {
        return std::find(function_.inputs.begin(), function_.inputs.end(), ref) != function_.inputs.end();
    }

    // Gives an op result its final name (a function output's symbol); false when the name is taken or the
    // value is not an op result (inputs and consts keep theirs).
    bool rename(mil_ref ref, const std::string& name) {
        mil_value& value = function_.values.at(ref);
        if (value.is_const || is_input(ref) || taken_.contains(name)) return false;
        taken_.erase(value.name);
        taken_.insert(name);
        value.name = name;
        return true;
    }

    // Names the op that produces `ref` apart from its result (coremltools names ops "linear_0" and their
    // results "y"); by default an op's `name` is its result's.
    void name_op(mil_ref ref, std::string_view op_name) {
        for (auto& statement : function_.statements) {
            if (statement.result == ref) {
                statement.name = sanitise_mil_name(op_name);
                return;
            }
        }
        throw error(message("MIL writer: value ", ref, " is not the result of an op"));
    }

    // Drops every statement whose result nothing reads, directly or through other statements, but `roots`
    // (the function's outputs) and write_state. The lowering makes forms eagerly: a reshape's logical form
    // is written before the lowering sees that the attention after it reads the channels-first source
    // instead, and that form must not cost the program a transpose. Blobs of dropped consts stay in the
    // weight file (unreferenced bytes; the lowering makes no such blob today).
    void prune(std::span<const mil_ref> roots) {
        std::vector<bool> live(function_.values.size(), false);
        for (const mil_ref r : roots)
            live.at(r) = true;
        for (auto s = function_.statements.rbegin(); s != function_.statements.rend(); ++s) {
            if (s->result != no_result && !live[s->result]) continue;
            for (const mil_argument& argument : s->arguments)
                for (const mil_ref v : argument.values)
                    live.at(v) = true;
        }
        std::erase_if(function_.statements,
                      [&](const mil_statement& s) { return s.result != no_result && !live[s.result]; });
    }

    // The function built so far: what both writers read.
    [[nodiscard]] const mil_function& function() const noexcept { return function_; }

    // The whole program as MIL text, returning `outputs` in this order, with a digest of its weight files
    // in buildInfo (mil_text.hpp says why).
    [[nodiscard]] std::string text(std::span<const mil_ref> outputs) const {
        return mil_text(function_, outputs, weights_digest());
    }

    // SHA-256 over every weight file's path and bytes, hex; empty when the program has none.
    [[nodiscard]] std::string weights_digest() const {
        if (blobs_.empty()) return {};
        sha256 digest;
        for (const auto& [path, blob] : blobs_) {
            digest.update(path).update(message(":", blob.bytes().size(), ":"));
            digest.update(std::span<const std::byte>(blob.bytes()));
        }
        return digest.finish_hex();
    }

    // How many statements apply op `type` (consts excluded).
    [[nodiscard]] std::size_t count_ops(std::string_view type) const {
        return static_cast<std::size_t>(std::count_if(function_.statements.begin(),
                                                      function_.statements.end(),
                                                      [&](const mil_statement& s) { return s.op == type; }));
    }

    // The weight files the blob consts name (none when every const is inline).
    [[nodiscard]] std::vector<weight_file> weights() const {
        std::vector<weight_file> files;
        for (const auto& [path, blob] : blobs_)
            files.push_back({path, blob.bytes()});
        return files;
    }

private:
    // MIL has no literal for inf or NaN; refused where the const is made, so the error names the lowering
    // step.
    static void require_finite(half value) {
        const float number = static_cast<float>(value);
        if (!std::isfinite(number)) {
            throw unsupported_error(
                message("MIL text: the fp16 literal ", number, " is not finite; constants must be finite"));
        }
    }

    static std::int32_t checked_int32(std::int64_t number, std::string_view what) {
        if (number < INT32_MIN || number > INT32_MAX) {
            throw unsupported_error(message("MIL text: ", what, " = ", number, " does not fit int32"));
        }
        return static_cast<std::int32_t>(number);
    }

    // Core ML's ML Program parser refuses an op that leaves out an input coremltools' definition gives a
    // default, although its documentation calls them optional (RUNTIME.md §0b #17); coremltools writes them
    // all, and so does this writer, on both routes, for the inputs this dialect's opset defines.
    void add_default_inputs(std::string_view type, std::string_view base,
                            std::vector<mil_argument>& arguments) {
        const int opset = function_.dialect == mil_dialect::ios18 ? 18 : 16;
        const auto given = [&](std::string_view name) {
            return std::any_of(arguments.begin(), arguments.end(),
                               [&](const mil_argument& a) { return a.name == name; });
        };
        const auto x = std::find_if(arguments.begin(), arguments.end(), [](const mil_argument& a) {
            return a.name == "x" && a.values.size() == 1 && !a.tuple;
        });
        const mil_ref x_ref = x == arguments.end() ? no_result : x->values.front();
        for (const mil_default_input& input : mil_default_inputs) {
            if (input.op != type || input.since > opset || given(input.name)) continue;
            const std::string name = message(base, "_", input.name);
            const auto x_value = [&]() -> const mil_value& {
                if (x_ref == no_result) {
                    throw error(message("MIL writer: ", type, " leaves ", input.name,
                                        " out, whose default depends on its x, which it does not give"));
                }
                return function_.values[x_ref];
            };
            const auto axes = [&](std::int64_t count, std::int64_t value, bool ascending) {
                std::vector<std::int64_t> numbers(static_cast<std::size_t>(std::max<std::int64_t>(count, 0)));
                for (std::size_t i = 0; i < numbers.size(); ++i)
                    numbers[i] = ascending ? static_cast<std::int64_t>(i) : value;
                return const_ints(name, numbers);
            };
            const auto spatial_rank = [&] { return static_cast<std::int64_t>(x_value().shape.size()) - 2; };
            mil_ref value = no_result;
            switch (input.kind) {
                case mil_default_kind::int32:
                    value = const_int(name, static_cast<std::int64_t>(input.number));
                    break;
                case mil_default_kind::boolean:
                    value = const_bool(name, input.number != 0.0);
                    break;
                case mil_default_kind::string:
                    value = const_string(name, input.text);
                    break;
                case mil_default_kind::floating:
                    if (x_value().dtype != "fp16") {
                        throw unsupported_error(message("MIL writer: ", type, " leaves ", input.name,
                                                        " out, and its x is ", x_value().dtype,
                                                        "; only fp16 defaults are written"));
                    }
                    value = const_fp16_scalar(name, static_cast<float>(input.number));
                    break;
                case mil_default_kind::ones_per_spatial_axis:
                    value = axes(spatial_rank(), 1, false);
                    break;
                case mil_default_kind::zeros_per_spatial_side:
                    value = axes(2 * spatial_rank(), 0, false);
                    break;
                case mil_default_kind::every_axis:
                    value = axes(static_cast<std::int64_t>(x_value().shape.size()), 0, true);
                    break;
            }
            arguments.push_back({std::string(input.name), {value}});
        }
    }

    void require_state(mil_ref state, std::string_view op_type) const {
        if (state >= function_.values.size() || !function_.values[state].is_state)
            throw error(message("MIL writer: ", op_type, " needs a state input"));
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
        function_.values.push_back({std::move(name), std::move(dtype), std::move(shape), false});
        return function_.values.size() - 1;
    }

    // A blob appended to the weight file (one file per blob when asked for), as the const value naming it.
    mil_constant blob(blob_dtype type, std::span<const std::byte> payload, std::uint64_t padding_bits = 0) {
        std::string path(default_weight_path);
        if (one_file_per_weight_) {
            path = message("@model_path/weights/w", blobs_.size(), ".bin");
            blobs_.emplace_back(path, weight_blob_writer{});
        } else if (blobs_.empty()) {
            blobs_.emplace_back(path, weight_blob_writer{});
        }
        mil_constant value;
        value.kind = mil_constant_kind::blob;
        value.blob_offset = blobs_.back().second.append(type, payload, padding_bits);
        value.blob_path = std::move(path);
        return value;
    }

    mil_ref add_const(std::string_view base, std::string_view dtype, std::vector<std::int64_t> shape,
                      mil_constant value) {
        const mil_ref ref = new_value(std::string(base), std::string(dtype), std::move(shape), false);
        function_.values[ref].is_const = true;
        mil_statement statement;
        statement.result = ref;
        statement.op = "const";
        statement.value = std::move(value);
        function_.statements.push_back(std::move(statement));
        return ref;
    }

    bool one_file_per_weight_;
    mil_function function_;
    std::unordered_set<std::string> taken_;
    std::vector<std::pair<std::string, weight_blob_writer>> blobs_;
};

}  // namespace anvil::detail::ane
