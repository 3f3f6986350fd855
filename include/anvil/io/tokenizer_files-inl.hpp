// anvil: tokenizer_files's definitions (see tokenizer_files.hpp; compilation.hpp says when this file is
// compiled).
#pragma once

#include <algorithm>
#include <charconv>
#include <climits>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/core/json.hpp"
#include "anvil/io/byte_level_bpe.hpp"
#include "anvil/io/tokenizer_files.hpp"
#include "anvil/io/tokenizer_json.hpp"
#include "anvil/io/tokenizer_normalizers.hpp"
#include "anvil/io/tokenizer_pre_tokenizers.hpp"
#include "anvil/io/wordpiece.hpp"

namespace anvil::detail {

ANVIL_INLINE void read_special_tokens(const json::value& document, const json_field& root,
                                      tokenizer_config& config) {
    for (const std::string_view key :
         {"pad_token", "unk_token", "cls_token", "sep_token", "mask_token", "bos_token", "eos_token"}) {
        const json::value* v = member(document, key);
        if (!v) continue;
        if (v->is_string()) {
            config.tokens[std::string(key)] = v->as_string();
        } else if (v->is_object()) {  // a serialized AddedToken
            config.tokens[std::string(key)] =
                (root / key / "content")
                    .expect(required(*v, "content", root / key), json::kind::string)
                    .as_string();
        } else {
            (root / key).fail("expected a string or an object with \"content\"");
        }
    }
}

ANVIL_INLINE bool tokenizer_config::is_special(std::string_view content) const {
    for (const auto& [key, token] : tokens)
        if (token == content) return true;
    return std::find(additional_special.begin(), additional_special.end(), content) !=
           additional_special.end();
}

// additional_special_tokens: strings, or serialized AddedTokens with a "content".
ANVIL_INLINE void read_additional_special(const json::value& document, const json_field& root,
                                          tokenizer_config& config) {
    const json::value* list = member(document, "additional_special_tokens");
    if (!list) return;
    const json_field field = root / "additional_special_tokens";
    const json::array& items = field.expect(*list, json::kind::array).as_array();
    config.additional_special.clear();  // special_tokens_map.json's list replaces tokenizer_config.json's
    for (std::size_t i = 0; i < items.size(); ++i) {
        const json::value& item = items[i];
        if (item.is_string()) {
            config.additional_special.push_back(item.as_string());
        } else if (item.is_object()) {
            config.additional_special.push_back(
                (field[i] / "content")
                    .expect(required(item, "content", field[i]), json::kind::string)
                    .as_string());
        } else {
            field[i].fail("expected a string or an object with \"content\"");
        }
    }
}

ANVIL_INLINE tokenizer_config read_tokenizer_config(const std::filesystem::path& folder) {
    tokenizer_config config;
    const std::filesystem::path config_path = folder / "tokenizer_config.json";
    if (std::filesystem::is_regular_file(config_path)) {
        const std::string name = config_path.string();
        const json::value document = json::parse_file(config_path);
        const json_field root{name, ""};
        root.expect(document, json::kind::object);
        const auto flag = [&](std::string_view key, std::optional<bool>& out) {
            if (const json::value* v = member(document, key))
                out = (root / key).expect(*v, json::kind::boolean).as_bool();
        };
        flag("do_lower_case", config.do_lower_case);
        flag("strip_accents", config.strip_accents);
        flag("tokenize_chinese_chars", config.tokenize_chinese_chars);
        flag("add_prefix_space", config.add_prefix_space);
        if (const json::value* v = member(document, "model_max_length")) {
            if (!v->is_number()) (root / "model_max_length").fail("expected a number");
            const double length = v->as_double();
            if (length >= 1 && length < 1e6) config.model_max_length = static_cast<std::size_t>(length);
        }
        read_special_tokens(document, root, config);
        read_additional_special(document, root, config);
        if (const json::value* decoder = member(document, "added_tokens_decoder")) {
            const json_field field = root / "added_tokens_decoder";
            for (const auto& [key, entry] : field.expect(*decoder, json::kind::object).as_object()) {
                const json_field at = field / key;
                std::int64_t id = -1;
                const auto [end, problem] = std::from_chars(key.data(), key.data() + key.size(), id);
                if (problem != std::errc{} || end != key.data() + key.size() || id < 0 || id > INT32_MAX)
                    at.fail("expected a token id (a non-negative integer) as the key");
                config.added_tokens_decoder.push_back(
                    read_added_token(entry, at, static_cast<std::int32_t>(id)));
            }
        }
    }
    const std::filesystem::path map_path = folder / "special_tokens_map.json";
    if (std::filesystem::is_regular_file(map_path)) {
        const json::value document = json::parse_file(map_path);
        const std::string name = map_path.string();
        const json_field root{name, ""};
        root.expect(document, json::kind::object);
        read_special_tokens(document, root, config);
        read_additional_special(document, root, config);
    }
    return config;
}

ANVIL_INLINE void add_folder_tokens(const std::filesystem::path& folder, const tokenizer_config& config,
                                    tokenizer_data& data) {
    std::vector<added_token> tokens = config.added_tokens_decoder;
    const std::filesystem::path path = folder / "added_tokens.json";
    const std::string name = path.string();
    if (std::filesystem::is_regular_file(path)) {
        const json::value document = json::parse_file(path);
        const json_field root{name, ""};
        for (const auto& entry : root.expect(document, json::kind::object).as_object()) {
            const std::string& content = entry.first;
            const json::value& id = entry.second;
            if (content.empty()) root.fail("an empty token");
            const bool listed = std::any_of(tokens.begin(), tokens.end(),
                                            [&](const added_token& t) { return t.content == content; });
            if (listed) continue;  // added_tokens_decoder describes it already
            added_token token;
            token.content = content;
            token.id = read_id(id, root / content, std::int64_t{1} << 31);
            token.special = config.is_special(content);
            token.normalized = !token.special;  // transformers' AddedToken(normalized=not special)
            tokens.push_back(std::move(token));
        }
    }
    std::vector<added_token> fresh;
    for (added_token& token : tokens) {
        if (const auto existing = data.added_vocab.find(token.content)) {
            if (*existing != token.id)
                throw format_error(message(name, ": '", token.content, "' is id ", token.id, " here but ",
                                           *existing, " in the vocabulary"));
            if (token.special) data.special_ids.insert(token.id);
            continue;
        }
        for (const added_token& other : tokens)
            if (other.id == token.id && other.content != token.content)
                throw format_error(message(name, ": id ", token.id, " is given to both '", token.content,
                                           "' and '", other.content, "'"));
        fresh.push_back(std::move(token));
    }
    data.add_tokens(std::move(fresh));
}

ANVIL_INLINE std::string read_text_file(const std::filesystem::path& path) {
    const std::string name = path.string();
    const std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(name.c_str(), "rb"), &std::fclose);
    if (!file) throw io_error(message(name, ": cannot open: ", std::generic_category().message(errno)));
    std::string text;
    char buffer[1 << 16];
    for (std::size_t got = sizeof buffer; got == sizeof buffer;) {
        got = std::fread(buffer, 1, sizeof buffer, file.get());
        text.append(buffer, got);
    }
    if (std::ferror(file.get())) throw io_error(message(name, ": cannot read"));
    validate_utf8(text, name);
    return text;
}

