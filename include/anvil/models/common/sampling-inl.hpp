// anvil: sampling's definitions (see sampling.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/models/common/sampling.hpp"

namespace anvil::models::recipe_detail {

ANVIL_INLINE void validate_sampling_options(const sampling_options& o) {
    if (!(o.temperature >= 0) || std::isinf(o.temperature))
        throw error(anvil::detail::message(
            "sampling: temperature must be a finite number >= 0 (0 is greedy), got ", o.temperature));
    if (o.top_k < 0)
        throw error(anvil::detail::message("sampling: top_k must be >= 0 (0 is off), got ", o.top_k));
    if (!(o.top_p > 0 && o.top_p <= 1))
        throw error(anvil::detail::message("sampling: top_p must be in (0, 1] (1 is off), got ", o.top_p));
    if (!(o.repetition_penalty > 0) || std::isinf(o.repetition_penalty))
        throw error(anvil::detail::message(
            "sampling: repetition_penalty must be a finite number > 0 (1 is off), got ",
            o.repetition_penalty));
}

}  // namespace anvil::models::recipe_detail

namespace anvil::models {

ANVIL_INLINE sampler::sampler(const sampling_options& options) : options_(options), random_(options.seed) {
    recipe_detail::validate_sampling_options(options_);
}

ANVIL_INLINE std::int32_t sampler::next(std::span<const float> logits, std::span<const std::int32_t> seen) {
    if (logits.empty()) throw error("sampling: the row of logits is empty");
    if (logits.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
        throw error(
            anvil::detail::message("sampling: ", logits.size(), " logits is more than token ids can index"));
    scores_.resize(logits.size());
    for (std::size_t i = 0; i < logits.size(); ++i) {
        const float v = logits[i];
        if (std::isnan(v) || v == std::numeric_limits<float>::infinity())
            throw error(anvil::detail::message("sampling: logit of token ", i, " is ", v,
                                               "; expected a finite number or -inf"));
        scores_[i] = static_cast<double>(v);
    }
    if (options_.repetition_penalty != 1.0) apply_repetition_penalty(seen);
    if (greedy()) return argmax();

    const double inv_temperature = 1.0 / options_.temperature;
    for (double& s : scores_)
        s *= inv_temperature;
    if (options_.top_k > 0 && static_cast<std::size_t>(options_.top_k) < scores_.size()) apply_top_k();
    return draw();
}

ANVIL_INLINE void sampler::apply_repetition_penalty(std::span<const std::int32_t> seen) {
    const double p = options_.repetition_penalty;
    penalised_.assign(scores_.size(), false);
    for (const std::int32_t id : seen) {
        if (id < 0 || static_cast<std::size_t>(id) >= scores_.size())
            throw error(anvil::detail::message("sampling: seen token id ", id,
                                               " is outside the vocabulary [0, ", scores_.size(), ")"));
        const auto index = static_cast<std::size_t>(id);
        if (penalised_[index]) continue;  // once per token, however often it was seen
        penalised_[index] = true;
        double& s = scores_[index];
        s = s < 0 ? s * p : s / p;
    }
}

ANVIL_INLINE std::int32_t sampler::argmax() const {
    std::size_t best = 0;
    for (std::size_t i = 1; i < scores_.size(); ++i)
        if (scores_[i] > scores_[best]) best = i;
    if (scores_[best] == minus_infinity) throw error("sampling: every logit is -inf");
    return static_cast<std::int32_t>(best);
}

ANVIL_INLINE void sampler::apply_top_k() {
    order_ = scores_;
    const auto kth = order_.begin() + (options_.top_k - 1);
    std::nth_element(order_.begin(), kth, order_.end(), std::greater<>());
    const double threshold = *kth;
    for (double& s : scores_)
        if (s < threshold) s = minus_infinity;
}

ANVIL_INLINE std::int32_t sampler::draw() {
    const double top = *std::max_element(scores_.begin(), scores_.end());
    if (top == minus_infinity) throw error("sampling: every logit is -inf");
    probabilities_.resize(scores_.size());
    double total = 0;
    for (std::size_t i = 0; i < scores_.size(); ++i)
        total += probabilities_[i] = std::exp(scores_[i] - top);
    for (double& q : probabilities_)
        q /= total;

    if (options_.top_p < 1) apply_top_p();

    // Inverse CDF over the kept tokens in id order.
    double kept = 0;
    std::size_t last = 0;
    for (std::size_t i = 0; i < probabilities_.size(); ++i)
        if (probabilities_[i] > 0) {
            kept += probabilities_[i];
            last = i;
        }
    const double target = random_.uniform() * kept;
    double cumulative = 0;
    for (std::size_t i = 0; i < probabilities_.size(); ++i) {
        if (probabilities_[i] <= 0) continue;
        cumulative += probabilities_[i];
        if (target < cumulative) return static_cast<std::int32_t>(i);
    }
    return static_cast<std::int32_t>(last);  // rounding left target at the very end
}

ANVIL_INLINE void sampler::apply_top_p() {
    ids_.clear();
    for (std::size_t i = 0; i < probabilities_.size(); ++i)
        if (probabilities_[i] > 0) ids_.push_back(static_cast<std::int32_t>(i));
    std::stable_sort(ids_.begin(), ids_.end(), [&](std::int32_t a, std::int32_t b) {
        return probabilities_[static_cast<std::size_t>(a)] > probabilities_[static_cast<std::size_t>(b)];
    });
    double before = 0;
    for (const std::int32_t id : ids_) {
        double& q = probabilities_[static_cast<std::size_t>(id)];
        if (before >= options_.top_p) {
            q = 0;
        } else {
            before += q;
        }
    }
}

}  // namespace anvil::models
