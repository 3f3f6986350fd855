// anvil: tokenizer's definitions (see tokenizer.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/core/json.hpp"
#include "anvil/io/tokenizer.hpp"
#include "anvil/io/tokenizer_files.hpp"
#include "anvil/io/tokenizer_json.hpp"
#include "anvil/io/tokenizer_pipeline.hpp"
#include "anvil/io/unicode.hpp"

namespace anvil {

ANVIL_INLINE tokenizer tokenizer::load(const std::filesystem::path& path) {
    std::error_code error;
    const auto status = std::filesystem::status(path, error);
    if (!std::filesystem::exists(status))
        throw io_error(detail::message(path.string(), ": no such file or directory"));
    if (!std::filesystem::is_directory(status)) return from_json(json::parse_file(path), path.string());
    const detail::tokenizer_config config = detail::read_tokenizer_config(path);
    std::shared_ptr<detail::tokenizer_data> data;
    if (std::filesystem::is_regular_file(path / "tokenizer.json")) {
        data = detail::read_tokenizer_json(json::parse_file(path / "tokenizer.json"),
                                           (path / "tokenizer.json").string());
    } else if (std::filesystem::is_regular_file(path / "vocab.txt")) {
        data = detail::read_bert_vocab(path / "vocab.txt", config);
        detail::add_folder_tokens(path, config, *data);
    } else if (std::filesystem::is_regular_file(path / "vocab.json") &&
               std::filesystem::is_regular_file(path / "merges.txt")) {
        data = detail::read_gpt2_files(path / "vocab.json", path / "merges.txt", config);
        detail::add_folder_tokens(path, config, *data);
    } else {
        throw io_error(detail::message(
            path.string(), ": no tokenizer.json, vocab.txt or vocab.json + merges.txt in this folder"));
    }
    data->model_max_length = config.model_max_length;
    if (!data->padding_id) {
        const auto pad = config.tokens.find("pad_token");
        if (pad != config.tokens.end()) data->padding_id = lookup(*data, pad->second);
    }
    return tokenizer(std::move(data));
}

ANVIL_INLINE tokenizer tokenizer::from_json(const json::value& tokenizer_json, std::string_view source) {
    return tokenizer(detail::read_tokenizer_json(tokenizer_json, source));
}

ANVIL_INLINE encoding tokenizer::encode(std::string_view text, const encode_options& options) const {
    std::vector<std::int32_t> ids = encode_text(text);
    truncate(ids, nullptr, options);
    return data().post_process.apply(ids, nullptr, options.add_special_tokens);
}

ANVIL_INLINE encoding tokenizer::encode_pair(std::string_view first, std::string_view second,
                                             const encode_options& options) const {
    std::vector<std::int32_t> a = encode_text(first), b = encode_text(second);
    truncate(a, &b, options);
    return data().post_process.apply(a, &b, options.add_special_tokens);
}

ANVIL_INLINE std::string tokenizer::decode(std::span<const std::int32_t> ids,
                                           bool skip_special_tokens) const {
    const detail::tokenizer_data& d = data();
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (const std::int32_t id : ids) {
        if (skip_special_tokens && d.special_ids.count(id)) continue;
        tokens.push_back(id_to_token(id));
    }
    if (d.decode) {
        d.decode->decode(tokens);
        std::string text;
        for (const std::string& piece : tokens)
            text += piece;
        return text;
    }
    std::string text;
    for (std::size_t i = 0; i < tokens.size(); ++i)
        text.append(i ? " " : "").append(tokens[i]);
    return text;
}

ANVIL_INLINE std::optional<std::int32_t> tokenizer::token_to_id(std::string_view token) const {
    return lookup(data(), token);
}

ANVIL_INLINE std::string tokenizer::id_to_token(std::int32_t id) const {
    const detail::tokenizer_data& d = data();
    if (d.added_vocab.has_id(id)) return d.added_vocab.tokens[static_cast<std::size_t>(id)];
    const detail::vocabulary& vocab = d.model->vocab();
    if (vocab.has_id(id)) return vocab.tokens[static_cast<std::size_t>(id)];
    throw error(detail::message(d.source, ": token id ", id, " is out of range (the vocabulary has ",
                                vocab_size(), " ids)"));
}

ANVIL_INLINE std::size_t tokenizer::vocab_size() const {
    const detail::tokenizer_data& d = data();
    return std::max(d.model->vocab().tokens.size(), d.added_vocab.tokens.size());
}

ANVIL_INLINE std::int32_t tokenizer::pad_id() const {
    const detail::tokenizer_data& d = data();
    if (d.padding_id) return *d.padding_id;
    for (const std::string_view name : {"[PAD]", "<pad>"})
        if (const auto id = lookup(d, name)) return *id;
    return 0;
}

ANVIL_INLINE std::size_t tokenizer::model_max_length() const {
    return data().model_max_length;
}

ANVIL_INLINE const detail::tokenizer_data& tokenizer::data() const {
    if (!data_) throw error("tokenizer: empty (default-constructed); use tokenizer::load or from_json");
    return *data_;
}

ANVIL_INLINE std::optional<std::int32_t> tokenizer::lookup(const detail::tokenizer_data& d,
                                                           std::string_view token) {
    if (const auto id = d.added_vocab.find(token)) return id;
    return d.model->vocab().find(token);
}

ANVIL_INLINE std::vector<std::int32_t> tokenizer::encode_text(std::string_view text) const {
    const detail::tokenizer_data& d = data();
    detail::validate_utf8(text, d.source + ": input text");
    std::vector<std::int32_t> ids;
    std::vector<detail::text_segment> raw, normalized_segments;
    d.raw_matcher.split(text, 0, text.size(), raw);
    std::string normalized;
    detail::word_list words;
    for (const detail::text_segment& segment : raw) {
        if (segment.added_id >= 0) {
            ids.push_back(segment.added_id);
            continue;
        }
        normalized.assign(text.substr(segment.begin, segment.end - segment.begin));
        if (d.normalize) d.normalize->normalize(normalized);
        normalized_segments.clear();
        d.normalized_matcher.split(normalized, 0, normalized.size(), normalized_segments);
        for (const detail::text_segment& piece : normalized_segments) {
            if (piece.added_id >= 0) {
                ids.push_back(piece.added_id);
                continue;
            }
            const std::string_view part =
                std::string_view(normalized).substr(piece.begin, piece.end - piece.begin);
            words.clear();
            if (d.pre_tokenize)
                d.pre_tokenize->pre_tokenize_part(part, segment.begin == 0 && piece.begin == 0, words);
            else
                words.add(part);
            for (std::size_t w = 0; w < words.size(); ++w)
                d.model->tokenize(words[w], ids);
        }
    }
    return ids;
}

ANVIL_INLINE void tokenizer::truncate(std::vector<std::int32_t>& first, std::vector<std::int32_t>* second,
                                      const encode_options& options) const {
    if (options.max_length == 0) return;
    const std::size_t added =
        options.add_special_tokens ? data().post_process.added_tokens(second != nullptr) : 0;
    if (options.max_length < added)
        throw error(detail::message(data().source, ": max_length ", options.max_length,
                                    " leaves no room for the ", added,
                                    " special tokens the post-processor adds"));
    detail::truncate_longest_first(first, second, options.max_length - added);
}

}  // namespace anvil
