// anvil: tokenizer normalizers (Hugging Face `tokenizers` semantics, normalizers/*.rs): BertNormalizer,
// Lowercase, NFD, NFC, StripAccents, Prepend, Replace (a literal pattern) and Sequence.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/io/tokenizer_pipeline.hpp"
#include "anvil/io/unicode.hpp"

namespace anvil::detail {

// BERT's CJK ideograph blocks, as tokenizers' normalizers/bert.rs lists them.
inline bool is_cjk_ideograph(char32_t cp) {
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
           (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
           (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
           (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

inline void append_lower(std::u32string& out, char32_t cp) {
    const code_point_sequence lower = to_lower(cp);
    out.append(lower.code_points.data(), lower.size);
}

// clean_text drops NUL, U+FFFD and other (C*) code points but tab, newline and return, and turns White_Space
// into ' '; handle_chinese_chars puts spaces around CJK ideographs; strip_accents is NFD then dropping Mn;
// lowercase is per code point. In that order, as bert.rs applies them.
class bert_normalizer final : public normalizer {
public:
    bert_normalizer(bool clean_text, bool handle_chinese_chars, bool strip_accents, bool lowercase)
        : clean_text_(clean_text),
          handle_chinese_chars_(handle_chinese_chars),
          strip_accents_(strip_accents),
          lowercase_(lowercase) {}

    void normalize(std::string& text) const override {
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

private:
    void normalize_ascii(std::string& text) const {
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

    bool clean_text_, handle_chinese_chars_, strip_accents_, lowercase_;
};

class lowercase_normalizer final : public normalizer {
public:
    void normalize(std::string& text) const override {
        std::u32string lowered;
        for (std::size_t at = 0; at < text.size();)
            append_lower(lowered, next_code_point(text, at));
        text = to_utf8(lowered);
    }
};

class nfd_normalizer final : public normalizer {
public:
    void normalize(std::string& text) const override { text = to_utf8(nfd(to_code_points(text))); }
};

// ASCII and other text below U+0300 with no decomposable code point is already NFC: the common case is a
// scan.
class nfc_normalizer final : public normalizer {
public:
    void normalize(std::string& text) const override {
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
};

// Drops nonspacing marks (Mn); meant to follow NFD.
class strip_accents_normalizer final : public normalizer {
public:
    void normalize(std::string& text) const override {
        std::u32string code_points = to_code_points(text);
        std::erase_if(code_points, [](char32_t cp) { return category(cp) == unicode_category::mn; });
        text = to_utf8(code_points);
    }
};

class prepend_normalizer final : public normalizer {
public:
    explicit prepend_normalizer(std::string prefix) : prefix_(std::move(prefix)) {}
    void normalize(std::string& text) const override {
        if (!text.empty()) text.insert(0, prefix_);
    }

private:
    std::string prefix_;
};

class replace_normalizer final : public normalizer {
public:
    replace_normalizer(std::string pattern, std::string content)
        : pattern_(std::move(pattern)), content_(std::move(content)) {}
    void normalize(std::string& text) const override {
        if (pattern_.empty()) return;
        std::string out;
        std::size_t from = 0;
        for (std::size_t at; (at = text.find(pattern_, from)) != std::string::npos;
             from = at + pattern_.size())
            out.append(text, from, at - from).append(content_);
        text = std::move(out.append(text, from));
    }

private:
    std::string pattern_, content_;
};

class sequence_normalizer final : public normalizer {
public:
    explicit sequence_normalizer(std::vector<std::unique_ptr<normalizer>> stages)
        : stages_(std::move(stages)) {}
    void normalize(std::string& text) const override {
        for (const auto& stage : stages_)
            stage->normalize(text);
    }

private:
    std::vector<std::unique_ptr<normalizer>> stages_;
};

}  // namespace anvil::detail
