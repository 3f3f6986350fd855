// anvil: tokenizer normalizers (Hugging Face `tokenizers` semantics, normalizers/*.rs): BertNormalizer,
// Lowercase, NFD, NFC, StripAccents, Prepend, Replace (a literal pattern, or the regex \s+ CLIP uses) and
// Sequence.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/compilation.hpp"
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

    ANVIL_INLINE void normalize(std::string& text) const override;

private:
    void normalize_ascii(std::string& text) const;

    bool clean_text_, handle_chinese_chars_, strip_accents_, lowercase_;
};

class lowercase_normalizer final : public normalizer {
public:
    ANVIL_INLINE void normalize(std::string& text) const override;
};

class nfd_normalizer final : public normalizer {
public:
    void normalize(std::string& text) const override { text = to_utf8(nfd(to_code_points(text))); }
};

// ASCII and other text below U+0300 with no decomposable code point is already NFC: the common case is a
// scan.
class nfc_normalizer final : public normalizer {
public:
    ANVIL_INLINE void normalize(std::string& text) const override;
};

// Drops nonspacing marks (Mn); meant to follow NFD.
class strip_accents_normalizer final : public normalizer {
public:
    ANVIL_INLINE void normalize(std::string& text) const override;
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
    ANVIL_INLINE void normalize(std::string& text) const override;

private:
    std::string pattern_, content_;
};

// Replace with the Regex pattern \s+ (CLIP's whitespace clean-up): each maximal run of White_Space code
// points becomes `content`. The only regex Replace anvil recognises; it needs no regex engine.
class whitespace_runs_normalizer final : public normalizer {
public:
    explicit whitespace_runs_normalizer(std::string content) : content_(std::move(content)) {}
    ANVIL_INLINE void normalize(std::string& text) const override;

private:
    std::string content_;
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

#if ANVIL_DEFINITIONS
#include "anvil/io/tokenizer_normalizers-inl.hpp"
#endif
