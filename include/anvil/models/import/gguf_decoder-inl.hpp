// anvil: read_gguf_decoder's definitions (see gguf_decoder.hpp; compilation.hpp says when this file is
// compiled).
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
#include "anvil/models/import/gguf_decoder.hpp"

namespace anvil::models {

namespace gguf_detail {

// What keeps a GGUF checkpoint's bytes: the mapped file, and the tensors dequantised or reordered at load.
struct gguf_storage {
    explicit gguf_storage(gguf_file f) : file(std::move(f)) {}
    gguf_file file;
    std::vector<std::vector<float>> copies;
    std::vector<std::vector<std::byte>> block_copies;  // quantised tensors with their rows reordered
};

// The ggml types whose blocks the CPU GEMM reads with vector code (gemm_rows.hpp), every type anvil
// dequantises: a matrix of one of these (a linear weight, or the token embeddings, which the CPU gathers row
// by row) stays quantised in the program, and resident, as the file holds it.
[[nodiscard]] inline bool kept_quantised(ggml_type type) {
    const std::optional<ggml_type_layout> layout = ggml_layout(static_cast<std::uint32_t>(type));
    return layout && layout->dequantizes && layout->block > 1;  // F32, F16 and BF16 are read as values
}

// The architectures anvil reads from GGUF files, with the Hugging Face class each stands for.
struct known_architecture {
    std::string_view arch, architecture;
    bool permuted;  // llama.cpp reorders attn_q / attn_k for interleaved rotation
};
inline constexpr known_architecture known_architectures[] = {
    {"llama", "LlamaForCausalLM", true},
    {"qwen2", "Qwen2ForCausalLM", false},
    {"qwen3", "Qwen3ForCausalLM", false},
    {"gpt2", "GPT2LMHeadModel", false},
};

// The entry for general.architecture `arch`, or nullptr.
[[nodiscard]] inline const known_architecture* find_architecture(std::string_view arch) {
    for (const known_architecture& k : known_architectures)
        if (k.arch == arch) return &k;
    return nullptr;
}

// llama.cpp's per-layer tensor names and Hugging Face's, for the llama-style architectures.
struct layer_name {
    std::string_view gguf, hf;
};
inline constexpr layer_name layer_names[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
};

// GPT-2's (GPT2LMHeadModel: transformer.h.N...; the four matrices are Conv1D there).
inline constexpr layer_name gpt2_layer_names[] = {
    {"attn_norm.weight", "ln_1.weight"},          {"attn_norm.bias", "ln_1.bias"},
    {"attn_qkv.weight", "attn.c_attn.weight"},    {"attn_qkv.bias", "attn.c_attn.bias"},
    {"attn_output.weight", "attn.c_proj.weight"}, {"attn_output.bias", "attn.c_proj.bias"},
    {"ffn_norm.weight", "ln_2.weight"},           {"ffn_norm.bias", "ln_2.bias"},
    {"ffn_up.weight", "mlp.c_fc.weight"},         {"ffn_up.bias", "mlp.c_fc.bias"},
    {"ffn_down.weight", "mlp.c_proj.weight"},     {"ffn_down.bias", "mlp.c_proj.bias"},
};

// Hugging Face's name for llama.cpp's `name`, or "" when it is not one of the architecture's tensors.
inline std::string hf_name(std::string_view name, bool gpt2) {
    if (gpt2) {
        if (name == "token_embd.weight") return "transformer.wte.weight";
        if (name == "position_embd.weight") return "transformer.wpe.weight";
        if (name == "output_norm.weight") return "transformer.ln_f.weight";
        if (name == "output_norm.bias") return "transformer.ln_f.bias";
    } else {
        if (name == "token_embd.weight") return "model.embed_tokens.weight";
        if (name == "output_norm.weight") return "model.norm.weight";
    }
    if (name == "output.weight") return "lm_head.weight";
    if (!name.starts_with("blk.")) return {};
    const std::size_t dot = name.find('.', 4);
    if (dot == std::string_view::npos || dot == 4) return {};
    const std::string_view index = name.substr(4, dot - 4);
    for (const char c : index)
        if (c < '0' || c > '9') return {};
    const std::string_view rest = name.substr(dot + 1);
    if (gpt2) {
        for (const layer_name& entry : gpt2_layer_names)
            if (entry.gguf == rest) return detail::message("transformer.h.", index, ".", entry.hf);
        return {};
    }
    for (const layer_name& entry : layer_names)
        if (entry.gguf == rest) return detail::message("model.layers.", index, ".", entry.hf);
    return {};
}

}  // namespace gguf_detail

namespace recipe_detail {

ANVIL_INLINE void unpermute_rope_rows(std::span<const std::byte> gguf_rows, std::int64_t heads,
                                      std::int64_t row_bytes, std::span<std::byte> out) {
    const auto rows = static_cast<std::int64_t>(gguf_rows.size()) / row_bytes;
    const std::int64_t head_dim = rows / heads, half = head_dim / 2;
    const auto width = static_cast<std::size_t>(row_bytes);
    for (std::int64_t h = 0; h < heads; ++h)
        for (std::int64_t i = 0; i < half; ++i)
            for (std::int64_t j = 0; j < 2; ++j) {
                const auto from = static_cast<std::size_t>(h * head_dim + 2 * i + j) * width;
                const auto to = static_cast<std::size_t>(h * head_dim + j * half + i) * width;
                std::copy_n(gguf_rows.begin() + static_cast<std::ptrdiff_t>(from), width,
                            out.begin() + static_cast<std::ptrdiff_t>(to));
            }
}

ANVIL_INLINE void unpermute_rope_rows(std::span<const float> gguf_rows, std::int64_t heads,
                                      std::int64_t columns, std::span<float> out) {
    unpermute_rope_rows(std::as_bytes(gguf_rows), heads, columns * static_cast<std::int64_t>(sizeof(float)),
                        std::as_writable_bytes(out));
}

}  // namespace recipe_detail

namespace gguf_detail {

ANVIL_INLINE json::value end_of_generation_ids(const gguf_file& g, bool has_vocabulary) {
    json::array ids;
    const auto add = [&](std::int64_t id) {
        if (std::ranges::find(ids, json::value(id)) == ids.end()) ids.push_back(json::value(id));
    };
    for (const std::string_view key :
         {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"})
        if (g.find(key) != nullptr) add(g.integer(key));
    if (has_vocabulary) {  // llama.cpp's llama_vocab::load marks these texts as ends of generation
        static constexpr std::string_view ends[] = {
            "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",   "<|endoftext|>",
            "<|eom_id|>", "<EOT>",      "_<EOT>",  "<|end_of_text|>", "<end_of_utterance>",
        };
        const gguf_value& tokens = g.array("tokenizer.ggml.tokens");
        for (std::size_t i = 0; i < tokens.size(); ++i)
            if (std::ranges::find(ends, tokens.strings()[i]) != std::end(ends))
                add(static_cast<std::int64_t>(i));
    }
    if (ids.empty()) return json::value(nullptr);
    return json::value(std::move(ids));
}

}  // namespace gguf_detail

ANVIL_INLINE bool is_gguf_path(const std::filesystem::path& path) {
    return path.extension() == ".gguf";
}

ANVIL_INLINE json::value gguf_decoder_config(const gguf_file& g, bool tied) {
    using anvil::detail::message;
    const std::string source(g.source_name());
    const std::string& arch = g.string("general.architecture");
    const gguf_detail::known_architecture* kind = gguf_detail::find_architecture(arch);
    if (kind == nullptr) {
        throw unsupported_error(
            message(source, ": general.architecture '", arch,
                    "' is not supported (anvil reads llama, qwen2, qwen3 and gpt2 GGUF files)"));
    }
    const bool gpt2 = arch == "gpt2";  // learned positions, LayerNorm with biases, fused Conv1D attention
    const auto key = [&](std::string_view name) { return message(arch, ".", name); };
    const auto integer_or = [&](std::string_view name, std::optional<std::int64_t> fallback) -> std::int64_t {
        const std::string k = key(name);
        if (g.find(k) == nullptr) {
            if (!fallback) throw format_error(message(source, ": the metadata key '", k, "' is missing"));
            return *fallback;
        }
        return g.integer(k);
    };
    const std::int64_t hidden = integer_or("embedding_length", std::nullopt);
    const std::int64_t heads = integer_or("attention.head_count", std::nullopt);
    const std::int64_t kv_heads = integer_or("attention.head_count_kv", heads);
    if (heads < 1 || kv_heads < 1 || hidden < 1) {
        throw format_error(message(source, ": ", key("embedding_length"), " ", hidden, ", ",
                                   key("attention.head_count"), " ", heads, " and ",
                                   key("attention.head_count_kv"), " ", kv_heads, " must be positive"));
    }
    const std::int64_t head_dim = integer_or("attention.key_length", hidden / heads);
    if (const std::int64_t rotary = gpt2 ? head_dim : integer_or("rope.dimension_count", head_dim);
        rotary != head_dim) {
        throw unsupported_error(message(source, ": ", key("rope.dimension_count"), " ", rotary,
                                        " rotates part of each head of ", head_dim, " (not supported)"));
    }
    if (g.find_tensor("rope_freqs.weight") != nullptr) {
        throw unsupported_error(message(source,
                                        ": rope_freqs.weight (llama3 RoPE scaling as llama.cpp stores it) "
                                        "is not supported yet"));
    }

    json::object config;
    config["model_type"] = json::value(std::string(arch));
    config["architectures"] = json::value(json::array{json::value(std::string(kind->architecture))});
    if (const gguf_tensor* embeddings = g.find_tensor("token_embd.weight"); embeddings != nullptr)
        config["vocab_size"] = json::value(embeddings->shape().front());
    config["tie_word_embeddings"] = json::value(tied);
    if (gpt2) {
        config["n_embd"] = json::value(hidden);
        config["n_layer"] = json::value(integer_or("block_count", std::nullopt));
        config["n_head"] = json::value(heads);
        config["n_inner"] = json::value(integer_or("feed_forward_length", std::nullopt));
        config["n_positions"] = json::value(integer_or("context_length", std::nullopt));
        config["layer_norm_epsilon"] = json::value(g.number(key("attention.layer_norm_epsilon")));
        config["activation_function"] = json::value("gelu_new");  // llama.cpp's GELU is the tanh form
    }
    config["hidden_size"] = json::value(hidden);
    if (!gpt2) {
        config["intermediate_size"] = json::value(integer_or("feed_forward_length", std::nullopt));
        config["num_hidden_layers"] = json::value(integer_or("block_count", std::nullopt));
        config["num_attention_heads"] = json::value(heads);
        config["num_key_value_heads"] = json::value(kv_heads);
        config["head_dim"] = json::value(head_dim);
        config["max_position_embeddings"] = json::value(integer_or("context_length", std::nullopt));
        config["rms_norm_eps"] = json::value(g.number(key("attention.layer_norm_rms_epsilon")));
        config["rope_theta"] =
            json::value(g.find(key("rope.freq_base")) ? g.number(key("rope.freq_base")) : 10000.0);
        config["hidden_act"] = json::value("silu");
        if (const gguf_value* scaling = g.find(key("rope.scaling.type")); scaling != nullptr) {
            const std::string* type = scaling->string();
            if (type == nullptr)
                throw format_error(message(source, ": ", key("rope.scaling.type"), " is not a string"));
            if (*type == "linear") {
                json::object rope;
                rope["type"] = json::value("linear");
                rope["factor"] = json::value(g.number(key("rope.scaling.factor")));
                config["rope_scaling"] = json::value(std::move(rope));
            } else if (*type != "none") {
                throw unsupported_error(message(source, ": ", key("rope.scaling.type"), " '", *type,
                                                "' is not supported (none, linear)"));
            }
        }
    }
    config["attention_bias"] = json::value(g.find_tensor("blk.0.attn_q.bias") != nullptr);

    // What every layer needs, named as the file names it (the loader would name Hugging Face's tensors).
    const std::int64_t layers = integer_or("block_count", std::nullopt);
    std::vector<std::string> missing;
    const std::vector<const char*> model_parts =
        gpt2 ? std::vector<const char*>{"token_embd.weight", "position_embd.weight", "output_norm.weight"}
             : std::vector<const char*>{"token_embd.weight", "output_norm.weight"};
    const std::vector<const char*> layer_parts =
        gpt2 ? std::vector<const char*>{"attn_norm", "attn_qkv", "attn_output",
                                        "ffn_norm",  "ffn_up",   "ffn_down"}
             : std::vector<const char*>{"attn_norm", "attn_q",   "attn_k", "attn_v",  "attn_output",
                                        "ffn_norm",  "ffn_gate", "ffn_up", "ffn_down"};
    for (const char* name : model_parts)
        if (g.find_tensor(name) == nullptr) missing.emplace_back(name);
    for (std::int64_t i = 0; i < layers && missing.size() < 8; ++i) {
        for (const char* part : layer_parts) {
            std::string name = message("blk.", i, ".", part, ".weight");
            if (g.find_tensor(name) == nullptr) missing.push_back(std::move(name));
        }
    }
    if (!missing.empty()) {
        std::string list;
        for (const std::string& name : missing)
            list += (list.empty() ? "" : ", ") + name;
        throw format_error(
            message(source, ": a ", arch, " model of ", layers, " blocks needs tensors it lacks: ", list));
    }
    return json::value(std::move(config));
}

ANVIL_INLINE gguf_decoder read_gguf_decoder(const std::filesystem::path& file) {
    using anvil::detail::message;
    auto storage = std::make_shared<gguf_detail::gguf_storage>(gguf_file::open(file));
    const gguf_file& g = storage->file;
    const std::string source = file.string();
    const gguf_tensor* embeddings = g.find_tensor("token_embd.weight");
    const gguf_tensor* head = g.find_tensor("output.weight");
    // llama.cpp's converter writes GPT-2's tied head out as a copy of the embeddings.
    const bool tied =
        head == nullptr || (embeddings != nullptr && head->type == embeddings->type &&
                            head->ne == embeddings->ne && std::ranges::equal(head->bytes, embeddings->bytes));
    json::value config_value = gguf_decoder_config(g, tied);
    json::object& config = config_value.as_object();
    std::optional<gguf_vocabulary> vocabulary = read_gguf_vocabulary(g);
    if (g.find("tokenizer.ggml.bos_token_id") != nullptr)
        config["bos_token_id"] = json::value(g.integer("tokenizer.ggml.bos_token_id"));
    config["eos_token_id"] = gguf_detail::end_of_generation_ids(g, vocabulary.has_value());
    // gguf_decoder_config checked the architecture and the head counts.
    const gguf_detail::known_architecture* kind =
        gguf_detail::find_architecture(g.string("general.architecture"));
    const bool gpt2 = kind->arch == "gpt2";
    const std::int64_t heads = config.find(gpt2 ? "n_head" : "num_attention_heads")->as_int();
    const std::int64_t kv_heads = gpt2 ? heads : config.find("num_key_value_heads")->as_int();

    std::vector<checkpoint_tensor> tensors;
    for (const gguf_tensor& t : g.tensors()) {
        if (tied && t.name == "output.weight") continue;  // a copy of the embeddings (GPT-2's converter)
        std::string name = gguf_detail::hf_name(t.name, gpt2);
        if (name.empty())
            throw unsupported_error(
                message(source, ": tensor '", t.name, "' is not one of a ", kind->arch, " model's"));
        std::vector<std::int64_t> shape = t.shape();
        const bool permute = kind->permuted && shape.size() == 2 &&
                             (t.name.ends_with(".attn_q.weight") || t.name.ends_with(".attn_k.weight"));
        const std::int64_t split = t.name.ends_with(".attn_q.weight") ? heads : kv_heads;
        if (permute && (shape[0] % split != 0 || (shape[0] / split) % 2 != 0)) {
            throw format_error(message(source, ": tensor '", t.name, "' has ", shape[0], " rows, not ", split,
                                       " heads of an even size"));
        }
        const auto type = static_cast<ggml_type>(t.type);
        const std::optional<dtype> direct = type == ggml_type::F32    ? std::optional<dtype>(dtype::f32)
                                            : type == ggml_type::F16  ? std::optional<dtype>(dtype::f16)
                                            : type == ggml_type::BF16 ? std::optional<dtype>(dtype::bf16)
                                                                      : std::nullopt;
        // A linear weight of a type the GEMM reads keeps its blocks, and so do the token embeddings (a gather
        // dequantises the rows it reads, and a tied head multiplies the blocks).
        const bool linear_weight =
            shape.size() == 2 &&
            (t.name.starts_with("blk.") || t.name == "output.weight" || t.name == "token_embd.weight");
        const bool blocks = gguf_detail::kept_quantised(type) && linear_weight;
        std::span<const std::byte> bytes = t.bytes;
        dtype stored = direct.value_or(dtype::f32);
        if (!direct && !blocks) {
            storage->copies.push_back(t.to_f32());  // unsupported_error naming a type without a dequantiser
            bytes = std::as_bytes(std::span<const float>(storage->copies.back()));
        }
        if (permute) {
            // Whole rows move, whatever they hold (values or blocks).
            std::vector<std::byte> ordered(bytes.size());
            recipe_detail::unpermute_rope_rows(bytes, split,
                                               static_cast<std::int64_t>(bytes.size()) / shape[0], ordered);
            storage->block_copies.push_back(std::move(ordered));
            bytes = storage->block_copies.back();
        }
        const std::optional<ggml_type> kept = blocks ? std::optional<ggml_type>(type) : std::nullopt;
        // GPT-2's four matrices are linear weights [out, in] in the file, as anvil's GPT-2 reads them once
        // split (Hugging Face's Conv1D [in, out] is transposed at load, llm/decoder_lm.hpp): the fused q/k/v
        // matrix and bias go in as the three pieces, views of their rows, and nothing is transposed.
        if (gpt2 && (t.name.ends_with(".attn_qkv.weight") || t.name.ends_with(".attn_qkv.bias"))) {
            if (shape[0] % 3 != 0) {
                throw format_error(message(source, ": tensor '", t.name, "' has ", shape[0],
                                           " rows, not three equal parts (q, k and v)"));
            }
            const std::string stem = name.substr(0, name.rfind("c_attn."));  // "transformer.h.N.attn."
            const std::string suffix = t.name.ends_with(".bias") ? ".bias" : ".weight";
            std::vector<std::int64_t> part_shape = shape;
            part_shape[0] /= 3;
            const std::size_t part_bytes = bytes.size() / 3;
            for (std::size_t piece = 0; piece < 3; ++piece) {
                tensors.push_back({stem + "qkv"[piece] + suffix, stored, part_shape,
                                   bytes.subspan(piece * part_bytes, part_bytes), kept});
            }
            continue;
        }
        tensors.push_back({std::move(name), stored, std::move(shape), bytes, kept});
    }
    auto weights =
        std::make_shared<const checkpoint>(checkpoint::from_tensors(source, std::move(tensors), storage));
    return {std::move(config_value), std::move(weights), std::move(vocabulary)};
}

}  // namespace anvil::models
