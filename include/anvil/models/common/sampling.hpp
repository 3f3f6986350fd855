// anvil: choosing the next token from a row of logits. Greedy, temperature, top-k, top-p and repetition
// penalty, applied in the order of Hugging Face's generate(): repetition penalty -> temperature -> top-k ->
// top-p -> draw. Draws come from a seeded xoshiro256** generator written out here (not <random>'s
// distributions, whose outputs differ between standard libraries), so a seed gives the same tokens on every
// platform.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "anvil/compilation.hpp"

namespace anvil::models {

struct sampling_options {
    double temperature = 0;           // 0: greedy (argmax, lowest id on ties)
    std::int64_t top_k = 0;           // 0: off; ties with the k-th logit are kept, as in Hugging Face
    double top_p = 1.0;               // 1: off; keeps the smallest most-likely set whose probability >= top_p
    double repetition_penalty = 1.0;  // HF's: logit > 0 ? logit / p : logit * p, over tokens seen
    std::uint64_t seed = 0;
};

namespace recipe_detail {

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

void validate_sampling_options(const sampling_options& o);

}  // namespace recipe_detail

class sampler {
public:
    // Validates the options (an anvil::error naming the bad value).
    explicit sampler(const sampling_options& options);

    [[nodiscard]] const sampling_options& options() const noexcept { return options_; }
    [[nodiscard]] bool greedy() const noexcept { return options_.temperature == 0; }

    // Picks the next token from one row of logits; `seen` are prompt + generated ids (for the penalty).
    std::int32_t next(std::span<const float> logits, std::span<const std::int32_t> seen);

private:
    static constexpr double minus_infinity = -std::numeric_limits<double>::infinity();

    void apply_repetition_penalty(std::span<const std::int32_t> seen);

    [[nodiscard]] std::int32_t argmax() const;

    // Hugging Face's TopKLogitsWarper: removes every score below the k-th largest (ties with it stay).
    void apply_top_k();

    std::int32_t draw();

    // Hugging Face's TopPLogitsWarper: in order of decreasing probability (lower id first on ties), keeps a
    // token while the tokens before it sum to less than top_p, so the kept set is the smallest whose
    // probability reaches top_p (and never empty).
    void apply_top_p();

    sampling_options options_;
    recipe_detail::xoshiro256 random_;
    std::vector<double> scores_, order_, probabilities_;
    std::vector<std::int32_t> ids_;
    std::vector<bool> penalised_;
};

}  // namespace anvil::models

#if ANVIL_DEFINITIONS
#include "anvil/models/common/sampling-inl.hpp"
#endif
