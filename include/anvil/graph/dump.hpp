// anvil: a readable text form of a graph, one node per line, for debugging and golden tests:
//
//   %0 = input "x" : f32 [1, 64, 1, 32]
//   %1 = constant "w" : f16 [64, 64, 1, 1]
//   %2 = conv2d(%0, %1) {kernel=[1, 1]} : f32 [1, 64, 1, 32]
//   outputs: %2
//
// Attributes are printed only where they differ from their defaults, so a line shows what makes a node
// special.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "anvil/compilation.hpp"
#include "anvil/graph/graph.hpp"

namespace anvil {

namespace detail {

void dump_list(std::ostringstream& out, const char* key, const std::vector<std::int64_t>& values);

template <std::size_t N>
inline void dump_array(std::ostringstream& out, const char* key, const std::array<std::int64_t, N>& values,
                       const std::array<std::int64_t, N>& default_values) {
    if (values == default_values) return;
    out << ' ' << key << '=' << extents_to_string(values, false);
}

std::string dump_attributes(const node& n);

}  // namespace detail

// One line per node of `nodes`, then the outputs.
[[nodiscard]] std::string dump(const graph_body& body);

[[nodiscard]] std::string dump(const graph& g);

// How errors and placement reports name a node: its id, op, the name of the weight or input it reads, its
// type and shape ("node 12 (matmul of 'x', f32 [4, 8])").
[[nodiscard]] std::string describe_node(const graph_body& body, value_id id);

}  // namespace anvil

#if ANVIL_DEFINITIONS
#include "anvil/graph/dump-inl.hpp"
#endif
