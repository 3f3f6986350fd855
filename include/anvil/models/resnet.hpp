// anvil: forwards to anvil/models/vision/resnet.hpp; kept so existing include paths keep working.
#pragma once

#include "anvil/models/vision/resnet.hpp"
