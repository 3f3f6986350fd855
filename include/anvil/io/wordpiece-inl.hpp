// anvil: wordpiece's definitions (see wordpiece.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/io/tokenizer_pipeline.hpp"
#include "anvil/io/wordpiece.hpp"

namespace anvil::detail {

ANVIL_INLINE wordpiece_model::wordpiece_model(vocabulary vocab, std::int32_t unk_id,
                                              std::string continuing_prefix,
                                              std::size_t max_input_chars_per_word)
    : vocab_(std::move(vocab)),
      unk_id_(unk_id),
      prefix_(std::move(continuing_prefix)),
      max_chars_(max_input_chars_per_word) {
    for (const auto& token : vocab_.tokens)
        longest_token_ = std::max(longest_token_, token.size());
}

ANVIL_INLINE void wordpiece_model::tokenize(std::string_view word, std::vector<std::int32_t>& ids) const {
    std::size_t chars = 0;
    for (const char c : word)
        chars += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    if (chars > max_chars_) {
        ids.push_back(unk_id_);
        return;
    }
    const std::size_t first_piece = ids.size();
    std::string continued;  // prefix + the rest of the word, so each candidate is a prefix of it
    for (std::size_t start = 0; start < word.size();) {
        std::string_view rest = word.substr(start);
        std::size_t skip = 0;  // bytes of the "##" prefix in rest
        if (start > 0) {
            continued.assign(prefix_).append(rest);
            rest = continued;
            skip = prefix_.size();
        }
        // No candidate is longer than the longest token; start at a code point boundary within that.
        std::size_t end = std::min(rest.size(), longest_token_);
        while (end > skip && end < rest.size() && (static_cast<unsigned char>(rest[end]) & 0xC0) == 0x80)
            --end;
        std::int32_t found = -1;
        for (; end > skip; end = previous_boundary(rest, end, skip)) {
            if (const auto id = vocab_.find(rest.substr(0, end))) {
                found = *id;
                break;
            }
        }
        if (found < 0) {
            ids.resize(first_piece);
            ids.push_back(unk_id_);
            return;
        }
        ids.push_back(found);
        start += end - skip;
    }
}

ANVIL_INLINE std::size_t wordpiece_model::previous_boundary(std::string_view text, std::size_t end,
                                                            std::size_t floor) {
    do {
        --end;
    } while (end > floor && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80);
    return end;
}

ANVIL_INLINE void wordpiece_decoder::decode(std::vector<std::string>& tokens) const {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        std::string& token = tokens[i];
        if (i != 0) {
            if (token.starts_with(prefix_))
                token.erase(0, prefix_.size());
            else
                token.insert(token.begin(), ' ');  // not insert(0, " "): GCC 12's -Wrestrict misfires on it
        }
        if (cleanup_) token = cleanup(token);
    }
}

ANVIL_INLINE std::string wordpiece_decoder::cleanup(std::string text) {
    constexpr std::pair<std::string_view, std::string_view> rules[] = {
        {" .", "."},   {" ?", "?"},           {" !", "!"},   {" ,", ","},     {" ' ", "'"},   {" n't", "n't"},
        {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
    for (const auto& [from, to] : rules) {
        std::string out;
        std::size_t begin = 0;
        for (std::size_t at; (at = text.find(from, begin)) != std::string::npos; begin = at + from.size())
            out.append(text, begin, at - begin).append(to);
        text = std::move(out.append(text, begin));
    }
    return text;
}

}  // namespace anvil::detail
