// expect-error: the order must name every axis of the shape once
// expect-error: op::permute, anvil::detail::is_permutation_of_axes, anvil::shape<2, 3, 4>,
// anvil::detail::axis_list<0, 1, 1> A static permute order names every axis once.
#include <anvil/expr/data_movement.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto x = g.input<float>("x", anvil::shape<2, 3, 4>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::permute<0, 1, 1>(x);
#else
    const auto y = anvil::permute<0, 2, 1>(x);
#endif
    return static_cast<int>(y.rank());
}
