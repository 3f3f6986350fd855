// anvil: the text model recipes — BERT-family encoders (text_encoder), sentence embeddings (sentence_encoder)
// and cross-encoder rerankers (cross_encoder), each read from a Hugging Face folder.
#pragma once

#include "anvil/cpu.hpp"
#include "anvil/io/tokenizer.hpp"

#include "anvil/models/text/cross_encoder.hpp"
#include "anvil/models/text/sentence_encoder.hpp"
#include "anvil/models/text/text_encoder.hpp"
