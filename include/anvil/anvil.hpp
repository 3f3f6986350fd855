// anvil: the umbrella header. One #include brings in everything: core types, I/O and (as they land) the
// expression front end, the graph IR and the backends.
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
#include "anvil/core/json.hpp"
#include "anvil/core/mapped_file.hpp"
#include "anvil/core/npy.hpp"
#include "anvil/core/shape.hpp"
#include "anvil/core/thread_pool.hpp"

#include "anvil/io/checkpoint.hpp"
#include "anvil/io/safetensors.hpp"
#include "anvil/io/safetensors_writer.hpp"
