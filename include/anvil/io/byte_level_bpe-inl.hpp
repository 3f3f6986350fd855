// anvil: byte_level_bpe's definitions (see byte_level_bpe.hpp; compilation.hpp says when this file is
// compiled).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <queue>
#include <string>
#include <string_view>
#include <vector>

#include "anvil/io/byte_level_bpe.hpp"
#include "anvil/io/tokenizer_pipeline.hpp"
#include "anvil/io/unicode.hpp"

namespace anvil::detail {

ANVIL_INLINE byte_alphabet::byte_alphabet() {
    byte_of.fill(-1);
    char32_t next = 256;
    for (unsigned b = 0; b < 256; ++b) {
        const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        code_point[b] = printable ? b : next++;
        append_utf8(utf8[b], code_point[b]);
        byte_of[code_point[b]] = static_cast<std::int16_t>(b);
    }
}

ANVIL_INLINE const byte_alphabet& bytes_as_unicode() {
    static const byte_alphabet alphabet;
    return alphabet;
}

ANVIL_INLINE void split_classes::read(std::string_view text) {
    offsets.clear();
    kinds.clear();
    cps.clear();
    for (std::size_t at = 0; at < text.size();) {
        offsets.push_back(at);
        const char32_t cp = next_code_point(text, at);
        cps.push_back(cp);
        const unicode_category c = category(cp);
        kinds.push_back(is_white_space(cp) ? space : is_letter(c) ? letter : is_number(c) ? number : other);
    }
    offsets.push_back(text.size());
}

ANVIL_INLINE const split_classes& thread_split_classes(std::string_view text) {
    thread_local split_classes classes;
    classes.read(text);
    return classes;
}

ANVIL_INLINE void byte_level_pre_tokenizer::pre_tokenize(std::string_view text, word_list& out) const {
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

ANVIL_INLINE void byte_level_decoder::decode(std::vector<std::string>& tokens) const {
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

ANVIL_INLINE void bpe_model::tokenize(std::string_view word, std::vector<std::int32_t>& ids) const {
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

ANVIL_INLINE void bpe_model::push_symbol(std::vector<symbol>& symbols, std::int32_t id, bool unknown) const {
    if (unknown && options_.fuse_unk && !symbols.empty() && symbols.back().id == id) return;
    const auto index = static_cast<std::int32_t>(symbols.size());
    symbols.push_back({id, index - 1, index + 1, true});
}

ANVIL_INLINE void bpe_model::initial_symbols(std::string_view word, std::vector<symbol>& symbols) const {
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
            for (const char c : character)
                if (const auto id = vocab_.find(byte_fallback_token(static_cast<unsigned char>(c))))
                    byte_ids.push_back(*id);
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

ANVIL_INLINE void bpe_model::merge_symbols(std::vector<symbol>& symbols) const {
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

}  // namespace anvil::detail
