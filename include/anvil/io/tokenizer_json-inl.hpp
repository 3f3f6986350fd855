// anvil: tokenizer_json's definitions (see tokenizer_json.hpp; compilation.hpp says when this file is
// compiled).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/core/json.hpp"
#include "anvil/io/byte_level_bpe.hpp"
#include "anvil/io/split_patterns.hpp"
#include "anvil/io/tokenizer_decoders.hpp"
#include "anvil/io/tokenizer_json.hpp"
#include "anvil/io/tokenizer_normalizers.hpp"
#include "anvil/io/tokenizer_pipeline.hpp"
#include "anvil/io/tokenizer_pre_tokenizers.hpp"
#include "anvil/io/tokenizer_processors.hpp"
#include "anvil/io/wordpiece.hpp"

namespace anvil::detail {

ANVIL_INLINE void tokenizer_data::add_tokens(std::vector<added_token> tokens) {
    for (added_token& token : tokens) {
        added_vocab.add(token.content, token.id);
        if (token.special) special_ids.insert(token.id);
        if (token.normalized) {  // Hugging Face partitions by this flag alone, special or not
            std::string content = token.content;
            if (normalize) normalize->normalize(content);
            normalized_matcher.add(std::move(content), token);
        } else {
            raw_matcher.add(token.content, token);
        }
        added.push_back(std::move(token));
    }
}

ANVIL_INLINE json_field json_field::operator[](std::size_t index) const {
    return {source, message(path, "[", index, "]")};
}

ANVIL_INLINE void json_field::fail(std::string_view what) const {
    throw format_error(message(source, ": ", path.empty() ? "top level" : path, ": ", what));
}

ANVIL_INLINE void json_field::unsupported(std::string_view component, std::string_view type,
                                          std::string_view supported) const {
    throw unsupported_error(
        message(source, ": ", component, " type '", type, "' is not supported yet (", supported, ")"));
}

ANVIL_INLINE const json::value& json_field::expect(const json::value& v, json::kind kind) const {
    if (v.type() != kind) {
        constexpr std::string_view described[] = {"null",     "a boolean", "an integer", "a number",
                                                  "a string", "an array",  "an object"};
        fail(message("expected ", described[static_cast<int>(kind)], ", got ",
                     described[static_cast<int>(v.type())]));
    }
    return v;
}

ANVIL_INLINE const json::value* member(const json::value& object, std::string_view key) {
    const json::value* v = object.find(key);
    return v && !v->is_null() ? v : nullptr;
}

ANVIL_INLINE const json::value& required(const json::value& object, std::string_view key,
                                         const json_field& where) {
    const json::value* v = member(object, key);
    if (!v) (where / key).fail("missing");
    return *v;
}

ANVIL_INLINE bool read_bool(const json::value& object, std::string_view key, const json_field& where,
                            bool fallback) {
    const json::value* v = member(object, key);
    return v ? (where / key).expect(*v, json::kind::boolean).as_bool() : fallback;
}

ANVIL_INLINE std::string read_string(const json::value& object, std::string_view key, const json_field& where,
                                     std::string fallback) {
    const json::value* v = member(object, key);
    return v ? (where / key).expect(*v, json::kind::string).as_string() : std::move(fallback);
}

ANVIL_INLINE std::int32_t read_id(const json::value& v, const json_field& where, std::int64_t limit) {
    const std::int64_t id = where.expect(v, json::kind::integer).as_int();
    if (id < 0 || id >= limit)
        where.fail(message("id ", id, " is out of range (expected 0 to ", limit - 1, ")"));
    return static_cast<std::int32_t>(id);
}

ANVIL_INLINE std::string_view type_of(const json::value& component, const json_field& where) {
    where.expect(component, json::kind::object);
    return (where / "type").expect(required(component, "type", where), json::kind::string).as_string();
}

ANVIL_INLINE std::int64_t id_limit(std::size_t tokens) {
    return static_cast<std::int64_t>(2 * tokens + 1024);
}

ANVIL_INLINE vocabulary read_vocab(const json::value& v, const json_field& where, std::size_t extra_tokens) {
    const json::object& entries = where.expect(v, json::kind::object).as_object();
    vocabulary vocab;
    vocab.ids.reserve(entries.size());
    const std::int64_t limit = id_limit(entries.size() + extra_tokens);
    for (const auto& [token, id] : entries) {
        const json_field field = where / token;
        if (!vocab.add(token, read_id(id, field, limit)))
            field.fail(message("id ", id.as_int(), " is used twice"));
    }
    return vocab;
}

ANVIL_INLINE std::unique_ptr<normalizer> read_normalizer(const json::value& n, const json_field& where) {
    const std::string_view type = type_of(n, where);
    if (type == "BertNormalizer") {
        const bool lowercase = read_bool(n, "lowercase", where, true);
        return std::make_unique<bert_normalizer>(read_bool(n, "clean_text", where, true),
                                                 read_bool(n, "handle_chinese_chars", where, true),
                                                 read_bool(n, "strip_accents", where, lowercase), lowercase);
    }
    if (type == "Lowercase") return std::make_unique<lowercase_normalizer>();
    if (type == "NFD") return std::make_unique<nfd_normalizer>();
    if (type == "NFC") return std::make_unique<nfc_normalizer>();
    if (type == "StripAccents") return std::make_unique<strip_accents_normalizer>();
    if (type == "Prepend") return std::make_unique<prepend_normalizer>(read_string(n, "prepend", where, ""));
    if (type == "Replace") {
        const json::value& pattern =
            (where / "pattern").expect(required(n, "pattern", where), json::kind::object);
        if (const json::value* regex = member(pattern, "Regex")) {
            const std::string& text =
                (where / "pattern" / "Regex").expect(*regex, json::kind::string).as_string();
            if (text != "\\s+")
                throw unsupported_error(message(where.source, ": ", where.path, ": Replace with the Regex '",
                                                text,
                                                "' is not supported (String patterns, and the regex \\s+)"));
            return std::make_unique<whitespace_runs_normalizer>(read_string(n, "content", where, ""));
        }
        return std::make_unique<replace_normalizer>(read_string(pattern, "String", where / "pattern", ""),
                                                    read_string(n, "content", where, ""));
    }
    if (type == "Sequence") {
        const json_field list = where / "normalizers";
        std::vector<std::unique_ptr<normalizer>> stages;
        const json::array& items =
            list.expect(required(n, "normalizers", where), json::kind::array).as_array();
        for (std::size_t i = 0; i < items.size(); ++i)
            stages.push_back(read_normalizer(items[i], list[i]));
        return std::make_unique<sequence_normalizer>(std::move(stages));
    }
    constexpr std::string_view later[] = {"NFKC", "NFKD", "Strip", "Nmt", "Precompiled", "ByteLevel"};
    for (const std::string_view known : later)
        if (type == known)
            where.unsupported(
                "normalizer", type,
                "BertNormalizer, Lowercase, NFD, NFC, StripAccents, Prepend, Replace, Sequence");
    (where / "type").fail(message("unknown normalizer type '", type, "'"));
}

ANVIL_INLINE std::string read_replacement(const json::value& c, const json_field& where) {
    std::string replacement = read_string(c, "replacement", where, "\u2581");
    std::size_t at = 0;
    if (replacement.empty() || (next_code_point(replacement, at), at != replacement.size()))
        (where / "replacement").fail(message("expected one character, got '", replacement, "'"));
    return replacement;
}

ANVIL_INLINE prepend_scheme read_prepend_scheme(const json::value& c, const json_field& where) {
    if (!member(c, "prepend_scheme"))
        return read_bool(c, "add_prefix_space", where, true) ? prepend_scheme::always : prepend_scheme::never;
    const std::string scheme = read_string(c, "prepend_scheme", where, "always");
    if (scheme == "always") return prepend_scheme::always;
    if (scheme == "first") return prepend_scheme::first;
    if (scheme == "never") return prepend_scheme::never;
    (where / "prepend_scheme")
        .fail(message("expected \"always\", \"first\" or \"never\", got \"", scheme, "\""));
}

ANVIL_INLINE std::unique_ptr<pre_tokenizer> read_split(const json::value& p, const json_field& where) {
    const json::value& pattern =
        (where / "pattern").expect(required(p, "pattern", where), json::kind::object);
    const json::value* regex = member(pattern, "Regex");
    if (!regex) {
        const std::string literal = read_string(pattern, "String", where / "pattern", "");
        throw unsupported_error(
            message(where.source, ": ", where.path, ": Split on the string pattern '", literal,
                    "' is not supported yet (the Llama-3, Qwen2, GPT-2 and CLIP regexes are)"));
    }
    const std::string& text = (where / "pattern" / "Regex").expect(*regex, json::kind::string).as_string();
    const auto known = recognise_split_regex(text);
    if (!known)
        throw unsupported_error(
            message(where.source, ": ", where.path, ": Split regex '", text,
                    "' is not supported (anvil matches the Llama-3, Qwen2, GPT-2 and CLIP patterns "
                    "without a regex engine)"));
    const std::string behavior = read_string(p, "behavior", where, "Isolated");
    if (behavior != "Isolated" && behavior != "Removed")
        throw unsupported_error(message(where.source, ": ", where.path, ": Split behavior '", behavior,
                                        "' is not supported yet (Isolated, Removed)"));
    return std::make_unique<split_pre_tokenizer>(
        *known, behavior == "Isolated" ? split_behavior::isolated : split_behavior::removed,
        read_bool(p, "invert", where, false));
}

ANVIL_INLINE std::unique_ptr<pre_tokenizer> read_pre_tokenizer(const json::value& p,
                                                               const json_field& where) {
    const std::string_view type = type_of(p, where);
    if (type == "BertPreTokenizer") return std::make_unique<bert_pre_tokenizer>();
    if (type == "WhitespaceSplit") return std::make_unique<whitespace_split_pre_tokenizer>();
    if (type == "ByteLevel")
        return std::make_unique<byte_level_pre_tokenizer>(read_bool(p, "add_prefix_space", where, true),
                                                          read_bool(p, "use_regex", where, true));
    if (type == "Split") return read_split(p, where);
    if (type == "Metaspace")
        return std::make_unique<metaspace_pre_tokenizer>(
            read_replacement(p, where), read_prepend_scheme(p, where), read_bool(p, "split", where, true));
    if (type == "Sequence") {
        const json_field list = where / "pretokenizers";
        std::vector<std::unique_ptr<pre_tokenizer>> stages;
        const json::array& items =
            list.expect(required(p, "pretokenizers", where), json::kind::array).as_array();
        for (std::size_t i = 0; i < items.size(); ++i)
            stages.push_back(read_pre_tokenizer(items[i], list[i]));
        return std::make_unique<sequence_pre_tokenizer>(std::move(stages));
    }
    constexpr std::string_view later[] = {"Whitespace",         "Punctuation",    "Digits",
                                          "CharDelimiterSplit", "UnicodeScripts", "FixedLength"};
    for (const std::string_view known : later)
        if (type == known)
            where.unsupported("pre_tokenizer", type,
                              "BertPreTokenizer, ByteLevel, WhitespaceSplit, Split, Metaspace, Sequence");
    (where / "type").fail(message("unknown pre_tokenizer type '", type, "'"));
}

ANVIL_INLINE std::unique_ptr<tokenizer_model> read_wordpiece(const json::value& m, const json_field& where,
                                                             std::size_t added_count) {
    vocabulary vocab = read_vocab(required(m, "vocab", where), where / "vocab", added_count);
    const std::string unk = read_string(m, "unk_token", where, "[UNK]");
    const auto unk_id = vocab.find(unk);
    if (!unk_id) (where / "unk_token").fail(message("'", unk, "' is not in the vocabulary"));
    const json::value* max_chars = member(m, "max_input_chars_per_word");
    const std::int64_t max =
        max_chars ? (where / "max_input_chars_per_word").expect(*max_chars, json::kind::integer).as_int()
                  : 100;
    if (max < 0) (where / "max_input_chars_per_word").fail(message("expected a count, got ", max));
    return std::make_unique<wordpiece_model>(std::move(vocab), *unk_id,
                                             read_string(m, "continuing_subword_prefix", where, "##"),
                                             static_cast<std::size_t>(max));
}

ANVIL_INLINE std::string add_merge(std::unordered_map<std::uint64_t, bpe_model::merge>& merges,
                                   const vocabulary& vocab, std::string_view a, std::string_view b,
                                   std::int32_t rank, std::string_view prefix) {
    const auto left = vocab.find(a), right = vocab.find(b);
    if (!left) return message("token '", a, "' is not in the vocabulary");
    if (!right) return message("token '", b, "' is not in the vocabulary");
    const std::string merged = std::string(a).append(b.starts_with(prefix) ? b.substr(prefix.size()) : b);
    const auto result = vocab.find(merged);
    if (!result) return message("the merged token '", merged, "' is not in the vocabulary");
    merges.insert_or_assign(bpe_model::pair_key(*left, *right), bpe_model::merge{rank, *result});
    return {};
}

ANVIL_INLINE std::unordered_map<std::uint64_t, bpe_model::merge> read_merges(const json::array& items,
                                                                             const json_field& where,
                                                                             const vocabulary& vocab,
                                                                             std::string_view prefix) {
    std::unordered_map<std::uint64_t, bpe_model::merge> merges;
    merges.reserve(items.size());
    for (std::size_t i = 0; i < items.size(); ++i) {
        const json_field field = where[i];
        std::string_view a, b;
        if (items[i].is_string()) {
            const std::string_view line = items[i].as_string();
            const std::size_t space = line.find(' ');
            if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos)
                field.fail(message("expected two tokens separated by one space, got '", line, "'"));
            a = line.substr(0, space);
            b = line.substr(space + 1);
        } else {
            const json::array& pair = field.expect(items[i], json::kind::array).as_array();
            if (pair.size() != 2)
                field.fail(message("expected a pair of tokens, got ", pair.size(), " items"));
            a = field[0].expect(pair[0], json::kind::string).as_string();
            b = field[1].expect(pair[1], json::kind::string).as_string();
        }
        const std::string problem = add_merge(merges, vocab, a, b, static_cast<std::int32_t>(i), prefix);
        if (!problem.empty()) field.fail(problem);
    }
    return merges;
}

