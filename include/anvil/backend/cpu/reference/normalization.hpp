// anvil: the reference normalisations — layer_norm, rms_norm, group_norm, batch_norm (inference) — and
// softmax with an optional additive mask. Statistics are accumulated in double; variances are biased (divided
// by the count), as PyTorch's norms compute them.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "anvil/backend/cpu/tensor_span.hpp"

namespace anvil::detail::cpu::reference {

// Mean and biased variance of `count` values `stride` apart.
struct moments {
    double mean;
    double variance;
};

template <class T>
[[nodiscard]] moments moments_of(const T* values, std::int64_t count, std::int64_t stride = 1) {
    double sum = 0.0;
    for (std::int64_t i = 0; i < count; ++i)
        sum += values[i * stride];
    const double mean = sum / static_cast<double>(count);
    double squares = 0.0;
    for (std::int64_t i = 0; i < count; ++i) {
        const double centred = values[i * stride] - mean;
        squares += centred * centred;
    }
    return {mean, squares / static_cast<double>(count)};
}

// Over the last axis: (x - mean) / sqrt(variance + epsilon) * weight + bias.
template <class T>
void layer_norm(operand_span<T> x, std::optional<operand_span<T>> weight, std::optional<operand_span<T>> bias,
                float epsilon, basic_tensor_span<T> out) {
    const std::int64_t features = x.shape[x.shape.rank() - 1];
    const std::int64_t rows = extent_product(x.shape, 0, x.shape.rank() - 1);
    for (std::int64_t r = 0; r < rows; ++r) {
        const T* row = x.data + r * features;
        const moments m = moments_of(row, features);
        const double inverse = 1.0 / std::sqrt(m.variance + static_cast<double>(epsilon));
        for (std::int64_t i = 0; i < features; ++i) {
            double y = (row[i] - m.mean) * inverse;
            if (weight) y *= weight->data[i];
            if (bias) y += bias->data[i];
            out.data[r * features + i] = static_cast<T>(y);
        }
    }
}

// Over the last axis: x * rsqrt(mean(x^2) + epsilon) * weight (Llama's RMSNorm, no centring).
template <class T>
void rms_norm(operand_span<T> x, std::optional<operand_span<T>> weight, float epsilon,
              basic_tensor_span<T> out) {
    const std::int64_t features = x.shape[x.shape.rank() - 1];
    const std::int64_t rows = extent_product(x.shape, 0, x.shape.rank() - 1);
    for (std::int64_t r = 0; r < rows; ++r) {
        const T* row = x.data + r * features;
        double squares = 0.0;
        for (std::int64_t i = 0; i < features; ++i)
            squares += static_cast<double>(row[i]) * row[i];
        const double inverse =
            1.0 / std::sqrt(squares / static_cast<double>(features) + static_cast<double>(epsilon));
        for (std::int64_t i = 0; i < features; ++i) {
            double y = row[i] * inverse;
            if (weight) y *= weight->data[i];
            out.data[r * features + i] = static_cast<T>(y);
        }
    }
}

// x [N, C, ...]: statistics over each group of C / groups channels and all of their positions; the affine
// weight and bias are per channel.
template <class T>
void group_norm(operand_span<T> x, std::optional<operand_span<T>> weight, std::optional<operand_span<T>> bias,
                std::int64_t groups, float epsilon, basic_tensor_span<T> out) {
    const std::int64_t batch = x.shape[0], channels = x.shape[1];
    const std::int64_t positions = extent_product(x.shape, 2, x.shape.rank());
    const std::int64_t group_channels = channels / groups;
    for (std::int64_t b = 0; b < batch; ++b) {
        for (std::int64_t g = 0; g < groups; ++g) {
            const std::int64_t first = (b * channels + g * group_channels) * positions;
            const moments m = moments_of(x.data + first, group_channels * positions);
            const double inverse = 1.0 / std::sqrt(m.variance + static_cast<double>(epsilon));
            for (std::int64_t c = g * group_channels; c < (g + 1) * group_channels; ++c) {
                for (std::int64_t p = 0; p < positions; ++p) {
                    const std::int64_t at = (b * channels + c) * positions + p;
                    double y = (x.data[at] - m.mean) * inverse;
                    if (weight) y *= weight->data[c];
                    if (bias) y += bias->data[c];
                    out.data[at] = static_cast<T>(y);
                }
            }
        }
    }
}

// x [N, C, ...] with running statistics per channel (axis 1): (x - mean) / sqrt(variance + epsilon) *
// weight + bias.
template <class T>
void batch_norm(operand_span<T> x, operand_span<T> mean, operand_span<T> variance,
                std::optional<operand_span<T>> weight, std::optional<operand_span<T>> bias, float epsilon,
                basic_tensor_span<T> out) {
    const std::int64_t batch = x.shape[0], channels = x.shape[1];
    const std::int64_t positions = extent_product(x.shape, 2, x.shape.rank());
    for (std::int64_t b = 0; b < batch; ++b) {
        for (std::int64_t c = 0; c < channels; ++c) {
            const double inverse = 1.0 / std::sqrt(static_cast<double>(variance.data[c]) + epsilon);
            for (std::int64_t p = 0; p < positions; ++p) {
                const std::int64_t at = (b * channels + c) * positions + p;
                double y = (x.data[at] - static_cast<double>(mean.data[c])) * inverse;
                if (weight) y *= weight->data[c];
                if (bias) y += bias->data[c];
                out.data[at] = static_cast<T>(y);
            }
        }
    }
}

// softmax over `count` scores `stride` apart, written to `out` at the same positions. A row whose scores are
// all -infinity (fully masked) gives zeros rather than PyTorch's NaNs, so that a padded or causally empty row
// stays finite; attention does the same.
template <class T>
void softmax_row(const double* scores, std::int64_t count, T* out, std::int64_t stride) {
    double largest = -std::numeric_limits<double>::infinity();
    for (std::int64_t i = 0; i < count; ++i) {
        if (scores[i] > largest || std::isnan(scores[i])) largest = scores[i];
    }
    if (largest == -std::numeric_limits<double>::infinity()) {
        for (std::int64_t i = 0; i < count; ++i)
            out[i * stride] = T(0);
        return;
    }
    double total = 0.0;
    for (std::int64_t i = 0; i < count; ++i)
        total += std::exp(scores[i] - largest);
    for (std::int64_t i = 0; i < count; ++i) {
        out[i * stride] = static_cast<T>(std::exp(scores[i] - largest) / total);
    }
}

// softmax(x + mask) along `axis`; the mask broadcasts to x.
template <class T>
void softmax(operand_span<T> x, std::optional<operand_span<T>> mask, std::int64_t axis,
             basic_tensor_span<T> out) {
    const auto axis_index = static_cast<std::size_t>(axis);
    const std::int64_t outer = extent_product(x.shape, 0, axis_index);
    const std::int64_t extent = x.shape[axis_index];
    const std::int64_t inner = extent_product(x.shape, axis_index + 1, x.shape.rank());
    const stride_array mask_strides = mask ? broadcast_strides(mask->shape, x.shape) : stride_array{};
    const stride_array x_strides = row_major_strides(x.shape);
    if (count_of(x.shape) == 0) return;  // nothing to normalise (and out.data may be null)
    std::vector<double> scores(static_cast<std::size_t>(extent));
    for (std::int64_t o = 0; o < outer; ++o) {
        for (std::int64_t in = 0; in < inner; ++in) {
            const std::int64_t first = o * extent * inner + in;
            for (std::int64_t i = 0; i < extent; ++i) {
                const std::int64_t at = first + i * inner;
                double score = x.data[at];
                if (mask) {
                    // The mask's offset follows from x's multi-index at this position.
                    index_array index{};
                    std::int64_t rest = at;
                    for (std::size_t d = 0; d < x.shape.rank(); ++d) {
                        index[d] = x_strides[d] == 0 ? 0 : rest / x_strides[d];
                        rest -= index[d] * x_strides[d];
                    }
                    score += mask->data[offset_of(index, mask_strides, x.shape.rank())];
                }
                scores[static_cast<std::size_t>(i)] = score;
            }
            softmax_row(scores.data(), extent, out.data + first, inner);
        }
    }
}

}  // namespace anvil::detail::cpu::reference
