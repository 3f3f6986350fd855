// expect-error: do not broadcast
// expect-error: op::mul, anvil::detail::broadcastable, anvil::shape<-1, 3>, anvil::shape<4, 5>
// A dyn extent defers its own check to run time, but the static extents beside it are still checked now.
#include <anvil/core/shape.hpp>

enum class op { mul };

int main() {
    using anvil::dyn;
#ifdef ANVIL_COMPILE_FAIL
    anvil::detail::require_broadcastable<op::mul, anvil::shape<dyn, 3>, anvil::shape<4, 5>>();
#else
    anvil::detail::require_broadcastable<op::mul, anvil::shape<dyn, 3>, anvil::shape<4, 3>>();
#endif
}
