// anvil: forwards to anvil/models/speech/whisper.hpp; kept so existing include paths keep working.
#pragma once

#include "anvil/models/speech/whisper.hpp"
