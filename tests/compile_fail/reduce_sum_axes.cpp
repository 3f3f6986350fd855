// expect-error: the axes to reduce must be in range
// expect-error: op::reduce_sum, anvil::detail::reduction_axes_valid, anvil::shape<2, 3, 4>,
// anvil::detail::axis_list<3> Static reduction axes must be in range for the rank.
#include <anvil/expr/reduction.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto x = g.input<float>("x", anvil::shape<2, 3, 4>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::sum<3>(x);
#else
    const auto y = anvil::sum<2>(x);
#endif
    return static_cast<int>(y.rank());
}
