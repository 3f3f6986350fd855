// anvil's ANE simulator: the MIL text syntax tree and its parser (MIL.md Part 1). Both dialects:
// `program(1.0)` with `tensor<T, []>` scalars (coremlc output, ios15-17) and `program(1.3)` with the short
// scalar spelling `fp16(...)` (ios18 generators). The parser only checks syntax; mil_validator.cpp checks
// meaning.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mil_program.hpp"

namespace anvil_sim::mil {

// MIL.md §1.3 DT, in the order of the grammar.
enum class dtype : std::uint8_t {
    fp16,
    fp32,
    fp64,
    int4,
    int8,
    int16,
    int32,
    int64,
    uint1,
    uint2,
    uint3,
    uint4,
    uint6,
    uint8,
    uint16,
    uint32,
    uint64,
    boolean,
    string
};

[[nodiscard]] std::string_view dtype_name(dtype type);
[[nodiscard]] std::optional<dtype> dtype_from_name(std::string_view name);
[[nodiscard]] bool is_float(dtype type);

// A tensor type as written: `tensor<fp16, [1, 4]>`, `fp16` (rank 0), or `state<tensor<...>>`.
struct tensor_type {
    dtype type = dtype::fp16;
    std::vector<std::int64_t> shape;
    bool is_state = false;
    friend bool operator==(const tensor_type&, const tensor_type&) = default;
};

// "tensor<fp16, [1, 4]>" (also for rank 0, so messages read the same in both dialects).
[[nodiscard]] std::string type_text(const tensor_type& type);

// `T(value)` or `T(BLOBFILE(path = ..., offset = ...))`. Numbers are kept as doubles (int32 and uint64
// offsets below 2^53 are exact); strings and bools in their own fields.
struct literal {
    tensor_type type;
    std::vector<double> numbers;  // bools as 0/1
    std::string text;             // string scalars
    bool is_blobfile = false;
    std::string blob_path;
    std::uint64_t blob_offset = 0;
    int line = 0;
};

// One `name = value` of an op: a value name, an inline literal, or a tuple of names `(a, b)`.
struct argument {
    enum class kind : std::uint8_t { name, literal, tuple };
    kind form = kind::name;
    std::string name;
    literal value;
    std::vector<std::string> tuple_names;
    int line = 0;
};

struct named_type {
    tensor_type type;
    std::string name;
    int line = 0;
};

struct statement {
    int line = 0;
    std::string op;
    std::vector<named_type> outputs;                           // empty for write_state
    std::vector<std::pair<std::string, argument>> inputs;      // in text order
    std::vector<std::pair<std::string, argument>> attributes;  // [name = ..., val = ...]
};

struct function {
    int line = 0;
    std::string name;
    std::string opset;      // "ios16"
    int opset_version = 0;  // 16
    std::vector<named_type> params;
    std::vector<statement> statements;
    std::vector<std::string> returns;
    int return_line = 0;
};

struct program_text {
    std::string version;  // "1.0" or "1.3"
    std::vector<function> functions;
};

// Throws sim_failure(codes::invalid_mil, "line N: ...") on any syntax error.
[[nodiscard]] program_text parse(std::string_view text);

}  // namespace anvil_sim::mil
