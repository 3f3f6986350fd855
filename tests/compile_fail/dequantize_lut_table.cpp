// expect-error: the table must be [L] or [G, L] with G dividing the indices' first extent
// expect-error: op::dequantize_lut, anvil::detail::lookup_table_fits, anvil::shape<4, 3>, anvil::shape<5, 16>
// A grouped table has one row per group of slices along the indices' axis 0: 5 groups do not divide 4.
#include <anvil/expr/dequantize.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto indices = g.input<std::uint8_t>("i", anvil::shape<4, 3>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::dequantize_lut(indices, g.input<float>("lut", anvil::shape<5, 16>{}));
#else
    const auto y = anvil::dequantize_lut(indices, g.input<float>("lut", anvil::shape<2, 16>{}));
#endif
    return static_cast<int>(y.rank());
}
