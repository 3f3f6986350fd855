// anvil: forwards to anvil/models/import/onnx_import.hpp; kept so existing include paths keep working.
#pragma once

#include "anvil/models/import/onnx_import.hpp"
