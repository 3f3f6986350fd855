// Where a ggml block keeps its scales, for the tests that fill blocks with random bytes and then need finite
// scales: the GEMM's, the linear kernel's and the integer products'.
#pragma once

#include <anvil/anvil.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace anvil_test {

// The byte offsets of a block's f16 scales: d, and the min (or dmin) of the types that have one; Q6_K's d
// comes last. Q8_K has none: its d is an f32 at offset 0.
inline std::vector<std::size_t> ggml_f16_scale_offsets(anvil::ggml_type type) {
    switch (type) {
        case anvil::ggml_type::Q6_K:
            return {208};
        case anvil::ggml_type::Q4_1:
        case anvil::ggml_type::Q5_1:
        case anvil::ggml_type::Q4_K:
        case anvil::ggml_type::Q5_K:
            return {0, 2};
        case anvil::ggml_type::Q8_K:
            return {};
        default:
            return {0};
    }
}

// Sets the scales of the block at `block` to `scale()`, each call giving one value (f16, or Q8_K's f32).
template <class Scale>
void set_ggml_block_scales(anvil::ggml_type type, std::byte* block, Scale&& scale) {
    if (type == anvil::ggml_type::Q8_K) {
        const float d = scale();
        std::memcpy(block, &d, sizeof d);
        return;
    }
    for (const std::size_t offset : ggml_f16_scale_offsets(type)) {
        const std::uint16_t bits = anvil::float_to_half_bits(scale());
        std::memcpy(block + offset, &bits, sizeof bits);
    }
}

}  // namespace anvil_test
