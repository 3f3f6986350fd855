// anvil: json_parser's definitions (see json_parser.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <array>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "anvil/core/checked_math.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/json_parser.hpp"
#include "anvil/core/json_value.hpp"
#include "anvil/core/json_writer.hpp"

// The same false -Wmaybe-uninitialized as in json_parser.hpp.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace anvil::json {
namespace detail {

ANVIL_INLINE void append_utf8(std::string& out, std::uint32_t code_point) {
    if (code_point < 0x80) {
        out += static_cast<char>(code_point);
        return;
    }
    const unsigned extra = code_point < 0x800 ? 1 : code_point < 0x10000 ? 2 : 3;  // continuation bytes
    char bytes[4];
    bytes[0] = static_cast<char>(((0xff00u >> (extra + 1)) & 0xffu) | (code_point >> (6 * extra)));
    for (unsigned i = 1; i <= extra; ++i)
        bytes[i] = static_cast<char>(0x80u | ((code_point >> (6 * (extra - i))) & 0x3fu));
    out.append(bytes, extra + 1);
}

ANVIL_INLINE void parser::fail(const char* at, std::string_view what) const {
    const std::size_t offset = offset_of(at);
    std::size_t line = 1;
    std::size_t line_start = 0;
    for (std::size_t i = 0; i < offset; ++i) {
        if (begin_[i] == '\n') {
            ++line;
            line_start = i + 1;
        }
    }
    throw json_error(message(source_, ": byte ", offset, ": ", what, " (line ", line, ", column ",
                             offset - line_start + 1, ")"),
                     offset);
}

ANVIL_INLINE std::string parser::found() const {
    const int c = peek();
    if (c < 0) return "found end of input";
    if (c >= 0x21 && c < 0x7f) return message("found '", static_cast<char>(c), "'");
    return message("found byte 0x", hex_digits[c >> 4], hex_digits[c & 15]);
}

ANVIL_INLINE value parser::run() {
    if (p_ == end_) fail(p_, "empty input");
    if (end_ - p_ >= 3 && std::memcmp(p_, "\xEF\xBB\xBF", 3) == 0)
        fail(p_, "byte order mark (U+FEFF) at the start; JSON text must not begin with one");
    skip_whitespace();
    if (p_ == end_) fail(p_, "empty input (only whitespace)");
    for (;;) {
        // A value starts at p_.
        const char open = *p_;
        if (open == '[' || open == '{') {
            if (stack_.size() >= options_.max_depth)
                fail(p_, message("nesting deeper than ", options_.max_depth));
            const std::size_t offset = offset_of(p_++);
            skip_whitespace();
            if (peek() == (open == '[' ? ']' : '}')) {
                ++p_;
                if (open == '[') push(array{}, offset);
                if (open == '{') push(object{}, offset);
            } else {
                stack_.push_back({open == '{', values_.size(), keys_.size(), offset});
                if (open == '{') parse_key();
                if (p_ == end_) fail(p_, "expected a JSON value, found end of input");
                continue;
            }
        } else {
            parse_scalar();
        }
        // A value ended: close containers until a ',' starts the next value.
        for (;;) {
            skip_whitespace();
            if (stack_.empty()) {
                if (p_ != end_) fail(p_, "trailing data after the JSON value");
                return std::move(values_.back());
            }
            const bool in_object = stack_.back().is_object;
            if (peek() == ',') {
                ++p_;
                skip_whitespace();
                if (peek() == (in_object ? '}' : ']'))
                    fail(p_, in_object ? "trailing comma before '}'" : "trailing comma before ']'");
                if (in_object) parse_key();
                if (p_ == end_) fail(p_, "expected a JSON value, found end of input");
                break;
            }
            if (peek() != (in_object ? '}' : ']'))
                fail(p_, message(in_object ? "expected ',' or '}' after object member, "
                                           : "expected ',' or ']' after array element, ",
                                 found()));
            ++p_;
            close_container();
        }
    }
}

ANVIL_INLINE void parser::close_container() {
    const frame top = stack_.back();
    stack_.pop_back();
    const auto first_value = values_.begin() + static_cast<std::ptrdiff_t>(top.first_value);
    if (!top.is_object) {
        array elements(std::make_move_iterator(first_value), std::make_move_iterator(values_.end()));
        values_.erase(first_value, values_.end());
        push(std::move(elements), top.offset);
        return;
    }
    const std::size_t count = keys_.size() - top.first_key;
    std::vector<object::member> members;
    members.reserve(count);
    for (std::size_t i = 0; i < count; ++i)
        members.emplace_back(std::move(keys_[top.first_key + i]), std::move(values_[top.first_value + i]));
    object result;
    const std::size_t duplicate = result.adopt(std::move(members), options_.allow_duplicate_keys);
    if (duplicate != object::no_duplicate) {
        std::string key;
        write_string(key, result.members_[duplicate].first);
        if (key.size() > 80) {
            std::size_t cut = 80;
            while ((static_cast<unsigned char>(key[cut]) & 0xc0u) == 0x80u)
                --cut;  // whole characters only
            key = key.substr(0, cut) + "...\"";
        }
        fail(begin_ + key_offsets_[top.first_key + duplicate], message("duplicate key ", key, " in object"));
    }
    keys_.resize(top.first_key);
    key_offsets_.resize(top.first_key);
    values_.erase(first_value, values_.end());
    push(std::move(result), top.offset);
}

ANVIL_INLINE void parser::parse_key() {
    if (peek() != '"') fail(p_, message("expected a string as object key, ", found()));
    key_offsets_.push_back(offset_of(p_));
    parse_string(keys_.emplace_back());
    skip_whitespace();
    if (peek() != ':') fail(p_, message("expected ':' after object key, ", found()));
    ++p_;
    skip_whitespace();
}

ANVIL_INLINE void parser::parse_scalar() {
    const std::size_t offset = offset_of(p_);
    const char c = *p_;
    if (c == '"') {
        std::string s;
        parse_string(s);
        push(std::move(s), offset);
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        push(parse_number(), offset);
    } else if (c == 't' || c == 'f' || c == 'n') {
        const std::string_view literal = c == 't' ? "true" : c == 'f' ? "false" : "null";
        if (std::string_view(p_, end_).substr(0, literal.size()) != literal)
            fail(p_, message("invalid literal (expected '", literal, "')"));
        p_ += literal.size();
        if (c == 'n') push(value{}, offset);
        if (c != 'n') push(c == 't', offset);
    } else {
        constexpr std::string_view mistakes = "NI+./'";
        constexpr std::array<std::string_view, 6> explanations = {
            "NaN and Infinity are not allowed in JSON",
            "NaN and Infinity are not allowed in JSON",
            "a number cannot start with '+'",
            "a number cannot start with '.'",
            "comments are not allowed in JSON",
            "strings must be enclosed in double quotes, not single quotes"};
        const std::size_t mistake = mistakes.find(c);
        if (mistake != std::string_view::npos) fail(p_, explanations[mistake]);
        fail(p_, message("expected a JSON value, ", found()));
    }
}

ANVIL_INLINE void parser::parse_string(std::string& out) {
    const char* const open = p_;
    const char* p = p_ + 1;
    const char* run = p;  // the start of bytes not yet appended to out
    for (;;) {
        p = skip_plain_string_bytes(p, end_);
        if (p == end_) fail(p, message("unterminated string (it starts at byte ", offset_of(open), ")"));
        const auto c = static_cast<unsigned char>(*p);
        if (c == '"' || c == '\\') out.append(run, static_cast<std::size_t>(p - run));
        if (c == '"') {
            p_ = p + 1;
            return;
        }
        if (c == '\\') {
            p = run = parse_escape(p, out);
        } else if (c < 0x20) {
            fail(p, message("unescaped control character 0x", hex_digits[c >> 4], hex_digits[c & 15],
                            " in string"));
        } else {
            utf8_problem problem{};
            const std::size_t length = utf8_sequence_length(p, end_, problem);
            if (length == 0 && problem == utf8_problem::invalid_byte)
                fail(p, message("invalid UTF-8 (invalid byte 0x", hex_digits[c >> 4], hex_digits[c & 15],
                                ") in string"));
            if (length == 0) fail(p, message("invalid UTF-8 (", utf8_problem_text(problem), ") in string"));
            p += length;
        }
    }
}

ANVIL_INLINE const char* parser::parse_escape(const char* backslash, std::string& out) {
    constexpr std::string_view letters = "\"\\/bfnrt";
    constexpr std::string_view meanings = "\"\\/\b\f\n\r\t";
    const char* p = backslash + 1;
    if (p == end_) fail(p, "unterminated string (input ends inside an escape)");
    if (const std::size_t simple = letters.find(*p); simple != std::string_view::npos) {
        out += meanings[simple];
        return p + 1;
    }
    const auto c = static_cast<unsigned char>(*p);
    if (c != 'u' && c >= 0x21 && c < 0x7f)
        fail(backslash, message("invalid escape '\\", static_cast<char>(c), "' in string"));
    if (c != 'u')
        fail(backslash, message("invalid escape in string: '\\' followed by byte 0x", hex_digits[c >> 4],
                                hex_digits[c & 15]));
    const auto read_hex4 = [&](const char* digits, std::uint32_t& result) {
        result = 0;
        for (int i = 0; i < 4; ++i) {
            const int h = digits + i < end_ ? digits[i] : 0;
            const int letter = h | 0x20;  // lower case, for letters only
            const int nibble = h >= '0' && h <= '9'             ? h - '0'
                               : letter >= 'a' && letter <= 'f' ? letter - 'a' + 10
                                                                : -1;
            if (nibble < 0) return false;
            result = result << 4 | static_cast<std::uint32_t>(nibble);
        }
        return true;
    };
    std::uint32_t code_point = 0;
    if (!read_hex4(p + 1, code_point)) fail(backslash, "invalid \\u escape: expected 4 hex digits");
    p += 5;
    if (code_point >= 0xdc00 && code_point <= 0xdfff)
        fail(backslash, message("lone low surrogate \\u", std::string_view(p - 4, 4),
                                " in string (not preceded by a high surrogate)"));
    if (code_point >= 0xd800 && code_point <= 0xdbff) {
        std::uint32_t low = 0;
        if (end_ - p < 6 || p[0] != '\\' || p[1] != 'u' || !read_hex4(p + 2, low) || low < 0xdc00 ||
            low > 0xdfff)
            fail(backslash, message("high surrogate \\u", std::string_view(p - 4, 4),
                                    " not followed by a low surrogate escape"));
        code_point = 0x10000 + ((code_point - 0xd800) << 10) + (low - 0xdc00);
        p += 6;
    }
    append_utf8(out, code_point);
    return p;
}

ANVIL_INLINE value parser::parse_number() {
    const char* const start = p_;
    const auto digits = [&](const char* p) {
        while (p < end_ && *p >= '0' && *p <= '9')
            ++p;
        return p;
    };
    const auto expect_digit = [&](const char* p, std::string_view after) {
        if (p < end_ && *p >= '0' && *p <= '9') return;
        p_ = p;
        fail(p, message("expected a digit ", after, ", ", found()));
    };
    const bool negative = *p_ == '-';
    const char* const integer_begin = p_ + (negative ? 1 : 0);
    if (negative && integer_begin < end_ && *integer_begin == 'I')
        fail(integer_begin, "NaN and Infinity are not allowed in JSON");
    expect_digit(integer_begin, "after '-'");
    const char* const integer_end = *integer_begin == '0' ? integer_begin + 1 : digits(integer_begin);
    if (*integer_begin == '0' && digits(integer_end) != integer_end) fail(start, "leading zero in number");
    const char* p = integer_end;
    const char* fraction_begin = p;
    const char* fraction_end = p;
    if (p < end_ && *p == '.') {
        fraction_begin = ++p;
        expect_digit(p, "after the decimal point");
        p = fraction_end = digits(p);
    }
    std::int64_t exponent = 0;  // saturated: only consulted to tell underflow from overflow
    const bool has_exponent = p < end_ && (*p == 'e' || *p == 'E');
    if (has_exponent) {
        const bool negative_exponent = ++p < end_ && *p == '-';
        if (p < end_ && (*p == '+' || *p == '-')) ++p;
        expect_digit(p, "in the exponent");
        for (; p < end_ && *p >= '0' && *p <= '9'; ++p)
            if (exponent < 1'000'000'000) exponent = exponent * 10 + (*p - '0');
        if (negative_exponent) exponent = -exponent;
    }
    p_ = p;
    if (fraction_begin == fraction_end && !has_exponent) {
        std::optional<std::uint64_t> magnitude = 0;
        for (const char* d = integer_begin; d < integer_end && magnitude; ++d) {
            magnitude = anvil::detail::checked_mul(*magnitude, 10);
            if (magnitude)
                magnitude = anvil::detail::checked_add(*magnitude, static_cast<std::uint64_t>(*d - '0'));
        }
        constexpr auto int64_max = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
        if (magnitude && *magnitude <= int64_max + (negative ? 1 : 0))  // two's complement wraps -2^63 right
            return static_cast<std::int64_t>(negative ? 0 - *magnitude : *magnitude);
    }
    double result = 0;
    const auto [end, error] = std::from_chars(start, p, result);
    if (error == std::errc::result_out_of_range) {
        // from_chars reports underflow and overflow alike; underflow (to +-0) is fine, overflow is not. The
        // decimal exponent of the first significant digit tells them apart.
        const char* significant = integer_begin;
        while (significant < integer_end && *significant == '0')
            ++significant;
        std::int64_t lead = integer_end - significant - 1;
        if (significant == integer_end) {
            significant = fraction_begin;
            while (significant < fraction_end && *significant == '0')
                ++significant;
            lead = -(significant - fraction_begin) - 1;
        }
        if (lead + exponent >= 0) fail(start, "number out of range (beyond the range of a double)");
        result = negative ? -0.0 : 0.0;
    } else if (error != std::errc{} || end != p) {
        fail(start, "invalid number");
    }
    return result;
}

}  // namespace detail

ANVIL_INLINE value parse(std::string_view text, std::string_view source_name, const parse_options& options) {
    return detail::parser(text, source_name, options).run();
}

ANVIL_INLINE value parse_file(const std::filesystem::path& path, const parse_options& options) {
    const std::string name = path.string();
    const auto io_failure = [&name](std::string_view what) {
        const int error = errno;
        return io_error(
            anvil::detail::message(name, ": cannot ", what, ": ", std::generic_category().message(error)));
    };
    const std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(name.c_str(), "rb"), &std::fclose);
    if (!file) throw io_failure("open");
    std::error_code size_error;
    const auto expected_size = std::filesystem::file_size(path, size_error);
    std::string text;
    if (!size_error) text.reserve(static_cast<std::size_t>(expected_size));
    char buffer[1 << 16];
    for (std::size_t got = sizeof buffer; got == sizeof buffer;) {
        got = std::fread(buffer, 1, sizeof buffer, file.get());
        text.append(buffer, got);
    }
    if (std::ferror(file.get())) throw io_failure("read");
    return parse(text, name, options);
}
}  // namespace anvil::json

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
