// anvil: RIFF/WAVE audio as speech models take it: mono float samples in [-1, 1]. PCM of 8 (unsigned), 16,
// 24 and 32 bits and IEEE float of 32 and 64 bits, as WAVE_FORMAT_PCM, WAVE_FORMAT_IEEE_FLOAT or
// WAVE_FORMAT_EXTENSIBLE; several channels are mixed down to one by their mean (as librosa's to_mono). PCM
// is scaled by 2^(bits - 1), as soundfile and torchaudio read it. The file is treated as hostile: every
// chunk size is checked against what is left, odd-sized chunks skip their pad byte, unknown chunks (LIST,
// fact, cue, ...) are skipped, and errors (anvil::format_error) name the file and what is wrong. The sample
// rate is reported, never converted: a model that needs 16 kHz says so.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "anvil/compilation.hpp"
#include "anvil/core/error.hpp"

namespace anvil {

struct audio {
    std::int64_t sample_rate = 0;  // Hz, as the file says
    std::int64_t channels = 0;     // in the file; `samples` is their mean
    std::string encoding;          // "pcm16", "pcm24", "pcm32", "pcm8", "float32", "float64"
    std::vector<float> samples;    // mono, one per frame

    [[nodiscard]] double seconds() const noexcept {
        return sample_rate > 0 ? static_cast<double>(samples.size()) / static_cast<double>(sample_rate) : 0.0;
    }
};

// Limits past which a header is refused as implausible (before anything is allocated).
inline constexpr std::int64_t max_wav_channels = 64;
inline constexpr std::int64_t max_wav_sample_rate = 1'000'000;

// Decodes a WAVE file held in memory; `source` names it in errors (usually its path).
[[nodiscard]] audio decode_wav(std::span<const std::byte> bytes, std::string_view source);

// Reads and decodes a WAVE file (anvil::io_error when it cannot be read).
[[nodiscard]] audio read_wav(const std::filesystem::path& path);

}  // namespace anvil

#if ANVIL_DEFINITIONS
#include "anvil/io/wav-inl.hpp"
#endif
