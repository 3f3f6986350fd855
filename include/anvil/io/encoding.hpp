// anvil: what a tokenizer's encode() returns. Its own header so that tokenizer.hpp declares the tokenizer
// without the pipeline's internals (tokenizer_pipeline.hpp), which only its definitions use.
#pragma once

#include <cstdint>
#include <vector>

namespace anvil {

// What encode() returns, as Hugging Face's `tokenizer(text)` gives it.
struct encoding {
    std::vector<std::int32_t> ids;
    std::vector<std::int32_t> type_ids;             // 0 for the first text and its specials, 1 for the second
    std::vector<std::uint8_t> special_tokens_mask;  // 1 where the post-processor added a special token
};

}  // namespace anvil
