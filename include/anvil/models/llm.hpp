// anvil: the decoder language models — GPT-2 and the Llama family (Llama, Qwen2/2.5/3, Mistral) with resident
// KV caches, batched decoding, sampling and chat templates (causal_lm).
#pragma once

#include "anvil/cpu.hpp"
#include "anvil/io/token_stream.hpp"
#include "anvil/io/tokenizer.hpp"

#include "anvil/models/causal_lm.hpp"
#include "anvil/models/chat_template.hpp"
#include "anvil/models/decoder_plan.hpp"
#include "anvil/models/fp16_rescale.hpp"
#include "anvil/models/gguf_decoder.hpp"
#include "anvil/models/sampling.hpp"
