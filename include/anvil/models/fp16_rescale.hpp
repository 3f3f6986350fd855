// anvil: forwards to anvil/models/llm/fp16_rescale.hpp; kept so existing include paths keep working.
#pragma once

#include "anvil/models/llm/fp16_rescale.hpp"
