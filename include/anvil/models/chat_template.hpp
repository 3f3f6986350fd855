// anvil: forwards to anvil/models/common/chat_template.hpp; kept so existing include paths keep working.
#pragma once

#include "anvil/models/common/chat_template.hpp"
