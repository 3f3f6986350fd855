// anvil: numpy.random.default_rng(seed) for the draws fine-tuning makes, so that `anvil train` shuffles its
// examples and draws fresh LoRA matrices exactly as the Python reference (tools/reference/train_reference.py)
// and a user's numpy script do: SeedSequence(seed) -> PCG64 (XSL-RR over a 128-bit LCG), permutation(n) as
// numpy's Fisher-Yates with masked rejection (random_interval), and uniform(low, high) from 53-bit doubles.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "anvil/compilation.hpp"

namespace anvil::detail::numpy_random {
// PCG64's 128-bit state (GCC and Clang, Apple's included, have the type; __extension__ keeps -Wpedantic
// quiet about it).
__extension__ typedef unsigned __int128 uint128;

// SeedSequence(seed).generate_state(count, uint64): numpy's entropy pool (hashmix / mix) of the seed's 32-bit
// words, then `count` words of two 32-bit outputs each, the low one first.
[[nodiscard]] std::vector<std::uint64_t> seed_sequence_words(std::uint64_t seed, std::size_t count);
// The same for an entropy of several 32-bit words (SeedSequence([a, b, ...]) concatenates each integer's).
[[nodiscard]] std::vector<std::uint64_t> seed_sequence_words(const std::vector<std::uint32_t>& entropy,
                                                             std::size_t count);

}  // namespace anvil::detail::numpy_random

namespace anvil::train {

class numpy_generator {
public:
    // numpy.random.default_rng(seed) for a non-negative seed.
    explicit numpy_generator(std::uint64_t seed);
    // numpy.random.default_rng([a, b, ...]) for non-negative integers (training's dropout draws step s of a
    // run seeded S from default_rng([S, s])).
    explicit numpy_generator(std::span<const std::uint64_t> entropy);

    // PCG64's next output.
    [[nodiscard]] std::uint64_t next_uint64() noexcept;
    // numpy's 32-bit draw: the low half of a 64-bit output, then (next call) its high half.
    [[nodiscard]] std::uint32_t next_uint32() noexcept;
    // (next_uint64() >> 11) * 2^-53, in [0, 1).
    [[nodiscard]] double next_double() noexcept;
    // A value in [0, maximum]: masked rejection under the smallest all-ones mask >= maximum, 32-bit draws
    // while maximum fits 32 bits (numpy's random_interval).
    [[nodiscard]] std::uint64_t interval(std::uint64_t maximum) noexcept;
    // default_rng(seed).permutation(n): arange(n) shuffled from the back.
    [[nodiscard]] std::vector<std::size_t> permutation(std::size_t n);
    // default_rng(seed).uniform(low, high, count): low + (high - low) * next_double(), one after another.
    [[nodiscard]] std::vector<double> uniform(double low, double high, std::size_t count);

private:
    void seed_from(const std::vector<std::uint64_t>& words);

    anvil::detail::numpy_random::uint128 state_ = 0;
    anvil::detail::numpy_random::uint128 increment_ = 0;
    std::optional<std::uint32_t> high_half_;
};

}  // namespace anvil::train

#if ANVIL_DEFINITIONS
#include "anvil/train/numpy_random-inl.hpp"
#endif
