// expect-error: a shape with a dyn extent has no values to convert to dims
// expect-error: anvil::shape<2, -1>
// A shape with a dyn extent has no values to give a dims.
#include <anvil/core/shape.hpp>

int main() {
#ifdef ANVIL_COMPILE_FAIL
    const anvil::dims d = anvil::shape<2, anvil::dyn>{};
#else
    const anvil::dims d = anvil::shape<2, 3>{};
#endif
    return static_cast<int>(d.rank()) - 2;
}
