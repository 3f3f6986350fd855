// anvil: ggml's tensor types — the numbering llama.cpp's files use, how each stores its values in blocks, and
// a naive dequantiser for each (written from ggml's block layouts in ggml-common.h and its dequantize_row_*
// loops). GGUF files store their tensors in these types; the graph keeps block-quantised weights as they are
// (op::dequantize_ggml) and the CPU GEMM reads them in place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "anvil/compilation.hpp"

namespace anvil {

// The ggml tensor types, numbered as ggml numbers them (ggml.h `enum ggml_type`).
// (Spelled as ggml spells them, GGML_TYPE_Q4_K as Q4_K.)
enum class ggml_type : std::uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    IQ4_NL = 20,
    BF16 = 30,
};

// How a type stores its values: `block` consecutive values (along ne[0]) in `bytes` bytes.
struct ggml_type_layout {
    std::string_view name;  // "Q4_K"
    std::uint32_t block = 1;
    std::uint32_t bytes = 4;
    bool dequantizes = false;  // anvil has a dequantiser for it (dequantize_ggml)
};

// The layout of a ggml type number, or nullopt for a number anvil does not know.
[[nodiscard]] std::optional<ggml_type_layout> ggml_layout(std::uint32_t type);

// The type's name ("Q4_K"), or "ggml type N" for a number anvil does not know.
[[nodiscard]] std::string ggml_type_name(ggml_type type);

// The values of `count` elements of `type` from `bytes` (a whole number of blocks): the naive reference
// dequantisers, each written from ggml's block layout (ggml-common.h) and its dequantize_row_* loops.
// Throws unsupported_error for a type with no dequantiser, format_error when the sizes do not fit.
void dequantize_ggml(ggml_type type, std::span<const std::byte> bytes, std::span<float> out);

namespace detail {

// ggml's get_scale_min_k4: the 6-bit scale and min of sub-block j (0..7) from a K-quant's 12 scale bytes
// (the CPU GEMM's Q4_K decoder reads them too).
inline void ggml_scale_min_k4(int j, const std::uint8_t* q, int& scale, int& min) noexcept {
    if (j < 4) {
        scale = q[j] & 63;
        min = q[j + 4] & 63;
    } else {
        scale = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// IQ4_NL's 16 values (ggml's kvalues_iq4nl), which its nibbles index, as floats: the GEMM's decoders read
// them as a palette.
inline constexpr float ggml_iq4_nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                 1,    13,   25,  38,  53,  69,  89,  113};

}  // namespace detail

}  // namespace anvil

#if ANVIL_DEFINITIONS
#include "anvil/core/ggml_types-inl.hpp"
#endif
