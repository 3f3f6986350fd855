// expect-error: the operands' element types differ
// expect-error: op::concat, anvil::detail::same_element_type, float, anvil::half
// concat's operands share an element type.
#include <anvil/expr/data_movement.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto x = g.input<float>("x", anvil::shape<2, 3, 4>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::concat<0>(x, g.input<anvil::half>("b", anvil::shape<2, 3, 4>{}));
#else
    const auto y = anvil::concat<0>(x, g.input<float>("b", anvil::shape<2, 3, 4>{}));
#endif
    return static_cast<int>(y.rank());
}
