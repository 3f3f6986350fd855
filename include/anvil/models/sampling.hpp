// anvil: choosing the next token from a row of logits. Greedy, temperature, top-k, top-p and repetition
// penalty, applied in the order of Hugging Face's generate(): repetition penalty -> temperature -> top-k ->
// top-p -> draw. Draws come from a seeded xoshiro256** generator written out here (not <random>'s
// distributions, whose outputs differ between standard libraries), so a seed gives the same tokens on every
// platform.
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

namespace anvil::models {

struct sampling_options {
    double temperature = 0;           // 0: greedy (argmax, lowest id on ties)
    std::int64_t top_k = 0;           // 0: off; ties with the k-th logit are kept, as in Hugging Face
    double top_p = 1.0;               // 1: off; keeps the smallest most-likely set whose probability >= top_p
    double repetition_penalty = 1.0;  // HF's: logit > 0 ? logit / p : logit * p, over tokens seen
    std::uint64_t seed = 0;
};

namespace detail {

// splitmix64: expands a 64-bit seed into the generator's state (the seeding xoshiro's authors recommend).
[[nodiscard]] inline std::uint64_t splitmix64(std::uint64_t& state) noexcept {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

// xoshiro256** (Blackman and Vigna, 2018): small, fast, and its output is fixed by the algorithm alone.
class xoshiro256 {
public:
    explicit xoshiro256(std::uint64_t seed) noexcept {
        for (auto& word : state_)
            word = splitmix64(seed);
    }

    [[nodiscard]] std::uint64_t next() noexcept {
        const std::uint64_t result = rotl(state_[1] * 5, 7) * 9;
        const std::uint64_t t = state_[1] << 17;
        state_[2] ^= state_[0];
        state_[3] ^= state_[1];
        state_[1] ^= state_[2];
        state_[0] ^= state_[3];
        state_[2] ^= t;
        state_[3] = rotl(state_[3], 45);
        return result;
    }

    // Uniform in [0, 1): the top 53 bits scaled by 2^-53, exact in a double.
    [[nodiscard]] double uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

private:
    [[nodiscard]] static std::uint64_t rotl(std::uint64_t x, int k) noexcept {
        return (x << k) | (x >> (64 - k));
    }
    std::uint64_t state_[4]{};
};

inline void validate_sampling_options(const sampling_options& o) {
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

}  // namespace detail

class sampler {
public:
    // Validates the options (an anvil::error naming the bad value).
    explicit sampler(const sampling_options& options) : options_(options), random_(options.seed) {
        detail::validate_sampling_options(options_);
    }

    [[nodiscard]] const sampling_options& options() const noexcept { return options_; }
    [[nodiscard]] bool greedy() const noexcept { return options_.temperature == 0; }

    // Picks the next token from one row of logits; `seen` are prompt + generated ids (for the penalty).
    std::int32_t next(std::span<const float> logits, std::span<const std::int32_t> seen) {
        if (logits.empty()) throw error("sampling: the row of logits is empty");
        if (logits.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
            throw error(anvil::detail::message("sampling: ", logits.size(),
                                               " logits is more than token ids can index"));
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

private:
    static constexpr double minus_infinity = -std::numeric_limits<double>::infinity();

    void apply_repetition_penalty(std::span<const std::int32_t> seen) {
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

    [[nodiscard]] std::int32_t argmax() const {
        std::size_t best = 0;
        for (std::size_t i = 1; i < scores_.size(); ++i)
            if (scores_[i] > scores_[best]) best = i;
        if (scores_[best] == minus_infinity) throw error("sampling: every logit is -inf");
        return static_cast<std::int32_t>(best);
    }

    // Hugging Face's TopKLogitsWarper: removes every score below the k-th largest (ties with it stay).
    void apply_top_k() {
        order_ = scores_;
        const auto kth = order_.begin() + (options_.top_k - 1);
        std::nth_element(order_.begin(), kth, order_.end(), std::greater<>());
        const double threshold = *kth;
        for (double& s : scores_)
            if (s < threshold) s = minus_infinity;
    }

    std::int32_t draw() {
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

    // Hugging Face's TopPLogitsWarper: in order of decreasing probability (lower id first on ties), keeps a
    // token while the tokens before it sum to less than top_p, so the kept set is the smallest whose
    // probability reaches top_p (and never empty).
    void apply_top_p() {
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

    sampling_options options_;
    detail::xoshiro256 random_;
    std::vector<double> scores_, order_, probabilities_;
    std::vector<std::int32_t> ids_;
    std::vector<bool> penalised_;
};

}  // namespace anvil::models
