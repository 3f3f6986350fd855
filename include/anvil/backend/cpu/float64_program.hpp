// anvil: the CPU backend's program for graphs that hold float64 values. Every value is held as a double and
// every op runs its reference kernel in double, so a float64 model is computed in float64 — ONNX's
// pytorch-operator tests add doubles near 1e223, which float32 turns into infinities — rather than rounded
// to float32 without a word. Values declared narrower (f32, f16, bf16) are rounded to their type after each
// op, as cpu_program rounds f16 and bf16; integers are exact up to 2^53. The fast kernels are float32 only:
// float64 graphs are rare (test suites, scientific exports) and small, so the reference kernels suffice.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "anvil/backend/cpu/executor.hpp"
#include "anvil/backend/cpu/reference/reference.hpp"
#include "anvil/backend/program.hpp"
#include "anvil/core/convert.hpp"
#include "anvil/graph/dump.hpp"
#include "anvil/graph/passes.hpp"

namespace anvil::detail::cpu {

// Whether any value of the graph is float64: such a graph runs as a float64_program.
[[nodiscard]] inline bool holds_float64(const graph_body& body) {
    // A cast to f64 is among them: its result is f64.
    return std::any_of(body.nodes.begin(), body.nodes.end(),
                       [](const node& n) { return n.result.type == dtype::f64; });
}

class float64_program final : public program_impl {
public:
    float64_program(graph_body body, const compile_options& options) {
        body = eliminate_dead_code(body);
        if (options.fold_constants) body = fold_constants(body, evaluate_constant);
        body_ = std::move(body);
        const std::size_t count = body_.nodes.size();
        values_.resize(count);
        for (std::size_t id = 0; id < count; ++id) {
            const node& n = body_.nodes[id];
            if (n.kind == op::input) {
                inputs_.push_back({n.name, n.result.type, n.result.shape});
                input_ids_.push_back(static_cast<value_id>(id));
                values_[id].assign(static_cast<std::size_t>(n.result.shape.element_count()), 0.0);
            } else if (n.kind == op::constant) {
                values_[id].resize(n.data.element_count());
                to_compute_doubles(n.data, values_[id].data(), n.name.empty() ? "constant" : n.name);
            }
        }
        mark_resident(inputs_, options.resident_inputs);
        for (std::size_t i = 0; i < body_.outputs.size(); ++i) {
            const node& n = body_.nodes[body_.outputs[i]];
            outputs_.push_back({"output" + std::to_string(i), n.result.type, n.result.shape});
        }
    }

    std::vector<host_tensor> run(std::span<const named_tensor> inputs) override {
        std::lock_guard lock(mutex_);
        const std::vector<std::size_t> order = match_inputs(inputs, inputs_);
        for (std::size_t i = 0; i < inputs_.size(); ++i) {
            if (inputs_[i].resident) continue;  // written in place by write_input
            const named_tensor& given = inputs[order[i]];
            std::vector<double>& slot = values_[input_ids_[i]];
            to_compute_doubles(given.tensor, slot.data(), message("program::run: input '", given.name, "'"));
            round_to_type(slot.data(), slot.size(), inputs_[i].type);
        }
        std::vector<basic_const_tensor_span<double>> operands;
        for (std::size_t id = 0; id < body_.nodes.size(); ++id) {
            const node& n = body_.nodes[id];
            if (n.kind == op::input || n.kind == op::constant) continue;
            operands.clear();
            for (const value_id input : n.inputs)
                operands.push_back({values_[input].data(), body_.nodes[input].result.shape});
            std::vector<double>& out = values_[id];
            out.resize(static_cast<std::size_t>(n.result.shape.element_count()));
            evaluate_reference(n, operands, basic_tensor_span<double>{out.data(), n.result.shape});
            round_to_type(out.data(), out.size(), n.result.type);
        }
        std::vector<host_tensor> results;
        for (const value_id id : body_.outputs) {
            const node& n = body_.nodes[id];
            results.push_back(from_compute_values(values_[id].data(), n.result.type, n.result.shape));
        }
        return results;
    }

    [[nodiscard]] const std::vector<io_info>& inputs() const override { return inputs_; }
    [[nodiscard]] const std::vector<io_info>& outputs() const override { return outputs_; }
    [[nodiscard]] numerics_report numerics() const override { return {}; }
    [[nodiscard]] std::string dump() const override { return anvil::dump(body_); }

    void write_input(std::string_view name, std::span<const std::int64_t> offsets,
                     const host_tensor& part) override {
        const write_region region = check_write(inputs_, name, offsets, part);
        std::vector<double> values(part.element_count());
        to_compute_doubles(part, values.data(), message("program::write_input: input '", name, "'"));
        round_to_type(values.data(), values.size(), inputs_[region.input].type);
        const std::vector<std::size_t> starts = region.run_starts();
        const std::size_t length = region.run_length();
        std::lock_guard lock(mutex_);
        std::vector<double>& slot = values_[input_ids_[region.input]];
        for (std::size_t k = 0; k < starts.size(); ++k)
            std::copy_n(values.begin() + static_cast<std::ptrdiff_t>(k * length), length,
                        slot.begin() + static_cast<std::ptrdiff_t>(starts[k]));
    }

    [[nodiscard]] host_tensor read_input(std::string_view name) const override {
        const std::size_t index = find_resident(inputs_, name, "program::read_input");
        std::lock_guard lock(mutex_);
        return from_compute_values(values_[input_ids_[index]].data(), inputs_[index].type,
                                   inputs_[index].shape);
    }

private:
    graph_body body_;
    std::vector<std::vector<double>> values_;  // every node's value; an input's slot is bound by run
    std::vector<io_info> inputs_;
    std::vector<value_id> input_ids_;
    std::vector<io_info> outputs_;
    mutable std::mutex mutex_;
};

// The CPU program for a graph: float64_program when the graph holds float64 values (unless ane_numerics asks
// for the Neural Engine's fp16 arithmetic, which cpu_program emulates), else cpu_program.
inline std::unique_ptr<program_impl> make_cpu_program(graph_body body, const compile_options& options) {
    if (!options.ane_numerics && holds_float64(body))
        return std::make_unique<float64_program>(std::move(body), options);
    return std::make_unique<cpu_program>(std::move(body), options);
}

}  // namespace anvil::detail::cpu
