// anvil: lowering one ANE segment of a graph — a run of supported nodes — to MIL text plus its weight files,
// with the [1, C, 1, W] fp16 surfaces its inputs and outputs bind to (RUNTIME.md §3: symbols bind in
// alphabetical order, so inputs are named "in000_<name>"... and outputs "out000"..., making that order the
// binding order).
//
// Layout: every value is held logically (its IR shape) or channels-first ([1, C, 1, S], C its last extent,
// S the rest), see lowering_context.hpp. A boundary value is packed by the host in `rows` order (C = the
// leading extents, W = the last: the IR's memory order) or `columns` order (C = the last extent, W = the
// rest: channels-first, the host transposes while packing), whichever the segment consumes or produces, so
// a linear at a segment's edge needs no transpose inside the program — unless the other order pads less: the
// innermost dimension of every input and output is padded to a multiple of 32 (RUNTIME.md §0 #3), sliced off
// inside the program for inputs and padded with zeros for outputs.
//
// Tiling: a linear or matmul whose output extent N exceeds max_dimension would be split into tiles of at most
// max_dimension outputs, but the concatenated result has extent N again, which every layout (and the
// [1, C, 1, W] surface) forbids; supports() therefore marks such nodes host_only and the partitioner runs
// them on the CPU. Nothing is tiled.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "anvil/backend/ane/lowering_context.hpp"
#include "anvil/backend/ane/lowering_elementwise.hpp"
#include "anvil/backend/ane/lowering_ops.hpp"
#include "anvil/backend/ane/support.hpp"
#include "anvil/backend/ane/weight_file.hpp"

namespace anvil::detail::ane {

// rows: C = product of the leading extents, W = the last extent; columns: C = the last extent, W = the
// product of the leading ones (channels-first; the host transposes while packing).
enum class surface_order : std::uint8_t { rows, columns };

// An input or output surface: the value's [1, channels, 1, width] form, declared to the program as
// [1, channels, 1, surface_width] (the width padded to the I/O width rule; the program slices the padding off
// inputs and pads outputs), channel c at c * channel_stride bytes: round_up(surface_width * 2, 64) as the
// lowering assumes, replaced by the compiled program's PlaneStride once it is loaded (RUNTIME.md §0 #8).
struct surface_layout {
    std::string symbol;
    value_id value = 0;
    dims shape;  // the value's IR shape
    surface_order order = surface_order::rows;
    std::int64_t channels = 1, width = 1;
    std::int64_t surface_width = 1;  // >= width
    std::size_t channel_stride = 0;  // bytes

