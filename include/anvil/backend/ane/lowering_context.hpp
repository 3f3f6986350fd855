// anvil: the state of lowering one ANE segment — each graph value's MIL forms and the conversions between
// them, constants as fp16 weights, and elementwise ops with their decompositions.
// A value can be held in up to three forms (RUNTIME.md §3, MIL.md §2.1):
//   logical: the IR shape itself (rank 0 as [1]);
//   rows: [1, S, 1, C] with C the last extent and S the product of the others (same memory order as logical);
//   channels-first: [1, C, 1, S], the ANE's preferred layout, which 1x1 convs, norms and elementwise chains
//     stay in without transposes between them.
// Forms are made on demand and cached, so a chain converts once.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "anvil/backend/ane/mil_writer.hpp"
#include "anvil/backend/ane/support.hpp"
#include "anvil/core/masking.hpp"
#include "anvil/graph/graph.hpp"

namespace anvil::detail::ane {

using mil_shape = std::vector<std::int64_t>;

enum class value_layout : std::uint8_t { logical, channels_first };

// A constant as fp16. Part of an additive mask (`mask`), values below anvil::masked_score (-1e4) become it,
// so score + mask stays finite and the softmax after it gets no -inf (core/masking.hpp says why).
[[nodiscard]] inline half to_fp16(float value, bool mask = false) {
    if (mask && value < masked_score) value = masked_score;
    // fp16 overflows past 65504; constants saturate rather than become literal infinities.
    if (value > 65504.0f) value = 65504.0f;
    if (value < -65504.0f) value = -65504.0f;
    return half(value);
}

[[nodiscard]] inline mil_shape broadcast_mil(const mil_shape& a, const mil_shape& b) {
    mil_shape out(std::max(a.size(), b.size()), 1);
    for (std::size_t i = 0; i < out.size(); ++i) {
        const std::int64_t x = i < a.size() ? a[a.size() - 1 - i] : 1;
        const std::int64_t y = i < b.size() ? b[b.size() - 1 - i] : 1;
        out[out.size() - 1 - i] = x == 1 ? y : x;
    }
    return out;
}

// `values` (row-major in `shape`) broadcast numpy-style to `target`, row-major.
[[nodiscard]] inline std::vector<float> broadcast_values(std::span<const float> values,
                                                         const mil_shape& shape, const mil_shape& target) {
    std::int64_t count = 1;
    for (const auto extent : target)
        count *= extent;
    std::vector<float> out(static_cast<std::size_t>(count));
    const std::size_t rank = target.size();
    std::vector<std::int64_t> strides(rank, 0);
    std::int64_t stride = 1;
    for (std::size_t i = 0; i < shape.size(); ++i) {
        const std::size_t axis = shape.size() - 1 - i;
        if (shape[axis] != 1) strides[rank - 1 - i] = stride;
        stride *= shape[axis];
    }
    std::vector<std::int64_t> index(rank, 0);
    for (std::size_t o = 0; o < out.size(); ++o) {
        std::int64_t at = 0;
        for (std::size_t a = 0; a < rank; ++a)
            at += index[a] * strides[a];
        out[o] = values[static_cast<std::size_t>(at)];
        for (std::size_t a = rank; a-- > 0;) {
            if (++index[a] < target[a]) break;
            index[a] = 0;
        }
    }
    return out;
}

class segment_lowering {
public:
    segment_lowering(const graph_body& body, const lowering_options& options)
        : body_(body), options_(options), mil_(options.dialect, options.one_file_per_weight) {}

    const graph_body& body() const noexcept { return body_; }
    const lowering_options& options() const noexcept { return options_; }
    mil_writer& mil() noexcept { return mil_; }
    const node& at(value_id id) const { return body_.nodes.at(id); }
    const dims& ir_shape(value_id id) const { return at(id).result.shape; }
    bool is_constant(value_id id) const { return is_host_constant(body_, id); }

    // The MIL base name of a value's statements: "linear_7", or the input's symbol.
    std::string base(value_id id) const {
        const auto found = bases_.find(id);
        return found != bases_.end() ? found->second : message(op_name(at(id).kind), "_", id);
    }
    void set_base(value_id id, std::string name) { bases_[id] = std::move(name); }

