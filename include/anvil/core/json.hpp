// anvil: JSON (RFC 8259), for safetensors headers, config.json and tokenizer.json: the value model
// (json_value.hpp), the strict parser (json_parser.hpp) and the writer (json_writer.hpp).
#pragma once

#include "anvil/core/json_parser.hpp"
#include "anvil/core/json_value.hpp"
#include "anvil/core/json_writer.hpp"
