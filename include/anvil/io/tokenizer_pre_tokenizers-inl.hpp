// anvil: tokenizer_pre_tokenizers's definitions (see tokenizer_pre_tokenizers.hpp; compilation.hpp says when
// this file is compiled).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include "anvil/io/tokenizer_pipeline.hpp"
#include "anvil/io/tokenizer_pre_tokenizers.hpp"
#include "anvil/io/unicode.hpp"

namespace anvil::detail {

ANVIL_INLINE void bert_pre_tokenizer::pre_tokenize(std::string_view text, word_list& out) const {
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

ANVIL_INLINE void whitespace_split_pre_tokenizer::pre_tokenize(std::string_view text, word_list& out) const {
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

ANVIL_INLINE void metaspace_pre_tokenizer::pre_tokenize_part(std::string_view text, bool at_start,
                                                             word_list& out) const {
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

ANVIL_INLINE void sequence_pre_tokenizer::pre_tokenize_part(std::string_view text, bool at_start,
                                                            word_list& out) const {
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

}  // namespace anvil::detail
