// anvil: the typed tensor-expression front end, all of it: tensor<T, Shape> and every op on it.
#pragma once

#include "anvil/expr/data_movement.hpp"
#include "anvil/expr/dequantize.hpp"
#include "anvil/expr/elementwise.hpp"
#include "anvil/expr/linear_algebra.hpp"
#include "anvil/expr/normalization.hpp"
#include "anvil/expr/pooling.hpp"
#include "anvil/expr/reduction.hpp"
#include "anvil/expr/tensor.hpp"
#include "anvil/expr/transformer.hpp"
