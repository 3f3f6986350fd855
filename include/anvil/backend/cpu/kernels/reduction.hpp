// anvil: the CPU backend's fast reduce_sum and reduce_mean over one run of adjacent axes — what training's
// backward pass reduces most: a bias's gradient (the leading axes of [batch, tokens, features]) and a norm's
// backward sums (the last axis). The reference kernel walks a multi-index per element, about ten times
// slower; in a BERT-base training step it took a tenth of the time. Here the input is read as [outer, extent,
// inner] and each output element adds its extent values in the order the reference adds them, in double, so
// the result is the reference's bit for bit; blocks of contiguous inner elements run in parallel. Axes that
// are not adjacent keep the reference kernel (prepare_kernel asks reduces_adjacent_axes).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "anvil/backend/cpu/kernel.hpp"
#include "anvil/backend/cpu/tensor_span.hpp"
#include "anvil/core/thread_pool.hpp"
#include "anvil/graph/graph.hpp"

namespace anvil::detail::cpu {

// Whether node n (reduce_sum or reduce_mean) reduces one run of adjacent axes (shape inference leaves them
// sorted and non-negative); none counts too (a copy).
[[nodiscard]] inline bool reduces_adjacent_axes(const node& n) {
    const auto& axes = n.attrs.axes;
    for (std::size_t i = 1; i < axes.size(); ++i) {
        if (axes[i] != axes[i - 1] + 1) return false;
    }
    return true;
}

namespace reduction {

inline constexpr std::int64_t lanes = 8;  // sums carried at once, each in a register of its own

// `count` sums (1 or `lanes`) of `extent` values each, sum l reading x[l * lane_stride + k * step], k in
// order, in double: independent chains the CPU adds in parallel, where one chain waits on each addition.
template <std::int64_t Count>
inline void sum_sequences(const float* x, std::int64_t lane_stride, std::int64_t step, std::int64_t extent,
                          double divisor, float* out, std::int64_t out_stride) {
    std::array<double, static_cast<std::size_t>(Count)> sums{};
    for (std::int64_t k = 0; k < extent; ++k) {
        const float* values = x + k * step;
        for (std::int64_t l = 0; l < Count; ++l)
            sums[static_cast<std::size_t>(l)] += static_cast<double>(values[l * lane_stride]);
    }
    for (std::int64_t l = 0; l < Count; ++l)
        out[l * out_stride] = static_cast<float>(sums[static_cast<std::size_t>(l)] / divisor);
}

}  // namespace reduction

inline void reduce_sum_or_mean(const node& n, std::span<const const_tensor_span> inputs, tensor_span output,
                               thread_pool& pool, std::span<float> /*workspace*/) {
    using reduction::lanes;
    using reduction::sum_sequences;
    const const_tensor_span& x = inputs[0];
    const auto& axes = n.attrs.axes;
    const std::size_t first = axes.empty() ? x.shape.rank() : static_cast<std::size_t>(axes.front());
    const std::size_t last = axes.empty() ? x.shape.rank() : static_cast<std::size_t>(axes.back()) + 1;
    const std::int64_t outer = extent_product(x.shape, 0, first);
    const std::int64_t extent = extent_product(x.shape, first, last);
    const std::int64_t inner = extent_product(x.shape, last, x.shape.rank());
    if (outer == 0 || inner == 0) return;
    // The mean of nothing is NaN (0 / 0), as in torch.mean and the reference.
    const double divisor = n.kind == op::reduce_mean ? static_cast<double>(extent) : 1.0;
    // Output (o, i) sums x[o, k, i] over k. Groups of `lanes` outputs side by side along i (a bias's
    // gradient: contiguous loads), or along o when each output's values are contiguous (inner 1: a norm's
    // row sums); a group's outputs are summed together, each in its own register.
    const bool along_inner = inner > 1;
    const std::int64_t span = along_inner ? inner : outer;  // the axis the groups cut
    const std::int64_t groups = (span + lanes - 1) / lanes;
    const std::int64_t items = along_inner ? outer * groups : groups;
    const auto grain = static_cast<std::size_t>(
        std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(1, extent * lanes)));
    pool.parallel_for(0, static_cast<std::size_t>(items), grain,
                      [&](std::size_t first_item, std::size_t last_item) {
                          for (auto item = static_cast<std::int64_t>(first_item);
                               item < static_cast<std::int64_t>(last_item); ++item) {
                              const std::int64_t o = along_inner ? item / groups : item * lanes;
                              const std::int64_t i = along_inner ? (item % groups) * lanes : 0;
                              const std::int64_t width = std::min(lanes, span - (along_inner ? i : o));
                              // Lane l is output (o, i + l) or (o + l, 0): its values start lane_stride
                              // apart, step apart.
                              const std::int64_t lane_stride = along_inner ? 1 : extent;
                              const std::int64_t step = along_inner ? inner : 1;
                              const float* from = x.data + o * extent * inner + i;
                              float* to = output.data + o * inner + i;
                              if (width == lanes) {
                                  sum_sequences<lanes>(from, lane_stride, step, extent, divisor, to,
                                                       along_inner ? 1 : inner);
                              } else {
                                  for (std::int64_t l = 0; l < width; ++l)
                                      sum_sequences<1>(from + l * lane_stride, lane_stride, step, extent,
                                                       divisor, to + l * (along_inner ? 1 : inner), 1);
                              }
                          }
                      });
}

}  // namespace anvil::detail::cpu
