// anvil's ANE simulator: mil_program::compile (parse, validate, prepare) and the program that evaluates on
// surfaces: reads inputs with their strides, runs every step with fp16 rounding, reports the first overflow
// and the first softmax given -inf on the Neural Engine, writes outputs.
#include "mil_program.hpp"

#include <anvil/core/half.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <set>

#include "citations.hpp"
#include "mil_executor.hpp"
#include "mil_ops_table.hpp"
#include "mil_parser.hpp"

namespace anvil_sim {

namespace mil {
namespace {

class simulated_program final : public mil_program {
public:
    explicit simulated_program(prepared_program&& p) : program_(std::move(p)) {
        for (const op_placement& placed : program_.placement)
            if (placed.device == "cpu") cpu_lines_.insert(placed.line);
    }

    const std::vector<io_tensor>& inputs() const override { return program_.inputs; }
    const std::vector<io_tensor>& outputs() const override { return program_.outputs; }
    const std::vector<op_statement>& statements() const override { return program_.statements; }
    const std::vector<op_placement>& placement() const override { return program_.placement; }
    const std::vector<io_tensor>& states() const override { return program_.states; }
    std::string warnings() const override { return program_.warnings + evaluate_warnings_; }

    void evaluate(std::span<const surface_view> inputs, std::span<const surface_view> outputs,
                  std::span<std::vector<std::uint16_t>> states) override {
        if (inputs.size() != program_.inputs.size() || outputs.size() != program_.outputs.size() ||
            states.size() != program_.states.size())
            throw sim_failure(codes::program_inference,
                              "evaluate: the program has " + std::to_string(program_.inputs.size()) +
                                  " inputs, " + std::to_string(program_.outputs.size()) + " outputs and " +
                                  std::to_string(program_.states.size()) + " states, the request binds " +
                                  std::to_string(inputs.size()) + ", " + std::to_string(outputs.size()) +
                                  " and " + std::to_string(states.size()));
        evaluate_warnings_.clear();
        for (std::size_t i = 0; i < inputs.size(); ++i)
            read_input(program_.inputs[i], inputs[i], program_.input_values[i]);
        for (std::size_t i = 0; i < states.size(); ++i) {
            tensor& t = program_.values[static_cast<std::size_t>(program_.state_values[i])];
            if (states[i].size() != t.count())
                throw sim_failure(codes::program_inference,
                                  "evaluate: state '" + program_.states[i].name + "' holds " +
                                      std::to_string(states[i].size()) + " values, its type " +
                                      std::to_string(t.count()));
            for (std::size_t k = 0; k < t.count(); ++k)
                t.data[k] = anvil::half_bits_to_float(states[i][k]);
            t.has_data = true;
        }
        bool overflow_reported = false, softmax_reported = false;
        for (const step& s : program_.steps) {
            if (!can_execute(s.op))
                throw sim_failure(codes::program_inference, "line " + std::to_string(s.line) +
                                                                ": the simulator cannot execute " + s.op);
            const bool neural_engine = !cpu_lines_.contains(s.line);
            op_context context(s, program_.values, false, neural_engine);
            run_op(context);
            if (s.op == "softmax" && neural_engine && !softmax_reported && holds_minus_infinity(s, "x")) {
                softmax_reported = true;
                const auto& name = program_.value_names[static_cast<std::size_t>(s.outputs[0])];
                evaluate_warnings_ += "line " + std::to_string(s.line) + ": softmax '" + name +
                                      "': a row of its input holds -inf, and the Neural Engine's softmax "
                                      "returns NaN for that row (keep masks finite: -1e4)" +
                                      cite(rule::softmax_infinity) + "\n";
            }
            bool overflowed = false;
            for (int id : s.outputs) {
                tensor& t = program_.values[static_cast<std::size_t>(id)];
                if (!is_float(t.type)) continue;
                for (float& v : t.data) {
                    v = round_fp16(v);
                    overflowed = overflowed || std::isinf(v);
                }
            }
            if (overflowed && !overflow_reported && finite_inputs(s)) {
                overflow_reported = true;
                const auto& name = program_.value_names[static_cast<std::size_t>(s.outputs[0])];
                evaluate_warnings_ += "line " + std::to_string(s.line) + ": " + s.op + " '" + name +
                                      "': a result passed the fp16 range (65504) and became infinity" +
                                      cite(rule::overflow) + "\n";
            }
        }
        for (std::size_t i = 0; i < outputs.size(); ++i)
            write_output(program_.outputs[i], outputs[i], program_.output_values[i]);
        for (std::size_t i = 0; i < states.size(); ++i) {  // write_state replaced the value in place
            const tensor& t = program_.values[static_cast<std::size_t>(program_.state_values[i])];
            for (std::size_t k = 0; k < t.count(); ++k)
                states[i][k] = anvil::float_to_half_bits(t.data[k]);
        }
    }

private:
    bool holds_minus_infinity(const step& s, std::string_view input) const {
        for (const auto& [name, bound] : s.inputs)
            if (name == input && bound.value >= 0)
                for (float v : program_.values[static_cast<std::size_t>(bound.value)].data)
                    if (v == -std::numeric_limits<float>::infinity()) return true;
        return false;
    }

