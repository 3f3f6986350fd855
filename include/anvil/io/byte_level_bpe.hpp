// anvil: byte-level BPE (GPT-2, RoBERTa), as Hugging Face `tokenizers` pre_tokenizers/byte_level.rs,
// models/bpe and decoders/byte_level define it: the GPT-2 split pattern (written out by hand over code
// points, no regex engine), the byte-to-unicode alphabet, BPE merges by rank, and decoding back to bytes.
// The BPE model also serves non-byte-level vocabularies (continuing prefix, end-of-word suffix, unk,
// byte fallback).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "anvil/compilation.hpp"
#include "anvil/io/tokenizer_pipeline.hpp"

namespace anvil::detail {

// The name of byte b's fallback token, "<0x0A>" (upper-case hex, as SentencePiece writes them).
inline std::string byte_fallback_token(unsigned char b) {
    constexpr std::string_view hex = "0123456789ABCDEF";
    return {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
}

// ---- the byte alphabet -----------------------------------------------------------------------------------

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 map to U+0100 onwards.
struct byte_alphabet {
    std::array<char32_t, 256> code_point{};
    std::array<std::string, 256> utf8{};
    std::array<std::int16_t, 0x144> byte_of{};  // -1: not a byte's stand-in

    byte_alphabet();
};

const byte_alphabet& bytes_as_unicode();

// ---- the GPT-2 split -------------------------------------------------------------------------------------

// The code points of a text as the split patterns see them: each one's byte offset (then text.size()), its
// value and its class (\s, \p{L}, \p{N} or anything else). One per thread, reused, so a split allocates
// nothing once warm.
struct split_classes {
    enum kind : std::uint8_t { space, letter, number, other };
    std::vector<std::size_t> offsets;
    std::vector<kind> kinds;
    std::vector<char32_t> cps;

    void read(std::string_view text);

    // The end of the run of class `k` that starts at code point i.
    [[nodiscard]] std::size_t run_end(std::size_t i, kind k) const {
        while (i < cps.size() && kinds[i] == k)
            ++i;
        return i;
    }
};

[[nodiscard]] const split_classes& thread_split_classes(std::string_view text);

// Calls piece(begin, end) with byte ranges of well-formed UTF-8 text as GPT-2's pattern splits it:
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// Alternatives are tried in order at each position and quantifiers are greedy, so only \s+(?!\S) needs a
// look at what follows the whitespace run (it gives back one whitespace when a non-space follows).
template <class Piece>
void split_gpt2(std::string_view text, Piece&& piece) {
    using kind = split_classes::kind;
    using enum split_classes::kind;
    const split_classes& classes = thread_split_classes(text);
    const std::vector<std::size_t>& offsets = classes.offsets;
    const std::vector<split_classes::kind>& kinds = classes.kinds;
    const std::vector<char32_t>& cps = classes.cps;
    const std::size_t n = cps.size();
    const auto run_end = [&](std::size_t i, split_classes::kind k) { return classes.run_end(i, k); };
    for (std::size_t i = 0; i < n;) {
        std::size_t end = i;
        if (cps[i] == '\'' && i + 1 < n) {
            const char32_t a = cps[i + 1], b = i + 2 < n ? cps[i + 2] : 0;
            if (a == 's' || a == 't' || a == 'm' || a == 'd')
                end = i + 2;
            else if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
                end = i + 3;
        }
        if (end == i) {
            const bool lead_space = cps[i] == ' ' && i + 1 < n && kinds[i + 1] != space;
            const kind k = lead_space ? kinds[i + 1] : kinds[i];
            if (k != space) {
                end = run_end(lead_space ? i + 1 : i, k);
            } else {
                end = run_end(i, space);
                if (end < n && end - i > 1) --end;  // \s+(?!\S): leave the last space to the next word
            }
        }
        piece(offsets[i], offsets[end]);
        i = end;
    }
}

// HF's ByteLevel pre-tokenizer: optionally a space before text that does not start with one, the GPT-2 split
// (use_regex), then every byte as its stand-in code point.
class byte_level_pre_tokenizer final : public pre_tokenizer {
public:
    byte_level_pre_tokenizer(bool add_prefix_space, bool use_regex)
        : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {}

    ANVIL_INLINE void pre_tokenize(std::string_view text, word_list& out) const override;

private:
    bool add_prefix_space_, use_regex_;
};

// Maps stand-in code points back to bytes; a token with any other code point keeps its own bytes. Invalid
// UTF-8 in the result becomes U+FFFD.
class byte_level_decoder final : public decoder {
public:
    ANVIL_INLINE void decode(std::vector<std::string>& tokens) const override;
};

// ---- the BPE model ---------------------------------------------------------------------------------------

struct bpe_options {
    std::optional<std::int32_t> unk_id;
    std::string continuing_prefix;   // before every symbol but a word's first
    std::string end_of_word_suffix;  // after a word's last symbol
    bool fuse_unk = false;           // consecutive unknown symbols become one unk
    bool byte_fallback = false;      // an unknown character becomes its <0xXX> byte tokens when they exist
    bool ignore_merges = false;      // a word that is a token is that token, merges or not
};

// Merges by rank: the pair with the lowest rank (leftmost among equals) merges first, as models/bpe/word.rs
// does with its priority queue.
class bpe_model final : public tokenizer_model {
public:
    struct merge {
        std::int32_t rank;
        std::int32_t result;
    };
    static std::uint64_t pair_key(std::int32_t left, std::int32_t right) {
        return std::uint64_t{static_cast<std::uint32_t>(left)} << 32 | static_cast<std::uint32_t>(right);
    }

    bpe_model(vocabulary vocab, std::unordered_map<std::uint64_t, merge> merges, bpe_options options)
        : vocab_(std::move(vocab)), merges_(std::move(merges)), options_(std::move(options)) {}

    ANVIL_INLINE void tokenize(std::string_view word, std::vector<std::int32_t>& ids) const override;

    [[nodiscard]] const vocabulary& vocab() const override { return vocab_; }

private:
    struct symbol {
        std::int32_t id;
        std::int32_t prev, next;  // -1 at the ends
        bool alive;
    };

    void push_symbol(std::vector<symbol>& symbols, std::int32_t id, bool unknown) const;

    void initial_symbols(std::string_view word, std::vector<symbol>& symbols) const;

    void merge_symbols(std::vector<symbol>& symbols) const;

    vocabulary vocab_;
    std::unordered_map<std::uint64_t, merge> merges_;
    bpe_options options_;
};

}  // namespace anvil::detail

#if ANVIL_DEFINITIONS
#include "anvil/io/byte_level_bpe-inl.hpp"
#endif
