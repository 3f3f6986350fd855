// expect-error: this op needs a floating-point tensor
// expect-error: op::exp, anvil::detail::floating_element, int
// Unary math (activations, exp, log, ...) needs a floating-point tensor.
#include <anvil/expr/elementwise.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto a = g.input<int>("a", anvil::shape<2, 3>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::exp(a);
#else
    const auto y = anvil::exp(anvil::cast<float>(a));
#endif
    return static_cast<int>(y.rank());
}
