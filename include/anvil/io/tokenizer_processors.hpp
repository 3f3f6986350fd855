// anvil: post-processing (special tokens and token type ids around one or two sequences) and truncation.
// Every post-processor anvil reads reduces to a template, as Hugging Face's TemplateProcessing writes it:
//   BertProcessing      [CLS] A [SEP]            [CLS] A [SEP] B:1 [SEP]:1
//   RobertaProcessing   <s> A </s>               <s> A </s> </s> B </s>       (every type id 0)
//   ByteLevel / none    A                        A B:1
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/io/tokenizer_pipeline.hpp"

namespace anvil::detail {

struct template_piece {
    int sequence = -1;              // 0: A, 1: B; -1: special tokens
    std::vector<std::int32_t> ids;  // the special token's ids
    std::int32_t type_id = 0;
};

class post_processor {
public:
    std::vector<template_piece> single{{0, {}, 0}};
    std::vector<template_piece> pair{{0, {}, 0}, {1, {}, 1}};

    static post_processor bert(std::int32_t cls, std::int32_t sep) {
        post_processor p;
        p.single = {{-1, {cls}, 0}, {0, {}, 0}, {-1, {sep}, 0}};
        p.pair = {{-1, {cls}, 0}, {0, {}, 0}, {-1, {sep}, 0}, {1, {}, 1}, {-1, {sep}, 1}};
        return p;
    }
    static post_processor roberta(std::int32_t cls, std::int32_t sep) {
        post_processor p;
        p.single = {{-1, {cls}, 0}, {0, {}, 0}, {-1, {sep}, 0}};
        p.pair = {{-1, {cls}, 0}, {0, {}, 0}, {-1, {sep}, 0}, {-1, {sep}, 0}, {1, {}, 0}, {-1, {sep}, 0}};
        return p;
    }

    // How many special tokens the template adds.
    [[nodiscard]] std::size_t added_tokens(bool is_pair) const {
        std::size_t n = 0;
        for (const template_piece& piece : is_pair ? pair : single)
            if (piece.sequence < 0) n += piece.ids.size();
        return n;
    }

    [[nodiscard]] encoding apply(const std::vector<std::int32_t>& first,
                                 const std::vector<std::int32_t>* second, bool add_special_tokens) const {
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
};

// Hugging Face's truncate_encodings (utils/truncation.rs), longest_first, from the right: a single sequence
// keeps max_length ids; of a pair, the shorter keeps what it can up to half and the longer takes the rest.
inline void truncate_longest_first(std::vector<std::int32_t>& first, std::vector<std::int32_t>* second,
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
