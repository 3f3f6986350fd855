// expect-error: one element per channel
// expect-error: op::group_norm, anvil::detail::channel_parameter_fits, anvil::shape<2, 3, 4>, anvil::shape<4>
// group_norm's weight and bias have one element per channel (axis 1).
#include <anvil/expr/normalization.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto x = g.input<float>("x", anvil::shape<2, 3, 4>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto w = g.input<float>("w", anvil::shape<4>{});
    const auto y = anvil::group_norm(x, 3, w, w);
#else
    const auto w = g.input<float>("w", anvil::shape<3>{});
    const auto y = anvil::group_norm(x, 3, w, w);
#endif
    return static_cast<int>(y.rank());
}
