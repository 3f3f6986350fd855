// anvil: forwards to anvil/models/common/blocks.hpp; kept so existing include paths keep working.
#pragma once

#include "anvil/models/common/blocks.hpp"
