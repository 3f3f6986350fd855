// anvil: AdamW as torch.optim.AdamW (PyTorch 1.13, amsgrad and maximize off): decoupled weight decay, then
// Adam's bias-corrected moments. A functional core over one tensor's floats (torch's _single_tensor_adamw)
// and the optimizer the training loop drives (train/optimizer.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "anvil/compilation.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/train/optimizer.hpp"

namespace anvil::detail::adamw_kernel {

// The float32 scalars of one AdamW update, as torch's kernels take them.
struct scalars {
    float decay, beta1, one_minus_beta1, beta2, one_minus_beta2, correction2_sqrt, eps, minus_step_size;
};

// The update over `count` elements with the widest instructions this CPU has (AVX2 with FMA on x86), and the
// same loop compiled for the baseline; both give the same bits (adamw-inl.hpp says why).
void run(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, std::size_t count,
         const scalars& k);
void run_portable(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, std::size_t count,
                  const scalars& k);

}  // namespace anvil::detail::adamw_kernel

namespace anvil::train {

// torch.optim.AdamW's options (its defaults) less lr (the schedule gives it each step), amsgrad and maximize.
struct adamw_options {
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = 1e-2;  // p *= 1 - lr * weight_decay, for parameters whose weight_decay flag is set
};

// Throws anvil::error where torch.optim.AdamW raises: a beta outside [0, 1), a negative eps or weight_decay
// (NaN fails every check).
void check_options(const adamw_options& options);

// One AdamW step of one tensor, torch's _single_tensor_adamw with the float32 operations in its order (its
// CPU kernels fuse `a.add(b, alpha)` and addcmul into one fma each). step counts from 1 (torch increments its
// step before using it); options.weight_decay is this tensor's decay. exp_avg and exp_avg_sq start at zero.
void adamw_update(std::span<float> param, std::span<const float> grad, std::span<float> exp_avg,
                  std::span<float> exp_avg_sq, std::int64_t step, double lr, const adamw_options& options);

class adamw final : public optimizer {
public:
    // Checks the options (check_options) and the parameters (optimizer's constructor). The state holds
    // "exp_avg.<parameter>" and "exp_avg_sq.<parameter>".
    adamw(std::vector<parameter> parameters, const adamw_options& options = {});

    [[nodiscard]] const adamw_options& options() const noexcept { return options_; }

private:
    // ANVIL_INLINE in the class too: otherwise this would be the key function and every includer would emit
    // the vtable (tests/headers_emit_no_code.py).
    ANVIL_INLINE void update(const parameter& param, std::span<float> value, std::span<const float> grad,
                             std::span<host_tensor> buffers, double lr, std::int64_t step) override;

    adamw_options options_;
};

}  // namespace anvil::train

#if ANVIL_DEFINITIONS
#include "anvil/train/adamw-inl.hpp"
#endif
