// anvil: post-processing (special tokens and token type ids around one or two sequences) and truncation.
// Every post-processor anvil reads reduces to a template, as Hugging Face's TemplateProcessing writes it:
//   BertProcessing      [CLS] A [SEP]            [CLS] A [SEP] B:1 [SEP]:1
//   RobertaProcessing   <s> A </s>               <s> A </s> </s> B </s>       (every type id 0)
//   ByteLevel / none    A                        A B:1
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "anvil/compilation.hpp"
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

    static post_processor bert(std::int32_t cls, std::int32_t sep);
    static post_processor roberta(std::int32_t cls, std::int32_t sep);

    // How many special tokens the template adds.
    [[nodiscard]] std::size_t added_tokens(bool is_pair) const;

    [[nodiscard]] encoding apply(const std::vector<std::int32_t>& first,
                                 const std::vector<std::int32_t>* second, bool add_special_tokens) const;
};

// Hugging Face's truncate_encodings (utils/truncation.rs), longest_first, from the right: a single sequence
// keeps max_length ids; of a pair, the shorter keeps what it can up to half and the longer takes the rest.
void truncate_longest_first(std::vector<std::int32_t>& first, std::vector<std::int32_t>* second,
                            std::size_t max_length);

}  // namespace anvil::detail

#if ANVIL_DEFINITIONS
#include "anvil/io/tokenizer_processors-inl.hpp"
#endif
