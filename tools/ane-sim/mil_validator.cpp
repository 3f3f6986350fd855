// anvil's ANE simulator: checks a parsed MIL program the way the ANE compiler path does (CONSTRAINTS.md "MIL
// text"; MIL.md Part 2): ops and inputs against mil_ops.json for the function's opset, value scoping,
// declared against inferred types, limits, BLOBFILE records (MIL.md §1.5) and the option rules of `rules`.
#include <algorithm>
#include <anvil/core/half.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include "citations.hpp"
#include "mil_executor.hpp"
#include "mil_ops_table.hpp"

namespace anvil_sim::mil {

namespace {

// A broken rule: "line N: what [CONSTRAINTS.md:NN]".
[[noreturn]] void fail(int line, const std::string& what, rule cited, long code = codes::invalid_mil) {
    throw sim_failure(code, "line " + std::to_string(line) + ": " + what + cite(cited));
}

// ---- BLOBFILE (MIL.md §1.5)
// ---------------------------------------------------------------------------------

struct blob_dtype {
    std::uint32_t code = 0;
    std::uint64_t bits = 0;
};

std::optional<blob_dtype> blob_code(dtype type) {
    switch (type) {
        case dtype::fp16:
            return blob_dtype{1, 16};
        case dtype::fp32:
            return blob_dtype{2, 32};
        case dtype::uint8:
            return blob_dtype{3, 8};
        case dtype::int8:
            return blob_dtype{4, 8};
        case dtype::int16:
            return blob_dtype{6, 16};
        case dtype::uint16:
            return blob_dtype{7, 16};
        case dtype::int4:
            return blob_dtype{8, 4};
        case dtype::uint1:
            return blob_dtype{9, 1};
        case dtype::uint2:
            return blob_dtype{10, 2};
        case dtype::uint4:
            return blob_dtype{11, 4};
        case dtype::uint3:
            return blob_dtype{12, 3};
        case dtype::uint6:
            return blob_dtype{13, 6};
        case dtype::int32:
            return blob_dtype{14, 32};
        case dtype::uint32:
            return blob_dtype{15, 32};
        default:
            return std::nullopt;
    }
}

template <class T>
T read_le(const std::vector<std::byte>& data, std::uint64_t at) {
    T v{};
    std::memcpy(&v, data.data() + at, sizeof(T));  // the simulator runs on little-endian hosts, as the ANE
    return v;
}

void load_blob(const literal& lit, std::span<const weight_file> weights, tensor& out) {
    const int line = lit.line;
    const auto code = [&](const std::string& what, rule cited = rule::blobfile_records) {
        fail(line, what, cited, codes::invalid_weights);
    };
    const weight_file* file = nullptr;
    for (const auto& w : weights)
        if (w.key == lit.blob_path) file = &w;
    if (!file) {
        std::string keys;
        for (const auto& w : weights)
            keys += (keys.empty() ? "" : ", ") + ("\"" + w.key + "\"");
        code("BLOBFILE path \"" + lit.blob_path +
                 "\" is not a key of the weights dictionary (keys: " + (keys.empty() ? "none" : keys) + ")",
             rule::weights_entries);
    }
    const auto& data = file->data;
    const std::string where = "BLOBFILE \"" + lit.blob_path + "\" offset " + std::to_string(lit.blob_offset);
    if (data.size() < 64)
        code(where + ": the file has " + std::to_string(data.size()) +
             " bytes, less than its 64-byte storage header");
    const auto count = read_le<std::uint32_t>(data, 0), version = read_le<std::uint32_t>(data, 4);
    if (version != 2 || count == 0)
        code(where + ": the storage header says count " + std::to_string(count) + ", version " +
             std::to_string(version) + " (expected version 2 and at least one blob)");
    const auto type = blob_code(lit.type.type);
    if (!type)
        code(where + ": dtype " + std::string(dtype_name(lit.type.type)) + " cannot be stored in a blob");
    if (lit.blob_offset < 64 || lit.blob_offset % 64 != 0 || lit.blob_offset > data.size() - 64)
        code(where + ": the offset must be a 64-byte aligned metadata record inside the " +
             std::to_string(data.size()) + "-byte file, after the storage header");
    const std::uint64_t meta = lit.blob_offset;
    const auto sentinel = read_le<std::uint32_t>(data, meta);
    if (sentinel != 0xDEADBEEFu)
        code(where + ": no blob metadata there (sentinel 0x" +
             [&] {
                 char buf[16];
                 std::snprintf(buf, sizeof buf, "%08X", sentinel);
                 return std::string(buf);
             }() +
             ", expected 0xDEADBEEF); the offset must point at the 64-byte metadata record, not at the data "
             "64 bytes after it");
    const auto stored_code = read_le<std::uint32_t>(data, meta + 4);
    const auto size = read_le<std::uint64_t>(data, meta + 8);
    const auto data_offset = read_le<std::uint64_t>(data, meta + 16);
    if (stored_code != type->code)
        code(where + ": the blob's dtype code is " + std::to_string(stored_code) + ", the declared type " +
             type_text(lit.type) + " needs " + std::to_string(type->code));
    const auto elements = static_cast<std::uint64_t>(element_count(lit.type.shape));
    const std::uint64_t expected = (elements * type->bits + 7) / 8;
    if (size != expected)
        code(where + ": the blob holds " + std::to_string(size) + " bytes, " + type_text(lit.type) +
             " needs " + std::to_string(expected));
    if (data_offset != meta + 64)
        code(where + ": the metadata's data offset is " + std::to_string(data_offset) + ", expected " +
             std::to_string(meta + 64) + " (right after the record)");
    // Sub-byte types: padding_size_in_bits is the unused high bits of the last byte; the reader requires it
    // below 8 with (sizeInBytes * 8 - padding) a whole number of elements (COREML.md §1.5), which for the
    // declared element count is exactly this.
    const auto padding = read_le<std::uint64_t>(data, meta + 24);
    const std::uint64_t expected_padding = type->bits < 8 ? (8 - elements * type->bits % 8) % 8 : 0;
    if (type->bits < 8 && padding != expected_padding)
        code(where + ": padding_size_in_bits is " + std::to_string(padding) + "; " +
             std::to_string(elements) + " values of " + std::to_string(type->bits) + " bits leave " +
             std::to_string(expected_padding));
    if (data_offset > data.size() || size > data.size() - data_offset)
        code(where + ": the data (" + std::to_string(size) + " bytes at " + std::to_string(data_offset) +
             ") runs past the end of the " + std::to_string(data.size()) + "-byte file");
    out.data.assign(elements, 0.0f);
    out.has_data = true;
    for (std::uint64_t i = 0; i < elements; ++i) {
        const std::uint64_t at = data_offset + i * type->bits / 8;
        float v = 0.0f;
        if (type->bits < 8) {  // packed LSB first; a value may continue in the next byte (uint3, uint6)
            const std::uint64_t bit = i * type->bits;
            const auto low = static_cast<unsigned>(read_le<std::uint8_t>(data, data_offset + bit / 8));
            const auto high =
                bit / 8 + 1 < size
                    ? static_cast<unsigned>(read_le<std::uint8_t>(data, data_offset + bit / 8 + 1))
                    : 0u;
            const unsigned word = (low | (high << 8)) >> (bit % 8);
            const unsigned value = word & ((1u << type->bits) - 1u);
            // int4 is two's complement
            out.data[i] = lit.type.type == dtype::int4 && value >= 8 ? static_cast<float>(value) - 16.0f
                                                                     : static_cast<float>(value);
            continue;
        }
        switch (lit.type.type) {
            case dtype::fp16:
                v = anvil::half_bits_to_float(read_le<std::uint16_t>(data, at));
                break;
            case dtype::fp32:
                v = read_le<float>(data, at);
                break;
            case dtype::uint8:
                v = read_le<std::uint8_t>(data, at);
                break;
            case dtype::int8:
                v = read_le<std::int8_t>(data, at);
                break;
            case dtype::int16:
                v = read_le<std::int16_t>(data, at);
                break;
            case dtype::uint16:
                v = read_le<std::uint16_t>(data, at);
                break;
            case dtype::int32:
                v = static_cast<float>(read_le<std::int32_t>(data, at));
                break;
            case dtype::uint32:
                v = static_cast<float>(read_le<std::uint32_t>(data, at));
                break;
            default:
                out.decodable = false;
                return;
        }
        out.data[i] = v;
    }
}

// ---- the checker
// --------------------------------------------------------------------------------------------

bool is_elementwise_binary(std::string_view op) {
    static const std::set<std::string, std::less<>> ops = {
        "add",   "sub",       "mul",  "real_div",   "pow",     "maximum",      "minimum",
        "equal", "not_equal", "less", "less_equal", "greater", "greater_equal"};
    return ops.contains(op);
}

bool dims_ok(const std::vector<std::int64_t>& shape) {
    return std::all_of(shape.begin(), shape.end(), [](std::int64_t d) { return d >= 0; });
}

class checker {
public:
    checker(const function& f, std::span<const weight_file> weights, const rules& options)
        : function_(f), weights_(weights), options_(options) {}

