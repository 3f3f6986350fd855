// expect-error: this op needs a floating-point tensor
// expect-error: op::softmax, anvil::detail::floating_element, int
// softmax needs a floating-point tensor.
#include <anvil/expr/normalization.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto x = g.input<int>("x", anvil::shape<3, 4>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::softmax(x);
#else
    const auto y = anvil::softmax(anvil::cast<float>(x));
#endif
    return static_cast<int>(y.rank());
}
