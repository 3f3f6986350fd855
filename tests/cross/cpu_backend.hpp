// What the CPU kernels' tests stand on, short of compile(): the core, graphs, programs and the CPU backend
// (its executor, kernels and reference kernels). cpu_definitions.cpp defines it and
// neural_engine_definitions.cpp declares it, so each definition is compiled in exactly one of the two.
#pragma once

#include <anvil/graph.hpp>

#include <anvil/backend/cpu/executor.hpp>
#include <anvil/backend/program.hpp>
#include <anvil/backend/resident_weights.hpp>
