// anvil: reverse-mode differentiation over the graph IR. gradients() walks the nodes between a loss and the
// values it is asked about from the loss back, applies each op's vector-Jacobian product (graph/vjp.hpp, one
// row per op) and appends the backward graph to the same graph, so every backend compiles and runs it as it
// runs any graph: the CPU, the Neural Engine with its per-segment fallback, or a Core ML package.
#pragma once

#include <initializer_list>
#include <span>
#include <vector>

#include "anvil/compilation.hpp"
#include "anvil/graph/graph.hpp"

namespace anvil {

// The gradient of `loss` with respect to each of `wrt` (values of the loss's graph: parameters, inputs or
// intermediate values), each of the value's own type and shape; a value the loss does not depend on gets
// zeros. `loss` must hold one element (a scalar loss: the seed is 1), unless `seed` gives the cotangent
// (the same type and shape as the loss; then the result is the vector-Jacobian product seed^T J).
// Gradients flow through floating-point values only: comparisons, argmax and integer casts pass none, as
// in PyTorch; floor, ceil, round and sign pass zeros. An op with no derivative between the loss and a value
// asked about (a fused or quantised node) throws error naming it.
[[nodiscard]] std::vector<value> gradients(const value& loss, std::span<const value> wrt);
[[nodiscard]] std::vector<value> gradients(const value& loss, std::span<const value> wrt, const value& seed);
[[nodiscard]] inline std::vector<value> gradients(const value& loss, std::initializer_list<value> wrt) {
    return gradients(loss, std::span<const value>(wrt.begin(), wrt.size()));
}
[[nodiscard]] inline std::vector<value> gradients(const value& loss, std::initializer_list<value> wrt,
                                                  const value& seed) {
    return gradients(loss, std::span<const value>(wrt.begin(), wrt.size()), seed);
}

}  // namespace anvil

#if ANVIL_DEFINITIONS
#include "anvil/graph/autodiff-inl.hpp"
#endif
