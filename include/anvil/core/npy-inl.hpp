// anvil: npy's definitions (see npy.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "anvil/core/checked_math.hpp"
#include "anvil/core/convert.hpp"
#include "anvil/core/dtype.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/npy.hpp"
#include "anvil/core/shape.hpp"

namespace anvil::npy {

ANVIL_INLINE void array::check_data_size() const {
    const auto bytes = detail::checked_mul(element_count(), dtype_size(type));
    if (!bytes || *bytes != data.size()) {
        throw shape_error(
            detail::message("npy::array: data has ", data.size(), " bytes, shape ",
                            detail::extents_to_string(shape, false), " of ", dtype_name(type), " needs ",
                            bytes ? std::to_string(*bytes) : std::string("more than 2^64 - 1")));
    }
}

ANVIL_INLINE std::vector<float> array::to_f32() const {
    check_data_size();
    std::vector<float> out(static_cast<std::size_t>(element_count()));
    convert_to_f32(type, data.data(), out.size(), out.data());
    return out;
}

namespace detail {

ANVIL_INLINE std::optional<std::string> descr_of(dtype type) {
    for (const auto& entry : npy_type_codes) {
        if (entry.type == type) {
            return std::string(dtype_size(type) == 1 ? "|" : "<") + std::string(entry.code);
        }
    }
    return std::nullopt;
}

ANVIL_INLINE std::string excerpt(std::string_view text, std::size_t limit) {
    std::string out;
    for (std::size_t i = 0; i < text.size() && i < limit; ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        if (c >= 0x20 && c < 0x7f) {
            out += static_cast<char>(c);
        } else {
            constexpr std::string_view hex = "0123456789abcdef";
            out += "\\x";
            out += hex[c >> 4];
            out += hex[c & 0xf];
        }
    }
    if (text.size() > limit) out += "...";
    return out;
}

ANVIL_INLINE header header_parser::parse() {
    skip_space();
    if (peek() != '{') fail("the header is not a Python dict literal: expected '{', found ", found());
    ++pos_;
    bool seen_descr = false, seen_fortran = false, seen_shape = false;
    skip_space();
    while (peek() != '}') {
        if (at_end()) fail("the header dict is not closed: expected '}'");
        const std::size_t key_start = pos_;
        if (peek() != '\'' && peek() != '"') fail("expected a quoted key or '}', found ", found());
        const std::string_view key = parse_string();
        bool* seen = key == "descr"           ? &seen_descr
                     : key == "fortran_order" ? &seen_fortran
                     : key == "shape"         ? &seen_shape
                                              : nullptr;
        if (seen == nullptr) {
            fail_at(key_start, "unknown key '", excerpt(key),
                    "' (a .npy header has exactly 'descr', 'fortran_order' and 'shape')");
        }
        if (*seen) fail_at(key_start, "the key '", key, "' appears twice");
        *seen = true;
        skip_space();
        if (peek() != ':') fail("expected ':' after the key '", key, "', found ", found());
        ++pos_;
        skip_space();
        if (key == "descr") {
            parse_descr();
        } else if (key == "fortran_order") {
            parse_fortran_order();
        } else {
            parse_shape();
        }
        skip_space();
        if (peek() == ',') {
            ++pos_;
            skip_space();
        } else if (peek() != '}') {
            fail("expected ',' or '}' after the value of '", key, "', found ", found());
        }
    }
    ++pos_;
    skip_space();
    if (!at_end()) fail("unexpected ", found(), " after the header dict");
    if (!seen_descr) fail_missing("descr");
    if (!seen_fortran) fail_missing("fortran_order");
    if (!seen_shape) fail_missing("shape");
    return std::move(result_);
}

ANVIL_INLINE void header_parser::fail_missing(std::string_view key) const {
    throw format_error(message(source_, ": .npy header lacks the key '", key,
                               "' (a .npy header has exactly 'descr', 'fortran_order' and 'shape')"));
}

ANVIL_INLINE std::string header_parser::found() const {
    if (at_end()) return "the end of the header";
    return "'" + excerpt(word(), 12) + "'";
}

ANVIL_INLINE std::string_view header_parser::word() const {
    std::size_t end = pos_;
    while (end < text_.size() &&
           std::string_view(",:)]} \t\r\n\f").find(text_[end]) == std::string_view::npos) {
        ++end;
    }
    return text_.substr(pos_, std::max<std::size_t>(end - pos_, 1));
}

ANVIL_INLINE std::string_view header_parser::parse_string() {
    const char quote = peek();
    const std::size_t start = pos_;
    ++pos_;
    const std::size_t content = pos_;
    while (!at_end() && peek() != quote) {
        if (peek() == '\\') fail("escape sequences in header strings are not supported");
        if (peek() == '\n') break;
        ++pos_;
    }
    if (peek() != quote) fail_at(start, "unterminated string ", excerpt(text_.substr(start), 20));
    ++pos_;
    return text_.substr(content, pos_ - 1 - content);
}

ANVIL_INLINE void header_parser::parse_descr() {
    if (peek() == '[') fail("descr is a list, a structured dtype, which anvil does not read");
    if (peek() != '\'' && peek() != '"') {
        fail("descr must be a quoted string such as '<f4', found ", found());
    }
    const std::size_t start = pos_;
    const std::string_view descr = parse_string();
    std::string_view code = descr;
    bool big_endian = false;
    if (!code.empty() && std::string_view("<>|=").find(code.front()) != std::string_view::npos) {
        big_endian = code.front() == '>';
        code.remove_prefix(1);
    }
    for (const auto& entry : npy_type_codes) {
        if (entry.code == code) {
            result_.type = entry.type;
            result_.big_endian = big_endian && dtype_size(entry.type) > 1;
            return;
        }
    }
    fail_at(start, "unsupported descr '", excerpt(descr),
            "' (anvil reads f2, f4, f8, i1, i2, i4, i8, u1, u2, u4, u8 and b1, in either byte order)");
}

ANVIL_INLINE void header_parser::parse_fortran_order() {
    if (text_.substr(pos_).starts_with("True")) {
        result_.fortran_order = true;
    } else if (text_.substr(pos_).starts_with("False")) {
        result_.fortran_order = false;
    } else {
        fail("fortran_order must be True or False, found '", excerpt(word()), "'");
    }
    pos_ += result_.fortran_order ? 4 : 5;
}

ANVIL_INLINE void header_parser::parse_shape() {
    if (peek() == '[') fail("shape must be a tuple such as (2, 3), found a list");
    if (peek() != '(') fail("shape must be a tuple such as (2, 3), found '", excerpt(word()), "'");
    const std::size_t start = pos_;
    ++pos_;
    bool trailing_comma = false;
    skip_space();
    while (peek() != ')') {
        if (at_end()) fail_at(start, "the shape tuple is not closed: expected ')'");
        if (result_.shape.size() == max_dimensions) {
            fail_at(start, "shape has more than ", max_dimensions, " dimensions");
        }
        result_.shape.push_back(parse_dimension());
        trailing_comma = false;
        skip_space();
        if (peek() == ',') {
            ++pos_;
            trailing_comma = true;
            skip_space();
        } else if (peek() != ')') {
            fail("expected ',' or ')' in the shape tuple, found ", found());
        }
    }
    ++pos_;
    if (result_.shape.size() == 1 && !trailing_comma) {
        fail_at(start, "shape '", excerpt(text_.substr(start, pos_ - start)),
                "' is a number in parentheses, not a tuple (a one-dimensional shape is written (n,))");
    }
}

ANVIL_INLINE std::int64_t header_parser::parse_dimension() {
    const std::string_view literal = word();
    std::string_view digits = literal;
    const bool negative = digits.starts_with('-');
    if (negative) digits.remove_prefix(1);
    if (digits.empty() ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        fail("shape entry '", excerpt(literal), "' is not an integer");
    }
    if (negative) fail("shape has a negative dimension ", excerpt(literal));
    if (digits.size() > 1 && digits.front() == '0') {
        fail("shape entry '", excerpt(literal), "' has a leading zero, which Python integers do not allow");
    }
    std::uint64_t value = 0;
    for (const char c : digits) {
        value = value * 10 + static_cast<std::uint64_t>(c - '0');
        if (value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
            fail("shape entry ", excerpt(literal), " is larger than 2^63 - 1");
        }
    }
    pos_ += literal.size();
    return static_cast<std::int64_t>(value);
}

ANVIL_INLINE std::uint32_t read_little_endian(std::span<const std::byte> bytes) noexcept {
    std::uint32_t value = 0;
    for (std::size_t i = bytes.size(); i-- > 0;)
        value = (value << 8) | std::to_integer<std::uint32_t>(bytes[i]);
    return value;
}

ANVIL_INLINE std::vector<std::byte> fortran_to_c_order(std::span<const std::byte> source,
                                                       std::span<const std::int64_t> shape,
                                                       std::size_t element_size) {
    // Extents of 1 change no offsets; dropping them bounds the work by the element count.
    std::vector<std::size_t> extents, fortran_strides;
    std::size_t stride = 1;
    for (const std::int64_t extent : shape) {
        if (extent == 1) continue;
        extents.push_back(static_cast<std::size_t>(extent));
        fortran_strides.push_back(stride);
        stride *= static_cast<std::size_t>(extent);
    }
    std::vector<std::byte> result(source.size());
    const std::size_t count = source.size() / element_size;
    if (count == 0) return result;
    std::vector<std::size_t> index(extents.size(), 0);
    std::size_t offset = 0;  // in elements, of the current C-order index in the Fortran layout
    for (std::size_t element = 0;; ++element) {
        std::memcpy(result.data() + element * element_size, source.data() + offset * element_size,
                    element_size);
        if (element + 1 == count) break;
        std::size_t axis = extents.size();
        while (axis-- > 0) {
            offset += fortran_strides[axis];
            if (++index[axis] < extents[axis]) break;
            offset -= extents[axis] * fortran_strides[axis];
            index[axis] = 0;
        }
    }
    return result;
}

ANVIL_INLINE parsed_header parse_preamble_and_header(std::span<const std::byte> bytes,
                                                     std::string_view source) {
    constexpr std::string_view magic = "\x93NUMPY";
    const auto fail = [&](const auto&... parts) { throw format_error(message(source, ": ", parts...)); };

    if (bytes.size() < magic.size() ||
        !std::equal(magic.begin(), magic.end(), bytes.begin(),
                    [](char m, std::byte b) { return static_cast<std::byte>(m) == b; })) {
        fail("not a .npy file: it does not start with the magic bytes \\x93NUMPY");
    }
    if (bytes.size() < 8) fail("the file ends inside the .npy format version (", bytes.size(), " bytes)");
    const auto major = std::to_integer<unsigned>(bytes[6]);
    const auto minor = std::to_integer<unsigned>(bytes[7]);
    if (major < 1 || major > 3 || minor != 0) {
        fail("unsupported .npy format version ", major, ".", minor, " (anvil reads 1.0, 2.0 and 3.0)");
    }
    const std::size_t length_size = major == 1 ? 2 : 4;
    const std::size_t header_start = 8 + length_size;
    if (bytes.size() < header_start) {
        fail("the file ends inside the header length field (", bytes.size(), " bytes, version ", major,
             ".0 needs ", header_start, " before the header)");
    }
    const std::size_t header_length = read_little_endian(bytes.subspan(8, length_size));
    if (header_length > bytes.size() - header_start) {
        fail("the header length ", header_length, " runs past the end of the file (",
             bytes.size() - header_start, " bytes follow the length field)");
    }
    // Versions 1.0 and 2.0 are latin-1 and 3.0 UTF-8; both agree on the ASCII the grammar accepts, and any
    // other byte is rejected where it stands.
    const std::string_view text(reinterpret_cast<const char*>(bytes.data() + header_start), header_length);
    parsed_header result{header_parser(text, header_start, source).parse(), header_start + header_length};

    const header& info = result.info;
    const auto count = checked_element_count(std::span<const std::int64_t>(info.shape));
    const auto needed = count ? checked_mul(*count, dtype_size(info.type)) : std::nullopt;
    if (!needed) {
        fail("shape ", extents_to_string(info.shape, false), " of ", dtype_name(info.type),
             " has more bytes than 2^64 - 1 (the element count overflows)");
    }
    const std::size_t data_size = bytes.size() - result.data_offset;
    if (data_size != *needed) {
        fail("data has ", data_size, " bytes, shape ", extents_to_string(info.shape, false), " of ",
             dtype_name(info.type), " needs ", *needed,
             data_size < *needed ? " (the file is truncated)" : " (bytes follow the last element)");
    }
    return result;
}

ANVIL_INLINE array finish_array(header info, std::vector<std::byte> data, std::string_view source) {
    const std::size_t element_size = dtype_size(info.type);
    if (info.big_endian) {
        for (auto element = data.begin(); element != data.end();
             element += static_cast<std::ptrdiff_t>(element_size)) {
            std::reverse(element, element + static_cast<std::ptrdiff_t>(element_size));
        }
    }
    if (info.fortran_order && info.shape.size() > 1) {
        data = fortran_to_c_order(data, info.shape, element_size);
    }
    if (info.type == dtype::boolean) {
        const auto bad = std::find_if(data.begin(), data.end(),
                                      [](std::byte b) { return std::to_integer<unsigned>(b) > 1; });
        if (bad != data.end()) {
            throw format_error(message(source, ": bool element ", bad - data.begin(), " has the byte value ",
                                       std::to_integer<unsigned>(*bad), " (expected 0 or 1)"));
        }
    }
    return array{info.type, std::move(info.shape), std::move(data)};
}

ANVIL_INLINE std::string errno_text(int error_number) {
    return std::generic_category().message(error_number);
}

}  // namespace detail

ANVIL_INLINE array parse(std::span<const std::byte> bytes, std::string_view source_name) {
    detail::parsed_header parsed = detail::parse_preamble_and_header(bytes, source_name);
    const auto payload = bytes.subspan(parsed.data_offset);
    return detail::finish_array(std::move(parsed.info),
                                std::vector<std::byte>(payload.begin(), payload.end()), source_name);
}

ANVIL_INLINE std::vector<std::byte> serialize(dtype type, std::span<const std::int64_t> shape,
                                              const void* data, std::string_view destination) {
    using detail::message;
    const auto descr = detail::descr_of(type);
    if (!descr) {
        throw type_error(
            message(destination, ": cannot write ", dtype_name(type), ": numpy has no such dtype"));
    }
    if (shape.size() > max_dimensions) {
        throw shape_error(message(destination, ": cannot write ", shape.size(), " dimensions (at most ",
                                  max_dimensions, ")"));
    }
    const auto count = detail::checked_element_count(shape);
    const auto data_size = count ? detail::checked_mul(*count, dtype_size(type)) : std::nullopt;
    if (!data_size || *data_size > std::numeric_limits<std::size_t>::max() / 2) {
        throw shape_error(message(destination, ": cannot write shape ",
                                  detail::extents_to_string(shape, false),
                                  ": an extent is negative or the size overflows"));
    }
    if (data == nullptr && *data_size > 0) {
        throw shape_error(message(destination, ": cannot write ", *data_size, " bytes from a null pointer"));
    }

    // As numpy.lib.format._write_array_header: sorted keys, repr() of the shape, spare spaces so the first
    // extent can grow in place, then padding to the alignment.
    std::string header = "{'descr': '" + *descr + "', 'fortran_order': False, 'shape': (";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i > 0) header += ", ";
        header += std::to_string(shape[i]);
    }
    header += shape.size() == 1 ? ",), }" : "), }";
    if (!shape.empty()) header.append(21 - std::to_string(shape[0]).size(), ' ');

    constexpr std::size_t alignment = 64;
    constexpr std::size_t preamble_size = 10;  // magic, version 1.0, u16 header length
    header.append(alignment - (preamble_size + header.size() + 1) % alignment, ' ');
    header += '\n';

    std::vector<std::byte> out;
    out.reserve(preamble_size + header.size() + static_cast<std::size_t>(*data_size));
    for (const char c : std::string_view("\x93NUMPY\x01"))
        out.push_back(static_cast<std::byte>(c));
    out.push_back(std::byte{0});
    out.push_back(static_cast<std::byte>(header.size() & 0xff));
    out.push_back(static_cast<std::byte>(header.size() >> 8));
    for (const char c : header)
        out.push_back(static_cast<std::byte>(c));
    if (*data_size > 0) {
        const auto* elements = static_cast<const std::byte*>(data);
        out.insert(out.end(), elements, elements + static_cast<std::size_t>(*data_size));
    }
    return out;
}

