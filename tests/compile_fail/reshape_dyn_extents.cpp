// expect-error: at most one extent of the target may be dyn
// expect-error: op::reshape, anvil::detail::at_most_one_dyn_extent, anvil::shape<-1, -1>
// Only one extent of a reshape target can be inferred.
#include <anvil/expr/data_movement.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto x = g.input<float>("x", anvil::shape<2, 3, 4>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::reshape<anvil::shape<anvil::dyn, anvil::dyn>>(x);
#else
    const auto y = anvil::reshape<anvil::shape<anvil::dyn, 4>>(x);
#endif
    return static_cast<int>(y.rank());
}
