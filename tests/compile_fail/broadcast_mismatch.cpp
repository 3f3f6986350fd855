// expect-error: do not broadcast
// expect-error: op::add, anvil::detail::broadcastable, anvil::shape<1, 64, 1, 32>, anvil::shape<1, 32, 1, 64>
// An elementwise op on static shapes that do not broadcast: the diagnostic names the op and both shapes.
#include <anvil/core/shape.hpp>

enum class op { add };

template <class A, class B>
constexpr auto add(A, B) {
    return anvil::detail::checked_broadcast_t<op::add, A, B>{};
}

int main() {
#ifdef ANVIL_COMPILE_FAIL
    const auto y = add(anvil::shape<1, 64, 1, 32>{}, anvil::shape<1, 32, 1, 64>{});
#else
    const auto y = add(anvil::shape<1, 64, 1, 32>{}, anvil::shape<64, 64, 1, 1>{});
#endif
    return static_cast<int>(y.rank) - 4;
}
