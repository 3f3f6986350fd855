// anvil: the contract of the CPU backend's matrix product. How an operand is described (any strides, f32 /
// f16 / bf16; for B also i8 with per-column dequantisation and ggml blocks), how arguments are checked, and
// gemm_reference: the plain triple loop that defines what gemm (gemm.hpp) computes. Tests compare the fast
// path with it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "anvil/core/bfloat16.hpp"
#include "anvil/core/dtype.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/ggml_types.hpp"
#include "anvil/core/half.hpp"

namespace anvil::detail {

// One operand: element (r, c) lives at data + r*row_stride + c*col_stride, counted in elements of `type`, so
// a transposed operand is the same data with its strides swapped. i8 (B only) stands for
// (q - zero_point[c]) * scale[c] with one scale (and optional zero point, else 0) per column.
struct matrix_operand {
    const void* data = nullptr;
    dtype type = dtype::f32;
    std::int64_t row_stride = 0;
    std::int64_t col_stride = 1;
    const float* scale = nullptr;       // i8 only: length = columns
    const float* zero_point = nullptr;  // i8 only: length = columns, or null for 0
    // B only: rows of ggml blocks, a GGUF weight W [n, k] as B = Wᵀ: column j is row j of W, at
    // data + j * block_row_bytes, k / block whole blocks (type, row_stride and col_stride are then unused).
    // (A plain enum rather than an optional: GCC 12 reports an optional's payload here as maybe
    // uninitialised.)
    ggml_type blocks = ggml_type::F32;  // F32: not blocks
    std::int64_t block_row_bytes = 0;