    [[nodiscard]] std::size_t bytes() const noexcept {
        return static_cast<std::size_t>(channels) * channel_stride;
    }
};

struct lowered_segment {
    std::string mil;       // the program as MIL text (the private path compiles this)
    mil_function program;  // the same program in memory (Core ML's protobuf is written from it)
    std::vector<mil_ref> program_outputs;  // its results, in output order
    std::vector<weight_file> weights;
    std::vector<surface_layout> inputs, outputs;  // each in binding order: sorted by symbol
    bool anchored = false;  // holds a conv or matmul, which every ANE program needs (RUNTIME.md §0 #6)
    std::size_t padded_surfaces = 0;  // inputs and outputs whose width the I/O width rule padded
};

namespace lowering_detail {

inline surface_layout make_surface(std::string symbol, value_id value, const dims& shape, surface_order order,
                                   const lowering_options& options) {
    const surface_extents s = surface_extents_of(shape);
    surface_layout layout{std::move(symbol), value, shape, order, 1, 1, 1, 0};
    layout.channels = order == surface_order::rows ? s.positions : s.channels;
    layout.width = order == surface_order::rows ? s.channels : s.positions;
    layout.surface_width = surface_width_for(layout.width, options);
    layout.channel_stride = weight_blob_writer::round_up(static_cast<std::size_t>(layout.surface_width) * 2);
    return layout;
}

// The order a boundary value's surface takes: the one its readers (or producer) prefer, unless padding to the
// I/O width makes the other move fewer bytes (a decode step's [1, C] moves as [1, 1, 1, C], not as
// [1, C, 1, 32]).
inline surface_order cheaper_order(surface_order preferred, const dims& shape,
                                   const lowering_options& options) {
    if (options.native(lowering_feature::io_width)) return preferred;
    const auto padded_bytes = [&](surface_order order) {
        const surface_layout layout = make_surface({}, 0, shape, order, options);
        return layout.bytes();
    };
    const surface_order other =
        preferred == surface_order::rows ? surface_order::columns : surface_order::rows;
    return padded_bytes(other) < padded_bytes(preferred) ? other : preferred;
}

// Whether some node of the segment reads `value` as the activation of a channels-first op.
inline bool consumed_channels_first(segment_lowering& L, std::span<const value_id> nodes, value_id value) {
    if (!L.channels_first_fits(L.ir_shape(value))) return false;
    // Through elementwise ops of the same shape (which run in either layout) to the first linear or norm: an
    // input that a GELU feeds into a layer_norm arrives channels-first, with no transpose inside the program.
    std::vector<value_id> frontier{value};
    for (int depth = 0; depth < 8 && !frontier.empty(); ++depth) {
        std::vector<value_id> next;
        for (const value_id v : frontier) {
            for (const value_id id : nodes) {
                const node& n = L.at(id);
                if (n.inputs.empty()) continue;
                if (n.inputs[0] == v) {
                    if (n.kind == op::linear && L.is_constant(n.inputs[1]) &&
                        L.channels_first_fits(n.result.shape))
                        return true;
                    if (n.kind == op::layer_norm || n.kind == op::rms_norm) return true;
                }
                const bool reads = std::find(n.inputs.begin(), n.inputs.end(), v) != n.inputs.end();
                const op_category category = info(n.kind).category;
                if (reads && (category == op_category::unary || category == op_category::binary) &&
                    n.kind != op::cast && n.result.shape == L.ir_shape(v)) {
                    next.push_back(id);
                }
            }
        }
        frontier = std::move(next);
    }
    return false;
}

inline void lower_node(segment_lowering& L, value_id id) {
    const node& n = L.at(id);
    if (L.is_constant(id)) return;  // constants (and folded dequantisation) are emitted where they are read
    switch (n.kind) {
        case op::input:
        case op::constant:
            throw error(
                message("ane lowering: ", L.describe(id), " is a leaf, not a compute node of a segment"));
        case op::cast:
            L.alias(id, n.inputs[0]);  // every value is fp16 on the ANE
            return;
        case op::linear:
            return lower_linear(L, id);
        case op::matmul: {
            const mil_ref a = L.logical(n.inputs[0]);  // one statement each: a deterministic order
            const mil_ref b = L.logical(n.inputs[1]);
            const mil_ref out =
                lowering_detail::matmul(L, a, b, n.attrs.transpose_a, n.attrs.transpose_b, L.base(id));
            return L.set_form(id, value_layout::logical, out);
        }
        case op::conv2d:
            return lower_conv2d(L, id);
        case op::max_pool2d:
        case op::avg_pool2d:
            return lower_pool(L, id);
        case op::upsample_nearest:
        case op::upsample_bilinear:
            return lower_upsample(L, id);
        case op::layer_norm:
        case op::rms_norm:
            return lower_last_axis_norm(L, id);
        case op::group_norm:
            return lower_group_norm(L, id);
        case op::batch_norm:
            return lower_batch_norm(L, id);
        case op::softmax:
            return lower_softmax(L, id);
        case op::reduce_sum:
        case op::reduce_mean:
        case op::reduce_max:
            return lower_reduction(L, id);
        case op::reshape:
        case op::permute:
        case op::concat:
        case op::slice:
        case op::pad:
            return lower_data_movement(L, id);
        case op::attention:
            return lower_attention(L, id);
        case op::rotary:
            return lower_rotary(L, id);
        case op::argmax:
        case op::gather:
        case op::dequantize_int8:
        case op::dequantize_lut:
            throw unsupported_error(message("ane lowering: ", L.describe(id), " runs on the host"));
        default:
            return lower_elementwise(L, id);
    }
}

}  // namespace lowering_detail

// Lowers `nodes` (topological order, all supported) reading `inputs` (graph inputs or other segments'
// results, never constants) and producing `outputs`. Throws unsupported_error naming the node when one is
// host_only, error when the segment is malformed.
[[nodiscard]] inline lowered_segment lower(const graph_body& body, std::span<const value_id> nodes,
                                           std::span<const value_id> inputs,
                                           std::span<const value_id> outputs,
                                           const lowering_options& options) {
    using namespace lowering_detail;
    if (inputs.size() > 1000 || outputs.size() > 1000) {
        throw unsupported_error(message("ane lowering: ", inputs.size(), " inputs and ", outputs.size(),
                                        " outputs; at most 1000 each (symbols have three digits)"));
    }
    segment_lowering L(body, options);
    for (const value_id id : nodes) {
        if (id >= body.nodes.size()) throw error(message("ane lowering: node ", id, " is not in the graph"));
        const support_result support = supports(body, id, options);
        if (support.where == placement::host_only) {
            throw unsupported_error(message("ane lowering: ", support.reason));
        }
    }
    lowered_segment segment;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        const value_id id = inputs[i];
        if (id >= body.nodes.size() || L.is_constant(id)) {
            throw error(message("ane lowering: segment input ", id,
                                " is not a computed value (constants are embedded, not passed)"));
        }
        const node& n = L.at(id);
        const std::string label = n.kind == op::input ? n.name : L.base(id);
        char prefix[32];
        std::snprintf(prefix, sizeof prefix, "in%03zu_", i);
        const std::string symbol = prefix + sanitise_mil_name(label);
        const surface_order order = cheaper_order(
            consumed_channels_first(L, nodes, id) ? surface_order::columns : surface_order::rows,
            n.result.shape, options);
        surface_layout surface = make_surface(symbol, id, n.result.shape, order, options);
        mil_ref ref = L.mil().input(symbol, {1, surface.channels, 1, surface.surface_width});
        if (surface.surface_width != surface.width) {
            // The host pads the width (RUNTIME.md §0 #3); the program reads only the value.
            ref = L.slice_axis(ref, 3, 0, surface.width, symbol + "_unpadded");
            ++segment.padded_surfaces;
        }
        L.set_base(id, symbol);
        if (order == surface_order::columns) {
            L.set_form(id, value_layout::channels_first, ref);
        } else {
            L.set_rows(id, ref);
        }
        segment.inputs.push_back(std::move(surface));
    }
    for (const value_id id : nodes)
        lower_node(L, id);
    std::vector<mil_ref> results;
    for (std::size_t i = 0; i < outputs.size(); ++i) {
        const value_id id = outputs[i];
        if (id >= body.nodes.size())
            throw error(message("ane lowering: output ", id, " is not in the graph"));
        char symbol[32];
        std::snprintf(symbol, sizeof symbol, "out%03zu", i);
        const dims& shape = L.ir_shape(id);
        // Channels-first results leave as columns (no transpose in the program), others as rows.
        const surface_order order = cheaper_order(
            L.has_channels_first(id) ? surface_order::columns : surface_order::rows, shape, options);
        mil_ref ref = order == surface_order::columns ? L.channels_first(id) : L.rows(id);
        surface_layout surface = make_surface(symbol, id, shape, order, options);
        if (surface.surface_width != surface.width) {
            ref = L.pad_axis(ref, 3, surface.surface_width - surface.width, symbol);
            ++segment.padded_surfaces;
        } else {
            const bool taken = std::find(results.begin(), results.end(), ref) != results.end();
            if (taken || !L.mil().rename(ref, symbol)) {
                ref = L.reshape(ref, L.mil().shape(ref), symbol, true);  // a copy under the output's name
            }
        }
        results.push_back(ref);
        segment.outputs.push_back(std::move(surface));
    }
    segment.mil = L.mil().text(results);
    segment.program = L.mil().function();
    segment.program_outputs = results;
    segment.weights = L.mil().weights();
    segment.anchored =
        L.mil().count_ops("conv") + L.mil().count_ops("matmul") + L.mil().count_ops("linear") > 0;
    return segment;
}

}  // namespace anvil::detail::ane