    static mil_shape logical_shape(const dims& shape) {
        mil_shape out(shape.begin(), shape.end());
        if (out.empty()) out.push_back(1);
        return out;
    }
    static mil_shape rows_shape(const dims& shape) {
        const surface_extents s = surface_extents_of(shape);
        return {1, s.positions, 1, s.channels};
    }
    static mil_shape channels_first_shape(const dims& shape) {
        const surface_extents s = surface_extents_of(shape);
        return {1, s.channels, 1, s.positions};
    }
    bool channels_first_fits(const dims& shape) const {
        const surface_extents s = surface_extents_of(shape);
        return s.channels <= options_.max_dimension && s.positions <= options_.max_dimension;
    }

    // Records a form of a value.
    void set_form(value_id id, value_layout layout, mil_ref ref) {
        (layout == value_layout::logical ? forms_[id].logical : forms_[id].channels_first) = ref;
    }
    void set_rows(value_id id, mil_ref ref) { forms_[id].rows = ref; }
    void alias(value_id id, value_id source) {
        const forms copy = forms_[source];  // copied first: inserting `id` may rehash
        forms_[id] = copy;
    }
    bool has_channels_first(value_id id) const {
        const auto found = forms_.find(id);
        return found != forms_.end() && found->second.channels_first.has_value();
    }
    bool has_logical(value_id id) const {
        const auto found = forms_.find(id);
        return found != forms_.end() && (found->second.logical || found->second.rows);
    }

    mil_ref form(value_id id, value_layout layout) {
        return layout == value_layout::logical ? logical(id) : channels_first(id);
    }

    mil_ref logical(value_id id) {
        if (auto& f = forms_[id]; f.logical) return *f.logical;
        if (is_constant(id)) return constant(id, logical_shape(ir_shape(id)));
        const mil_ref rows_form = rows(id);
        const mil_ref result = reshape(rows_form, logical_shape(ir_shape(id)), base(id) + "_logical");
        forms_[id].logical = result;
        return result;
    }

    mil_ref rows(value_id id) {
        if (auto& f = forms_[id]; f.rows) return *f.rows;
        const mil_shape shape = rows_shape(ir_shape(id));
        mil_ref result;
        if (is_constant(id)) {
            result = constant(id, shape);
        } else if (forms_[id].logical) {
            result = reshape(*forms_[id].logical, shape, base(id) + "_rows");
        } else if (forms_[id].channels_first) {
            result = swap_channels(*forms_[id].channels_first, base(id) + "_rows");
        } else {
            throw error(message("ane lowering: ", describe(id), " is read before it is computed"));
        }
        forms_[id].rows = result;
        return result;
    }

    mil_ref channels_first(value_id id) {
        if (auto& f = forms_[id]; f.channels_first) return *f.channels_first;
        mil_ref result;
        if (is_constant(id)) {
            const std::vector<float> values = constant_values(id);
            const surface_extents s = surface_extents_of(ir_shape(id));
            result = fp16_const(base(id) + "_cf", channels_first_shape(ir_shape(id)),
                                transpose_rows(values, s.positions, s.channels), holds_mask(id));
        } else {
            result = swap_channels(rows(id), base(id) + "_cf");
        }
        forms_[id].channels_first = result;
        return result;
    }

    // [1, A, 1, B] -> [1, B, 1, A]: a transpose, or a reshape when A or B is 1 (the same memory).
    mil_ref swap_channels(mil_ref x, const std::string& name) {
        const mil_shape& s = mil_.shape(x);
        const mil_shape out{1, s[3], 1, s[1]};
        if (s[1] == 1 || s[3] == 1) return reshape(x, out, name);
        const std::vector<std::int64_t> perm{0, 3, 2, 1};
        return transpose(x, perm, name);
    }