ANVIL_INLINE array read(const std::filesystem::path& path) {
    using detail::message;
    std::error_code ignored;
    if (std::filesystem::is_directory(path, ignored)) {
        throw io_error(message(path.string(), ": is a folder, expected a .npy file"));
    }
    const std::unique_ptr<std::FILE, detail::file_closer> file(std::fopen(path.c_str(), "rb"));
    if (!file) {
        throw io_error(message(path.string(), ": cannot open for reading: ", detail::errno_text(errno)));
    }
    // Sized from the file system when it knows, so one read fills the buffer; pipes grow it as they go.
    std::error_code size_error;
    const std::uintmax_t expected_size = std::filesystem::file_size(path, size_error);
    std::vector<std::byte> bytes;
    std::size_t used = 0;
    for (;;) {
        std::size_t capacity = std::max<std::size_t>(used * 2, 64 * 1024);
        if (used == 0 && !size_error && expected_size < std::numeric_limits<std::size_t>::max() / 2) {
            capacity = std::max(capacity, static_cast<std::size_t>(expected_size) + 1);
        }
        bytes.resize(capacity);
        used += std::fread(bytes.data() + used, 1, bytes.size() - used, file.get());
        if (used < bytes.size()) break;
    }
    if (std::ferror(file.get())) {
        throw io_error(message(path.string(), ": cannot read: ", detail::errno_text(errno)));
    }
    bytes.resize(used);
    const std::string source = path.string();
    detail::parsed_header parsed = detail::parse_preamble_and_header(bytes, source);
    // The elements move to the front of the buffer they were read into: no second copy of a large file.
    bytes.erase(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(parsed.data_offset));
    return detail::finish_array(std::move(parsed.info), std::move(bytes), source);
}

ANVIL_INLINE void write(const std::filesystem::path& path, dtype type, std::span<const std::int64_t> shape,
                        const void* data) {
    using detail::message;
    const std::vector<std::byte> bytes = serialize(type, shape, data, path.string());
    std::unique_ptr<std::FILE, detail::file_closer> file(std::fopen(path.c_str(), "wb"));
    if (!file) {
        throw io_error(message(path.string(), ": cannot open for writing: ", detail::errno_text(errno)));
    }
    const std::size_t written = std::fwrite(bytes.data(), 1, bytes.size(), file.get());
    if (written != bytes.size()) {
        throw io_error(message(path.string(), ": cannot write: ", detail::errno_text(errno)));
    }
    if (std::fclose(file.release()) != 0) {
        throw io_error(message(path.string(), ": cannot write: ", detail::errno_text(errno)));
    }
}

ANVIL_INLINE void write(const std::filesystem::path& path, const array& value) {
    value.check_data_size();
    write(path, value.type, value.shape, value.data.data());
}

}  // namespace anvil::npy
