// anvil: the Neural Engine self-test. Two parts:
//   - probes: every lowering variant of every feature (capabilities.hpp) compiled, loaded and evaluated on
//   its
//     own on the device, strictly (no CPU fallback), and checked against the CPU. What held becomes the
//     capability record for this (OS build, chip), which later programs read to choose each op's lowering;
//   - the op table: one small graph per IR op, run on the ANE backend (with the record's choices) and on the
//     CPU backend with the same inputs, reporting each op's placement (native, decomposed, host, or refused
//     by the device), its largest error against the CPU (relative to the output's magnitude) next to an fp16
//     tolerance for that op, and both times.
// On a Mac it tells the first users with hardware what works; on Linux it runs on the simulator. `anvil
// selftest` prints it and writes the record; the tests require every row to pass.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "anvil/backend/ane/capabilities.hpp"
#include "anvil/backend/program.hpp"
#include "anvil/compilation.hpp"
#include "anvil/graph/graph.hpp"

namespace anvil {

struct ane_selftest_row {
    std::string name;  // the case: the op, with its variant ("add (broadcast const)")
    op kind = op::add;
    std::string placement;   // "native", "decomposed", "host", or "refused" (the device refused its program)
    double max_error = 0.0;  // max |ane - cpu| / max(1, max |cpu|)
    double tolerance = 0.0;
    bool passed = false;
    double cpu_ms = 0.0;  // one run, best of `repeats`
    double ane_ms = 0.0;
    std::string note;  // the error when the case failed to compile or run; the host reason otherwise
};

struct ane_selftest_options {
    compile_options ane;  // target is forced to device::ane
    int repeats = 3;
    std::uint32_t seed = 1234;
};

// One probe: a variant of a feature on the device.
struct ane_probe_row {
    std::string feature;
    std::string variant;
    detail::ane::probe_outcome outcome;
};

namespace detail::ane {

struct selftest_case {
    std::string name;
    op kind;
    double tolerance;
    // Builds the graph on `g`, returns its output; adds inputs (with their data) to `inputs`.
    std::function<value(graph& g, std::vector<named_tensor>& inputs, std::mt19937& random)> build;
};

// The graph that probes one feature: the op under test inside a program anchored by a linear (a 1x1 conv),
// as real programs are, so that only the variant under test can make it fail.
struct feature_probe {
    lowering_feature feature;
    double tolerance;
    std::function<value(graph& g, std::vector<named_tensor>& inputs, std::mt19937& random)> build;
};

}  // namespace detail::ane

// Runs every variant of every feature on the Neural Engine, strictly, against the CPU: the capability record
// for this OS build and chip. `rows` receives one line per probe.
detail::ane::capability_record ane_probe_capabilities(const ane_selftest_options& options,
                                                      std::vector<ane_probe_row>* rows = nullptr);

// Writes the record to `path` (through a temporary file and a rename: programs read it concurrently).
void write_capability_record(const detail::ane::capability_record& record, const std::filesystem::path& path);

// Runs every case on the ANE backend (with options.ane's lowering: the record it names, or the defaults) and
// the CPU backend (optimised kernels, f32) and compares them. A case whose program the device refused (it
// then ran on the CPU) fails: the device did not run it.
std::vector<ane_selftest_row> ane_selftest(const ane_selftest_options& options = {});

}  // namespace anvil

#if ANVIL_DEFINITIONS
#include "anvil/backend/ane/selftest-inl.hpp"
#endif
