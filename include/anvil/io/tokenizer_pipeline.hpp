// anvil: the stages of a tokenizer, as Hugging Face `tokenizers` composes them: normalizer -> pre-tokenizer
// -> model -> post-processor, and a decoder back to text. Each stage is an interface here; the concrete
// stages live in tokenizer_normalizers.hpp, tokenizer_pre_tokenizers.hpp, wordpiece.hpp, byte_level_bpe.hpp
// and tokenizer_processors.hpp, and tokenizer_json.hpp builds a pipeline from a tokenizer.json. Also here:
// the vocabulary, the word list that passes words between stages, and the added-token matcher that splits
// special tokens out of the raw text first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "anvil/compilation.hpp"
#include "anvil/io/encoding.hpp"
#include "anvil/io/unicode.hpp"

namespace anvil::detail {

struct string_hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using token_map = std::unordered_map<std::string, std::int32_t, string_hash, std::equal_to<>>;

// Token strings and ids, both ways. Ids need not be dense (a tokenizer.json may leave holes).
struct vocabulary {
    token_map ids;
    std::vector<std::string> tokens;  // by id; "" for a hole
    std::vector<std::uint8_t> present;

    [[nodiscard]] std::optional<std::int32_t> find(std::string_view token) const {
        const auto found = ids.find(token);
        if (found == ids.end()) return std::nullopt;
        return found->second;
    }
    [[nodiscard]] bool has_id(std::int64_t id) const {
        return id >= 0 && static_cast<std::uint64_t>(id) < tokens.size() &&
               present[static_cast<std::size_t>(id)];
    }
    // False when the token or the id is already taken.
    bool add(std::string token, std::int32_t id);
};

// Words in one buffer, so splitting text allocates nothing per word: word i is text[ends[i-1], ends[i]).
class word_list {
public:
    void clear() {
        text_.clear();
        ends_.clear();
    }
    void add(std::string_view word) {
        text_.append(word);
        finish_word();
    }
    // Append to buffer() then call finish_word(); an empty word is dropped.
    std::string& buffer() { return text_; }
    void finish_word() {
        if (text_.size() > (ends_.empty() ? 0 : ends_.back())) ends_.push_back(text_.size());
    }
    [[nodiscard]] std::size_t size() const { return ends_.size(); }
    [[nodiscard]] std::string_view operator[](std::size_t i) const {
        const std::size_t begin = i == 0 ? 0 : ends_[i - 1];
        return std::string_view(text_).substr(begin, ends_[i] - begin);
    }

private:
    std::string text_;
    std::vector<std::size_t> ends_;
};

// Rewrites well-formed UTF-8 text (lower-casing, accent stripping, ...).
class normalizer {
public:
    virtual ~normalizer() = default;
    virtual void normalize(std::string& text) const = 0;
};

// Splits (and may transform) normalized text into words, appended to out.
class pre_tokenizer {
public:
    virtual ~pre_tokenizer() = default;
    virtual void pre_tokenize(std::string_view text, word_list& out) const = 0;
    // at_start: text begins the input (Hugging Face's offsets_original().0 == 0), which only Metaspace's
    // prepend_scheme "first" looks at.
    virtual void pre_tokenize_part(std::string_view text, bool at_start, word_list& out) const {
        static_cast<void>(at_start);
        pre_tokenize(text, out);
    }
};

// Turns one word into token ids.
class tokenizer_model {
public:
    virtual ~tokenizer_model() = default;
    virtual void tokenize(std::string_view word, std::vector<std::int32_t>& ids) const = 0;
    [[nodiscard]] virtual const vocabulary& vocab() const = 0;
};

// Turns the tokens of ids back into text pieces that are then concatenated (HF's decode_chain).
class decoder {
public:
    virtual ~decoder() = default;
    virtual void decode(std::vector<std::string>& tokens) const = 0;
};

// ---- added tokens ----------------------------------------------------------------------------------------

struct added_token {
    std::string content;
    std::int32_t id = 0;
    bool special = false;
    bool single_word = false;  // match only where no letter, digit or '_' touches either end
    bool lstrip = false;       // the match swallows the whitespace on its left
    bool rstrip = false;       // ... and on its right
    bool normalized = false;  // matched in normalized text (the content normalized too), else in the raw text
};

// A piece of text after the added tokens are split out: either an added token's id or a text range.
struct text_segment {
    std::size_t begin = 0, end = 0;
    std::int32_t added_id = -1;  // >= 0: this segment is that added token
};

// Finds added tokens leftmost-longest, as HF's AddedVocabulary (aho-corasick, LeftmostLongest) does.
class added_token_matcher {
public:
    void add(std::string pattern, const added_token& token);
    [[nodiscard]] bool empty() const { return entries_.empty(); }

    // Splits text[begin, end) into text and added-token segments, appended to out.
    void split(std::string_view text, std::size_t begin, std::size_t end,
               std::vector<text_segment>& out) const;

private:
    struct entry {
        std::string pattern;
        std::int32_t id;
        bool single_word, lstrip, rstrip;
    };
    static bool is_ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
    static bool is_word_code_point(char32_t cp) { return cp == '_' || is_letter(cp) || is_number(cp); }
    static bool word_boundaries(std::string_view text, std::size_t begin, std::size_t end,
                                std::size_t match_begin, std::size_t match_end);

    std::vector<entry> entries_;
    std::vector<std::size_t> by_first_byte_[256];
};

}  // namespace anvil::detail

#if ANVIL_DEFINITIONS
#include "anvil/io/tokenizer_pipeline-inl.hpp"
#endif
