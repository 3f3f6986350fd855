// expect-error: the pooling window does not fit
// expect-error: op::avg_pool2d, anvil::detail::pool_with<
// expect-error: window_fits, anvil::shape<1, 4, 8, 8>
// Padding may be at most half the kernel (PyTorch's rule).
#include <anvil/expr/pooling.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto x = g.input<float>("x", anvil::shape<1, 4, 8, 8>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::avg_pool2d<anvil::pool_options{.kernel = 2, .padding = 2}>(x);
#else
    const auto y = anvil::avg_pool2d<anvil::pool_options{.kernel = 2, .padding = 1}>(x);
#endif
    return static_cast<int>(y.rank());
}
