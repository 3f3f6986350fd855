// expect-error: one element per output feature
// expect-error: op::linear, anvil::detail::bias_matches_out_features, anvil::shape<7, 3>, anvil::shape<8>
// linear's bias has one element per output feature.
#include <anvil/expr/linear_algebra.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto a = g.input<float>("a", anvil::shape<2, 3>{});
    const auto w = g.input<float>("w", anvil::shape<7, 3>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::linear(a, w, g.input<float>("b", anvil::shape<8>{}));
#else
    const auto y = anvil::linear(a, w, g.input<float>("b", anvil::shape<7>{}));
#endif
    return static_cast<int>(y.rank());
}
