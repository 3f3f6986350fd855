// expect-error: the rank exceeds anvil::max_rank (8)
// expect-error: anvil::shape<1, 2, 3, 4, 5, 6, 7, 8, 9>
// A static shape of rank 9: dims could not hold it.
#include <anvil/core/shape.hpp>

int main() {
#ifdef ANVIL_COMPILE_FAIL
    return static_cast<int>(anvil::shape<1, 2, 3, 4, 5, 6, 7, 8, 9>::rank);
#else
    return static_cast<int>(anvil::shape<1, 2, 3, 4, 5, 6, 7, 8>::rank) - 8;
#endif
}
