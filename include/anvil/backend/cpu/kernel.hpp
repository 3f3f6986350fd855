// anvil: a node prepared for the CPU — the function that computes it, the scratch it needs, and which of its
// operands it reads from their own storage rather than as f32 values.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "anvil/backend/cpu/tensor_span.hpp"
#include "anvil/core/thread_pool.hpp"

namespace anvil::detail::cpu {

using kernel_function = std::function<void(std::span<const const_tensor_span> inputs, tensor_span output,
                                           thread_pool& pool, std::span<float> workspace)>;

struct prepared_kernel {
    kernel_function run;
    std::size_t workspace_floats = 0;
    // reads_natively[k]: operand k is a constant the kernel reads from its own storage (a weight the GEMM
    // converts while packing), so the executor passes no f32 copy of it (its span's data is null).
    std::vector<bool> reads_natively;
    // The buffers the kernel reads its constants from while it runs (packed panels, weights read as stored,
    // f32 copies of biases), as address and bytes: counted in resident_weight_bytes().
    std::vector<std::pair<const void*, std::size_t>> weight_buffers;
};

}  // namespace anvil::detail::cpu
