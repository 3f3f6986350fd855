// anvil: every model recipe (text, vision, speech, language models).
#pragma once

#include "anvil/models/import/onnx_import.hpp"
#include "anvil/models/llm.hpp"
#include "anvil/models/speech.hpp"
#include "anvil/models/text.hpp"
#include "anvil/models/vision.hpp"
