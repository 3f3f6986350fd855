// anvil: numpy_generator's definitions (see numpy_random.hpp; compilation.hpp says when this file is
// compiled).
#pragma once

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

#include "anvil/train/numpy_random.hpp"

namespace anvil::detail::numpy_random {

// _int_to_uint32_array: an integer's 32-bit words, the low one first (0 is one word).
inline void append_words(std::vector<std::uint32_t>& entropy, std::uint64_t value) {
    do {
        entropy.push_back(static_cast<std::uint32_t>(value));
        value >>= 32;
    } while (value != 0);
}

ANVIL_INLINE std::vector<std::uint64_t> seed_sequence_words(std::uint64_t seed, std::size_t count) {
    std::vector<std::uint32_t> entropy;
    append_words(entropy, seed);
    return seed_sequence_words(entropy, count);
}

ANVIL_INLINE std::vector<std::uint64_t> seed_sequence_words(const std::vector<std::uint32_t>& entropy,
                                                            std::size_t count) {
    std::uint32_t hash_const = 0x43B0D7E5u;
    const auto hashmix = [&](std::uint32_t value) {
        value ^= hash_const;
        hash_const *= 0x931E8875u;
        value *= hash_const;
        return value ^ (value >> 16);
    };
    const auto mix = [](std::uint32_t x, std::uint32_t y) {
        const std::uint32_t result = 0xCA01F9DDu * x - 0x4973F715u * y;
        return result ^ (result >> 16);
    };
    std::uint32_t pool[4];
    for (std::size_t i = 0; i < 4; ++i)
        pool[i] = hashmix(i < entropy.size() ? entropy[i] : 0u);
    for (std::size_t source = 0; source < 4; ++source) {
        for (std::size_t target = 0; target < 4; ++target) {
            if (source != target) pool[target] = mix(pool[target], hashmix(pool[source]));
        }
    }
    for (std::size_t source = 4; source < entropy.size(); ++source) {
        for (std::size_t target = 0; target < 4; ++target)
            pool[target] = mix(pool[target], hashmix(entropy[source]));
    }
    hash_const = 0x8B51F9DDu;
    std::vector<std::uint64_t> words(count);
    for (std::size_t i = 0; i < 2 * count; ++i) {
        std::uint32_t value = pool[i % 4] ^ hash_const;
        hash_const *= 0x58F38DEDu;
        value *= hash_const;
        value ^= value >> 16;
        words[i / 2] |= static_cast<std::uint64_t>(value) << (i % 2 == 0 ? 0 : 32);
    }
    return words;
}

// PCG64's multiplier, 0x2360ed051fc65da4'4385df649fccf645.
inline constexpr uint128 pcg64_multiplier =
    (static_cast<uint128>(0x2360ED051FC65DA4ull) << 64) | 0x4385DF649FCCF645ull;

}  // namespace anvil::detail::numpy_random

namespace anvil::train {

ANVIL_INLINE numpy_generator::numpy_generator(std::uint64_t seed) {
    seed_from(anvil::detail::numpy_random::seed_sequence_words(seed, 4));
}

ANVIL_INLINE numpy_generator::numpy_generator(std::span<const std::uint64_t> entropy) {
    std::vector<std::uint32_t> words;
    for (const std::uint64_t value : entropy)
        anvil::detail::numpy_random::append_words(words, value);
    seed_from(anvil::detail::numpy_random::seed_sequence_words(words, 4));
}

ANVIL_INLINE void numpy_generator::seed_from(const std::vector<std::uint64_t>& w) {
    using anvil::detail::numpy_random::uint128;
    const uint128 initial_state = (static_cast<uint128>(w[0]) << 64) | w[1];
    const uint128 sequence = (static_cast<uint128>(w[2]) << 64) | w[3];
    // pcg_setseq_128_srandom_r: state 0, one step, add the seed, one more step.
    increment_ = (sequence << 1) | 1;
    state_ = increment_;
    state_ += initial_state;
    state_ = state_ * anvil::detail::numpy_random::pcg64_multiplier + increment_;
}

ANVIL_INLINE std::uint64_t numpy_generator::next_uint64() noexcept {
    state_ = state_ * anvil::detail::numpy_random::pcg64_multiplier + increment_;
    const auto x = static_cast<std::uint64_t>(state_ >> 64) ^ static_cast<std::uint64_t>(state_);
    const auto rotation = static_cast<unsigned>(state_ >> 122);
    return (x >> rotation) | (x << ((64u - rotation) & 63u));
}

ANVIL_INLINE std::uint32_t numpy_generator::next_uint32() noexcept {
    if (high_half_) {
        const std::uint32_t value = *high_half_;
        high_half_.reset();
        return value;
    }
    const std::uint64_t value = next_uint64();
    high_half_ = static_cast<std::uint32_t>(value >> 32);
    return static_cast<std::uint32_t>(value);
}

ANVIL_INLINE double numpy_generator::next_double() noexcept {
    return static_cast<double>(next_uint64() >> 11) * (1.0 / 9007199254740992.0);
}

ANVIL_INLINE std::uint64_t numpy_generator::interval(std::uint64_t maximum) noexcept {
    if (maximum == 0) return 0;
    std::uint64_t mask = maximum;
    for (unsigned shift = 1; shift <= 32; shift *= 2)
        mask |= mask >> shift;
    while (true) {
        const std::uint64_t value = (maximum <= 0xFFFFFFFFull ? next_uint32() : next_uint64()) & mask;
        if (value <= maximum) return value;
    }
}

ANVIL_INLINE std::vector<std::size_t> numpy_generator::permutation(std::size_t n) {
    std::vector<std::size_t> order(n);
    std::iota(order.begin(), order.end(), std::size_t{0});
    for (std::size_t i = n; i-- > 1;)
        std::swap(order[i], order[static_cast<std::size_t>(interval(i))]);
    return order;
}

ANVIL_INLINE std::vector<double> numpy_generator::uniform(double low, double high, std::size_t count) {
    std::vector<double> values(count);
    for (double& v : values)
        v = low + (high - low) * next_double();
    return values;
}

}  // namespace anvil::train