    prepared_program run() {
        for (const auto& param : function_.params)
            declare_param(param);
        for (const auto& s : function_.statements)
            check_statement(s);
        check_returns();
        if (options_.blobfile_limit > 0 && blobfiles_ > options_.blobfile_limit)
            fail(function_.line,
                 "the program has " + std::to_string(blobfiles_) +
                     " BLOBFILE-backed constants, more than the limit of " +
                     std::to_string(options_.blobfile_limit),
                 rule::blobfile_limit);
        result_.warnings = warnings_;
        return std::move(result_);
    }

private:
    // A rule about what the Neural Engine can run. A Neural Engine program fails to compile; in a Core ML
    // program Core ML runs the op on the CPU instead (COREML.md §4.1: it partitions per op and falls back
    // silently), so the simulator records why, for the compute plan. The first reason of an op is kept.
    void refuse_on_ane(int line, const std::string& what, rule cited) {
        if (!options_.coreml_program) fail(line, what, cited);
        if (cpu_reason_.empty()) cpu_reason_ = "line " + std::to_string(line) + ": " + what + cite(cited);
    }
    void refuse_on_ane(const std::string& what) {  // a Core ML placement rule, cited in `what`
        if (cpu_reason_.empty()) cpu_reason_ = what;
    }

    // A rule with a mode: error throws, warn records.
    void apply(rule_mode mode, int line, const std::string& what, rule cited) {
        if (mode == rule_mode::error) fail(line, what, cited);
        if (mode == rule_mode::warn) warn(line, what, cited);
    }
    void warn(int line, const std::string& what, rule cited) {
        warnings_ += "line " + std::to_string(line) + ": " + what + cite(cited) + "\n";
    }

