// Sampling: greedy, temperature, top-k, top-p and repetition penalty against hand-computed expectations and
// softmax frequencies; the generator against outputs computed independently (in Python) for the same
// algorithm, so a seed draws the same tokens on every platform.
#include <doctest/doctest.h>

#include <anvil/anvil.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <vector>

namespace test_sampling {

namespace {

namespace am = anvil::models;

am::sampling_options with(double temperature, std::int64_t top_k = 0, double top_p = 1.0,
                          double penalty = 1.0, std::uint64_t seed = 7) {
    am::sampling_options o;
    o.temperature = temperature;
    o.top_k = top_k;
    o.top_p = top_p;
    o.repetition_penalty = penalty;
    o.seed = seed;
    return o;
}

std::vector<int> counts(am::sampler& s, const std::vector<float>& logits, int draws) {
    std::vector<int> n(logits.size(), 0);
    for (int i = 0; i < draws; ++i)
        ++n[static_cast<std::size_t>(s.next(logits, {}))];
    return n;
}

std::vector<double> softmax(const std::vector<float>& logits, double temperature) {
    std::vector<double> p(logits.size());
    double total = 0;
    for (std::size_t i = 0; i < p.size(); ++i)
        total += p[i] = std::exp(double{logits[i]} / temperature);
    for (double& q : p)
        q /= total;
    return p;
}

double chi_square(const std::vector<int>& n, const std::vector<double>& p, int draws) {
    double chi = 0;
    for (std::size_t i = 0; i < n.size(); ++i) {
        if (p[i] == 0) {
            REQUIRE(n[i] == 0);
            continue;
        }
        const double expected = p[i] * draws;
        chi += (n[i] - expected) * (n[i] - expected) / expected;
    }
    return chi;
}

}  // namespace

TEST_CASE("sampling: the generator matches xoshiro256** seeded by splitmix64, computed independently") {
    anvil::models::recipe_detail::xoshiro256 zero(0), answer(42);
    CHECK(zero.next() == 0x99ec5f36cb75f2b4ULL);
    CHECK(zero.next() == 0xbf6e1f784956452aULL);
    CHECK(zero.next() == 0x1a5f849d4933e6e0ULL);
    CHECK(answer.next() == 0x15780b2e0c2ec716ULL);
    anvil::models::recipe_detail::xoshiro256 again(0);
    CHECK(again.uniform() == 0.6012629994179048);
}

TEST_CASE("sampling: greedy takes the argmax, the lowest id on ties") {
    am::sampler greedy(am::sampling_options{});
    CHECK(greedy.next(std::vector<float>{0.5f, 2.0f, -1.0f, 2.0f}, {}) == 1);
    const float ninf = -std::numeric_limits<float>::infinity();
    CHECK(greedy.next(std::vector<float>{ninf, ninf, -3.0f}, {}) == 2);
    // top-k and top-p never change the argmax.
    am::sampler filtered(with(0, 1, 0.1));
    CHECK(filtered.next(std::vector<float>{0.0f, 1.0f, 3.0f}, {}) == 2);
}

TEST_CASE("sampling: repetition penalty as Hugging Face's RepetitionPenaltyLogitsProcessor") {
    // Positive logits are divided, negative ones multiplied, once per token however often it was seen:
    // [3, -1, 2.9] with 0 seen twice and penalty 1.5 -> [2, -1, 2.9].
    am::sampler s(with(0, 0, 1.0, 1.5));
    const std::vector<std::int32_t> seen{0, 0};
    CHECK(s.next(std::vector<float>{3.0f, -1.0f, 2.9f}, seen) == 2);
    // [-0.5, -0.6] with 0 seen and penalty 2 -> [-1, -0.6].
    am::sampler neg(with(0, 0, 1.0, 2.0));
    CHECK(neg.next(std::vector<float>{-0.5f, -0.6f}, std::vector<std::int32_t>{0}) == 1);
    // A penalty below 1 favours seen tokens: [1, 1.2] with 0 seen, penalty 0.5 -> [2, 1.2].
    am::sampler favour(with(0, 0, 1.0, 0.5));
    CHECK(favour.next(std::vector<float>{1.0f, 1.2f}, std::vector<std::int32_t>{0}) == 0);
    // With sampling: penalised logits [ln 0.5 / ... ] give the frequencies of softmax over the penalised row.
    const std::vector<float> logits{2.0f, 1.0f, -1.0f};
    am::sampler sampled(with(1.0, 0, 1.0, 2.0, 11));
    std::vector<int> n(3, 0);
    const int draws = 20000;
    for (int i = 0; i < draws; ++i)
        ++n[static_cast<std::size_t>(sampled.next(logits, std::vector<std::int32_t>{0, 2}))];
    CHECK(chi_square(n, softmax({1.0f, 1.0f, -2.0f}, 1.0), draws) < 25.0);
}

TEST_CASE("sampling: temperature draws follow softmax(logits / T)") {
    const std::vector<float> logits{1.0f, 2.0f, 0.0f, 0.5f, -1.0f};
    const int draws = 40000;
    for (const double t : {0.7, 1.0, 2.5}) {
        CAPTURE(t);
        am::sampler s(with(t));
        const auto n = counts(s, logits, draws);
        // 4 degrees of freedom: 25 is far in the tail (p < 1e-4), while a wrong temperature scores thousands.
        CHECK(chi_square(n, softmax(logits, t), draws) < 25.0);
        CHECK(chi_square(n, softmax(logits, t * 1.3), draws) > 100.0);
    }
}

TEST_CASE("sampling: top-k keeps the k best") {
    const std::vector<float> logits{0.3f, 1.5f, -0.2f, 1.4f, 0.9f, 1.0f};
    am::sampler s(with(5.0, 2));
    const int draws = 20000;
    const auto n = counts(s, logits, draws);
    CHECK(n[0] == 0);
    CHECK(n[2] == 0);
    CHECK(n[4] == 0);
    CHECK(n[5] == 0);
    std::vector<double> p{0, std::exp(1.5 / 5), 0, std::exp(1.4 / 5), 0, 0};
    const double total = p[1] + p[3];
    p[1] /= total;
    p[3] /= total;
    CHECK(chi_square(n, p, draws) < 15.0);
    // Ties with the k-th logit stay, as in Hugging Face.
    am::sampler ties(with(1.0, 1));
    const auto tied = counts(ties, {1.0f, 0.0f, 1.0f}, 2000);
    CHECK(tied[1] == 0);
    CHECK(tied[0] > 800);
    CHECK(tied[2] > 800);
}

TEST_CASE("sampling: top-p keeps the smallest set reaching p") {
    // Probabilities 0.5, 0.2, 0.15, 0.1, 0.05: p = 0.65 keeps {0, 1} (0.5 < 0.65 <= 0.7), p = 0.75 keeps
    // {0, 1, 2}, p = 0.4 keeps {0} alone; the kept ones are renormalised.
    const std::vector<double> probs{0.5, 0.2, 0.15, 0.1, 0.05};
    std::vector<float> logits;
    for (const double q : probs)
        logits.push_back(static_cast<float>(std::log(q)));
    const int draws = 30000;
    {
        am::sampler s(with(1.0, 0, 0.65));
        const auto n = counts(s, logits, draws);
        CHECK(n[2] + n[3] + n[4] == 0);
        CHECK(chi_square(n, {0.5 / 0.7, 0.2 / 0.7, 0, 0, 0}, draws) < 15.0);
    }
    {
        am::sampler s(with(1.0, 0, 0.75));
        const auto n = counts(s, logits, draws);
        CHECK(n[3] + n[4] == 0);
        CHECK(chi_square(n, {0.5 / 0.85, 0.2 / 0.85, 0.15 / 0.85, 0, 0}, draws) < 15.0);
    }
    {
        am::sampler s(with(1.0, 0, 0.4));
        CHECK(counts(s, logits, 500)[0] == 500);
    }
    // After temperature: T = 2 flattens [ln .5, ln .2, ...] to sqrt-proportional probabilities.
    {
        std::vector<double> flat;
        double total = 0;
        for (const double q : probs)
            total += std::sqrt(q);
        for (const double q : probs)
            flat.push_back(std::sqrt(q) / total);
        // flat = 0.306, 0.194, 0.168, 0.137, 0.097: p = 0.6 keeps the first three (0.5 < 0.6 <= 0.668).
        am::sampler s(with(2.0, 0, 0.6));
        const auto n = counts(s, logits, draws);
        CHECK(n[3] + n[4] == 0);
        const double kept = flat[0] + flat[1] + flat[2];
        CHECK(chi_square(n, {flat[0] / kept, flat[1] / kept, flat[2] / kept, 0, 0}, draws) < 15.0);
    }
}

TEST_CASE("sampling: a seed gives the same tokens, another seed others") {
    std::vector<float> logits;
    for (int i = 0; i < 50; ++i)
        logits.push_back(static_cast<float>(std::sin(i * 1.7)));
    const auto run = [&](std::uint64_t seed) {
        am::sampler s(with(1.0, 20, 0.95, 1.1, seed));
        std::vector<std::int32_t> tokens;
        for (int i = 0; i < 64; ++i)
            tokens.push_back(s.next(logits, tokens));
        return tokens;
    };
    CHECK(run(42) == run(42));
    CHECK(run(42) != run(43));
}

TEST_CASE("sampling: bad options and bad logits are refused") {
    CHECK_THROWS_WITH_AS(am::sampler(with(-0.5)),
                         doctest::Contains("temperature must be a finite number >= 0"), anvil::error);
    CHECK_THROWS_WITH_AS(am::sampler(with(std::nan(""))), doctest::Contains("temperature"), anvil::error);
    CHECK_THROWS_WITH_AS(am::sampler(with(1.0, -1)), doctest::Contains("top_k must be >= 0"), anvil::error);
    CHECK_THROWS_WITH_AS(am::sampler(with(1.0, 0, 0.0)), doctest::Contains("top_p must be in (0, 1]"),
                         anvil::error);
    CHECK_THROWS_WITH_AS(am::sampler(with(1.0, 0, 1.5)), doctest::Contains("got 1.5"), anvil::error);
    CHECK_THROWS_WITH_AS(am::sampler(with(1.0, 0, 1.0, 0.0)), doctest::Contains("repetition_penalty must be"),
                         anvil::error);

    am::sampler s(with(1.0, 0, 1.0, 1.2));
    CHECK_THROWS_WITH_AS(s.next(std::vector<float>{0.0f, std::nanf(""), 1.0f}, {}),
                         doctest::Contains("logit of token 1 is nan"), anvil::error);
    CHECK_THROWS_WITH_AS(s.next(std::vector<float>{}, {}), doctest::Contains("empty"), anvil::error);
    CHECK_THROWS_WITH_AS(s.next(std::vector<float>{0.0f, 1.0f}, std::vector<std::int32_t>{5}),
                         doctest::Contains("seen token id 5 is outside the vocabulary [0, 2)"), anvil::error);
    const float ninf = -std::numeric_limits<float>::infinity();
    CHECK_THROWS_WITH_AS(s.next(std::vector<float>{ninf, ninf}, {}), doctest::Contains("every logit is -inf"),
                         anvil::error);
}

}  // namespace test_sampling
