// anvil: unicode's definitions (see unicode.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>

#include "anvil/core/error.hpp"
#include "anvil/io/unicode.hpp"
#include "anvil/io/unicode_tables.hpp"

namespace anvil::detail {

constexpr unicode_category lookup_category(char32_t cp) {
    if (cp > max_code_point) return unicode_category::cn;
    const auto& starts = unicode_tables::category_starts;
    const auto* after =
        std::upper_bound(std::begin(starts), std::end(starts), (std::uint32_t{cp} << 8) | 0xFFu);
    return static_cast<unicode_category>(*(after - 1) & 0xFFu);
}

inline constexpr std::array<unicode_category, 256> latin1_categories = [] {
    std::array<unicode_category, 256> table{};
    for (char32_t cp = 0; cp < 256; ++cp)
        table[cp] = lookup_category(cp);
    return table;
}();

ANVIL_INLINE utf8_step read_utf8(std::string_view text, std::size_t at) {
    const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[at + i]); };
    const unsigned lead = byte(0);
    if (lead < 0x80) return {lead, 1, 0, nullptr};
    std::size_t need = 0;
    unsigned low = 0x80, high = 0xBF;  // the range allowed for the second byte
    const char* second_problem = "expected a continuation byte (0x80-0xBF)";
    if (lead >= 0xC2 && lead <= 0xDF) {
        need = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
        need = 3;
        if (lead == 0xE0) low = 0xA0, second_problem = "overlong encoding";
        if (lead == 0xED) high = 0x9F, second_problem = "UTF-16 surrogate (U+D800-U+DFFF)";
    } else if (lead >= 0xF0 && lead <= 0xF4) {
        need = 4;
        if (lead == 0xF0) low = 0x90, second_problem = "overlong encoding";
        if (lead == 0xF4) high = 0x8F, second_problem = "code point beyond U+10FFFF";
    } else {
        return {0, 0, 1,
                lead < 0xC0   ? "continuation byte without a lead byte"
                : lead < 0xC2 ? "overlong encoding (lead byte 0xC0 or 0xC1)"
                              : "byte that never appears in UTF-8 (0xF5-0xFF)"};
    }
    char32_t code_point = lead & (0xFFu >> (need + 1));
    for (std::size_t i = 1; i < need; ++i) {
        if (at + i >= text.size()) return {0, 0, i, "sequence truncated by the end of the text"};
        const unsigned next = byte(i);
        const bool fits = i == 1 ? next >= low && next <= high : next >= 0x80 && next <= 0xBF;
        if (!fits)
            return {0, 0, i,
                    i == 1 && next >= 0x80 && next <= 0xBF ? second_problem
                                                           : "expected a continuation byte (0x80-0xBF)"};
        code_point = (code_point << 6) | (next & 0x3F);
    }
    return {code_point, need, 0, nullptr};
}

ANVIL_INLINE void validate_utf8(std::string_view text, std::string_view what) {
    for (std::size_t at = 0; at < text.size();) {
        if (static_cast<unsigned char>(text[at]) < 0x80) {
            ++at;
            continue;
        }
        const utf8_step step = read_utf8(text, at);
        if (step.length == 0) {
            constexpr std::string_view hex = "0123456789ABCDEF";
            const auto byte = static_cast<unsigned char>(text[at]);
            throw format_error(message(what, ": invalid UTF-8 at byte ", at, " (0x", hex[byte >> 4],
                                       hex[byte & 15], "): ", step.problem));
        }
        at += step.length;
    }
}

ANVIL_INLINE std::string utf8_lossy(std::string_view bytes) {
    std::string out;
    out.reserve(bytes.size());
    for (std::size_t at = 0; at < bytes.size();) {
        if (static_cast<unsigned char>(bytes[at]) < 0x80) {
            out += bytes[at++];
            continue;
        }
        const utf8_step step = read_utf8(bytes, at);
        if (step.length != 0) {
            out.append(bytes.substr(at, step.length));
            at += step.length;
        } else {
            append_utf8(out, replacement_character);
            at += step.invalid_length;
        }
    }
    return out;
}

ANVIL_INLINE unicode_category category(char32_t cp) {
    return cp < 256 ? latin1_categories[cp] : lookup_category(cp);
}

ANVIL_INLINE code_point_sequence to_lower(char32_t cp) {
    if (cp < 0x80) return {{cp >= 'A' && cp <= 'Z' ? cp + 32 : cp}, 1};
    for (const auto& multi : unicode_tables::lower_multi) {
        if (multi.code_point == cp) {
            code_point_sequence out;
            for (std::size_t i = 0; i < multi.length; ++i)
                out.code_points[i] = unicode_tables::lower_multi_pool[multi.offset + i];
            out.size = multi.length;
            return out;
        }
    }
    const auto& runs = unicode_tables::lower_runs;
    const auto* after = std::upper_bound(std::begin(runs), std::end(runs), std::uint32_t{cp},
                                         [](std::uint32_t c, const auto& run) { return c < run.first; });
    if (after != std::begin(runs)) {
        const auto& run = *(after - 1);
        if (cp <= run.last && (cp - run.first) % run.stride == 0)
            return {{static_cast<char32_t>(static_cast<std::int64_t>(cp) + run.delta)}, 1};
    }
    return {{cp}, 1};
}