    mil_ref reshape(mil_ref x, const mil_shape& shape, const std::string& name, bool force = false) {
        if (!force && mil_.shape(x) == shape) return x;
        const mil_ref target = mil_.const_ints(name + "_shape", shape);
        return mil_.op("reshape", name, shape, {{"shape", {target}}, {"x", {x}}});
    }
    mil_ref transpose(mil_ref x, std::span<const std::int64_t> perm, const std::string& name) {
        const mil_shape& s = mil_.shape(x);
        mil_shape out;
        for (const auto axis : perm)
            out.push_back(s[static_cast<std::size_t>(axis)]);
        const mil_ref order = mil_.const_ints(name + "_perm", perm);
        return mil_.op("transpose", name, out, {{"perm", {order}}, {"x", {x}}});
    }
    mil_ref slice(mil_ref x, const mil_shape& begin, const mil_shape& end, const std::string& name,
                  const mil_shape& stride = {}) {
        mil_shape out;
        for (std::size_t a = 0; a < begin.size(); ++a) {
            const std::int64_t step = stride.empty() ? 1 : stride[a];
            out.push_back((end[a] - begin[a] + step - 1) / step);
        }
        std::vector<mil_argument> args{{"begin", {mil_.const_ints(name + "_begin", begin)}},
                                       {"end", {mil_.const_ints(name + "_end", end)}},
                                       {"x", {x}}};
        if (!stride.empty()) args.push_back({"stride", {mil_.const_ints(name + "_stride", stride)}});
        return mil_.op("slice_by_index", name, out, std::move(args));
    }
    // x[..., begin:end] along `axis`.
    mil_ref slice_axis(mil_ref x, std::size_t axis, std::int64_t begin, std::int64_t end,
                       const std::string& name) {
        mil_shape b(mil_.shape(x).size(), 0);
        mil_shape e = mil_.shape(x);
        b[axis] = begin;
        e[axis] = end;
        return slice(x, b, e, name);
    }
    // x with `after` zeros appended along `axis` (the I/O width padding of an output).
    mil_ref pad_axis(mil_ref x, std::size_t axis, std::int64_t after, const std::string& name) {
        const mil_shape s = mil_.shape(x);
        std::vector<std::int64_t> pad(2 * s.size(), 0);
        pad[2 * axis + 1] = after;
        mil_shape out = s;
        out[axis] += after;
        return mil_.op("pad", name, out,
                       {{"constant_val", {scalar(0.0f, name + "_constant_val")}},
                        {"mode", {mil_.const_string(name + "_mode", "constant")}},
                        {"pad", {mil_.const_ints(name + "_pad", pad)}},
                        {"x", {x}}});
    }
    mil_ref concat(const std::vector<mil_ref>& values, std::size_t axis, const std::string& name) {
        mil_shape out = mil_.shape(values.at(0));
        out[axis] = 0;
        for (const mil_ref v : values)
            out[axis] += mil_.shape(v)[axis];
        const mil_ref axis_const = mil_.const_int(name + "_axis", static_cast<std::int64_t>(axis));
        const mil_ref interleave = mil_.const_bool(name + "_interleave", false);
        return mil_.op("concat", name, out,
                       {{"axis", {axis_const}}, {"interleave", {interleave}}, {"values", values, true}});
    }
    mil_ref binary(std::string_view type, mil_ref x, mil_ref y, const std::string& name) {
        return mil_.op(type, name, broadcast_mil(mil_.shape(x), mil_.shape(y)), {{"x", {x}}, {"y", {y}}});
    }
    mil_ref unary(std::string_view type, mil_ref x, const std::string& name) {
        return mil_.op(type, name, mil_.shape(x), {{"x", {x}}});
    }
    mil_ref scalar(float value, const std::string& name) { return mil_.const_fp16_scalar(name, value); }
    static std::vector<half> fp16_values(std::span<const float> values, bool mask = false) {
        std::vector<half> halves;
        halves.reserve(values.size());
        for (const float v : values)
            halves.push_back(to_fp16(v, mask));
        return halves;
    }
    mil_ref fp16_const(const std::string& name, const mil_shape& shape, std::span<const float> values,
                       bool mask = false) {
        return mil_.const_fp16(name, shape, fp16_values(values, mask));
    }

    // Whether value `id` is part of an additive mask: it reaches a softmax's input, or an attention's mask,
    // through elementwise and data-movement ops only. Exported graphs build masks so — PyTorch's
    // (1 - m) * finfo(float32).min, where(causal, scores, finfo.min) — and fp16 would saturate those
    // constants to -65504, which overflows to -inf once added to a score below -16: such constants are
    // lowered with to_fp16's mask clamp, whatever family or importer built them (RUNTIME.md §0b #24).
    bool holds_mask(value_id id) {
        if (mask_values_.empty()) mark_masks();
        return mask_values_.at(id);
    }

