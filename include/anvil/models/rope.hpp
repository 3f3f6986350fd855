// anvil: forwards to anvil/models/common/rope.hpp; kept so existing include paths keep working.
#pragma once

#include "anvil/models/common/rope.hpp"
