// anvil: export_mlpackage — a graph as a Core ML package an iOS or macOS app adds in Xcode, with no Python
// and no coremltools. The whole graph becomes one ML program (backend/ane/lowering.hpp lower_program) whose
// inputs and outputs keep their shapes and names (token ids as int32 arrays, activations as fp16), lowered
// with the same rules the device::coreml route uses, so what runs there is what ships; what the Neural
// Engine does not run (embedding lookups, integer casts, argmax) is written as plain MIL ops, which Core ML
// places on the CPU itself. The package is the one write_mlpackage writes (Manifest.json, model.mlmodel,
// weights/weight.bin), with the metadata Xcode shows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "anvil/compilation.hpp"
#include "anvil/graph/graph.hpp"
#include "anvil/graph/weight_compression.hpp"

namespace anvil {

// A graph input the model keeps as a state (MLState, macOS 15 / iOS 18) instead of taking it from the app:
// its value starts at zeros and, after each prediction, is replaced by output `output` (which is then not
// a model output). A decoder's KV caches: the app passes only the new tokens. A state with no output is
// only read: the app writes it in place (getMultiArrayForStateNamed:handler:), as Whisper's decoder takes
// the cross-attention keys and values its encoder computed once per window.
struct mlpackage_state {
    std::string input;
    std::optional<std::size_t> output = 0;  // index into export_mlpackage's outputs; none: read only
};

// What Xcode shows for the model, and which OS it needs.
struct mlpackage_options {
    std::vector<std::string> output_names;  // one per output that is not a state's; empty: "output0", ...
    std::vector<mlpackage_state> states;    // any: the package needs ios18
    std::string description;                // Metadata.shortDescription
    std::string author;
    std::string license;
    std::string version;
    std::vector<std::pair<std::string, std::string>> user_defined;  // Metadata.userDefined
    std::string default_function;  // a multi-function package: the function loaded without a functionName
    // The opset: ios16 (spec 7, macOS 13 / iOS 16, the default) or ios18 (spec 9, macOS 15 / iOS 18).
    // States need ios18: export refuses them otherwise.
    bool ios18 = false;
    // The weights of linear and conv2d nodes stored compressed (graph/weight_compression.hpp) as constexpr
    // ops Core ML decompresses when it loads the model: int8 (constexpr_affine_dequantize, or from ios18
    // constexpr_blockwise_shift_scale), lut4 and lut6 (constexpr_lut_to_dense); lut4g32's palette per
    // group of channels needs ios18.
    weight_compression weights = weight_compression::none;
};

// An input or output as the package describes it.
struct mlpackage_port {
    std::string name;
    std::vector<std::int64_t> shape;
    std::string dtype;  // "fp16" (floats, and booleans as 1 and 0) or "int32"
};

// One function of a multi-function package (macOS 15 / iOS 18; Core ML loads one per MLModel, chosen by
// MLModelConfiguration.functionName): e.g. a decoder's prefill and decode steps. The functions share the
// package's weight file, a tensor they have in common stored once, and functions that declare the same
// states can run on one MLState.
struct mlpackage_function {
    std::string name;                       // a MIL identifier
    std::vector<value> outputs;             // values of one graph
    std::vector<std::string> output_names;  // one per output that is not a state's; empty: "output0", ...
    std::vector<mlpackage_state> states;    // as mlpackage_options::states, for this function
};

// What one function takes and returns.
struct mlpackage_interface {
    std::string name;
    std::vector<mlpackage_port> inputs, outputs, states;
};

// What was written.
struct mlpackage_summary {
    // The default function's interface (the only function's, for a plain package).
    std::vector<mlpackage_port> inputs, outputs, states;
    std::vector<mlpackage_interface> functions;  // every function, in the order given
    std::size_t operations = 0;                  // MIL ops, consts excluded
    std::size_t weight_bytes = 0;                // of weights/weight.bin
    std::string digest;  // of the package's contents (stable: the same graph gives the same bytes)
    // What Core ML is known to move off the Neural Engine in this package (the package is still valid).
    std::vector<std::string> warnings;
};

// Writes the package computing `outputs` (values of one graph) from the graph's inputs to `package` (a path
// ending in .mlpackage; an existing package there is replaced). Throws unsupported_error naming the node
// that has no Core ML form, io_error when the package cannot be written.
mlpackage_summary export_mlpackage(std::span<const value> outputs, const std::filesystem::path& package,
                                   const mlpackage_options& options = {});

// A multi-function package: every function of `functions` (two at least; options.output_names and
// options.states are not used, each function has its own), the first the default unless
// options.default_function names another. Needs options.ios18.
mlpackage_summary export_mlpackage(std::span<const mlpackage_function> functions,
                                   const std::filesystem::path& package, const mlpackage_options& options);

}  // namespace anvil

#if ANVIL_DEFINITIONS
#include "anvil/backend/coreml/export-inl.hpp"
#endif
