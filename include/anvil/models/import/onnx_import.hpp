// anvil: an ONNX model's graph imported into anvil's IR (io/onnx.hpp reads the file). The graph's symbolic
// dims are resolved from the shapes of the inputs given, so the imported graph has static shapes, as every
// anvil program does; initializers become constants; each node becomes the IR ops it means at the model's
// opset (the attributes that became inputs, Softmax's axis before opset 13, ...).
//
// Values that decide shapes (Reshape's target, Slice's bounds, Expand's shape, Resize's sizes, a PyTorch
// export's Shape -> Gather -> Concat chains) must be settled at import: the importer evaluates on the host
// whatever does not depend on a run's inputs. A graph input that decides one is settled only when its value
// is given (`input_values`), and the program is then specialised to it (onnx_import::fixed_inputs).
//
// A node anvil cannot import is an unsupported_error naming the op, the node and the opset, and saying what
// is missing: the one-line error the command line prints. tests/onnx_conformance runs ONNX's own backend
// tests through this importer; the README's table says which ops pass.
#pragma once

#include "anvil/compilation.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/core/shape.hpp"
#include "anvil/graph/graph.hpp"
#include "anvil/io/onnx.hpp"

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace anvil::models {

struct onnx_import {
    graph g;
    std::vector<std::string> input_names;   // the graph's inputs that are not initializers, in order
    std::vector<std::string> output_names;  // the graph's outputs, in order
    std::vector<value> outputs;
    // Inputs whose given values the import built into the program (they decide a shape or a bound); they
    // are not in input_names when nothing else reads them.
    std::vector<std::string> fixed_inputs;
};

// `input_shapes` gives an input's shape where the model leaves a dim symbolic or unknown (and may confirm a
// static one: a shape that contradicts the model's is a shape_error). `input_values` gives inputs' values
// (and so their shapes), used only where an op needs a value settled at import.
[[nodiscard]] onnx_import import_onnx(
    const onnx_model& model, const std::map<std::string, dims, std::less<>>& input_shapes = {},
    const std::map<std::string, host_tensor, std::less<>>& input_values = {});

}  // namespace anvil::models

#if ANVIL_DEFINITIONS
#include "anvil/models/import/onnx_import-inl.hpp"
#endif
