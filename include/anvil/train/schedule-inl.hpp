// anvil: lr_schedule's definitions (see schedule.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>
#include <string>
#include <string_view>

#include "anvil/core/error.hpp"
#include "anvil/train/schedule.hpp"

namespace anvil::train {

ANVIL_INLINE std::string_view schedule_name(schedule_kind kind) noexcept {
    return schedule_names[static_cast<std::size_t>(kind)];
}

ANVIL_INLINE schedule_kind parse_schedule_kind(std::string_view name) {
    for (std::size_t i = 0; i < schedule_names.size(); ++i) {
        if (schedule_names[i] == name) return static_cast<schedule_kind>(i);
    }
    std::string valid;
    for (const auto known : schedule_names)
        valid += (valid.empty() ? "" : ", ") + std::string(known);
    throw error(detail::message("unknown learning-rate schedule '", name, "' (valid: ", valid, ")"));
}

ANVIL_INLINE lr_schedule::lr_schedule(schedule_kind kind, double base_lr, std::int64_t warmup_steps,
                                      std::int64_t training_steps)
    : kind_(kind), base_lr_(base_lr), warmup_steps_(warmup_steps), training_steps_(training_steps) {
    const auto name = schedule_name(kind);
    if (!(base_lr >= 0.0)) {
        throw error(
            detail::message(name, " schedule: invalid learning rate ", base_lr, " (it must be >= 0)"));
    }
    if (warmup_steps < 0 || training_steps < 0) {
        throw error(detail::message(name, " schedule: warmup steps (", warmup_steps, ") and training steps (",
                                    training_steps, ") must be >= 0"));
    }
}

ANVIL_INLINE lr_schedule::lr_schedule(std::string_view kind, double base_lr, std::int64_t warmup_steps,
                                      std::int64_t training_steps)
    : lr_schedule(parse_schedule_kind(kind), base_lr, warmup_steps, training_steps) {}

ANVIL_INLINE double lr_schedule::multiplier(std::int64_t step) const {
    if (step < 0) {
        throw error(detail::message(schedule_name(kind_), " schedule: step ", step, " (steps count from 0)"));
    }
    // transformers' lambdas, operation for operation: max(1, ...) keeps warmup 0 and training_steps ==
    // warmup_steps from dividing by zero.
    if (step < warmup_steps_) {
        return static_cast<double>(step) / static_cast<double>(std::max<std::int64_t>(1, warmup_steps_));
    }
    const auto decay_steps = static_cast<double>(std::max<std::int64_t>(1, training_steps_ - warmup_steps_));
    switch (kind_) {
        case schedule_kind::constant:
            return 1.0;
        case schedule_kind::linear:
            return std::max(0.0, static_cast<double>(training_steps_ - step) / decay_steps);
        case schedule_kind::cosine: {
            constexpr double num_cycles = 0.5;
            const double progress = static_cast<double>(step - warmup_steps_) / decay_steps;
            return std::max(0.0, 0.5 * (1.0 + std::cos(std::numbers::pi * num_cycles * 2.0 * progress)));
        }
    }
    return 1.0;
}

}  // namespace anvil::train
