// expect-error: with out divisible by groups
// expect-error: op::conv2d, anvil::detail::conv2d_groups<2>::operands_fit, anvil::shape<1, 4, 8, 8>,
// anvil::shape<6, 4, 3, 3> With the options as a template argument, the weight must be [out, C / groups, kh,
// kw].
#include <anvil/expr/linear_algebra.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto x = g.input<float>("x", anvil::shape<1, 4, 8, 8>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y =
        anvil::conv2d<anvil::conv2d_options{.groups = 2}>(x, g.input<float>("w", anvil::shape<6, 4, 3, 3>{}));
#else
    const auto y =
        anvil::conv2d<anvil::conv2d_options{.groups = 2}>(x, g.input<float>("w", anvil::shape<6, 2, 3, 3>{}));
#endif
    return static_cast<int>(y.rank());
}
