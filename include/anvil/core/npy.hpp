// anvil: numpy's .npy files, read and written. The command line takes its inputs and writes its outputs in
// this format, so the reader accepts what numpy writes (versions 1.0-3.0, either byte order, Fortran order)
// and treats every byte as hostile; the writer produces byte for byte what numpy.save produces.
#pragma once

#include "anvil/core/checked_math.hpp"
#include "anvil/core/convert.hpp"
#include "anvil/core/dtype.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/half.hpp"
#include "anvil/core/shape.hpp"

#include <algorithm>
#include <array>
#include <bit>
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
#include <type_traits>
#include <vector>

namespace anvil::npy {

static_assert(std::endian::native == std::endian::little,
              "anvil::npy keeps element bytes in little-endian order and assumes a little-endian host");

// numpy (since 2.0) refuses more dimensions than this; anvil refuses them too, so a hostile header cannot
// make reordering cost dimensions x elements.
inline constexpr std::size_t max_dimensions = 64;

namespace detail {

using anvil::detail::checked_element_count;
using anvil::detail::checked_mul;
using anvil::detail::extents_to_string;
using anvil::detail::message;

// numpy's spelling of each element type anvil can store in a .npy file (bf16 and fp8 have none).
struct npy_type_code {
    dtype type;
    std::string_view code;  // the descr without its byte-order character
};

inline constexpr std::array<npy_type_code, 12> npy_type_codes{{
    {dtype::f64, "f8"},
    {dtype::f32, "f4"},
    {dtype::f16, "f2"},
    {dtype::i64, "i8"},
    {dtype::i32, "i4"},
    {dtype::i16, "i2"},
    {dtype::i8, "i1"},
    {dtype::u64, "u8"},
    {dtype::u32, "u4"},
    {dtype::u16, "u2"},
    {dtype::u8, "u1"},
    {dtype::boolean, "b1"},
}};

// The descr numpy writes for a type: '<f4', and '|u1' where byte order does not apply.
[[nodiscard]] inline std::optional<std::string> descr_of(dtype type) {
    for (const auto& entry : npy_type_codes) {
        if (entry.type == type) {
            return std::string(dtype_size(type) == 1 ? "|" : "<") + std::string(entry.code);
        }
    }
    return std::nullopt;
}

// Header text quoted for a message: non-printable bytes escaped, long runs cut short.
[[nodiscard]] inline std::string excerpt(std::string_view text, std::size_t limit = 40) {
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

}  // namespace detail

// A whole .npy array in memory: little-endian element bytes in C order, whatever the file's byte order and
// layout were.
struct array {
    dtype type = dtype::f32;
    std::vector<std::int64_t> shape;  // C order; empty for a 0-d (scalar) array
    std::vector<std::byte> data;      // element_count() * dtype_size(type) bytes

    [[nodiscard]] std::uint64_t element_count() const {
        const auto count = detail::checked_element_count(std::span<const std::int64_t>(shape));
        if (!count) throw shape_error("npy::array: shape has a negative extent or too many elements");
        return *count;
    }

    // Throws shape_error unless data holds exactly the bytes that shape and type need (for arrays built by
    // hand; parse and read only return arrays that pass).
    void check_data_size() const {
        const auto bytes = detail::checked_mul(element_count(), dtype_size(type));
        if (!bytes || *bytes != data.size()) {
            throw shape_error(
                detail::message("npy::array: data has ", data.size(), " bytes, shape ",
                                detail::extents_to_string(shape, false), " of ", dtype_name(type), " needs ",
                                bytes ? std::to_string(*bytes) : std::string("more than 2^64 - 1")));
        }
    }

    // The elements as f32 whatever the dtype, converted by anvil::convert_to_f32.
    [[nodiscard]] std::vector<float> to_f32() const {
        check_data_size();
        std::vector<float> out(static_cast<std::size_t>(element_count()));
        convert_to_f32(type, data.data(), out.size(), out.data());
        return out;
    }

