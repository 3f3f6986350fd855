// anvil: the reference reductions — reduce_sum, reduce_mean, reduce_max, reduce_min, reduce_prod and argmax
// over the canonical axes shape inference leaves (non-negative, sorted); keep_dims only changes the output's
// shape, not its layout — and the cumulative sum along one axis.
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
template <class T>
void reduce_sum_or_mean(op kind, operand_span<T> x, std::span<const std::int64_t> axes,
                        basic_tensor_span<T> out) {
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
        out.data[o] = static_cast<T>(result);
    }
}

template <class T>
void reduce_sum(operand_span<T> x, std::span<const std::int64_t> axes, basic_tensor_span<T> out) {
    reduce_sum_or_mean<T>(op::reduce_sum, x, axes, out);
}

template <class T>
void reduce_mean(operand_span<T> x, std::span<const std::int64_t> axes, basic_tensor_span<T> out) {
    reduce_sum_or_mean<T>(op::reduce_mean, x, axes, out);
}

// NaN propagates, as in torch.amax. Shape inference rejects reducing an empty axis.
template <class T>
void reduce_max(operand_span<T> x, std::span<const std::int64_t> axes, basic_tensor_span<T> out) {
    const std::int64_t outputs = count_of(out.shape);
    for (std::int64_t o = 0; o < outputs; ++o)
        out.data[o] = -std::numeric_limits<T>::infinity();
    for_each_reduced(x.shape, axes, [&](std::int64_t in, std::int64_t o, const index_array&) {
        const T v = x.data[in];
        if (v > out.data[o] || std::isnan(v)) {
            if (!std::isnan(out.data[o])) out.data[o] = v;
        }
    });
}

// NaN propagates, as in reduce_max and torch.amin. Shape inference rejects reducing an empty axis.
template <class T>
void reduce_min(operand_span<T> x, std::span<const std::int64_t> axes, basic_tensor_span<T> out) {
    const std::int64_t outputs = count_of(out.shape);
    for (std::int64_t o = 0; o < outputs; ++o)
        out.data[o] = std::numeric_limits<T>::infinity();
    for_each_reduced(x.shape, axes, [&](std::int64_t in, std::int64_t o, const index_array&) {
        const T v = x.data[in];
        if (v < out.data[o] || std::isnan(v)) {
            if (!std::isnan(out.data[o])) out.data[o] = v;
        }
    });
}

// Accumulated in double, as reduce_sum; the product of nothing is 1, as in torch.prod.
template <class T>
void reduce_prod(operand_span<T> x, std::span<const std::int64_t> axes, basic_tensor_span<T> out) {
    std::vector<double> products(static_cast<std::size_t>(count_of(out.shape)), 1.0);
    for_each_reduced(x.shape, axes, [&](std::int64_t in, std::int64_t o, const index_array&) {
        products[static_cast<std::size_t>(o)] *= x.data[in];
    });
    for (std::size_t o = 0; o < products.size(); ++o)
        out.data[o] = static_cast<T>(products[o]);
}

// The index along `axis` of the first maximal element (NaN counts as the largest, as in torch.argmax),
// stored as a float (or double).
template <class T>
void argmax(operand_span<T> x, std::int64_t axis, basic_tensor_span<T> out) {
    const std::int64_t outputs = count_of(out.shape);
    std::vector<T> best(static_cast<std::size_t>(outputs), -std::numeric_limits<T>::infinity());
    std::vector<bool> seen(static_cast<std::size_t>(outputs), false);
    const std::int64_t axes[1] = {axis};
    for_each_reduced(x.shape, axes, [&](std::int64_t in, std::int64_t o, const index_array& index) {
        const auto slot = static_cast<std::size_t>(o);
        const T v = x.data[in];
        // Row-major order visits a row's elements by increasing index, so a strict comparison keeps the
        // first.
        const bool better = !seen[slot] || (!std::isnan(best[slot]) && (v > best[slot] || std::isnan(v)));
        if (better) {
            best[slot] = v;
            seen[slot] = true;
            out.data[o] = static_cast<T>(index[static_cast<std::size_t>(axis)]);
        }
    });
}

// The running sum along `axis`, accumulated in double (as torch.cumsum on the CPU): exclusive leaves each
// element out of its own sum (so the first is 0), reverse runs from the end of the axis (ONNX's CumSum).
template <class T>
void cumsum(operand_span<T> x, std::int64_t axis, bool exclusive, bool reverse, basic_tensor_span<T> out) {
    const auto axis_index = static_cast<std::size_t>(axis);
    const std::int64_t outer = extent_product(x.shape, 0, axis_index);
    const std::int64_t extent = x.shape[axis_index];
    const std::int64_t inner = extent_product(x.shape, axis_index + 1, x.shape.rank());
    for (std::int64_t o = 0; o < outer; ++o) {
        for (std::int64_t i = 0; i < inner; ++i) {
            double sum = 0.0;
            for (std::int64_t step = 0; step < extent; ++step) {
                const std::int64_t k = reverse ? extent - 1 - step : step;
                const std::int64_t at = (o * extent + k) * inner + i;
                if (!exclusive) sum += x.data[at];
                out.data[at] = static_cast<T>(sum);
                if (exclusive) sum += x.data[at];
            }
        }
    }
}

}  // namespace anvil::detail::cpu::reference
