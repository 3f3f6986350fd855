// anvil: Whisper's log-mel spectrogram, computed as Hugging Face's WhisperFeatureExtractor computes it:
// the samples padded with zeros or cut to 30 s (480000 at 16 kHz); a 400-point periodic Hann window every
// 160 samples over the signal reflect-padded by 200 at each end (torch.stft's center=True); the power
// spectrum |X|^2 of each frame, the last frame dropped (3000 frames); Slaney-scale, Slaney-normalised
// triangular mel filters over 0..8000 Hz (80 bins, or 128 for large-v3); log10 of max(mel, 1e-10); values
// below the maximum minus 8 raised to it; then (x + 4) / 4. Computed in double precision (HF's float32
// agrees to about 1e-5).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "anvil/compilation.hpp"
#include "anvil/core/host_tensor.hpp"

namespace anvil {

struct log_mel_options {
    std::int64_t mel_bins = 80;        // preprocessor_config.json's feature_size (128 for large-v3)
    std::int64_t sample_rate = 16000;  // sampling_rate
    std::int64_t fft_length = 400;     // n_fft
    std::int64_t hop_length = 160;     // hop_length
    std::int64_t chunk_seconds = 30;   // chunk_length: the window the samples are padded or cut to
    // The window in samples instead of chunk_seconds (0: chunk_seconds * sample_rate): long-form audio takes
    // the features of the whole clip at once, as WhisperFeatureExtractor with truncation=False does.
    std::int64_t window_samples = 0;

    [[nodiscard]] std::int64_t window() const noexcept {
        return window_samples > 0 ? window_samples : chunk_seconds * sample_rate;
    }
};

// The filter bank [mel_bins, fft_length / 2 + 1]: triangles between Slaney mel points evenly spaced from 0
// Hz to sample_rate / 2, each scaled by 2 / (its upper edge - its lower edge) Hz (librosa's norm="slaney").
[[nodiscard]] std::vector<double> slaney_mel_filters(const log_mel_options& options = {});

// The features [mel_bins, window() / hop_length] (f32) of one window of mono samples at options.sample_rate;
// a longer `samples` is cut, a shorter one padded with silence.
[[nodiscard]] host_tensor whisper_log_mel(std::span<const float> samples,
                                          const log_mel_options& options = {});

}  // namespace anvil

#if ANVIL_DEFINITIONS
#include "anvil/io/log_mel-inl.hpp"
#endif
