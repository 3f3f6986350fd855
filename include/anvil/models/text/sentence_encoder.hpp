// anvil: sentence embeddings from a sentence-transformers folder (all-MiniLM-L6-v2, all-mpnet-base-v2, ...):
// a text encoder (text_encoder.hpp), then sentence-transformers' Pooling (mean, cls or max over the text's
// tokens) and, when modules.json lists it, Normalize (unit L2 norm). Pooling runs on the host over the hidden
// states the program returns, so one program per shape serves every pooling.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "anvil/compilation.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/io/tokenizer.hpp"
#include "anvil/models/common/compiled_shapes.hpp"
#include "anvil/models/text/text_encoder.hpp"

namespace anvil::models {

enum class pooling : std::uint8_t { mean, cls, max, none };

struct encode_options {
    std::optional<pooling> pool;    // default: the folder's 1_Pooling/config.json, else mean
    std::optional<bool> normalize;  // default: modules.json has a Normalize module (never for pooling none)
    std::size_t batch_size = 32;
};

namespace recipe_detail {

// The Pooling module's config: exactly one of cls, mean, max.
[[nodiscard]] pooling read_pooling_config(const std::filesystem::path& path, std::int64_t hidden);

// One text's pooled embedding from its rows [length, dim] of the batch output.
void pool_rows(const float* rows, std::int64_t length, std::int64_t dim, pooling mode, bool normalize,
               float* out);

}  // namespace recipe_detail

class sentence_encoder {
public:
    // A sentence-transformers folder (modules.json, 1_Pooling/config.json, the Transformer module's
    // config.json and weights), or a plain Hugging Face encoder folder (mean pooling, no normalisation).
    [[nodiscard]] static sentence_encoder load(const std::filesystem::path& folder,
                                               const load_options& options = {});

    // f32 [N, D] (pooling none: [S, D], the hidden states of the one text).
    [[nodiscard]] host_tensor encode(std::span<const std::string> texts, const encode_options& options = {});

    // Token ids already tokenised (with their special tokens); type ids optional (empty: zeros). Pooled: f32
    // [N, D] in the caller's order (N = 0: [0, D]). Pooling none: exactly one text, its hidden states [S, D]
    // (normalised per token only when options.normalize is true).
    [[nodiscard]] host_tensor encode_ids(std::span<const std::vector<std::int32_t>> ids,
                                         std::span<const std::vector<std::int32_t>> type_ids = {},
                                         const encode_options& options = {});

    [[nodiscard]] std::int64_t dimension() const { return encoder_.config().stack.hidden; }
    [[nodiscard]] const tokenizer& text_tokenizer() const { return encoder_.text_tokenizer(); }
    [[nodiscard]] std::size_t compiled_programs() const { return encoder_.compiled_programs(); }
    [[nodiscard]] const text_encoder_config& config() const noexcept { return encoder_.config(); }
    // The folder's defaults.
    [[nodiscard]] pooling default_pooling() const noexcept { return pool_; }
    [[nodiscard]] bool default_normalize() const noexcept { return normalize_; }
    [[nodiscard]] const text_encoder& encoder() const noexcept { return encoder_; }

    // The graph of one text of `length` tokens -> its embedding f32 [1, D], pooled (the folder's pooling,
    // over the tokens attention_mask marks) and normalised (when the folder says so) inside the graph: what
    // `anvil export` writes, so an app gets embeddings, not hidden states.
    [[nodiscard]] value build_graph(graph& g, std::int64_t length) const;

private:
    explicit sentence_encoder(text_encoder encoder) : encoder_(std::move(encoder)) {}

    text_encoder encoder_;
    pooling pool_ = pooling::mean;
    bool normalize_ = false;
};

}  // namespace anvil::models

#if ANVIL_DEFINITIONS
#include "anvil/models/text/sentence_encoder-inl.hpp"
#endif
