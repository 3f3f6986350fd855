// anvil's ANE simulator: the boundary between the Objective-C/CF/IOSurface runtime (runtime_*.cpp, the
// `_ANE*` classes) and the MIL part (mil_*.cpp: parser, validator, executor). The runtime hands over the MIL
// text and the weights dictionary exactly as the caller passed them, and surfaces exactly as allocated; the
// MIL part checks everything it can see and executes with fp16 numerics.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "rules.hpp"

namespace anvil_sim {

// A failure the real stack reports as NO + NSError: `code` as the framework would set it, `message` what a
// user needs ("ANECCompile() FAILED: line 12: conv: input 'weight' ...").
class sim_failure : public std::runtime_error {
public:
    sim_failure(long code_value, const std::string& message)
        : std::runtime_error(message), code(code_value) {}
    long code;
};

// Codes the runtime and the MIL part use in NSErrors (domain "com.apple.appleneuralengine").
namespace codes {
inline constexpr long invalid_mil = 1;           // parse or validation failure at compile
inline constexpr long invalid_weights = 2;       // a BLOBFILE that does not resolve to a valid blob
inline constexpr long program_inference = 0x1d;  // evaluate failed (surfaces wrong, not loaded, ...)
inline constexpr long too_many_programs = 0x50004;
inline constexpr long compile_budget = 3;
inline constexpr long transient_load = 4;
inline constexpr long bad_call = 5;      // wrong call order or argument (nil dictionary, NSString MIL)
inline constexpr long load_refused = 6;  // the device refuses a compiled program (no anchor op, fail_load_op)
}  // namespace codes

// One entry of the weights dictionary: key (the BLOBFILE path, "@model_path/weights/x.bin"), the `offset`
// number, and the whole `data` bytes.
struct weight_file {
    std::string key;
    std::int64_t offset = 0;
    std::vector<std::byte> data;
};

enum class element_type : std::uint8_t { fp16, fp32, int32 };

// A function input or output as declared in the MIL: rank 4 [1, C, H, W] for the Neural Engine (H is 1 in
// practice). A Core ML program's I/O may have any rank up to 5: `shape` is the declared shape, and
// channels/height/width fold it as [prod(leading), second to last, last] so the same packed layout applies.
struct io_tensor {
    std::string name;
    element_type type = element_type::fp16;
    std::int64_t channels = 0;
    std::int64_t height = 0;
    std::int64_t width = 0;
    std::vector<std::int64_t> shape;
};

// Where Core ML would run one op (a Core ML program only): "ane", or "cpu" with the reason the Neural
// Engine's rules give. What the simulated MLComputePlan reports.
struct op_placement {
    std::string op;      // "linear"
    std::string output;  // its first result's name
    int line = 0;
    std::string device;  // "ane" or "cpu"
    std::string reason;  // empty on the ANE
};

// A locked IOSurface as the MIL part sees it: element (c, h, w) at
// base + c * plane_stride + h * row_stride + w * element size.
struct surface_view {
    std::byte* base = nullptr;
    std::size_t alloc_size = 0;
    std::size_t row_stride = 0;
    std::size_t plane_stride = 0;
};

// One statement of the function `main`, const included: its op type and MIL line.
struct op_statement {
    std::string op;
    int line = 0;
    std::string output;  // its first result's name ("" for an op without results)
};

class mil_program {
public:
    virtual ~mil_program() = default;

    // Parses (both dialects), validates against mil_ops.json and the rules, resolves every BLOBFILE against
    // `weights`, and prepares execution. Throws sim_failure with code invalid_mil / invalid_weights.
    static std::unique_ptr<mil_program> compile(std::string_view mil_text,
                                                std::span<const weight_file> weights, const rules& options);

    // The function `main`'s inputs and outputs in symbol order: sorted by name (the order the real compiler
    // binds them in), which is what `_ANEModel modelAttributes` reports.
    [[nodiscard]] virtual const std::vector<io_tensor>& inputs() const = 0;
    [[nodiscard]] virtual const std::vector<io_tensor>& outputs() const = 0;

    // Every statement in text order, for the rules the runtime checks at load and evaluate and for the
    // per-op counters.
    [[nodiscard]] virtual const std::vector<op_statement>& statements() const = 0;

    // A Core ML program's states (fp16, in declaration order): the buffers an MLState holds for it.
    [[nodiscard]] virtual const std::vector<io_tensor>& states() const = 0;

    // Runs once. Surfaces are given in symbol order; their sizes and strides were checked by the runtime.
    // `states` holds one buffer per states() entry, its fp16 values in row-major order: read_state reads it
    // and write_state replaces it (a program without states takes none). Throws sim_failure
    // (program_inference) on a failure the hardware would report.
    virtual void evaluate(std::span<const surface_view> inputs, std::span<const surface_view> outputs,
                          std::span<std::vector<std::uint16_t>> states = {}) = 0;

    // A Core ML program's ops (consts excluded) and the device each would run on; empty for a Neural Engine
    // program (there, a rule that refuses an op fails the compile).
    [[nodiscard]] virtual const std::vector<op_placement>& placement() const = 0;

    // Non-fatal findings of the last compile or evaluate (warn-mode rules, the first op whose values
    // overflowed fp16), one per line; empty when none.
    [[nodiscard]] virtual std::string warnings() const = 0;
};

// Whether mil_ops.json has the op at some opset (const included): the op names the runtime's options take.
[[nodiscard]] bool is_known_op(std::string_view op);

// "[1, 64, 1, 128]": a shape as the simulator's messages print it.
[[nodiscard]] std::string shape_text(const std::vector<std::int64_t>& shape);

}  // namespace anvil_sim
