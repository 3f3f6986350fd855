// anvil: forwards to anvil/models/vision/image_classifier.hpp; kept so existing include paths keep working.
#pragma once

#include "anvil/models/vision/image_classifier.hpp"
