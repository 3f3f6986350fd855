// anvil: image's definitions (see image.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <array>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/core/mapped_file.hpp"
#include "anvil/io/image.hpp"

#ifdef ANVIL_WITH_STB_IMAGE
#include <stb_image.h>
#endif

namespace anvil::detail {

ANVIL_INLINE image_format sniff_image_format(std::span<const std::byte> bytes) noexcept {
    const auto starts_with = [bytes](std::string_view magic) {
        return bytes.size() >= magic.size() && std::memcmp(bytes.data(), magic.data(), magic.size()) == 0;
    };
    if (starts_with("P6")) return image_format::ppm;
    if (starts_with("P5")) return image_format::pgm;
    if (starts_with("P1") || starts_with("P2") || starts_with("P3") || starts_with("P4"))
        return image_format::ascii_pnm;
    if (starts_with("\x89PNG\r\n\x1a\n")) return image_format::png;
    if (starts_with("\xff\xd8\xff")) return image_format::jpeg;
    if (starts_with("BM")) return image_format::bmp;
    if (starts_with("GIF87a") || starts_with("GIF89a")) return image_format::gif;
    return image_format::unknown;
}

ANVIL_INLINE std::string_view image_format_name(image_format format) noexcept {
    constexpr std::array<std::string_view, 8> names = {
        "PPM", "PGM", "ASCII or 1-bit PNM", "PNG", "JPEG", "BMP", "GIF", "unknown"};
    return names[static_cast<std::size_t>(format)];
}

ANVIL_INLINE std::string leading_bytes(std::span<const std::byte> bytes) {
    constexpr char digits[] = "0123456789abcdef";
    std::string out;
    for (std::size_t i = 0; i < bytes.size() && i < 8; ++i) {
        const auto b = static_cast<unsigned>(bytes[i]);
        if (i != 0) out += ' ';
        out += "0x";
        out += digits[b >> 4];
        out += digits[b & 15];
    }
    return out.empty() ? std::string("nothing (an empty file)") : out;
}

ANVIL_INLINE image pnm_reader::read() {
    const bool color = static_cast<char>(bytes_[1]) == '6';
    const char* kind = color ? "PPM (P6)" : "PGM (P5)";
    position_ = 2;
    const std::int64_t width = number("width", kind);
    const std::int64_t height = number("height", kind);
    const std::int64_t maxval = number("maxval", kind);
    if (width < 1 || height < 1 || width > max_image_side || height > max_image_side) {
        fail(kind, message("dimensions ", width, " x ", height, " are outside 1..", max_image_side));
    }
    if (maxval < 1 || maxval > 65535) fail(kind, message("maxval ", maxval, " is outside 1..65535"));
    if (position_ >= bytes_.size() || !is_space(static_cast<char>(bytes_[position_]))) {
        fail(kind, "expected one whitespace character after maxval");
    }
    ++position_;

    const std::uint64_t channels = color ? 3 : 1;
    const std::uint64_t sample_bytes = maxval < 256 ? 1 : 2;
    // At most 2^24 * 2^24 * 3 * 2 bytes: the products cannot overflow 64 bits.
    const std::uint64_t samples =
        static_cast<std::uint64_t>(width) * static_cast<std::uint64_t>(height) * channels;
    const std::uint64_t needed = samples * sample_bytes;
    const std::uint64_t available = bytes_.size() - position_;
    if (needed > available) {
        fail(kind, message("truncated pixel data: ", width, " x ", height, " with maxval ", maxval, " needs ",
                           needed, " bytes, the file has ", available, " after the header"));
    }

    image out;
    out.width = width;
    out.height = height;
    out.channels = 3;
    out.pixels.resize(static_cast<std::size_t>(samples / channels * 3));
    const std::byte* raster = bytes_.data() + position_;
    for (std::size_t i = 0; i < static_cast<std::size_t>(samples); ++i) {
        std::uint32_t v = static_cast<std::uint32_t>(raster[i * sample_bytes]);
        if (sample_bytes == 2) v = (v << 8) | static_cast<std::uint32_t>(raster[i * 2 + 1]);
        if (v > static_cast<std::uint32_t>(maxval)) {
            fail(kind, message("sample ", i, " is ", v, ", above maxval ", maxval));
        }
        const std::uint8_t level = to_8_bit(v, static_cast<std::uint32_t>(maxval));
        if (color) {
            out.pixels[i] = level;
        } else {
            out.pixels[i * 3] = out.pixels[i * 3 + 1] = out.pixels[i * 3 + 2] = level;
        }
    }
    return out;
}

ANVIL_INLINE std::int64_t pnm_reader::number(const char* field, const char* kind) {
    while (position_ < bytes_.size()) {
        const char c = static_cast<char>(bytes_[position_]);
        if (is_space(c)) {
            ++position_;
        } else if (c == '#') {
            while (position_ < bytes_.size() && static_cast<char>(bytes_[position_]) != '\n')
                ++position_;
        } else {
            break;
        }
    }
    std::int64_t value = 0;
    std::size_t digits = 0;
    while (position_ < bytes_.size()) {
        const char c = static_cast<char>(bytes_[position_]);
        if (c < '0' || c > '9') break;
        if (++digits > 9) fail(kind, message("the ", field, " has more than 9 digits"));
        value = value * 10 + (c - '0');
        ++position_;
    }
    if (digits == 0) {
        fail(kind, position_ >= bytes_.size()
                       ? message("the header ends before the ", field)
                       : message("expected the ", field, " (a decimal number) at byte ", position_));
    }
    return value;
}

ANVIL_INLINE void pnm_reader::fail(const char* kind, const std::string& what) const {
    throw format_error(detail::message(source_, ": ", kind, ": ", what));
}

#ifdef ANVIL_WITH_STB_IMAGE
// stb_image decodes from memory only (it never opens files here); 8-bit RGB whatever the file holds.
[[nodiscard]] ANVIL_INLINE image decode_with_stb(std::span<const std::byte> bytes, std::string_view source,
                                                 image_format format) {
    if (bytes.size() > static_cast<std::size_t>(INT_MAX)) {
        throw unsupported_error(
            detail::message(source, ": ", bytes.size(), " bytes is more than stb_image reads (2 GiB)"));
    }
    struct stb_free {
        void operator()(stbi_uc* p) const noexcept { stbi_image_free(p); }
    };
    int width = 0;
    int height = 0;
    int channels_in_file = 0;
    const std::unique_ptr<stbi_uc, stb_free> decoded(
        stbi_load_from_memory(reinterpret_cast<const stbi_uc*>(bytes.data()), static_cast<int>(bytes.size()),
                              &width, &height, &channels_in_file, 3));
    if (!decoded) {
        const char* reason = stbi_failure_reason();
        throw format_error(
            detail::message(source, ": cannot decode this ",
                            format == image_format::unknown ? "file" : image_format_name(format),
                            format == image_format::unknown ? "" : " image", ": stb_image says \"",
                            reason ? reason : "unknown error", "\""));
    }
    if (width < 1 || height < 1 || width > max_image_side || height > max_image_side) {
        throw format_error(detail::message(source, ": decoded image has dimensions ", width, " x ", height));
    }
    // stb_image allocated this much already (it checks its own size arithmetic), so it fits a size_t.
    const std::size_t count = static_cast<std::size_t>(width) * static_cast<std::size_t>(height) * 3;
    image out;
    out.width = width;
    out.height = height;
    out.channels = 3;
    out.pixels.assign(decoded.get(), decoded.get() + count);
    return out;
}
#endif

}  // namespace anvil::detail

