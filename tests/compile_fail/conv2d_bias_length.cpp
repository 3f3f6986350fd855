// expect-error: one element per output feature
// expect-error: op::conv2d, anvil::detail::bias_matches_out_features, anvil::shape<6, 4, 3, 3>,
// anvil::shape<4> conv2d's bias has one element per output channel.
#include <anvil/expr/linear_algebra.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto x = g.input<float>("x", anvil::shape<1, 4, 8, 8>{});
    const auto w = g.input<float>("w", anvil::shape<6, 4, 3, 3>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::conv2d(x, w, g.input<float>("b", anvil::shape<4>{}));
#else
    const auto y = anvil::conv2d(x, w, g.input<float>("b", anvil::shape<6>{}));
#endif
    return static_cast<int>(y.rank());
}
