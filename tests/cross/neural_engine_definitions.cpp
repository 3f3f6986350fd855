// The definitions compile() reaches beyond the CPU backend: compile itself and the Neural Engine and Core ML
// backends it may choose. The kernels' tests link them but never run them (no simulator here, so compile
// picks the CPU), so they are compiled without optimisation (tests/cross/CMakeLists.txt): at -O2 beside
// cpu_definitions.cpp they took 45 s of its 66 s of a core (aarch64-linux-gnu-g++ 12); here, 26 s.
//   What cpu_definitions.cpp defines is included first as declarations (separate compilation); the headers
// compile.hpp adds are the only ones included with ANVIL_DEFINITIONS set (compilation.hpp), so every
// definition is compiled in exactly one of the two units.
#define ANVIL_SEPARATE_COMPILATION
#include "cpu_backend.hpp"

#undef ANVIL_DEFINITIONS
#define ANVIL_DEFINITIONS 1
#include <anvil/backend/compile.hpp>
