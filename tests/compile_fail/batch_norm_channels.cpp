// expect-error: one element per channel
// expect-error: op::batch_norm, anvil::detail::channel_parameter_fits, anvil::shape<2, 3, 4>, anvil::shape<5>
// batch_norm's statistics have one element per channel (axis 1).
#include <anvil/expr/normalization.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto x = g.input<float>("x", anvil::shape<2, 3, 4>{});
    const auto mean = g.input<float>("mean", anvil::shape<3>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::batch_norm(x, mean, g.input<float>("var", anvil::shape<5>{}));
#else
    const auto y = anvil::batch_norm(x, mean, g.input<float>("var", anvil::shape<3>{}));
#endif
    return static_cast<int>(y.rank());
}
