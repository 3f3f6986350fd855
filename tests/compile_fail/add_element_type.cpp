// expect-error: the operands' element types differ
// expect-error: op::add, anvil::detail::same_element_type, float, anvil::half
// Elementwise operands must share an element type (cast one first).
#include <anvil/expr/elementwise.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto a = g.input<float>("a", anvil::shape<2, 3>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = a + g.input<anvil::half>("b", anvil::shape<2, 3>{});
#else
    const auto y = a + anvil::cast<float>(g.input<anvil::half>("b", anvil::shape<2, 3>{}));
#endif
    return static_cast<int>(y.rank());
}
