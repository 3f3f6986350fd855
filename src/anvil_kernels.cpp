// The CPU kernels' half of anvil::compiled (anvil/compilation.hpp): the GEMM's entry points for each
// instruction set, compiled beside src/anvil.cpp, which leaves them out.
#define ANVIL_IMPLEMENTATION_KERNELS
#include <anvil/backend/cpu/gemm_int8.hpp>
#include <anvil/backend/cpu/gemm_rows.hpp>
