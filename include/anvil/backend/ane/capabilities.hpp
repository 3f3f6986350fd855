// anvil: what this Neural Engine accepts. Sources disagree about many ops per chip and OS (RUNTIME.md §0), so
// each op family that has several lowerings has a *feature* with up to two variants — native (the op as MIL
// spells it) and decomposed (anvil's rewrite into ops every chip takes) — and otherwise runs on the CPU. The
// variant used comes from the capability record `anvil selftest` writes for this (OS build, chip) after it
// probed every variant on the device and checked its numbers against the CPU; without a record it comes from
// the conservative defaults of RUNTIME.md §0 for the chip (the most conservative when the chip is unknown).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "anvil/compilation.hpp"
#include "anvil/fwd.hpp"

namespace anvil::detail::ane {

enum class lowering_feature : std::uint8_t {
    matmul,       // products of two computed tensors: matmul, attention's q k^T and weights v
    max_pool,     // max_pool2d
    avg_pool,     // avg_pool2d
    softmax,      // softmax (axes up to softmax_max_axis; longer ones are always decomposed)
    gelu,         // gelu (erf form)
    rsqrt,        // rsqrt
    reduce_mean,  // reduce_mean (and the global average pool)
    exp,          // exp
    log,          // log
    sqrt,         // sqrt
    io_width,     // native: inputs and outputs at their own width; decomposed: padded to a multiple of 32
    anchorless,   // native: programs with no conv or matmul are allowed; cpu: such segments run on the CPU
    dialect,      // native: program(1.3)/ios18; decomposed: program(1.0)/ios16
    palette,      // palettised weights: native: ios18's sub-byte form; decomposed: ios16's uint8-packed form;
                  // cpu: expanded to fp16 on the host
    weight_files,  // native: every weight in one weight.bin; decomposed: one file per weight
};
inline constexpr std::size_t feature_count = 15;

enum class lowering_variant : std::uint8_t { native, decomposed, cpu };

struct feature_description {
    lowering_feature feature;
    std::string_view name;
    std::string_view native;
    std::string_view decomposed;  // empty: there is no decomposition (the fallback is the CPU)
};

inline constexpr std::array<feature_description, feature_count> feature_descriptions{{
    {lowering_feature::matmul, "matmul", "the matmul and einsum ops (einsum: split-einsum attention)",
     "a broadcast mul and reduce_sum (no matmul: it fails on M1/M2, RUNTIME.md §0 #4)"},
    {lowering_feature::max_pool, "max_pool", "the max_pool op",
     "strided slices and maximum (max_pool is reported rejected, RUNTIME.md §0 #5)"},
    {lowering_feature::avg_pool, "avg_pool", "the avg_pool op",
     "a depthwise conv with constant weights (avg_pool is reported rejected, RUNTIME.md §0 #5)"},
    {lowering_feature::softmax, "softmax", "the softmax op", "reduce_max, sub, exp, reduce_sum, real_div"},
    {lowering_feature::gelu, "gelu", "the gelu op",
     "0.5 x (1 + erf(x / sqrt(2))) (gelu is reported rejected, RUNTIME.md §6)"},
    {lowering_feature::rsqrt, "rsqrt", "the rsqrt op with a positive epsilon",
     "pow(x, -0.5) (rsqrt is reported rejected, RUNTIME.md §6)"},
    {lowering_feature::reduce_mean, "reduce_mean", "the reduce_mean op", "reduce_sum times 1/n"},
    {lowering_feature::exp, "exp", "the exp op", "pow(e, x)"},
    {lowering_feature::log, "log", "the log op with a positive epsilon", ""},
    {lowering_feature::sqrt, "sqrt", "the sqrt op", "pow(x, 0.5)"},
    {lowering_feature::io_width, "io_width", "inputs and outputs at their own width",
     "the innermost dimension of every input and output padded to a multiple of 32 on the host and sliced "
     "inside the program (RUNTIME.md §0 #3)"},
    {lowering_feature::anchorless, "anchorless", "programs with no conv or matmul", ""},
    {lowering_feature::dialect, "dialect", "program(1.3) with ios18 ops",
     "program(1.0) with ios16 ops and verbose scalars (RUNTIME.md §4)"},
    {lowering_feature::palette, "palette",
     "palettised weights kept compressed as ios18's constexpr_lut_to_dense with sub-byte indices",
     "palettised weights as ios16's constexpr_lut_to_dense with uint8-packed indices, the segment lowered as "
     "program(1.0)/ios16 (sub-byte ios18 weights are reported refused by the private compiler, RUNTIME.md "
     "§0b #19)"},
    {lowering_feature::weight_files, "weight_files", "every weight in one weight.bin",
     "one weight file per weight (single-blob weights are reported to fail on M1, RUNTIME.md §0 #15)"},
}};

[[nodiscard]] inline const feature_description& describe_feature(lowering_feature f) {
    return feature_descriptions.at(static_cast<std::size_t>(f));
}

[[nodiscard]] std::optional<lowering_feature> feature_named(std::string_view name);

[[nodiscard]] std::string_view variant_name(lowering_variant v);

[[nodiscard]] std::optional<lowering_variant> variant_named(std::string_view name);

// M1 (h13) and M2 (h14): no matmul or SDPA, program(1.0)/ios16 only (RUNTIME.md §0 #4, §4).
[[nodiscard]] inline bool is_h13_or_h14(std::string_view architecture) {
    return architecture.starts_with("h13") || architecture.starts_with("h14");
}

// The variant of each feature a program is lowered with, and where that choice came from.
struct lowering_choices {
    std::array<lowering_variant, feature_count> chosen{};
    std::string source;  // "defaults for h16g", "record /path/capabilities-...json", ...
    std::string digest;  // of the record's outcomes; empty without a record (part of the program cache key)
    // The most weight bytes one program may hold here, as the record learned it (0: no limit known).
    std::size_t max_program_weight_bytes = 0;

