// anvil: stochastic gradient descent as torch.optim.SGD (PyTorch 1.13): momentum with dampening, Nesterov
// momentum and L2 weight decay added to the gradient. A functional core over one tensor's floats
// (torch's _single_tensor_sgd) and the optimizer the training loop drives (train/optimizer.hpp).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "anvil/compilation.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/train/optimizer.hpp"

namespace anvil::train {

// torch.optim.SGD's options less lr (the schedule gives it each step) and maximize.
struct sgd_options {
    double momentum = 0.0;
    double dampening = 0.0;
    double weight_decay =
        0.0;  // L2: d_p = g + weight_decay * p, for parameters whose weight_decay flag is set
    bool nesterov = false;
};

// Throws anvil::error where torch.optim.SGD raises: negative (or NaN) momentum or weight_decay; Nesterov
// without momentum or with dampening.
void check_options(const sgd_options& options);

// One SGD step of one tensor, torch's _single_tensor_sgd with the float32 operations in its order (its CPU
// kernels fuse `a.add(b, alpha)` into fma(b, alpha, a)). options.weight_decay is this tensor's decay.
// momentum_buffer has the tensor's size when options.momentum != 0 and is otherwise unused; on the first step
// it is overwritten with d_p, as torch clones d_p into a new buffer.
void sgd_update(std::span<float> param, std::span<const float> grad, std::span<float> momentum_buffer,
                bool first_step, double lr, const sgd_options& options);

class sgd final : public optimizer {
public:
    // Checks the options (check_options) and the parameters (optimizer's constructor).
    sgd(std::vector<parameter> parameters, const sgd_options& options);

    [[nodiscard]] const sgd_options& options() const noexcept { return options_; }

private:
    // ANVIL_INLINE in the class too: otherwise this would be the key function and every includer would emit
    // the vtable (tests/headers_emit_no_code.py).
    ANVIL_INLINE void update(const parameter& param, std::span<float> value, std::span<const float> grad,
                             std::span<host_tensor> buffers, double lr, std::int64_t step) override;

    sgd_options options_;
};

}  // namespace anvil::train

#if ANVIL_DEFINITIONS
#include "anvil/train/sgd-inl.hpp"
#endif
