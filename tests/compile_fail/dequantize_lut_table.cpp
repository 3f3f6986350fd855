// expect-error: the table must be [L] or [C, L]
// expect-error: op::dequantize_lut, anvil::detail::lookup_table_fits, anvil::shape<4, 3>, anvil::shape<5, 16>
// A per-channel table has one row per slice along the indices' axis 0.
#include <anvil/expr/dequantize.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto indices = g.input<std::uint8_t>("i", anvil::shape<4, 3>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::dequantize_lut(indices, g.input<float>("lut", anvil::shape<5, 16>{}));
#else
    const auto y = anvil::dequantize_lut(indices, g.input<float>("lut", anvil::shape<4, 16>{}));
#endif
    return static_cast<int>(y.rank());
}
