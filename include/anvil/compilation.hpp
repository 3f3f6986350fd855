// anvil: how the library is compiled — header-only (the default) or separately, as Asio and spdlog offer.
//
// Header-only: every definition is inline and compiled in each file that includes it. Nothing to set up.
//
// Separate compilation: define ANVIL_SEPARATE_COMPILATION for every file of the project (the CMake target
// anvil::compiled and Meson's anvil_compiled_dep do it). The headers then hold declarations and templates
// only; the non-template definitions, kept in the `-inl.hpp` file beside each header, are compiled once, in
// the one file that defines ANVIL_IMPLEMENTATION before its first anvil include (or includes
// <anvil/src.hpp>). The single header works the same way.
//
// ANVIL_INLINE marks each definition in an -inl.hpp file: `inline` when the definitions are compiled in every
// includer, nothing when they are compiled once. ANVIL_DEFINITIONS says whether this file compiles them.
#pragma once

#if (defined(ANVIL_IMPLEMENTATION) || defined(ANVIL_IMPLEMENTATION_KERNELS)) && \
    !defined(ANVIL_SEPARATE_COMPILATION)
#define ANVIL_SEPARATE_COMPILATION
#endif

#if defined(ANVIL_SEPARATE_COMPILATION)
#define ANVIL_INLINE
#if defined(ANVIL_IMPLEMENTATION)
#define ANVIL_DEFINITIONS 1
#else
#define ANVIL_DEFINITIONS 0
#endif
#else
#define ANVIL_INLINE inline
#define ANVIL_DEFINITIONS 1
#endif

// The CPU kernels' entry points (gemm_rows.hpp, gemm_int8.hpp: each flattens every weight format's tiles for
// one instruction set) are marked ANVIL_KERNEL_INLINE and compiled where ANVIL_KERNEL_DEFINITIONS is 1. They
// are most of the library's compile time (Clang with the sanitizers: 170 s of 414), so separate compilation
// can take them apart and compile the library's two halves side by side: the implementation unit that defines
// ANVIL_KERNELS_ELSEWHERE leaves them out, and one that defines ANVIL_IMPLEMENTATION_KERNELS and includes
// those two headers compiles them alone (anvil::compiled is src/anvil.cpp and src/anvil_kernels.cpp). An
// implementation unit on its own, <anvil/src.hpp> as a project includes it, compiles them too.
#if defined(ANVIL_SEPARATE_COMPILATION)
#define ANVIL_KERNEL_INLINE
#if defined(ANVIL_IMPLEMENTATION_KERNELS) || \
    (defined(ANVIL_IMPLEMENTATION) && !defined(ANVIL_KERNELS_ELSEWHERE))
#define ANVIL_KERNEL_DEFINITIONS 1
#else
#define ANVIL_KERNEL_DEFINITIONS 0
#endif
#else
#define ANVIL_KERNEL_INLINE inline
#define ANVIL_KERNEL_DEFINITIONS 1
#endif