ANVIL_INLINE std::vector<added_token> present_specials(const vocabulary& vocab,
                                                       const std::vector<std::string>& names,
                                                       std::string_view lstrip_token) {
    std::vector<added_token> tokens;
    for (const std::string& name : names) {
        const auto id = vocab.find(name);
        bool listed = false;
        for (const added_token& t : tokens)
            listed = listed || t.content == name;
        if (!id || listed) continue;
        added_token token;
        token.content = name;
        token.id = *id;
        token.special = true;
        token.lstrip = name == lstrip_token;
        tokens.push_back(std::move(token));
    }
    return tokens;
}

ANVIL_INLINE std::shared_ptr<tokenizer_data> read_bert_vocab(const std::filesystem::path& vocab_path,
                                                             const tokenizer_config& config) {
    const std::string name = vocab_path.string();
    const std::string text = read_text_file(vocab_path);
    vocabulary vocab;
    for_each_line(text, [&](std::size_t number, std::string_view token) {
        const auto id = static_cast<std::int32_t>(number - 1);
        vocab.tokens.emplace_back(token);
        vocab.present.push_back(1);
        vocab.ids.insert_or_assign(std::string(token), id);  // a repeated token: the later line wins, as in
    });                                                      // transformers' load_vocab
    auto data = std::make_shared<tokenizer_data>();
    data->source = name;
    const bool lowercase = config.do_lower_case.value_or(true);
    data->normalize = std::make_unique<bert_normalizer>(true, config.tokenize_chinese_chars.value_or(true),
                                                        config.strip_accents.value_or(lowercase), lowercase);
    data->pre_tokenize = std::make_unique<bert_pre_tokenizer>();
    const std::string unk = config.token("unk_token", "[UNK]"), cls = config.token("cls_token", "[CLS]"),
                      sep = config.token("sep_token", "[SEP]");
    const auto unk_id = vocab.find(unk), cls_id = vocab.find(cls), sep_id = vocab.find(sep);
    if (!unk_id)
        throw format_error(message(name, ": the unknown token '", unk, "' is not in the vocabulary"));
    if (cls_id && sep_id) data->post_process = post_processor::bert(*cls_id, *sep_id);
    const std::vector<added_token> specials = present_specials(
        vocab, {config.token("pad_token", "[PAD]"), unk, cls, sep, config.token("mask_token", "[MASK]")});
    data->model = std::make_unique<wordpiece_model>(std::move(vocab), *unk_id, "##", 100);
    data->decode = std::make_unique<wordpiece_decoder>("##", true);
    data->add_tokens(specials);
    return data;
}

