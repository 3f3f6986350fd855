// expect-error: the operands' element types differ
// expect-error: op::where, anvil::detail::same_element_type, float, anvil::half
// where's two branches must share an element type.
#include <anvil/expr/elementwise.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto a = g.input<float>("a", anvil::shape<2, 3>{});
    const auto c = g.input<bool>("c", anvil::shape<2, 3>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::where(c, a, g.input<anvil::half>("b", anvil::shape<2, 3>{}));
#else
    const auto y = anvil::where(c, a, g.input<float>("b", anvil::shape<2, 3>{}));
#endif
    return static_cast<int>(y.rank());
}
