// anvil: model folders without a tokenizer.json, read as transformers' slow tokenizers would set them up:
// vocab.txt is BERT WordPiece ([CLS] A [SEP] B [SEP]), vocab.json + merges.txt byte-level BPE (RoBERTa's
// <s> A </s></s> B </s> when the vocabulary has <s> and </s>, else GPT-2 with no special tokens added), with
// options from tokenizer_config.json and special_tokens_map.json where present.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "anvil/compilation.hpp"
#include "anvil/core/json_value.hpp"
#include "anvil/io/tokenizer_json.hpp"
#include "anvil/io/tokenizer_pipeline.hpp"

namespace anvil::detail {

// What tokenizer_config.json and special_tokens_map.json say (the latter wins for special tokens).
struct tokenizer_config {
    std::optional<bool> do_lower_case, strip_accents, tokenize_chinese_chars, add_prefix_space;
    std::size_t model_max_length = 0;  // 0: unknown (absent, or Hugging Face's 1e30 "no limit")
    std::map<std::string, std::string, std::less<>> tokens;  // "pad_token" -> "[PAD]", ...
    std::vector<std::string> additional_special;             // additional_special_tokens
    // tokenizer_config.json's added_tokens_decoder (transformers 4.34+: id -> the AddedToken).
    std::vector<added_token> added_tokens_decoder;

    // Whether `content` is one of the special tokens (transformers' all_special_tokens).
    [[nodiscard]] bool is_special(std::string_view content) const;

    [[nodiscard]] std::string token(std::string_view key, std::string_view fallback) const {
        const auto found = tokens.find(key);
        return found != tokens.end() ? found->second : std::string(fallback);
    }
};

void read_special_tokens(const json::value& document, const json_field& root, tokenizer_config& config);

tokenizer_config read_tokenizer_config(const std::filesystem::path& folder);

std::string read_text_file(const std::filesystem::path& path);

// Calls line(number, text) for each line (1-based, '\r' before '\n' dropped; no empty line after a final
// '\n').
template <class Line>
void for_each_line(std::string_view text, Line&& line) {
    std::size_t number = 0;
    for (std::size_t begin = 0; begin < text.size();) {
        std::size_t end = text.find('\n', begin);
        if (end == std::string_view::npos) end = text.size();
        std::string_view content = text.substr(begin, end - begin);
        if (content.ends_with('\r')) content.remove_suffix(1);
        line(++number, content);
        begin = end + 1;
    }
}

// The special tokens that exist in the vocabulary, as special added tokens matched in the raw text.
std::vector<added_token> present_specials(const vocabulary& vocab, const std::vector<std::string>& names,
                                          std::string_view lstrip_token = {});

// The added tokens of a folder without tokenizer.json, as transformers' slow tokenizers load them:
// tokenizer_config.json's added_tokens_decoder, then added_tokens.json (content -> id) for what it lacks; a
// token from added_tokens.json is special when it is one of `config`'s special tokens (Whisper's language,
// task and timestamp tokens, and every token a model added). Tokens `data` already has keep their entry;
// an id given to two different tokens is a format_error naming the file.
void add_folder_tokens(const std::filesystem::path& folder, const tokenizer_config& config,
                       tokenizer_data& data);

std::shared_ptr<tokenizer_data> read_bert_vocab(const std::filesystem::path& vocab_path,
                                                const tokenizer_config& config);

std::shared_ptr<tokenizer_data> read_gpt2_files(const std::filesystem::path& vocab_path,
                                                const std::filesystem::path& merges_path,
                                                const tokenizer_config& config);

}  // namespace anvil::detail

#if ANVIL_DEFINITIONS
#include "anvil/io/tokenizer_files-inl.hpp"
#endif
