// The implementation unit of anvil::compiled (separate compilation, anvil/compilation.hpp): every
// non-template definition of the library, compiled once.
#include <anvil/src.hpp>
