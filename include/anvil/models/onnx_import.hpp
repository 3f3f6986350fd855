// anvil: an ONNX model's graph imported into anvil's IR (io/onnx.hpp reads the file). The graph's symbolic
// dims are resolved from the shapes of the inputs given, so the imported graph has static shapes, as every
// anvil program does; initializers become constants; each node becomes the IR ops it means at the model's
// opset (Softmax before opset 13, Squeeze/Unsqueeze/Clip/Reshape taking attributes or constant inputs).
// A node anvil cannot import is an unsupported_error naming the op, the node and the opset — the one-line
// error the command line prints.
//
// Imported so far: Add, Sub, Mul, Div, Pow, Max, Min, Relu, Sigmoid, Tanh, Exp, Log, Sqrt, Abs, Neg,
// Identity, MatMul, Gemm, Softmax, Reshape, Transpose, Flatten, Concat, Squeeze, Unsqueeze, Clip, Constant.
#pragma once

#include "anvil/compilation.hpp"
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
};

// `input_shapes` gives an input's shape where the model leaves a dim symbolic or unknown (and may confirm a
// static one: a shape that contradicts the model's is a shape_error).
[[nodiscard]] onnx_import import_onnx(const onnx_model& model,
                                      const std::map<std::string, dims, std::less<>>& input_shapes = {});

}  // namespace anvil::models

#if ANVIL_DEFINITIONS
#include "anvil/models/onnx_import-inl.hpp"
#endif
