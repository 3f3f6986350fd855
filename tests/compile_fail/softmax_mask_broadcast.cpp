// expect-error: the additive mask must broadcast to the shape it is added to
// expect-error: op::softmax, anvil::detail::broadcasts_to, anvil::shape<2, 1, 4>, anvil::shape<3, 4>
// softmax's mask must broadcast to x without growing it.
#include <anvil/expr/normalization.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto x = g.input<float>("x", anvil::shape<3, 4>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::softmax(x, -1, g.input<float>("m", anvil::shape<2, 1, 4>{}));
#else
    const auto y = anvil::softmax(x, -1, g.input<float>("m", anvil::shape<1, 4>{}));
#endif
    return static_cast<int>(y.rank());
}