ANVIL_INLINE std::uint8_t combining_class(char32_t cp) {
    if (cp < 0x300) return 0;
    const auto& runs = unicode_tables::combining_class_runs;
    const auto* after = std::upper_bound(std::begin(runs), std::end(runs), std::uint32_t{cp},
                                         [](std::uint32_t c, const auto& run) { return c < run.first; });
    if (after == std::begin(runs) || cp > (after - 1)->last) return 0;
    return static_cast<std::uint8_t>((after - 1)->combining_class);
}

ANVIL_INLINE void append_decomposition(char32_t cp, std::u32string& out) {
    constexpr char32_t s_base = 0xAC00, l_base = 0x1100, v_base = 0x1161, t_base = 0x11A7;
    constexpr char32_t t_count = 28, n_count = 21 * 28, s_count = 19 * 21 * 28;
    if (cp < 0xC0) {
        out += cp;
    } else if (cp >= s_base && cp < s_base + s_count) {  // Hangul syllables decompose algorithmically
        const char32_t index = cp - s_base;
        out += l_base + index / n_count;
        out += v_base + (index % n_count) / t_count;
        if (index % t_count != 0) out += t_base + index % t_count;
    } else {
        const auto& table = unicode_tables::decompositions;
        const auto* found =
            std::lower_bound(std::begin(table), std::end(table), std::uint32_t{cp},
                             [](const auto& entry, std::uint32_t c) { return entry.code_point < c; });
        if (found == std::end(table) || found->code_point != cp) {
            out += cp;
            return;
        }
        for (std::size_t i = 0; i < found->length; ++i)
            out += unicode_tables::decomposition_pool[found->offset + i];
    }
}

ANVIL_INLINE std::u32string nfd(std::u32string_view text) {
    std::u32string out;
    out.reserve(text.size());
    for (const char32_t cp : text)
        append_decomposition(cp, out);
    for (std::size_t i = 0; i < out.size();) {
        if (combining_class(out[i]) == 0) {
            ++i;
            continue;
        }
        std::size_t end = i;
        while (end < out.size() && combining_class(out[end]) != 0)
            ++end;
        if (end - i > 1)
            std::stable_sort(out.begin() + static_cast<std::ptrdiff_t>(i),
                             out.begin() + static_cast<std::ptrdiff_t>(end),
                             [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
        i = end;
    }
    return out;
}

ANVIL_INLINE char32_t compose_pair(char32_t a, char32_t b) {
    constexpr char32_t s_base = 0xAC00, l_base = 0x1100, v_base = 0x1161, t_base = 0x11A7;
    constexpr char32_t l_count = 19, v_count = 21, t_count = 28, s_count = 19 * 21 * 28;
    if (a >= l_base && a < l_base + l_count && b >= v_base && b < v_base + v_count)
        return s_base + ((a - l_base) * v_count + (b - v_base)) * t_count;
    if (a >= s_base && a < s_base + s_count && (a - s_base) % t_count == 0 && b > t_base &&
        b < t_base + t_count)
        return a + (b - t_base);
    const auto& table = unicode_tables::compositions;
    const auto* found = std::lower_bound(std::begin(table), std::end(table), std::pair{a, b},
                                         [](const auto& entry, const std::pair<char32_t, char32_t>& key) {
                                             return entry.first != key.first ? entry.first < key.first
                                                                             : entry.second < key.second;
                                         });
    if (found == std::end(table) || found->first != a || found->second != b) return 0;
    return found->composite;
}

ANVIL_INLINE std::u32string nfc(std::u32string_view text) {
    std::u32string out = nfd(text);
    std::size_t starter = std::u32string::npos, kept = 0;
    std::uint8_t last_class = 0;  // class of out[kept - 1] when it is not the starter
    for (std::size_t i = 0; i < out.size(); ++i) {
        const char32_t cp = out[i];
        const std::uint8_t cc = combining_class(cp);
        if (starter != std::u32string::npos) {
            const bool adjacent = kept == starter + 1;
            if (adjacent || (last_class != 0 && last_class < cc)) {
                if (const char32_t composite = compose_pair(out[starter], cp)) {
                    out[starter] = composite;
                    continue;
                }
            }
        }
        if (cc == 0) starter = kept;
        last_class = cc;
        out[kept++] = cp;
    }
    out.resize(kept);
    return out;
}

ANVIL_INLINE std::u32string to_code_points(std::string_view utf8) {
    std::u32string out;
    out.reserve(utf8.size());
    for (std::size_t at = 0; at < utf8.size();)
        out += next_code_point(utf8, at);
    return out;
}

ANVIL_INLINE std::string to_utf8(std::u32string_view code_points) {
    std::string out;
    out.reserve(code_points.size());
    for (const char32_t cp : code_points)
        append_utf8(out, cp);
    return out;
}

}  // namespace anvil::detail
