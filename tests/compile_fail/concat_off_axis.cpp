// expect-error: equal extents off the axis
// expect-error: op::concat, anvil::detail::concat_operands_fit, anvil::detail::axis_list<1>, anvil::shape<2,
// 3, 4>, anvil::shape<2, 5, 6> concat's operands agree everywhere but on the axis.
#include <anvil/expr/data_movement.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto x = g.input<float>("x", anvil::shape<2, 3, 4>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::concat<1>(x, g.input<float>("b", anvil::shape<2, 5, 6>{}));
#else
    const auto y = anvil::concat<1>(x, g.input<float>("b", anvil::shape<2, 5, 4>{}));
#endif
    return static_cast<int>(y.rank());
}
