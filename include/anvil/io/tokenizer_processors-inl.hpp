// anvil: tokenizer_processors's definitions (see tokenizer_processors.hpp; compilation.hpp says when this
// file is compiled).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "anvil/io/tokenizer_pipeline.hpp"
#include "anvil/io/tokenizer_processors.hpp"

namespace anvil::detail {

ANVIL_INLINE post_processor post_processor::bert(std::int32_t cls, std::int32_t sep) {
    post_processor p;
    p.single = {{-1, {cls}, 0}, {0, {}, 0}, {-1, {sep}, 0}};
    p.pair = {{-1, {cls}, 0}, {0, {}, 0}, {-1, {sep}, 0}, {1, {}, 1}, {-1, {sep}, 1}};
    return p;
}

ANVIL_INLINE post_processor post_processor::roberta(std::int32_t cls, std::int32_t sep) {
    post_processor p;
    p.single = {{-1, {cls}, 0}, {0, {}, 0}, {-1, {sep}, 0}};
    p.pair = {{-1, {cls}, 0}, {0, {}, 0}, {-1, {sep}, 0}, {-1, {sep}, 0}, {1, {}, 0}, {-1, {sep}, 0}};
    return p;
}

ANVIL_INLINE std::size_t post_processor::added_tokens(bool is_pair) const {
    std::size_t n = 0;
    for (const template_piece& piece : is_pair ? pair : single)
        if (piece.sequence < 0) n += piece.ids.size();
    return n;
}

ANVIL_INLINE encoding post_processor::apply(const std::vector<std::int32_t>& first,
                                            const std::vector<std::int32_t>* second,
                                            bool add_special_tokens) const {
    encoding out;
    const auto append = [&out](const std::vector<std::int32_t>& ids, std::int32_t type_id,
                               std::uint8_t special) {
        out.ids.insert(out.ids.end(), ids.begin(), ids.end());
        out.type_ids.insert(out.type_ids.end(), ids.size(), type_id);
        out.special_tokens_mask.insert(out.special_tokens_mask.end(), ids.size(), special);
    };
    for (const template_piece& piece : second ? pair : single) {
        if (piece.sequence < 0) {
            if (add_special_tokens) append(piece.ids, piece.type_id, 1);
        } else {
            append(piece.sequence == 0 ? first : *second, piece.type_id, 0);
        }
    }
    return out;
}

ANVIL_INLINE void truncate_longest_first(std::vector<std::int32_t>& first, std::vector<std::int32_t>* second,
                                         std::size_t max_length) {
    if (!second) {
        if (first.size() > max_length) first.resize(max_length);
        return;
    }
    std::size_t n1 = first.size(), n2 = second->size();
    if (n1 + n2 <= max_length) return;
    const bool swapped = n1 > n2;
    if (swapped) std::swap(n1, n2);
    n2 = n1 > max_length ? n1 : std::max(n1, max_length - n1);
    if (n1 + n2 > max_length) {
        n1 = max_length / 2;
        n2 = n1 + max_length % 2;
    }
    if (swapped) std::swap(n1, n2);
    first.resize(std::min(first.size(), n1));
    second->resize(std::min(second->size(), n2));
}

}  // namespace anvil::detail
