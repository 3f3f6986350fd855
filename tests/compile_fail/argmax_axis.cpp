// expect-error: the axes to reduce must be in range
// expect-error: op::argmax, anvil::detail::reduction_axes_valid, anvil::shape<2, 3, 4>,
// anvil::detail::axis_list<-4> argmax's static axis must be in range.
#include <anvil/expr/reduction.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto x = g.input<float>("x", anvil::shape<2, 3, 4>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::argmax<-4>(x);
#else
    const auto y = anvil::argmax<-3>(x);
#endif
    return static_cast<int>(y.rank());
}
