// anvil: read_gguf_vocabulary's definitions (see gguf_tokenizer.hpp; compilation.hpp says when this file is
// compiled).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/io/gguf_tokenizer.hpp"
#include "anvil/io/split_patterns.hpp"

namespace anvil::detail {

// llama.cpp's llama_token_type (llama-vocab.h), as tokenizer.ggml.token_type stores it.
enum class gguf_token_type : std::int64_t {
    undefined = 0,
    normal = 1,
    unknown = 2,
    control = 3,
    user_defined = 4,
    unused = 5,
    byte = 6,
};

// What the BPE model reads from the vocabulary: the pieces text can be made of.
inline bool gguf_mergeable(gguf_token_type t) {
    return t == gguf_token_type::normal || t == gguf_token_type::user_defined ||
           t == gguf_token_type::undefined;
}

// One split of a SentencePiece piece into two pieces, ranked as Hugging Face's SentencePieceExtractor ranks
// it: the piece's score, highest first, then the piece's id, then the halves' ids.
struct gguf_spm_merge {
    float score = 0;
    std::int32_t piece = 0, left = 0, right = 0;
};

inline json::value gguf_special_entry(std::string_view text, std::int32_t id) {
    json::object entry;
    entry["id"] = json::value(text);
    entry["ids"] = json::value(json::array{json::value(id)});
    entry["tokens"] = json::value(json::array{json::value(text)});
    return json::value(std::move(entry));
}

inline json::value gguf_template_item(std::string_view key, std::string_view id, std::int64_t type_id) {
    json::object inner;
    inner["id"] = json::value(id);
    inner["type_id"] = json::value(type_id);
    json::object piece;
    piece[std::string(key)] = json::value(std::move(inner));
    return json::value(std::move(piece));
}

// TemplateProcessing with the BOS and EOS llama.cpp adds (llama_vocab::tokenize's add_special), or null when
// it adds neither.
inline json::value gguf_post_processor(const std::vector<std::string>& tokens,
                                       std::optional<std::int32_t> bos, std::optional<std::int32_t> eos) {
    if (!bos && !eos) return json::value(nullptr);
    json::object specials;
    const auto sequence = [&](json::array& list, std::string_view which, std::int64_t type_id) {
        if (bos)
            list.push_back(
                gguf_template_item("SpecialToken", tokens[static_cast<std::size_t>(*bos)], type_id));
        list.push_back(gguf_template_item("Sequence", which, type_id));
        if (eos)
            list.push_back(
                gguf_template_item("SpecialToken", tokens[static_cast<std::size_t>(*eos)], type_id));
    };
    json::array single, pair;
    sequence(single, "A", 0);
    sequence(pair, "A", 0);
    sequence(pair, "B", 1);
    for (const std::optional<std::int32_t> id : {bos, eos})
        if (id)
            specials[tokens[static_cast<std::size_t>(*id)]] =
                gguf_special_entry(tokens[static_cast<std::size_t>(*id)], *id);
    json::object p;
    p["type"] = json::value("TemplateProcessing");
    p["single"] = json::value(std::move(single));
    p["pair"] = json::value(std::move(pair));
    p["special_tokens"] = json::value(std::move(specials));
    return json::value(std::move(p));
}

inline json::value gguf_typed(std::string_view type) {
    json::object o;
    o["type"] = json::value(type);
    return json::value(std::move(o));
}

inline json::value gguf_string_pattern(std::string_view type, std::string_view pattern,
                                       std::string_view content) {
    json::object o;
    o["type"] = json::value(type);
    json::object p;
    p["String"] = json::value(pattern);
    o["pattern"] = json::value(std::move(p));
    o["content"] = json::value(content);
    return json::value(std::move(o));
}

inline json::value gguf_sequence(std::string_view list_key, json::array items) {
    json::object o;
    o["type"] = json::value("Sequence");
    o[std::string(list_key)] = json::value(std::move(items));
    return json::value(std::move(o));
}

inline json::value gguf_byte_level(bool use_regex) {
    json::object o;
    o["type"] = json::value("ByteLevel");
    o["add_prefix_space"] = json::value(false);
    o["trim_offsets"] = json::value(true);
    o["use_regex"] = json::value(use_regex);
    return json::value(std::move(o));
}

// Every split of every SentencePiece piece into two pieces, in Hugging Face's order (see gguf_spm_merge).
inline json::array gguf_spm_merges(const std::vector<std::string>& tokens,
                                   const std::vector<gguf_token_type>& types,
                                   const std::vector<float>& scores) {
    std::unordered_map<std::string_view, std::int32_t> pieces;
    pieces.reserve(tokens.size());
    for (std::size_t i = 0; i < tokens.size(); ++i)
        if (gguf_mergeable(types[i])) pieces.emplace(tokens[i], static_cast<std::int32_t>(i));
    std::vector<gguf_spm_merge> merges;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        if (!gguf_mergeable(types[i])) continue;
        const std::string_view text = tokens[i];
        for (std::size_t at = 1; at < text.size(); ++at) {
            if ((static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) continue;  // inside a UTF-8 sequence
            const auto left = pieces.find(text.substr(0, at));
            const auto right = pieces.find(text.substr(at));
            if (left != pieces.end() && right != pieces.end())
                merges.push_back({scores[i], static_cast<std::int32_t>(i), left->second, right->second});
        }
    }
    std::ranges::sort(merges, [](const gguf_spm_merge& a, const gguf_spm_merge& b) {
        if (a.score != b.score) return a.score > b.score;
        if (a.piece != b.piece) return a.piece < b.piece;
        if (a.left != b.left) return a.left < b.left;
        return a.right < b.right;
    });
    json::array out;
    out.reserve(merges.size());
    for (const gguf_spm_merge& m : merges) {
        out.push_back(json::value(json::array{json::value(tokens[static_cast<std::size_t>(m.left)]),
                                              json::value(tokens[static_cast<std::size_t>(m.right)])}));
    }
    return out;
}

}  // namespace anvil::detail

