// anvil: which graph nodes the ANE backend runs, and how. `supports` decides per node — natively (one MIL
// op), decomposed (a fixed pattern of MIL ops, MIL.md Part 2 and RUNTIME.md §6 say why) or on the host (with
// the reason) — from the op, its dtypes, shapes and which operands are constants, against the limits in
// CONSTRAINTS.md: fp16 only, rank <= 5, every extent <= max_dimension, surfaces [1, C, 1, W].
// Constants (and int8/LUT dequantisation of constants, folded here to fp16 values) are embedded as weights.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "anvil/backend/ane/capabilities.hpp"
#include "anvil/backend/ane/mil_writer.hpp"
#include "anvil/backend/cpu/reference/dequantize.hpp"
#include "anvil/core/convert.hpp"
#include "anvil/core/error.hpp"
#include "anvil/graph/dump.hpp"
#include "anvil/graph/graph.hpp"

namespace anvil::detail::ane {

// Every op as MIL spells it, except gelu and rsqrt (rejected by ANECCompile wherever reported, RUNTIME.md
// §6), at the I/O width of each value: the lowering's own default, which unit tests of single ops use. A
// program is lowered with the choices of capabilities.hpp for its chip instead.
[[nodiscard]] inline lowering_choices unrestricted_choices() {
    lowering_choices c;
    c.chosen.fill(lowering_variant::native);
    c.set(lowering_feature::gelu, lowering_variant::decomposed);
    c.set(lowering_feature::rsqrt, lowering_variant::decomposed);
    c.source = "every op native";
    return c;
}

struct lowering_options {
    mil_dialect dialect = mil_dialect::ios18;
    std::int64_t max_dimension =
        16384;  // per axis of every tensor (CONSTRAINTS.md; 65536 on A16/M2 and later)
    std::int64_t softmax_max_axis = 8192;  // longer softmax axes are decomposed (RUNTIME.md §6)
    bool one_file_per_weight = false;      // one blob file per constant (the `weight_files` feature, §0 #15)
    lowering_choices choices = unrestricted_choices();
    // Segment inputs declared as Core ML states rather than inputs (device::coreml on macOS 15: resident
    // inputs, such as KV caches, that Core ML keeps in MLState buffers the host writes in place). Needs the
    // ios18 dialect.
    std::vector<value_id> state_inputs;
    // Dequantised constant weights (dequantize_int8, dequantize_lut) kept compressed as constexpr ops
    // (lowering_context.hpp compressed_constant), so the program holds only the compressed bytes: on both
    // routes (the private path lowers a segment again without them when its compiler refuses them: public
    // code shows it int8 constexpr ops only, RUNTIME.md §4). Off: folded into fp16 weights.
    bool compressed_weights = false;
    // With compressed_weights, whether palettes stay compressed too (the private route's `palette` feature
    // expands them to fp16 on the host when neither of its forms held on this Neural Engine).
    bool compressed_palettes = true;
    // The program is one Core ML program to ship (export_mlpackage): Core ML places each op itself, on the
    // CPU where the Neural Engine refuses it (COREML.md §4.1), so what only the private compiler refuses — a
    // conv kernel 16 or wider (RUNTIME.md §0 #7, §0b #26) — is written as the plain op, never refused.
    bool core_ml_program = false;
    // The private route: small inputs share one surface (lowering.hpp pack_inputs), since every input surface
    // is allocated like the largest (RUNTIME.md §3). Not `unpacked_inputs`: values an earlier ANE program
    // writes into a surface this one reads as it is.
    bool pack_inputs = false;
    std::vector<value_id> unpacked_inputs;

