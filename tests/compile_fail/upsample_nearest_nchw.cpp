// expect-error: this op takes an image batch [N, C, H, W]
// expect-error: op::upsample_nearest, anvil::detail::nchw_input, anvil::shape<4, 8, 8>
// Upsampling takes NCHW images.
#include <anvil/expr/pooling.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::upsample_nearest(g.input<float>("x", anvil::shape<4, 8, 8>{}), {16, 16});
#else
    const auto y = anvil::upsample_nearest(g.input<float>("x", anvil::shape<1, 4, 8, 8>{}), {16, 16});
#endif
    return static_cast<int>(y.rank());
}
