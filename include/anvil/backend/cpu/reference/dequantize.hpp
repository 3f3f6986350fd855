// anvil: the reference weight decompression — int8 with a per-channel scale and zero point, lookup tables
// (palettised weights: a u8 index per weight into a table of at most 256 values, per output channel or
// shared), and rows of ggml blocks (GGUF files' quantised weights).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

#include "anvil/backend/cpu/tensor_span.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/ggml_types.hpp"

namespace anvil::detail::cpu::reference {

// out = (q - zero_point[c]) * scale[c], c the index along `axis`; no zero point means 0.
template <class T>
void dequantize_int8(operand_span<T> q, operand_span<T> scale, std::optional<operand_span<T>> zero_point,
                     std::int64_t axis, basic_tensor_span<T> out) {
    const auto axis_index = static_cast<std::size_t>(axis);
    const std::int64_t outer = extent_product(q.shape, 0, axis_index);
    const std::int64_t channels = q.shape[axis_index];
    const std::int64_t inner = extent_product(q.shape, axis_index + 1, q.shape.rank());
    for (std::int64_t o = 0; o < outer; ++o) {
        for (std::int64_t c = 0; c < channels; ++c) {
            const T zero = zero_point ? zero_point->data[c] : T(0);
            for (std::int64_t i = 0; i < inner; ++i) {
                const std::int64_t at = (o * channels + c) * inner + i;
                out.data[at] = (q.data[at] - zero) * scale.data[c];
            }
        }
    }
}

// out = lut[g, index] with g the group of the index's position c along axis 0 (a [G, L] table for C
// positions: g = c / (C / G)), or lut[index] (an [L] table). An index that is not a whole number in [0, L)
// throws, naming it and the table's shape.
template <class T>
void dequantize_lut(operand_span<T> indices, operand_span<T> lut, basic_tensor_span<T> out) {
    const bool per_channel = lut.shape.rank() == 2;
    const std::int64_t length = lut.shape[lut.shape.rank() - 1];
    const std::int64_t count = count_of(indices.shape);
    // Positions per group of slices along axis 0; a shared table treats the whole tensor as one group.
    const std::int64_t slice = per_channel ? extent_product(indices.shape, 1, indices.shape.rank()) *
                                                 (indices.shape[0] / lut.shape[0])
                                           : count;
    for (std::int64_t i = 0; i < count; ++i) {
        const T index = indices.data[i];
        if (!(index >= T(0) && index < static_cast<T>(length) && std::trunc(index) == index)) {
            throw error(message("dequantize_lut: index ", index, " (element ", i, " of the indices ",
                                indices.shape, ") is out of range for the table ", lut.shape,
                                " (expected a whole number in [0, ", length, "))"));
        }
        const std::int64_t channel = per_channel ? i / slice : 0;
        out.data[i] = lut.data[channel * length + static_cast<std::int64_t>(index)];
    }
}

// Each row of `blocks` (its bytes, held as f32 values 0..255 like every CPU value) dequantised as ggml type
// `type` into a row of `out`. A value that is not a byte throws, naming it.
template <class T>
void dequantize_ggml(operand_span<T> blocks, std::uint32_t type, basic_tensor_span<T> out) {
    const std::int64_t row_bytes = blocks.shape[blocks.shape.rank() - 1];
    const std::int64_t row_values = out.shape[out.shape.rank() - 1];
    if (row_bytes <= 0) return;
    const std::int64_t rows = count_of(blocks.shape) / row_bytes;
    std::vector<std::byte> row(static_cast<std::size_t>(row_bytes));
    for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t i = 0; i < row_bytes; ++i) {
            const T byte = blocks.data[r * row_bytes + i];
            if (!(byte >= T(0) && byte <= T(255) && std::trunc(byte) == byte)) {
                throw error(message("dequantize_ggml: element ", r * row_bytes + i, " of the blocks ",
                                    blocks.shape, " is ", byte, ", not a byte"));
            }
            row[static_cast<std::size_t>(i)] = static_cast<std::byte>(static_cast<unsigned>(byte));
        }
        if constexpr (std::is_same_v<T, float>) {
            anvil::dequantize_ggml(
                static_cast<ggml_type>(type), row,
                std::span<float>(out.data + r * row_values, static_cast<std::size_t>(row_values)));
        } else {
            // ggml's blocks decode to float: widened after (every value is exact in both).
            std::vector<float> values(static_cast<std::size_t>(row_values));
            anvil::dequantize_ggml(static_cast<ggml_type>(type), row, values);
            std::copy(values.begin(), values.end(), out.data + r * row_values);
        }
    }
}

}  // namespace anvil::detail::cpu::reference
