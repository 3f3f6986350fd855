// anvil: forwards to anvil/models/llm/causal_lm.hpp; kept so existing include paths keep working.
#pragma once

#include "anvil/models/llm/causal_lm.hpp"
