// expect-error: do not broadcast
// expect-error: op::add, anvil::detail::broadcastable, anvil::shape<2, 3>, anvil::shape<4>
// operator+ on static shapes that do not broadcast names the op and both shapes.
#include <anvil/expr/elementwise.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto a = g.input<float>("a", anvil::shape<2, 3>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = a + g.input<float>("b", anvil::shape<4>{});
#else
    const auto y = a + g.input<float>("b", anvil::shape<3>{});
#endif
    return static_cast<int>(y.rank());
}
