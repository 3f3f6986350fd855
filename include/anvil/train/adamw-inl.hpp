// anvil: adamw's definitions (see adamw.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/train/adamw.hpp"
#include "anvil/train/optimizer.hpp"

namespace anvil::train {

ANVIL_INLINE void check_options(const adamw_options& options) {
    for (const auto& [beta, name] : {std::pair{options.beta1, "beta1"}, std::pair{options.beta2, "beta2"}}) {
        if (!(beta >= 0.0 && beta < 1.0)) {
            throw error(detail::message("adamw: invalid ", name, " ", beta, " (it must be in [0, 1))"));
        }
    }
    detail::optimizers::check_non_negative("adamw", "eps", options.eps);
    detail::optimizers::check_non_negative("adamw", "weight_decay", options.weight_decay);
}

ANVIL_INLINE void adamw_update(std::span<float> param, std::span<const float> grad, std::span<float> exp_avg,
                               std::span<float> exp_avg_sq, std::int64_t step, double lr,
                               const adamw_options& options) {
    if (grad.size() != param.size() || exp_avg.size() != param.size() || exp_avg_sq.size() != param.size()) {
        throw shape_error(detail::message("adamw_update: ", param.size(), " parameters, ", grad.size(),
                                          " gradients, ", exp_avg.size(), " and ", exp_avg_sq.size(),
                                          " moments"));
    }
    if (step < 1) throw error(detail::message("adamw_update: step ", step, " (steps count from 1)"));
    // The scalars in double, as Python computes them, each statement apart so that no compiler fuses them.
    const double decay_product = lr * options.weight_decay;
    const double decay = 1.0 - decay_product;
    const double bias_correction1 = 1.0 - std::pow(options.beta1, static_cast<double>(step));
    const double bias_correction2 = 1.0 - std::pow(options.beta2, static_cast<double>(step));
    const double step_size = lr / bias_correction1;
    const double bias_correction2_sqrt = std::sqrt(bias_correction2);
    // torch's kernels then take each scalar as float32.
    const auto decay_f = static_cast<float>(decay);
    const auto beta1 = static_cast<float>(options.beta1);
    const auto one_minus_beta1 = static_cast<float>(1.0 - options.beta1);
    const auto beta2 = static_cast<float>(options.beta2);
    const auto one_minus_beta2 = static_cast<float>(1.0 - options.beta2);
    const auto correction2_sqrt = static_cast<float>(bias_correction2_sqrt);
    const auto eps = static_cast<float>(options.eps);
    const auto minus_step_size = static_cast<float>(-step_size);
    for (std::size_t i = 0; i < param.size(); ++i) {
        const float g = grad[i];
        // param.mul_(1 - lr * weight_decay)
        const float p = param[i] * decay_f;
        // exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1): two kernels, the second fused
        const float m = std::fma(g, one_minus_beta1, exp_avg[i] * beta1);
        // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2): (value * g) * g + v, fused
        const float v = std::fma(one_minus_beta2 * g, g, exp_avg_sq[i] * beta2);
        // denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
        const float denom = std::sqrt(v) / correction2_sqrt + eps;
        // param.addcdiv_(exp_avg, denom, value=-step_size): p + (value * m) / denom
        param[i] = p + minus_step_size * m / denom;
        exp_avg[i] = m;
        exp_avg_sq[i] = v;
    }
}

ANVIL_INLINE adamw::adamw(std::vector<parameter> parameters, const adamw_options& options)
    : optimizer("adamw", std::move(parameters), {"exp_avg", "exp_avg_sq"}), options_(options) {
    check_options(options_);
}

ANVIL_INLINE void adamw::update(const parameter& param, std::span<float> value, std::span<const float> grad,
                                std::span<host_tensor> buffers, double lr, std::int64_t step) {
    auto options = options_;
    if (!param.weight_decay) options.weight_decay = 0.0;
    adamw_update(value, grad, buffers[0].values<float>(), buffers[1].values<float>(), step, lr, options);
}

}  // namespace anvil::train
