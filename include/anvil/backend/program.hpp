// anvil: what every backend hands back from compile — a program: named inputs in, outputs out, reusable
// across calls. One program serves one caller at a time (a second concurrent run waits); several programs
// run in parallel.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "anvil/backend/cpu/numerics.hpp"
#include "anvil/compilation.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/graph/weight_compression.hpp"

namespace anvil {

enum class device : std::uint8_t {
    cpu,
    ane,        // the Neural Engine through the private AppleNeuralEngine.framework
    automatic,  // the Neural Engine where present, else the CPU
    coreml,     // the Neural Engine through the public CoreML.framework: what App Store apps may ship
};

// Which CPU kernels run the graph: the optimised ones, or the plain reference ones that define each op
// (for parity tests and for checking a suspicion).
enum class cpu_kernels : std::uint8_t { optimized, reference };

// The MIL dialect of ANE programs: program(1.3)/ios18 (macOS 15+, M3 and later), or the verbose
// program(1.0)/ios16 older chips need (RUNTIME.md §4); automatic picks by the Neural Engine's architecture.
enum class mil_version : std::uint8_t { automatic, ios18, ios16 };

class placement_journal;

struct compile_options {
    device target = device::cpu;
    // Fail to compile instead of running on another device any node `target` could run: a node placed on the
    // host for a device limit, or a segment the Neural Engine refuses (at compile, load or first evaluate),
    // is an error naming it. Integer work the ANE cannot do at all (embedding lookups, argmax) stays on the
    // host.
    bool strict_device = false;
    // CPU: round every op's output to fp16 with denormals flushed, as the Neural Engine stores values, and
    // report the ops whose values left the fp16 range (program::numerics()).
    bool ane_numerics = false;
    cpu_kernels kernels = cpu_kernels::optimized;
    // CPU: products with Q8_0, Q4_0, Q4_K or int8 weights round each row of activations to 8 bits, 32 values
    // to a scale, and multiply in integers, as llama.cpp does (backend/cpu/gemm_int8.hpp): faster, but no
    // longer the dequantised weights' exact product. Off: every product is exact up to f32 rounding.
    bool int8_activations = false;
    std::size_t threads = 0;  // 0: the process-wide pool (ANVIL_NUM_THREADS or every core)
    bool fold_constants = true;
    bool fold_batch_norm = true;
    bool fuse_elementwise = true;
    // The weights of linear and conv2d nodes stored compressed (graph/weight_compression.hpp): int8 with a
    // scale per output channel, or palettes of 16 or 64 values. Every backend runs the dequantised weights;
    // device::coreml keeps them compressed in its programs, the CPU and the private ANE path dequantise.
    anvil::weight_compression weight_compression = anvil::weight_compression::none;
    // ANE: where compiled programs are cached ("" = $ANVIL_CACHE_DIR, else the user cache directory;
    // "none" = no cache).
    std::string cache_dir;
    // ANE and Core ML: after a compile, least recently used cached programs are removed until the cache holds
    // at most this many bytes (0: $ANVIL_CACHE_MAX_BYTES, else anvil::cache::default_max_bytes, 4 GiB;
    // anvil::cache::no_cap: no cap). Programs in use by any process are never removed (backend/cache.hpp).
    std::uintmax_t cache_max_bytes = 0;
    // The folder or file the graph's weights came from, as the program cache's manifests name it (`anvil
    // cache list`); model recipes set it to the folder they load.
    std::string model_source;
    mil_version ane_mil = mil_version::automatic;
    // ANE: a program holding more weights than this is split into several (intermediates pass by IOSurface).
    std::size_t ane_max_program_weight_bytes = std::size_t{256} << 20;
    // Inputs that stay bound to the program between runs (a KV cache): zero-filled at compile, updated in
    // place with program::write_input, never passed to run(). On the ANE each is an IOSurface that run() does
    // not rewrite, so a step moves only what write_input wrote.
    std::vector<std::string> resident_inputs;
    // ANE: the capability record `anvil selftest` wrote ("" = capabilities-<os build>-<chip>.json in the
    // cache directory; "none" = the conservative defaults for the chip).
    std::string ane_capabilities;
    // ANE: how an op family is lowered, overriding the record and the defaults: feature -> "native",
    // "decomposed" or "cpu" (features: matmul, max_pool, avg_pool, softmax, gelu, rsqrt, reduce_mean, exp,
    // log, sqrt, io_width, anchorless, dialect, palette, weight_files; `anvil selftest` probes each variant
    // this way).
    std::map<std::string, std::string> ane_lowering;
    // ANE: a segment the Neural Engine refuses is lowered again in more conservative forms (ios16, fp16
    // weights, every op decomposed) before it runs on the CPU; true goes to the CPU (or, under strict_device,
    // fails) at once, as `anvil selftest`'s probes need to test one form.
    bool ane_exact_lowering = false;
    // ANE: loadWithQoS is tried this many times in all, the delay doubling from the first (RUNTIME.md §0 #13:
    // failures for lack of resources are transient); $ANVIL_ANE_LOAD_RETRY="ATTEMPTS,FIRST_DELAY_MS"
    // overrides.
    int ane_load_attempts = 7;
    std::chrono::milliseconds ane_load_first_retry_delay{100};
    // ANE: the most one program waits between load tries in all, across the forms it is lowered in when
    // refused (a device out of resources for longer sends the segment to the CPU sooner).
    std::chrono::milliseconds ane_load_max_backoff{10'000};
    // ANE: the most programs this process keeps loaded at once (0: as many as the device takes). Before one
    // more loads past it, and whenever the device refuses a compile or load as full (0x50004), the least
    // recently used program not running is unloaded, to be loaded again on its next run (RUNTIME.md §0b #23:
    // ~55 fit; a full pool is not transient). Shared by every program of the process.
    std::size_t ane_max_loaded_programs = 48;
    // ANE: how long a program's first evaluation may take before it is given up and its segment runs on the
    // CPU (RUNTIME.md §0b #22: a wedged driver never signals; OMLX waits 30 s).
    std::chrono::milliseconds ane_first_evaluation_timeout{30'000};
    // ANE: a freshly compiled program's first evaluation is compared with the CPU's on the same inputs, and a
    // program that computes wrong numbers (its weights mistaken for another's, RUNTIME.md §0b #21) runs on
    // the CPU instead.
    bool ane_verify_first_evaluation = true;
    // ANE: compiles per process after which a warning says the framework may refuse more (0: the
    // ANVIL_ANE_COMPILE_BUDGET environment variable, else 119, RUNTIME.md §6). A soft limit: compiles go on
    // until the framework refuses, and a refused segment runs on the CPU.
    long ane_compile_budget = 0;
    // Where each compiled program records its placement (shared: every program compiled with these options,
    // a model's included, appends its report). Optional.
    std::shared_ptr<placement_journal> placement_log;
};

// Where one segment of a program runs, and why.
struct placement_segment {
    std::string device;        // "ane" or "cpu"
    std::size_t op_count = 0;  // graph ops in the segment
    std::string ops;           // "linear x3, gelu, softmax"
    std::string reason;        // on the CPU: why (host-only ops, no anchor op, or the device's refusal)
    std::string refused_at;    // "compile", "load", "evaluate": the Neural Engine refused it there; else ""
    std::string framework_error;  // the framework's message when it refused
    bool cached = false;          // an ANE program loaded from the program cache
    // The chunk of whole stages (a model's layers, graph::begin_stage) it belongs to: a model whose weights
    // pass ane_max_program_weight_bytes runs as several chunks, in order; 0 when there is one.
    std::size_t chunk = 0;
    std::string stages;  // the stages whose weights it holds ("layer 0 to layer 3"); "" if unmarked
    // Planned for the Neural Engine: the fp16 bytes of the weights its nodes read, which its program embeds.
    std::size_t weight_bytes = 0;
};

// Where a program's work runs: every segment, the nodes the Neural Engine does not run, and how ops were
// lowered. program::placement() returns it; the command line prints it under "placement" with --json.
struct placement_report {
    std::string backend;   // "cpu" or "ane"
    std::string device;    // "h16g", "unknown", or "" on the CPU
    std::string lowering;  // where the lowering choices came from, and what they are
    std::vector<placement_segment> segments;
    std::vector<std::string> host_nodes;  // "node 12 (gather ...): why"
    std::size_t chunks = 1;               // chunks of whole stages (placement_segment::chunk)
    // The weight bytes of the largest program that compiled after the compiler refused a larger one and it
    // was split; 0 when none was. Kept in the capability record: later programs are partitioned under it.
    std::size_t max_program_weight_bytes_learned = 0;

    // How many segments the Neural Engine refused.
    [[nodiscard]] std::size_t refused() const noexcept;
};

// Reports of several programs, appended as they compile (thread-safe).
class placement_journal {
public:
    void add(placement_report report);
    [[nodiscard]] std::vector<placement_report> reports() const;

private:
    mutable std::mutex mutex_;
    std::vector<placement_report> reports_;
};

// A program input or output: its name (outputs are named "output0", "output1", ...), type and shape.
struct io_info {
    std::string name;
    dtype type = dtype::f32;
    dims shape;
    bool resident = false;  // bound to the program (compile_options::resident_inputs), not given to run()
};

namespace detail {

// The declared inputs' names, for error messages ("none" when there are none); only resident ones when
// `resident_only`.
[[nodiscard]] std::string input_names(std::span<const io_info> declared, bool resident_only = false);

// Matches the tensors a run was given to the program's declared inputs, checking each name, shape and kind
// (floating or integer): the result holds, for each declared input in order, the index of its tensor in
// `given` (or unbound_input for a resident input, which a run is never given). Every backend binds its
// inputs through this, so a bad call reads the same on all of them.
inline constexpr std::size_t unbound_input = static_cast<std::size_t>(-1);

[[nodiscard]] std::vector<std::size_t> match_inputs(std::span<const named_tensor> given,
                                                    std::span<const io_info> declared);

// Flags the inputs compile_options::resident_inputs names; each must be an input of the graph, once.
void mark_resident(std::vector<io_info>& declared, std::span<const std::string> resident);

// The index of resident input `name` among `declared`, or an error naming what is wrong (`what`: the
// calling function).
[[nodiscard]] std::size_t find_resident(std::span<const io_info> declared, std::string_view name,
                                        std::string_view what);

// Where a write_input lands in the row-major input: a box of extents `extent` at `offset`, walked as runs of
// extent.back() elements contiguous in both the part and the input.
struct write_region {
    std::size_t input = 0;                           // index among the declared inputs
    std::vector<std::size_t> shape, offset, extent;  // the input's shape; the box's corner and extents

    [[nodiscard]] std::size_t run_length() const noexcept { return extent.empty() ? 1 : extent.back(); }
    [[nodiscard]] std::size_t element_count() const noexcept {
        std::size_t count = 1;
        for (const std::size_t e : extent)
            count *= e;
        return count;
    }
    // Where each run starts in the input (run k holds the part's elements [k * run_length(), ...)).
    [[nodiscard]] std::vector<std::size_t> run_starts() const;
};

// Checks a write_input of `part` at `offsets` (one per axis) against the declared inputs and says where it
// lands.
[[nodiscard]] write_region check_write(std::span<const io_info> declared, std::string_view name,
                                       std::span<const std::int64_t> offsets, const host_tensor& part);

// The offsets of a write along one axis (every other axis whole), with errors that speak of that form.
[[nodiscard]] std::vector<std::int64_t> axis_offsets(std::span<const io_info> declared, std::string_view name,
                                                     std::int64_t axis, std::int64_t begin,
                                                     const host_tensor& part);

class program_impl {
public:
    virtual ~program_impl() = default;
    virtual std::vector<host_tensor> run(std::span<const named_tensor> inputs) = 0;
    [[nodiscard]] virtual const std::vector<io_info>& inputs() const = 0;
    [[nodiscard]] virtual const std::vector<io_info>& outputs() const = 0;
    [[nodiscard]] virtual numerics_report numerics() const = 0;
    [[nodiscard]] virtual std::string dump() const = 0;
    virtual void write_input(std::string_view name, std::span<const std::int64_t> offsets,
                             const host_tensor& part) = 0;
    [[nodiscard]] virtual host_tensor read_input(std::string_view name) const = 0;
    // Where the work runs; a CPU program runs all of it on the CPU.
    [[nodiscard]] ANVIL_INLINE virtual placement_report placement() const;
};

}  // namespace detail

class program {
public:
    program() noexcept;
    explicit program(std::unique_ptr<detail::program_impl> impl) noexcept;
    program(program&&) noexcept;
    program& operator=(program&&) noexcept;
    ~program();

    // Runs the program: every input by name, once each (resident inputs excepted: they are bound already),
    // with its declared shape (floating inputs may be any floating type, integer inputs any integer type:
    // they are converted). Returns the outputs in the order they were given to compile.
    std::vector<host_tensor> run(std::span<const named_tensor> inputs);
    std::vector<host_tensor> run(std::initializer_list<named_tensor> inputs);

    // Writes `part` into resident input `name` at [begin, begin + part.shape()[axis]) along `axis`; every
    // other axis of `part` must equal the input's. Converts any floating type (integer inputs take integer
    // parts). The next run sees it; nothing else of the input changes.
    void write_input(std::string_view name, std::int64_t axis, std::int64_t begin, const host_tensor& part);
    // The general form: `part` (the input's rank) lands at `offsets` (one per axis), a box of its shape —
    // e.g. one stream's rows [1, H, S, D] of a batched cache [B, H, T, D] at {b, 0, position, 0}.
    void write_input(std::string_view name, std::span<const std::int64_t> offsets, const host_tensor& part);
    void write_input(std::string_view name, std::initializer_list<std::int64_t> offsets,
                     const host_tensor& part);
    // A copy (f32) of resident input `name`'s current contents (rounded to the input's type, as a run sees
    // them).
    [[nodiscard]] host_tensor read_input(std::string_view name) const;

    // Every input, resident ones flagged (io_info::resident).
    [[nodiscard]] const std::vector<io_info>& inputs() const;
    [[nodiscard]] const std::vector<io_info>& outputs() const;
    // With ane_numerics: the ops whose values left the fp16 range during the last run.
    [[nodiscard]] numerics_report numerics() const;
    // The graph as compiled, after the passes (anvil::dump's format); on the ANE also the placement of each
    // segment, with the framework's error where the Neural Engine refused one, and each program's MIL.
    [[nodiscard]] std::string dump() const;
    // Where each segment runs and why (ANE programs: which the Neural Engine refused, and its message).
    [[nodiscard]] placement_report placement() const;
    [[nodiscard]] bool valid() const noexcept { return impl_ != nullptr; }

private:
    [[nodiscard]] detail::program_impl& checked() const;

    std::unique_ptr<detail::program_impl> impl_;
};

}  // namespace anvil

#if ANVIL_DEFINITIONS
#include "anvil/backend/program-inl.hpp"
#endif