ANVIL_INLINE std::unique_ptr<tokenizer_model> read_bpe(const json::value& m, const json_field& where,
                                                       std::size_t added_count) {
    if (const json::value* dropout = member(m, "dropout")) {
        if (!dropout->is_number()) (where / "dropout").fail("expected a number or null");
        if (dropout->as_double() > 0.0)
            throw unsupported_error(message(where.source, ": ", where.path, ".dropout: BPE dropout (",
                                            dropout->as_double(),
                                            ") is not supported (it makes encoding random)"));
    }
    vocabulary vocab = read_vocab(required(m, "vocab", where), where / "vocab", added_count);
    bpe_options options;
    options.continuing_prefix = read_string(m, "continuing_subword_prefix", where, "");
    options.end_of_word_suffix = read_string(m, "end_of_word_suffix", where, "");
    options.fuse_unk = read_bool(m, "fuse_unk", where, false);
    options.byte_fallback = read_bool(m, "byte_fallback", where, false);
    options.ignore_merges = read_bool(m, "ignore_merges", where, false);
    if (const json::value* unk = member(m, "unk_token")) {
        const std::string& name = (where / "unk_token").expect(*unk, json::kind::string).as_string();
        options.unk_id = vocab.find(name);
        if (!options.unk_id) (where / "unk_token").fail(message("'", name, "' is not in the vocabulary"));
    }
    if (options.byte_fallback) {
        for (unsigned b = 0; b < 256; ++b) {
            const std::string name = byte_fallback_token(static_cast<unsigned char>(b));
            if (!vocab.find(name))
                (where / "byte_fallback")
                    .fail(message("true, but the vocabulary has no byte token '", name,
                                  "' (byte fallback needs all 256 <0xXX> tokens)"));
        }
    }
    const json::value* merges_value = member(m, "merges");
    const json::array no_merges;
    const json::array& items =
        merges_value ? (where / "merges").expect(*merges_value, json::kind::array).as_array() : no_merges;
    auto merges = read_merges(items, where / "merges", vocab, options.continuing_prefix);
    return std::make_unique<bpe_model>(std::move(vocab), std::move(merges), std::move(options));
}

