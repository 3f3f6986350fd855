// expect-error: the additive mask must broadcast to the shape it is added to
// expect-error: op::attention, anvil::detail::broadcasts_to, anvil::shape<5, 6>, anvil::shape<1, 8, 5, 7>
// attention's mask broadcasts to the scores [B, H, Sq, Sk].
#include <anvil/expr/transformer.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto q = g.input<float>("q", anvil::shape<1, 8, 5, 16>{});
    const auto v = g.input<float>("v", anvil::shape<1, 2, 7, 32>{});
    const auto k = g.input<float>("k", anvil::shape<1, 2, 7, 16>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::attention(q, k, v, g.input<float>("m", anvil::shape<5, 6>{}));
#else
    const auto y = anvil::attention(q, k, v, g.input<float>("m", anvil::shape<5, 7>{}), {.causal = true});
#endif
    return static_cast<int>(y.rank());
}
