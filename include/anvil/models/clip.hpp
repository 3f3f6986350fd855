// anvil: forwards to anvil/models/vision/clip.hpp; kept so existing include paths keep working.
#pragma once

#include "anvil/models/vision/clip.hpp"
