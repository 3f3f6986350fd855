// expect-error: the (dilated) kernel does not fit the padded image
// expect-error: window_fits, anvil::shape<1, 4, 8, 8>, anvil::shape<6, 4, 5, 5>
// expect-error: op::conv2d, anvil::detail::conv2d_with<
// A dilated 5x5 kernel (span 9) does not fit an unpadded 8x8 image.
#include <anvil/expr/linear_algebra.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto x = g.input<float>("x", anvil::shape<1, 4, 8, 8>{});
    const auto w = g.input<float>("w", anvil::shape<6, 4, 5, 5>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::conv2d<anvil::conv2d_options{.dilation = 2}>(x, w);
#else
    const auto y = anvil::conv2d<anvil::conv2d_options{.padding = 1, .dilation = 2}>(x, w);
#endif
    return static_cast<int>(y.rank());
}
