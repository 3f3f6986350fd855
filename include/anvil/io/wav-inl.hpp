// anvil: the WAVE reader's definitions (see wav.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/core/mapped_file.hpp"
#include "anvil/io/wav.hpp"

namespace anvil {

namespace detail::wav {

inline constexpr std::uint16_t format_pcm = 1;
inline constexpr std::uint16_t format_float = 3;
inline constexpr std::uint16_t format_extensible = 0xFFFE;

// The 14 bytes after the format tag in an extensible SubFormat GUID (KSDATAFORMAT_SUBTYPE_PCM / _IEEE_FLOAT).
inline constexpr unsigned char subformat_suffix[14] = {0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80,
                                                       0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71};

ANVIL_INLINE std::uint32_t u32(std::span<const std::byte> b, std::size_t at) {
    return static_cast<std::uint32_t>(b[at]) | static_cast<std::uint32_t>(b[at + 1]) << 8 |
           static_cast<std::uint32_t>(b[at + 2]) << 16 | static_cast<std::uint32_t>(b[at + 3]) << 24;
}
ANVIL_INLINE std::uint16_t u16(std::span<const std::byte> b, std::size_t at) {
    return static_cast<std::uint16_t>(static_cast<unsigned>(b[at]) | static_cast<unsigned>(b[at + 1]) << 8);
}

// A chunk identifier as text, non-printable bytes as \xNN.
ANVIL_INLINE std::string fourcc(std::span<const std::byte> b, std::size_t at) {
    std::string text;
    for (std::size_t i = at; i < at + 4 && i < b.size(); ++i) {
        const auto c = static_cast<unsigned char>(b[i]);
        if (c >= 0x20 && c < 0x7F) {
            text += static_cast<char>(c);
        } else {
            constexpr char digits[] = "0123456789abcdef";
            text += "\\x";
            text += digits[c >> 4];
            text += digits[c & 15];
        }
    }
    return text;
}

// One frame's samples, their mean.
ANVIL_INLINE float sample_at(const std::byte* p, std::uint16_t tag, unsigned bits) {
    if (tag == format_float) {
        if (bits == 32) {
            float v;
            std::memcpy(&v, p, 4);  // little-endian, as every host anvil runs on
            return v;
        }
        double v;
        std::memcpy(&v, p, 8);
        return static_cast<float>(v);
    }
    const auto byte = [p](int i) { return static_cast<std::uint32_t>(p[i]); };
    switch (bits) {
        case 8:
            return (static_cast<float>(byte(0)) - 128.0f) / 128.0f;
        case 16:
            return static_cast<float>(static_cast<std::int16_t>(byte(0) | byte(1) << 8)) / 32768.0f;
        case 24: {
            const std::uint32_t raw = byte(0) | byte(1) << 8 | byte(2) << 16;
            const auto value = static_cast<std::int32_t>(raw << 8) >> 8;  // sign-extended
            return static_cast<float>(value) / 8388608.0f;
        }
        default:
            return static_cast<float>(static_cast<double>(static_cast<std::int32_t>(
                                          byte(0) | byte(1) << 8 | byte(2) << 16 | byte(3) << 24)) /
                                      2147483648.0);
    }
}

[[noreturn]] ANVIL_INLINE void refuse(std::string_view source, const std::string& what) {
    throw format_error(detail::message(source, ": not a readable WAVE file: ", what));
}

}  // namespace detail::wav

ANVIL_INLINE audio decode_wav(std::span<const std::byte> bytes, std::string_view source) {
    using namespace detail::wav;
    const auto fail = [&](const std::string& what) { refuse(source, what); };
    if (bytes.size() < 12)
        fail(detail::message("it has ", bytes.size(), " bytes, less than the 12 of a RIFF header"));
    if (fourcc(bytes, 0) != "RIFF" || fourcc(bytes, 8) != "WAVE")
        fail(detail::message("it starts with '", fourcc(bytes, 0), "' ... '", fourcc(bytes, 8),
                             "', not 'RIFF' ... 'WAVE'"));
    // The RIFF size bounds the chunks; streaming writers leave it 0 or 0xFFFFFFFF (unknown): then the file's
    // end does.
    const std::uint32_t riff_size = u32(bytes, 4);
    std::size_t end = bytes.size();
    if (riff_size != 0 && riff_size != 0xFFFFFFFFu) {
        if (riff_size < 4)
            fail(detail::message("the RIFF size is ", riff_size, ", less than its 'WAVE' tag"));
        if (static_cast<std::uint64_t>(riff_size) + 8 > bytes.size())
            fail(detail::message("the RIFF header says ", riff_size + 8ull, " bytes but the file has ",
                                 bytes.size(), " (truncated)"));
        end = static_cast<std::size_t>(riff_size) + 8;
    }

    audio result;
    bool have_format = false;
    std::uint16_t tag = 0;
    unsigned bits = 0, block = 0;
    std::size_t at = 12;
    while (at < end) {
        if (end - at < 8)
            fail(detail::message("a chunk header at byte ", at, " needs 8 bytes, ", end - at, " are left"));
        const std::string id = fourcc(bytes, at);
        const std::uint32_t size = u32(bytes, at + 4);
        const std::size_t body = at + 8;
        if (size > end - body)
            fail(detail::message("the '", id, "' chunk at byte ", at, " says ", size, " bytes but ",
                                 end - body, " are left (truncated)"));
        const std::span<const std::byte> chunk = bytes.subspan(body, size);
        if (id == "fmt ") {
            if (have_format) fail("a second 'fmt ' chunk");
            if (size < 16) fail(detail::message("the 'fmt ' chunk has ", size, " bytes, less than 16"));
            tag = u16(chunk, 0);
            result.channels = u16(chunk, 2);
            result.sample_rate = u32(chunk, 4);
            block = u16(chunk, 12);
            bits = u16(chunk, 14);
            if (tag == format_extensible) {
                if (size < 40)
                    fail(detail::message("a WAVE_FORMAT_EXTENSIBLE 'fmt ' chunk has ", size,
                                         " bytes, less than 40"));
                const unsigned valid_bits = u16(chunk, 18);
                const std::uint16_t sub = u16(chunk, 24);
                if ((sub != format_pcm && sub != format_float) ||
                    std::memcmp(chunk.data() + 26, subformat_suffix, sizeof subformat_suffix) != 0)
                    fail(detail::message("the extensible sub-format ", sub,
                                         " is neither PCM (1) nor IEEE float (3) with the standard GUID"));
                if (valid_bits != 0 && valid_bits != bits)
                    fail(detail::message(valid_bits, " valid bits in ", bits,
                                         "-bit containers (only full containers are read)"));
                tag = sub;
            }
            if (tag != format_pcm && tag != format_float)
                fail(detail::message("the format tag is ", tag,
                                     "; only PCM (1), IEEE float (3) and extensible are read"));
            if (result.channels < 1 || result.channels > max_wav_channels)
                fail(detail::message(result.channels, " channels (1 to ", max_wav_channels, " are read)"));
            if (result.sample_rate < 1 || result.sample_rate > max_wav_sample_rate)
                fail(detail::message("a sample rate of ", result.sample_rate, " Hz"));
            const bool pcm_bits = bits == 8 || bits == 16 || bits == 24 || bits == 32;
            if ((tag == format_pcm && !pcm_bits) || (tag == format_float && bits != 32 && bits != 64))
                fail(detail::message(bits, "-bit ", tag == format_pcm ? "PCM" : "float",
                                     " samples (PCM: 8, 16, 24 or 32 bits; float: 32 or 64)"));
            if (block != result.channels * bits / 8)
                fail(detail::message("the block align is ", block, "; ", result.channels, " channels of ",
                                     bits, " bits need ", result.channels * bits / 8));
            result.encoding =
                tag == format_float ? detail::message("float", bits) : detail::message("pcm", bits);
            have_format = true;
        } else if (id == "data") {
            if (!have_format) fail("the 'data' chunk comes before any 'fmt ' chunk");
            if (size % block != 0)
                fail(detail::message("the 'data' chunk's ", size, " bytes are not a whole number of ", block,
                                     "-byte frames"));
            const std::size_t frames = size / block;
            const auto channels = static_cast<std::size_t>(result.channels);
            const std::size_t width = bits / 8;
            result.samples.resize(frames);
            for (std::size_t f = 0; f < frames; ++f) {
                const std::byte* frame = chunk.data() + f * block;
                double sum = 0.0;
                for (std::size_t c = 0; c < channels; ++c)
                    sum += sample_at(frame + c * width, tag, bits);
                result.samples[f] = static_cast<float>(sum / static_cast<double>(channels));
            }
            return result;
        }
        // Chunks are word-aligned: an odd size is followed by a pad byte (which a file may end without).
        at = body + size + (size % 2);
    }
    refuse(source, have_format ? "no 'data' chunk" : "no 'fmt ' chunk");
}

ANVIL_INLINE audio read_wav(const std::filesystem::path& path) {
    const auto file = mapped_file::open(path, access_hint::sequential);
    return decode_wav(file.bytes(), path.string());
}

}  // namespace anvil
