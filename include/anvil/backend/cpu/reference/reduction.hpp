// anvil: the reference reductions — reduce_sum, reduce_mean, reduce_max and argmax over the canonical axes
// shape inference leaves (non-negative, sorted). keep_dims only changes the output's shape, not its layout.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "anvil/backend/cpu/tensor_span.hpp"
#include "anvil/core/error.hpp"
#include "anvil/graph/op.hpp"

namespace anvil::detail::cpu::reference {

// Strides that map an input multi-index to the output offset: the kept axes' row-major strides in the
// output, 0 for the reduced axes.
[[nodiscard]] inline stride_array reduced_output_strides(const dims& input,
                                                         std::span<const std::int64_t> axes) {
    stride_array strides{};
    std::int64_t stride = 1;
    for (std::size_t axis = input.rank(); axis-- > 0;) {
        const bool reduced =
            std::find(axes.begin(), axes.end(), static_cast<std::int64_t>(axis)) != axes.end();
        if (reduced) continue;
        strides[axis] = stride;
        stride *= input[axis];
    }
    return strides;
}

// Calls body(input offset, output offset, input multi-index) for every input element, in row-major order.
template <class Body>
void for_each_reduced(const dims& input, std::span<const std::int64_t> axes, Body body) {
    if (count_of(input) == 0) return;
    const stride_array out_strides = reduced_output_strides(input, axes);
    index_array index{};
    std::int64_t offset = 0;
    do {
        body(offset++, offset_of(index, out_strides, input.rank()), index);
    } while (next_index(index, input));
}

// reduce_sum and reduce_mean; the mean of nothing is NaN (0 / 0), as in torch.mean.
inline void reduce_sum_or_mean(op kind, const_tensor_span x, std::span<const std::int64_t> axes,
                               tensor_span out) {
    const std::int64_t outputs = count_of(out.shape);
    std::vector<double> sums(static_cast<std::size_t>(outputs), 0.0);
    for_each_reduced(x.shape, axes, [&](std::int64_t in, std::int64_t o, const index_array&) {
        sums[static_cast<std::size_t>(o)] += x.data[in];
    });
    std::int64_t reduced_count = 1;
    for (const std::int64_t axis : axes)
        reduced_count *= x.shape[static_cast<std::size_t>(axis)];
    for (std::int64_t o = 0; o < outputs; ++o) {
        double result = sums[static_cast<std::size_t>(o)];
        if (kind == op::reduce_mean) result /= static_cast<double>(reduced_count);
        out.data[o] = static_cast<float>(result);
    }
}

inline void reduce_sum(const_tensor_span x, std::span<const std::int64_t> axes, tensor_span out) {
    reduce_sum_or_mean(op::reduce_sum, x, axes, out);
}

inline void reduce_mean(const_tensor_span x, std::span<const std::int64_t> axes, tensor_span out) {
    reduce_sum_or_mean(op::reduce_mean, x, axes, out);
}

// NaN propagates, as in torch.amax. Shape inference rejects reducing an empty axis.
inline void reduce_max(const_tensor_span x, std::span<const std::int64_t> axes, tensor_span out) {
    const std::int64_t outputs = count_of(out.shape);
    for (std::int64_t o = 0; o < outputs; ++o)
        out.data[o] = -std::numeric_limits<float>::infinity();
    for_each_reduced(x.shape, axes, [&](std::int64_t in, std::int64_t o, const index_array&) {
        const float v = x.data[in];
        if (v > out.data[o] || std::isnan(v)) {
            if (!std::isnan(out.data[o])) out.data[o] = v;
        }
    });
}

// The index along `axis` of the first maximal element (NaN counts as the largest, as in torch.argmax),
// stored as a float.
inline void argmax(const_tensor_span x, std::int64_t axis, tensor_span out) {
    const std::int64_t outputs = count_of(out.shape);
    std::vector<float> best(static_cast<std::size_t>(outputs), -std::numeric_limits<float>::infinity());
    std::vector<bool> seen(static_cast<std::size_t>(outputs), false);
    const std::int64_t axes[1] = {axis};
    for_each_reduced(x.shape, axes, [&](std::int64_t in, std::int64_t o, const index_array& index) {
        const auto slot = static_cast<std::size_t>(o);
        const float v = x.data[in];
        // Row-major order visits a row's elements by increasing index, so a strict comparison keeps the
        // first.
        const bool better = !seen[slot] || (!std::isnan(best[slot]) && (v > best[slot] || std::isnan(v)));
        if (better) {
            best[slot] = v;
            seen[slot] = true;
            out.data[o] = static_cast<float>(index[static_cast<std::size_t>(axis)]);
        }
    });
}

}  // namespace anvil::detail::cpu::reference
