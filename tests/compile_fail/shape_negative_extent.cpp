// expect-error: every extent must be >= 0, or anvil::dyn (-1) for one known only at run time
// expect-error: anvil::shape<2, -3>
// A static extent below zero other than dyn.
#include <anvil/core/shape.hpp>

int main() {
#ifdef ANVIL_COMPILE_FAIL
    return static_cast<int>(anvil::shape<2, -3>::rank);
#else
    return static_cast<int>(anvil::shape<2, anvil::dyn>::rank) - 2;
#endif
}
