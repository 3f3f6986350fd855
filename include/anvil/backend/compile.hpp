// anvil: compile — the one entry point from a graph's values to a runnable program on a backend.
#pragma once

#include <initializer_list>
#include <memory>
#include <span>
#include <vector>

#include "anvil/backend/program.hpp"
#include "anvil/compilation.hpp"
#include "anvil/graph/graph.hpp"

namespace anvil {

// A program computing `outputs` (values of one graph) from the graph's inputs.
[[nodiscard]] program compile(std::span<const value> outputs, const compile_options& options = {});
[[nodiscard]] program compile(std::initializer_list<value> outputs, const compile_options& options = {});

}  // namespace anvil

#if ANVIL_DEFINITIONS
#include "anvil/backend/compile-inl.hpp"
#endif
