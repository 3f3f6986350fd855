// anvil: images as classifiers take them: 8-bit RGB, rows top to bottom, channels interleaved. Binary PPM
// (P6) and PGM (P5) are read by anvil itself and always work; PNG, JPEG, BMP, GIF, TGA... are decoded by
// stb_image when the build defines ANVIL_WITH_STB_IMAGE and has <stb_image.h> on the include path (Debian:
// libstb-dev, -I/usr/include/stb -lstb; a project that vendors stb defines STB_IMAGE_IMPLEMENTATION in one
// .cpp). The format is told by the file's first bytes, never by its name. Every input is treated as hostile:
// sizes are checked before anything is allocated, and errors name the file and what is wrong.
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

// A decoded image. decode_image always gives RGB (channels == 3): grayscale is replicated and alpha dropped,
// as PIL's Image.convert("RGB") does.
struct image {
    std::int64_t width = 0;
    std::int64_t height = 0;
    std::int64_t channels = 3;
    std::vector<std::uint8_t> pixels;  // height * width * channels bytes
};

// True when PNG and JPEG can be decoded (the build defines ANVIL_WITH_STB_IMAGE). Under separate compilation
// the answer is the compiled library's, so it is an ordinary function there, defined in image-inl.hpp.
#if defined(ANVIL_SEPARATE_COMPILATION)
[[nodiscard]] bool can_decode_png_and_jpeg() noexcept;
#else
[[nodiscard]] constexpr bool can_decode_png_and_jpeg() noexcept {
#ifdef ANVIL_WITH_STB_IMAGE
    return true;
#else
    return false;
#endif
}
#endif

namespace detail {

// Larger sides are refused before any allocation (stb_image's own limit).
inline constexpr std::int64_t max_image_side = std::int64_t{1} << 24;

enum class image_format : std::uint8_t { ppm, pgm, ascii_pnm, png, jpeg, bmp, gif, unknown };

[[nodiscard]] image_format sniff_image_format(std::span<const std::byte> bytes) noexcept;

[[nodiscard]] std::string_view image_format_name(image_format format) noexcept;

// "0x89 0x50 ..." for the first few bytes, so a message shows what the file starts with.
[[nodiscard]] std::string leading_bytes(std::span<const std::byte> bytes);

// Binary PPM/PGM (Netpbm): "P6" or "P5", whitespace and #-comments, width, height, maxval, one whitespace
// character, then the raster (1 byte a sample for maxval < 256, else 2 bytes big-endian).
class pnm_reader {
public:
    pnm_reader(std::span<const std::byte> bytes, std::string_view source) : bytes_(bytes), source_(source) {}

    [[nodiscard]] image read();

private:
    // maxval 255 is the identity and 65535 keeps the high byte (as PIL's "RGB;16B" and stb_image do); other
    // maxvals are scaled to 0..255 and rounded.
    [[nodiscard]] static std::uint8_t to_8_bit(std::uint32_t v, std::uint32_t maxval) noexcept {
        if (maxval == 255) return static_cast<std::uint8_t>(v);
        if (maxval == 65535) return static_cast<std::uint8_t>(v >> 8);
        return static_cast<std::uint8_t>((v * 255 + maxval / 2) / maxval);
    }

    [[nodiscard]] static bool is_space(char c) noexcept {
        return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
    }

    // Skips whitespace and comments, then reads a decimal number; at most 9 digits, so it cannot overflow.
    [[nodiscard]] std::int64_t number(const char* field, const char* kind);

    template <class... Parts>
    [[nodiscard]] static std::string message(const Parts&... parts) {
        return detail::message(parts...);
    }

    [[noreturn]] void fail(const char* kind, const std::string& what) const;

    std::span<const std::byte> bytes_;
    std::string_view source_;
    std::size_t position_ = 0;
};

}  // namespace detail

// Decodes an image held in memory; `source` names it in errors (usually its path). PPM (P6) and PGM (P5)
// always work; other formats need ANVIL_WITH_STB_IMAGE (else anvil::unsupported_error says how to enable
// them). Malformed data throws anvil::format_error naming the source and the problem.
[[nodiscard]] image decode_image(std::span<const std::byte> bytes, std::string_view source);

// Reads and decodes an image file (anvil::io_error when it cannot be read).
[[nodiscard]] image read_image(const std::filesystem::path& path);

}  // namespace anvil

#if ANVIL_DEFINITIONS
#include "anvil/io/image-inl.hpp"
#endif
