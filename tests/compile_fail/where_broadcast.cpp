// expect-error: do not broadcast
// expect-error: op::where, anvil::detail::broadcastable, anvil::shape<4, 1>, anvil::shape<2, 3>
// where's condition must broadcast with its branches.
#include <anvil/expr/elementwise.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto a = g.input<float>("a", anvil::shape<2, 3>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::where(g.input<bool>("c", anvil::shape<4, 1>{}), a, a);
#else
    const auto y = anvil::where(g.input<bool>("c", anvil::shape<2, 1>{}), a, a);
#endif
    return static_cast<int>(y.rank());
}
