// expect-error: a scalar operand becomes a constant of the tensor's element type
// expect-error: op::mul, anvil::detail::scalar_operand_fits, int, double
// A fractional scalar with an integer tensor would be truncated: refused at compile time.
#include <anvil/expr/elementwise.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto a = g.input<int>("a", anvil::shape<2, 3>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = a * 0.5;
#else
    const auto y = a * 2;
#endif
    return static_cast<int>(y.rank());
}
