// anvil: forwards to anvil/models/text/cross_encoder.hpp; kept so existing include paths keep working.
#pragma once

#include "anvil/models/text/cross_encoder.hpp"
