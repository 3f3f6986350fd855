// anvil: tokenizer_pipeline's definitions (see tokenizer_pipeline.hpp; compilation.hpp says when this file is
// compiled).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/io/tokenizer_pipeline.hpp"
#include "anvil/io/unicode.hpp"

namespace anvil::detail {

ANVIL_INLINE bool vocabulary::add(std::string token, std::int32_t id) {
    if (id < 0) return false;
    const auto at = static_cast<std::size_t>(id);
    if (at >= tokens.size()) {
        tokens.resize(at + 1);
        present.resize(at + 1, 0);
    }
    if (present[at] || ids.count(token)) return false;
    present[at] = 1;
    tokens[at] = token;
    ids.emplace(std::move(token), id);
    return true;
}

ANVIL_INLINE void added_token_matcher::add(std::string pattern, const added_token& token) {
    if (pattern.empty()) return;
    const auto first = static_cast<unsigned char>(pattern[0]);
    by_first_byte_[first].push_back(entries_.size());
    entries_.push_back({std::move(pattern), token.id, token.single_word, token.lstrip, token.rstrip});
}

ANVIL_INLINE void added_token_matcher::split(std::string_view text, std::size_t begin, std::size_t end,
                                             std::vector<text_segment>& out) const {
    std::size_t pending = begin;  // start of the text not yet emitted
    for (std::size_t at = begin; at < end; ++at) {
        const auto& bucket = by_first_byte_[static_cast<unsigned char>(text[at])];
        const entry* best = nullptr;
        for (const std::size_t index : bucket) {
            const entry& e = entries_[index];
            if (e.pattern.size() > end - at || (best && e.pattern.size() <= best->pattern.size())) continue;
            if (text.compare(at, e.pattern.size(), e.pattern) != 0) continue;
            if (e.single_word && !word_boundaries(text, begin, end, at, at + e.pattern.size())) continue;
            best = &e;
        }
        if (!best) continue;
        std::size_t match_begin = at, match_end = at + best->pattern.size();
        if (best->lstrip)
            while (match_begin > pending && is_ascii_space(text[match_begin - 1]))
                --match_begin;
        if (best->rstrip)
            while (match_end < end && is_ascii_space(text[match_end]))
                ++match_end;
        if (match_begin > pending) out.push_back({pending, match_begin, -1});
        out.push_back({match_begin, match_end, best->id});
        pending = match_end;
        at = match_end - 1;
    }
    if (end > pending) out.push_back({pending, end, -1});
}

ANVIL_INLINE bool added_token_matcher::word_boundaries(std::string_view text, std::size_t begin,
                                                       std::size_t end, std::size_t match_begin,
                                                       std::size_t match_end) {
    if (match_begin > begin) {
        std::size_t back = match_begin - 1;
        while (back > begin && (static_cast<unsigned char>(text[back]) & 0xC0) == 0x80)
            --back;
        if (is_word_code_point(next_code_point(text, back))) return false;
    }
    if (match_end < end) {
        std::size_t at = match_end;
        if (is_word_code_point(next_code_point(text, at))) return false;
    }
    return true;
}

}  // namespace anvil::detail
