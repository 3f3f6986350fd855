// anvil: the reference matrix products — matmul (batched, broadcasting its leading axes, either operand
// transposed) and linear (Hugging Face's nn.Linear: x * weight^T + bias) — with double accumulators.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "anvil/backend/cpu/tensor_span.hpp"

namespace anvil::detail::cpu::reference {

// a [..., M, K] (or [..., K, M] transposed) times b [..., K, N] (or [..., N, K]); the leading axes
// broadcast to out's leading axes. out: [..., M, N].
template <class T>
void matmul(operand_span<T> a, operand_span<T> b, bool transpose_a, bool transpose_b,
            basic_tensor_span<T> out) {
    const std::size_t rank = out.shape.rank();
    const std::size_t rank_a = a.shape.rank();
    const std::size_t rank_b = b.shape.rank();
    const std::int64_t m = out.shape[rank - 2];
    const std::int64_t n = out.shape[rank - 1];
    const std::int64_t k = transpose_a ? a.shape[rank_a - 2] : a.shape[rank_a - 1];

    const dims batch(out.shape.extents().first(rank - 2));
    const dims batch_a(a.shape.extents().first(rank_a - 2));
    const dims batch_b(b.shape.extents().first(rank_b - 2));
    const stride_array strides_a = broadcast_strides(batch_a, batch);  // in matrices
    const stride_array strides_b = broadcast_strides(batch_b, batch);
    if (count_of(out.shape) == 0) return;

    index_array index{};
    std::int64_t matrix = 0;
    do {
        const T* pa = a.data + offset_of(index, strides_a, batch.rank()) * m * k;
        const T* pb = b.data + offset_of(index, strides_b, batch.rank()) * k * n;
        T* po = out.data + matrix * m * n;
        for (std::int64_t i = 0; i < m; ++i) {
            for (std::int64_t j = 0; j < n; ++j) {
                double sum = 0.0;
                for (std::int64_t p = 0; p < k; ++p) {
                    const T left = transpose_a ? pa[p * m + i] : pa[i * k + p];
                    const T right = transpose_b ? pb[j * k + p] : pb[p * n + j];
                    sum += static_cast<double>(left) * static_cast<double>(right);
                }
                po[i * n + j] = static_cast<T>(sum);
            }
        }
        ++matrix;
    } while (next_index(index, batch));
}

// x [..., in], weight [out, in], bias [out] or none; out [..., out].
template <class T>
void linear(operand_span<T> x, operand_span<T> weight, std::optional<operand_span<T>> bias,
            basic_tensor_span<T> out) {
    const std::int64_t outputs = weight.shape[0];
    const std::int64_t inputs = weight.shape[1];
    const std::int64_t rows = extent_product(x.shape, 0, x.shape.rank() - 1);
    for (std::int64_t r = 0; r < rows; ++r) {
        const T* row = x.data + r * inputs;
        for (std::int64_t o = 0; o < outputs; ++o) {
            double sum = bias ? static_cast<double>(bias->data[o]) : 0.0;
            for (std::int64_t i = 0; i < inputs; ++i) {
                sum += static_cast<double>(row[i]) * static_cast<double>(weight.data[o * inputs + i]);
            }
            out.data[r * outputs + o] = static_cast<T>(sum);
        }
    }
}

}  // namespace anvil::detail::cpu::reference