ANVIL_INLINE std::unique_ptr<tokenizer_model> read_model(const json::value& m, const json_field& where,
                                                         std::size_t added_count) {
    where.expect(m, json::kind::object);
    std::string_view type;
    if (member(m, "type")) {
        type = type_of(m, where);
    } else if (m.find("merges")) {  // files from before "type" was written: serde's untagged guess
        type = "BPE";
    } else if (m.find("continuing_subword_prefix") || m.find("max_input_chars_per_word")) {
        type = "WordPiece";
    } else {
        (where / "type").fail("missing");
    }
    if (type == "WordPiece") return read_wordpiece(m, where, added_count);
    if (type == "BPE") return read_bpe(m, where, added_count);
    if (type == "Unigram" || type == "WordLevel") where.unsupported("model", type, "WordPiece, BPE");
    (where / "type").fail(message("unknown model type '", type, "'"));
}

ANVIL_INLINE std::int32_t read_token_pair(const json::value& p, std::string_view key, const json_field& where,
                                          std::int64_t limit) {
    const json_field field = where / key;
    const json::array& pair = field.expect(required(p, key, where), json::kind::array).as_array();
    if (pair.size() != 2) field.fail(message("expected [token, id], got ", pair.size(), " items"));
    field[0].expect(pair[0], json::kind::string);
    return read_id(pair[1], field[1], limit);
}

