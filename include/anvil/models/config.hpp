// anvil: forwards to anvil/models/common/config.hpp; kept so existing include paths keep working.
#pragma once

#include "anvil/models/common/config.hpp"
