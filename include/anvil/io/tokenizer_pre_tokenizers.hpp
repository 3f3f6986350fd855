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
    void pre_tokenize(std::string_view text, word_list& out) const override {
        std::string& buffer = out.buffer();
        for (std::size_t at = 0; at < text.size();) {
            const std::size_t begin = at;
            const char32_t cp = next_code_point(text, at);
            if (is_white_space(cp)) {
                out.finish_word();
            } else if (is_bert_punctuation(cp)) {
                out.finish_word();
                out.add(text.substr(begin, at - begin));
            } else {
                buffer.append(text.substr(begin, at - begin));
            }
        }
        out.finish_word();
    }
};

class whitespace_split_pre_tokenizer final : public pre_tokenizer {
public:
    void pre_tokenize(std::string_view text, word_list& out) const override {
        std::string& buffer = out.buffer();
        for (std::size_t at = 0; at < text.size();) {
            const std::size_t begin = at;
            if (is_white_space(next_code_point(text, at)))
                out.finish_word();
            else
                buffer.append(text.substr(begin, at - begin));
        }
        out.finish_word();
    }
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
    void pre_tokenize_part(std::string_view text, bool at_start, word_list& out) const override {
        if (text.empty()) return;
        std::string replaced;
        replaced.reserve(text.size() + 8);
        for (const char c : text) {
            if (c == ' ')
                replaced += replacement_;
            else
                replaced += c;
        }
        if ((scheme_ == prepend_scheme::always || (scheme_ == prepend_scheme::first && at_start)) &&
            !replaced.starts_with(replacement_))
            replaced.insert(0, replacement_);
        if (!split_) {
            out.add(replaced);
            return;
        }
        std::size_t begin = 0;  // MergedWithNext: a word runs from one replacement to the next
        for (std::size_t at = replaced.find(replacement_, 1); at != std::string::npos;
             at = replaced.find(replacement_, at + 1)) {
            out.add(std::string_view(replaced).substr(begin, at - begin));
            begin = at;
        }
        out.add(std::string_view(replaced).substr(begin));
    }

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
    void pre_tokenize_part(std::string_view text, bool at_start, word_list& out) const override {
        if (stages_.empty()) {
            out.add(text);
            return;
        }
        word_list current, next;
        current.add(text);
        for (std::size_t s = 0; s < stages_.size(); ++s) {
            word_list& target = s + 1 == stages_.size() ? out : next;
            if (&target == &next) next.clear();
            for (std::size_t w = 0; w < current.size(); ++w)
                stages_[s]->pre_tokenize_part(current[w], at_start && w == 0, target);
            if (&target == &next) std::swap(current, next);
        }
    }

private:
    std::vector<std::unique_ptr<pre_tokenizer>> stages_;
};

}  // namespace anvil::detail
