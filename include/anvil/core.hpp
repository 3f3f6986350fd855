// anvil: the core — scalar types (half, bfloat16, float8), dtypes, shapes, host tensors, errors and warnings,
// JSON, .npy, memory-mapped files, SHA-256, the thread pool and the masked score of attention masks. Nothing
// here knows about graphs or backends.
#pragma once

#include "anvil/fwd.hpp"
#include "anvil/version.hpp"

#include "anvil/core/bfloat16.hpp"
#include "anvil/core/checked_math.hpp"
#include "anvil/core/convert.hpp"
#include "anvil/core/cpu_features.hpp"
#include "anvil/core/dtype.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/float8.hpp"
#include "anvil/core/ggml_types.hpp"
#include "anvil/core/half.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/core/json.hpp"
#include "anvil/core/mapped_file.hpp"
#include "anvil/core/masking.hpp"
#include "anvil/core/npy.hpp"
#include "anvil/core/sha256.hpp"
#include "anvil/core/shape.hpp"
#include "anvil/core/thread_pool.hpp"
#include "anvil/core/warning.hpp"
