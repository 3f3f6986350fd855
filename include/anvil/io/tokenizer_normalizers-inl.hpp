// anvil: tokenizer_normalizers's definitions (see tokenizer_normalizers.hpp; compilation.hpp says when this
// file is compiled).
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include "anvil/io/tokenizer_normalizers.hpp"
#include "anvil/io/unicode.hpp"

namespace anvil::detail {

ANVIL_INLINE void bert_normalizer::normalize(std::string& text) const {
    bool ascii = true;
    for (const char c : text)
        ascii = ascii && static_cast<unsigned char>(c) < 0x80;
    if (ascii) {
        normalize_ascii(text);
        return;
    }
    std::u32string code_points;
    code_points.reserve(text.size());
    for (std::size_t at = 0; at < text.size();) {
        char32_t cp = next_code_point(text, at);
        if (clean_text_) {
            if (cp == 0 || cp == replacement_character) continue;
            const bool layout = cp == '\t' || cp == '\n' || cp == '\r';
            if (!layout && is_other(category(cp))) continue;
            if (layout || is_white_space(cp)) cp = ' ';
        }
        if (handle_chinese_chars_ && is_cjk_ideograph(cp)) {
            code_points += ' ';
            code_points += cp;
            code_points += ' ';
        } else {
            code_points += cp;
        }
    }
    if (strip_accents_) {
        code_points = nfd(code_points);
        std::erase_if(code_points, [](char32_t cp) { return category(cp) == unicode_category::mn; });
    }
    if (lowercase_) {
        std::u32string lowered;
        lowered.reserve(code_points.size());
        for (const char32_t cp : code_points)
            append_lower(lowered, cp);
        code_points = std::move(lowered);
    }
    text = to_utf8(code_points);
}

ANVIL_INLINE void bert_normalizer::normalize_ascii(std::string& text) const {
    std::size_t out = 0;
    for (const char c : text) {
        char d = c;
        if (clean_text_) {
            if (c == '\t' || c == '\n' || c == '\r') {
                d = ' ';
            } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) {
                continue;  // Cc, \v and \f included: control wins over White_Space
            }
        }
        if (lowercase_ && d >= 'A' && d <= 'Z') d = static_cast<char>(d + 32);
        text[out++] = d;
    }
    text.resize(out);
}

ANVIL_INLINE void lowercase_normalizer::normalize(std::string& text) const {
    std::u32string lowered;
    for (std::size_t at = 0; at < text.size();)
        append_lower(lowered, next_code_point(text, at));
    text = to_utf8(lowered);
}

ANVIL_INLINE void nfc_normalizer::normalize(std::string& text) const {
    bool unchanged = true;
    for (std::size_t at = 0; at < text.size() && unchanged;) {
        if (static_cast<unsigned char>(text[at]) < 0x80) {
            ++at;
            continue;
        }
        const char32_t cp = next_code_point(text, at);
        unchanged = cp < 0xC0;
    }
    if (!unchanged) text = to_utf8(nfc(to_code_points(text)));
}

ANVIL_INLINE void strip_accents_normalizer::normalize(std::string& text) const {
    std::u32string code_points = to_code_points(text);
    std::erase_if(code_points, [](char32_t cp) { return category(cp) == unicode_category::mn; });
    text = to_utf8(code_points);
}

ANVIL_INLINE void replace_normalizer::normalize(std::string& text) const {
    if (pattern_.empty()) return;
    std::string out;
    std::size_t from = 0;
    for (std::size_t at; (at = text.find(pattern_, from)) != std::string::npos; from = at + pattern_.size())
        out.append(text, from, at - from).append(content_);
    text = std::move(out.append(text, from));
}

ANVIL_INLINE void whitespace_runs_normalizer::normalize(std::string& text) const {
    std::string out;
    out.reserve(text.size());
    bool in_run = false;
    for (std::size_t at = 0; at < text.size();) {
        const std::size_t begin = at;
        const char32_t cp = next_code_point(text, at);
        if (is_white_space(cp)) {
            if (!in_run) out += content_;
            in_run = true;
        } else {
            out.append(text, begin, at - begin);
            in_run = false;
        }
    }
    text = std::move(out);
}

}  // namespace anvil::detail
