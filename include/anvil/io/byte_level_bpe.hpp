// anvil: byte-level BPE (GPT-2, RoBERTa), as Hugging Face `tokenizers` pre_tokenizers/byte_level.rs,
// models/bpe and decoders/byte_level define it: the GPT-2 split pattern (written out by hand over code
// points, no regex engine), the byte-to-unicode alphabet, BPE merges by rank, and decoding back to bytes.
// The BPE model also serves non-byte-level vocabularies (continuing prefix, end-of-word suffix, unk,
// byte fallback).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <queue>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "anvil/io/tokenizer_pipeline.hpp"
#include "anvil/io/unicode.hpp"

namespace anvil::detail {

// ---- the byte alphabet -----------------------------------------------------------------------------------

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 map to U+0100 onwards.
struct byte_alphabet {
    std::array<char32_t, 256> code_point{};
    std::array<std::string, 256> utf8{};
    std::array<std::int16_t, 0x144> byte_of{};  // -1: not a byte's stand-in

    byte_alphabet() {
        byte_of.fill(-1);
        char32_t next = 256;
        for (unsigned b = 0; b < 256; ++b) {
            const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
            code_point[b] = printable ? b : next++;
            append_utf8(utf8[b], code_point[b]);
            byte_of[code_point[b]] = static_cast<std::int16_t>(b);
        }
    }
};

inline const byte_alphabet& bytes_as_unicode() {
    static const byte_alphabet alphabet;
    return alphabet;
}

// ---- the GPT-2 split -------------------------------------------------------------------------------------

// The code points of a text as the split patterns see them: each one's byte offset (then text.size()), its
// value and its class (\s, \p{L}, \p{N} or anything else). One per thread, reused, so a split allocates
// nothing once warm.
struct split_classes {
    enum kind : std::uint8_t { space, letter, number, other };
    std::vector<std::size_t> offsets;
    std::vector<kind> kinds;
    std::vector<char32_t> cps;

    void read(std::string_view text) {
        offsets.clear();
        kinds.clear();
        cps.clear();
        for (std::size_t at = 0; at < text.size();) {
            offsets.push_back(at);
            const char32_t cp = next_code_point(text, at);
            cps.push_back(cp);
            const unicode_category c = category(cp);
            kinds.push_back(is_white_space(cp) ? space
                            : is_letter(c)     ? letter
                            : is_number(c)     ? number
                                               : other);
        }
        offsets.push_back(text.size());
    }

    // The end of the run of class `k` that starts at code point i.
    [[nodiscard]] std::size_t run_end(std::size_t i, kind k) const {
        while (i < cps.size() && kinds[i] == k)
            ++i;
        return i;
    }
};

[[nodiscard]] inline const split_classes& thread_split_classes(std::string_view text) {
    thread_local split_classes classes;
    classes.read(text);
    return classes;
}

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

    void pre_tokenize(std::string_view text, word_list& out) const override {
        if (text.empty()) return;
        std::string prefixed;
        if (add_prefix_space_ && text.front() != ' ') {
            prefixed.reserve(text.size() + 1);
            prefixed.append(" ").append(text);
            text = prefixed;
        }
        const byte_alphabet& alphabet = bytes_as_unicode();
        const auto emit = [&](std::size_t begin, std::size_t end) {
            std::string& buffer = out.buffer();
            for (std::size_t i = begin; i < end; ++i)
                buffer += alphabet.utf8[static_cast<unsigned char>(text[i])];
            out.finish_word();
        };
        if (use_regex_)
            split_gpt2(text, emit);
        else
            emit(0, text.size());
    }

private:
    bool add_prefix_space_, use_regex_;
};

// Maps stand-in code points back to bytes; a token with any other code point keeps its own bytes. Invalid
// UTF-8 in the result becomes U+FFFD.
class byte_level_decoder final : public decoder {
public:
    void decode(std::vector<std::string>& tokens) const override {
        const byte_alphabet& alphabet = bytes_as_unicode();
        std::string bytes;
        for (const std::string& token : tokens) {
            const std::size_t mark = bytes.size();
            for (std::size_t at = 0; at < token.size();) {
                const char32_t cp = next_code_point(token, at);
                if (cp >= alphabet.byte_of.size() || alphabet.byte_of[cp] < 0) {
                    bytes.resize(mark);
                    bytes += token;
                    break;
                }
                bytes += static_cast<char>(alphabet.byte_of[cp]);
            }
        }
        tokens.assign(1, utf8_lossy(bytes));
    }
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

