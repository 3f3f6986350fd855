// anvil: tokenizer pre-tokenizers that split on characters (Hugging Face `tokenizers` semantics,
// pre_tokenizers/*.rs): BertPreTokenizer, WhitespaceSplit, Metaspace and Sequence (Split is in
// split_patterns.hpp). ByteLevel, which also rewrites bytes,
// lives with the byte-level BPE model in byte_level_bpe.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/compilation.hpp"
#include "anvil/io/tokenizer_pipeline.hpp"
#include "anvil/io/unicode.hpp"

namespace anvil::detail {

// BERT's punctuation: ASCII symbols ('$', '+', '^', ... as well as P*) and every Unicode P* code point.
inline bool is_bert_punctuation(char32_t cp) {
    if (cp < 0x80)
        return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) ||
               (cp >= 123 && cp <= 126);
    return is_punctuation(category(cp));
}

// Splits on White_Space (dropped) and makes each punctuation code point a word of its own.
class bert_pre_tokenizer final : public pre_tokenizer {
public:
    ANVIL_INLINE void pre_tokenize(std::string_view text, word_list& out) const override;
};

class whitespace_split_pre_tokenizer final : public pre_tokenizer {
public:
    ANVIL_INLINE void pre_tokenize(std::string_view text, word_list& out) const override;
};

enum class prepend_scheme : std::uint8_t { always, first, never };

// SentencePiece's spaces: ' ' becomes the replacement (U+2581), which is prepended unless the text starts
// with it (always, or first: only for text at the start of the input), then (split) each replacement starts a
// word.
class metaspace_pre_tokenizer final : public pre_tokenizer {
public:
    metaspace_pre_tokenizer(std::string replacement, prepend_scheme scheme, bool split)
        : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}

    void pre_tokenize(std::string_view text, word_list& out) const override {
        pre_tokenize_part(text, false, out);
    }
    ANVIL_INLINE void pre_tokenize_part(std::string_view text, bool at_start, word_list& out) const override;

private:
    std::string replacement_;
    prepend_scheme scheme_;
    bool split_;
};

// Each stage splits every word of the previous one.
class sequence_pre_tokenizer final : public pre_tokenizer {
public:
    explicit sequence_pre_tokenizer(std::vector<std::unique_ptr<pre_tokenizer>> stages)
        : stages_(std::move(stages)) {}
    void pre_tokenize(std::string_view text, word_list& out) const override {
        pre_tokenize_part(text, false, out);
    }
    ANVIL_INLINE void pre_tokenize_part(std::string_view text, bool at_start, word_list& out) const override;

private:
    std::vector<std::unique_ptr<pre_tokenizer>> stages_;
};

}  // namespace anvil::detail

#if ANVIL_DEFINITIONS
#include "anvil/io/tokenizer_pre_tokenizers-inl.hpp"
#endif
