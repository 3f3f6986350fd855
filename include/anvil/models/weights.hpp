// anvil: forwards to anvil/models/common/weights.hpp; kept so existing include paths keep working.
#pragma once

#include "anvil/models/common/weights.hpp"
