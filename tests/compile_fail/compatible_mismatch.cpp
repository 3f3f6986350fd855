// expect-error: these static shapes differ
// expect-error: op::where, anvil::detail::compatible, anvil::shape<2, -1, 8>, anvil::shape<2, 5, 9>
// Shapes that must be equal (up to dyn extents): the diagnostic names the op and both shapes.
#include <anvil/core/shape.hpp>

enum class op { where };

int main() {
    using anvil::dyn;
#ifdef ANVIL_COMPILE_FAIL
    anvil::detail::require_compatible<op::where, anvil::shape<2, dyn, 8>, anvil::shape<2, 5, 9>>();
#else
    anvil::detail::require_compatible<op::where, anvil::shape<2, dyn, 8>, anvil::shape<2, 5, 8>>();
#endif
}
