// anvil: shape and type inference for every op. It runs when a node is added to a graph, so a wrong shape is
// reported where the graph is built (naming the op and the shapes), and it puts the attributes in canonical
// form (axes made non-negative and sorted, slices clamped, reshape's -1 resolved) so passes and backends
// never re-derive them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "anvil/compilation.hpp"
#include "anvil/core/dtype.hpp"
#include "anvil/core/shape.hpp"
#include "anvil/graph/op.hpp"

namespace anvil {

// The type and shape of one value.
struct value_type {
    dtype type = dtype::f32;
    dims shape;
};

namespace detail {

[[noreturn]] void throw_op_shape(op kind, const std::string& what);

// "a [2, 3] and b [4]" for messages.
std::string describe_operands(std::span<const value_type> inputs);

std::int64_t normalize_axis(op kind, std::int64_t axis, std::size_t rank, const dims& shape);

void require_floating(op kind, dtype type, std::string_view which);

void require_same_type(op kind, std::span<const value_type> inputs);

// "f32 and bool" for messages.
std::string describe_types(std::span<const value_type> inputs);

// No operand is dtype::boolean (comparisons that order their operands, sign).
void require_numeric(op kind, std::span<const value_type> inputs);

// Every operand is dtype::boolean (the logical ops).
void require_boolean(op kind, std::span<const value_type> inputs);

void require_rank(op kind, const value_type& input, std::size_t rank, std::string_view which);

void require_vector(op kind, const value_type& input, std::int64_t length, std::string_view which);

dims with_extent(dims shape, std::size_t axis, std::int64_t extent);

// An extent no valid window gives: the window does not fit, or a parameter is out of range.
inline constexpr std::int64_t invalid_extent = -2;

// The output extent of a window sliding over `size` elements, PyTorch's rule; dyn for a dyn size. constexpr,
// so the expression front end computes static output shapes with it.
[[nodiscard]] constexpr std::int64_t static_window_extent(std::int64_t size, std::int64_t pad_before,
                                                          std::int64_t pad_after, std::int64_t kernel,
                                                          std::int64_t stride, std::int64_t dilation,
                                                          bool ceil_mode) noexcept {
    if (kernel <= 0 || stride <= 0 || dilation <= 0 || pad_before < 0 || pad_after < 0) return invalid_extent;
    if (size == dyn) return dyn;
    const std::int64_t span = dilation * (kernel - 1) + 1;
    const std::int64_t room = size + pad_before + pad_after - span;
    if (room < 0) return invalid_extent;
    std::int64_t extent = (ceil_mode ? (room + stride - 1) / stride : room / stride) + 1;
    if (ceil_mode && (extent - 1) * stride >= size + pad_before) --extent;
    return extent;
}

// The same, for a graph being built: throws shape_error naming the op when no window fits.
std::int64_t window_output_extent(op kind, std::int64_t size, std::int64_t pad_before, std::int64_t pad_after,
                                  std::int64_t kernel, std::int64_t stride, std::int64_t dilation,
                                  bool ceil_mode);

[[nodiscard]] constexpr std::size_t elementwise_arity(op kind) noexcept {
    switch (info(kind).category) {
        case op_category::unary:
            return 1;
        case op_category::binary:
            return 2;
        case op_category::ternary:
            return 3;
        default:
            return 0;
    }
}

// A fused node's steps: at least one, each an elementwise op other than cast (a step has no target type),
// reading only the node's inputs and earlier steps.
void check_fused_steps(std::span<const fused_step> steps, std::size_t input_count);

value_type infer_broadcast(op kind, std::span<const value_type> inputs);

value_type infer_matmul(op kind, const attributes& attrs, std::span<const value_type> in);

value_type infer_conv2d(op kind, attributes& attrs, std::span<const value_type> in);

value_type infer_pool(op kind, const attributes& attrs, std::span<const value_type> in);

value_type infer_reduction(op kind, attributes& attrs, std::span<const value_type> in);

value_type infer_reshape(op kind, attributes& attrs, std::span<const value_type> in);

value_type infer_slice(op kind, attributes& attrs, std::span<const value_type> in);

value_type infer_attention(op kind, std::span<const value_type> in);

}  // namespace detail

// The output of `kind` on `inputs`, with `attrs` put in canonical form. Throws shape_error or type_error
// naming the op and the operands' shapes.
value_type infer(op kind, attributes& attrs, std::span<const value_type> inputs);

}  // namespace anvil

#if ANVIL_DEFINITIONS
#include "anvil/graph/shape_inference-inl.hpp"
#endif
