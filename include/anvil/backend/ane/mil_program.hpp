// anvil: a MIL program in memory — one `main` function as the lowering built it, statement by statement, with
// every const's value kept typed (not as text). Two writers read it: mil_text.hpp prints the MIL text the
// private ANE path compiles, and backend/coreml/model_spec.hpp encodes the same function as the Core ML
// protobuf (COREML.md §2.3), so both routes run exactly the same lowered program.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "anvil/core/half.hpp"

namespace anvil::detail::ane {

// ios18: `program(1.3)`, `func main<ios18>` (Core ML: spec 9, opset CoreML8); ios16: `program(1.0)`,
// `func main<ios16>` (Core ML: spec 7, opset CoreML6), which M1/M2 need (RUNTIME.md §4).
enum class mil_dialect : std::uint8_t { ios18, ios16 };

// A value of the function: an input, a const or an op result.
using mil_ref = std::size_t;

// One argument of an op: `name = value`, or `name = (a, b, ...)` for a tuple input (concat's values).
struct mil_argument {
    std::string name;
    std::vector<mil_ref> values;
    bool tuple = false;
};

// The value of a const. Scalar or tensor follows the value's shape (rank 0 = scalar).
enum class mil_constant_kind : std::uint8_t { int32, boolean, string, fp16, fp16_blob };

struct mil_constant {
    mil_constant_kind kind = mil_constant_kind::int32;
    std::vector<std::int32_t> ints;   // int32
    std::vector<std::uint8_t> bools;  // boolean: 0 or 1
    std::string text;                 // string
    std::vector<half> halves;         // fp16 (inline; fewer than 10 elements)
    std::string blob_path;            // fp16_blob: "@model_path/weights/weight.bin"
    std::uint64_t blob_offset = 0;    // fp16_blob: the blob's metadata record (weight_blob.hpp)
};

struct mil_value {
    std::string name;
    std::string dtype;                // "fp16", "int32", "bool", "string"
    std::vector<std::int64_t> shape;  // rank 0: a scalar
    bool is_const = false;
    bool is_state =
        false;  // a Core ML state input, `state<tensor<fp16, shape>>` (spec 9; read_state reads it)
};

// The `result` of a statement that has none (write_state).
inline constexpr mil_ref no_result = static_cast<mil_ref>(-1);

// `result = op(arguments)`; a const has no arguments and holds its value; write_state has no result.
struct mil_statement {
    mil_ref result = 0;
    std::string op;
    std::string name;                     // the op's `name`; empty: the result's name
    std::vector<mil_argument> arguments;  // in the order the lowering gave them
    mil_constant value;                   // const only
};

struct mil_function {
    mil_dialect dialect = mil_dialect::ios18;
    std::vector<mil_value> values;
    std::vector<mil_statement> statements;
    std::vector<mil_ref> inputs;
};

}  // namespace anvil::detail::ane
