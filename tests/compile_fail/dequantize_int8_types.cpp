// expect-error: the values must be std::int8_t and the scale floating point
// expect-error: op::dequantize_int8, anvil::detail::int8_values_with_floating_scale, int, float
// dequantize_int8 reads int8 values.
#include <anvil/expr/dequantize.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto scale = g.input<float>("s", anvil::shape<4>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::dequantize_int8(g.input<int>("q", anvil::shape<4, 3>{}), scale);
#else
    const auto y = anvil::dequantize_int8(g.input<std::int8_t>("q", anvil::shape<4, 3>{}), scale);
#endif
    return static_cast<int>(y.rank());
}
