// anvil: forwards to anvil/models/vision/vit.hpp; kept so existing include paths keep working.
#pragma once

#include "anvil/models/vision/vit.hpp"
