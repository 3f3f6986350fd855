// anvil: the graph passes every backend runs before compiling — dead-code elimination, constant folding,
// BatchNorm folding into the convolution before it, and elementwise fusion (CPU: a chain of elementwise ops
// becomes one node evaluated in one pass over memory). Each takes a graph_body and returns a new one whose
// outputs compute the same values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "anvil/compilation.hpp"
#include "anvil/graph/rewrite.hpp"

namespace anvil {

// Drops every node no output depends on. Inputs stay, so a program accepts every input its graph declared.
[[nodiscard]] graph_body eliminate_dead_code(const graph_body& body);

// Evaluates a node whose operands are all constants: returns its value as a host tensor of the node's type.
using constant_evaluator = std::function<host_tensor(const node&, std::span<const host_tensor>)>;

// How far constant folding goes: `never_expand` keeps every node whose value would take more memory than its
// operands (the CPU converts weights while it packs them); `everything` folds those too (the ANE embeds every
// weight as an fp16 constant anyway); `all_but_dequantisation` folds everything except int8 and palette
// dequantisation (a Core ML program keeps those compressed, as constexpr ops).
enum class folding : std::uint8_t { never_expand, everything, all_but_dequantisation };

// Replaces nodes whose operands are all constants by their value, computed by `evaluate` — except, by
// default, where the value would take more memory than its operands (a cast of fp16 weights to fp32, a
// broadcast, a dequantisation: those stay for the backend to do while it packs), so folding never expands
// weights.
[[nodiscard]] graph_body fold_constants(const graph_body& body, const constant_evaluator& evaluate,
                                        folding how = folding::never_expand);

namespace detail {

bool all_constant(const graph_body& body, const node& n, std::size_t first);

}  // namespace detail

// conv2d followed by batch_norm (inference form, constant statistics) becomes one conv2d with rescaled
// weights and a bias: w' = w * g / sqrt(var + eps) per output channel, b' = (b - mean) * g / sqrt(var + eps)
// + beta. The folded weights are stored as f32.
[[nodiscard]] graph_body fold_batch_norm(const graph_body& body);

// Merges chains of elementwise nodes into fused_elementwise nodes: a node joins the fusion of its single
// reader when both are elementwise and floating point, it is not a program output, and its shape is the
// fused result's shape (so every step runs over the same elements; smaller operands broadcast as inputs).
[[nodiscard]] graph_body fuse_elementwise(const graph_body& body, std::size_t max_steps = 32);

}  // namespace anvil

#if ANVIL_DEFINITIONS
#include "anvil/graph/passes-inl.hpp"
#endif