ANVIL_INLINE std::vector<template_piece> read_template(const json::value& list, const json_field& where,
                                                       const json::value* specials,
                                                       const json_field& specials_field, std::int64_t limit) {
    std::vector<template_piece> pieces;
    bool placed[2] = {false, false};  // each input is placed once: truncation budgets for that
    const json::array& items = where.expect(list, json::kind::array).as_array();
    for (std::size_t i = 0; i < items.size(); ++i) {
        const json_field field = where[i];
        field.expect(items[i], json::kind::object);
        template_piece piece;
        if (const json::value* sequence = member(items[i], "Sequence")) {
            const json_field f = field / "Sequence";
            const std::string& id =
                (f / "id").expect(required(*sequence, "id", f), json::kind::string).as_string();
            if (id != "A" && id != "B") (f / "id").fail(message("expected \"A\" or \"B\", got \"", id, "\""));
            piece.sequence = id == "A" ? 0 : 1;
            const std::size_t slot = id == "A" ? 0 : 1;
            if (placed[slot]) (f / "id").fail(message("the sequence \"", id, "\" is placed twice"));
            placed[slot] = true;
            piece.type_id = read_id(required(*sequence, "type_id", f), f / "type_id", 1 << 16);
        } else if (const json::value* special = member(items[i], "SpecialToken")) {
            const json_field f = field / "SpecialToken";
            const std::string& id =
                (f / "id").expect(required(*special, "id", f), json::kind::string).as_string();
            piece.type_id = read_id(required(*special, "type_id", f), f / "type_id", 1 << 16);
            const json::value* entry = specials ? specials->find(id) : nullptr;
            if (!entry) (f / "id").fail(message("'", id, "' is not in post_processor.special_tokens"));
            const json_field e = specials_field / id;
            const json::array& ids =
                (e / "ids").expect(required(*entry, "ids", e), json::kind::array).as_array();
            for (std::size_t k = 0; k < ids.size(); ++k)
                piece.ids.push_back(read_id(ids[k], (e / "ids")[k], limit));
        } else {
            field.fail("expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
        }
        pieces.push_back(std::move(piece));
    }
    return pieces;
}

ANVIL_INLINE post_processor read_post_processor(const json::value& p, const json_field& where,
                                                std::int64_t limit) {
    const std::string_view type = type_of(p, where);
    if (type == "BertProcessing")
        return post_processor::bert(read_token_pair(p, "cls", where, limit),
                                    read_token_pair(p, "sep", where, limit));
    if (type == "RobertaProcessing")
        return post_processor::roberta(read_token_pair(p, "cls", where, limit),
                                       read_token_pair(p, "sep", where, limit));
    if (type == "ByteLevel") return {};
    if (type == "TemplateProcessing") {
        const json::value* specials = member(p, "special_tokens");
        if (specials) (where / "special_tokens").expect(*specials, json::kind::object);
        post_processor result;
        result.single = read_template(required(p, "single", where), where / "single", specials,
                                      where / "special_tokens", limit);
        result.pair = read_template(required(p, "pair", where), where / "pair", specials,
                                    where / "special_tokens", limit);
        for (int s = 0; s < 2; ++s) {
            bool a = false, b = false;
            for (const template_piece& piece : s == 0 ? result.single : result.pair) {
                a = a || piece.sequence == 0;
                b = b || piece.sequence == 1;
            }
            if (!a || (s == 1 && !b) || (s == 0 && b))
                (where / (s == 0 ? "single" : "pair"))
                    .fail(s == 0 ? "expected sequence A (and not B)" : "expected sequences A and B");
        }
        return result;
    }
    if (type == "Sequence") {
        const json_field list = where / "processors";
        const json::array& items =
            list.expect(required(p, "processors", where), json::kind::array).as_array();
        post_processor result;
        bool templated = false;
        for (std::size_t i = 0; i < items.size(); ++i) {
            if (type_of(items[i], list[i]) == "ByteLevel") continue;  // offsets only
            if (templated)
                throw unsupported_error(
                    message(where.source, ": ", list[i].path,
                            ": more than one post-processor that adds tokens is not supported"));
            result = read_post_processor(items[i], list[i], limit);
            templated = true;
        }
        return result;
    }
    (where / "type").fail(message("unknown post_processor type '", type, "'"));
}

ANVIL_INLINE std::unique_ptr<decoder> read_decoder(const json::value& d, const json_field& where) {
    const std::string_view type = type_of(d, where);
    if (type == "WordPiece")
        return std::make_unique<wordpiece_decoder>(read_string(d, "prefix", where, "##"),
                                                   read_bool(d, "cleanup", where, true));
    if (type == "ByteLevel") return std::make_unique<byte_level_decoder>();
    if (type == "ByteFallback") return std::make_unique<byte_fallback_decoder>();
    if (type == "Fuse") return std::make_unique<fuse_decoder>();
    if (type == "Metaspace")
        return std::make_unique<metaspace_decoder>(read_replacement(d, where), read_prepend_scheme(d, where));
    if (type == "Replace") {
        const json::value& pattern =
            (where / "pattern").expect(required(d, "pattern", where), json::kind::object);
        if (!member(pattern, "String"))
            throw unsupported_error(
                message(where.source, ": ", where.path,
                        ": Replace with a Regex pattern is not supported yet (String patterns)"));
        return std::make_unique<replace_decoder>(read_string(pattern, "String", where / "pattern", ""),
                                                 read_string(d, "content", where, ""));
    }
    if (type == "Strip") {
        std::string content = read_string(d, "content", where, " ");
        std::size_t at = 0;
        if (content.empty() || (next_code_point(content, at), at != content.size()))
            (where / "content").fail(message("expected one character, got '", content, "'"));
        std::size_t counts[2] = {0, 0};
        for (int k = 0; k < 2; ++k) {
            const std::string_view key = k == 0 ? "start" : "stop";
            if (const json::value* v = member(d, key)) {
                const std::int64_t count = (where / key).expect(*v, json::kind::integer).as_int();
                if (count < 0) (where / key).fail(message("expected a count, got ", count));
                counts[k] = static_cast<std::size_t>(count);
            }
        }
        return std::make_unique<strip_decoder>(std::move(content), counts[0], counts[1]);
    }
    if (type == "Sequence") {
        const json_field list = where / "decoders";
        std::vector<std::unique_ptr<decoder>> stages;
        const json::array& items = list.expect(required(d, "decoders", where), json::kind::array).as_array();
        for (std::size_t i = 0; i < items.size(); ++i)
            stages.push_back(read_decoder(items[i], list[i]));
        return std::make_unique<sequence_decoder>(std::move(stages));
    }
    constexpr std::string_view later[] = {"BPEDecoder", "CTC"};
    for (const std::string_view known : later)
        if (type == known)
            where.unsupported(
                "decoder", type,
                "WordPiece, ByteLevel, ByteFallback, Fuse, Metaspace, Replace, Strip, Sequence");
    (where / "type").fail(message("unknown decoder type '", type, "'"));
}

ANVIL_INLINE added_token read_added_token(const json::value& t, const json_field& field, std::int32_t id) {
    field.expect(t, json::kind::object);
    added_token token;
    token.id = id;
    token.content = (field / "content").expect(required(t, "content", field), json::kind::string).as_string();
    if (token.content.empty()) (field / "content").fail("empty token");
    token.special = read_bool(t, "special", field, false);
    token.single_word = read_bool(t, "single_word", field, false);
    token.lstrip = read_bool(t, "lstrip", field, false);
    token.rstrip = read_bool(t, "rstrip", field, false);
    token.normalized = read_bool(t, "normalized", field, !token.special);
    return token;
}

ANVIL_INLINE std::vector<added_token> read_added_tokens(const json::value& list, const json_field& where) {
    std::vector<added_token> tokens;
    const json::array& items = where.expect(list, json::kind::array).as_array();
    const std::int64_t limit = std::int64_t{1} << 31;
    for (std::size_t i = 0; i < items.size(); ++i) {
        const json_field field = where[i];
        const json::value& t = field.expect(items[i], json::kind::object);
        tokens.push_back(read_added_token(t, field, read_id(required(t, "id", field), field / "id", limit)));
    }
    return tokens;
}

ANVIL_INLINE std::shared_ptr<tokenizer_data> read_tokenizer_json(const json::value& document,
                                                                 std::string_view source) {
    const json_field root{source, ""};
    root.expect(document, json::kind::object);
    auto data = std::make_shared<tokenizer_data>();
    data->source = std::string(source);
    std::vector<added_token> added;
    if (const json::value* list = member(document, "added_tokens"))
        added = read_added_tokens(*list, root / "added_tokens");
    data->model = read_model(required(document, "model", root), root / "model", added.size());
    const std::size_t vocab_ids = data->model->vocab().tokens.size();
    const std::int64_t limit = id_limit(vocab_ids + added.size());
    for (std::size_t i = 0; i < added.size(); ++i)
        if (added[i].id >= limit)
            (root / "added_tokens")[i].fail(
                message("id ", added[i].id, " is out of range (expected 0 to ", limit - 1, ")"));
    if (const json::value* n = member(document, "normalizer"))
        data->normalize = read_normalizer(*n, root / "normalizer");
    if (const json::value* p = member(document, "pre_tokenizer"))
        data->pre_tokenize = read_pre_tokenizer(*p, root / "pre_tokenizer");
    if (const json::value* d = member(document, "decoder")) data->decode = read_decoder(*d, root / "decoder");
    for (std::size_t i = 0; i < added.size(); ++i) {
        const auto existing = data->added_vocab.find(added[i].content);
        if (existing || data->added_vocab.has_id(added[i].id))
            (root / "added_tokens")[i].fail(
                message("token '", added[i].content, "' or id ", added[i].id, " is listed twice"));
        data->add_tokens({added[i]});
    }
    if (const json::value* p = member(document, "post_processor")) {
        data->post_process = read_post_processor(*p, root / "post_processor", limit);
        for (const auto* pieces : {&data->post_process.single, &data->post_process.pair})
            for (const template_piece& piece : *pieces)
                for (const std::int32_t id : piece.ids)
                    if (!data->has_id(id))
                        (root / "post_processor")
                            .fail(message("special token id ", id, " is not in the vocabulary"));
    }
    if (const json::value* padding = member(document, "padding")) {
        const json_field field = root / "padding";
        field.expect(*padding, json::kind::object);
        if (const json::value* id = member(*padding, "pad_id"))
            data->padding_id = read_id(*id, field / "pad_id", limit);
    }
    return data;
}

}  // namespace anvil::detail