    // The elements copied out as T, which must be the array's own element type (no conversion).
    template <class T>
    [[nodiscard]] std::vector<T> values() const;
};

namespace detail {

// What the header dict says.
struct header {
    dtype type = dtype::f32;
    bool big_endian = false;
    bool fortran_order = false;
    std::vector<std::int64_t> shape;
};

// A strict parser for the Python dict literal numpy writes as the header, and the hand-written variants
// Python itself would read: keys in any order, either quote, any spacing, trailing commas. Nothing is
// evaluated; the three keys and their value types are fixed.
class header_parser {
public:
    header_parser(std::string_view text, std::size_t file_offset, std::string_view source)
        : text_(text), file_offset_(file_offset), source_(source) {}

    [[nodiscard]] header parse() {
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

private:
    template <class... Parts>
    [[noreturn]] void fail_at(std::size_t pos, const Parts&... parts) const {
        throw format_error(message(source_, ": .npy header, byte ", file_offset_ + pos, ": ", parts...));
    }
    template <class... Parts>
    [[noreturn]] void fail(const Parts&... parts) const {
        fail_at(pos_, parts...);
    }
    [[noreturn]] void fail_missing(std::string_view key) const {
        throw format_error(message(source_, ": .npy header lacks the key '", key,
                                   "' (a .npy header has exactly 'descr', 'fortran_order' and 'shape')"));
    }

    [[nodiscard]] bool at_end() const noexcept { return pos_ >= text_.size(); }
    [[nodiscard]] char peek() const noexcept { return at_end() ? '\0' : text_[pos_]; }
    [[nodiscard]] std::string found() const {
        if (at_end()) return "the end of the header";
        return "'" + excerpt(word(), 12) + "'";
    }
    void skip_space() noexcept {
        while (!at_end() &&
               (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r' || peek() == '\f')) {
            ++pos_;
        }
    }
    // A run of characters up to the next delimiter, for naming a value the parser does not accept.
    [[nodiscard]] std::string_view word() const {
        std::size_t end = pos_;
        while (end < text_.size() &&
               std::string_view(",:)]} \t\r\n\f").find(text_[end]) == std::string_view::npos) {
            ++end;
        }
        return text_.substr(pos_, std::max<std::size_t>(end - pos_, 1));
    }

    // A quoted string without escapes: numpy's keys and descrs never need them.
    [[nodiscard]] std::string_view parse_string() {
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

    void parse_descr() {
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

    void parse_fortran_order() {
        if (text_.substr(pos_).starts_with("True")) {
            result_.fortran_order = true;
        } else if (text_.substr(pos_).starts_with("False")) {
            result_.fortran_order = false;
        } else {
            fail("fortran_order must be True or False, found '", excerpt(word()), "'");
        }
        pos_ += result_.fortran_order ? 4 : 5;
    }

    void parse_shape() {
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

    [[nodiscard]] std::int64_t parse_dimension() {
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
            fail("shape entry '", excerpt(literal),
                 "' has a leading zero, which Python integers do not allow");
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

    std::string_view text_;
    std::size_t pos_ = 0;
    std::size_t file_offset_;
    std::string_view source_;
    header result_;
};

[[nodiscard]] inline std::uint32_t read_little_endian(std::span<const std::byte> bytes) noexcept {
    std::uint32_t value = 0;
    for (std::size_t i = bytes.size(); i-- > 0;)
        value = (value << 8) | std::to_integer<std::uint32_t>(bytes[i]);
    return value;
}

// Rewrites Fortran-order (first index fastest) elements in C order (last index fastest).
[[nodiscard]] inline std::vector<std::byte> fortran_to_c_order(std::span<const std::byte> source,
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

// The element types numpy has a dtype for: anvil's element types less bfloat16.
template <class T>
concept npy_element = element_type<T> && !std::is_same_v<T, bfloat16>;

static_assert(sizeof(bool) == 1 && sizeof(half) == 2, "npy element types must have numpy's sizes");

}  // namespace detail

template <class T>
std::vector<T> array::values() const {
    static_assert(
        detail::npy_element<T>,
        "npy::array::values<T>: T must be double, float, anvil::half, bool or a fixed-width integer");
    if (type != dtype_of_v<T>) {
        throw type_error(detail::message("npy::array: elements are ", dtype_name(type), ", not ",
                                         dtype_name(dtype_of_v<T>)));
    }
    check_data_size();
    std::vector<T> out(data.size() / sizeof(T));
    if constexpr (std::is_same_v<T, bool>) {
        // std::vector<bool> packs bits and has no data().
        for (std::size_t i = 0; i < data.size(); ++i)
            out[i] = data[i] != std::byte{0};
    } else if (!data.empty()) {
        std::memcpy(out.data(), data.data(), data.size());
    }
    return out;
}

namespace detail {

// The preamble and header of a .npy file, checked against the file's size.
struct parsed_header {
    header info;
    std::size_t data_offset = 0;
};

[[nodiscard]] inline parsed_header parse_preamble_and_header(std::span<const std::byte> bytes,
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

// Brings the elements, exactly as the file stored them, to little-endian C order, and checks bools.
[[nodiscard]] inline array finish_array(header info, std::vector<std::byte> data, std::string_view source) {
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

}  // namespace detail

// Parses a whole .npy file held in memory; source_name starts every error message.
[[nodiscard]] inline array parse(std::span<const std::byte> bytes, std::string_view source_name) {
    detail::parsed_header parsed = detail::parse_preamble_and_header(bytes, source_name);
    const auto payload = bytes.subspan(parsed.data_offset);
    return detail::finish_array(std::move(parsed.info),
                                std::vector<std::byte>(payload.begin(), payload.end()), source_name);
}

// The bytes numpy.save would write for this array: format 1.0, the header padded with spaces to a multiple of
// 64 bytes, then the elements as given (little-endian, C order). numpy moves to 2.0 only for headers past
// 65535 bytes, and one of at most max_dimensions extents stays under 2 KB.
// destination names the file (or "npy::serialize") in error messages.
[[nodiscard]] inline std::vector<std::byte> serialize(dtype type, std::span<const std::int64_t> shape,
                                                      const void* data,
                                                      std::string_view destination = "npy::serialize") {
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

namespace detail {

struct file_closer {
    void operator()(std::FILE* file) const noexcept { std::fclose(file); }
};

[[nodiscard]] inline std::string errno_text(int error_number) {
    return std::generic_category().message(error_number);
}

}  // namespace detail

// Reads a whole .npy file; io_error when it cannot be read, format_error when it is not a valid .npy.
// Works on pipes too: the file system's size is only a hint.
[[nodiscard]] inline array read(const std::filesystem::path& path) {
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

// Writes a .npy file as numpy.save would; data holds element_count(shape) little-endian elements in C order.
inline void write(const std::filesystem::path& path, dtype type, std::span<const std::int64_t> shape,
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

inline void write(const std::filesystem::path& path, const array& value) {
    value.check_data_size();
    write(path, value.type, value.shape, value.data.data());
}

// The dtype follows T: float '<f4', anvil::half '<f2', std::int64_t '<i8', std::int32_t '<i4', double '<f8',
// bool '|b1', and the other fixed-width integers.
template <class T>
void write(const std::filesystem::path& path, std::span<const std::int64_t> shape,
           std::span<const T> values) {
    static_assert(detail::npy_element<T>,
                  "npy::write<T>: T must be double, float, anvil::half, bool or a fixed-width integer");
    const auto count = detail::checked_element_count(shape);
    if (!count || *count != values.size()) {
        throw shape_error(detail::message(path.string(), ": shape ", detail::extents_to_string(shape, false),
                                          " needs ", count ? std::to_string(*count) : std::string("too many"),
                                          " elements, got ", values.size()));
    }
    write(path, dtype_of_v<T>, shape, values.data());
}

template <class T, class Allocator>
void write(const std::filesystem::path& path, std::span<const std::int64_t> shape,
           const std::vector<T, Allocator>& values) {
    write(path, shape, std::span<const T>(values));
}

}  // namespace anvil::npy
