// anvil: the shared machinery of graph passes — who uses each value, and rebuilding a graph_body with some
// nodes dropped or replaced while keeping ids dense and in topological order.
#pragma once

#include <cstddef>
#include <limits>
#include <vector>

#include "anvil/compilation.hpp"
#include "anvil/graph/graph.hpp"

namespace anvil::detail {

inline constexpr value_id no_value = std::numeric_limits<value_id>::max();

// users[v]: the nodes that read value v (a node reading v twice is listed twice).
std::vector<std::vector<value_id>> users_of(const graph_body& body);

std::vector<bool> output_mask(const graph_body& body);

// Keeps the nodes with keep[id]; a dropped node's readers must have been redirected with `forward` first
// (forward[id] = the value that now stands for id, or id itself). Inputs and outputs are remapped.
graph_body compact(const graph_body& body, const std::vector<bool>& keep, std::vector<value_id> forward);

std::vector<value_id> identity_forward(std::size_t count);

}  // namespace anvil::detail

#if ANVIL_DEFINITIONS
#include "anvil/graph/rewrite-inl.hpp"
#endif
