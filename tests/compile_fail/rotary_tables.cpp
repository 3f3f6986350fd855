// expect-error: cos, sin both [S, R / 2] with R <= D
// expect-error: op::rotary, anvil::detail::rotary_tables_fit, anvil::shape<1, 8, 5, 16>, anvil::shape<5, 9>,
// anvil::shape<5, 9> rotary's tables rotate at most the D features x has (2 * 9 > 16).
#include <anvil/expr/transformer.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto x = g.input<float>("x", anvil::shape<1, 8, 5, 16>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto t = g.input<float>("t", anvil::shape<5, 9>{});
    const auto y = anvil::rotary(x, t, t);
#else
    const auto t = g.input<float>("t", anvil::shape<5, 8>{});
    const auto y = anvil::rotary(x, t, t);
#endif
    return static_cast<int>(y.rank());
}
