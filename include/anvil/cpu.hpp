// anvil: graphs compiled and run — `compile` and `program`, on the CPU backend (the numerical reference) or,
// with compile_options::target, the Neural Engine. With ANVIL_SEPARATE_COMPILATION this parses neither
// backend's internals: they are compiled into anvil::compiled.
#pragma once

#include "anvil/graph.hpp"

#include "anvil/backend/compile.hpp"
#include "anvil/backend/program.hpp"
#include "anvil/backend/resident_weights.hpp"
