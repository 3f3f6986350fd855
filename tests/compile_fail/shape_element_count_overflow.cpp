// expect-error: the element count does not fit in 64 bits
// expect-error: anvil::shape<4294967296, 4294967296>
// 2^32 * 2^32 = 2^64 elements, one past what 64 bits count.
#include <anvil/core/shape.hpp>

int main() {
#ifdef ANVIL_COMPILE_FAIL
    return static_cast<int>(anvil::shape<4294967296, 4294967296>::element_count() % 2);
#else
    return static_cast<int>(anvil::shape<4294967296, 4294967295>::element_count() % 2);
#endif
}