    const std::vector<float>& constant_values(value_id id) {
        auto found = constant_cache_.find(id);
        if (found == constant_cache_.end())
            found = constant_cache_.emplace(id, host_constant_values(body_, id)).first;
        return found->second;
    }
    // A constant at `shape` (same element order), cached per shape.
    mil_ref constant(value_id id, const mil_shape& shape) {
        const auto key = std::make_pair(id, shape);
        if (const auto found = constant_forms_.find(key); found != constant_forms_.end())
            return found->second;
        const std::string suffix = at(id).name.empty() ? "" : "_" + at(id).name;
        const std::optional<mil_ref> compressed =
            options_.compressed_weights ? compressed_constant(id, shape, base(id) + suffix) : std::nullopt;
        const mil_ref ref = compressed
                                ? *compressed
                                : fp16_const(base(id) + suffix, shape, constant_values(id), holds_mask(id));
        constant_forms_.emplace(key, ref);
        return ref;
    }

    // A dequantised weight kept compressed (lowering_options::compressed_weights): a constexpr op over the
    // int8 values or palette indices, so the program stores only those (COREML.md §3). ios16:
    // constexpr_affine_dequantize and constexpr_lut_to_dense (one palette for the tensor, indices packed
    // into uint8 bytes), every parameter an attribute; ios18: constexpr_blockwise_shift_scale and the new
    // constexpr_lut_to_dense (a palette per group of channels, sub-byte indices), parameters as inputs.
    // nullopt where the form cannot be kept (the program then holds the fp16 values): not a dequantisation
    // of constants, fewer than 10 elements, a channel axis `shape` does not keep, or grouped palettes in
    // ios16.
    std::optional<mil_ref> compressed_constant(value_id id, const mil_shape& shape, const std::string& name) {
        const node& n = at(id);
        if (n.kind != op::dequantize_int8 && n.kind != op::dequantize_lut) return std::nullopt;
        if (n.kind == op::dequantize_lut && !options_.compressed_palettes) return std::nullopt;
        for (const value_id input : n.inputs)
            if (at(input).kind != op::constant) return std::nullopt;
        const dims& ir = at(n.inputs[0]).result.shape;
        if (ir.element_count() < 10) return std::nullopt;
        const bool ios18 = mil_.dialect() == mil_dialect::ios18;
        // The axis of `shape` that holds the IR's axis `axis` (same element order, so the extents before it
        // multiply to the same number), or nullopt.
        const auto channel_axis = [&](std::size_t axis) -> std::optional<std::size_t> {
            std::int64_t before = 1;
            for (std::size_t a = 0; a < axis; ++a)
                before *= ir[a];
            std::int64_t seen = 1;
            for (std::size_t k = 0; k < shape.size(); ++k) {
                if (seen == before && shape[k] == ir[axis]) return k;
                seen *= shape[k];
            }
            return std::nullopt;
        };
        if (n.kind == op::dequantize_int8) {
            const auto axis = channel_axis(static_cast<std::size_t>(n.attrs.axis));
            if (!axis) return std::nullopt;
            const host_tensor& data = at(n.inputs[0]).data;
            const auto* bytes = static_cast<const std::uint8_t*>(data.raw());
            const std::vector<std::uint8_t> q(bytes, bytes + data.element_count());
            const std::int64_t channels = shape[*axis];
            const std::vector<half> scale = fp16_values(host_constant_values(body_, n.inputs[1]));
            std::vector<std::uint8_t> zero;
            if (n.inputs.size() > 2) {
                for (const float z : host_constant_values(body_, n.inputs[2]))
                    zero.push_back(static_cast<std::uint8_t>(static_cast<std::int8_t>(z)));
            }
            if (!ios18) {
                std::vector<std::pair<std::string, mil_literal>> parameters = {
                    {"quantized_data", mil_.literal_bytes("int8", shape, q)},
                    {"scale", mil_.literal_fp16({channels}, scale)},
                    {"axis", mil_writer::literal_int(static_cast<std::int64_t>(*axis), "axis")}};
                parameters.emplace_back(
                    "zero_point", zero.empty() ? mil_.literal_bytes("int8", {}, std::vector<std::uint8_t>{0})
                                               : mil_.literal_bytes("int8", {channels}, zero));
                return mil_.constexpr_op("constexpr_affine_dequantize", name, shape, std::move(parameters));
            }
            mil_shape per_channel(shape.size(), 1);
            per_channel[*axis] = channels;
            std::vector<std::pair<std::string, mil_literal>> parameters = {
                {"data", mil_.literal_bytes("int8", shape, q)},
                {"scale", mil_.literal_fp16(per_channel, scale)}};
            if (!zero.empty())
                parameters.emplace_back("offset", mil_.literal_bytes("int8", per_channel, zero));
            return mil_.constexpr_op("constexpr_blockwise_shift_scale", name, shape, std::move(parameters));
        }
        // A palette of L entries needs indices of b bits, 2^b >= L, b one of the sizes the op takes (3 only
        // from ios18); the table is padded to 2^b entries.
        const dims& lut = at(n.inputs[1]).result.shape;
        const auto length = static_cast<std::size_t>(lut[lut.rank() - 1]);
        const std::int64_t groups = lut.rank() == 2 ? lut[0] : 1;
        unsigned bits = 0;
        for (const unsigned b : {1u, 2u, 3u, 4u, 6u, 8u}) {
            if ((b == 3 && !ios18) || (std::size_t{1} << b) < length) continue;
            bits = b;
            break;
        }
        const std::size_t entries = std::size_t{1} << bits;
        const std::vector<float> table = host_constant_values(body_, n.inputs[1]);
        std::vector<half> padded;
        for (std::int64_t g = 0; g < groups; ++g)
            for (std::size_t e = 0; e < entries; ++e)
                padded.push_back(
                    to_fp16(table[static_cast<std::size_t>(g) * length + std::min(e, length - 1)]));
        const host_tensor& data = at(n.inputs[0]).data;
        const auto* bytes = static_cast<const std::uint8_t*>(data.raw());
        const std::vector<std::uint8_t> indices(bytes, bytes + data.element_count());
        for (const std::uint8_t index : indices)
            if (index >= length) return std::nullopt;  // the CPU's reference reports it when it runs
        if (!ios18) {
            if (groups != 1) return std::nullopt;
            std::vector<std::uint8_t> packed_values = indices;  // 8-bit indices are their own bytes
            if (bits < 8) {
                const packed_sub_byte packed = pack_sub_byte(indices, bits);
                packed_values.resize(packed.bytes.size());
                std::memcpy(packed_values.data(), packed.bytes.data(), packed.bytes.size());
            }
            std::vector<std::pair<std::string, mil_literal>> parameters = {
                {"indices", mil_.literal_bytes("uint8", {static_cast<std::int64_t>(packed_values.size())},
                                               packed_values)},
                {"lut", mil_.literal_fp16({static_cast<std::int64_t>(entries)}, padded)},
                {"shape", mil_writer::literal_uint32s(shape, "shape")}};
            return mil_.constexpr_op("constexpr_lut_to_dense", name, shape, std::move(parameters));
        }
        // lut: [G0, ..., G(r-1), entries, 1], the groups along the axis that holds the IR's axis 0.
        mil_shape lut_shape(shape.size() + 2, 1);
        if (groups > 1) {
            const auto axis = channel_axis(0);
            if (!axis) return std::nullopt;
            lut_shape[*axis] = groups;
        }
        lut_shape[shape.size()] = static_cast<std::int64_t>(entries);
        std::vector<std::pair<std::string, mil_literal>> parameters = {
            {"indices", bits == 8 ? mil_.literal_bytes("uint8", shape, indices)
                                  : mil_.literal_sub_byte(bits, shape, indices)},
            {"lut", mil_.literal_fp16(lut_shape, padded)}};
        return mil_.constexpr_op("constexpr_lut_to_dense", name, shape, std::move(parameters));
    }

