// anvil: the speech model recipes — Whisper speech-to-text (whisper), with WAVE input and Whisper's log-mel
// features, read from a Hugging Face folder.
#pragma once

#include "anvil/cpu.hpp"
#include "anvil/io/log_mel.hpp"
#include "anvil/io/token_stream.hpp"
#include "anvil/io/wav.hpp"

#include "anvil/models/speech/whisper.hpp"
