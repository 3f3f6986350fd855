// anvil: forwards to anvil/models/common/sampling.hpp; kept so existing include paths keep working.
#pragma once

#include "anvil/models/common/sampling.hpp"