    void check_type(const tensor_type& type, int line, const std::string& what) {
        if (!dims_ok(type.shape))
            fail(line,
                 what + " " + type_text(type) +
                     " has an unknown ('?') dimension; flexible shapes are not supported",
                 rule::rank_and_dimensions);
        if (type.shape.size() > 5)
            fail(line,
                 what + " " + type_text(type) + " has rank " + std::to_string(type.shape.size()) +
                     "; the ANE allows rank <= 5",
                 rule::rank_and_dimensions);
        for (std::int64_t d : type.shape)
            if (d > options_.max_dimension)
                refuse_on_ane(line,
                              what + " " + type_text(type) + " has a dimension of " + std::to_string(d) +
                                  ", more than the limit of " + std::to_string(options_.max_dimension),
                              rule::rank_and_dimensions);
    }

    int add_value(const std::string& name, const tensor_type& type, int line) {
        if (!name.empty() && ids_.contains(name))
            fail(line, "'" + name + "' is already defined (line " + std::to_string(lines_[name]) + ")",
                 rule::value_scoping);
        tensor t;
        t.type = type.type;
        t.shape = type.shape;
        result_.values.push_back(std::move(t));
        result_.value_names.push_back(name);
        is_const_.push_back(false);
        producer_.push_back(-1);
        const int id = static_cast<int>(result_.values.size()) - 1;
        if (!name.empty()) {
            ids_[name] = id;
            lines_[name] = line;
        }
        return id;
    }

    void check_io(const named_type& v, const char* what) {
        const auto& s = v.type.shape;
        if (options_.coreml_program) {
            // Core ML converts its MultiArrays to what the device needs (COREML.md §2.2: DOUBLE, FLOAT32,
            // FLOAT16 and INT32 are allowed; states are fp16). The package reader checked the description.
            const dtype t = v.type.type;
            if ((t != dtype::fp16 && t != dtype::fp32 && t != dtype::int32) || s.empty() || s.size() > 5 ||
                (v.type.is_state && t != dtype::fp16))
                fail(v.line,
                     std::string(what) + " '" + v.name + "' is " + type_text(v.type) +
                         "; a Core ML program's inputs and outputs are fp16, fp32 or int32 of rank 1 to 5, "
                         "and its states fp16",
                     rule::io_types);
            return;
        }
        if (v.type.is_state)
            fail(v.line,
                 std::string(what) + " '" + v.name +
                     "' is a state; state ops (read_state/write_state) fail through the in-memory "
                     "compiler path",
                 rule::reported_failing_ops);
        if ((v.type.type != dtype::fp16 && v.type.type != dtype::fp32) || s.size() != 4 || s[0] != 1)
            fail(v.line,
                 std::string(what) + " '" + v.name + "' is " + type_text(v.type) +
                     "; function inputs and outputs must be rank 4 [1, C, H, W] fp16 or fp32",
                 rule::io_types);
    }

    static io_tensor io_of(const std::string& name, dtype type, const std::vector<std::int64_t>& shape) {
        io_tensor io{name,
                     type == dtype::fp32    ? element_type::fp32
                     : type == dtype::int32 ? element_type::int32
                                            : element_type::fp16,
                     1,
                     1,
                     1,
                     shape};
        const std::size_t rank = shape.size();
        if (rank == 4 && shape[0] == 1) {  // a Neural Engine surface [1, C, H, W]
            io.channels = shape[1];
            io.height = shape[2];
            io.width = shape[3];
            return io;
        }
        for (std::size_t i = 0; i + 2 < rank; ++i)
            io.channels *= shape[i];
        io.height = rank >= 2 ? shape[rank - 2] : 1;
        io.width = rank >= 1 ? shape[rank - 1] : 1;
        return io;
    }

    void declare_param(const named_type& param) {
        check_io(param, "function input");
        check_type(param.type, param.line, "input '" + param.name + "'");
        add_value(param.name, param.type, param.line);
        if (param.type.is_state) {  // a Core ML state: the model holds it; its value starts at zeros
            tensor& t = result_.values.back();
            t.data.assign(t.count(), 0.0f);
            t.has_data = true;
            result_.states.push_back(io_of(param.name, param.type.type, param.type.shape));
            result_.state_values.push_back(static_cast<int>(result_.values.size()) - 1);
            return;
        }
        inputs_.emplace_back(io_of(param.name, param.type.type, param.type.shape),
                             static_cast<int>(result_.values.size()) - 1);
    }

    // A literal becomes an anonymous constant value. A constexpr op's parameter is decompressed when the
    // model loads, never a Neural Engine tensor, so the ANE's limits on rank and extents are not its
    // (coremltools writes rank-6 palettes for conv weights).
    int materialize(const literal& lit, const std::string& name, bool constexpr_parameter = false) {
        if (!constexpr_parameter) check_type(lit.type, lit.line, "literal");
        const int id = add_value(name, lit.type, lit.line);
        tensor& t = result_.values[static_cast<std::size_t>(id)];
        if (lit.is_blobfile) {
            ++blobfiles_;
            load_blob(lit, weights_, t);
        } else {
            t.data.assign(lit.numbers.begin(), lit.numbers.end());
            t.text = lit.text;
            t.has_data = true;
        }
        if (lit.type.type == dtype::fp16 ||
            lit.type.type == dtype::fp32)  // the ANE holds every float as fp16
            for (float& v : t.data)
                v = anvil::half_bits_to_float(anvil::float_to_half_bits(v));
        is_const_[static_cast<std::size_t>(id)] = true;
        return id;
    }

