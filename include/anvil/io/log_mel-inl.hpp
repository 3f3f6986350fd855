// anvil: whisper_log_mel's definitions (see log_mel.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstddef>
#include <numbers>
#include <span>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/io/fft.hpp"
#include "anvil/io/log_mel.hpp"

namespace anvil {

namespace detail::mel {

// Slaney's mel scale (librosa htk=False): linear below 1 kHz (3 mels per 200 Hz), logarithmic above with 27
// mels per factor 6.4.
ANVIL_INLINE double hertz_to_mel(double hertz) {
    if (hertz < 1000.0) return 3.0 * hertz / 200.0;
    return 15.0 + std::log(hertz / 1000.0) * 27.0 / std::log(6.4);
}
ANVIL_INLINE double mel_to_hertz(double mel) {
    if (mel < 15.0) return 200.0 * mel / 3.0;
    return 1000.0 * std::exp(std::log(6.4) * (mel - 15.0) / 27.0);
}

ANVIL_INLINE void check(const log_mel_options& o) {
    if (o.mel_bins < 1 || o.mel_bins > 1024 || o.sample_rate < 1 || o.fft_length < 2 ||
        o.fft_length > 65536 || o.hop_length < 1 || o.chunk_seconds < 1 || o.window_samples < 0 ||
        o.chunk_seconds * o.sample_rate > (std::int64_t{1} << 31) ||
        o.window_samples > (std::int64_t{1} << 31))
        throw error(message("whisper_log_mel: unusable options: ", o.mel_bins, " mel bins, ", o.sample_rate,
                            " Hz, ", o.fft_length, "-point FFT, hop ", o.hop_length, ", ", o.chunk_seconds,
                            " s"));
}

}  // namespace detail::mel

ANVIL_INLINE std::vector<double> slaney_mel_filters(const log_mel_options& options) {
    using namespace detail::mel;
    check(options);
    const auto bins = static_cast<std::size_t>(options.fft_length / 2 + 1);
    const auto mels = static_cast<std::size_t>(options.mel_bins);
    const double nyquist = static_cast<double>(options.sample_rate) / 2.0;
    // mels + 2 edge frequencies, evenly spaced in mels.
    std::vector<double> edges(mels + 2);
    const double top = hertz_to_mel(nyquist);
    for (std::size_t i = 0; i < edges.size(); ++i)
        edges[i] = mel_to_hertz(top * static_cast<double>(i) / static_cast<double>(mels + 1));
    std::vector<double> filters(mels * bins, 0.0);
    for (std::size_t m = 0; m < mels; ++m) {
        const double lower = edges[m], centre = edges[m + 1], upper = edges[m + 2];
        const double norm = 2.0 / (upper - lower);
        for (std::size_t b = 0; b < bins; ++b) {
            const double f = nyquist * static_cast<double>(b) / static_cast<double>(bins - 1);
            const double rising = (f - lower) / (centre - lower), falling = (upper - f) / (upper - centre);
            filters[m * bins + b] = std::max(0.0, std::min(rising, falling)) * norm;
        }
    }
    return filters;
}

ANVIL_INLINE host_tensor whisper_log_mel(std::span<const float> samples, const log_mel_options& options) {
    detail::mel::check(options);
    const auto window_samples = static_cast<std::size_t>(options.window());
    const auto n_fft = static_cast<std::size_t>(options.fft_length);
    const auto hop = static_cast<std::size_t>(options.hop_length);
    const std::size_t half = n_fft / 2;
    if (window_samples <= half)
        throw error(detail::message("whisper_log_mel: a window of ", window_samples,
                                    " samples is too short to reflect-pad by ", half));
    // Pad or cut to the window, then reflect-pad (the edge sample not repeated, as numpy's "reflect").
    std::vector<double> padded(window_samples + 2 * half, 0.0);
    for (std::size_t i = 0; i < window_samples && i < samples.size(); ++i)
        padded[half + i] = samples[i];
    for (std::size_t i = 0; i < half; ++i) {
        padded[half - 1 - i] = padded[half + 1 + i];
        padded[half + window_samples + i] = padded[half + window_samples - 2 - i];
    }
    const std::size_t frames = (padded.size() - n_fft) / hop;  // 1 + (len - n_fft) / hop, the last dropped
    const std::size_t bins = n_fft / 2 + 1;
    const auto mels = static_cast<std::size_t>(options.mel_bins);
    std::vector<double> hann(n_fft);
    for (std::size_t i = 0; i < n_fft; ++i)  // periodic: torch.hann_window(n), np.hanning(n + 1)[:-1]
        hann[i] = 0.5 - 0.5 * std::cos(2.0 * std::numbers::pi * static_cast<double>(i) /
                                       static_cast<double>(n_fft));
    const std::vector<double> filters = slaney_mel_filters(options);
    const fft_plan plan(n_fft);
    std::vector<std::complex<double>> frame(n_fft), spectrum(n_fft);
    std::vector<double> power(bins), mel(mels * frames);
    for (std::size_t t = 0; t < frames; ++t) {
        for (std::size_t i = 0; i < n_fft; ++i)
            frame[i] = padded[t * hop + i] * hann[i];
        plan.forward(frame, spectrum);
        for (std::size_t b = 0; b < bins; ++b)
            power[b] = std::norm(spectrum[b]);
        for (std::size_t m = 0; m < mels; ++m) {
            double sum = 0.0;
            for (std::size_t b = 0; b < bins; ++b)
                sum += filters[m * bins + b] * power[b];
            mel[m * frames + t] = std::log10(std::max(sum, 1e-10));
        }
    }
    const double ceiling = *std::max_element(mel.begin(), mel.end());
    host_tensor out(dtype::f32, dims{options.mel_bins, static_cast<std::int64_t>(frames)});
    auto values = out.values<float>();
    for (std::size_t i = 0; i < mel.size(); ++i)
        values[i] = static_cast<float>((std::max(mel[i], ceiling - 8.0) + 4.0) / 4.0);
    return out;
}

}  // namespace anvil
