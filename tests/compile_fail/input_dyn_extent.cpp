// expect-error: a static shape with a dyn extent needs the runtime extents
// expect-error: op::input, anvil::detail::has_no_dyn_extent, anvil::shape<-1, 3>
// graph::input with a static shape needs every extent; a dyn one comes with runtime dims instead.
#include <anvil/expr/tensor.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
#ifdef ANVIL_COMPILE_FAIL
    const auto y = g.input<float>("x", anvil::shape<anvil::dyn, 3>{});
#else
    const auto y = g.input<float, anvil::shape<anvil::dyn, 3> >("x", anvil::dims{5, 3});
#endif
    return static_cast<int>(y.rank());
}
