// expect-error: element_count() needs every extent at compile time, and this shape has a dyn extent
// expect-error: anvil::shape<2, -1>
// A shape with a dyn extent has no compile-time element count.
#include <anvil/core/shape.hpp>

int main() {
#ifdef ANVIL_COMPILE_FAIL
    return static_cast<int>(anvil::shape<2, anvil::dyn>::element_count());
#else
    return static_cast<int>(anvil::shape<2, 3>::element_count()) - 6;
#endif
}