namespace anvil {

#if defined(ANVIL_SEPARATE_COMPILATION)
ANVIL_INLINE bool can_decode_png_and_jpeg() noexcept {
#ifdef ANVIL_WITH_STB_IMAGE
    return true;
#else
    return false;
#endif
}
#endif

ANVIL_INLINE image decode_image(std::span<const std::byte> bytes, std::string_view source) {
    const detail::image_format format = detail::sniff_image_format(bytes);
    switch (format) {
        case detail::image_format::ppm:
        case detail::image_format::pgm:
            return detail::pnm_reader(bytes, source).read();
        case detail::image_format::ascii_pnm:
            throw unsupported_error(detail::message(
                source, ": ASCII (P1, P2, P3) and 1-bit (P4) Netpbm images are not supported; ",
                "convert to binary PPM (P6) or PGM (P5)"));
        default:
            break;
    }
#ifdef ANVIL_WITH_STB_IMAGE
    if (bytes.empty()) throw format_error(detail::message(source, ": the file is empty"));
    return detail::decode_with_stb(bytes, source, format);
#else
    if (format == detail::image_format::unknown) {
        throw format_error(detail::message(
            source,
            ": not an image anvil recognises (PPM P6, PGM P5; PNG, JPEG, BMP and GIF with stb_image): ",
            "the file starts with ", detail::leading_bytes(bytes)));
    }
    throw unsupported_error(detail::message(
        source, ": ", detail::image_format_name(format),
        " images need stb_image: build with ANVIL_WITH_STB_IMAGE defined and stb_image.h on the include "
        "path ",
        "(Debian: apt-get install libstb-dev, then -DANVIL_WITH_STB_IMAGE -I/usr/include/stb -lstb), ",
        "or convert the image to PPM (P6), which anvil reads without it"));
#endif
}

ANVIL_INLINE image read_image(const std::filesystem::path& path) {
    const auto file = mapped_file::open(path, access_hint::sequential);
    return decode_image(file.bytes(), path.string());
}

}  // namespace anvil
