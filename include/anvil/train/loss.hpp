// anvil: training losses as graph builders, written from differentiable ops so gradients() differentiates
// them like the rest of the model: cross-entropy over logits (PyTorch's CrossEntropyLoss, mean reduction
// with an ignore index), mean squared error (MSELoss) and binary cross-entropy with logits
// (BCEWithLogitsLoss). Each returns a scalar of the logits' type.
#pragma once

#include <cstdint>

#include "anvil/compilation.hpp"
#include "anvil/graph/graph.hpp"

namespace anvil::train {

// mean over the examples whose label is not `ignore_index` of logsumexp(logits[i]) - logits[i][label[i]],
// for logits [N, C] and integer labels [N]. As PyTorch: a batch whose every label is ignored gives NaN (0/0).
// Labels must lie in [0, C) or equal ignore_index: the graph cannot check them, so the caller does (the
// training loop names the example).
[[nodiscard]] value cross_entropy(const value& logits, const value& labels, std::int64_t ignore_index = -100);

// mean((prediction - target)^2) over every element; the shapes must match.
[[nodiscard]] value mse_loss(const value& prediction, const value& target);

// mean(max(x, 0) - x z + log(1 + exp(-|x|))) for logits x and targets z in [0, 1] of the same shape: the
// numerically stable form PyTorch uses, whose gradient is sigmoid(x) - z (over the element count).
[[nodiscard]] value binary_cross_entropy_with_logits(const value& logits, const value& targets);

}  // namespace anvil::train

#if ANVIL_DEFINITIONS
#include "anvil/train/loss-inl.hpp"
#endif
