// anvil: a MIL program in memory — one `main` function as the lowering built it, statement by statement, with
// every const's value kept typed (not as text). Two writers read it: mil_text.hpp prints the MIL text the
// private ANE path compiles, and backend/coreml/model_spec.hpp encodes the same function as the Core ML
// protobuf (COREML.md §2.3), so both routes run exactly the same lowered program.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
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
enum class mil_constant_kind : std::uint8_t { int32, uint32, boolean, string, fp16, bytes, blob };

struct mil_constant {
    mil_constant_kind kind = mil_constant_kind::int32;
    std::vector<std::int32_t> ints;    // int32
    std::vector<std::uint32_t> uints;  // uint32 (a constexpr_lut_to_dense's `shape`)
    std::vector<std::uint8_t> bools;   // boolean: 0 or 1
    std::string text;                  // string
    std::vector<half> halves;          // fp16 (inline; fewer than 10 elements)
    std::vector<std::uint8_t> raw;     // bytes: int8 or uint8 values, inline
    std::string blob_path;             // blob: "@model_path/weights/weight.bin"
    std::uint64_t blob_offset = 0;     // blob: its metadata record (weight_blob.hpp), of the value's dtype
};

// A value written in place, not as a statement: a constexpr_* op's parameter. Up to ios17 they are the
// op's attributes; from ios18 its inputs, each bound to its value (MIL.md §1.6, COREML.md §2.4).
struct mil_literal {
    std::string dtype;                // "fp16", "int8", "uint8", "uint4", "uint6", "uint32", "int32"
    std::vector<std::int64_t> shape;  // rank 0: a scalar
    mil_constant value;
};

struct mil_value {
    std::string name;
    std::string dtype;                // "fp16", "int32", "bool", "string"
    std::vector<std::int64_t> shape;  // rank 0: a scalar
    bool is_const = false;  // a const's or a constexpr_* op's result: known when the program compiles
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
    // constexpr_* only: the parameters, in place (consts that feed only constexpr ops are not statements,
    // as coremltools writes them).
    std::vector<std::pair<std::string, mil_literal>> parameters;
};

struct mil_function {
    mil_dialect dialect = mil_dialect::ios18;
    std::vector<mil_value> values;
    std::vector<mil_statement> statements;
    std::vector<mil_ref> inputs;
};

}  // namespace anvil::detail::ane
