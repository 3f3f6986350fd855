// anvil: json_writer's definitions (see json_writer.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <bit>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/core/json_value.hpp"
#include "anvil/core/json_writer.hpp"

namespace anvil::json {
namespace detail {

ANVIL_INLINE std::size_t utf8_sequence_length(const char* at, const char* end,
                                              utf8_problem& problem) noexcept {
    const auto* p = reinterpret_cast<const unsigned char*>(at);
    const unsigned lead = p[0];
    if (lead < 0xc2 || lead >= 0xf5) {
        problem = lead < 0xc0   ? utf8_problem::continuation
                  : lead < 0xc2 ? utf8_problem::overlong
                  : lead < 0xf8 ? utf8_problem::too_large
                                : utf8_problem::invalid_byte;
        return 0;
    }
    const std::size_t length = lead < 0xe0 ? 2 : lead < 0xf0 ? 3 : 4;
    for (std::size_t i = 1; i < length; ++i) {
        if (at + i >= end || (p[i] & 0xc0u) != 0x80u) {
            problem = utf8_problem::truncated;
            return 0;
        }
    }
    const unsigned low = lead == 0xe0 ? 0xa0 : lead == 0xf0 ? 0x90 : 0x80;  // the second byte's range
    const unsigned high = lead == 0xed ? 0x9f : lead == 0xf4 ? 0x8f : 0xbf;
    if (p[1] < low || p[1] > high) {
        problem = p[1] < low     ? utf8_problem::overlong
                  : lead == 0xed ? utf8_problem::surrogate
                                 : utf8_problem::too_large;
        return 0;
    }
    return length;
}

ANVIL_INLINE const char* skip_plain_string_bytes(const char* p, const char* end) noexcept {
    static_assert(std::endian::native == std::endian::little, "the SWAR scan reads the first byte lowest");
    constexpr std::uint64_t ones = 0x0101010101010101u;
    while (end - p >= 8) {
        std::uint64_t word = 0;
        std::memcpy(&word, p, 8);
        const std::uint64_t quote = word ^ (ones * '"');
        const std::uint64_t backslash = word ^ (ones * '\\');
        const std::uint64_t stops = (word | ((word - ones * 0x20) & ~word) | ((quote - ones) & ~quote) |
                                     ((backslash - ones) & ~backslash)) &
                                    (ones * 0x80);
        if (stops != 0) return p + (std::countr_zero(stops) >> 3);
        p += 8;
    }
    while (p < end && static_cast<unsigned char>(*p) >= 0x20 && static_cast<unsigned char>(*p) < 0x80 &&
           *p != '"' && *p != '\\')
        ++p;
    return p;
}

ANVIL_INLINE void write_string(std::string& out, const std::string& s) {
    constexpr std::string_view escaped = "\"\\\b\f\n\r\t";
    constexpr std::string_view escape_letters = "\"\\bfnrt";
    out += '"';
    const char* const end = s.data() + s.size();
    const char* run = s.data();  // the start of bytes not yet copied to out
    for (const char* p = run;;) {
        p = skip_plain_string_bytes(p, end);
        if (p == end) break;
        const auto c = static_cast<unsigned char>(*p);
        if (c >= 0x80) {
            utf8_problem problem{};
            const std::size_t length = utf8_sequence_length(p, end, problem);
            if (length == 0)
                throw type_error(message("JSON: cannot write a string that is not valid UTF-8 (",
                                         utf8_problem_text(problem), " at byte ", p - s.data(),
                                         " of the string)"));
            p += length;
            continue;
        }
        out.append(run, p);
        const std::size_t letter = escaped.find(*p);
        if (letter != std::string_view::npos) {
            out += '\\';
            out += escape_letters[letter];
        } else {  // lower-case hex, as Python writes it
            out += "\\u00";
            out += static_cast<char>(hex_digits[c >> 4] | 0x20);
            out += static_cast<char>(hex_digits[c & 15] | 0x20);
        }
        run = ++p;
    }
    out.append(run, end);
    out += '"';
}

ANVIL_INLINE void write_scalar(std::string& out, const value& v) {
    char buffer[32];
    if (v.is_null()) out += "null";
    if (v.is_bool()) out += v.as_bool() ? "true" : "false";
    if (v.is_string()) write_string(out, v.as_string());
    if (v.is_integer()) out.append(buffer, std::to_chars(buffer, buffer + sizeof buffer, v.as_int()).ptr);
    if (v.is_double()) {
        const double d = v.as_double();
        if (!std::isfinite(d))
            throw type_error(
                message("JSON: cannot write the non-finite number ", d, " (JSON has no NaN or Infinity)"));
        // The shortest text that reads back as d; ".0" keeps an integral double a double when read back.
        const std::string_view text(buffer, std::to_chars(buffer, buffer + sizeof buffer, d).ptr);
        out += text;
        if (text.find_first_of(".e") == std::string_view::npos) out += ".0";
    }
}

}  // namespace detail

ANVIL_INLINE std::string dump(const value& v, int indent) {
    struct frame {
        const value* container;
        std::size_t next;
    };
    std::vector<frame> stack;
    std::string out;
    const auto new_line = [&] {
        if (indent < 0) return;
        out += '\n';
        out.append(stack.size() * static_cast<std::size_t>(indent), ' ');
    };
    const auto open = [&](const value& x) {
        if (x.is_array() || x.is_object()) {
            out += x.is_array() ? '[' : '{';
            stack.push_back({&x, 0});
        } else {
            detail::write_scalar(out, x);
        }
    };
    open(v);
    while (!stack.empty()) {
        const frame top = stack.back();
        const bool is_object = top.container->is_object();
        const std::size_t size =
            is_object ? top.container->as_object().size() : top.container->as_array().size();
        if (top.next == size) {
            stack.pop_back();
            if (size > 0) new_line();
            out += is_object ? '}' : ']';
            continue;
        }
        if (top.next > 0) out += ',';
        new_line();
        ++stack.back().next;
        if (!is_object) {
            open(top.container->as_array()[top.next]);
            continue;
        }
        const object::member& m =
            *std::next(top.container->as_object().begin(), static_cast<std::ptrdiff_t>(top.next));
        detail::write_string(out, m.first);
        out += indent < 0 ? ":" : ": ";
        open(m.second);
    }
    return out;
}

}  // namespace anvil::json
