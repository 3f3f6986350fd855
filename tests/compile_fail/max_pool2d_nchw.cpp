// expect-error: this op takes an image batch [N, C, H, W]
// expect-error: op::max_pool2d, anvil::detail::nchw_input, anvil::shape<4, 8, 8>
// Pooling takes NCHW images.
#include <anvil/expr/pooling.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::max_pool2d(g.input<float>("x", anvil::shape<4, 8, 8>{}), {.kernel = 2});
#else
    const auto y = anvil::max_pool2d(g.input<float>("x", anvil::shape<1, 4, 8, 8>{}), {.kernel = 2});
#endif
    return static_cast<int>(y.rank());
}
