// expect-error: both axes must be in range
// expect-error: op::permute, anvil::detail::axes_in_range, anvil::shape<2, 3, 4>, anvil::detail::axis_list<0,
// 3> transpose's static axes must be in range (it lowers to a permute).
#include <anvil/expr/data_movement.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto x = g.input<float>("x", anvil::shape<2, 3, 4>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::transpose<0, 3>(x);
#else
    const auto y = anvil::transpose<0, -1>(x);
#endif
    return static_cast<int>(y.rank());
}
