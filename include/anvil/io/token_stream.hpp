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

#include "anvil/compilation.hpp"
#include "anvil/io/tokenizer.hpp"

namespace anvil {

class token_stream {
public:
    explicit token_stream(const tokenizer& tok, bool skip_special_tokens = true);

    // The text that became final with id ("" while a character is incomplete). anvil::error for an id that
    // names no token.
    [[nodiscard]] std::string push(std::int32_t id);

    // Whatever is left, incomplete characters as U+FFFD; the stream is then empty.
    [[nodiscard]] std::string finish();

private:
    static constexpr std::string_view replacement = "\xEF\xBF\xBD";

    std::string take_after_prefix(std::string text) const;

    tokenizer tokenizer_;
    bool skip_special_;
    std::vector<std::int32_t> ids_;
    std::string prefix_;  // decode of the window ids_, all of it already given out
    std::size_t prefix_index_ = 0;
};

}  // namespace anvil

#if ANVIL_DEFINITIONS
#include "anvil/io/token_stream-inl.hpp"
#endif