    int lookup(const std::string& name, int line, const statement& s) {
        const auto found = ids_.find(name);
        if (found == ids_.end())
            fail(line, s.op + ": '" + name + "' is not defined before use", rule::value_scoping);
        return found->second;
    }

    void check_statement(const statement& s) {
        result_.statements.push_back({s.op, s.line, s.outputs.empty() ? std::string() : s.outputs[0].name});
        cpu_reason_.clear();
        if (!options_.fail_compile_op.empty() && s.op == options_.fail_compile_op)
            refuse_on_ane(s.line, s.op + ": failure injected by the simulator (fail_compile_op=" + s.op + ")",
                          rule::fault_injection);
        for (const auto& out : s.outputs)
            check_type(out.type, out.line, "result '" + out.name + "'");
        for (const auto& [attr, arg] : s.attributes)
            if (attr == "name" &&
                (arg.form != argument::kind::literal || arg.value.type.type != dtype::string))
                fail(arg.line, s.op + ": attribute 'name' must be a string literal", rule::op_table);
        if (s.op == "const") return check_const(s);
        if (!options_.coreml_program) state_rules(s);  // the private path's reports; Core ML runs these
        device_rules(s);
        const auto spec = find_op(s.op, function_.opset_version);
        if (!spec) {
            const int since = op_since(s.op);
            if (since > 0)
                fail(s.line,
                     s.op + " needs opset ios" + std::to_string(since) + "; function " + function_.name +
                         " is " + function_.opset,
                     rule::op_table);
            fail(s.line, "unknown op '" + s.op + "' (not in mil_ops.json)", rule::op_table);
        }
        step st;
        st.line = s.line;
        st.op = s.op;
        // ≤ iOS17 constexpr ops carry their parameters as attributes (MIL.md §1.6).
        std::vector<std::pair<std::string, argument>> args = s.inputs;
        const bool constexpr_op = s.op.rfind("constexpr_", 0) == 0;
        // From ios18 they are inputs instead (MIL.md §1.6, COREML.md §2.4: translate_constexpr); the other
        // spelling is an op the loader does not know.
        if (constexpr_op && function_.opset_version >= 18 && s.attributes.size() > 1)
            fail(s.line,
                 s.op + ": from ios18 a constexpr op's parameters are inputs, not attributes (function " +
                     function_.name + " is " + function_.opset + ")",
                 rule::op_table);
        if (constexpr_op && function_.opset_version < 18 && !s.inputs.empty())
            fail(s.line,
                 s.op + ": up to ios17 a constexpr op's parameters are attributes, not inputs (function " +
                     function_.name + " is " + function_.opset + ")",
                 rule::op_table);
        if (constexpr_op) {
            sub_byte_rule(s);
            inline_rank4_rule(s);
        }
        for (const auto& [attr, arg] : s.attributes) {
            if (attr == "name") continue;
            if (!constexpr_op)
                fail(arg.line, s.op + ": unknown attribute '" + attr + "' (ops take only [name = ...])",
                     rule::op_table);
            args.emplace_back(attr, arg);
        }
        std::map<std::string, dtype> shared;
        std::set<std::string> seen;
        for (const auto& [input_name, arg] : args) {
            const input_spec* in = spec->find(input_name);
            if (!in) {
                std::string known;
                for (const auto& i : spec->inputs)
                    known += (known.empty() ? "" : ", ") + i.name;
                fail(arg.line,
                     s.op + ": '" + input_name + "' is not an input of " + s.op + " in " + function_.opset +
                         " (inputs: " + known + ")",
                     rule::op_table);
            }
            if (!seen.insert(input_name).second)
                fail(arg.line, s.op + ": input '" + input_name + "' is given twice", rule::op_table);
            operand bound;
            if (arg.form == argument::kind::tuple) {
                if (in->form != input_form::tuple)
                    fail(arg.line, s.op + ": input '" + input_name + "' is not a tuple", rule::op_table);
                for (const auto& n : arg.tuple_names)
                    bound.tuple.push_back(lookup(n, arg.line, s));
            } else {
                bound.value = arg.form == argument::kind::name ? lookup(arg.name, arg.line, s)
                                                               : materialize(arg.value, "", constexpr_op);
                if (in->form == input_form::tuple) bound.tuple.push_back(std::exchange(bound.value, -1));
            }
            std::vector<int> ids = bound.tuple;
            if (bound.value >= 0) ids.push_back(bound.value);
            for (int id : ids)
                check_operand(s, arg, *in, id, shared);
            st.inputs.emplace_back(input_name, std::move(bound));
        }
        for (const auto& in : spec->inputs)
            if (!in.optional && !seen.contains(in.name))
                fail(s.line, s.op + ": required input '" + in.name + "' is missing", rule::op_table);
        if (options_.coreml_program) defaulted_inputs_rule(s, *spec, seen);
        option_rules(s, st);
        kernel_width_rule(s, st);
        epsilon_rule(s, st, *spec);
        for (const auto& out : s.outputs) {
            const int id = add_value(out.name, out.type, out.line);
            st.outputs.push_back(id);
            producer_[static_cast<std::size_t>(id)] = static_cast<int>(result_.steps.size());
        }
        infer(s, st, constexpr_op);
        value_rules(s, st);
        if (options_.coreml_program) place(s, st);
        result_.steps.push_back(std::move(st));
    }

