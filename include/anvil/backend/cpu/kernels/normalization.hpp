// anvil: the CPU backend's fast normalisations — layer_norm, rms_norm, group_norm, batch_norm (inference) —
// and softmax along any axis with the additive mask, threaded over rows, groups or planes and vectorised
// along them (reference/normalization.hpp defines what each computes).
//
// Statistics are summed in float lanes over blocks of 512 values and the block totals in double; the variance
// comes from the deviations from a first, rough mean, and the mean is applied as two floats (hi + lo), so
// x - mean stays accurate when the mean is large against the spread (activations around 100 varying by 1).
// Outputs agree with the double-precision reference to a few float ulp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

#include "anvil/backend/cpu/kernels/elementwise.hpp"
#include "anvil/backend/cpu/tensor_span.hpp"
#include "anvil/core/thread_pool.hpp"
#include "anvil/graph/graph.hpp"

namespace anvil::detail::cpu {

namespace normalization {

// About this many elements per hand-out to a thread (~10 us): less is not worth waking one.
inline constexpr std::int64_t rows_grain_elements = 32768;

// A double as two floats whose sum is it to ~48 bits.
struct split_float {
    float hi;
    float lo;
};
[[nodiscard]] inline split_float split(double value) {
    const auto hi = static_cast<float>(value);
    return {hi, static_cast<float>(value - static_cast<double>(hi))};
}

struct sums {
    double values;   // Σ (x - shift)
    double squares;  // Σ (x - shift)^2
};

// Sums of x - shift and of its squares: float lanes within blocks of 512 values, the block totals in double,
// so rounding grows with the block, not with the row.
template <int W>
ANVIL_DETAIL_ALWAYS_INLINE sums block_sums(const float* x, std::int64_t count, float shift) {
    using namespace simd;
    constexpr std::int64_t block = 512;
    sums total{0.0, 0.0};
    for (std::int64_t start = 0; start < count; start += block) {
        const std::int64_t end = std::min(count, start + block);
        vec<W> s0 = splat<W>(0.0f), s1 = s0, q0 = s0, q1 = s0;
        std::int64_t i = start;
        for (; i + 2 * W <= end; i += 2 * W) {
            const vec<W> a = load<W>(x + i) - shift, b = load<W>(x + i + W) - shift;
            s0 = s0 + a;
            s1 = s1 + b;
            q0 = q0 + a * a;
            q1 = q1 + b * b;
        }
        double values = static_cast<double>(horizontal_sum(s0 + s1));
        double squares = static_cast<double>(horizontal_sum(q0 + q1));
        for (; i < end; ++i) {
            const double d = static_cast<double>(x[i] - shift);
            values += d;
            squares += d * d;
        }
        total.values += values;
        total.squares += squares;
    }
    return total;
}

struct moments {
    split_float mean;
    double variance;
};

// Mean and biased variance: a first pass for a rough mean, a second summing the deviations from it (small
// against the values when the mean is large against the spread) and their squares.
template <int W>
ANVIL_DETAIL_ALWAYS_INLINE moments moments_of(const float* x, std::int64_t count) {
    const double n = static_cast<double>(count);
    const auto rough = static_cast<float>(block_sums<W>(x, count, 0.0f).values / n);
    const sums deviations = block_sums<W>(x, count, rough);
    const double offset = deviations.values / n;
    return {split(static_cast<double>(rough) + offset),
            std::max(0.0, deviations.squares / n - offset * offset)};
}

// y = ((x - hi) - lo) * scale * weight + bias over `count` values; weight and bias may be null.
template <int W>
ANVIL_DETAIL_ALWAYS_INLINE void normalize(const float* x, std::int64_t count, split_float mean, float scale,
                                          const float* weight, const float* bias, float* y) {
    using namespace simd;
    std::int64_t i = 0;
    for (; i + W <= count; i += W) {
        vec<W> v = ((load<W>(x + i) - mean.hi) - mean.lo) * scale;
        if (weight != nullptr) v = v * load<W>(weight + i);
        if (bias != nullptr) v = v + load<W>(bias + i);
        store(y + i, v);
    }
    for (; i < count; ++i) {
        float v = ((x[i] - mean.hi) - mean.lo) * scale;
        if (weight != nullptr) v *= weight[i];
        if (bias != nullptr) v += bias[i];
        y[i] = v;
    }
}

struct norm_args {
    const float* x;
    float* y;
    const float* weight;
    const float* bias;
    std::int64_t features;
    float epsilon;
};

template <int W>
ANVIL_DETAIL_ALWAYS_INLINE void layer_norm_rows(const norm_args& a, std::int64_t first, std::int64_t last) {
    for (std::int64_t r = first; r < last; ++r) {
        const float* x = a.x + r * a.features;
        const moments m = moments_of<W>(x, a.features);
        const auto scale = static_cast<float>(1.0 / std::sqrt(m.variance + static_cast<double>(a.epsilon)));
        normalize<W>(x, a.features, m.mean, scale, a.weight, a.bias, a.y + r * a.features);
    }
}

template <int W>
ANVIL_DETAIL_ALWAYS_INLINE void rms_norm_rows(const norm_args& a, std::int64_t first, std::int64_t last) {
    for (std::int64_t r = first; r < last; ++r) {
        const float* x = a.x + r * a.features;
        const double mean_square =
            block_sums<W>(x, a.features, 0.0f).squares / static_cast<double>(a.features);
        const auto scale = static_cast<float>(1.0 / std::sqrt(mean_square + static_cast<double>(a.epsilon)));
        normalize<W>(x, a.features, {0.0f, 0.0f}, scale, a.weight, nullptr, a.y + r * a.features);
    }
}

// One group of group_norm: `features` = channels per group x positions, weight and bias per channel.
template <int W>
ANVIL_DETAIL_ALWAYS_INLINE void group_norm_groups(const norm_args& a, std::int64_t groups,
                                                  std::int64_t positions, std::int64_t first,
                                                  std::int64_t last) {
    const std::int64_t group_channels = a.features / std::max<std::int64_t>(positions, 1);
    for (std::int64_t g = first; g < last; ++g) {
        const float* x = a.x + g * a.features;
        const moments m = moments_of<W>(x, a.features);
        const double inverse = 1.0 / std::sqrt(m.variance + static_cast<double>(a.epsilon));
        const std::int64_t first_channel = (g % groups) * group_channels;
        for (std::int64_t c = 0; c < group_channels; ++c) {
            const std::int64_t channel = first_channel + c;
            const float weight = a.weight != nullptr ? a.weight[channel] : 1.0f;
            const float bias = a.bias != nullptr ? a.bias[channel] : 0.0f;
            const auto scale = static_cast<float>(inverse * static_cast<double>(weight));
            const simd::vec<W> shift = simd::splat<W>(bias);
            const float* in = x + c * positions;
            float* out = a.y + g * a.features + c * positions;
            std::int64_t i = 0;
            for (; i + W <= positions; i += W) {
                simd::store(out + i, ((simd::load<W>(in + i) - m.mean.hi) - m.mean.lo) * scale + shift);
            }
            for (; i < positions; ++i)
                out[i] = ((in[i] - m.mean.hi) - m.mean.lo) * scale + bias;
        }
    }
}

struct softmax_args {
    const float* x;
    float* y;
    const float* mask;          // null without a mask
    stride_array mask_strides;  // the mask broadcast to x
    dims shape;                 // x's
    std::int64_t extent;        // along the axis
    std::int64_t inner;         // elements after the axis (1: the last axis)
};

// softmax of `count` scores already in y (x + mask): max, exp and sum, scale. A row that is all -inf gives
// zeros, as the reference does.
template <int W>
ANVIL_DETAIL_ALWAYS_INLINE void softmax_in_place(float* y, std::int64_t count) {
    using namespace simd;
    vec<W> largest_v = splat<W>(-std::numeric_limits<float>::infinity());
    mask<W> nan_v = is_nan(largest_v);
    std::int64_t i = 0;
    for (; i + W <= count; i += W) {
        const vec<W> v = load<W>(y + i);
        largest_v = max(largest_v, v);
        nan_v = nan_v | is_nan(v);
    }
    float largest = horizontal_max(largest_v);
    bool has_nan = horizontal_max(select(nan_v, 1.0f, splat<W>(0.0f))) != 0.0f;
    for (; i < count; ++i) {
        largest = y[i] > largest ? y[i] : largest;
        has_nan = has_nan || std::isnan(y[i]);
    }
    // As the reference: one NaN makes the whole row NaN.
    if (has_nan) largest = std::numeric_limits<float>::quiet_NaN();
    if (largest == -std::numeric_limits<float>::infinity()) {
        std::fill(y, y + count, 0.0f);
        return;
    }
    double total = 0.0;
    constexpr std::int64_t block = 1024;
    for (std::int64_t start = 0; start < count; start += block) {
        const std::int64_t end = std::min(count, start + block);
        vec<W> sum = splat<W>(0.0f);
        std::int64_t k = start;
        for (; k + W <= end; k += W) {
            const vec<W> e = exp(load<W>(y + k) - largest);
            store(y + k, e);
            sum = sum + e;
        }
        if (k < end) {
            float padded[static_cast<std::size_t>(W)];
            std::fill(padded, padded + W, -std::numeric_limits<float>::infinity());
            std::copy(y + k, y + end, padded);
            const vec<W> e = exp(load<W>(padded) - largest);
            store(padded, e);
            std::copy(padded, padded + (end - k), y + k);
            sum = sum + e;
        }
        total += static_cast<double>(horizontal_sum(sum));
    }
    const auto factor = static_cast<float>(1.0 / total);
    i = 0;
    for (; i + W <= count; i += W)
        store(y + i, load<W>(y + i) * factor);
    for (; i < count; ++i)
        y[i] *= factor;
}

// Last-axis softmax of rows [first, last), adding the mask's row (stride 0 or 1 along the axis) on the way.
template <int W>
ANVIL_DETAIL_ALWAYS_INLINE void softmax_rows(const softmax_args& a, std::int64_t first, std::int64_t last) {
    const std::size_t rank = a.shape.rank();
    for (std::int64_t r = first; r < last; ++r) {
        const float* x = a.x + r * a.extent;
        float* y = a.y + r * a.extent;
        if (a.mask == nullptr) {
            std::copy(x, x + a.extent, y);
        } else {
            std::int64_t rest = r, offset = 0;
            for (std::size_t axis = rank - 1; axis-- > 0;) {
                offset += (rest % a.shape[axis]) * a.mask_strides[axis];
                rest /= a.shape[axis];
            }
            const float* m = a.mask + offset;
            std::int64_t i = 0;
            if (a.mask_strides[rank - 1] == 0) {
                for (; i + W <= a.extent; i += W)
                    simd::store(y + i, simd::load<W>(x + i) + m[0]);
                for (; i < a.extent; ++i)
                    y[i] = x[i] + m[0];
            } else {
                for (; i + W <= a.extent; i += W)
                    simd::store(y + i, simd::load<W>(x + i) + simd::load<W>(m + i));
                for (; i < a.extent; ++i)
                    y[i] = x[i] + m[i];
            }
        }
        softmax_in_place<W>(y, a.extent);
    }
}

// softmax along an inner axis of y (already x + mask), in place, W columns at a time; columns
// [first, last) index outer x inner / W chunks, the last chunk of each outer block is narrower.
template <int W>
ANVIL_DETAIL_ALWAYS_INLINE void softmax_columns(const softmax_args& a, std::int64_t first,
                                                std::int64_t last) {
    using namespace simd;
    const std::int64_t chunks = (a.inner + W - 1) / W;
    const float infinity = std::numeric_limits<float>::infinity();
    for (std::int64_t c = first; c < last; ++c) {
        float* block = a.y + (c / chunks) * a.extent * a.inner;
        const std::int64_t column = (c % chunks) * W;
        if (column + W > a.inner) {
            // The narrow tail: one column at a time, through a contiguous copy.
            std::vector<float> line(static_cast<std::size_t>(a.extent));
            for (std::int64_t j = column; j < a.inner; ++j) {
                for (std::int64_t k = 0; k < a.extent; ++k)
                    line[static_cast<std::size_t>(k)] = block[k * a.inner + j];
                softmax_in_place<W>(line.data(), a.extent);
                for (std::int64_t k = 0; k < a.extent; ++k)
                    block[k * a.inner + j] = line[static_cast<std::size_t>(k)];
            }
            continue;
        }
        vec<W> largest = splat<W>(-infinity);
        mask<W> nan = is_nan(largest);
        for (std::int64_t k = 0; k < a.extent; ++k) {
            const vec<W> v = load<W>(block + k * a.inner + column);
            largest = max(largest, v);
            nan = nan | is_nan(v);
        }
        largest = select(nan, std::numeric_limits<float>::quiet_NaN(), largest);
        const mask<W> empty = largest == -infinity;
        const vec<W> shift = select(empty, 0.0f, largest);
        vec<W> total = splat<W>(0.0f);
        for (std::int64_t k = 0; k < a.extent; ++k) {
            float* at = block + k * a.inner + column;
            const vec<W> e = exp(load<W>(at) - shift);
            store(at, e);
            total = total + e;
        }
        const vec<W> factor = select(empty, 0.0f, 1.0f / total);
        for (std::int64_t k = 0; k < a.extent; ++k) {
            float* at = block + k * a.inner + column;
            store(at, load<W>(at) * factor);
        }
    }
}

// The ISA entry points: each kernel's loop compiled for the portable width and for AVX2.
enum class norm_kind { layer, rms, group, softmax_rows, softmax_columns };

template <int W>
ANVIL_DETAIL_ALWAYS_INLINE void run_norm(norm_kind kind, const void* args, std::int64_t first,
                                         std::int64_t last, std::int64_t groups, std::int64_t positions) {
    switch (kind) {
        case norm_kind::layer:
            return layer_norm_rows<W>(*static_cast<const norm_args*>(args), first, last);
        case norm_kind::rms:
            return rms_norm_rows<W>(*static_cast<const norm_args*>(args), first, last);
        case norm_kind::group:
            return group_norm_groups<W>(*static_cast<const norm_args*>(args), groups, positions, first, last);
        case norm_kind::softmax_rows:
            return softmax_rows<W>(*static_cast<const softmax_args*>(args), first, last);
        case norm_kind::softmax_columns:
            return softmax_columns<W>(*static_cast<const softmax_args*>(args), first, last);
    }
}

inline void run_norm_portable(norm_kind kind, const void* args, std::int64_t first, std::int64_t last,
                              std::int64_t groups, std::int64_t positions) {
    run_norm<4>(kind, args, first, last, groups, positions);
}

#if defined(ANVIL_DETAIL_KERNELS_X86)
__attribute__((target("avx2,fma"))) inline void run_norm_avx2(norm_kind kind, const void* args,
                                                              std::int64_t first, std::int64_t last,
                                                              std::int64_t groups, std::int64_t positions) {
    run_norm<8>(kind, args, first, last, groups, positions);
}
#endif

// Runs `kind` over items [0, count) on the pool, `per_item` elements each (for the grain).
inline void run_norm_parallel(thread_pool& pool, norm_kind kind, const void* args, std::int64_t count,
                              std::int64_t per_item, std::int64_t groups = 0, std::int64_t positions = 0) {
    if (count <= 0) return;
    const bool avx2 = use_avx2_kernels();
    const auto grain = static_cast<std::size_t>(
        std::max<std::int64_t>(1, rows_grain_elements / std::max<std::int64_t>(per_item, 1)));
    pool.parallel_for(0, static_cast<std::size_t>(count), grain, [&](std::size_t first, std::size_t last) {
        const auto begin = static_cast<std::int64_t>(first), end = static_cast<std::int64_t>(last);
#if defined(ANVIL_DETAIL_KERNELS_X86)
        if (avx2) return run_norm_avx2(kind, args, begin, end, groups, positions);
#endif
        run_norm_portable(kind, args, begin, end, groups, positions);
    });
    (void)avx2;
}

[[nodiscard]] inline const float* optional_data(std::span<const const_tensor_span> inputs, std::size_t slot) {
    return slot < inputs.size() ? inputs[slot].data : nullptr;
}

}  // namespace normalization

// Over the last axis: (x - mean) / sqrt(variance + epsilon) * weight + bias.
inline void layer_norm(const node& n, std::span<const const_tensor_span> inputs, tensor_span output,
                       thread_pool& pool, std::span<float> /*workspace*/) {
    using namespace normalization;
    const dims& shape = inputs[0].shape;
    const std::int64_t features = shape[shape.rank() - 1];
    const norm_args args{inputs[0].data,           output.data, optional_data(inputs, 1),
                         optional_data(inputs, 2), features,    n.attrs.epsilon};
    if (features == 0) return;
    run_norm_parallel(pool, norm_kind::layer, &args, count_of(shape) / features, features);
}

// Over the last axis: x * rsqrt(mean(x^2) + epsilon) * weight.
inline void rms_norm(const node& n, std::span<const const_tensor_span> inputs, tensor_span output,
                     thread_pool& pool, std::span<float> /*workspace*/) {
    using namespace normalization;
    const dims& shape = inputs[0].shape;
    const std::int64_t features = shape[shape.rank() - 1];
    const norm_args args{inputs[0].data, output.data, optional_data(inputs, 1),
                         nullptr,        features,    n.attrs.epsilon};
    if (features == 0) return;
    run_norm_parallel(pool, norm_kind::rms, &args, count_of(shape) / features, features);
}

// x [N, C, ...]: each group of C / groups channels is one contiguous block, normalised over all of it.
inline void group_norm(const node& n, std::span<const const_tensor_span> inputs, tensor_span output,
                       thread_pool& pool, std::span<float> /*workspace*/) {
    using namespace normalization;
    const dims& shape = inputs[0].shape;
    const std::int64_t groups = n.attrs.groups;
    const std::int64_t positions = extent_product(shape, 2, shape.rank());
    const std::int64_t per_group = shape[1] / groups * positions;
    const norm_args args{inputs[0].data,           output.data, optional_data(inputs, 1),
                         optional_data(inputs, 2), per_group,   n.attrs.epsilon};
    if (per_group == 0) return;
    run_norm_parallel(pool, norm_kind::group, &args, shape[0] * groups, per_group, groups, positions);
}

// x [N, C, ...] with per-channel running statistics: one scale and shift per channel, applied plane by plane.
inline void batch_norm(const node& n, std::span<const const_tensor_span> inputs, tensor_span output,
                       thread_pool& pool, std::span<float> /*workspace*/) {
    const dims& shape = inputs[0].shape;
    const std::int64_t channels = shape[1];
    const std::int64_t positions = extent_product(shape, 2, shape.rank());
    const std::int64_t planes = shape[0] * channels;
    if (planes == 0 || positions == 0) return;
    const float* mean = inputs[1].data;
    const float* variance = inputs[2].data;
    const float* weight = normalization::optional_data(inputs, 3);
    const float* bias = normalization::optional_data(inputs, 4);
    const double epsilon = n.attrs.epsilon;
    const auto grain =
        static_cast<std::size_t>(std::max<std::int64_t>(1, normalization::rows_grain_elements / positions));
    pool.parallel_for(0, static_cast<std::size_t>(planes), grain, [&](std::size_t first, std::size_t last) {
        for (auto plane = static_cast<std::int64_t>(first); plane < static_cast<std::int64_t>(last);
             ++plane) {
            const std::int64_t c = plane % channels;
            const double inverse = 1.0 / std::sqrt(static_cast<double>(variance[c]) + epsilon);
            const auto scale =
                static_cast<float>(inverse * (weight != nullptr ? static_cast<double>(weight[c]) : 1.0));
            const float shift = bias != nullptr ? bias[c] : 0.0f;
            const float centre = mean[c];
            const float* x = inputs[0].data + plane * positions;
            float* y = output.data + plane * positions;
            for (std::int64_t i = 0; i < positions; ++i)
                y[i] = (x[i] - centre) * scale + shift;
        }
    });
}

// softmax(x + mask) along attrs.axis; a row (or column) that is all -inf gives zeros.
inline void softmax(const node& n, std::span<const const_tensor_span> inputs, tensor_span output,
                    thread_pool& pool, std::span<float> workspace) {
    using namespace normalization;
    const dims& shape = inputs[0].shape;
    const auto axis = static_cast<std::size_t>(n.attrs.axis);
    normalization::softmax_args args{inputs[0].data,
                                     output.data,
                                     nullptr,
                                     {},
                                     shape,
                                     shape[axis],
                                     extent_product(shape, axis + 1, shape.rank())};
    if (count_of(shape) == 0) return;
    if (args.inner == 1) {
        if (inputs.size() == 2) {
            args.mask = inputs[1].data;
            args.mask_strides = broadcast_strides(inputs[1].shape, shape);
        }
        run_norm_parallel(pool, norm_kind::softmax_rows, &args, count_of(shape) / args.extent, args.extent);
        return;
    }
    // Another axis: y = x + mask first (one broadcast pass), then softmax down the columns of y in place.
    if (inputs.size() == 2) {
        const fused_step add{op::add, {0, 1, 0}, 0.0f, 0.0f};
        elementwise::evaluate_chain(std::span(&add, 1), inputs, output, pool, workspace);
    } else if (output.data != inputs[0].data) {
        std::copy(inputs[0].data, inputs[0].data + count_of(shape), output.data);
    }
    args.x = output.data;
    const std::int64_t outer = extent_product(shape, 0, axis);
    const bool avx2 = use_avx2_kernels();
    const std::int64_t width = avx2 ? 8 : 4;
    const std::int64_t column_chunks = (args.inner + width - 1) / width;
    const std::int64_t items = outer * column_chunks;
    const auto grain =
        static_cast<std::size_t>(std::max<std::int64_t>(1, rows_grain_elements / (args.extent * width)));
    pool.parallel_for(0, static_cast<std::size_t>(items), grain, [&](std::size_t first, std::size_t last) {
        const auto begin = static_cast<std::int64_t>(first), end = static_cast<std::int64_t>(last);
#if defined(ANVIL_DETAIL_KERNELS_X86)
        if (avx2) return run_norm_avx2(norm_kind::softmax_columns, &args, begin, end, 0, 0);
#endif
        run_norm_portable(norm_kind::softmax_columns, &args, begin, end, 0, 0);
    });
    (void)avx2;
}

}  // namespace anvil::detail::cpu
