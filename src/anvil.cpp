// The implementation unit of anvil::compiled (separate compilation, anvil/compilation.hpp): every
// non-template definition of the library, compiled once, but for the CPU kernels' entry points, which
// src/anvil_kernels.cpp compiles beside this file.
#define ANVIL_KERNELS_ELSEWHERE
#include <anvil/src.hpp>
