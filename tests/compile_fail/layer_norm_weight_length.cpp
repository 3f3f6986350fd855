// expect-error: must be a vector as long as that axis
// expect-error: op::layer_norm, anvil::detail::last_axis_parameter_fits, anvil::shape<2, 3, 4>,
// anvil::shape<3> layer_norm's weight and bias are as long as the last axis.
#include <anvil/expr/normalization.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto x = g.input<float>("x", anvil::shape<2, 3, 4>{});
    const auto b = g.input<float>("b", anvil::shape<4>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::layer_norm(x, g.input<float>("w", anvil::shape<3>{}), b);
#else
    const auto y = anvil::layer_norm(x, g.input<float>("w", anvil::shape<4>{}), b);
#endif
    return static_cast<int>(y.rank());
}
