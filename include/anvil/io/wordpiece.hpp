// anvil: the WordPiece model and decoder (BERT), as Hugging Face `tokenizers` models/wordpiece and
// decoders/wordpiece.rs define them: greedy longest-match-first over the vocabulary, "##" marking a piece
// that continues a word, and a word longer than max_input_chars_per_word (or with no match) becoming [UNK].
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/io/tokenizer_pipeline.hpp"
#include "anvil/io/unicode.hpp"

namespace anvil::detail {

class wordpiece_model final : public tokenizer_model {
public:
    // unk_id must be in vocab (tokenizer_json.hpp checks it).
    wordpiece_model(vocabulary vocab, std::int32_t unk_id, std::string continuing_prefix,
                    std::size_t max_input_chars_per_word)
        : vocab_(std::move(vocab)),
          unk_id_(unk_id),
          prefix_(std::move(continuing_prefix)),
          max_chars_(max_input_chars_per_word) {
        for (const auto& token : vocab_.tokens)
            longest_token_ = std::max(longest_token_, token.size());
    }

    void tokenize(std::string_view word, std::vector<std::int32_t>& ids) const override {
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

    [[nodiscard]] const vocabulary& vocab() const override { return vocab_; }

private:
    static std::size_t previous_boundary(std::string_view text, std::size_t end, std::size_t floor) {
        do {
            --end;
        } while (end > floor && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80);
        return end;
    }

    vocabulary vocab_;
    std::int32_t unk_id_;
    std::string prefix_;
    std::size_t max_chars_;
    std::size_t longest_token_ = 0;
};

// Joins pieces: one continuing with the prefix loses it, any other gets a space before it; cleanup removes
// the space before . ? ! , and the like (per token, as decoders/wordpiece.rs does).
class wordpiece_decoder final : public decoder {
public:
    wordpiece_decoder(std::string prefix, bool cleanup) : prefix_(std::move(prefix)), cleanup_(cleanup) {}

    void decode(std::vector<std::string>& tokens) const override {
        for (std::size_t i = 0; i < tokens.size(); ++i) {
            std::string& token = tokens[i];
            if (i != 0) {
                if (token.starts_with(prefix_))
                    token.erase(0, prefix_.size());
                else
                    token.insert(0, " ");
            }
            if (cleanup_) token = cleanup(token);
        }
    }

    static std::string cleanup(std::string text) {
        constexpr std::pair<std::string_view, std::string_view> rules[] = {
            {" .", "."},   {" ?", "?"},     {" !", "!"},    {" ,", ","},
            {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"},  {" do not", " don't"},
            {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
        for (const auto& [from, to] : rules) {
            std::string out;
            std::size_t begin = 0;
            for (std::size_t at; (at = text.find(from, begin)) != std::string::npos; begin = at + from.size())
                out.append(text, begin, at - begin).append(to);
            text = std::move(out.append(text, begin));
        }
        return text;
    }

private:
    std::string prefix_;
    bool cleanup_;
};

}  // namespace anvil::detail