    // Core ML's ML Program parser refuses an op that leaves out an input coremltools gives a default
    // (RUNTIME.md §0b #17: "optional" in the documentation, required in practice); `linear`'s bias excepted,
    // which ONNX Runtime's Core ML builder omits in models that run.
    void defaulted_inputs_rule(const statement& s, const op_spec& spec, const std::set<std::string>& seen) {
        for (const auto& in : spec.inputs) {
            if (!in.optional || !in.has_default || seen.contains(in.name)) continue;
            if (s.op == "linear" && in.name == "bias") continue;
            fail(s.line,
                 s.op + ": input '" + in.name +
                     "' is left out; Core ML's ML Program parser requires every input "
                     "coremltools' definition gives a default (" +
                     function_.opset + "), optional or not",
                 rule::coreml_op_parameters);
        }
    }

    // Core ML's own placement rules, then the op's entry in the compute plan. MIL.md §2.5: the Neural Engine
    // computes fp16 only (fp32 and integer work goes to the CPU; `cast` at the I/O boundary is the
    // exception coremltools relies on) and embedding `gather` runs on the CPU.
    // (A result dimension over max_dimension was already refused by check_type on the declared results.)
    void place(const statement& s, const step& st) {
        if (s.op == "gather" || s.op == "gather_nd" || s.op == "gather_along_axis")
            refuse_on_ane(s.op + " runs on the CPU under Core ML (MIL.md §2.5: embedding lookups)");
        const auto integral = [](dtype t) {
            return t != dtype::fp16 && t != dtype::fp32 && t != dtype::boolean;
        };
        // COREML.md §4.5 (coremltools #2631): a stateful model fails on the Neural Engine when a state's
        // last dimension (width) is not a multiple of 32 (270 failed where 256 ran); the stricter reading,
        // that Core ML then runs the state's reads and writes on the CPU.
        if (s.op == "read_state" || s.op == "write_state") {
            for (const auto& [name, bound] : st.inputs) {
                if (name != "input" || bound.value < 0) continue;
                const tensor& state = result_.values[static_cast<std::size_t>(bound.value)];
                if (!state.shape.empty() && state.shape.back() % 32 != 0)
                    refuse_on_ane(s.op + ": the state '" +
                                  result_.value_names[static_cast<std::size_t>(bound.value)] + "' " +
                                  shape_text(state.shape) +
                                  " has a last dimension that is not a multiple of 32, which fails on the "
                                  "Neural Engine (COREML.md §4.5, coremltools #2631)" +
                                  cite(rule::state_width));
            }
        }
        if (s.op != "cast" && s.op != "read_state" && s.op != "write_state") {
            for (const auto& [name, bound] : st.inputs) {
                if (bound.value < 0 || is_const_[static_cast<std::size_t>(bound.value)]) continue;
                const tensor& t = result_.values[static_cast<std::size_t>(bound.value)];
                if (t.type == dtype::fp32 || integral(t.type))
                    refuse_on_ane(s.op + ": input '" + name + "' is " + std::string(dtype_name(t.type)) +
                                  "; the Neural Engine computes fp16 only (MIL.md §2.5)");
            }
        }
        op_placement p;
        p.op = s.op;
        p.output = s.outputs.empty() ? std::string() : s.outputs[0].name;
        p.line = s.line;
        p.device = cpu_reason_.empty() ? "ane" : "cpu";
        p.reason = cpu_reason_;
        result_.placement.push_back(std::move(p));
    }

    void check_operand(const statement& s, const argument& arg, const input_spec& in, int id,
                       std::map<std::string, dtype>& shared) {
        const tensor& v = result_.values[static_cast<std::size_t>(id)];
        const std::string what = s.op + ": input '" + in.name + "'";
        if (in.must_be_const && !is_const_[static_cast<std::size_t>(id)])
            fail(arg.line,
                 what + " must be a constant (a const op or an inline literal), '" +
                     result_.value_names[static_cast<std::size_t>(id)] + "' is computed",
                 rule::op_table);
        if (in.form == input_form::scalar && !v.shape.empty())
            fail(arg.line, what + " must be a scalar (rank 0), got " + type_text({v.type, v.shape, false}),
                 rule::op_table);
        if (!in.dtypes.empty() && std::find(in.dtypes.begin(), in.dtypes.end(), v.type) == in.dtypes.end()) {
            std::string allowed;
            for (dtype t : in.dtypes)
                allowed += (allowed.empty() ? "" : ", ") + std::string(dtype_name(t));
            fail(arg.line,
                 what + " has dtype " + std::string(dtype_name(v.type)) + "; " + function_.opset +
                     " allows " + allowed,
                 rule::op_table);
        }
        if (!in.type_id.empty()) {
            const auto [it, fresh] = shared.emplace(in.type_id, v.type);
            if (!fresh && it->second != v.type)
                fail(arg.line,
                     what + " has dtype " + std::string(dtype_name(v.type)) + " but another input of type " +
                         in.type_id + " has " + std::string(dtype_name(it->second)),
                     rule::op_table);
        }
    }

