// expect-error: expected x [N, C, H, W] and weight [out, C / groups, kh, kw]
// expect-error: op::conv2d, anvil::detail::conv2d_operands_fit, anvil::shape<1, 4, 8, 8>, anvil::shape<6, 3,
// 3, 3> With options at run time, conv2d still checks that x's channels divide by the weight's.
#include <anvil/expr/linear_algebra.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto x = g.input<float>("x", anvil::shape<1, 4, 8, 8>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::conv2d(x, g.input<float>("w", anvil::shape<6, 3, 3, 3>{}), {.padding = 1});
#else
    const auto y =
        anvil::conv2d(x, g.input<float>("w", anvil::shape<6, 2, 3, 3>{}), {.padding = 1, .groups = 2});
#endif
    return static_cast<int>(y.rank());
}
