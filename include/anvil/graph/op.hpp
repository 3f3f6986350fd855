// anvil: the closed set of graph operations and their attributes. Every backend handles every op (the
// compiler's exhaustive switch checks keep them complete); adding an op means an entry in the enum, in
// op_table, in shape inference, a CPU kernel, an ANE lowering or a "host only" mark, and a parity test.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "anvil/core/dtype.hpp"

namespace anvil {

enum class op : std::uint8_t {
    // Leaves.
    input,     // a named program input
    constant,  // host data baked into the program
    // Elementwise, one operand.
    relu,
    gelu,        // exact: x * Phi(x), with erf
    gelu_tanh,   // the tanh approximation ("gelu_new", "gelu_pytorch_tanh")
    quick_gelu,  // x * sigmoid(1.702 x), CLIP's
    silu,
    sigmoid,
    tanh,
    exp,
    log,
    sqrt,
    rsqrt,
    abs,
    neg,
    erf,
    floor,
    ceil,
    round,  // half to even, as ONNX's Round and numpy's rint
    sign,   // -1, 0 or 1, as numpy's (both zeros give 0); NaN stays NaN
    sin,
    cos,
    clamp,  // attributes: min, max
    cast,   // to the node's dtype
    // Elementwise, two operands with numpy broadcasting.
    add,
    sub,
    mul,
    div,
    pow,
    maximum,
    minimum,
    // Comparisons: two operands of one type with numpy broadcasting, a dtype::boolean result (NaN compares
    // unequal and unordered, as in IEEE 754).
    equal,
    less,
    less_equal,
    greater,
    greater_equal,
    // Logic on dtype::boolean operands (any nonzero value counts as true), with a dtype::boolean result.
    logical_and,
    logical_or,
    logical_xor,
    logical_not,  // one operand
    // Elementwise, three operands: where(condition != 0, a, b).
    where,
    // One fused node for a chain of elementwise ops (built by the fusion pass; attributes: steps).
    fused_elementwise,
    // Linear algebra.
    matmul,  // batched, broadcasting leading axes; attributes: transpose_a, transpose_b
    linear,  // x [..., in] * weight [out, in]^T (+ bias [out]): Hugging Face's nn.Linear layout
    conv2d,  // NCHW input, weight [out, in / groups, kh, kw], optional bias [out]
    // Pooling and resizing (NCHW).
    max_pool2d,
    avg_pool2d,
    upsample_nearest,   // attributes: sizes = output [h, w]
    upsample_bilinear,  // attributes: sizes, align_corners
    // Normalisation.
    layer_norm,  // over the last axis; optional weight and bias
    rms_norm,    // over the last axis; optional weight
    group_norm,  // NC...: attributes groups, epsilon; optional weight and bias [C]
    batch_norm,  // inference form: x, mean, variance, optional weight and bias, over axis 1
    softmax,     // attributes: axis; optional additive mask broadcast to the input
    // Reductions (attributes: axes, keep_dims).
    reduce_sum,
    reduce_mean,
    reduce_max,
    reduce_min,   // NaN propagates, as reduce_max
    reduce_prod,  // the product of nothing is 1
    argmax,       // attributes: axis (axes[0]), keep_dims; output i64
    // Scans.
    cumsum,  // attributes: axis, exclusive, reverse (ONNX's CumSum); the shape is unchanged
    // Data movement.
    reshape,  // attributes: sizes (the output shape, one extent may be -1)
    permute,  // attributes: axes (the output's axis i is the input's axes[i])
    concat,   // attributes: axis
    slice,    // attributes: begin, end, step (one per axis)
    pad,      // attributes: begin (before), end (after) per axis, value
    gather,   // table, indices: rows of `table` along `axis` (embedding lookup)
    // data, indices (the result's shape; extents <= data's off `axis`): for axis 1,
    // out[i][j] = data[i][indices[i][j]], as ONNX's GatherElements; negative indices count from the end.
    gather_elements,
    // updates, indices: the transpose of gather (its VJP for the table, an embedding's gradient). A zero
    // table
    // of shape `sizes` with each row of `updates` (laid out as gather's result) added into the row along
    // `axis` that its index names; repeated indices accumulate, in index order.
    scatter_add,
    // Transformer blocks.
    attention,  // q [B, H, Sq, D], k [B, Hkv, Sk, D], v [B, Hkv, Sk, Dv], optional additive mask; causal,
                // scale
    rotary,     // x [..., S, D], cos [S, R/2], sin [S, R/2]: rotates the first R features; interleaved
    // Weight decompression.
    dequantize_int8,  // q (i8), scale [C], optional zero_point [C] along `axis`: (q - zero_point) * scale
    dequantize_lut,   // indices (u8), lut [C, L] per slice along axis 0, or [L]: lut[index]
    dequantize_ggml,  // blocks (u8) [..., B]: rows of ggml blocks of type `ggml_type`, as f32 [..., K]
};

inline constexpr std::size_t op_count = static_cast<std::size_t>(op::dequantize_ggml) + 1;

// One step of a fused elementwise chain: `kind` (a unary, binary or ternary elementwise op) applied to
// operands that are the fused node's inputs (index < input count) or the results of earlier steps (index
// input count + step). The last step's result is the node's output.
struct fused_step {
    op kind = op::add;
    std::array<std::uint16_t, 3> operands{};
    float alpha = 0.0f;  // clamp's min
    float beta = 0.0f;   // clamp's max

