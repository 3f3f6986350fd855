// anvil: which kernel runs each node on the CPU. prepare_kernel picks, once per node at compile time, the
// optimised kernel where there is one (packing constant weights for the GEMM as it goes) and the reference
// kernel otherwise, or always the reference kernels when asked (cpu_kernels::reference).
#pragma once

#include <cstring>
#include <functional>
#include <span>
#include <vector>

#include "anvil/backend/cpu/kernel.hpp"
#include "anvil/backend/cpu/kernels/attention.hpp"
#include "anvil/backend/cpu/kernels/data_movement.hpp"
#include "anvil/backend/cpu/kernels/elementwise.hpp"
#include "anvil/backend/cpu/kernels/linear_algebra.hpp"
#include "anvil/backend/cpu/kernels/normalization.hpp"
#include "anvil/backend/cpu/kernels/reduction.hpp"
#include "anvil/backend/cpu/kernels/scan.hpp"
#include "anvil/backend/cpu/reference/reference.hpp"
#include "anvil/backend/program.hpp"
#include "anvil/core/thread_pool.hpp"
#include "anvil/graph/graph.hpp"

namespace anvil::detail::cpu {

inline prepared_kernel reference_kernel(const node& n) {
    return {[&n](std::span<const const_tensor_span> inputs, tensor_span output, thread_pool&,
                 std::span<float>) { evaluate_reference(n, inputs, output); },
            0,
            {},
            {}};
}

// A reshape shares its operand's buffer (the memory plan aliases them): nothing to do then.
inline prepared_kernel reshape_kernel() {
    return {
        [](std::span<const const_tensor_span> inputs, tensor_span output, thread_pool&, std::span<float>) {
            if (inputs[0].data == output.data) return;
            const auto count = static_cast<std::size_t>(output.shape.element_count());
            if (count != 0) std::memmove(output.data, inputs[0].data, count * sizeof(float));
        },
        0,
        {},
        {}};
}

// A fast kernel with the common signature, run on node n.
template <void (*Kernel)(const node&, std::span<const const_tensor_span>, tensor_span, thread_pool&,
                         std::span<float>)>
prepared_kernel fast_kernel(const node& n, std::size_t workspace_floats = 0) {
    return {[&n](std::span<const const_tensor_span> inputs, tensor_span output, thread_pool& pool,
                 std::span<float> workspace) { Kernel(n, inputs, output, pool, workspace); },
            workspace_floats,
            {},
            {}};
}

// The kernel for node `id` of `body`. Workspace is sized for `threads` threads running at once;
// int8_activations: compile_options::int8_activations.
inline prepared_kernel prepare_kernel(const graph_body& body, value_id id, cpu_kernels mode,
                                      std::size_t threads, bool int8_activations = false) {
    const node& n = body.nodes[id];
    if (n.kind == op::reshape) return reshape_kernel();
    if (mode == cpu_kernels::reference) return reference_kernel(n);
    std::vector<dims> input_shapes;
    for (const value_id input : n.inputs)
        input_shapes.push_back(body.nodes[input].result.shape);
    switch (n.kind) {
        case op::input:
        case op::constant:
            throw error(message("prepare_kernel: ", op_name(n.kind), " nodes hold no computation"));
        case op::relu:
        case op::gelu:
        case op::gelu_tanh:
        case op::quick_gelu:
        case op::silu:
        case op::sigmoid:
        case op::tanh:
        case op::exp:
        case op::log:
        case op::sqrt:
        case op::rsqrt:
        case op::abs:
        case op::neg:
        case op::erf:
        case op::floor:
        case op::ceil:
        case op::round:
        case op::sign:
        case op::sin:
        case op::cos:
        case op::logical_not:
        case op::clamp:
        case op::cast:
            return fast_kernel<elementwise_unary>(n);
        case op::add:
        case op::sub:
        case op::mul:
        case op::div:
        case op::pow:
        case op::maximum:
        case op::minimum:
        case op::equal:
        case op::less:
        case op::less_equal:
        case op::greater:
        case op::greater_equal:
        case op::logical_and:
        case op::logical_or:
        case op::logical_xor:
            return fast_kernel<elementwise_binary>(n);
        case op::where:
            return fast_kernel<elementwise_where>(n);
        case op::fused_elementwise:
            return fast_kernel<fused_elementwise>(n, fused_elementwise_workspace(n, input_shapes) * threads);
        case op::matmul:
            return matmul_kernel(n);
        case op::linear:
            return linear_kernel(body, n, int8_activations);
        case op::conv2d:
            return conv2d_kernel(body, n);
        case op::layer_norm:
            return fast_kernel<layer_norm>(n);
        case op::rms_norm:
            return fast_kernel<rms_norm>(n);
        case op::group_norm:
            return fast_kernel<group_norm>(n);
        case op::batch_norm:
            return fast_kernel<batch_norm>(n);
        case op::softmax:
            return fast_kernel<softmax>(n);
        case op::attention:
            return fast_kernel<attention>(n, attention_workspace(n, input_shapes) * threads);
        case op::rotary:
            return fast_kernel<rotary>(n);
        case op::permute:
            return fast_kernel<permute>(n);
        case op::concat:
            return fast_kernel<concat>(n);
        case op::slice:
            return fast_kernel<slice>(n);
        case op::pad:
            return fast_kernel<pad>(n);
        case op::gather:
            if (auto from_blocks = gather_from_blocks(body, n)) return std::move(*from_blocks);
            return fast_kernel<gather>(n);
        case op::gather_elements:
            return fast_kernel<gather_elements>(n);
        case op::scatter_add:
            return fast_kernel<scatter_add>(n);
        case op::cumsum:
            return fast_kernel<cumsum>(n);
        case op::reduce_sum:
        case op::reduce_mean:
            return reduces_adjacent_axes(n) ? fast_kernel<reduce_sum_or_mean>(n) : reference_kernel(n);
        // Plain kernels are fast enough here for now: pooling and resizing touch each input element a few
        // times, the other reductions and dequantisation (outside a GEMM) once.
        case op::max_pool2d:
        case op::avg_pool2d:
        case op::upsample_nearest:
        case op::upsample_bilinear:
        case op::reduce_max:
        case op::reduce_min:
        case op::reduce_prod:
        case op::argmax:
        case op::dequantize_int8:
        case op::dequantize_lut:
        case op::dequantize_ggml:
            return reference_kernel(n);
        case op::reshape:
            return reshape_kernel();
    }
    throw error(message("prepare_kernel: unknown op ", static_cast<int>(n.kind)));
}

}  // namespace anvil::detail::cpu
