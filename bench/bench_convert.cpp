// Bulk conversion against the plain scalar loop a user would write, measured in the same run: f16 -> f32,
// bf16 -> f32 and f32 -> f16 over ~64M elements (or the count given as the first argument). Prints GB/s
// (bytes read + written) for each and the speed-up; exits non-zero if a bulk result differs from the scalar
// one.
#include <anvil/core/convert.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace {

// Best of a few runs: the first touches the pages, the rest measure the conversion.
template <class Run>
double best_seconds(Run&& run) {
    double best = 1e30;
    for (int repeat = 0; repeat < 5; ++repeat) {
        const auto start = std::chrono::steady_clock::now();
        run();
        const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
        best = std::min(best, elapsed.count());
    }
    return best;
}

bool report(const char* name, std::size_t bytes, double scalar_seconds, double bulk_seconds, bool same) {
    const double gigabyte = 1e9;
    std::printf("%-12s scalar %7.2f GB/s   bulk %7.2f GB/s   speed-up %5.2fx%s\n", name,
                static_cast<double>(bytes) / scalar_seconds / gigabyte,
                static_cast<double>(bytes) / bulk_seconds / gigabyte, scalar_seconds / bulk_seconds,
                same ? "" : "   MISMATCH");
    return same;
}

}  // namespace

int main(int argc, char** argv) {
    const std::size_t count = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : std::size_t{64} << 20;
    std::printf("%zu elements; F16C/NEON vector path: %s\n", count,
                anvil::detail::vector_conversion_available() ? "yes" : "no (portable loop)");

    // Finite halves of every magnitude, and the floats they stand for (exact, so f32 -> f16 sees no ties).
    std::mt19937 random(42);
    std::vector<std::uint16_t> sixteen(count);
    for (auto& bits : sixteen)
        bits = static_cast<std::uint16_t>(random() & 0xFBFFu);
    std::vector<float> floats(count), scalar_floats(count);
    std::vector<anvil::half> halves(count), scalar_halves(count);
    bool all_same = true;

    {
        const double scalar = best_seconds([&] {
            for (std::size_t i = 0; i < count; ++i)
                scalar_floats[i] = anvil::half_bits_to_float(sixteen[i]);
        });
        const double bulk = best_seconds(
            [&] { anvil::convert_to_f32(anvil::dtype::f16, sixteen.data(), count, floats.data()); });
        const bool same = std::memcmp(floats.data(), scalar_floats.data(), count * sizeof(float)) == 0;
        all_same &= report("f16 -> f32", count * 6, scalar, bulk, same);
    }
    {
        std::vector<float> bf16_floats(count);
        const double scalar = best_seconds([&] {
            for (std::size_t i = 0; i < count; ++i)
                scalar_floats[i] = anvil::bfloat16_bits_to_float(sixteen[i]);
        });
        const double bulk = best_seconds(
            [&] { anvil::convert_to_f32(anvil::dtype::bf16, sixteen.data(), count, bf16_floats.data()); });
        const bool same = std::memcmp(bf16_floats.data(), scalar_floats.data(), count * sizeof(float)) == 0;
        all_same &= report("bf16 -> f32", count * 6, scalar, bulk, same);
    }
    {
        const double scalar = best_seconds([&] {
            for (std::size_t i = 0; i < count; ++i)
                scalar_halves[i].bits = anvil::float_to_half_bits(floats[i]);
        });
        const double bulk =
            best_seconds([&] { anvil::convert_f32_to_f16(floats.data(), count, halves.data()); });
        const bool same = std::memcmp(halves.data(), scalar_halves.data(), count * sizeof(anvil::half)) == 0;
        all_same &= report("f32 -> f16", count * 6, scalar, bulk, same);
    }
    return all_same ? EXIT_SUCCESS : EXIT_FAILURE;
}
