// anvil: token_stream's definitions (see token_stream.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/io/token_stream.hpp"
#include "anvil/io/tokenizer.hpp"

namespace anvil {

ANVIL_INLINE token_stream::token_stream(const tokenizer& tok, bool skip_special_tokens)
    : tokenizer_(tok), skip_special_(skip_special_tokens) {}

ANVIL_INLINE std::string token_stream::push(std::int32_t id) {
    ids_.push_back(id);
    std::string text = tokenizer_.decode(ids_, skip_special_);
    if (text.size() <= prefix_.size() || text.ends_with(replacement)) return {};
    std::string fresh = take_after_prefix(std::move(text));
    // The next window starts where the text of this step's previous window began: the decoders see the
    // same first token in both decodes, so its leading-space rule cancels out.
    const std::size_t next_prefix_index = ids_.size() - prefix_index_;
    ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_index_));
    prefix_ = tokenizer_.decode(ids_, skip_special_);
    prefix_index_ = next_prefix_index;
    return fresh;
}

ANVIL_INLINE std::string token_stream::finish() {
    std::string text = tokenizer_.decode(ids_, skip_special_);
    std::string rest = text.size() > prefix_.size() ? take_after_prefix(std::move(text)) : std::string();
    ids_.clear();
    prefix_.clear();
    prefix_index_ = 0;
    return rest;
}

ANVIL_INLINE std::string token_stream::take_after_prefix(std::string text) const {
    if (!text.starts_with(prefix_))
        throw error(detail::message(
            "token_stream: the decoded text no longer starts with the text already given out ('", prefix_,
            "'); this tokenizer's decoder is not incremental"));
    return text.substr(prefix_.size());
}

}  // namespace anvil
