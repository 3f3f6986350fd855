// anvil: reading and writing model files — safetensors (and sharded checkpoints), GGUF, ONNX, tokenizer.json,
// images and their preprocessing, WAVE audio and its log-mel features, and streaming token decoding.
#pragma once

#include "anvil/core.hpp"

#include "anvil/io/checkpoint.hpp"
#include "anvil/io/fft.hpp"
#include "anvil/io/gguf.hpp"
#include "anvil/io/gguf_tokenizer.hpp"
#include "anvil/io/image.hpp"
#include "anvil/io/image_transforms.hpp"
#include "anvil/io/log_mel.hpp"
#include "anvil/io/onnx.hpp"
#include "anvil/io/protobuf.hpp"
#include "anvil/io/safetensors.hpp"
#include "anvil/io/safetensors_writer.hpp"
#include "anvil/io/token_stream.hpp"
#include "anvil/io/tokenizer.hpp"
#include "anvil/io/wav.hpp"
