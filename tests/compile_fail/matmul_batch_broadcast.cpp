// expect-error: do not broadcast
// expect-error: op::matmul, anvil::detail::broadcastable, anvil::shape<2>, anvil::shape<5>
// matmul's batch axes must broadcast; the diagnostic shows the batch shapes.
#include <anvil/expr/linear_algebra.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto a = g.input<float>("a", anvil::shape<2, 3, 4>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::matmul(a, g.input<float>("b", anvil::shape<5, 4, 6>{}));
#else
    const auto y = anvil::matmul(a, g.input<float>("b", anvil::shape<1, 4, 6>{}));
#endif
    return static_cast<int>(y.rank());
}
