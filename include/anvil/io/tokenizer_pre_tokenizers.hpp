// anvil: tokenizer pre-tokenizers that split on characters (Hugging Face `tokenizers` semantics,
// pre_tokenizers/*.rs): BertPreTokenizer, WhitespaceSplit and Sequence. ByteLevel, which also rewrites bytes,
// lives with the byte-level BPE model in byte_level_bpe.hpp.
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

// Each stage splits every word of the previous one.
class sequence_pre_tokenizer final : public pre_tokenizer {
public:
    explicit sequence_pre_tokenizer(std::vector<std::unique_ptr<pre_tokenizer>> stages)
        : stages_(std::move(stages)) {}
    void pre_tokenize(std::string_view text, word_list& out) const override {
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
                stages_[s]->pre_tokenize(current[w], target);
            if (&target == &next) std::swap(current, next);
        }
    }

private:
    std::vector<std::unique_ptr<pre_tokenizer>> stages_;
};

}  // namespace anvil::detail
