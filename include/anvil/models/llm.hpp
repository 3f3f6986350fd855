// anvil: the decoder language models — GPT-2 and the Llama family (Llama, Qwen2/2.5/3, Mistral) with resident
// KV caches, batched decoding, sampling and chat templates (causal_lm).
#pragma once

#include "anvil/cpu.hpp"
#include "anvil/io/token_stream.hpp"
#include "anvil/io/tokenizer.hpp"

#include "anvil/models/common/chat_template.hpp"
#include "anvil/models/common/sampling.hpp"
#include "anvil/models/import/gguf_decoder.hpp"
#include "anvil/models/llm/causal_lm.hpp"
#include "anvil/models/llm/decoder_plan.hpp"
#include "anvil/models/llm/fp16_rescale.hpp"
