// anvil: the library's version, also exported to CMake and Meson.
#pragma once

#define ANVIL_VERSION_MAJOR 0
#define ANVIL_VERSION_MINOR 1
#define ANVIL_VERSION_PATCH 0

namespace anvil {
inline constexpr const char* version_string = "0.1.0";
}  // namespace anvil
