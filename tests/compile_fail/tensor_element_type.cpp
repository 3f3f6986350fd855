// expect-error: T must be an element type with a dtype
// expect-error: long double
// A tensor's element type must have a dtype: long double has none.
#include <anvil/expr/tensor.hpp>

#include <cstdint>

int main() {
#ifdef ANVIL_COMPILE_FAIL
    const anvil::tensor<long double> y;
#else
    const anvil::tensor<double> y;
#endif
    return y.valid() ? 1 : 0;
}
