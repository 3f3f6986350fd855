// expect-error: the element counts differ
// expect-error: op::reshape, anvil::detail::reshape_element_count_matches, anvil::shape<2, 3, 4>,
// anvil::shape<5, 5> A static reshape keeps the element count.
#include <anvil/expr/data_movement.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto x = g.input<float>("x", anvil::shape<2, 3, 4>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::reshape<anvil::shape<5, 5>>(x);
#else
    const auto y = anvil::reshape<anvil::shape<6, 4>>(x);
#endif
    return static_cast<int>(y.rank());
}
