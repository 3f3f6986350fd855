// anvil: the interface the training loop drives every optimizer through (train/sgd.hpp, train/adamw.hpp), in
// the manner of torch.optim: the trainable parameters, step(grads, lr) with the learning rate the schedule
// gives for this step, and the state as plain data (named f32 tensors and a step count) that a checkpoint
// saves and loads back bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "anvil/compilation.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/host_tensor.hpp"

namespace anvil::train {

// One trainable tensor. `value` holds the fp32 master weights; host_tensor copies share their elements, so
// the optimizer updates the caller's tensor in place (its elements must be writable: not a read-only
// mapping). A frozen tensor is simply not given to the optimizer.
struct parameter {
    std::string name;
    host_tensor value;
    // Hugging Face's Trainer keeps biases and LayerNorm weights out of weight decay, so decay is chosen per
    // parameter: false means the optimizer's weight_decay does not apply to this tensor.
    bool weight_decay = true;
};

// Everything an optimizer carries from one step to the next, as plain data. Buffers are named
// "<buffer>.<parameter name>" ("exp_avg.encoder.dense.weight"), are f32 with their parameter's shape, and
// exist only after the first step (as torch creates its per-parameter state lazily).
struct optimizer_state {
    std::string name;       // "sgd" or "adamw": a state loads only into the optimizer that wrote it
    std::int64_t step = 0;  // optimizer steps taken
    std::vector<named_tensor> tensors;
};

class optimizer {
public:
    virtual ~optimizer() = default;
    // Copies would share their buffers (host_tensor copies share elements); move an optimizer instead.
    optimizer(const optimizer&) = delete;
    optimizer& operator=(const optimizer&) = delete;
    optimizer(optimizer&&) noexcept = default;
    optimizer& operator=(optimizer&&) noexcept = default;

    [[nodiscard]] std::string_view name() const noexcept { return name_; }
    [[nodiscard]] const std::vector<parameter>& parameters() const noexcept { return parameters_; }
    [[nodiscard]] std::int64_t steps_taken() const noexcept { return step_; }

    // One update of every parameter: grads[i] (f32, the shape of parameters()[i]) is its gradient and lr the
    // learning rate of this step (the schedule's; 0 during the first warmup step, which still counts). Every
    // gradient is checked before any parameter changes.
    void step(std::span<const host_tensor> grads, double lr);

    // A copy of the state: later steps do not change it.
    [[nodiscard]] optimizer_state state() const;
    // Replaces the state with a copy of `saved` (checked whole first: optimizer, step count, every buffer's
    // name, dtype and shape) so that training continues exactly as it would have.
    void load_state(const optimizer_state& saved);

protected:
    // buffer_names: what the optimizer keeps per parameter (AdamW: exp_avg, exp_avg_sq). Throws for a
    // parameter that is not f32 and for a repeated or empty name.
    optimizer(std::string name, std::vector<parameter> parameters, std::vector<std::string> buffer_names);

    // The update of one parameter at step `step` (1 on the first). `buffers` are that parameter's buffers in
    // buffer_names order, zero-filled before the first step.
    virtual void update(const parameter& param, std::span<float> value, std::span<const float> grad,
                        std::span<host_tensor> buffers, double lr, std::int64_t step) = 0;

private:
    [[nodiscard]] std::string buffer_name(std::size_t buffer, std::size_t param) const;

    std::string name_;
    std::vector<parameter> parameters_;
    std::vector<std::string> buffer_names_;
    std::vector<std::vector<host_tensor>> buffers_;  // [parameter][buffer]; empty before the first step
    std::int64_t step_ = 0;
};

}  // namespace anvil::train

namespace anvil::detail::optimizers {

// A new tensor with the same elements (host_tensor copies share theirs).
[[nodiscard]] host_tensor deep_copy(const host_tensor& tensor);

// Checks what torch.optim checks of a hyperparameter that must be >= 0 (NaN fails too).
void check_non_negative(std::string_view optimizer, std::string_view what, double value);

}  // namespace anvil::detail::optimizers

#if ANVIL_DEFINITIONS
#include "anvil/train/optimizer-inl.hpp"
#endif
