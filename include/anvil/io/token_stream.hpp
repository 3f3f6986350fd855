// anvil: incremental detokenization for streaming generation, as Hugging Face's DecodeStream does it.
//
//   anvil::token_stream stream(tok);
//   for (const std::int32_t id : generated) std::cout << stream.push(id);
//   std::cout << stream.finish();
//
// The stream decodes a short window of recent ids with the tokenizer's own decode, so every decoder rule
// (SentencePiece's dropped leading space, byte-level and <0xAB> byte tokens) applies as in the full decode,
// and the pieces concatenate to tokenizer::decode(all ids). Text is held back while the window's decode ends
// in U+FFFD: the last character may still be incomplete (a byte token splits it). So a text that really ends
// in U+FFFD shows it only when the next character arrives, or at finish().
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/io/tokenizer.hpp"

namespace anvil {

class token_stream {
public:
    explicit token_stream(const tokenizer& tok, bool skip_special_tokens = true)
        : tokenizer_(tok), skip_special_(skip_special_tokens) {}

    // The text that became final with id ("" while a character is incomplete). anvil::error for an id that
    // names no token.
    [[nodiscard]] std::string push(std::int32_t id) {
        ids_.push_back(id);
        std::string text = tokenizer_.decode(ids_, skip_special_);
        if (text.size() <= prefix_.size() || text.ends_with(replacement)) return {};
        std::string fresh = take_after_prefix(std::move(text));
        // The next window starts where the text of this step's previous window began: the decoders see the
        // same first token in both decodes, so its leading-space rule cancels out.
        const std::size_t next_prefix_index = ids_.size() - prefix_index_;
        ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_index_));
        prefix_ = tokenizer_.decode(ids_, skip_special_);
        prefix_index_ = next_prefix_index;
        return fresh;
    }

    // Whatever is left, incomplete characters as U+FFFD; the stream is then empty.
    [[nodiscard]] std::string finish() {
        std::string text = tokenizer_.decode(ids_, skip_special_);
        std::string rest = text.size() > prefix_.size() ? take_after_prefix(std::move(text)) : std::string();
        ids_.clear();
        prefix_.clear();
        prefix_index_ = 0;
        return rest;
    }

private:
    static constexpr std::string_view replacement = "\xEF\xBF\xBD";

    std::string take_after_prefix(std::string text) const {
        if (!text.starts_with(prefix_))
            throw error(
                detail::message("token_stream: the decoded text no longer starts with the text already "
                                "given out ('",
                                prefix_, "'); this tokenizer's decoder is not incremental"));
        return text.substr(prefix_.size());
    }

    tokenizer tokenizer_;
    bool skip_special_;
    std::vector<std::int32_t> ids_;
    std::string prefix_;  // decode of the window ids_, all of it already given out
    std::size_t prefix_index_ = 0;
};

}  // namespace anvil