ANVIL_INLINE std::shared_ptr<tokenizer_data> read_gpt2_files(const std::filesystem::path& vocab_path,
                                                             const std::filesystem::path& merges_path,
                                                             const tokenizer_config& config) {
    const std::string vocab_name = vocab_path.string(), merges_name = merges_path.string();
    vocabulary vocab = read_vocab(json::parse_file(vocab_path), json_field{vocab_name, ""}, 0);
    const std::string merges_text = read_text_file(merges_path);
    std::unordered_map<std::uint64_t, bpe_model::merge> merges;
    std::int32_t rank = 0;
    for_each_line(merges_text, [&](std::size_t number, std::string_view line) {
        if (line.empty() || line.starts_with("#version")) return;
        const std::size_t space = line.find(' ');
        if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos)
            throw format_error(message(merges_name, ": line ", number,
                                       ": expected two tokens separated by one space, got '", line, "'"));
        const std::string problem =
            add_merge(merges, vocab, line.substr(0, space), line.substr(space + 1), rank++, "");
        if (!problem.empty()) throw format_error(message(merges_name, ": line ", number, ": ", problem));
    });
    auto data = std::make_shared<tokenizer_data>();
    data->source = vocab_name;
    const bool roberta = vocab.find("<s>") && vocab.find("</s>");
    std::vector<added_token> specials;
    if (roberta) {
        data->post_process = post_processor::roberta(*vocab.find("<s>"), *vocab.find("</s>"));
        specials = present_specials(vocab, {"<s>", "<pad>", "</s>", "<unk>", "<mask>"}, "<mask>");
    } else {
        specials = present_specials(vocab, {"<|endoftext|>"});
    }
    data->pre_tokenize =
        std::make_unique<byte_level_pre_tokenizer>(config.add_prefix_space.value_or(false), true);
    data->model = std::make_unique<bpe_model>(std::move(vocab), std::move(merges), bpe_options{});
    data->decode = std::make_unique<byte_level_decoder>();
    data->add_tokens(specials);
    return data;
}

}  // namespace anvil::detail
