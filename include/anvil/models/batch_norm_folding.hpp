// anvil: forwards to anvil/models/vision/batch_norm_folding.hpp; kept so existing include paths keep working.
#pragma once

#include "anvil/models/vision/batch_norm_folding.hpp"
