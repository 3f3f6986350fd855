// expect-error: Shape must be anvil::shape<...>
// expect-error: is_tensor_shape_v<int>
// A tensor's Shape is anvil::shape<...> or anvil::any_shape, nothing else.
#include <anvil/expr/tensor.hpp>

#include <cstdint>

int main() {
#ifdef ANVIL_COMPILE_FAIL
    const anvil::tensor<float, int> y;
#else
    const anvil::tensor<float, anvil::any_shape> y;
#endif
    return y.valid() ? 1 : 0;
}
