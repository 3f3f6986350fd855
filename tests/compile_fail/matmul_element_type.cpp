// expect-error: the operands' element types differ
// expect-error: op::matmul, anvil::detail::same_element_type, float, anvil::half
// matmul's operands must share an element type.
#include <anvil/expr/linear_algebra.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto a = g.input<float>("a", anvil::shape<2, 3>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::matmul(a, g.input<anvil::half>("b", anvil::shape<3, 5>{}));
#else
    const auto y = anvil::matmul(a, g.input<float>("b", anvil::shape<3, 5>{}));
#endif
    return static_cast<int>(y.rank());
}
