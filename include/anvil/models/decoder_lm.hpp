// anvil: forwards to anvil/models/llm/decoder_lm.hpp; kept so existing include paths keep working.
#pragma once

#include "anvil/models/llm/decoder_lm.hpp"
