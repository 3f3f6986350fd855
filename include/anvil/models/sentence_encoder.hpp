// anvil: forwards to anvil/models/text/sentence_encoder.hpp; kept so existing include paths keep working.
#pragma once

#include "anvil/models/text/sentence_encoder.hpp"