    friend bool operator==(const fused_step&, const fused_step&) = default;
};

// Attributes of every op in one struct; each op reads the fields its comment in `op` names and leaves the
// rest at their defaults (the dump prints only the fields that differ from them).
struct attributes {
    std::vector<std::int64_t> axes;   // reductions; permute's order
    std::vector<std::int64_t> sizes;  // reshape's target; upsampling's output [h, w]; scatter_add's table
    std::vector<std::int64_t> begin;  // slice; pad (elements before)
    std::vector<std::int64_t> end;    // slice; pad (elements after)
    std::vector<std::int64_t> step;   // slice
    std::int64_t axis = 0;  // softmax, concat, gather(_elements), scatter_add, argmax, cumsum, dequantisation
    dtype to = dtype::f32;  // cast
    bool keep_dims = false;
    // conv2d and pooling
    std::array<std::int64_t, 2> kernel{0, 0};
    std::array<std::int64_t, 2> stride{1, 1};
    std::array<std::int64_t, 2> dilation{1, 1};
    std::array<std::int64_t, 4> padding{0, 0, 0, 0};  // top, bottom, left, right
    std::int64_t groups = 1;                          // conv2d, group_norm
    bool ceil_mode = false;                           // pooling
    bool count_include_pad = true;                    // avg_pool2d, as PyTorch's default
    // scalars
    float epsilon = 0.0f;  // norms
    float min = 0.0f;      // clamp
    float max = 0.0f;      // clamp
    float value = 0.0f;    // pad
    float scale = 0.0f;    // attention: 0 means 1 / sqrt(D)
    // flags
    bool transpose_a = false;
    bool transpose_b = false;
    bool align_corners = false;
    bool causal = false;
    bool interleaved = false;  // rotary: pairs (0,1), (2,3)... instead of halves
    bool exclusive = false;    // cumsum: each sum leaves out its own element (the first is 0)
    bool reverse = false;      // cumsum: sums run from the end of the axis towards its start
    // dequantize_ggml: the blocks' type, a ggml_type number (core/ggml_types.hpp)
    std::uint32_t ggml_type = 0;
    // fused_elementwise
    std::vector<fused_step> steps;

