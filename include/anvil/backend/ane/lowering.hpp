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
#include <map>
#include <optional>
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
    // A Core ML state (lowering_options::state_inputs): an MLState buffer of [1, channels, 1, surface_width]
    // the host writes in place, its width a multiple of 32 (COREML.md §4.5); the program reads it with
    // read_state. channel_stride is then the buffer's, which Core ML reports at each access.
    bool state = false;
    // An input packed with others into one surface (lowering_options::pack_inputs): `symbol` is the packed
    // input's, whose channels first_channel .. first_channel + channels hold this value. Every access to a
    // surface adds first_channel * channel_stride (surface_packing.hpp).
    bool packed = false;
    std::int64_t first_channel = 0;

    [[nodiscard]] std::size_t bytes() const noexcept {
        return static_cast<std::size_t>(channels) * channel_stride;
    }
    [[nodiscard]] std::size_t offset() const noexcept {
        return static_cast<std::size_t>(first_channel) * channel_stride;
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
            if (n.result.type == dtype::boolean) {  // x != 0, as 1 or 0 (booleans are fp16 1 and 0 here)
                const mil_ref x = L.logical(n.inputs[0]);
                const mil_ref zero = L.scalar(0.0f, L.base(id) + "_zero");
                return L.set_form(id, value_layout::logical,
                                  compare_in_fp16(L, "not_equal", x, zero, L.base(id)));
            }
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
        case op::reduce_min:
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
        case op::reduce_prod:
        case op::argmax:
        case op::cumsum:
        case op::gather:
        case op::gather_elements:
        case op::scatter_add:
        case op::floor:
        case op::ceil:
        case op::round:
        case op::sin:
        case op::cos:
        case op::dequantize_int8:
        case op::dequantize_lut:
        case op::dequantize_ggml:
            throw unsupported_error(message("ane lowering: ", L.describe(id), " runs on the host"));
        default:
            return lower_elementwise(L, id);
    }
}

// Inputs that share one surface: `members` index the segment's inputs, laid one after another along the
// channel axis of [1, channels, 1, W].
struct input_pack {
    std::string symbol;
    std::vector<std::size_t> members;
    std::int64_t channels = 0;
};

