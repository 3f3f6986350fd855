// anvil: a GGUF file's tokenizer (its tokenizer.ggml.* metadata) as the tokenizer.json Hugging Face's
// `tokenizers` would hold for it, so that tokenizer::from_json builds it: one tokenizer implementation for
// both sources, with llama.cpp's semantics where the two libraries differ.
//
//   tokenizer.ggml.model "gpt2" (byte-level BPE): tokens and merges as written, a pre-tokenizer regex chosen
//   by
//     tokenizer.ggml.pre ("gpt-2", "llama-bpe" / "llama3", "qwen2"; llama.cpp's llama-vocab.cpp names them),
//     merges ignored for whole words in Llama-3's files (llama.cpp sets ignore_merges for them, as their
//     tokenizer.json does). No NFC normaliser for Qwen2: llama.cpp applies none.
//   tokenizer.ggml.model "llama" (SentencePiece BPE): llama.cpp merges the adjacent pair whose concatenation
//     is a piece of the highest score. That is a BPE whose merge list is every (left, right) split of every
//     piece, ranked by the piece's score (highest first), which is how Hugging Face's converter
//     (SentencePieceExtractor) writes Llama's tokenizer.json; ties of equal score go by piece id, then by the
//     ids of the halves (llama.cpp breaks them by position, so pieces of equal score could differ; real
//     SentencePiece vocabularies score every piece differently). Spaces become U+2581 with one prepended
//     (tokenizer.ggml.add_space_prefix, default true), characters with no piece fall back to <0xXX> bytes.
//   Token types (tokenizer.ggml.token_type, llama.cpp's llama_token_type): control and unknown tokens become
//     special added tokens, user-defined ones plain added tokens; all are split out of the text before
//     tokenizing (llama.cpp does that for control tokens when asked to parse specials, as generate does).
//   tokenizer.ggml.add_bos_token / add_eos_token as llama.cpp defaults them: a BOS for SentencePiece and
//     Llama-3 files, none for other BPE files.
// Other tokenizer models (bert, t5, rwkv, ...) and pre-tokenizers are an unsupported_error naming the key and
// its value; a malformed or inconsistent vocabulary is a format_error naming the key.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "anvil/compilation.hpp"
#include "anvil/core/json_value.hpp"
#include "anvil/io/gguf.hpp"

namespace anvil {

struct gguf_vocabulary {
    json::value tokenizer_json;        // the tokenizer.json document tokenizer::from_json reads
    std::string model;                 // tokenizer.ggml.model: "gpt2" or "llama"
    std::string pre;                   // tokenizer.ggml.pre (gpt2 files), empty for SentencePiece
    std::size_t tokens = 0;            // the vocabulary's size
    std::string bos_token, eos_token;  // their text, empty when the file names no id
    std::string chat_template;         // tokenizer.chat_template (Jinja source), empty when absent
};

// The file's tokenizer, or nullopt when it has none (no tokenizer.ggml.model, or llama.cpp's "none" /
// "no_vocab").
[[nodiscard]] std::optional<gguf_vocabulary> read_gguf_vocabulary(const gguf_file& file);

}  // namespace anvil

#if ANVIL_DEFINITIONS
#include "anvil/io/gguf_tokenizer-inl.hpp"
#endif
