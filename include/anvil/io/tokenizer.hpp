// anvil: text tokenizers with Hugging Face `tokenizers` semantics: BERT WordPiece, byte-level BPE (GPT-2,
// RoBERTa), read from tokenizer.json or from a model folder's vocab.txt / vocab.json + merges.txt.
//
//   const auto tok = anvil::tokenizer::load("models/all-MiniLM-L6-v2");
//   const anvil::encoding e = tok.encode("i like strawberries");   // ids {101, 1045, 2066, 13137, 20968,
//   102} const std::string text = tok.decode(e.ids);                     // "i like strawberries"
//
// Encoding runs the pipeline of tokenizer_pipeline.hpp (which the definitions include): added (special)
// tokens are split out of the raw text, the rest is normalized, pre-tokenized into words, each word becomes
// ids through the model, and the post-processor adds special tokens and type ids. A tokenizer is a cheap
// copyable value sharing its tables; it is safe to use from several threads at once.
#pragma once

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

#include "anvil/compilation.hpp"
#include "anvil/core/json_value.hpp"
#include "anvil/io/encoding.hpp"

namespace anvil::detail {

// The tables a tokenizer shares between its copies; defined in tokenizer_json.hpp.
struct tokenizer_data;

}  // namespace anvil::detail

namespace anvil {

struct encode_options {
    bool add_special_tokens = true;
    // 0: no truncation; else the result, special tokens included, has at most max_length ids (a pair is cut
    // as Hugging Face's longest_first does).
    std::size_t max_length = 0;
};

class tokenizer {
public:
    // A default-constructed tokenizer has no vocabulary; using it throws anvil::error.
    tokenizer() = default;

    // A model folder (tokenizer.json if present; else vocab.txt -> BERT WordPiece; else vocab.json +
    // merges.txt
    // -> byte-level BPE; tokenizer_config.json and special_tokens_map.json read where present), or a path to
    // a tokenizer.json file.
    [[nodiscard]] static tokenizer load(const std::filesystem::path& path);

    // source names the document in error messages (a path, "tokenizer.json").
    [[nodiscard]] static tokenizer from_json(const json::value& tokenizer_json, std::string_view source);

    [[nodiscard]] encoding encode(std::string_view text, const encode_options& options = {}) const;

    [[nodiscard]] encoding encode_pair(std::string_view first, std::string_view second,
                                       const encode_options& options = {}) const;

    // Text from ids; ids of special added tokens are left out unless skip_special_tokens is false.
    [[nodiscard]] std::string decode(std::span<const std::int32_t> ids,
                                     bool skip_special_tokens = true) const;

    [[nodiscard]] std::optional<std::int32_t> token_to_id(std::string_view token) const;

    // anvil::error for an id that names no token.
    [[nodiscard]] std::string id_to_token(std::int32_t id) const;

    // The number of ids: one past the largest id of the model's vocabulary and the added tokens.
    [[nodiscard]] std::size_t vocab_size() const;

    // The padding config's id, else the pad token of tokenizer_config.json, [PAD] or <pad>; 0 when none.
    [[nodiscard]] std::int32_t pad_id() const;

    // From tokenizer_config.json when sensible (below 1e6), else 0: unknown.
    [[nodiscard]] std::size_t model_max_length() const;

private:
    explicit tokenizer(std::shared_ptr<const detail::tokenizer_data> data) : data_(std::move(data)) {}

    [[nodiscard]] const detail::tokenizer_data& data() const;

    static std::optional<std::int32_t> lookup(const detail::tokenizer_data& d, std::string_view token);

    // Ids of one text, before post-processing.
    [[nodiscard]] std::vector<std::int32_t> encode_text(std::string_view text) const;

    void truncate(std::vector<std::int32_t>& first, std::vector<std::int32_t>* second,
                  const encode_options& options) const;

    std::shared_ptr<const detail::tokenizer_data> data_;
};

}  // namespace anvil

#if ANVIL_DEFINITIONS
#include "anvil/io/tokenizer-inl.hpp"
#endif