// Packs small inputs into shared surfaces (lowering_options::pack_inputs). Every input surface of a program
// gets the allocation size of the largest (RUNTIME.md §3, ORI #12), so a program reading a [768, 128]
// activation, a [1, 128] mask and [64, 128] rotary tables would allocate three surfaces of the activation's
// size; packed, the mask and the tables share one. Inputs of one surface width are packed smallest first
// while the pack stays no larger than the largest input, so no surface grows; states, values another ANE
// program hands over in its own surface (lowering_options::unpacked_inputs) and inputs alone in their
// width keep their own. Marks the members (symbol, packed, first_channel) and returns the packs.
inline std::vector<input_pack> pack_inputs(std::vector<surface_layout>& surfaces,
                                           const lowering_options& options) {
    std::vector<input_pack> packs;
    if (!options.pack_inputs || surfaces.size() < 3) return packs;  // two inputs share nothing worth packing
    std::size_t largest = 0;
    for (const auto& s : surfaces)
        largest = std::max(largest, s.bytes());
    std::map<std::int64_t, std::vector<std::size_t>> by_width;
    for (std::size_t i = 0; i < surfaces.size(); ++i) {
        const surface_layout& s = surfaces[i];
        const bool own = std::find(options.unpacked_inputs.begin(), options.unpacked_inputs.end(), s.value) !=
                         options.unpacked_inputs.end();
        if (s.state || own || s.bytes() >= largest) continue;
        by_width[s.surface_width].push_back(i);
    }
    for (auto& [width, members] : by_width) {
        std::stable_sort(members.begin(), members.end(), [&](std::size_t a, std::size_t b) {
            return surfaces[a].bytes() < surfaces[b].bytes();
        });
        std::size_t begin = 0;
        while (begin < members.size()) {
            // Smallest first, as many as fit in the largest input's bytes.
            std::size_t end = begin, bytes = 0;
            while (end < members.size() && bytes + surfaces[members[end]].bytes() <= largest)
                bytes += surfaces[members[end++]].bytes();
            if (end - begin < 2) break;  // the rest are each too large to share
            input_pack pack;
            pack.members.assign(members.begin() + static_cast<std::ptrdiff_t>(begin),
                                members.begin() + static_cast<std::ptrdiff_t>(end));
            std::sort(pack.members.begin(), pack.members.end());
            char symbol[32];
            std::snprintf(symbol, sizeof symbol, "in%03zu_packed", pack.members.front());
            pack.symbol = symbol;
            for (const std::size_t i : pack.members) {
                surfaces[i].packed = true;
                surfaces[i].first_channel = pack.channels;
                pack.channels += surfaces[i].channels;
            }
            packs.push_back(std::move(pack));
            begin = end;
        }
    }
    return packs;
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
    std::vector<surface_layout> surfaces;
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
        const surface_order order = cheaper_order(
            consumed_channels_first(L, nodes, id) ? surface_order::columns : surface_order::rows,
            n.result.shape, options);
        surfaces.push_back(
            make_surface(prefix + sanitise_mil_name(label), id, n.result.shape, order, options));
        surfaces.back().state = std::find(options.state_inputs.begin(), options.state_inputs.end(), id) !=
                                options.state_inputs.end();
    }
    const std::vector<input_pack> packs = pack_inputs(surfaces, options);
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        surface_layout& surface = surfaces[i];
        if (surface.packed) {
            // Declared where its first member would be; each member is a slice of its channels.
            const auto pack = std::find_if(packs.begin(), packs.end(),
                                           [&](const input_pack& p) { return p.members.front() == i; });
            if (pack != packs.end()) {
                const mil_ref whole =
                    L.mil().input(pack->symbol, {1, pack->channels, 1, surface.surface_width});
                for (const std::size_t m : pack->members) {
                    surface_layout& member = surfaces[m];
                    const std::string own = member.symbol;
                    member.symbol = pack->symbol;
                    mil_ref ref = L.slice_axis(whole, 1, member.first_channel,
                                               member.first_channel + member.channels, own + "_unpacked");
                    if (member.surface_width != member.width) {
                        ref = L.slice_axis(ref, 3, 0, member.width, own + "_unpadded");
                        ++segment.padded_surfaces;
                    }
                    L.set_base(member.value, own);
                    if (member.order == surface_order::columns) {
                        L.set_form(member.value, value_layout::channels_first, ref);
                    } else {
                        L.set_rows(member.value, ref);
                    }
                }
            }
            continue;
        }
        const value_id id = surface.value;
        const std::string symbol = surface.symbol;
        const surface_order order = surface.order;
        mil_ref ref = 0;
        if (surface.state) {
            // A state whose width is not a multiple of 32 fails on the Neural Engine (COREML.md §4.5,
            // coremltools #2631), whatever the chip's I/O width rule.
            surface.surface_width = padded_io_width(surface.width);
            surface.channel_stride = static_cast<std::size_t>(surface.surface_width) * 2;
            const mil_ref state =
                L.mil().state_input(symbol, {1, surface.channels, 1, surface.surface_width});
            ref = L.mil().state_read(state, symbol + "_now");
        } else {
            ref = L.mil().input(symbol, {1, surface.channels, 1, surface.surface_width});
        }
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
    }
    segment.inputs = std::move(surfaces);
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
    L.mil().prune(results);
    segment.mil = L.mil().text(results);
    segment.program = L.mil().function();
    segment.program_outputs = results;
    segment.weights = L.mil().weights();
    segment.anchored =
        L.mil().count_ops("conv") + L.mil().count_ops("matmul") + L.mil().count_ops("linear") > 0;
    return segment;
}

// ---- a whole graph as one Core ML program (anvil export) --------------------------------------------------

// An input or output of an exported program: its name, graph value, IR shape and MultiArray dtype.
struct program_port {
    std::string name;
    value_id value = 0;
    dims shape;
    std::string dtype;  // "fp16" (floats, and booleans as 1 and 0) or "int32"
};

struct lowered_program {
    mil_function program;
    std::vector<mil_ref> results;  // in output order
    std::vector<weight_file> weights;
    std::vector<program_port> inputs, outputs, states;
};

// A graph input a Core ML model keeps as a state (an MLState buffer, fp16, spec 9) and the body output whose
// value replaces it at the end of each prediction (write_state): a KV cache the app never copies.
struct state_binding {
    std::string input;                      // the graph input's name
    std::optional<std::size_t> output = 0;  // index into the body's outputs; none: the program only reads it
};

