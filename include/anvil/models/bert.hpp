// anvil: forwards to anvil/models/text/bert.hpp; kept so existing include paths keep working.
#pragma once

#include "anvil/models/text/bert.hpp"
