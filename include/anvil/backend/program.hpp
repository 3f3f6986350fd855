// anvil: what every backend hands back from compile — a program: named inputs in, outputs out, reusable
// across calls. One program serves one caller at a time (a second concurrent run waits); several programs
// run in parallel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "anvil/backend/cpu/numerics.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/host_tensor.hpp"

namespace anvil {

enum class device : std::uint8_t {
    cpu,
    ane,
    automatic,  // the Neural Engine where present, else the CPU
};

// Which CPU kernels run the graph: the optimised ones, or the plain reference ones that define each op
// (for parity tests and for checking a suspicion).
enum class cpu_kernels : std::uint8_t { optimized, reference };

// The MIL dialect of ANE programs: program(1.3)/ios18 (macOS 15+, M3 and later), or the verbose
// program(1.0)/ios16 older chips need (RUNTIME.md §4); automatic picks by the Neural Engine's architecture.
enum class mil_version : std::uint8_t { automatic, ios18, ios16 };

struct compile_options {
    device target = device::cpu;
    // Fail to compile instead of running any node on a device other than `target`.
    bool strict_device = false;
    // CPU: round every op's output to fp16 with denormals flushed, as the Neural Engine stores values, and
    // report the ops whose values left the fp16 range (program::numerics()).
    bool ane_numerics = false;
    cpu_kernels kernels = cpu_kernels::optimized;
    std::size_t threads = 0;  // 0: the process-wide pool (ANVIL_NUM_THREADS or every core)
    bool fold_constants = true;
    bool fold_batch_norm = true;
    bool fuse_elementwise = true;
    // ANE: where compiled programs are cached ("" = $ANVIL_CACHE_DIR, else the user cache directory;
    // "none" = no cache).
    std::string cache_dir;
    mil_version ane_mil = mil_version::automatic;
    // ANE: a program holding more weights than this is split into several (intermediates pass by IOSurface).
    std::size_t ane_max_program_weight_bytes = std::size_t{256} << 20;
};

struct named_tensor {
    std::string name;
    host_tensor tensor;
};

// A program input or output: its name (outputs are named "output0", "output1", ...), type and shape.
struct io_info {
    std::string name;
    dtype type = dtype::f32;
    dims shape;
};

namespace detail {

// Matches the tensors a run was given to the program's declared inputs, checking each name, shape and kind
// (floating or integer): the result holds, for each declared input in order, the index of its tensor in
// `given`. Every backend binds its inputs through this, so a bad call reads the same on all of them.
[[nodiscard]] inline std::vector<std::size_t> match_inputs(std::span<const named_tensor> given,
                                                           std::span<const io_info> declared) {
    constexpr std::size_t unbound = static_cast<std::size_t>(-1);
    std::vector<std::size_t> order(declared.size(), unbound);
    auto names = [&] {
        std::string list;
        for (const auto& input : declared)
            list += (list.empty() ? "" : ", ") + input.name;
        return list.empty() ? std::string("none") : list;
    };
    for (std::size_t g = 0; g < given.size(); ++g) {
        const named_tensor& input = given[g];
        std::size_t index = 0;
        while (index < declared.size() && declared[index].name != input.name)
            ++index;
        if (index == declared.size()) {
            throw error(
                message("program::run: there is no input named '", input.name, "' (inputs: ", names(), ")"));
        }
        if (order[index] != unbound)
            throw error(message("program::run: input '", input.name, "' is given twice"));
        order[index] = g;
        const io_info& expected = declared[index];
        if (!(input.tensor.shape() == expected.shape)) {
            throw shape_error(message("program::run: input '", input.name, "' has shape ",
                                      input.tensor.shape(), ", expected ", expected.shape));
        }
        if (is_floating(input.tensor.type()) != is_floating(expected.type)) {
            throw type_error(message(
                "program::run: input '", input.name, "' is ", dtype_name(input.tensor.type()), ", expected ",
                dtype_name(expected.type),
                is_floating(expected.type) ? " (or another floating type)" : " (or another integer type)"));
        }
    }
    for (std::size_t i = 0; i < declared.size(); ++i) {
        if (order[i] == unbound)
            throw error(message("program::run: input '", declared[i].name, "' is missing"));
    }
    return order;
}

class program_impl {
public:
    virtual ~program_impl() = default;
    virtual std::vector<host_tensor> run(std::span<const named_tensor> inputs) = 0;
    [[nodiscard]] virtual const std::vector<io_info>& inputs() const = 0;
    [[nodiscard]] virtual const std::vector<io_info>& outputs() const = 0;
    [[nodiscard]] virtual numerics_report numerics() const = 0;
    [[nodiscard]] virtual std::string dump() const = 0;
};

}  // namespace detail

class program {
public:
    program() = default;
    explicit program(std::unique_ptr<detail::program_impl> impl) : impl_(std::move(impl)) {}

    // Runs the program: every input by name, once each, with its declared shape (floating inputs may be
    // any floating type, integer inputs any integer type: they are converted). Returns the outputs in the
    // order they were given to compile.
    std::vector<host_tensor> run(std::span<const named_tensor> inputs) { return checked().run(inputs); }
    std::vector<host_tensor> run(std::initializer_list<named_tensor> inputs) {
        return checked().run(std::span<const named_tensor>(inputs.begin(), inputs.size()));
    }

    [[nodiscard]] const std::vector<io_info>& inputs() const { return checked().inputs(); }
    [[nodiscard]] const std::vector<io_info>& outputs() const { return checked().outputs(); }
    // With ane_numerics: the ops whose values left the fp16 range during the last run.
    [[nodiscard]] numerics_report numerics() const { return checked().numerics(); }
    // The graph as compiled, after the passes (anvil::dump's format).
    [[nodiscard]] std::string dump() const { return checked().dump(); }
    [[nodiscard]] bool valid() const noexcept { return impl_ != nullptr; }

private:
    [[nodiscard]] detail::program_impl& checked() const {
        if (!impl_) throw error("program: this program is empty (default-constructed or moved from)");
        return *impl_;
    }

    std::unique_ptr<detail::program_impl> impl_;
};

}  // namespace anvil
