// anvil: fft_plan's definitions (see fft.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <cmath>
#include <complex>
#include <cstddef>
#include <numbers>
#include <span>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/io/fft.hpp"

namespace anvil {

ANVIL_INLINE std::vector<std::complex<double>> naive_dft(std::span<const std::complex<double>> x) {
    const std::size_t n = x.size();
    std::vector<std::complex<double>> out(n);
    for (std::size_t k = 0; k < n; ++k) {
        std::complex<double> sum = 0.0;
        for (std::size_t j = 0; j < n; ++j) {
            // j * k mod n keeps the angle small, so the sum is as exact as the definition allows.
            const double angle =
                -2.0 * std::numbers::pi * static_cast<double>((j * k) % n) / static_cast<double>(n);
            sum += x[j] * std::polar(1.0, angle);
        }
        out[k] = sum;
    }
    return out;
}

ANVIL_INLINE fft_plan::fft_plan(std::size_t length) : length_(length) {
    if (length == 0) throw error("fft_plan: the length must be at least 1");
    std::size_t rest = length;
    for (const std::size_t radix : {std::size_t{4}, std::size_t{2}, std::size_t{3}, std::size_t{5}}) {
        while (rest % radix == 0) {
            factors_.push_back(radix);
            rest /= radix;
        }
    }
    if (rest == 1) {
        twiddles_.resize(length);
        for (std::size_t t = 0; t < length; ++t)
            twiddles_[t] = std::polar(
                1.0, -2.0 * std::numbers::pi * static_cast<double>(t) / static_cast<double>(length));
        return;
    }
    // Bluestein: X[k] = conj(c[k]) * sum_j (x[j] conj(c[j])) c[k - j] with c[j] = exp(pi i j^2 / n): a
    // convolution, done as products of transforms of a power-of-two length m >= 2n - 1.
    factors_.clear();
    std::size_t m = 1;
    while (m < 2 * length - 1)
        m *= 2;
    chirp_.resize(length);
    for (std::size_t j = 0; j < length; ++j) {
        const std::size_t square = (j * j) % (2 * length);  // the angle's period is 2n
        chirp_[j] =
            std::polar(1.0, std::numbers::pi * static_cast<double>(square) / static_cast<double>(length));
    }
    inner_.emplace_back(m);
    std::vector<std::complex<double>> kernel(m, 0.0);
    kernel[0] = chirp_[0];
    for (std::size_t j = 1; j < length; ++j)
        kernel[j] = kernel[m - j] = chirp_[j];
    chirp_spectrum_.resize(m);
    inner_.front().forward(kernel, chirp_spectrum_);
}

ANVIL_INLINE void fft_plan::mixed_radix(const std::complex<double>* in, std::size_t stride,
                                        std::complex<double>* out, std::size_t n, std::size_t level) const {
    if (n == 1) {
        out[0] = in[0];
        return;
    }
    // Decimation in time: the p interleaved sub-sequences transformed into out[q m .. q m + m), then
    // combined by p-point butterflies with the twiddles of this level (length / n steps apart).
    const std::size_t p = factors_[level], m = n / p, step = length_ / n;
    for (std::size_t q = 0; q < p; ++q)
        mixed_radix(in + q * stride, stride * p, out + q * m, m, level + 1);
    std::complex<double> terms[5];
    for (std::size_t k = 0; k < m; ++k) {
        for (std::size_t q = 0; q < p; ++q)
            terms[q] = out[q * m + k] * twiddles_[(q * k * step) % length_];
        for (std::size_t r = 0; r < p; ++r) {
            std::complex<double> sum = terms[0];
            for (std::size_t q = 1; q < p; ++q)
                sum += terms[q] * twiddles_[(q * r * m * step) % length_];
            out[r * m + k] = sum;
        }
    }
}

ANVIL_INLINE void fft_plan::forward(std::span<const std::complex<double>> in,
                                    std::span<std::complex<double>> out) const {
    if (in.size() != length_ || out.size() != length_)
        throw error(detail::message("fft_plan: a ", length_, "-point transform was given ", in.size(),
                                    " values and room for ", out.size()));
    if (inner_.empty()) {
        mixed_radix(in.data(), 1, out.data(), length_, 0);
        return;
    }
    const std::size_t m = inner_.front().length();
    std::vector<std::complex<double>> a(m, 0.0), spectrum(m);
    for (std::size_t j = 0; j < length_; ++j)
        a[j] = in[j] * std::conj(chirp_[j]);
    inner_.front().forward(a, spectrum);
    for (std::size_t i = 0; i < m; ++i)
        spectrum[i] *= chirp_spectrum_[i];
    // The inverse transform as conj(DFT(conj(.))) / m.
    for (auto& v : spectrum)
        v = std::conj(v);
    inner_.front().forward(spectrum, a);
    for (std::size_t k = 0; k < length_; ++k)
        out[k] = std::conj(a[k]) / static_cast<double>(m) * std::conj(chirp_[k]);
}

}  // namespace anvil
