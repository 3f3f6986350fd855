// expect-error: the indices must be std::uint8_t and the table floating point
// expect-error: op::dequantize_lut, anvil::detail::u8_indices_with_floating_table, unsigned char, int
// dequantize_lut's table holds floating-point values.
#include <anvil/expr/dequantize.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto indices = g.input<std::uint8_t>("i", anvil::shape<4, 3>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::dequantize_lut(indices, g.input<int>("lut", anvil::shape<16>{}));
#else
    const auto y = anvil::dequantize_lut(indices, g.input<float>("lut", anvil::shape<16>{}));
#endif
    return static_cast<int>(y.rank());
}
