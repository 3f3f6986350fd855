// anvil: adamw's definitions (see adamw.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "anvil/core/cpu_features.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/core/thread_pool.hpp"
#include "anvil/train/adamw.hpp"
#include "anvil/train/optimizer.hpp"

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define ANVIL_DETAIL_ADAMW_X86 1
#include <immintrin.h>
#endif

namespace anvil::detail::adamw_kernel {

// x, opaque to the optimiser: GCC's default -ffp-contract=fast fuses a product into a later sum (one FMA, one
// rounding) even across statements wherever FMA exists (an AVX2 kernel, every arm64), but torch rounds
// param * (1 - lr * weight_decay) before adding the step to it (param.mul_ is a kernel of its own), and so
// must this.
#if defined(__x86_64__)
#define ANVIL_DETAIL_ROUNDED(x) __asm__("" : "+x"(x))
#elif defined(__aarch64__)
#define ANVIL_DETAIL_ROUNDED(x) __asm__("" : "+w"(x))
#else
#define ANVIL_DETAIL_ROUNDED(x) __asm__("" : "+m"(x))
#endif

// One element after another, each operation rounded as torch's foreach=False kernels round it. `Variant` only
// makes separate copies: the AVX2 one below finishes its remainder with this loop compiled with FMA (in the
// baseline std::fma is a libm call per element; the scalar update was a twentieth of a BERT-base step).
// Every operation is correctly rounded (fma, sqrt, division), so every variant gives the same bits.
template <int Variant>
inline void update(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, std::size_t count,
                   const scalars& k) {
    for (std::size_t i = 0; i < count; ++i) {
        const float g = grad[i];
        // param.mul_(1 - lr * weight_decay)
        float p = param[i] * k.decay;
        ANVIL_DETAIL_ROUNDED(p);
        // exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1): two kernels, the second fused
        const float m = std::fma(g, k.one_minus_beta1, exp_avg[i] * k.beta1);
        // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2): (value * g) * g + v, fused
        const float v = std::fma(k.one_minus_beta2 * g, g, exp_avg_sq[i] * k.beta2);
        // denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
        const float denom = std::sqrt(v) / k.correction2_sqrt + k.eps;
        // param.addcdiv_(exp_avg, denom, value=-step_size): p + (value * m) / denom
        param[i] = p + k.minus_step_size * m / denom;
        exp_avg[i] = m;
        exp_avg_sq[i] = v;
    }
}

#if defined(ANVIL_DETAIL_ADAMW_X86)
// Eight elements at a time, each operation the scalar loop's (so the same bits; the compiler keeps that loop
// scalar itself, as std::sqrt may set errno), then the remainder through that loop.
__attribute__((target("avx2,fma"))) inline void update_avx2(float* param, const float* grad, float* exp_avg,
                                                            float* exp_avg_sq, std::size_t count,
                                                            const scalars& k) {
    const __m256 decay = _mm256_set1_ps(k.decay), beta1 = _mm256_set1_ps(k.beta1),
                 one_minus_beta1 = _mm256_set1_ps(k.one_minus_beta1), beta2 = _mm256_set1_ps(k.beta2),
                 one_minus_beta2 = _mm256_set1_ps(k.one_minus_beta2),
                 correction2_sqrt = _mm256_set1_ps(k.correction2_sqrt), eps = _mm256_set1_ps(k.eps),
                 minus_step_size = _mm256_set1_ps(k.minus_step_size);
    std::size_t i = 0;
    for (; i + 8 <= count; i += 8) {
        const __m256 g = _mm256_loadu_ps(grad + i);
        __m256 p = _mm256_mul_ps(_mm256_loadu_ps(param + i), decay);
        ANVIL_DETAIL_ROUNDED(p);
        const __m256 m =
            _mm256_fmadd_ps(g, one_minus_beta1, _mm256_mul_ps(_mm256_loadu_ps(exp_avg + i), beta1));
        const __m256 v = _mm256_fmadd_ps(_mm256_mul_ps(one_minus_beta2, g), g,
                                         _mm256_mul_ps(_mm256_loadu_ps(exp_avg_sq + i), beta2));
        const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), correction2_sqrt), eps);
        _mm256_storeu_ps(param + i,
                         _mm256_add_ps(p, _mm256_div_ps(_mm256_mul_ps(minus_step_size, m), denom)));
        _mm256_storeu_ps(exp_avg + i, m);
        _mm256_storeu_ps(exp_avg_sq + i, v);
    }
    update<1>(param + i, grad + i, exp_avg + i, exp_avg_sq + i, count - i, k);
}
#endif

ANVIL_INLINE void run_portable(float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                               std::size_t count, const scalars& k) {
    update<0>(param, grad, exp_avg, exp_avg_sq, count, k);
}

ANVIL_INLINE void run(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, std::size_t count,
                      const scalars& k) {
#if defined(ANVIL_DETAIL_ADAMW_X86)
    if (host_cpu_features().avx2_fma) return update_avx2(param, grad, exp_avg, exp_avg_sq, count, k);
#endif
    run_portable(param, grad, exp_avg, exp_avg_sq, count, k);
}

}  // namespace anvil::detail::adamw_kernel

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
    const anvil::detail::adamw_kernel::scalars k{static_cast<float>(decay),
                                                 static_cast<float>(options.beta1),
                                                 static_cast<float>(1.0 - options.beta1),
                                                 static_cast<float>(options.beta2),
                                                 static_cast<float>(1.0 - options.beta2),
                                                 static_cast<float>(bias_correction2_sqrt),
                                                 static_cast<float>(options.eps),
                                                 static_cast<float>(-step_size)};
    // Each element's update reads only its own values (the vector and scalar paths give the same bits), so
    // chunks on the process's threads change nothing but the time.
    constexpr std::size_t chunk = std::size_t{1} << 16;
    const std::size_t count = param.size();
    thread_pool::global().parallel_for(
        0, (count + chunk - 1) / chunk, 1, [&](std::size_t first, std::size_t last) {
            const std::size_t begin = first * chunk, end = std::min(count, last * chunk);
            anvil::detail::adamw_kernel::run(param.data() + begin, grad.data() + begin,
                                             exp_avg.data() + begin, exp_avg_sq.data() + begin, end - begin,
                                             k);
        });
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