    void tokenize(std::string_view word, std::vector<std::int32_t>& ids) const override {
        if (word.empty()) return;
        if (options_.ignore_merges) {
            if (const auto id = vocab_.find(word)) {
                ids.push_back(*id);
                return;
            }
        }
        std::vector<symbol> symbols;
        symbols.reserve(word.size());
        initial_symbols(word, symbols);
        merge_symbols(symbols);
        for (const symbol& s : symbols)
            if (s.alive) ids.push_back(s.id);
    }

    [[nodiscard]] const vocabulary& vocab() const override { return vocab_; }

private:
    struct symbol {
        std::int32_t id;
        std::int32_t prev, next;  // -1 at the ends
        bool alive;
    };

    void push_symbol(std::vector<symbol>& symbols, std::int32_t id, bool unknown) const {
        if (unknown && options_.fuse_unk && !symbols.empty() && symbols.back().id == id) return;
        const auto index = static_cast<std::int32_t>(symbols.size());
        symbols.push_back({id, index - 1, index + 1, true});
    }

    void initial_symbols(std::string_view word, std::vector<symbol>& symbols) const {
        std::string piece;
        for (std::size_t at = 0; at < word.size();) {
            const std::size_t begin = at;
            next_code_point(word, at);
            const std::string_view character = word.substr(begin, at - begin);
            std::string_view lookup = character;
            if ((begin > 0 && !options_.continuing_prefix.empty()) ||
                (at == word.size() && !options_.end_of_word_suffix.empty())) {
                piece.assign(begin > 0 ? options_.continuing_prefix : "").append(character);
                if (at == word.size()) piece += options_.end_of_word_suffix;
                lookup = piece;
            }
            if (const auto id = vocab_.find(lookup)) {
                push_symbol(symbols, *id, false);
                continue;
            }
            if (options_.byte_fallback) {
                std::vector<std::int32_t> byte_ids;
                for (const char c : character) {
                    constexpr std::string_view hex = "0123456789ABCDEF";
                    const auto b = static_cast<unsigned char>(c);
                    const std::string name{'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
                    if (const auto id = vocab_.find(name)) byte_ids.push_back(*id);
                }
                if (byte_ids.size() == character.size()) {
                    for (const std::int32_t id : byte_ids)
                        push_symbol(symbols, id, false);
                    continue;
                }
            }
            if (options_.unk_id) push_symbol(symbols, *options_.unk_id, true);  // else dropped, as HF does
        }
        if (!symbols.empty()) symbols.back().next = -1;
    }

    void merge_symbols(std::vector<symbol>& symbols) const {
        if (symbols.size() < 2 || merges_.empty()) return;
        struct candidate {
            std::int32_t rank, position, result;
            bool operator>(const candidate& o) const {
                return rank != o.rank ? rank > o.rank : position > o.position;
            }
        };
        std::priority_queue<candidate, std::vector<candidate>, std::greater<>> queue;
        const auto consider = [&](std::int32_t left) {
            if (left < 0) return;
            const std::int32_t right = symbols[static_cast<std::size_t>(left)].next;
            if (right < 0) return;
            const auto found = merges_.find(pair_key(symbols[static_cast<std::size_t>(left)].id,
                                                     symbols[static_cast<std::size_t>(right)].id));
            if (found != merges_.end()) queue.push({found->second.rank, left, found->second.result});
        };
        for (std::size_t i = 0; i + 1 < symbols.size(); ++i)
            consider(static_cast<std::int32_t>(i));
        while (!queue.empty()) {
            const candidate top = queue.top();
            queue.pop();
            symbol& left = symbols[static_cast<std::size_t>(top.position)];
            if (!left.alive || left.next < 0) continue;
            symbol& right = symbols[static_cast<std::size_t>(left.next)];
            const auto found = merges_.find(pair_key(left.id, right.id));
            if (found == merges_.end() || found->second.rank != top.rank) continue;  // a stale entry
            left.id = top.result;
            right.alive = false;
            left.next = right.next;
            if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].prev = top.position;
            consider(left.prev);
            consider(top.position);
        }
    }

    vocabulary vocab_;
    std::unordered_map<std::uint64_t, merge> merges_;
    bpe_options options_;
};

}  // namespace anvil::detail
