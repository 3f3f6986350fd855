// expect-error: both operands need rank >= 2
// expect-error: op::matmul, anvil::detail::matmul_operands_are_matrices, anvil::shape<3>, anvil::shape<3, 4>
// matmul takes matrices (or batches of them).
#include <anvil/expr/linear_algebra.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto b = g.input<float>("b", anvil::shape<3, 4>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::matmul(g.input<float>("a", anvil::shape<3>{}), b);
#else
    const auto y = anvil::matmul(g.input<float>("a", anvil::shape<1, 3>{}), b);
#endif
    return static_cast<int>(y.rank());
}