    bool finite_inputs(const step& s) const {
        for (const auto& [name, bound] : s.inputs) {
            std::vector<int> ids = bound.tuple;
            if (bound.value >= 0) ids.push_back(bound.value);
            for (int id : ids)
                for (float v : program_.values[static_cast<std::size_t>(id)].data)
                    if (!std::isfinite(v)) return false;
        }
        return true;
    }

    static std::size_t element_size(const io_tensor& io) { return io.type == element_type::fp16 ? 2 : 4; }

    static void check_extent(const io_tensor& io, const surface_view& view, const char* what) {
        const std::size_t last = (static_cast<std::size_t>(io.channels) - 1) * view.plane_stride +
                                 (static_cast<std::size_t>(io.height) - 1) * view.row_stride +
                                 static_cast<std::size_t>(io.width) * element_size(io);
        if (!view.base || last > view.alloc_size)
            throw sim_failure(codes::program_inference,
                              std::string(what) + " '" + io.name + "': the surface (" +
                                  std::to_string(view.alloc_size) + " bytes) is smaller than the " +
                                  std::to_string(last) + " bytes its layout needs" +
                                  cite(rule::surface_size));
    }

    void read_input(const io_tensor& io, const surface_view& view, int id) {
        check_extent(io, view, "input");
        tensor& t = program_.values[static_cast<std::size_t>(id)];
        t.data.assign(t.count(), 0.0f);
        t.has_data = true;
        std::size_t at = 0;
        for (std::int64_t c = 0; c < io.channels; ++c)
            for (std::int64_t h = 0; h < io.height; ++h) {
                const std::byte* row = view.base + static_cast<std::size_t>(c) * view.plane_stride +
                                       static_cast<std::size_t>(h) * view.row_stride;
                for (std::int64_t w = 0; w < io.width; ++w) {
                    float v;
                    if (io.type == element_type::int32) {  // exact: token ids stay below 2^24
                        std::int32_t n;
                        std::memcpy(&n, row + static_cast<std::size_t>(w) * 4, 4);
                        t.data[at++] = static_cast<float>(n);
                        continue;
                    }
                    if (io.type == element_type::fp32) {
                        std::memcpy(&v, row + static_cast<std::size_t>(w) * 4, 4);
                    } else {
                        std::uint16_t bits;
                        std::memcpy(&bits, row + static_cast<std::size_t>(w) * 2, 2);
                        v = anvil::half_bits_to_float(bits);
                    }
                    t.data[at++] = round_fp16(v);
                }
            }
    }

    void write_output(const io_tensor& io, const surface_view& view, int id) {
        check_extent(io, view, "output");
        const tensor& t = program_.values[static_cast<std::size_t>(id)];
        if (!t.has_data)
            throw sim_failure(codes::program_inference, "output '" + io.name + "' was not computed");
        std::size_t at = 0;
        for (std::int64_t c = 0; c < io.channels; ++c)
            for (std::int64_t h = 0; h < io.height; ++h) {
                std::byte* row = view.base + static_cast<std::size_t>(c) * view.plane_stride +
                                 static_cast<std::size_t>(h) * view.row_stride;
                for (std::int64_t w = 0; w < io.width; ++w) {
                    const float v = t.data[at++];
                    if (io.type == element_type::int32) {
                        const auto n = static_cast<std::int32_t>(v);
                        std::memcpy(row + static_cast<std::size_t>(w) * 4, &n, 4);
                    } else if (io.type == element_type::fp32) {
                        std::memcpy(row + static_cast<std::size_t>(w) * 4, &v, 4);
                    } else {
                        const std::uint16_t bits = anvil::float_to_half_bits(v);
                        std::memcpy(row + static_cast<std::size_t>(w) * 2, &bits, 2);
                    }
                }
            }
    }

    prepared_program program_;
    std::string evaluate_warnings_;
    std::set<int> cpu_lines_;  // a Core ML program's ops placed on the CPU, by line
};

}  // namespace

std::unique_ptr<mil_program> make_program(prepared_program&& prepared) {
    return std::make_unique<simulated_program>(std::move(prepared));
}

}  // namespace mil

std::unique_ptr<mil_program> mil_program::compile(std::string_view mil_text,
                                                  std::span<const weight_file> weights,
                                                  const rules& options) {
    try {
        mil::program_text parsed;
        try {
            parsed = mil::parse(mil_text);
        } catch (const sim_failure& e) {  // a syntax error: neither dialect
            throw sim_failure(e.code, e.what() + cite(rule::dialects));
        }
        return mil::make_program(mil::validate(parsed, weights, options));
    } catch (const sim_failure&) {
        throw;
    } catch (const std::bad_alloc&) {
        throw sim_failure(codes::invalid_mil, "the program is too large to simulate");
    } catch (const std::exception& e) {  // a number out of range in the text, or similar
        throw sim_failure(codes::invalid_mil,
                          std::string("the MIL text could not be read: ") + e.what() + cite(rule::dialects));
    }
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
    std::string text = "[";
    for (std::size_t i = 0; i < shape.size(); ++i)
        text += (i ? ", " : "") + std::to_string(shape[i]);
    return text + "]";
}

bool is_known_op(std::string_view op) {
    return op == "const" || mil::op_since(op) > 0;
}

}  // namespace anvil_sim
