// anvil: the umbrella header. One #include brings in everything: core types, the expression front end, the
// graph IR, the backends, I/O and the model recipes. A file that needs less can include less: core.hpp,
// graph.hpp, cpu.hpp, ane.hpp, io.hpp, models/text.hpp, models/vision.hpp, models/llm.hpp (or models.hpp).
//
// Header-only by default; with ANVIL_SEPARATE_COMPILATION (anvil::compiled) the headers hold declarations and
// templates only, and this file leaves out the backends' and tokenizers' internals, which users never call
// (compilation.hpp).
#pragma once

#include "anvil/compilation.hpp"

#include "anvil/ane.hpp"
#include "anvil/core.hpp"
#include "anvil/cpu.hpp"
#include "anvil/graph.hpp"
#include "anvil/io.hpp"
#include "anvil/models.hpp"
#include "anvil/train.hpp"

#include "anvil/models/common/blocks.hpp"
#include "anvil/models/common/compiled_shapes.hpp"
#include "anvil/models/common/config.hpp"
#include "anvil/models/common/lora_adapter.hpp"
#include "anvil/models/common/rope.hpp"
#include "anvil/models/common/weights.hpp"
#include "anvil/models/llm/decoder_lm.hpp"
#include "anvil/models/text/bert.hpp"
#include "anvil/models/vision/batch_norm_folding.hpp"

#if ANVIL_DEFINITIONS
// Header-only (and the implementation unit): the backends' and the tokenizers' internals too, as this header
// always offered them.
#include "anvil/backend/ane/ane_framework.hpp"
#include "anvil/backend/ane/ane_program.hpp"
#include "anvil/backend/ane/core_foundation.hpp"
#include "anvil/backend/ane/io_surface.hpp"
#include "anvil/backend/ane/lowering.hpp"
#include "anvil/backend/ane/mil_writer.hpp"
#include "anvil/backend/ane/objc_runtime.hpp"
#include "anvil/backend/ane/partition.hpp"
#include "anvil/backend/ane/support.hpp"
#include "anvil/backend/ane/tiling.hpp"
#include "anvil/backend/ane/weight_blob.hpp"
#include "anvil/backend/coreml/mlpackage.hpp"
#include "anvil/backend/coreml/model_spec.hpp"
#include "anvil/backend/coreml/protobuf.hpp"
#include "anvil/backend/cpu/executor.hpp"
#include "anvil/backend/cpu/gemm.hpp"
#include "anvil/backend/cpu/reference/reference.hpp"
#include "anvil/io/split_patterns.hpp"
#include "anvil/io/tokenizer_decoders.hpp"
#include "anvil/io/unicode.hpp"
#endif