    [[nodiscard]] bool has_blocks() const noexcept { return blocks != ggml_type::F32; }
    // B only, with type u8: palette indices (a dequantize_lut weight), element (r, c) standing for
    // lut[(c / lut_columns_per_group) * lut_stride + index]: one palette of lut_length values per group of
    // lut_columns_per_group columns (one group for a shared palette), palettes lut_stride values apart.
    const float* lut = nullptr;
    std::int64_t lut_length = 0, lut_stride = 0;
    std::int64_t lut_columns_per_group = 1;
};

struct gemm_epilogue {
    const float* bias = nullptr;  // length n, added to every row, or null
    bool accumulate = false;      // C += A*B (+ bias) instead of C = A*B (+ bias)
};

// dtype_name for any byte value: an operand may carry a value outside the enum.
[[nodiscard]] inline std::string gemm_dtype_name(dtype type) {
    if (static_cast<std::size_t>(type) < dtype_count) return std::string(dtype_name(type));
    return message("<invalid dtype ", static_cast<unsigned>(type), ">");
}

inline void check_gemm_blocks(const char* function, const char* name, const matrix_operand& operand,
                              std::int64_t rows, std::int64_t cols, bool quantised_allowed) {
    const std::optional<ggml_type_layout> layout = ggml_layout(static_cast<std::uint32_t>(operand.blocks));
    const std::string type = ggml_type_name(operand.blocks);
    if (!quantised_allowed || !layout || !layout->dequantizes) {
        throw type_error(
            message(function, ": operand ", name, " (", rows, "x", cols, ") holds ggml ", type, " blocks; ",
                    quantised_allowed ? "that type has no dequantiser" : "only B may be quantised"));
    }
    if (rows % layout->block != 0 || operand.block_row_bytes < rows / layout->block * layout->bytes) {
        throw shape_error(message(function, ": operand ", name, " (", rows, "x", cols, ") holds ggml ", type,
                                  " blocks: ", rows, " values a column are not whole blocks of ",
                                  layout->block, " in ", operand.block_row_bytes, " bytes"));
    }
    if (operand.data == nullptr && rows > 0 && cols > 0) {
        throw error(message(function, ": operand ", name, " (", rows, "x", cols, ", ", type,
                            ") has no data (null pointer)"));
    }
}

inline void check_gemm_operand(const char* function, const char* name, const matrix_operand& operand,
                               std::int64_t rows, std::int64_t cols, bool quantised_allowed) {
    if (operand.has_blocks()) {
        check_gemm_blocks(function, name, operand, rows, cols, quantised_allowed);
        return;
    }
    const dtype type = operand.type;
    const bool is_float = type == dtype::f32 || type == dtype::f16 || type == dtype::bf16;
    if (operand.lut != nullptr) {
        if (!quantised_allowed || type != dtype::u8 || operand.lut_length <= 0 || operand.lut_length > 256 ||
            operand.lut_stride < operand.lut_length || operand.lut_columns_per_group <= 0) {
            throw type_error(
                message(function, ": operand ", name, " (", rows, "x", cols,
                        ") has a palette; only B may, with u8 indices and 1 to 256 values a palette "
                        "(got ",
                        gemm_dtype_name(type), ", ", operand.lut_length, " values)"));
        }
        return;
    }
    if (!is_float && !(quantised_allowed && type == dtype::i8)) {
        throw type_error(message(function, ": operand ", name, " (", rows, "x", cols, ") has element type ",
                                 gemm_dtype_name(type), "; ", name, " must be f32, f16 or bf16",
                                 quantised_allowed ? ", or i8 with a per-column scale" : ""));
    }
    if (operand.data == nullptr && rows > 0 && cols > 0) {
        throw error(message(function, ": operand ", name, " (", rows, "x", cols, ", ", gemm_dtype_name(type),
                            ") has no data (null pointer)"));
    }
    if (type == dtype::i8 && operand.scale == nullptr && rows > 0 && cols > 0) {
        throw type_error(message(function, ": operand ", name, " (", rows, "x", cols,
                                 ") is i8 but has no scale; i8 needs scale[", cols,
                                 "] (and optionally zero_point[", cols, "]), one per column"));
    }
}

// Everything gemm and gemm_reference require of their arguments, with messages that name what is wrong.
inline void check_gemm_arguments(const char* function, std::int64_t m, std::int64_t n, std::int64_t k,
                                 const matrix_operand& a, const matrix_operand& b, const float* c,
                                 std::int64_t ldc) {
    if (m < 0 || n < 0 || k < 0) {
        throw shape_error(message(function, ": sizes must not be negative, got m=", m, ", n=", n, ", k=", k,
                                  " (C[m,n] = A[m,k] * B[k,n])"));
    }
    check_gemm_operand(function, "A", a, m, k, false);
    check_gemm_operand(function, "B", b, k, n, true);
    if (c == nullptr && m > 0 && n > 0) {
        throw error(message(function, ": C (", m, "x", n, ") has no data (null pointer)"));
    }
    if (m > 1 && ldc < n) {
        throw shape_error(message(function, ": ldc=", ldc, " is less than n=", n, ": rows of C (", m, "x", n,
                                  ") would overlap; expected ldc >= n"));
    }
}

// Element (r, c) of an operand as float: the scalar conversions of half.hpp and bfloat16.hpp, and i8
// dequantised per column. Bytes are read with memcpy, so any alignment works.
[[nodiscard]] inline float gemm_operand_element(const matrix_operand& operand, std::int64_t row,
                                                std::int64_t col) noexcept {
    const auto* bytes = static_cast<const unsigned char*>(operand.data);
    if (operand.has_blocks()) {
        const std::optional<ggml_type_layout> layout =
            ggml_layout(static_cast<std::uint32_t>(operand.blocks));
        float values[256];
        const auto block = static_cast<std::int64_t>(layout->block);
        const auto* first = reinterpret_cast<const std::byte*>(bytes) + col * operand.block_row_bytes +
                            row / block * static_cast<std::int64_t>(layout->bytes);
        dequantize_ggml(operand.blocks, std::span<const std::byte>(first, layout->bytes),
                        std::span<float>(values, layout->block));
        return values[row % block];
    }
    const std::int64_t index = row * operand.row_stride + col * operand.col_stride;
    if (operand.lut != nullptr) {
        return operand.lut[col / operand.lut_columns_per_group * operand.lut_stride + bytes[index]];
    }
    switch (operand.type) {
        case dtype::f16: {
            std::uint16_t bits;
            std::memcpy(&bits, bytes + 2 * index, sizeof bits);
            return half_bits_to_float(bits);
        }
        case dtype::bf16: {
            std::uint16_t bits;
            std::memcpy(&bits, bytes + 2 * index, sizeof bits);
            return bfloat16_bits_to_float(bits);
        }
        case dtype::i8: {
            std::int8_t quantised;
            std::memcpy(&quantised, bytes + index, sizeof quantised);
            const float zero = operand.zero_point != nullptr ? operand.zero_point[col] : 0.0f;
            return (static_cast<float>(quantised) - zero) * operand.scale[col];
        }
        default: {
            float value;
            std::memcpy(&value, bytes + 4 * index, sizeof value);
            return value;
        }
    }
}

// C[i, j] = sum over p of A[i, p] * B[p, j], summed in order of p, then + bias[j], then + the old C[i, j]
// when accumulating. k = 0 leaves bias (or 0) added to C (or written to it).
inline void gemm_reference(std::int64_t m, std::int64_t n, std::int64_t k, const matrix_operand& a,
                           const matrix_operand& b, float* c, std::int64_t ldc,
                           const gemm_epilogue& epilogue = {}) {
    check_gemm_arguments("gemm_reference", m, n, k, a, b, c, ldc);
    for (std::int64_t i = 0; i < m; ++i) {
        for (std::int64_t j = 0; j < n; ++j) {
            float sum = 0.0f;
            for (std::int64_t p = 0; p < k; ++p) {
                sum += gemm_operand_element(a, i, p) * gemm_operand_element(b, p, j);
            }
            if (epilogue.bias != nullptr) sum += epilogue.bias[j];
            float& out = c[i * ldc + j];
            out = epilogue.accumulate ? out + sum : sum;
        }
    }
}

// The fast mode for quantised weights (gemm_int8.hpp) rounds each row of A to blocks of this many values.
inline constexpr int int8_activation_block = 32;

// A row of k activations (k a multiple of 32) rounded to 8 bits as llama.cpp rounds them for its integer
// products (ggml's Q8_0): per block of 32, d = max |x| / 127 and q = x * (1 / d) rounded to the nearest
// integer, ties to even (0 when d is 0); sums[b] = Σ q over the block. A block holding an infinity or a NaN
// gets d = NaN and every q 0, so the products it enters are NaN rather than finite and wrong.
inline void int8_activations_reference(const float* x, std::int64_t k, std::int8_t* q, float* scales,
                                       std::int32_t* sums) noexcept {
    for (std::int64_t b = 0; b < k / int8_activation_block; ++b) {
        const float* block = x + b * int8_activation_block;
        float amax = 0.0f;
        bool finite = true;
        for (int p = 0; p < int8_activation_block; ++p) {
            finite = finite && std::isfinite(block[p]);
            amax = std::max(amax, std::fabs(block[p]));
        }
        float d = amax / 127.0f;
        float inverse = d != 0.0f ? 1.0f / d : 0.0f;
        if (!finite) {
            d = std::numeric_limits<float>::quiet_NaN();
            inverse = 0.0f;
        }
        std::int32_t sum = 0;
        for (int p = 0; p < int8_activation_block; ++p) {
            const auto value = finite ? static_cast<std::int32_t>(std::nearbyint(block[p] * inverse)) : 0;
            q[b * int8_activation_block + p] = static_cast<std::int8_t>(std::clamp(value, -127, 127));
            sum += q[b * int8_activation_block + p];
        }
        scales[b] = d;
        sums[b] = sum;
    }
}

// What gemm_int8 computes: C[i, j] = Σ over blocks b of d[i, b] * Σ over p in b of q[i, p] * B[p, j], with
// A's rows rounded by int8_activations_reference and B's elements exactly as gemm_reference reads them
// (summed in double here), then + bias[j], then + the old C[i, j] when accumulating.
inline void gemm_int8_reference(std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
                                std::int64_t lda, const matrix_operand& b, float* c, std::int64_t ldc,
                                const gemm_epilogue& epilogue = {}) {
    const matrix_operand a_operand{a, dtype::f32, lda, 1};
    check_gemm_arguments("gemm_int8_reference", m, n, k, a_operand, b, c, ldc);
    if (k % int8_activation_block != 0) {
        throw shape_error(message("gemm_int8_reference: k=", k, " is not a whole number of blocks of ",
                                  int8_activation_block));
    }
    const std::int64_t blocks = k / int8_activation_block;
    std::vector<std::int8_t> q(static_cast<std::size_t>(k));
    std::vector<float> scales(static_cast<std::size_t>(blocks));
    std::vector<std::int32_t> sums(static_cast<std::size_t>(blocks));
    for (std::int64_t i = 0; i < m; ++i) {
        int8_activations_reference(a + i * lda, k, q.data(), scales.data(), sums.data());
        for (std::int64_t j = 0; j < n; ++j) {
            double sum = 0.0;
            for (std::int64_t block = 0; block < blocks; ++block) {
                double part = 0.0;
                for (std::int64_t p = block * int8_activation_block; p < (block + 1) * int8_activation_block;
                     ++p)
                    part +=
                        static_cast<double>(q[static_cast<std::size_t>(p)]) * gemm_operand_element(b, p, j);
                sum += static_cast<double>(scales[static_cast<std::size_t>(block)]) * part;
            }
            if (epilogue.bias != nullptr) sum += epilogue.bias[j];
            float& out = c[i * ldc + j];
            out = epilogue.accumulate ? static_cast<float>(out + sum) : static_cast<float>(sum);
        }
    }
}

}  // namespace anvil::detail
