// anvil: building graphs — typed tensor expressions (static shapes checked at compile time) and the graph IR
// they record into, with its shape inference, passes and dump. No backend.
#pragma once

#include "anvil/core.hpp"

#include "anvil/expr/expr.hpp"

#include "anvil/graph/autodiff.hpp"
#include "anvil/graph/dump.hpp"
#include "anvil/graph/graph.hpp"
#include "anvil/graph/op.hpp"
#include "anvil/graph/passes.hpp"
#include "anvil/graph/shape_inference.hpp"
#include "anvil/graph/stages.hpp"
#include "anvil/graph/weight_compression.hpp"
