// expect-error: the inner extents differ
// expect-error: op::matmul, anvil::detail::matmul_transposed<false, true>::inner_extents_match,
// anvil::shape<2, 3>, anvil::shape<3, 5> With transpose_b as a template argument, b is [N, K]: the check
// follows the options.
#include <anvil/expr/linear_algebra.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto a = g.input<float>("a", anvil::shape<2, 3>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::matmul<anvil::matmul_options{.transpose_b = true}>(
        a, g.input<float>("b", anvil::shape<3, 5>{}));
#else
    const auto y = anvil::matmul<anvil::matmul_options{.transpose_b = true}>(
        a, g.input<float>("b", anvil::shape<5, 3>{}));
#endif
    return static_cast<int>(y.rank());
}