namespace lowering_detail {

// What the Neural Engine does not run, as the plain MIL ops Core ML places on the CPU itself (MIL.md §2.5:
// embedding lookups and integer work): gather, gather_elements, casts to and from integers, argmax,
// cumsum, and a linear past max_dimension. Returns false for anything else.
inline bool lower_for_core_ml(segment_lowering& L, value_id id) {
    const node& n = L.at(id);
    const auto integer_const = [&](value_id v) {
        const std::vector<float>& values = L.constant_values(v);
        std::vector<std::int64_t> numbers(values.begin(), values.end());
        return L.mil().const_int_tensor(L.base(v), segment_lowering::logical_shape(L.ir_shape(v)), numbers);
    };
    const auto operand = [&](value_id v) {
        return L.is_constant(v) && !held_in_fp16(L.at(v).result.type) ? integer_const(v) : L.logical(v);
    };
    const mil_shape shape = segment_lowering::logical_shape(n.result.shape);
    switch (n.kind) {
        case op::gather: {
            const mil_ref table =
                L.is_constant(n.inputs[0])
                    ? L.constant(n.inputs[0], segment_lowering::logical_shape(L.ir_shape(n.inputs[0])))
                    : L.logical(n.inputs[0]);
            const mil_ref indices = operand(n.inputs[1]);
            const mil_ref axis = L.mil().const_int(L.base(id) + "_axis", n.attrs.axis);
            const mil_ref out = L.mil().op("gather", L.base(id), shape,
                                           {{"x", {table}}, {"indices", {indices}}, {"axis", {axis}}});
            L.set_form(id, value_layout::logical, out);
            return true;
        }
        case op::gather_elements: {
            // gather_along_axis takes no negative indices from iOS 17 (mil_ops.json): they are wrapped here,
            // in the constant or by select(less(i, 0), add(i, extent), i).
            const dims& data_shape = L.ir_shape(n.inputs[0]);
            const std::int64_t extent = data_shape[static_cast<std::size_t>(n.attrs.axis)];
            const mil_ref data = L.is_constant(n.inputs[0])
                                     ? L.constant(n.inputs[0], segment_lowering::logical_shape(data_shape))
                                     : L.logical(n.inputs[0]);
            const value_id index_value = n.inputs[1];
            const mil_shape index_shape = segment_lowering::logical_shape(L.ir_shape(index_value));
            mil_ref indices;
            if (L.is_constant(index_value)) {
                const std::vector<float>& values = L.constant_values(index_value);
                std::vector<std::int64_t> numbers;
                for (const float v : values) {
                    const auto index = static_cast<std::int64_t>(v);
                    numbers.push_back(index < 0 ? index + extent : index);
                }
                indices = L.mil().const_int_tensor(L.base(index_value), index_shape, numbers);
            } else {
                const mil_ref raw = operand(index_value);
                const std::string base = L.base(id);
                const mil_ref negative =
                    L.mil().op("less", base + "_negative", index_shape,
                               {{"x", {raw}}, {"y", {L.mil().const_int(base + "_zero", 0)}}}, "bool");
                const mil_ref wrapped =
                    L.mil().op("add", base + "_wrapped", index_shape,
                               {{"x", {raw}}, {"y", {L.mil().const_int(base + "_extent", extent)}}}, "int32");
                indices = L.mil().op("select", base + "_indices", index_shape,
                                     {{"a", {wrapped}}, {"b", {raw}}, {"cond", {negative}}}, "int32");
            }
            const mil_ref axis = L.mil().const_int(L.base(id) + "_axis", n.attrs.axis);
            const mil_ref out = L.mil().op("gather_along_axis", L.base(id), shape,
                                           {{"axis", {axis}}, {"indices", {indices}}, {"x", {data}}});
            L.set_form(id, value_layout::logical, out);
            return true;
        }
        case op::cumsum: {
            const std::string base = L.base(id);
            const mil_ref out =
                L.mil().op("cumsum", base, shape,
                           {{"axis", {L.mil().const_int(base + "_axis", n.attrs.axis)}},
                            {"exclusive", {L.mil().const_bool(base + "_exclusive", n.attrs.exclusive)}},
                            {"reverse", {L.mil().const_bool(base + "_reverse", n.attrs.reverse)}},
                            {"x", {L.logical(n.inputs[0])}}});
            L.set_form(id, value_layout::logical, out);
            return true;
        }
        case op::cast: {
            // Booleans are fp16 1 and 0 here too, so a cast to bool is x != 0 written as 1 or 0.
            const bool from_float = held_in_fp16(L.at(n.inputs[0]).result.type);
            const bool to_float = held_in_fp16(n.result.type);
            if (n.result.type == dtype::boolean && L.at(n.inputs[0]).result.type != dtype::boolean) {
                const mil_ref zero = from_float ? L.scalar(0.0f, L.base(id) + "_zero")
                                                : L.mil().const_int(L.base(id) + "_zero", 0);
                const mil_ref nonzero = L.mil().op("not_equal", L.base(id) + "_cond", shape,
                                                   {{"x", {operand(n.inputs[0])}}, {"y", {zero}}}, "bool");
                const mil_ref out = L.mil().op("select", L.base(id), shape,
                                               {{"a", {L.scalar(1.0f, L.base(id) + "_true")}},
                                                {"b", {L.scalar(0.0f, L.base(id) + "_false")}},
                                                {"cond", {nonzero}}});
                L.set_form(id, value_layout::logical, out);
                return true;
            }
            if (from_float == to_float) {
                L.alias(id, n.inputs[0]);  // fp16 either way, or int32 either way
                return true;
            }
            const mil_ref dtype = L.mil().const_string(L.base(id) + "_dtype", to_float ? "fp16" : "int32");
            const mil_ref out =
                L.mil().op("cast", L.base(id), shape, {{"dtype", {dtype}}, {"x", {operand(n.inputs[0])}}},
                           to_float ? "fp16" : "int32");
            L.set_form(id, value_layout::logical, out);
            return true;
        }
        case op::argmax: {
            const mil_ref axis = L.mil().const_int(L.base(id) + "_axis", n.attrs.axis);
            const mil_ref keep = L.mil().const_bool(L.base(id) + "_keep_dims", n.attrs.keep_dims);
            const mil_ref out = L.mil().op(
                "reduce_argmax", L.base(id), shape,
                {{"axis", {axis}}, {"keep_dims", {keep}}, {"x", {L.logical(n.inputs[0])}}}, "int32");
            L.set_form(id, value_layout::logical, out);
            return true;
        }
        case op::linear: {
            if (!L.is_constant(n.inputs[1])) return false;
            const dims& w = L.ir_shape(n.inputs[1]);
            std::vector<mil_argument> arguments{{"x", {L.logical(n.inputs[0])}},
                                                {"weight", {L.constant(n.inputs[1], {w[0], w[1]})}}};
            if (n.inputs.size() > 2 && L.is_constant(n.inputs[2]))
                arguments.push_back({"bias", {L.constant(n.inputs[2], {w[0]})}});
            else if (n.inputs.size() > 2)
                return false;
            L.set_form(id, value_layout::logical,
                       L.mil().op("linear", L.base(id), shape, std::move(arguments)));
            return true;
        }
        default:
            return false;
    }
}

}  // namespace lowering_detail

