// anvil: forwards to anvil/models/llm/decoder_plan.hpp; kept so existing include paths keep working.
#pragma once

#include "anvil/models/llm/decoder_plan.hpp"
