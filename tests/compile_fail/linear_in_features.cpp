// expect-error: expected x [..., in] and weight [out, in]
// expect-error: op::linear, anvil::detail::in_features_match, anvil::shape<2, 3>, anvil::shape<7, 4>
// linear's weight is [out, in] (nn.Linear's layout): in must be x's last extent.
#include <anvil/expr/linear_algebra.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto a = g.input<float>("a", anvil::shape<2, 3>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::linear(a, g.input<float>("w", anvil::shape<7, 4>{}));
#else
    const auto y = anvil::linear(a, g.input<float>("w", anvil::shape<7, 3>{}));
#endif
    return static_cast<int>(y.rank());
}