// Lowers every node of `body` into one function whose inputs and outputs keep their IR shapes (fp16, or
// int32 for integer inputs and results), inputs named as the graph names them and outputs by `output_names`
// (one per output that is not a state's update): the model an app adds in Xcode, with no [1, C, 1, W]
// surfaces to pack. Each of `states` turns its input into a state the function reads first and writes,
// from its output, last. Throws unsupported_error naming the first node that has no MIL form.
[[nodiscard]] inline lowered_program lower_program(const graph_body& body,
                                                   std::span<const std::string> output_names,
                                                   const lowering_options& options,
                                                   std::span<const state_binding> states = {}) {
    using namespace lowering_detail;
    const auto written = static_cast<std::size_t>(std::count_if(
        states.begin(), states.end(), [](const state_binding& s) { return s.output.has_value(); }));
    if (output_names.size() + written != body.outputs.size()) {
        throw error(message("export: ", output_names.size(), " output names and ", written,
                            " states written for ", body.outputs.size(), " outputs"));
    }
    const auto state_of_input = [&](const std::string& name) -> const state_binding* {
        for (const state_binding& s : states)
            if (s.input == name) return &s;
        return nullptr;
    };
    const auto state_of_output = [&](std::size_t index) -> const state_binding* {
        for (const state_binding& s : states)
            if (s.output == index) return &s;
        return nullptr;
    };
    for (const state_binding& s : states) {
        if (s.output && *s.output >= body.outputs.size())
            throw error(message("export: state ", s.input, " is written from output ", *s.output, " of ",
                                body.outputs.size()));
    }
    segment_lowering L(body, options);
    lowered_program made;
    struct bound_state {
        const state_binding* binding;
        mil_ref state;
        value_id input;
    };
    std::vector<bound_state> bound;
    for (std::size_t id = 0; id < body.nodes.size(); ++id) {
        const node& n = body.nodes[id];
        if (n.kind != op::input) continue;
        const auto v = static_cast<value_id>(id);
        const bool floating = is_floating(n.result.type);
        if (const state_binding* s = state_of_input(n.name)) {
            if (!floating) {
                throw unsupported_error(message("export: the state '", n.name, "' is ",
                                                dtype_name(n.result.type), "; Core ML states are fp16"));
            }
            const std::string symbol = sanitise_mil_name(n.name);
            const mil_ref state =
                L.mil().state_input(symbol, segment_lowering::logical_shape(n.result.shape));
            L.set_base(v, symbol);
            L.set_form(v, value_layout::logical, L.mil().state_read(state, symbol + "_now"));
            made.states.push_back({symbol, v, n.result.shape, "fp16"});
            bound.push_back({s, state, v});
            continue;
        }
        const bool as_fp16 = held_in_fp16(n.result.type);  // a bool input is an fp16 array of 1 and 0
        if (!as_fp16 && n.result.type != dtype::i32 && n.result.type != dtype::i64) {
            throw unsupported_error(message("export: input '", n.name, "' is ", dtype_name(n.result.type),
                                            "; a Core ML model takes float, bool (as fp16) or int32 arrays"));
        }
        const std::string symbol = sanitise_mil_name(n.name);
        const std::string type = as_fp16 ? "fp16" : "int32";
        const mil_ref ref = L.mil().input(symbol, segment_lowering::logical_shape(n.result.shape), type);
        L.set_base(v, symbol);
        L.set_form(v, value_layout::logical, ref);
        made.inputs.push_back({symbol, v, n.result.shape, type});
    }
    for (std::size_t id = 0; id < body.nodes.size(); ++id) {
        const auto v = static_cast<value_id>(id);
        const node& n = body.nodes[id];
        if (n.kind == op::input || n.kind == op::constant || L.is_constant(v)) continue;
        if (lower_for_core_ml(L, v)) continue;
        const support_result support = supports(body, v, options);
        if (support.where == placement::host_only) {
            throw unsupported_error(message("export: ", describe_node(body, v),
                                            " has no form in a Core ML program: ", support.reason));
        }
        lower_node(L, v);
    }
    for (const state_binding& s : states) {
        if (std::none_of(bound.begin(), bound.end(), [&](const bound_state& b) { return b.binding == &s; }))
            throw error(message("export: the state '", s.input, "' is not an input of the graph"));
    }
    std::size_t named = 0;
    for (std::size_t i = 0; i < body.outputs.size(); ++i) {
        const value_id id = body.outputs[i];
        const node& n = body.nodes.at(id);
        if (const state_binding* s = state_of_output(i)) {
            const bound_state& b = *std::find_if(
                bound.begin(), bound.end(), [&](const bound_state& entry) { return entry.binding == s; });
            if (L.is_constant(id) || n.result.shape != body.nodes.at(b.input).result.shape) {
                throw unsupported_error(message("export: the update of state '", s->input,
                                                "' is not a computed value of its shape"));
            }
            L.mil().state_write(b.state, L.logical(id), "write_" + sanitise_mil_name(s->input));
            continue;
        }
        const std::string& output_name = output_names[named++];
        if (L.is_constant(id)) {
            throw unsupported_error(message("export: output '", output_name, "' is a constant"));
        }
        const std::string symbol = sanitise_mil_name(output_name);
        mil_ref ref = L.logical(id);
        const bool taken = std::find(made.results.begin(), made.results.end(), ref) != made.results.end();
        if (taken || !L.mil().rename(ref, symbol))
            ref = L.reshape(ref, L.mil().shape(ref), symbol, true);  // a copy under the output's name
        made.results.push_back(ref);
        made.outputs.push_back({symbol, id, n.result.shape, held_in_fp16(n.result.type) ? "fp16" : "int32"});
    }
    L.mil().prune(made.results);
    made.program = L.mil().function();
    made.weights = L.mil().weights();
    return made;
}

}  // namespace anvil::detail::ane
