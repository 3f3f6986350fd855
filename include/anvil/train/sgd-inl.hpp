// anvil: sgd's definitions (see sgd.hpp; compilation.hpp says when this file is compiled).
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
#include "anvil/train/optimizer.hpp"
#include "anvil/train/sgd.hpp"

namespace anvil::train {

ANVIL_INLINE void check_options(const sgd_options& options) {
    detail::optimizers::check_non_negative("sgd", "momentum", options.momentum);
    detail::optimizers::check_non_negative("sgd", "weight_decay", options.weight_decay);
    if (options.nesterov && (options.momentum <= 0.0 || options.dampening != 0.0)) {
        throw error(
            detail::message("sgd: Nesterov momentum requires a momentum and zero dampening (momentum ",
                            options.momentum, ", dampening ", options.dampening, ")"));
    }
}

ANVIL_INLINE void sgd_update(std::span<float> param, std::span<const float> grad,
                             std::span<float> momentum_buffer, bool first_step, double lr,
                             const sgd_options& options) {
    const bool use_momentum = options.momentum != 0.0;
    if (grad.size() != param.size() || (use_momentum && momentum_buffer.size() != param.size())) {
        throw shape_error(detail::message("sgd_update: ", param.size(), " parameters, ", grad.size(),
                                          " gradients and ", momentum_buffer.size(), " momentum values"));
    }
    // torch turns each Python-float hyperparameter into a float32 scalar of the kernel (after computing
    // 1 - dampening and -lr in double).
    const auto weight_decay = static_cast<float>(options.weight_decay);
    const auto momentum = static_cast<float>(options.momentum);
    const auto one_minus_dampening = static_cast<float>(1.0 - options.dampening);
    const auto minus_lr = static_cast<float>(-lr);
    for (std::size_t i = 0; i < param.size(); ++i) {
        float d_p = grad[i];
        if (options.weight_decay != 0.0) d_p = std::fma(param[i], weight_decay, d_p);
        if (use_momentum) {
            float& buf = momentum_buffer[i];
            // buf.mul_(momentum) is a kernel of its own, so its product is rounded before the fused add.
            buf = first_step ? d_p : std::fma(d_p, one_minus_dampening, buf * momentum);
            d_p = options.nesterov ? std::fma(buf, momentum, d_p) : buf;
        }
        param[i] = std::fma(d_p, minus_lr, param[i]);
    }
}

ANVIL_INLINE sgd::sgd(std::vector<parameter> parameters, const sgd_options& options)
    : optimizer(
          "sgd", std::move(parameters),
          options.momentum != 0.0 ? std::vector<std::string>{"momentum_buffer"} : std::vector<std::string>{}),
      options_(options) {
    check_options(options_);
}

ANVIL_INLINE void sgd::update(const parameter& param, std::span<float> value, std::span<const float> grad,
                              std::span<host_tensor> buffers, double lr, std::int64_t step) {
    auto options = options_;
    if (!param.weight_decay) options.weight_decay = 0.0;
    sgd_update(value, grad, buffers.empty() ? std::span<float>{} : buffers[0].values<float>(), step == 1, lr,
               options);
}

}  // namespace anvil::train
