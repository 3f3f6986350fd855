// expect-error: this op takes an image batch [N, C, H, W]
// expect-error: op::reduce_mean, anvil::detail::nchw_input, anvil::shape<8, 8>
// Global pooling (a reduce_mean over axes 2 and 3) takes NCHW images.
#include <anvil/expr/pooling.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::global_avg_pool2d(g.input<float>("x", anvil::shape<8, 8>{}));
#else
    const auto y = anvil::global_avg_pool2d(g.input<float>("x", anvil::shape<1, 1, 8, 8>{}));
#endif
    return static_cast<int>(y.rank());
}
