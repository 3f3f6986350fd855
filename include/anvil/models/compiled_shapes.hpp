// anvil: forwards to anvil/models/common/compiled_shapes.hpp; kept so existing include paths keep working.
#pragma once

#include "anvil/models/common/compiled_shapes.hpp"