    void check_const(const statement& s) {
        if (s.outputs.size() != 1) fail(s.line, "const must define exactly one value", rule::op_table);
        if (!s.inputs.empty())
            fail(s.line, "const takes no inputs; its value is the attribute val", rule::op_table);
        const argument* val = nullptr;
        for (const auto& [attr, arg] : s.attributes) {
            if (attr == "val")
                val = &arg;
            else if (attr != "name")
                fail(arg.line, "const: unknown attribute '" + attr + "'", rule::op_table);
        }
        if (!val || val->form != argument::kind::literal)
            fail(s.line, "const needs attribute val = <literal>", rule::op_table);
        const auto& out = s.outputs[0];
        if (!(val->value.type == out.type))
            fail(s.line,
                 "const '" + out.name + "' is declared " + type_text(out.type) + " but its value is " +
                     type_text(val->value.type),
                 rule::result_types);
        materialize(val->value, out.name);
        lines_[out.name] = s.line;
    }

    void state_rules(const statement& s) {
        if (s.op == "read_state" || s.op == "write_state" || s.op == "coreml_update_state")
            fail(s.line,
                 s.op +
                     ": state ops fail through the in-memory compiler path; keep the cache in "
                     "input/output surfaces",
                 rule::reported_failing_ops);
        if (s.op == "scaled_dot_product_attention")
            for (const auto& [name, arg] : s.inputs)
                if (name == "attn_mask")
                    fail(arg.line,
                         "scaled_dot_product_attention: attn_mask is ignored on this path (wrong results); "
                         "add the mask before an explicit softmax",
                         rule::reported_failing_ops);
        if (s.op == "gelu")
            apply(options_.gelu, s.line,
                  "gelu is reported to fail through this path; decompose it (tanh or sigmoid form)",
                  rule::reported_failing_ops);
        if (s.op == "rsqrt")
            apply(options_.rsqrt, s.line, "rsqrt is reported to fail through this path; use sqrt + real_div",
                  rule::reported_failing_ops);
        if (s.op == "reduce_prod")
            apply(options_.reduce_prod, s.line, "reduce_prod is reported to fail through this path",
                  rule::reported_failing_ops);
    }

    // RUNTIME.md §0b #19: the private compiler refuses sub-byte constexpr weights (uint1-uint6 palette
    // indices, int4/uint4 data) in an ios18 program; Core ML decompresses them itself.
    void sub_byte_rule(const statement& s) {
        if (options_.coreml_program || function_.opset_version < 18 ||
            options_.sub_byte_constexpr != rule_mode::error)
            return;
        for (const auto& [name, arg] : s.inputs) {
            if (arg.form != argument::kind::literal) continue;
            const dtype type = arg.value.type.type;
            if (type == dtype::uint1 || type == dtype::uint2 || type == dtype::uint3 ||
                type == dtype::uint4 || type == dtype::uint6 || type == dtype::int4)
                fail(arg.line,
                     s.op + ": '" + name + "' is " + std::string(dtype_name(type)) +
                         "; sub-byte constexpr weights in an ios18 program are refused by the private "
                         "compiler "
                         "(the ios16 constexpr_lut_to_dense with uint8-packed indices is reported accepted; "
                         "simulator option sub_byte_constexpr)",
                     rule::sub_byte_constexpr);
        }
    }

    // RUNTIME.md §0b #19 too: an inline rank-4 scale fails to compile on the private route; use a blob.
    // Checked after the sub-byte rule so a sub-byte weight is refused for what it is.
    void inline_rank4_rule(const statement& s) {
        if (options_.coreml_program) return;
        const auto inline_rank4 = [&](const std::string& name, const argument& arg) {
            if (arg.form == argument::kind::literal && !arg.value.is_blobfile &&
                arg.value.type.shape.size() >= 4)
                fail(arg.line,
                     s.op + ": '" + name + "' is a rank-" + std::to_string(arg.value.type.shape.size()) +
                         " tensor written inline; the private compiler refuses it: put it in the weight "
                         "file",
                     rule::inline_rank4_parameter);
        };
        for (const auto& [name, arg] : s.inputs)
            inline_rank4(name, arg);
        for (const auto& [name, arg] : s.attributes)
            if (name != "name") inline_rank4(name, arg);
    }

    // Rules of the second audit that depend on the op and the simulated chip only (RUNTIME.md §0 #4, #5).
    void device_rules(const statement& s) {
        const std::string& chip = options_.architecture;
        const bool m1_m2 = chip.rfind("h13", 0) == 0 || chip.rfind("h14", 0) == 0;
        // Core ML runs matmul and einsum on M1/M2's Neural Engine (RUNTIME.md §0b #25): the refusal is the
        // private compiler's.
        if (m1_m2 && !options_.coreml_program && (s.op == "matmul" || s.op == "scaled_dot_product_attention"))
            refuse_on_ane(
                s.line,
                s.op + " fails to compile on " + chip +
                    " (H13/H14, the M1/M2 generation); express it as a conv (constant weights as a 1x1 conv) "
                    "or run it on the CPU",
                rule::old_chip_ops);
        if (m1_m2 && s.op == "einsum" && !options_.coreml_program)
            apply(options_.einsum_m1_m2, s.line,
                  "einsum is refused on " + chip +
                      " (H13/H14, the M1/M2 generation), as matmul is: no source shows it through this path "
                      "there (simulator option einsum_m1_m2)",
                  rule::old_chip_ops);
        if ((s.op == "max_pool" || s.op == "avg_pool") && options_.coreml_program &&
            options_.pooling == rule_mode::error)
            refuse_on_ane(s.line, s.op + " is rejected by the ANE compiler (simulator option pooling)",
                          rule::pooling);
        else if (s.op == "max_pool" || s.op == "avg_pool")
            apply(options_.pooling, s.line,
                  s.op +
                      " is rejected by the ANE compiler; use reduce_max / reduce_mean, or a depthwise conv "
                      "for average pooling (simulator option pooling)",
                  rule::pooling);
    }