    friend bool operator==(const attributes&, const attributes&) = default;
};

enum class op_category : std::uint8_t {
    leaf,
    unary,    // elementwise, one operand
    binary,   // elementwise, broadcasting
    ternary,  // where
    fused,
    structured,  // everything else
};

struct op_info {
    std::string_view name;
    op_category category;
    std::uint8_t min_inputs;
    std::uint8_t max_inputs;  // 255: any number (concat, fused_elementwise)
};

namespace detail {

inline constexpr std::uint8_t any_count = 255;

inline constexpr std::array<op_info, op_count> op_table{{
    {"input", op_category::leaf, 0, 0},
    {"constant", op_category::leaf, 0, 0},
    {"relu", op_category::unary, 1, 1},
    {"gelu", op_category::unary, 1, 1},
    {"gelu_tanh", op_category::unary, 1, 1},
    {"quick_gelu", op_category::unary, 1, 1},
    {"silu", op_category::unary, 1, 1},
    {"sigmoid", op_category::unary, 1, 1},
    {"tanh", op_category::unary, 1, 1},
    {"exp", op_category::unary, 1, 1},
    {"log", op_category::unary, 1, 1},
    {"sqrt", op_category::unary, 1, 1},
    {"rsqrt", op_category::unary, 1, 1},
    {"abs", op_category::unary, 1, 1},
    {"neg", op_category::unary, 1, 1},
    {"erf", op_category::unary, 1, 1},
    {"floor", op_category::unary, 1, 1},
    {"ceil", op_category::unary, 1, 1},
    {"round", op_category::unary, 1, 1},
    {"sign", op_category::unary, 1, 1},
    {"sin", op_category::unary, 1, 1},
    {"cos", op_category::unary, 1, 1},
    {"clamp", op_category::unary, 1, 1},
    {"cast", op_category::unary, 1, 1},
    {"add", op_category::binary, 2, 2},
    {"sub", op_category::binary, 2, 2},
    {"mul", op_category::binary, 2, 2},
    {"div", op_category::binary, 2, 2},
    {"pow", op_category::binary, 2, 2},
    {"maximum", op_category::binary, 2, 2},
    {"minimum", op_category::binary, 2, 2},
    {"equal", op_category::binary, 2, 2},
    {"less", op_category::binary, 2, 2},
    {"less_equal", op_category::binary, 2, 2},
    {"greater", op_category::binary, 2, 2},
    {"greater_equal", op_category::binary, 2, 2},
    {"logical_and", op_category::binary, 2, 2},
    {"logical_or", op_category::binary, 2, 2},
    {"logical_xor", op_category::binary, 2, 2},
    {"logical_not", op_category::unary, 1, 1},
    {"where", op_category::ternary, 3, 3},
    {"fused_elementwise", op_category::fused, 1, any_count},
    {"matmul", op_category::structured, 2, 2},
    {"linear", op_category::structured, 2, 3},
    {"conv2d", op_category::structured, 2, 3},
    {"max_pool2d", op_category::structured, 1, 1},
    {"avg_pool2d", op_category::structured, 1, 1},
    {"upsample_nearest", op_category::structured, 1, 1},
    {"upsample_bilinear", op_category::structured, 1, 1},
    {"layer_norm", op_category::structured, 1, 3},
    {"rms_norm", op_category::structured, 1, 2},
    {"group_norm", op_category::structured, 1, 3},
    {"batch_norm", op_category::structured, 3, 5},
    {"softmax", op_category::structured, 1, 2},
    {"reduce_sum", op_category::structured, 1, 1},
    {"reduce_mean", op_category::structured, 1, 1},
    {"reduce_max", op_category::structured, 1, 1},
    {"reduce_min", op_category::structured, 1, 1},
    {"reduce_prod", op_category::structured, 1, 1},
    {"argmax", op_category::structured, 1, 1},
    {"cumsum", op_category::structured, 1, 1},
    {"reshape", op_category::structured, 1, 1},
    {"permute", op_category::structured, 1, 1},
    {"concat", op_category::structured, 1, any_count},
    {"slice", op_category::structured, 1, 1},
    {"pad", op_category::structured, 1, 1},
    {"gather", op_category::structured, 2, 2},
    {"gather_elements", op_category::structured, 2, 2},
    {"scatter_add", op_category::structured, 2, 2},
    {"attention", op_category::structured, 3, 4},
    {"rotary", op_category::structured, 3, 3},
    {"dequantize_int8", op_category::structured, 2, 3},
    {"dequantize_lut", op_category::structured, 2, 2},
    {"dequantize_ggml", op_category::structured, 1, 1},
}};

}  // namespace detail

[[nodiscard]] constexpr const op_info& info(op kind) noexcept {
    return detail::op_table[static_cast<std::size_t>(kind)];
}
[[nodiscard]] constexpr std::string_view op_name(op kind) noexcept {
    return info(kind).name;
}
[[nodiscard]] constexpr bool is_elementwise(op kind) noexcept {
    const auto category = info(kind).category;
    return category == op_category::unary || category == op_category::binary ||
           category == op_category::ternary;
}

}  // namespace anvil
