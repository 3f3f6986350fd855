// anvil: the WordPiece model and decoder (BERT), as Hugging Face `tokenizers` models/wordpiece and
// decoders/wordpiece.rs define them: greedy longest-match-first over the vocabulary, "##" marking a piece
// that continues a word, and a word longer than max_input_chars_per_word (or with no match) becoming [UNK].
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/compilation.hpp"
#include "anvil/io/tokenizer_pipeline.hpp"

namespace anvil::detail {

class wordpiece_model final : public tokenizer_model {
public:
    // unk_id must be in vocab (tokenizer_json.hpp checks it).
    wordpiece_model(vocabulary vocab, std::int32_t unk_id, std::string continuing_prefix,
                    std::size_t max_input_chars_per_word);

    ANVIL_INLINE void tokenize(std::string_view word, std::vector<std::int32_t>& ids) const override;

    [[nodiscard]] const vocabulary& vocab() const override { return vocab_; }

private:
    static std::size_t previous_boundary(std::string_view text, std::size_t end, std::size_t floor);

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

    ANVIL_INLINE void decode(std::vector<std::string>& tokens) const override;

    static std::string cleanup(std::string text);

private:
    std::string prefix_;
    bool cleanup_;
};

}  // namespace anvil::detail

#if ANVIL_DEFINITIONS
#include "anvil/io/wordpiece-inl.hpp"
#endif
