// expect-error: gather needs a table of rank >= 1
// expect-error: op::gather, anvil::detail::gather_fits, anvil::shape<>, anvil::shape<3>
// A scalar has no rows to gather.
#include <anvil/expr/data_movement.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto ids = g.input<int>("ids", anvil::shape<3>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::gather(g.input<float>("t", anvil::shape<>{}), ids);
#else
    const auto y = anvil::gather(g.input<float>("t", anvil::shape<5>{}), ids);
#endif
    return static_cast<int>(y.rank());
}
