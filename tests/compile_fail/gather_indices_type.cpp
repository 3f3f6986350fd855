// expect-error: indices must have an integer element type
// expect-error: op::gather, anvil::detail::integer_indices, float
// gather (and embedding) takes integer indices.
#include <anvil/expr/data_movement.hpp>

#include <cstdint>

int main() {
    anvil::graph g;
    const auto table = g.input<float>("table", anvil::shape<10, 4>{});
#ifdef ANVIL_COMPILE_FAIL
    const auto y = anvil::embedding(table, g.input<float>("ids", anvil::shape<3>{}));
#else
    const auto y = anvil::embedding(table, g.input<std::int64_t>("ids", anvil::shape<3>{}));
#endif
    return static_cast<int>(y.rank());
}