    // RUNTIME.md §0 #7: the weight is [C_out, C_in / groups, *K]; its last dimension is the kernel width.
    void kernel_width_rule(const statement& s, const step& st) {
        if (s.op != "conv") return;
        const operand* weight = find_input(st, "weight");
        if (!weight || weight->value < 0) return;
        const auto& shape = result_.values[static_cast<std::size_t>(weight->value)].shape;
        if (shape.size() < 3 || shape.back() < 16) return;
        refuse_on_ane(
            s.line,
            "conv: kernel width " + std::to_string(shape.back()) + " (weight '" +
                result_.value_names[static_cast<std::size_t>(weight->value)] + "' " + shape_text(shape) +
                "); a conv whose kernel is 16 or more wide fails to compile at every padding and grouping: "
                "split the kernel into narrower convs and add them",
            rule::conv_kernel_width);
    }

    // RUNTIME.md §0 #10: an epsilon of 0 in fp16 (given, or the op's default rounding to 0) is a warning.
    void epsilon_rule(const statement& s, const step& st, const op_spec& spec) {
        if (s.op != "log" && s.op != "rsqrt" && s.op != "inverse") return;
        double epsilon = 0.0;
        std::string how;
        if (const operand* given = find_input(st, "epsilon"); given && given->value >= 0) {
            const tensor& t = result_.values[static_cast<std::size_t>(given->value)];
            if (!t.has_data || t.data.size() != 1) return;
            epsilon = t.data[0];
            how = "epsilon is 0";
        } else {
            const input_spec* in = spec.find("epsilon");
            if (!in || !in->default_number) return;
            epsilon = *in->default_number;
            char text[32];
            std::snprintf(text, sizeof text, "%g", epsilon);
            how = std::string("epsilon is omitted and its default ") + text + " is 0";
        }
        const float in_fp16 =
            anvil::half_bits_to_float(anvil::float_to_half_bits(static_cast<float>(epsilon)));
        if (in_fp16 != 0.0f) return;
        warn(s.line,
             s.op + ": " + how +
                 " in fp16; no working code passes 0: pass a small positive epsilon such as fp16(0x1.0cp-17)",
             rule::epsilon_zero);
    }

    const operand* find_input(const step& st, std::string_view name) const {
        for (const auto& [n, bound] : st.inputs)
            if (n == name) return &bound;
        return nullptr;
    }

    void option_rules(const statement& s, const step& st) {
        if (s.op == "conv" && find_input(st, "bias"))
            apply(options_.conv_bias, s.line,
                  "conv: 'bias' on conv is not honoured on the ANE path; add the bias with a separate add of "
                  "a [1, C, 1, 1] const",
                  rule::conv_bias_and_broadcast);
        for (const auto& [name, arg] : s.inputs) {
            const bool flag = (s.op == "matmul" && (name == "transpose_x" || name == "transpose_y")) ||
                              (s.op.rfind("reduce_", 0) == 0 && name == "keep_dims");
            if (flag && arg.form == argument::kind::literal)
                apply(options_.named_matmul_flags, arg.line,
                      s.op + ": '" + name + "' must be bound to a named const, not an inline literal",
                      rule::named_flags);
        }
    }

    void infer(const statement& s, step& st, bool constexpr_op) {
        if (!can_execute(s.op)) {
            if (constexpr_op)  // a constant the simulator cannot unpack: usable only by ops it does not run
                for (int id : st.outputs) {
                    result_.values[static_cast<std::size_t>(id)].has_data = true;
                    result_.values[static_cast<std::size_t>(id)].decodable = false;
                    is_const_[static_cast<std::size_t>(id)] = true;
                }
            return;
        }
        std::vector<tensor> declared;
        for (int id : st.outputs)
            declared.push_back(result_.values[static_cast<std::size_t>(id)]);
        try {
            op_context context(st, result_.values, true);
            run_op(context);
        } catch (const needs_data&) {
            return;  // the shape depends on a computed value: checked when evaluating
        }
        for (std::size_t i = 0; i < st.outputs.size(); ++i) {
            const tensor& got = result_.values[static_cast<std::size_t>(st.outputs[i])];
            if (got.type != declared[i].type || got.shape != declared[i].shape)
                fail(s.outputs[i].line,
                     s.op + ": '" + s.outputs[i].name + "' is declared " +
                         type_text({declared[i].type, declared[i].shape, false}) + " but its inputs give " +
                         type_text({got.type, got.shape, false}),
                     rule::result_types);
        }
        if (constexpr_op) {  // fold now: the inputs are constants
            op_context context(st, result_.values, false);
            run_op(context);
            for (int id : st.outputs) {
                auto& t = result_.values[static_cast<std::size_t>(id)];
                for (float& v : t.data)
                    v = anvil::half_bits_to_float(anvil::float_to_half_bits(v));
                is_const_[static_cast<std::size_t>(id)] = true;
            }
        }
    }

    bool has_infinity(int id) const {
        const auto& t = result_.values[static_cast<std::size_t>(id)];
        return is_const_[static_cast<std::size_t>(id)] && t.has_data &&
               std::any_of(t.data.begin(), t.data.end(), [](float v) { return std::isinf(v); });
    }

