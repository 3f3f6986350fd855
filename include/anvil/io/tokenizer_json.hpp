// anvil: reading a Hugging Face tokenizer.json into a pipeline (tokenizer_pipeline.hpp). Each component is
// chosen by its "type"; a type Hugging Face has but anvil does not (yet) is an anvil::unsupported_error
// naming it, anything malformed an anvil::format_error naming the source and the field
// ("tokenizer.json: model.merges[3]: token 'ab' is not in the vocabulary").
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

#include "anvil/compilation.hpp"
#include "anvil/core/json_value.hpp"
#include "anvil/io/byte_level_bpe.hpp"
#include "anvil/io/tokenizer_pipeline.hpp"
#include "anvil/io/tokenizer_pre_tokenizers.hpp"
#include "anvil/io/tokenizer_processors.hpp"

namespace anvil::detail {

// Everything a tokenizer is: what tokenizer.json (or the legacy files) describe, ready to run.
struct tokenizer_data {
    std::string source;  // for messages
    std::unique_ptr<normalizer> normalize;
    std::unique_ptr<pre_tokenizer> pre_tokenize;
    std::unique_ptr<tokenizer_model> model;
    post_processor post_process;
    std::unique_ptr<decoder> decode;  // null: tokens joined with spaces, as Hugging Face does
    std::vector<added_token> added;
    vocabulary added_vocab;
    std::unordered_set<std::int32_t> special_ids;
    added_token_matcher raw_matcher;         // special and normalized:false tokens, in the raw text
    added_token_matcher normalized_matcher;  // normalized:true tokens, in normalized text
    std::optional<std::int32_t> padding_id;
    std::size_t model_max_length = 0;

    [[nodiscard]] bool has_id(std::int32_t id) const {
        return added_vocab.has_id(id) || model->vocab().has_id(id);
    }

    // Registers the added tokens (after normalize is set: normalized tokens are matched normalized).
    void add_tokens(std::vector<added_token> tokens);
};

// A place in the document for messages: "tokenizer.json: model.vocab".
struct json_field {
    std::string_view source;
    std::string path;

    [[nodiscard]] json_field operator/(std::string_view key) const {
        return {source, path.empty() ? std::string(key) : path + "." + std::string(key)};
    }
    [[nodiscard]] json_field operator[](std::size_t index) const;
    [[noreturn]] void fail(std::string_view what) const;
    [[noreturn]] void unsupported(std::string_view component, std::string_view type,
                                  std::string_view supported) const;
    const json::value& expect(const json::value& v, json::kind kind) const;
};

// The member, or nullptr when absent or null.
const json::value* member(const json::value& object, std::string_view key);
const json::value& required(const json::value& object, std::string_view key, const json_field& where);
bool read_bool(const json::value& object, std::string_view key, const json_field& where, bool fallback);
std::string read_string(const json::value& object, std::string_view key, const json_field& where,
                        std::string fallback);
// A token id: an integer in [0, limit).
std::int32_t read_id(const json::value& v, const json_field& where, std::int64_t limit);
std::string_view type_of(const json::value& component, const json_field& where);

// Ids may leave holes but not run far past the number of tokens (a huge id would be a huge table).
std::int64_t id_limit(std::size_t tokens);

vocabulary read_vocab(const json::value& v, const json_field& where, std::size_t extra_tokens);

std::unique_ptr<normalizer> read_normalizer(const json::value& n, const json_field& where);

// Metaspace's replacement: one code point (U+2581 by default).
std::string read_replacement(const json::value& c, const json_field& where);

// prepend_scheme, or for files written before it the boolean add_prefix_space.
prepend_scheme read_prepend_scheme(const json::value& c, const json_field& where);

std::unique_ptr<pre_tokenizer> read_split(const json::value& p, const json_field& where);

std::unique_ptr<pre_tokenizer> read_pre_tokenizer(const json::value& p, const json_field& where);

std::unique_ptr<tokenizer_model> read_wordpiece(const json::value& m, const json_field& where,
                                                std::size_t added_count);

// Records merge a + b at rank; a message when a, b or the merged token is not in the vocabulary. A merge
// listed again takes the later rank, as Hugging Face's map does.
std::string add_merge(std::unordered_map<std::uint64_t, bpe_model::merge>& merges, const vocabulary& vocab,
                      std::string_view a, std::string_view b, std::int32_t rank, std::string_view prefix);

// merges: "a b" strings (older files) or ["a", "b"] pairs (tokenizers >= 0.20). The merged token is a
// followed by b without its continuing prefix, and all three must be in the vocabulary.
std::unordered_map<std::uint64_t, bpe_model::merge> read_merges(const json::array& items,
                                                                const json_field& where,
                                                                const vocabulary& vocab,
                                                                std::string_view prefix);

std::unique_ptr<tokenizer_model> read_bpe(const json::value& m, const json_field& where,
                                          std::size_t added_count);

std::unique_ptr<tokenizer_model> read_model(const json::value& m, const json_field& where,
                                            std::size_t added_count);

// [token, id] as BertProcessing and RobertaProcessing write cls and sep.
std::int32_t read_token_pair(const json::value& p, std::string_view key, const json_field& where,
                             std::int64_t limit);

std::vector<template_piece> read_template(const json::value& list, const json_field& where,
                                          const json::value* specials, const json_field& specials_field,
                                          std::int64_t limit);

post_processor read_post_processor(const json::value& p, const json_field& where, std::int64_t limit);

class sequence_decoder final : public decoder {
public:
    explicit sequence_decoder(std::vector<std::unique_ptr<decoder>> stages) : stages_(std::move(stages)) {}
    void decode(std::vector<std::string>& tokens) const override {
        for (const auto& stage : stages_)
            stage->decode(tokens);
    }

private:
    std::vector<std::unique_ptr<decoder>> stages_;
};

std::unique_ptr<decoder> read_decoder(const json::value& d, const json_field& where);

// One serialized AddedToken (content and flags; normalized defaults to !special, as in tokenizers) with `id`.
added_token read_added_token(const json::value& token, const json_field& where, std::int32_t id);
std::vector<added_token> read_added_tokens(const json::value& list, const json_field& where);

std::shared_ptr<tokenizer_data> read_tokenizer_json(const json::value& document, std::string_view source);

}  // namespace anvil::detail

#if ANVIL_DEFINITIONS
#include "anvil/io/tokenizer_json-inl.hpp"
#endif
