// Compiled with -Wshadow -Wconversion -Wsign-conversion -Werror: the headers must stay quiet for users who
// enable them. Inline functions are checked by parsing; templates need the instantiations below.
#include <anvil/anvil.hpp>

namespace {
[[maybe_unused]] void instantiate_templates() {}
}  // namespace