    [[nodiscard]] lowering_variant variant(lowering_feature f) const { return choices.of(f); }
    [[nodiscard]] bool native(lowering_feature f) const { return choices.of(f) == lowering_variant::native; }
};

// The I/O width rule (RUNTIME.md §0 #3): an input or output surface's innermost dimension is a multiple of
// 32, and at least 32, when the lowering pads it.
inline constexpr std::int64_t io_width_granule = 32;
[[nodiscard]] inline std::int64_t padded_io_width(std::int64_t width) {
    const std::int64_t at_least = std::max(width, io_width_granule);
    return (at_least + io_width_granule - 1) / io_width_granule * io_width_granule;
}
[[nodiscard]] inline std::int64_t surface_width_for(std::int64_t width, const lowering_options& options) {
    return options.native(lowering_feature::io_width) ? width : padded_io_width(width);
}

enum class placement : std::uint8_t { native, decomposed, host_only };

// A non-overlapping patch conv, as ViT, DeiT, CLIP and SigLIP embed their patches: kernel = stride, no
// padding, no dilation, one group, a kernel wider than 1x1 (x [N, C, H, W], weight [O, C, P, Q]). It is a
// space-to-depth rearrangement and a 1x1 conv (RUNTIME.md §0b #26), lowered so for every patch size
// (lowering_ops.hpp patch_conv_input) as long as each extent of the rearrangement fits max_dimension.
[[nodiscard]] inline bool is_patch_conv(const node& n, const dims& x, const dims& w,
                                        const lowering_options& options) {
    const attributes& a = n.attrs;
    if (a.groups != 1 || w[2] * w[3] == 1 || a.stride[0] != w[2] || a.stride[1] != w[3]) return false;
    for (const std::int64_t pad : a.padding)
        if (pad != 0) return false;
    for (const std::int64_t dilation : a.dilation)
        if (dilation != 1) return false;
    const std::int64_t rows = x[2] / w[2], columns = x[3] / w[3];
    for (const std::int64_t extent : {x[0] * x[1], rows, columns, x[1] * w[2] * w[3]})
        if (extent < 1 || extent > options.max_dimension) return false;
    return true;
}

struct support_result {
    placement where = placement::native;
    std::string reason;  // decomposed: into what; host_only: why
    // host_only because of what the value is, not of a Neural Engine limit: integer results (the ANE computes
    // fp16 only: embedding lookups, argmax) or nothing to compute. strict_device accepts these on the host.
    bool inherent = false;
};

// A value known on the host when lowering: a constant, or int8/LUT dequantisation or a float cast of one.
[[nodiscard]] inline bool is_host_constant(const graph_body& body, value_id id) {
    const node& n = body.nodes.at(id);
    switch (n.kind) {
        case op::constant:
            return true;
        case op::dequantize_int8:
        case op::dequantize_lut:
        case op::dequantize_ggml:
        case op::cast:
            if (n.kind == op::cast && !is_floating(n.result.type)) return false;
            for (const value_id input : n.inputs)
                if (!is_host_constant(body, input)) return false;
            return true;
        default:
            return false;
    }
}

// The values of a host constant as f32, row-major in its shape (dequantisation folded as the CPU reference
// computes it: (q - zero_point[c]) * scale[c]; lut[g, index], g the group of c).
[[nodiscard]] inline std::vector<float> host_constant_values(const graph_body& body, value_id id) {
    const node& n = body.nodes.at(id);
    if (n.kind == op::constant) {
        std::vector<float> values(n.data.element_count());
        convert_to_f32(n.data.type(), n.data.raw(), values.size(), values.data(), conversion_path::portable);
        return values;
    }
    if (!is_host_constant(body, id)) {
        throw error(message("ane lowering: value ", id, " (", op_name(n.kind), ") is not a host constant"));
    }
    if (n.kind == op::cast) return host_constant_values(body, n.inputs[0]);
    const std::vector<float> first = host_constant_values(body, n.inputs[0]);
    if (n.kind == op::dequantize_ggml) {
        std::vector<float> values(static_cast<std::size_t>(n.result.shape.element_count()));
        cpu::reference::dequantize_ggml<float>({first.data(), body.nodes[n.inputs[0]].result.shape},
                                               n.attrs.ggml_type, {values.data(), n.result.shape});
        return values;
    }
    const std::vector<float> table = host_constant_values(body, n.inputs[1]);
    const dims& shape = body.nodes[n.inputs[0]].result.shape;
    std::vector<float> values(first.size());
    if (n.kind == op::dequantize_int8) {
        const std::vector<float> zero =
            n.inputs.size() > 2 ? host_constant_values(body, n.inputs[2]) : std::vector<float>(table.size());
        const auto axis = static_cast<std::size_t>(n.attrs.axis);
        std::int64_t inner = 1;
        for (std::size_t a = axis + 1; a < shape.rank(); ++a)
            inner *= shape[a];
        const std::int64_t channels = shape[axis];
        for (std::size_t i = 0; i < values.size(); ++i) {
            const auto c = static_cast<std::size_t>((static_cast<std::int64_t>(i) / inner) % channels);
            values[i] = (first[i] - zero[c]) * table[c];
        }
        return values;
    }
    const dims& lut_shape = body.nodes[n.inputs[1]].result.shape;
    const auto length = static_cast<std::size_t>(lut_shape[lut_shape.rank() - 1]);
    const std::size_t slice = lut_shape.rank() == 2 && shape.rank() > 0
                                  ? values.size() / static_cast<std::size_t>(lut_shape[0])
                                  : values.size();
    for (std::size_t i = 0; i < values.size(); ++i) {
        const float index = first[i];
        if (!(index >= 0.0f && index < static_cast<float>(length) && std::trunc(index) == index)) {
            throw error(message("dequantize_lut: index ", index, " (element ", i,
                                ") is out of range for the table ", lut_shape,
                                " (expected a whole number in [0, ", length, "))"));
        }
        const std::size_t channel = slice == 0 ? 0 : i / slice;
        values[i] = table[channel * length + static_cast<std::size_t>(index)];
    }
    return values;
}

// The [1, C, 1, S] view of a value with its last axis as channels (C) and the rest flattened (S).
struct surface_extents {
    std::int64_t channels = 1;   // the last extent
    std::int64_t positions = 1;  // the product of the leading extents
};
[[nodiscard]] inline surface_extents surface_extents_of(const dims& shape) {
    surface_extents result;
    if (shape.rank() == 0) return result;
    result.channels = shape[shape.rank() - 1];
    for (std::size_t a = 0; a + 1 < shape.rank(); ++a)
        result.positions *= shape[a];
    return result;
}

struct op_lowering {
    placement where;
    std::string_view summary;
};

inline constexpr std::array<op_lowering, op_count> op_lowerings{{
    {placement::native, "a function input surface [1, C, 1, W]"},
    {placement::native, "an fp16 const (inline below 10 elements, else a BLOBFILE weight)"},
    {placement::native, "relu"},
    {placement::decomposed,
     "0.5 * x * (1 + erf(x / sqrt(2))) (gelu is rejected by ANECCompile, RUNTIME.md §6)"},
    {placement::decomposed, "0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3)))"},
    {placement::decomposed, "x * sigmoid(1.702 x)"},
    {placement::decomposed, "x * sigmoid(x)"},
    {placement::native, "sigmoid"},
    {placement::native, "tanh"},
    {placement::native, "exp"},
    {placement::native, "log"},
    {placement::native, "sqrt"},
    {placement::decomposed, "pow(x, -0.5) (rsqrt is rejected, RUNTIME.md §6)"},
    {placement::native, "abs"},
    {placement::decomposed, "mul(x, -1)"},
    {placement::native, "erf"},
    {placement::host_only,
     "floor is not among the MIL ops the Neural Engine is known to run (mil_ops.json); no rewrite is exact "
     "there, as its fp16 rounding ties up (RUNTIME.md §6)"},
    {placement::host_only,
     "ceil is not among the MIL ops the Neural Engine is known to run (mil_ops.json); no rewrite is exact "
     "there, as its fp16 rounding ties up (RUNTIME.md §6)"},
    {placement::host_only,
     "round is not among the MIL ops the Neural Engine is known to run (mil_ops.json); no rewrite is exact "
     "there, as its fp16 rounding ties up (RUNTIME.md §6), not to even"},
    {placement::decomposed, "select(greater(x, 0), 1, select(less(x, 0), -1, x))"},
    {placement::host_only,
     "sin is not verified on any Neural Engine, and is reported unusable on M5 / macOS 26.5 (RUNTIME.md "
     "§0 #9)"},
    {placement::host_only,
     "cos is not verified on any Neural Engine, and is reported unusable on M5 / macOS 26.5 (RUNTIME.md "
     "§0 #9)"},
    {placement::native, "clip (maximum then minimum when min >= max)"},
    {placement::decomposed, "nothing: a cast between float types is a no-op, every value is fp16"},
    {placement::native, "add"},
    {placement::native, "sub"},
    {placement::native, "mul"},
    {placement::native, "real_div"},
    {placement::native, "pow"},
    {placement::native, "maximum"},
    {placement::native, "minimum"},
    {placement::decomposed, "select(equal(x, y), 1, 0): booleans are held as fp16 1 and 0"},
    {placement::decomposed, "select(less(x, y), 1, 0): booleans are held as fp16 1 and 0"},
    {placement::decomposed, "select(less_equal(x, y), 1, 0): booleans are held as fp16 1 and 0"},
    {placement::decomposed, "select(greater(x, y), 1, 0): booleans are held as fp16 1 and 0"},
    {placement::decomposed, "select(greater_equal(x, y), 1, 0): booleans are held as fp16 1 and 0"},
    {placement::decomposed,
     "mul(a, b) of booleans held as fp16 1 and 0 (MIL's logical ops take bool tensors)"},
    {placement::decomposed, "maximum(a, b) of booleans held as fp16 1 and 0"},
    {placement::decomposed, "select(not_equal(a, b), 1, 0) of booleans held as fp16 1 and 0"},
    {placement::decomposed, "sub(1, x) of a boolean held as fp16 1 or 0"},
    {placement::decomposed, "select(not_equal(c, 0), a, b)"},
    {placement::decomposed, "one MIL op (or pattern) per step"},
    {placement::native, "matmul with transpose_x / transpose_y as named consts"},
    {placement::native, "1x1 conv on [1, K, 1, S] (weight [N, K, 1, 1]) + add of a [1, N, 1, 1] bias"},
    {placement::native, "conv (pad_type custom) + add of a [1, O, 1, 1] bias"},
    {placement::native, "max_pool (pad_type custom)"},
    {placement::native, "avg_pool (pad_type custom)"},
    {placement::native, "upsample_nearest_neighbor with integer scale factors"},
    {placement::native, "upsample_bilinear with integer scale factors"},
    {placement::native, "layer_norm over the channel axis of [1, C, 1, S]"},
    {placement::decomposed,
     "layer_norm over concat([x, -x]) keeping the first half, times the weight (MIL.md §2.6)"},
    {placement::decomposed,
     "reshape to [N, G, C/G * spatial], layer_norm, reshape back, per-channel mul and add"},
    {placement::decomposed,
     "mul and add of [1, C, 1, 1] scale and shift folded from the constant statistics"},
    {placement::native,
     "softmax (+ add of the mask); reduce_max, sub, exp, reduce_sum, real_div past softmax_max_axis"},
    {placement::native, "reduce_sum with keep_dims as a named const"},
    {placement::native, "reduce_mean with keep_dims as a named const"},
    {placement::native, "reduce_max with keep_dims as a named const"},
    {placement::native, "reduce_min with keep_dims as a named const"},
    {placement::host_only,
     "reduce_prod is not among the MIL ops the Neural Engine is known to run (mil_ops.json), and is "
     "reported unsupported there (RUNTIME.md §6, CONSTRAINTS.md)"},
    {placement::host_only, "argmax gives integer indices; the ANE computes fp16 only"},
    {placement::host_only,
     "cumsum is a MIL op (mil_ops.json), but nothing shows the Neural Engine runs it (RUNTIME.md, "
     "CONSTRAINTS.md) and the ANE simulator does not execute it"},
    {placement::native, "reshape"},
    {placement::native, "transpose"},
    {placement::native, "concat (interleave = false)"},
    {placement::native, "slice_by_index"},
    {placement::native, "pad (mode constant)"},
    {placement::host_only, "gather reads integer indices (embedding lookup runs on the host, MIL.md §2.5)"},
    {placement::host_only,
     "gather_elements reads integer indices (MIL's gather_along_axis runs on the CPU under Core ML, MIL.md "
     "§2.5)"},
    {placement::host_only,
     "scatter_add reads integer indices and is not among the MIL ops the Neural Engine is known to run "
     "(mil_ops.json); an embedding's weight gradient is host work, as the ANE trainers keep dW on the CPU"},
    {placement::decomposed,
     "mul(q, scale), matmul(transpose_y), add of the mask and a -1e4 causal mask, softmax, matmul (SDPA "
     "masks are "
     "ignored, RUNTIME.md §6); grouped-query heads by reshaping q to [B, Hkv, G * Sq, D]"},
    {placement::decomposed, "slice_by_index, mul, sub, add, concat"},
    {placement::decomposed, "folded into an fp16 constant at lowering"},
    {placement::decomposed, "folded into an fp16 constant at lowering"},
    {placement::decomposed, "folded into an fp16 constant at lowering (the blocks dequantised exactly)"},
}};

[[nodiscard]] inline placement default_placement(op kind) {
    return op_lowerings.at(static_cast<std::size_t>(kind)).where;
}
[[nodiscard]] inline std::string_view lowering_summary(op kind) {
    return op_lowerings.at(static_cast<std::size_t>(kind)).summary;
}

// Whether values of `type` live on the Neural Engine: floats in fp16, and booleans as fp16 1 and 0 (exact,
// and how the CPU holds them too, as f32 1 and 0).
[[nodiscard]] inline bool held_in_fp16(dtype type) {
    return is_floating(type) || type == dtype::boolean;
}

namespace support_detail {

// Why a value cannot live on the ANE (empty when it can): its type, rank or extents.
inline std::string value_problem(const graph_body& body, value_id id, const lowering_options& options) {
    const node& n = body.nodes[id];
    const dims& shape = n.result.shape;
    if (!held_in_fp16(n.result.type)) {
        return message(describe_node(body, id), " is not floating point; the ANE computes in fp16 only");
    }
    if (shape.rank() > 5)
        return message(describe_node(body, id), " has rank ", shape.rank(), "; the ANE allows at most 5");
    for (std::size_t a = 0; a < shape.rank(); ++a) {
        if (shape[a] > options.max_dimension) {
            return message(describe_node(body, id), " has extent ", shape[a], " at axis ", a,
                           ", past the ANE's max_dimension ", options.max_dimension);
        }
    }
    const surface_extents surface = surface_extents_of(shape);
    if (surface.positions > options.max_dimension) {
        return message(describe_node(body, id), " flattens to ", surface.positions, " rows of ",
                       surface.channels, ", past max_dimension ", options.max_dimension,
                       " as a [1, C, 1, W] surface");
    }
    return {};
}

inline bool integer_scale(std::int64_t out, std::int64_t in) {
    return in > 0 && out % in == 0;
}

// Why a product of two computed tensors cannot be decomposed into a broadcast mul and a reduce_sum (the
// variant for chips without matmul, RUNTIME.md §0 #4), or empty: the operands gain an axis, so they must have
// rank 4 or less, and the [..., M, K, N] intermediate must respect max_dimension.
inline std::string product_problem(const dims& a, const dims& b, bool transpose_a, bool transpose_b,
                                   const lowering_options& options) {
    const std::size_t rank = std::max(a.rank(), b.rank());
    if (rank > 4) {
        return message("a product of rank-", rank, " tensors decomposes through a rank-", rank + 1,
                       " intermediate; the ANE allows 5 at most");
    }
    const std::int64_t m = transpose_a ? a[a.rank() - 1] : a[a.rank() - 2];
    const std::int64_t k = transpose_a ? a[a.rank() - 2] : a[a.rank() - 1];
    const std::int64_t n = transpose_b ? b[b.rank() - 2] : b[b.rank() - 1];
    for (const std::int64_t extent : {m, k, n}) {
        if (extent > options.max_dimension) {
            return message("the decomposed product's intermediate has extent ", extent,
                           ", past max_dimension ", options.max_dimension);
        }
    }
    return {};
}

// The feature of an elementwise op with several lowerings, if it has one.
inline std::optional<lowering_feature> elementwise_feature(op kind) {
    switch (kind) {
        case op::exp:
            return lowering_feature::exp;
        case op::log:
            return lowering_feature::log;
        case op::sqrt:
            return lowering_feature::sqrt;
        case op::rsqrt:
            return lowering_feature::rsqrt;
        case op::gelu:
            return lowering_feature::gelu;
        default:
            return std::nullopt;
    }
}

inline std::string on_cpu_by_choice(lowering_feature f, const lowering_options& options) {
    return message("the lowering choices (", options.choices.source, ") run ", describe_feature(f).name,
                   " on the CPU: neither its native nor its decomposed form held on this Neural Engine");
}

}  // namespace support_detail

// Where node `id` of `body` runs and why.
[[nodiscard]] inline support_result supports(const graph_body& body, value_id id,
                                             const lowering_options& options) {
    using namespace support_detail;
    const node& n = body.nodes.at(id);
    const op kind = n.kind;
    const auto constant = [&](std::size_t i) {
        return i < n.inputs.size() && is_host_constant(body, n.inputs[i]);
    };
    const auto host = [](std::string reason) {
        return support_result{placement::host_only, std::move(reason)};
    };
    const auto integer_host = [](std::string reason) {
        return support_result{placement::host_only, std::move(reason), true};
    };
    const std::string name = message(op_name(kind), " node ", id);
    if (kind == op::input || kind == op::constant) return {placement::native, {}};
    if (kind == op::gather || kind == op::gather_elements || kind == op::scatter_add || kind == op::argmax)
        return integer_host(std::string(lowering_summary(kind)));
    if (kind == op::dequantize_int8 || kind == op::dequantize_lut || kind == op::dequantize_ggml) {
        if (is_host_constant(body, id)) return {placement::decomposed, std::string(lowering_summary(kind))};
        return integer_host(
            message(name,
                    ": the quantised weights are not constant, so they cannot be folded into fp16 "
                    "weights (the ANE has no integer arithmetic)"));
    }
    if (!held_in_fp16(n.result.type)) {
        return integer_host(message(name, ": ", describe_node(body, id),
                                    " is not floating point; the ANE computes in fp16 only"));
    }
    // A comparison of integers (indices, shapes) has a boolean result but integer work to do.
    for (std::size_t i = 0; n.result.type == dtype::boolean && i < n.inputs.size(); ++i) {
        const dtype type = body.nodes[n.inputs[i]].result.type;
        if (!constant(i) && !held_in_fp16(type)) {
            return integer_host(message(name, ": ", describe_node(body, n.inputs[i]),
                                        " is not floating point; the ANE computes in fp16 only"));
        }
    }
    if (kind == op::cast && is_host_constant(body, id))
        return {placement::decomposed, "folded into an fp16 constant"};
    // Every non-constant operand and the result must be an fp16-representable tensor the ANE can hold.
    std::string problem = value_problem(body, id, options);
    for (std::size_t i = 0; problem.empty() && i < n.inputs.size(); ++i) {
        if (!constant(i)) problem = value_problem(body, n.inputs[i], options);
    }
    if (!problem.empty()) {
        if ((kind == op::linear || kind == op::matmul) && is_floating(n.result.type)) {
            problem +=
                "; tiling the output extent does not help: the concatenated tiles would need that extent "
                "again";
        }
        return host(message(name, ": ", problem));
    }
    if (kind == op::cast && n.result.type == dtype::boolean)
        return {placement::decomposed, "select(not_equal(x, 0), 1, 0): a cast to bool is x != 0"};
    const auto x_shape = [&](std::size_t i) -> const dims& { return body.nodes[n.inputs[i]].result.shape; };
    switch (kind) {
        case op::conv2d: {
            if (!constant(1))
                return host(message(name, ": the weight is not constant (conv needs a const weight here)"));
            if (n.inputs.size() > 2 && !constant(2)) return host(message(name, ": the bias is not constant"));
            const dims& w = x_shape(1);
            if (is_patch_conv(n, x_shape(0), w, options)) {
                return {placement::decomposed,
                        message("a ", w[2], "x", w[3],
                                " patch conv (kernel = stride, no padding) as a space-to-depth reshape and "
                                "transpose and a 1x1 conv (RUNTIME.md §0b #26)")};
            }
            // Width 16 or more fails at every padding and grouping (EAB); ironmill caps kernels at 16x16.
            // Only the private compiler's rule: Core ML places such a conv itself (RUNTIME.md §0b #26).
            if ((w[3] >= 16 || w[2] > 16) && !options.core_ml_program) {
                return host(message(name, ": a ", w[2], "x", w[3],
                                    " kernel; conv kernels 16 or wider (or taller than 16) fail to compile "
                                    "(RUNTIME.md §0 #7), and only a patch conv (kernel = stride, no "
                                    "padding) is rewritten as a 1x1 conv"));
            }
            return {placement::native, {}};
        }
        case op::max_pool2d:
        case op::avg_pool2d: {
            const dims& x = x_shape(0);
            for (std::size_t i = 0; i < 2; ++i) {
                const std::int64_t floor_extent =
                    static_window_extent(x[2 + i], n.attrs.padding[2 * i], n.attrs.padding[2 * i + 1],
                                         n.attrs.kernel[i], n.attrs.stride[i], 1, false);
                if (floor_extent != n.result.shape[2 + i]) {
                    return host(
                        message(name, ": ceil_mode windows (PyTorch's rule) differ from MIL's pooling"));
                }
            }
            const lowering_feature f =
                kind == op::max_pool2d ? lowering_feature::max_pool : lowering_feature::avg_pool;
            switch (options.variant(f)) {
                case lowering_variant::native:
                    return {placement::native, {}};
                case lowering_variant::cpu:
                    return host(message(name, ": ", on_cpu_by_choice(f, options)));
                case lowering_variant::decomposed:
                    break;
            }
            const std::int64_t kh = n.attrs.kernel[0], kw = n.attrs.kernel[1];
            if (kind == op::max_pool2d && kh * kw > 64) {
                return host(message(name, ": a ", kh, "x", kw,
                                    " window is more than 64 slices; max_pool itself is reported rejected "
                                    "(RUNTIME.md §0 #5)"));
            }
            if (kind == op::avg_pool2d && (kw >= 16 || kh > 16)) {
                return host(
                    message(name, ": a ", kh, "x", kw,
                            " window needs a conv kernel that wide, which fails to compile (RUNTIME.md "
                            "§0 #7), and avg_pool itself is reported rejected (§0 #5)"));
            }
            return {placement::decomposed, std::string(describe_feature(f).decomposed)};
        }
        case op::upsample_nearest:
        case op::upsample_bilinear: {
            const dims& x = x_shape(0);
            if (!integer_scale(n.result.shape[2], x[2]) || !integer_scale(n.result.shape[3], x[3])) {
                return host(message(name, ": resizing ", x, " to ", n.result.shape,
                                    " is not by integer scale factors (only those lower to MIL exactly)"));
            }
            return {placement::native, {}};
        }
        case op::layer_norm:
            if (!constant(1) && n.inputs.size() > 1)
                return host(message(name, ": the weight is not constant"));
            if (!constant(2) && n.inputs.size() > 2) return host(message(name, ": the bias is not constant"));
            return {placement::native, {}};
        case op::rms_norm: {
            const dims& x = x_shape(0);
            if (2 * x[x.rank() - 1] > options.max_dimension) {
                return host(message(name, ": the exact decomposition concatenates [x, -x] to ",
                                    2 * x[x.rank() - 1], " features, past max_dimension ",
                                    options.max_dimension));
            }
            break;
        }
        case op::group_norm: {
            const dims& x = x_shape(0);
            for (std::size_t i = 1; i < n.inputs.size(); ++i)
                if (!constant(i)) return host(message(name, ": the weight and bias must be constants"));
            const auto group = static_cast<std::int64_t>(x.element_count()) / (x[0] * n.attrs.groups);
            if (group > options.max_dimension) {
                return host(message(name, ": a group holds ", group, " elements, past max_dimension ",
                                    options.max_dimension, " as one axis"));
            }
            break;
        }
        case op::batch_norm:
            for (std::size_t i = 1; i < n.inputs.size(); ++i)
                if (!constant(i))
                    return host(message(name, ": the statistics, weight and bias must be constants"));
            break;
        case op::softmax: {
            const std::int64_t extent = n.result.shape[static_cast<std::size_t>(n.attrs.axis)];
            const bool long_axis = extent > options.softmax_max_axis;
            const lowering_variant v = options.variant(lowering_feature::softmax);
            if (v == lowering_variant::cpu && !long_axis)
                return host(message(name, ": ", on_cpu_by_choice(lowering_feature::softmax, options)));
            if ((long_axis || v == lowering_variant::decomposed) &&
                options.variant(lowering_feature::exp) == lowering_variant::cpu) {
                return host(message(name, ": its decomposition needs exp, and ",
                                    on_cpu_by_choice(lowering_feature::exp, options)));
            }
            if (long_axis) {
                return {placement::decomposed,
                        message("reduce_max, sub, exp, reduce_sum, real_div: the axis has ", extent,
                                " elements, past softmax_max_axis ", options.softmax_max_axis,
                                " (the ANE normalises long softmax axes per tile, RUNTIME.md §6)")};
            }
            if (v == lowering_variant::decomposed)
                return {placement::decomposed,
                        std::string(describe_feature(lowering_feature::softmax).decomposed)};
            return {placement::native, {}};
        }
        case op::attention: {
            const dims& q = x_shape(0);
            const dims& k = x_shape(1);
            if (n.attrs.causal && q[2] > k[2]) {
                return host(message(name, ": causal attention with more queries (", q[2], ") than keys (",
                                    k[2],
                                    ") leaves rows fully masked, which the finite ANE mask cannot express"));
            }
            if (k[2] > options.max_dimension) {
                return host(message(name, ": ", k[2], " keys exceed max_dimension ", options.max_dimension));
            }
            const lowering_variant v = options.variant(lowering_feature::matmul);
            if (v == lowering_variant::cpu)
                return host(message(name, ": ", on_cpu_by_choice(lowering_feature::matmul, options)));
            if (v == lowering_variant::decomposed) {
                const std::int64_t rows = (q[1] / k[1]) * q[2];  // grouped queries per key head
                const dims& vs = x_shape(2);
                std::string why = product_problem(dims{q[0], k[1], rows, q[3]}, k, false, true, options);
                if (why.empty())
                    why = product_problem(dims{q[0], k[1], rows, k[2]}, vs, false, false, options);
                if (!why.empty()) return host(message(name, ": ", why));
                if (options.variant(lowering_feature::softmax) != lowering_variant::native &&
                    options.variant(lowering_feature::exp) == lowering_variant::cpu)
                    return host(message(name, ": its softmax needs exp, and ",
                                        on_cpu_by_choice(lowering_feature::exp, options)));
                return {
                    placement::decomposed,
                    "q k^T and weights v as broadcast mul and reduce_sum (no matmul on this Neural Engine, "
                    "RUNTIME.md §0 #4), the mask added, softmax"};
            }
            if (options.variant(lowering_feature::softmax) == lowering_variant::cpu)
                return host(message(name, ": ", on_cpu_by_choice(lowering_feature::softmax, options)));
            break;
        }
        case op::matmul:
        case op::linear: {
            if (kind == op::linear && constant(1)) break;  // a 1x1 conv
            const lowering_variant v = options.variant(lowering_feature::matmul);
            if (v == lowering_variant::cpu)
                return host(message(name, ": ", on_cpu_by_choice(lowering_feature::matmul, options)));
            if (v == lowering_variant::native) break;
            const bool ta = kind == op::matmul && n.attrs.transpose_a;
            const bool tb = kind == op::linear || n.attrs.transpose_b;
            if (std::string why = product_problem(x_shape(0), x_shape(1), ta, tb, options); !why.empty())
                return host(message(name, ": ", why));
            return {placement::decomposed,
                    std::string(describe_feature(lowering_feature::matmul).decomposed)};
        }
        case op::fused_elementwise:
            for (const fused_step& step : n.attrs.steps) {
                if (const auto f = elementwise_feature(step.kind);
                    f && options.variant(*f) == lowering_variant::cpu)
                    return host(message(name, ": its step ", op_name(step.kind), ": ",
                                        on_cpu_by_choice(*f, options)));
            }
            break;
        case op::exp:
        case op::log:
        case op::sqrt:
        case op::rsqrt:
        case op::gelu:
        case op::reduce_mean: {
            const lowering_feature f =
                kind == op::reduce_mean ? lowering_feature::reduce_mean : *elementwise_feature(kind);
            switch (options.variant(f)) {
                case lowering_variant::native:
                    return {placement::native, {}};
                case lowering_variant::decomposed:
                    return {placement::decomposed, std::string(describe_feature(f).decomposed)};
                case lowering_variant::cpu:
                    return host(message(name, ": ", on_cpu_by_choice(f, options)));
            }
            break;
        }
        case op::rotary:
            if (n.attrs.interleaved && x_shape(0).rank() > 4) {
                return host(message(name, ": the interleaved form needs rank ", x_shape(0).rank() + 1,
                                    " (pairs as a last axis of 2); the ANE allows at most 5"));
            }
            break;
        default:
            break;
    }
    const placement where = default_placement(kind);
    return {where, where == placement::native ? std::string{} : std::string(lowering_summary(kind))};
}

}  // namespace anvil::detail::ane