    // A constant operand of an elementwise op whose result is `result` (IR shape) in `layout`, from `values`
    // in `shape` (which broadcasts to it). The ANE accepts only a scalar, the full result shape or [1, C, 1,
    // 1] (CONSTRAINTS.md), so it is given in the first of those that represents it, else materialised.
    mil_ref broadcast_constant(std::span<const float> values, const dims& shape, const dims& result,
                               value_layout layout, const std::string& name, bool mask = false) {
        if (values.size() == 1)
            return mil_.const_fp16_scalar(name, static_cast<float>(to_fp16(values[0], mask)));
        const mil_shape value_shape(shape.begin(), shape.end());
        const mil_shape full = logical_shape(result);
        const std::size_t rank = full.size();
        // Which result axes the constant varies along (right-aligned).
        std::vector<bool> varies(rank, false);
        for (std::size_t i = 0; i < value_shape.size(); ++i)
            varies[rank - 1 - i] = value_shape[value_shape.size() - 1 - i] != 1;
        const auto only_axis = [&](std::size_t axis) {
            for (std::size_t a = 0; a < rank; ++a)
                if (varies[a] && a != axis) return false;
            return true;
        };
        if (layout == value_layout::channels_first) {
            const mil_shape cf = channels_first_shape(result);
            if (only_axis(rank - 1))
                return fp16_const(name, {1, cf[1], 1, 1}, broadcast_values(values, value_shape, {cf[1]}),
                                  mask);
            const std::vector<float> expanded = broadcast_values(values, value_shape, full);
            return fp16_const(name, cf, transpose_rows(expanded, cf[3], cf[1]), mask);
        }
        if (rank == 4 && only_axis(1)) {
            return fp16_const(name, {1, full[1], 1, 1},
                              broadcast_values(values, value_shape, {full[1], 1, 1}), mask);
        }
        return fp16_const(name, full, broadcast_values(values, value_shape, full), mask);
    }

