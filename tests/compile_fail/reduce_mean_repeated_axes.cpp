// expect-error: and distinct
// expect-error: op::reduce_mean, anvil::detail::reduction_axes_valid, anvil::shape<2, 3, 4>,
// anvil::detail::axis_list<1, -2> Static reduction axes must be distinct (-2 is axis 1 of a rank-3 shape).
#include <anvil/expr/reduction.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto x = g.input<float>("x", anvil::shape<2, 3, 4>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::mean<1, -2>(x, anvil::keep_dims);
#else
    const auto y = anvil::mean<1, -1>(x, anvil::keep_dims);
#endif
    return static_cast<int>(y.rank());
}
