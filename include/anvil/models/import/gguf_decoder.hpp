// anvil: a llama.cpp GGUF file read as the Hugging Face folder a decoder recipe loads: config.json's fields
// from the file's metadata, and its tensors under Hugging Face's names, so causal_lm loads a .gguf with the
// same code, checks and messages as a safetensors folder (one mechanism for every source).
//
// Architectures: llama (Mistral's files are llama), qwen2, qwen3 and gpt2 (whose converter stores the four
// Conv1D matrices transposed, as linear weights, and the tied head as a copy). llama.cpp's converter
// (convert_hf_to_gguf.py, LlamaModel.modify_tensors) reorders the rows of each head of attn_q and attn_k
// from Hugging Face's rotate-half pairs (i, i + D/2) to interleaved ones (2i, 2i + 1); that permutation is
// undone here. Qwen2/3 files keep Hugging Face's order (llama.cpp runs them with NeoX rotation).
//
// The file's tokenizer (tokenizer.ggml.*) and chat template come with it (io/gguf_tokenizer.hpp). Generation
// stops, as llama.cpp's does, at the EOS id, the end-of-turn / end-of-message ids the file names, and the
// control tokens llama.cpp recognises as ends of generation by their text (<|im_end|>, <|eot_id|>, ...).
//
// F32, F16 and BF16 tensors are views of the mapped file. Matrices in Q8_0, Q4_0, Q4_K and Q6_K (linear
// weights and the token embeddings) keep their blocks (tensor_view::blocks): the graph holds them as
// op::dequantize_ggml of the bytes, which the CPU GEMM reads in place (backend/cpu/gemm_rows.hpp), the CPU
// gather dequantises row by row, and the Neural Engine lowering folds into fp16. llama's permuted attn_q /
// attn_k move whole rows of blocks. The other quantised types (io/gguf.hpp) are dequantised to f32 once, at
// load.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>

#include "anvil/compilation.hpp"
#include "anvil/core/json.hpp"
#include "anvil/io/checkpoint.hpp"
#include "anvil/io/gguf.hpp"
#include "anvil/io/gguf_tokenizer.hpp"

namespace anvil::models {

struct gguf_decoder {
    json::value config;                         // what config.json would hold
    std::shared_ptr<const checkpoint> weights;  // the tensors, Hugging Face names
    std::optional<gguf_vocabulary> vocabulary;  // nullopt when the file has no tokenizer
};

// Reads `file`. unsupported_error for another architecture or what anvil does not read yet (llama3's
// rope_freqs, YaRN scaling, a partial rotary dimension), naming it; format_error for metadata or tensors
// that contradict each other.
[[nodiscard]] gguf_decoder read_gguf_decoder(const std::filesystem::path& file);

// What config.json would hold for `g` (decoder_config::from_json reads it), from its metadata and tensor
// infos alone: no tensor's data is read, so a planner sizes a model of any size at once. `tied`: whether the
// head is the token embeddings. The end-of-generation and BOS ids, which need the vocabulary, are
// read_gguf_decoder's to add. unsupported_error and format_error as read_gguf_decoder says.
[[nodiscard]] json::value gguf_decoder_config(const gguf_file& g, bool tied);

// Whether `path` names a GGUF file (by its extension, as llama.cpp's tools do).
[[nodiscard]] bool is_gguf_path(const std::filesystem::path& path);

namespace recipe_detail {

// Hugging Face's row order of one head-split projection [heads * head_dim, columns] from llama.cpp's
// interleaved one: row h*D + 2i + j of `gguf_rows` becomes row h*D + j*D/2 + i.
void unpermute_rope_rows(std::span<const float> gguf_rows, std::int64_t heads, std::int64_t columns,
                         std::span<float> out);
// The same for rows of `row_bytes` bytes each (a quantised tensor's rows of blocks).
void unpermute_rope_rows(std::span<const std::byte> gguf_rows, std::int64_t heads, std::int64_t row_bytes,
                         std::span<std::byte> out);

}  // namespace recipe_detail

}  // namespace anvil::models

#if ANVIL_DEFINITIONS
#include "anvil/models/import/gguf_decoder-inl.hpp"
#endif