    // A multi-head value that is a channels-first [1, H*D, 1, S] tensor with its channels split into heads
    // (MIL.md §2.3, split-einsum): [1, S, H, D] as reshaped from a [1, S, H*D] projection, [1, H, S, D]
    // (heads_first) once permuted. Attention reads q, k and v so, slicing heads off the channel axis with
    // no transpose of the width axis, and its result reaches the output projection the same way.
    struct head_split {
        mil_ref channels_first = 0;
        bool heads_first = false;
    };
    void set_head_split(value_id id, head_split split) { head_splits_[id] = split; }
    std::optional<head_split> head_split_of(value_id id) const {
        const auto found = head_splits_.find(id);
        if (found == head_splits_.end()) return std::nullopt;
        return found->second;
    }

    std::string describe(value_id id) const {
        return message(op_name(at(id).kind), " node ", id, " ", ir_shape(id));
    }

    static std::vector<float> transpose_rows(std::span<const float> values, std::int64_t rows,
                                             std::int64_t columns) {
        std::vector<float> out(values.size());
        for (std::int64_t r = 0; r < rows; ++r)
            for (std::int64_t c = 0; c < columns; ++c)
                out[static_cast<std::size_t>(c * rows + r)] =
                    values[static_cast<std::size_t>(r * columns + c)];
        return out;
    }

private:
    struct forms {
        std::optional<mil_ref> logical, rows, channels_first;
    };

    void mark_masks() {
        mask_values_.assign(body_.nodes.size(), false);
        std::vector<value_id> pending;
        for (const node& n : body_.nodes) {
            if (n.kind == op::softmax) pending.insert(pending.end(), n.inputs.begin(), n.inputs.end());
            if (n.kind == op::attention && n.inputs.size() > 3) pending.push_back(n.inputs[3]);
        }
        while (!pending.empty()) {
            const value_id v = pending.back();
            pending.pop_back();
            if (mask_values_.at(v)) continue;
            mask_values_[v] = true;
            const node& n = at(v);
            const op_category category = info(n.kind).category;
            const bool passes = category == op_category::unary || category == op_category::binary ||
                                category == op_category::ternary || category == op_category::fused ||
                                n.kind == op::cast || n.kind == op::reshape || n.kind == op::permute ||
                                n.kind == op::slice || n.kind == op::concat || n.kind == op::pad;
            if (passes) pending.insert(pending.end(), n.inputs.begin(), n.inputs.end());
        }
    }

    const graph_body& body_;
    const lowering_options& options_;
    mil_writer mil_;
    std::unordered_map<value_id, forms> forms_;
    std::unordered_map<value_id, head_split> head_splits_;
    std::unordered_map<value_id, std::string> bases_;
    std::unordered_map<value_id, std::vector<float>> constant_cache_;
    std::map<std::pair<value_id, mil_shape>, mil_ref> constant_forms_;
    std::vector<bool> mask_values_;  // by value id, once holds_mask is first asked
};

}  // namespace anvil::detail::ane
