// anvil: clip_grad_norm's definitions (see clip.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <cmath>
#include <cstddef>
#include <span>

#include "anvil/core/dtype.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/train/clip.hpp"

namespace anvil::train {

ANVIL_INLINE float global_grad_norm(std::span<const host_tensor> grads) {
    double total_squares = 0.0;
    for (std::size_t i = 0; i < grads.size(); ++i) {
        if (grads[i].type() != dtype::f32) {
            throw type_error(detail::message("clip_grad_norm: gradient ", i, " holds ",
                                             dtype_name(grads[i].type()), ", not f32"));
        }
        double squares = 0.0;
        for (const float x : grads[i].values<float>()) {
            const double wide = x;
            squares += wide * wide;
        }
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
