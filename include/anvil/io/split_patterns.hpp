// anvil: Hugging Face's Split pre-tokenizer for the regexes that decoder LLM tokenizers use, matched by hand
// over Unicode general categories instead of a regex engine (as split_gpt2 does for GPT-2):
//   Llama-3:  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//             \s*[\r\n]+|\s+(?!\S)|\s+
//   Qwen2/3:  the same with \p{N} for \p{N}{1,3}
//   GPT-2:    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   CLIP:     's|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+   (CLIPConverter's; older
//   tokenizer.json
//             files start it with <\|startoftext\|>|<\|endoftext\|>|). It leaves the whitespace between
//             matches unmatched: CLIP splits with behavior Removed and invert true, keeping the matches.
// \p{L} is L*, \p{N} is N*, \s is White_Space, as Oniguruma and Rust's regex define them. Any other pattern
// is an unsupported_error quoting it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "anvil/io/byte_level_bpe.hpp"
#include "anvil/io/tokenizer_pipeline.hpp"
#include "anvil/io/unicode.hpp"

namespace anvil::detail {

enum class split_pattern : std::uint8_t { gpt2, llama3, qwen2, clip, clip_with_specials };

inline constexpr std::string_view llama3_split_regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
inline constexpr std::string_view qwen2_split_regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
inline constexpr std::string_view gpt2_split_regex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

inline constexpr std::string_view clip_split_regex =
    "'s|'t|'re|'ve|'m|'ll|'d|[\\p{L}]+|[\\p{N}]|[^\\s\\p{L}\\p{N}]+";
inline constexpr std::string_view clip_specials_split_regex =
    "<\\|startoftext\\|>|<\\|endoftext\\|>|'s|'t|'re|'ve|'m|'ll|'d|[\\p{L}]+|[\\p{N}]|[^\\s\\p{L}\\p{N}]+";

inline std::optional<split_pattern> recognise_split_regex(std::string_view regex) {
    if (regex == clip_split_regex) return split_pattern::clip;
    if (regex == clip_specials_split_regex) return split_pattern::clip_with_specials;
    if (regex == llama3_split_regex) return split_pattern::llama3;
    if (regex == qwen2_split_regex) return split_pattern::qwen2;
    if (regex == gpt2_split_regex) return split_pattern::gpt2;
    return std::nullopt;
}

// The case-insensitive letter of a contraction: ASCII letters lower-cased, and U+017F (long s), which
// Unicode case folding makes 's'.
inline char32_t fold_contraction_letter(char32_t cp) {
    if (cp >= 'A' && cp <= 'Z') return cp + 32;
    return cp == 0x17F ? U's' : cp;
}

// Calls piece(begin, end) with the byte ranges the Llama-3 pattern (qwen: the Qwen2 one) matches in
// well-formed UTF-8 text. Every code point is matched by some alternative, so the ranges tile the text.
// Alternatives are tried in order, quantifiers greedy with backtracking worked out per alternative.
template <class Piece>
void split_llama3(std::string_view text, bool qwen, Piece&& piece) {
    using enum split_classes::kind;
    const split_classes& classes = thread_split_classes(text);
    const std::vector<std::size_t>& offsets = classes.offsets;
    const std::vector<split_classes::kind>& kinds = classes.kinds;
    const std::vector<char32_t>& cps = classes.cps;
    const std::size_t n = cps.size();
    const auto run_end = [&](std::size_t i, split_classes::kind k) { return classes.run_end(i, k); };
    const auto newline = [&](std::size_t i) { return cps[i] == '\r' || cps[i] == '\n'; };
    for (std::size_t i = 0; i < n;) {
        std::size_t end = i;
        if (cps[i] == '\'' && i + 1 < n) {  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
            const char32_t a = fold_contraction_letter(cps[i + 1]);
            const char32_t b = i + 2 < n ? fold_contraction_letter(cps[i + 2]) : 0;
            if (a == 's' || a == 't' || a == 'm' || a == 'd')
                end = i + 2;
            else if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
                end = i + 3;
        }
        if (end == i) {
            if (kinds[i] == letter) {  // [^\r\n\p{L}\p{N}]?\p{L}+
                end = run_end(i, letter);
            } else if (kinds[i] != number && !newline(i) && i + 1 < n && kinds[i + 1] == letter) {
                end = run_end(i + 1, letter);
            } else if (kinds[i] == number) {  // \p{N}{1,3} (Qwen: \p{N})
                end = std::min(run_end(i, number), i + (qwen ? 1 : 3));
            } else if (kinds[i] == other || (cps[i] == ' ' && i + 1 < n && kinds[i + 1] == other)) {
                end = run_end(kinds[i] == other ? i : i + 1, other);  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
                while (end < n && newline(end))
                    ++end;
            } else {  // whitespace
                const std::size_t run = run_end(i, space);
                std::size_t last_newline = run;
                for (std::size_t k = run; k > i; --k)
                    if (newline(k - 1)) {
                        last_newline = k - 1;
                        break;
                    }
                if (last_newline < run)  // \s*[\r\n]+: \s* gives back up to the last newline
                    end = last_newline + 1;
                else if (run == n || run - i == 1)  // \s+(?!\S), else \s+
                    end = run;
                else
                    end = run - 1;
            }
        }
        piece(offsets[i], offsets[end]);
        i = end;
    }
}

// Calls piece(begin, end) with the byte ranges CLIP's pattern matches in well-formed UTF-8 text; whitespace
// is never matched, so the ranges leave gaps. The contractions are case-sensitive (the pattern has no (?i);
// CLIP lower-cases the text first).
template <class Piece>
void split_clip(std::string_view text, bool with_specials, Piece&& piece) {
    using enum split_classes::kind;
    const split_classes& classes = thread_split_classes(text);
    const std::vector<std::size_t>& offsets = classes.offsets;
    const std::vector<split_classes::kind>& kinds = classes.kinds;
    const std::vector<char32_t>& cps = classes.cps;
    const std::size_t n = cps.size();
    constexpr std::string_view specials[] = {"<|startoftext|>", "<|endoftext|>"};
    for (std::size_t i = 0; i < n;) {
        std::size_t end = i;
        if (with_specials && cps[i] == '<') {
            for (const std::string_view special : specials)
                if (text.substr(offsets[i]).starts_with(special)) end = i + special.size();  // all ASCII
        }
        if (end == i && cps[i] == '\'' && i + 1 < n) {
            const char32_t a = cps[i + 1], b = i + 2 < n ? cps[i + 2] : 0;
            if (a == 's' || a == 't' || a == 'm' || a == 'd')
                end = i + 2;
            else if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
                end = i + 3;
        }
        if (end == i) {
            if (kinds[i] == space) {  // unmatched
                ++i;
                continue;
            }
            end = kinds[i] == number ? i + 1 : classes.run_end(i, kinds[i]);  // [\p{N}], \p{L}+, [^\s..]+
        }
        piece(offsets[i], offsets[end]);
        i = end;
    }
}

// What Split does with the pattern's matches (tokenizers' SplitDelimiterBehavior): Isolated keeps the
// matches and the gaps between them as words; Removed drops the matches. With invert the matches and the
// gaps trade roles, so Removed + invert (CLIP) keeps only the matches.
enum class split_behavior : std::uint8_t { isolated, removed };

class split_pre_tokenizer final : public pre_tokenizer {
public:
    explicit split_pre_tokenizer(split_pattern pattern, split_behavior behavior = split_behavior::isolated,
                                 bool invert = false)
        : pattern_(pattern), behavior_(behavior), invert_(invert) {}
    void pre_tokenize(std::string_view text, word_list& out) const override {
        std::size_t covered = 0;
        const auto keep = [&](std::size_t begin, std::size_t end, bool match) {
            if (begin == end) return;
            if (behavior_ == split_behavior::isolated || match == invert_)
                out.add(text.substr(begin, end - begin));
        };
        const auto emit = [&](std::size_t begin, std::size_t end) {
            keep(covered, begin, false);
            keep(begin, end, true);
            covered = end;
        };
        if (pattern_ == split_pattern::gpt2)
            split_gpt2(text, emit);
        else if (pattern_ == split_pattern::clip || pattern_ == split_pattern::clip_with_specials)
            split_clip(text, pattern_ == split_pattern::clip_with_specials, emit);
        else
            split_llama3(text, pattern_ == split_pattern::qwen2, emit);
        keep(covered, text.size(), false);
    }

private:
    split_pattern pattern_;
    split_behavior behavior_;
    bool invert_;
};

}  // namespace anvil::detail
