// anvil: clip_grad_norm's definitions (see clip.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <vector>

#include "anvil/core/dtype.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/core/thread_pool.hpp"
#include "anvil/train/clip.hpp"

namespace anvil::detail {

// A tensor's sum of squares in double, in blocks of a fixed size summed in order, each block with four
// running sums: the same bits on any number of threads. One running sum over BERT-base's 110M gradients
// waited on the previous add for every element (about 0.1 s a step, on one thread whatever the count).
ANVIL_INLINE double sum_of_squares(std::span<const float> values) {
    constexpr std::size_t block = std::size_t{1} << 14;
    const std::size_t blocks = (values.size() + block - 1) / block;
    std::vector<double> partial(blocks, 0.0);
    thread_pool::global().parallel_for(0, blocks, 1, [&](std::size_t first, std::size_t last) {
        for (std::size_t b = first; b < last; ++b) {
            const std::size_t begin = b * block, end = std::min(values.size(), begin + block);
            double sums[4] = {0.0, 0.0, 0.0, 0.0};
            std::size_t i = begin;
            for (; i + 4 <= end; i += 4) {
                for (std::size_t lane = 0; lane < 4; ++lane) {
                    const double wide = values[i + lane];
                    sums[lane] += wide * wide;
                }
            }
            for (; i < end; ++i) {
                const double wide = values[i];
                sums[0] += wide * wide;
            }
            partial[b] = (sums[0] + sums[1]) + (sums[2] + sums[3]);
        }
    });
    double total = 0.0;
    for (const double p : partial)
        total += p;
    return total;
}

}  // namespace anvil::detail

namespace anvil::train {

ANVIL_INLINE float global_grad_norm(std::span<const host_tensor> grads) {
    double total_squares = 0.0;
    for (std::size_t i = 0; i < grads.size(); ++i) {
        if (grads[i].type() != dtype::f32) {
            throw type_error(detail::message("clip_grad_norm: gradient ", i, " holds ",
                                             dtype_name(grads[i].type()), ", not f32"));
        }
        const double squares = detail::sum_of_squares(grads[i].values<float>());
        // torch.stack of per-tensor f32 norms: each is rounded before the outer norm.
        const double norm = static_cast<float>(std::sqrt(squares));
        total_squares += norm * norm;
    }
    return static_cast<float>(std::sqrt(total_squares));
}

ANVIL_INLINE float clip_grad_norm(std::span<host_tensor> grads, double max_norm) {
    if (!(max_norm >= 0.0)) {
        throw error(detail::message("clip_grad_norm: invalid max_norm ", max_norm, " (it must be >= 0)"));
    }
    const float total = global_grad_norm(grads);
    // clip_coef = max_norm / (total_norm + 1e-6) on an f32 tensor: Python's float / tensor is
    // tensor.reciprocal() * float, so the reciprocal is rounded before the product.
    const float reciprocal = 1.0f / (total + static_cast<float>(1e-6));
    const float coefficient = reciprocal * static_cast<float>(max_norm);
    // torch.clamp(clip_coef, max=1.0) keeps a NaN.
    const float clamped = std::isnan(coefficient) ? coefficient : std::fmin(coefficient, 1.0f);
    for (auto& grad : grads) {
        for (float& x : grad.values<float>())
            x *= clamped;
    }
    return total;
}

}  // namespace anvil::train
