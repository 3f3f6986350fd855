// expect-error: expected q [B, H, Sq, D], k [B, Hkv, Sk, D], v [B, Hkv, Sk, Dv]
// expect-error: op::attention, anvil::detail::attention_operands_fit, anvil::shape<1, 8, 5, 16>,
// anvil::shape<1, 2, 7, 8>, anvil::shape<1, 2, 7, 32> attention's q and k share the head size D.
#include <anvil/expr/transformer.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto q = g.input<float>("q", anvil::shape<1, 8, 5, 16>{});
    const auto v = g.input<float>("v", anvil::shape<1, 2, 7, 32>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::attention(q, g.input<float>("k", anvil::shape<1, 2, 7, 8>{}), v);
#else
    const auto y = anvil::attention(q, g.input<float>("k", anvil::shape<1, 2, 7, 16>{}), v);
#endif
    return static_cast<int>(y.rank());
}
