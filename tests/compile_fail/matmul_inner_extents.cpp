// expect-error: the inner extents differ
// expect-error: op::matmul, anvil::detail::matmul_transposed<false, false>::inner_extents_match,
// anvil::shape<2, 3>, anvil::shape<4, 5> matmul's inner extents (a's columns, b's rows) must agree.
#include <anvil/expr/linear_algebra.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto a = g.input<float>("a", anvil::shape<2, 3>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::matmul(a, g.input<float>("b", anvil::shape<4, 5>{}));
#else
    const auto y = anvil::matmul(a, g.input<float>("b", anvil::shape<3, 5>{}));
#endif
    return static_cast<int>(y.rank());
}
