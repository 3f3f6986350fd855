// expect-error: must be a vector as long as that axis
// expect-error: op::rms_norm, anvil::detail::last_axis_parameter_fits, anvil::shape<2, 3, 4>, anvil::shape<2,
// 4> rms_norm's weight is a vector as long as the last axis.
#include <anvil/expr/normalization.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto x = g.input<float>("x", anvil::shape<2, 3, 4>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::rms_norm(x, g.input<float>("w", anvil::shape<2, 4>{}));
#else
    const auto y = anvil::rms_norm(x, g.input<float>("w", anvil::shape<4>{}));
#endif
    return static_cast<int>(y.rank());
}
