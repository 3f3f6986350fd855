// anvil: the umbrella header. One #include brings in everything: core types, the expression front end, the
// graph IR, the backends and I/O.
#pragma once

#include "anvil/fwd.hpp"
#include "anvil/version.hpp"

#include "anvil/core/bfloat16.hpp"
#include "anvil/core/checked_math.hpp"
#include "anvil/core/convert.hpp"
#include "anvil/core/dtype.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/float8.hpp"
#include "anvil/core/half.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/core/json.hpp"
#include "anvil/core/mapped_file.hpp"
#include "anvil/core/npy.hpp"
#include "anvil/core/shape.hpp"
#include "anvil/core/thread_pool.hpp"

#include "anvil/expr/expr.hpp"

#include "anvil/graph/dump.hpp"
#include "anvil/graph/graph.hpp"
#include "anvil/graph/op.hpp"
#include "anvil/graph/passes.hpp"
#include "anvil/graph/shape_inference.hpp"

#include "anvil/backend/compile.hpp"
#include "anvil/backend/cpu/executor.hpp"
#include "anvil/backend/cpu/gemm.hpp"
#include "anvil/backend/cpu/reference/reference.hpp"
#include "anvil/backend/program.hpp"

#include "anvil/io/checkpoint.hpp"
#include "anvil/io/safetensors.hpp"
#include "anvil/io/safetensors_writer.hpp"

#include "anvil/models/bert.hpp"
#include "anvil/models/blocks.hpp"
#include "anvil/models/weights.hpp"
