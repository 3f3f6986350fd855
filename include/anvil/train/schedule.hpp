// anvil: learning-rate schedules as Hugging Face transformers defines them (optimization.py's
// get_constant_schedule_with_warmup, get_linear_schedule_with_warmup, get_cosine_schedule_with_warmup with
// num_cycles 0.5), applied as torch's LambdaLR applies them: the learning rate of step s (counted from 0) is
// base_lr * lambda(s). Step 0 of a warmup has learning rate 0 and still counts as a step.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "anvil/compilation.hpp"

namespace anvil::train {

enum class schedule_kind {
    constant,  // linear warmup from 0, then base_lr
    linear,    // linear warmup, then linearly down to 0 at training_steps (and 0 after)
    cosine,    // linear warmup, then half a cosine down to 0 at training_steps (rising again after, as in HF)
};

// The names the command line takes, in schedule_kind's order.
inline constexpr std::array<std::string_view, 3> schedule_names{"constant", "linear", "cosine"};

[[nodiscard]] std::string_view schedule_name(schedule_kind kind) noexcept;

// "constant", "linear" or "cosine"; anything else throws anvil::error listing these.
[[nodiscard]] schedule_kind parse_schedule_kind(std::string_view name);

class lr_schedule {
public:
    // Throws anvil::error for a negative (or NaN) base_lr, negative warmup_steps or training_steps.
    // training_steps is where linear and cosine reach 0; constant does not use it.
    lr_schedule(schedule_kind kind, double base_lr, std::int64_t warmup_steps, std::int64_t training_steps);
    // The kind by its command-line name (parse_schedule_kind).
    lr_schedule(std::string_view kind, double base_lr, std::int64_t warmup_steps,
                std::int64_t training_steps);

    // transformers' lr_lambda(step), in double as Python computes it. Throws for a negative step.
    [[nodiscard]] double multiplier(std::int64_t step) const;
    // base_lr * multiplier(step): the learning rate optimizer step `step` (from 0) uses.
    [[nodiscard]] double learning_rate(std::int64_t step) const { return base_lr_ * multiplier(step); }

    [[nodiscard]] schedule_kind kind() const noexcept { return kind_; }
    [[nodiscard]] double base_lr() const noexcept { return base_lr_; }
    [[nodiscard]] std::int64_t warmup_steps() const noexcept { return warmup_steps_; }
    [[nodiscard]] std::int64_t training_steps() const noexcept { return training_steps_; }

private:
    schedule_kind kind_;
    double base_lr_;
    std::int64_t warmup_steps_;
    std::int64_t training_steps_;
};

}  // namespace anvil::train

#if ANVIL_DEFINITIONS
#include "anvil/train/schedule-inl.hpp"
#endif
