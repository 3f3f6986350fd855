// anvil: the implementation unit of separate compilation. Include this in exactly one .cpp file of a project
// whose other files define ANVIL_SEPARATE_COMPILATION (anvil::compiled is such a file, built as a library).
#pragma once

#ifndef ANVIL_IMPLEMENTATION
#define ANVIL_IMPLEMENTATION
#endif
#include "anvil/compilation.hpp"

#if !ANVIL_DEFINITIONS
#error \
    "anvil/src.hpp: an anvil header was included before it without ANVIL_IMPLEMENTATION; include <anvil/src.hpp> first"
#endif

#include "anvil/anvil.hpp"
