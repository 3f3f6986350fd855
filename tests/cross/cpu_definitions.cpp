// The part of anvil::compiled that the CPU kernels' tests run (tests/cross/CMakeLists.txt), optimised as
// users build it: the definitions behind cpu_backend.hpp. The kernels' entry points are in
// src/anvil_kernels.cpp, as for anvil::compiled; neural_engine_definitions.cpp, the rest compile() reaches.
#define ANVIL_IMPLEMENTATION
#define ANVIL_KERNELS_ELSEWHERE
#include "cpu_backend.hpp"