    void value_rules(const statement& s, const step& st) {
        if (is_elementwise_binary(s.op) && !st.outputs.empty()) {
            const auto& result = result_.values[static_cast<std::size_t>(st.outputs[0])].shape;
            for (const char* name : {"x", "y"}) {
                const operand* o = find_input(st, name);
                if (!o || o->value < 0 || !is_const_[static_cast<std::size_t>(o->value)]) continue;
                const auto& shape = result_.values[static_cast<std::size_t>(o->value)].shape;
                const bool channel = shape.size() == 4 && shape[0] == 1 && shape[2] == 1 && shape[3] == 1;
                if (!shape.empty() && shape != result && !channel)
                    apply(options_.const_broadcast, s.line,
                          s.op + ": const operand '" + name + "' has shape " + shape_text(shape) +
                              "; a broadcast const must be a scalar, the result's shape " +
                              shape_text(result) + " or rank 4 [1, C, 1, 1]",
                          rule::conv_bias_and_broadcast);
            }
        }
        if (s.op == "softmax" && !st.outputs.empty()) {
            const operand* x = find_input(st, "x");
            const auto& shape = result_.values[static_cast<std::size_t>(x->value)].shape;
            std::int64_t axis = -1;
            if (const operand* a = find_input(st, "axis");
                a && !result_.values[static_cast<std::size_t>(a->value)].data.empty())
                axis = static_cast<std::int64_t>(result_.values[static_cast<std::size_t>(a->value)].data[0]);
            if (axis < 0) axis += static_cast<std::int64_t>(shape.size());
            if (axis >= 0 && axis < static_cast<std::int64_t>(shape.size()) &&
                shape[static_cast<std::size_t>(axis)] > options_.softmax_max_axis)
                refuse_on_ane(
                    s.line,
                    "softmax over an axis of " + std::to_string(shape[static_cast<std::size_t>(axis)]) +
                        " elements; the ANE normalises per tile above " +
                        std::to_string(options_.softmax_max_axis) + " (wrong results): split the axis",
                    rule::softmax_axis);
            const int from = producer_[static_cast<std::size_t>(x->value)];
            if (from >= 0 && result_.steps[static_cast<std::size_t>(from)].op == "add")
                for (const auto& [n, bound] : result_.steps[static_cast<std::size_t>(from)].inputs)
                    if (bound.value >= 0 && has_infinity(bound.value))
                        refuse_on_ane(s.line,
                                      "softmax: its input adds a mask constant '" +
                                          result_.value_names[static_cast<std::size_t>(bound.value)] +
                                          "' holding infinity; the ANE's softmax mishandles -inf: use a "
                                          "finite value such as -1e4",
                                      rule::mask_infinity);
        }
    }

    void check_returns() {
        std::set<std::string> seen;
        for (const auto& name : function_.returns) {
            const auto found = ids_.find(name);
            if (found == ids_.end())
                fail(function_.return_line, "the function returns '" + name + "', which is not defined",
                     rule::value_scoping);
            if (!seen.insert(name).second)
                fail(function_.return_line, "the function returns '" + name + "' twice", rule::value_scoping);
            const auto& v = result_.values[static_cast<std::size_t>(found->second)];
            named_type as_declared{{v.type, v.shape, false}, name, function_.return_line};
            check_io(as_declared, "function output");
            outputs_.emplace_back(io_of(name, v.type, v.shape), found->second);
        }
        if (function_.returns.empty())
            fail(function_.return_line, "the function returns nothing", rule::value_scoping);
        auto by_name = [](const auto& a, const auto& b) { return a.first.name < b.first.name; };
        std::sort(inputs_.begin(), inputs_.end(), by_name);
        std::sort(outputs_.begin(), outputs_.end(), by_name);
        for (const auto& [io, id] : inputs_) {
            result_.inputs.push_back(io);
            result_.input_values.push_back(id);
        }
        for (const auto& [io, id] : outputs_) {
            result_.outputs.push_back(io);
            result_.output_values.push_back(id);
        }
    }

    const function& function_;
    std::span<const weight_file> weights_;
    const rules& options_;
    prepared_program result_;
    std::map<std::string, int> ids_;
    std::map<std::string, int> lines_;
    std::vector<bool> is_const_;
    std::vector<int> producer_;  // step index that computes each value, -1 for inputs and consts
    std::vector<std::pair<io_tensor, int>> inputs_, outputs_;
    std::string warnings_;
    std::string cpu_reason_;  // why the statement being checked cannot run on the Neural Engine
    std::int64_t blobfiles_ = 0;
};

}  // namespace

prepared_program validate(const program_text& program, std::span<const weight_file> weights,
                          const rules& options) {
    const function* main = nullptr;
    for (const auto& f : program.functions)
        if (f.name == "main") main = &f;
    if (!main) fail(1, "the program has no function 'main'", rule::dialects);
    // RUNTIME.md §0b #18: the ios18 opset (program(1.3), Core ML spec 9) arrived with macOS 15.
    if (main->opset_version >= 18 && options.macos < 15)
        fail(1,
             "function main is " + main->opset + ", which needs macOS 15; the simulated OS is macOS " +
                 std::to_string(options.macos) + " (lower it as program(1.0)/ios16; simulator option macos)",
             rule::macos14_dialect);
    return checker(*main, weights, options).run();
}

}  // namespace anvil_sim::mil