namespace anvil {

ANVIL_INLINE std::optional<gguf_vocabulary> read_gguf_vocabulary(const gguf_file& file) {
    using detail::gguf_token_type;
    using detail::message;
    const std::string source(file.source_name());
    const gguf_value* model_key = file.find("tokenizer.ggml.model");
    if (model_key == nullptr) return std::nullopt;
    const std::string& model = file.string("tokenizer.ggml.model");
    if (model == "none" || model == "no_vocab") return std::nullopt;
    const bool spm = model == "llama";
    if (!spm && model != "gpt2") {
        throw unsupported_error(message(source, ": tokenizer.ggml.model '", model,
                                        "' is not supported (anvil reads 'gpt2' byte-level BPE and 'llama' "
                                        "SentencePiece vocabularies)"));
    }

    const gguf_value& token_list = file.array("tokenizer.ggml.tokens");
    if (token_list.element_type() != gguf_value_type::string || token_list.size() == 0) {
        throw format_error(message(source, ": tokenizer.ggml.tokens is ", token_list.describe(),
                                   "; expected a non-empty array of strings"));
    }
    const std::size_t n = token_list.size();
    if (n > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
        throw format_error(
            message(source, ": tokenizer.ggml.tokens holds ", n, " tokens, more than ids can name"));
    std::vector<std::string> tokens;
    tokens.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {  // llama.cpp names empty tokens so that every id has a text
        const std::string_view t = token_list.strings()[i];
        tokens.push_back(t.empty() ? message("[EMPTY_", i, "]") : std::string(t));
    }
    // A numeric array the size of the vocabulary, or nullptr when the key is absent.
    const auto per_token = [&](std::string_view key) -> const gguf_value* {
        const gguf_value* v = file.find(key);
        if (v == nullptr) return nullptr;
        if (!v->is_array() || v->size() != n || v->element_type() == gguf_value_type::string ||
            v->element_type() == gguf_value_type::array) {
            throw format_error(message(source, ": ", key, " is ", v->describe(), "; expected ", n,
                                       " numbers, one per token of tokenizer.ggml.tokens"));
        }
        return v;
    };
    std::vector<gguf_token_type> types(n, gguf_token_type::normal);
    if (const gguf_value* v = per_token("tokenizer.ggml.token_type")) {
        for (std::size_t i = 0; i < n; ++i) {
            const std::optional<std::int64_t> t = v->integer_at(i);
            if (!t || *t < 0 || *t > 6) {
                throw format_error(message(source, ": tokenizer.ggml.token_type[", i, "] is ",
                                           t ? message(*t) : std::string("not an integer"),
                                           "; llama.cpp's token types are 0 to 6"));
            }
            types[i] = static_cast<gguf_token_type>(*t);
        }
    }
    std::vector<float> scores(n, 0.0F);
    if (const gguf_value* v = per_token("tokenizer.ggml.scores")) {
        for (std::size_t i = 0; i < n; ++i)
            scores[i] = static_cast<float>(v->number_at(i).value_or(0.0));
    } else if (spm) {
        throw format_error(message(source,
                                   ": a 'llama' (SentencePiece) vocabulary needs tokenizer.ggml.scores, "
                                   "which rank its merges"));
    }

    json::object vocab;
    {  // llama.cpp asserts every token's text is distinct; so does anvil, naming the two ids
        std::unordered_map<std::string_view, std::size_t> seen;
        seen.reserve(n);
        for (std::size_t i = 0; i < n; ++i) {
            const auto [at, inserted] = seen.emplace(tokens[i], i);
            if (!inserted) {
                throw format_error(message(source, ": tokenizer.ggml.tokens holds '", tokens[i],
                                           "' twice (ids ", at->second, " and ", i, ")"));
            }
            vocab[tokens[i]] = json::value(static_cast<std::int64_t>(i));
        }
    }
    const auto id_key = [&](std::string_view key, std::optional<std::int32_t> fallback) {
        const gguf_value* v = file.find(key);
        if (v == nullptr) return fallback;
        const std::optional<std::int64_t> id = v->integer();
        if (!id || *id < 0 || static_cast<std::uint64_t>(*id) >= n) {
            throw format_error(
                message(source, ": ", key, " is ", v->describe(), "; expected a token id below ", n));
        }
        return std::optional<std::int32_t>(static_cast<std::int32_t>(*id));
    };
    const auto flag = [&](std::string_view key, bool fallback) {
        const gguf_value* v = file.find(key);
        if (v == nullptr) return fallback;
        if (!v->boolean())
            throw format_error(message(source, ": ", key, " is ", v->describe(), "; expected a bool"));
        return *v->boolean();
    };
    // llama.cpp's defaults: SentencePiece files name <s> 1, </s> 2 and <unk> 0 when their keys are absent.
    const std::optional<std::int32_t> bos =
        id_key("tokenizer.ggml.bos_token_id", spm ? std::optional<std::int32_t>(1) : std::nullopt);
    const std::optional<std::int32_t> eos =
        id_key("tokenizer.ggml.eos_token_id", spm ? std::optional<std::int32_t>(2) : std::nullopt);
    const std::optional<std::int32_t> unk =
        id_key("tokenizer.ggml.unknown_token_id", spm ? std::optional<std::int32_t>(0) : std::nullopt);

    gguf_vocabulary result;
    result.model = model;
    result.tokens = n;
    if (bos) result.bos_token = tokens[static_cast<std::size_t>(*bos)];
    if (eos) result.eos_token = tokens[static_cast<std::size_t>(*eos)];
    if (const gguf_value* t = file.find("tokenizer.chat_template")) {
        if (t->string() == nullptr)
            throw format_error(
                message(source, ": tokenizer.chat_template is ", t->describe(), "; expected a string"));
        result.chat_template = *t->string();
    }

    json::object document;
    document["version"] = json::value("1.0");
    json::array added;
    for (std::size_t i = 0; i < n; ++i) {
        const gguf_token_type t = types[i];
        if (t != gguf_token_type::control && t != gguf_token_type::user_defined &&
            t != gguf_token_type::unknown)
            continue;
        json::object entry;
        entry["id"] = json::value(static_cast<std::int64_t>(i));
        entry["content"] = json::value(tokens[i]);
        entry["single_word"] = json::value(false);
        entry["lstrip"] = json::value(false);
        entry["rstrip"] = json::value(false);
        entry["normalized"] = json::value(false);
        entry["special"] = json::value(t != gguf_token_type::user_defined);
        added.push_back(json::value(std::move(entry)));
    }
    document["added_tokens"] = json::value(std::move(added));

    json::object bpe;
    bpe["type"] = json::value("BPE");
    bool add_bos = false;
    if (spm) {
        const bool space_prefix = flag("tokenizer.ggml.add_space_prefix", true);
        bool all_bytes = true;  // byte fallback needs every <0xXX> token
        for (unsigned b = 0; b < 256 && all_bytes; ++b)
            all_bytes = vocab.contains(detail::byte_fallback_token(static_cast<unsigned char>(b)));
        json::array normalizers;
        if (space_prefix) {
            json::object prepend;
            prepend["type"] = json::value("Prepend");
            prepend["prepend"] = json::value("\u2581");
            normalizers.push_back(json::value(std::move(prepend)));
        }
        normalizers.push_back(detail::gguf_string_pattern("Replace", " ", "\u2581"));
        document["normalizer"] = detail::gguf_sequence("normalizers", std::move(normalizers));
        document["pre_tokenizer"] = json::value(nullptr);
        json::array decoders{detail::gguf_string_pattern("Replace", "\u2581", " ")};
        if (all_bytes) decoders.push_back(detail::gguf_typed("ByteFallback"));
        decoders.push_back(detail::gguf_typed("Fuse"));
        if (space_prefix) {
            json::object strip;
            strip["type"] = json::value("Strip");
            strip["content"] = json::value(" ");
            strip["start"] = json::value(1);
            strip["stop"] = json::value(0);
            decoders.push_back(json::value(std::move(strip)));
        }
        document["decoder"] = detail::gguf_sequence("decoders", std::move(decoders));
        bpe["byte_fallback"] = json::value(all_bytes);
        bpe["fuse_unk"] = json::value(true);
        if (unk) bpe["unk_token"] = json::value(tokens[static_cast<std::size_t>(*unk)]);
        bpe["merges"] = json::value(detail::gguf_spm_merges(tokens, types, scores));
        add_bos = true;
    } else {
        const gguf_value* pre_key = file.find("tokenizer.ggml.pre");
        if (pre_key != nullptr && pre_key->string() == nullptr)
            throw format_error(
                message(source, ": tokenizer.ggml.pre is ", pre_key->describe(), "; expected a string"));
        result.pre = pre_key != nullptr ? *pre_key->string() : std::string();
        const std::string& pre = result.pre;
        std::string_view regex;
        bool llama3 = false;
        if (pre == "gpt-2" || pre == "phi-2") {
            regex = detail::gpt2_split_regex;
        } else if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe") {
            regex = detail::llama3_split_regex;
            llama3 = true;
        } else if (pre == "qwen2" || pre == "deepseek-r1-qwen") {
            regex = detail::qwen2_split_regex;
        } else {
            throw unsupported_error(message(
                source, ": tokenizer.ggml.pre '",
                pre.empty() ? std::string("(absent: llama.cpp's 'default')") : pre,
                "' is not supported (anvil splits text as 'gpt-2', 'llama-bpe' / 'llama3' and 'qwen2' do)"));
        }
        json::object split;
        split["type"] = json::value("Split");
        json::object pattern;
        pattern["Regex"] = json::value(regex);
        split["pattern"] = json::value(std::move(pattern));
        split["behavior"] = json::value("Isolated");
        split["invert"] = json::value(false);
        document["normalizer"] = json::value(nullptr);
        document["pre_tokenizer"] = detail::gguf_sequence(
            "pretokenizers", json::array{json::value(std::move(split)), detail::gguf_byte_level(false)});
        document["decoder"] = detail::gguf_byte_level(true);
        bpe["byte_fallback"] = json::value(false);
        bpe["fuse_unk"] = json::value(false);
        bpe["ignore_merges"] = json::value(llama3);
        const gguf_value& merge_list = file.array("tokenizer.ggml.merges");
        if (merge_list.element_type() != gguf_value_type::string)
            throw format_error(message(source, ": tokenizer.ggml.merges is ", merge_list.describe(),
                                       "; expected an array of strings"));
        json::array merges;
        merges.reserve(merge_list.size());
        for (std::size_t i = 0; i < merge_list.size(); ++i) {
            // Split at the first space after the first byte, as llama.cpp does (a half may start with one).
            const std::string_view line = merge_list.strings()[i];
            const std::size_t space = line.size() > 1 ? line.find(' ', 1) : std::string_view::npos;
            if (space == std::string_view::npos) {
                throw format_error(message(source, ": tokenizer.ggml.merges[", i, "] '", line,
                                           "' is not two tokens separated by a space"));
            }
            merges.push_back(json::value(
                json::array{json::value(line.substr(0, space)), json::value(line.substr(space + 1))}));
        }
        bpe["merges"] = json::value(std::move(merges));
        add_bos = llama3;
    }
    bpe["vocab"] = json::value(std::move(vocab));
    document["model"] = json::value(std::move(bpe));
    add_bos = flag("tokenizer.ggml.add_bos_token", add_bos);
    const bool add_eos = flag("tokenizer.ggml.add_eos_token", false);
    if (add_bos && !bos)
        throw format_error(message(source,
                                   ": tokenizer.ggml.add_bos_token is true but the file names no "
                                   "tokenizer.ggml.bos_token_id"));
    if (add_eos && !eos)
        throw format_error(message(source,
                                   ": tokenizer.ggml.add_eos_token is true but the file names no "
                                   "tokenizer.ggml.eos_token_id"));
    document["post_processor"] =
        detail::gguf_post_processor(tokens, add_bos ? bos : std::nullopt, add_eos ? eos : std::nullopt);
    result.tokenizer_json = json::value(std::move(document));
    return result;
}

}  // namespace anvil
