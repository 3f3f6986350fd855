// expect-error: the operands' element types differ
// expect-error: op::attention, anvil::detail::same_element_type, float, anvil::half
// attention's q, k and v share an element type.
#include <anvil/expr/transformer.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto q = g.input<float>("q", anvil::shape<1, 8, 5, 16>{});
    const auto v = g.input<float>("v", anvil::shape<1, 2, 7, 32>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::attention(q, g.input<anvil::half>("k", anvil::shape<1, 2, 7, 16>{}), v);
#else
    const auto y = anvil::attention(q, g.input<float>("k", anvil::shape<1, 2, 7, 16>{}), v);
#endif
    return static_cast<int>(y.rank());
}
