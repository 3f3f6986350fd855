// anvil's ANE simulator: the validated program as the executor sees it (a value table and a list of steps)
// and the op kernels. Every kernel infers its result types from its inputs first (used at compile time to
// check the declared types, with `shape_only`), then computes in float over fp16-rounded values
// (CONSTRAINTS.md "Numerics"); the caller rounds each float result to fp16.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mil_parser.hpp"

namespace anvil_sim::mil {

struct tensor {
    dtype type = dtype::fp16;
    std::vector<std::int64_t> shape;
    std::vector<float> data;  // every numeric dtype, bools as 0/1
    std::string text;         // string scalars
    bool has_data = false;    // consts always; other values only while evaluating
    bool decodable = true;    // false for blob dtypes the simulator does not unpack (int4, uint6, ...)
    [[nodiscard]] std::size_t count() const;
};

struct operand {
    int value = -1;          // index into the value table
    std::vector<int> tuple;  // `values = (a, b)`
};

struct step {
    int line = 0;
    std::string op;
    std::vector<std::pair<std::string, operand>> inputs;
    std::vector<int> outputs;
};

struct prepared_program {
    std::vector<tensor> values;  // consts hold data; the rest are types only
    std::vector<std::string> value_names;
    std::vector<step> steps;                 // non-const statements in order
    std::vector<io_tensor> inputs, outputs;  // symbol (alphabetical) order
    std::vector<int> input_values, output_values;
    std::vector<op_statement> statements;  // every statement, const included
    std::vector<op_placement> placement;   // Core ML programs only: each op's device
    std::vector<io_tensor> states;         // Core ML programs only: state inputs, declared order
    std::vector<int> state_values;         // their values
    std::string warnings;
};

// Thrown by a kernel in shape_only mode when the result shape depends on a value that is not a constant.
struct needs_data {};

// What a kernel sees: its inputs by name, its output slots, the rounding mode, and whether the op runs on the
// Neural Engine (a Core ML program's op placed on the CPU computes exactly: the ANE's numeric quirks, such as
// softmax on -inf, do not apply to it).
class op_context {
public:
    op_context(const step& s, std::vector<tensor>& values, bool shape_only, bool neural_engine = true)
        : step_(s), values_(values), shape_only_(shape_only), neural_engine_(neural_engine) {}

    [[nodiscard]] const std::string& op() const { return step_.op; }
    [[nodiscard]] bool shape_only() const { return shape_only_; }
    [[nodiscard]] bool neural_engine() const { return neural_engine_; }
    [[nodiscard]] bool has(std::string_view name) const;
    [[nodiscard]] const tensor& in(std::string_view name) const;  // a required input
    [[nodiscard]] std::vector<const tensor*> tuple(std::string_view name) const;
    // Constant parameters; `fallback` when the input is absent. Throws needs_data when not a constant.
    [[nodiscard]] std::int64_t integer(std::string_view name, std::int64_t fallback) const;
    [[nodiscard]] double number(std::string_view name, double fallback) const;
    [[nodiscard]] bool boolean(std::string_view name, bool fallback) const;
    [[nodiscard]] std::string text(std::string_view name, std::string_view fallback) const;
    [[nodiscard]] std::vector<std::int64_t> integers(std::string_view name) const;  // empty when absent
    // Data of an input the kernel computes with (no-op check in shape_only mode).
    [[nodiscard]] const std::vector<float>& data(const tensor& t) const;
    // Sets output i's type and shape; returns it (data sized to the element count unless shape_only).
    tensor& output(std::size_t i, dtype type, std::vector<std::int64_t> shape);
    [[nodiscard]] std::size_t output_count() const { return step_.outputs.size(); }
    // The value a state op reads or writes (write_state changes it in place).
    [[nodiscard]] tensor& state(std::string_view name);
    [[noreturn]] void fail(const std::string& what) const;

private:
    [[nodiscard]] const tensor* find(std::string_view name) const;
    [[nodiscard]] const tensor& constant(std::string_view name) const;
    const step& step_;
    std::vector<tensor>& values_;
    bool shape_only_;
    bool neural_engine_;
};

// Ops the simulator executes (mil_executor.cpp, mil_kernels_nn.cpp).
[[nodiscard]] bool can_execute(std::string_view op);
void run_op(op_context& context);

// Neural-network kernels (mil_kernels_nn.cpp).
void run_conv(op_context& c);
void run_matmul(op_context& c);
void run_einsum(op_context& c);
void run_linear(op_context& c);
void run_softmax(op_context& c);
void run_layer_norm(op_context& c);
void run_batch_norm(op_context& c);
void run_instance_norm(op_context& c);
void run_pool(op_context& c);
void run_upsample(op_context& c);

// Round to fp16 the way the ANE stores it: nearest even, subnormals flushed to zero, overflow to infinity.
[[nodiscard]] float round_fp16(float x);
[[nodiscard]] std::int64_t element_count(const std::vector<std::int64_t>& shape);
// Negative axes count from the end; throws through `c` when out of range.
[[nodiscard]] std::int64_t normalize_axis(const op_context& c, std::int64_t axis, std::size_t rank);

// Checks a parsed program against the op table and `options`, resolves its BLOBFILEs and infers every type
// (mil_validator.cpp). Throws sim_failure (invalid_mil, invalid_weights).
[[nodiscard]] prepared_program validate(const program_text& program, std::span<const weight_file> weights,
                                        const rules& options);

// The executable program (mil_program.cpp).
[[nodiscard]] std::unique_ptr<mil_program> make_program(prepared_program&& prepared);

}  // namespace anvil_sim::mil
