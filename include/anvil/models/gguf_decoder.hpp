// anvil: forwards to anvil/models/import/gguf_decoder.hpp; kept so existing include paths keep working.
#pragma once

#include "anvil/models/import/gguf_decoder.hpp"
