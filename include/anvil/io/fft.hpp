// anvil: the discrete Fourier transform of any length, for audio features (Whisper's 400-point STFT is not
// a power of two). Mixed-radix Cooley-Tukey over the factors 4, 2, 3 and 5 of the length; a length with a
// larger prime factor goes through Bluestein's chirp-z transform on a power-of-two length. naive_dft is
// the O(n^2) definition the tests hold it to.
#pragma once

#include <complex>
#include <cstddef>
#include <span>
#include <vector>

#include "anvil/compilation.hpp"

namespace anvil {

// X[k] = sum_j x[j] exp(-2 pi i j k / n), straight from the definition.
[[nodiscard]] std::vector<std::complex<double>> naive_dft(std::span<const std::complex<double>> x);

// A plan for forward transforms of one length (twiddles computed once; reusable from several threads).
class fft_plan {
public:
    explicit fft_plan(std::size_t length);

    [[nodiscard]] std::size_t length() const noexcept { return length_; }

    // out = DFT(in); both `length()` long (they may not overlap).
    void forward(std::span<const std::complex<double>> in, std::span<std::complex<double>> out) const;

private:
    void mixed_radix(const std::complex<double>* in, std::size_t stride, std::complex<double>* out,
                     std::size_t n, std::size_t level) const;

    std::size_t length_ = 0;
    std::vector<std::size_t> factors_;            // the radices, outermost first (mixed radix)
    std::vector<std::complex<double>> twiddles_;  // exp(-2 pi i t / length) for t < length
    // Bluestein: the chirp exp(-pi i j^2 / n), the transformed conjugate chirp and the power-of-two plan.
    std::vector<std::complex<double>> chirp_, chirp_spectrum_;
    std::vector<fft_plan> inner_;  // empty, or the one power-of-two plan
};

}  // namespace anvil

#if ANVIL_DEFINITIONS
#include "anvil/io/fft-inl.hpp"
#endif