    [[nodiscard]] lowering_variant of(lowering_feature f) const {
        return chosen.at(static_cast<std::size_t>(f));
    }
    void set(lowering_feature f, lowering_variant v) { chosen.at(static_cast<std::size_t>(f)) = v; }

    // "matmul=decomposed, max_pool=decomposed, ..." for placement reports.
    [[nodiscard]] std::string summary() const;
};

// The conservative defaults of RUNTIME.md §0 for a chip ("" when unknown: the most conservative set) and a
// macOS major version (0 when unknown): the ios18 dialect needs macOS 15 (RUNTIME.md §0b #18).
[[nodiscard]] lowering_choices default_choices(std::string_view architecture, int macos_major = 0);

// One probe of one variant on the device: whether it compiled, loaded, evaluated and matched the CPU.
struct probe_outcome {
    bool held = false;
    double max_error = 0.0;
    double tolerance = 0.0;
    double ms = 0.0;
    std::string error;  // why it did not hold
};

// What `anvil selftest` found on one (OS build, chip): outcomes by feature name, then variant name.
struct capability_record {
    static constexpr std::string_view format = "anvil-ane-capabilities/1";
    std::string os_build;
    std::string chip;
    std::string anvil_version;
    bool simulated = false;
    std::map<std::string, std::map<std::string, probe_outcome>> features;
    // The weight bytes of the largest program that compiled after a larger one was refused and split
    // (RUNTIME.md §0b #20: a per-program weight limit, reported from ~8 MB to far larger); 0 when none was
    // refused. Programs are partitioned under it from then on.
    std::size_t max_program_weight_bytes = 0;

    // The best variant that held: native, then decomposed, else the CPU; nullopt when never probed.
    [[nodiscard]] std::optional<lowering_variant> best(lowering_feature f) const;

    // A digest of the outcomes (what held, not the timings), so re-running the self-test with the same
    // results keeps every cached program valid, and a different result compiles afresh.
    [[nodiscard]] std::string digest() const;

    [[nodiscard]] json::value to_json() const;

    // Parses a record; a malformed one is an error naming the file and what is wrong.
    [[nodiscard]] static capability_record parse(std::string_view text, const std::string& where);
};

// A file-name-safe spelling of the OS build and chip ("Linux 6.1.0-27 #1 SMP" -> "Linux_6.1.0-27__1_SMP").
[[nodiscard]] std::string file_name_part(std::string_view text);

// <cache directory>/capabilities-<os build>-<chip>.json
[[nodiscard]] std::filesystem::path record_path(const std::filesystem::path& cache_directory,
                                                std::string_view os_build, std::string_view chip);

// The record at `path`, nullopt when there is none; a malformed or foreign one (another OS build or chip) is
// an error, so a stale record never silently picks variants.
[[nodiscard]] std::optional<capability_record> read_record(const std::filesystem::path& path,
                                                           std::string_view os_build, std::string_view chip);

// The defaults for the chip, replaced feature by feature by what the record says held, then by explicit
// overrides (compile_options::ane_lowering: feature name -> variant name).
[[nodiscard]] lowering_choices choose_lowering(std::string_view architecture,
                                               const std::optional<capability_record>& record,
                                               const std::filesystem::path& record_file,
                                               const std::map<std::string, std::string>& overrides,
                                               int macos_major = 0);

// Records in this machine's capability record (creating one holding only this, when `anvil selftest` wrote
// none) that programs of at most `bytes` weight bytes compile, a larger one having been refused. Best effort:
// a cache that cannot be written only costs the next run the refused compile again.
void record_program_weight_limit(const compile_options& options, const std::string& architecture,
                                 std::size_t bytes);

// The capability record for this OS build and chip, if `anvil selftest` wrote one, decides each op's
// lowering; otherwise the conservative defaults for the chip do. compile_options::ane_lowering overrides come
// last.
lowering_choices choices_for(const compile_options& options, const std::string& architecture,
                             int macos_major = 0);

}  // namespace anvil::detail::ane

#if ANVIL_DEFINITIONS
#include "anvil/backend/ane/capabilities-inl.hpp"
#endif
