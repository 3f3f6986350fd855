// anvil: the ONNX ops that move, reshape, select and make tensors (Reshape, Slice, Gather, Pad, Shape,
// Range, ...): what decides a shape is settled at import, the data stays in the graph.
// Member definitions of onnx_detail::importer (importer-inl.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/models/import/onnx/importer-inl.hpp"

namespace anvil::models::onnx_detail {

// The target shape: an attribute before opset 5, an input since; 0 copies the input's extent (unless
// allowzero, opset 14), one -1 is inferred.
inline value importer::reshape_node(const onnx_node& n) {
    const value x = input(n, 0);
    std::vector<std::int64_t> sizes;
    if (opset_ < 5) {
        const auto shape = ints_attribute(n, "shape");
        if (!shape) throw format_error(message(where(n), ": Reshape needs its shape attribute"));
        sizes = *shape;
    } else {
        sizes = required_ints(n, 1, "the shape");
    }
    if (int_attribute(n, "allowzero", 0) == 0) {
        for (std::size_t i = 0; i < sizes.size(); ++i) {
            if (sizes[i] != 0) continue;
            if (i >= x.rank())
                throw shape_error(message(where(n), ": 0 at axis ", i, " past the input's rank"));
            sizes[i] = x.shape()[i];
        }
    }
    return reshape(x, std::move(sizes));
}

inline value importer::transpose(const onnx_node& n) {
    const value x = input(n, 0);
    std::vector<std::int64_t> axes;
    if (const auto perm = ints_attribute(n, "perm")) {
        axes = *perm;
    } else {
        for (std::size_t i = x.rank(); i-- > 0;)
            axes.push_back(static_cast<std::int64_t>(i));
    }
    return permute(x, std::move(axes));
}

inline value importer::flatten(const onnx_node& n) {
    const value x = input(n, 0);
    const auto rank = static_cast<std::int64_t>(x.rank());
    std::int64_t axis = int_attribute(n, "axis", 1);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis > rank) throw shape_error(message(where(n), ": axis out of range for ", x.shape()));
    std::int64_t outer = 1, inner = 1;
    for (std::int64_t i = 0; i < rank; ++i)
        (i < axis ? outer : inner) *= x.shape()[static_cast<std::size_t>(i)];
    return reshape(x, {outer, inner});
}

inline value importer::concat(const onnx_node& n) {
    std::vector<value> parts;
    for (std::size_t i = 0; i < n.inputs.size(); ++i) {
        const value part = input(n, i);
        if (part.shape().element_count() != 0 || n.inputs.size() == 1) parts.push_back(part);
    }
    if (parts.empty()) parts.push_back(input(n, 0));
    const onnx_attribute* axis = n.find("axis");
    if (axis == nullptr) throw format_error(message(where(n), ": Concat needs its axis attribute"));
    attributes a;
    a.axis = axis->i;
    if (parts.size() == 1) return parts[0];
    return g_.apply(op::concat, parts, a);
}

// The axes: an attribute before opset 13, an input since (Squeeze's optional: every extent 1).
inline value importer::squeeze(const onnx_node& n, bool unsqueeze) {
    const value x = input(n, 0);
    std::vector<std::int64_t> axes;
    if (opset_ < 13) {
        if (const auto a = ints_attribute(n, "axes")) axes = *a;
    } else if (has_input(n, 1)) {
        axes = required_ints(n, 1, "the axes");
    }
    const std::vector<std::int64_t> in = extents_of(x.shape());
    const auto out_rank = static_cast<std::int64_t>(unsqueeze ? in.size() + axes.size() : in.size());
    for (auto& axis : axes)
        axis = normalized_axis(axis, out_rank, where(n));
    std::vector<std::int64_t> sizes;
    if (unsqueeze) {
        if (axes.empty()) throw format_error(message(where(n), ": Unsqueeze needs axes"));
        std::size_t next = 0;
        for (std::int64_t i = 0; i < out_rank; ++i)
            sizes.push_back(std::find(axes.begin(), axes.end(), i) != axes.end() ? 1 : in.at(next++));
    } else {
        for (std::size_t i = 0; i < in.size(); ++i) {
            const bool listed =
                std::find(axes.begin(), axes.end(), static_cast<std::int64_t>(i)) != axes.end();
            if (listed && in[i] != 1)
                throw shape_error(message(where(n), ": axis ", i, " of ", x.shape(), " is not 1"));
            if (!(listed || (axes.empty() && in[i] == 1))) sizes.push_back(in[i]);
        }
    }
    return reshape(x, std::move(sizes));
}

inline value importer::constant_node(const onnx_node& n) {
    if (n.attributes.size() != 1) throw format_error(message(where(n), ": a Constant holds one attribute"));
    const onnx_attribute& a = n.attributes[0];
    host_tensor t;
    if (a.name == "value" && a.tensors.size() == 1) {
        t = onnx_host_tensor(a.tensors[0]);
    } else if (a.name == "value_float") {
        t = host_tensor::from(std::vector<float>{a.f}, dims{});
    } else if (a.name == "value_floats") {
        t = host_tensor::from(a.floats, dims{static_cast<std::int64_t>(a.floats.size())});
    } else if (a.name == "value_int") {
        t = host_tensor::from(std::vector<std::int64_t>{a.i}, dims{});
    } else if (a.name == "value_ints") {
        t = host_tensor::from(a.ints, dims{static_cast<std::int64_t>(a.ints.size())});
    } else {
        unsupported(n, message("a Constant's '", a.name, "' attribute"));
    }
    return constant(std::move(t), n.outputs[0]);
}

inline value importer::cast_node(const onnx_node& n) {
    const value x = input(n, 0);
    if (n.op_type == "CastLike") return cast(x, input(n, 1).type());
    const std::int32_t to = static_cast<std::int32_t>(int_attribute(n, "to", 0));
    const std::optional<dtype> type = onnx_dtype(to);
    if (!type) unsupported(n, message("casting to ", onnx_type_name(to)));
    return cast(x, *type);
}

// The input's shape (opset 15: the axes [start, end) of it), a constant: shapes are static here.
inline value importer::shape_node(const onnx_node& n) {
    const std::vector<std::int64_t> shape = extents_of(input(n, 0).shape());
    const auto rank = static_cast<std::int64_t>(shape.size());
    const auto bound = [&](std::int64_t i) {
        return std::clamp<std::int64_t>(i < 0 ? i + rank : i, 0, rank);
    };
    const std::int64_t start = bound(int_attribute(n, "start", 0));
    const std::int64_t end = std::max(start, bound(int_attribute(n, "end", rank)));
    const std::vector<std::int64_t> part(shape.begin() + start, shape.begin() + end);
    return constant(host_tensor::from(part, dims{static_cast<std::int64_t>(part.size())}));
}

inline value importer::size_node(const onnx_node& n) {
    const auto count = static_cast<std::int64_t>(input(n, 0).shape().element_count());
    return constant(host_tensor::from(std::vector<std::int64_t>{count}, dims{}));
}

inline value importer::constant_of_shape(const onnx_node& n) {
    const std::vector<std::int64_t> shape = required_ints(n, 0, "the shape");
    host_tensor fill = host_tensor::from(std::vector<float>{0.0f}, dims{1});
    if (const onnx_attribute* v = n.find("value"); v != nullptr && v->tensors.size() == 1)
        fill = onnx_host_tensor(v->tensors[0]);
    if (fill.element_count() != 1) throw shape_error(message(where(n), ": the value must be one element"));
    for (const std::int64_t d : shape)
        if (d < 0) throw shape_error(message(where(n), ": negative extent in the shape"));
    host_tensor out(fill.type(), dims(shape));
    const std::size_t size = dtype_size(fill.type());
    for (std::size_t i = 0; i < out.element_count(); ++i)
        std::memcpy(static_cast<std::byte*>(out.raw()) + i * size, fill.raw(), size);
    return constant(std::move(out));
}

// start, start + delta, ... up to limit (exclusive): settled at import, in the inputs' type.
inline value importer::range(const onnx_node& n) {
    const host_tensor start = required(n, 0, "the start"), limit = required(n, 1, "the limit"),
                      delta = required(n, 2, "the delta");
    for (const host_tensor* t : {&start, &limit, &delta})
        if (t->element_count() != 1)
            throw shape_error(message(where(n), ": start, limit and delta are scalars"));
    const dtype type = start.type();
    if (is_floating(type)) {
        const double first = start.to_f32()[0], last = limit.to_f32()[0], step = delta.to_f32()[0];
        if (step == 0) throw shape_error(message(where(n), ": delta is 0"));
        const auto count = static_cast<std::int64_t>(std::max(std::ceil((last - first) / step), 0.0));
        std::vector<double> values;
        for (std::int64_t i = 0; i < count; ++i)
            values.push_back(first + static_cast<double>(i) * step);
        host_tensor out(type, dims{count});
        if (type == dtype::f64) {
            std::memcpy(out.raw(), values.data(), values.size() * sizeof(double));
            return constant(std::move(out));
        }
        std::vector<float> narrowed(values.begin(), values.end());
        return cast(constant(host_tensor::from(narrowed, dims{count})), type);
    }
    const std::int64_t first = integers_of(start)[0], last = integers_of(limit)[0],
                       step = integers_of(delta)[0];
    if (step == 0) throw shape_error(message(where(n), ": delta is 0"));
    const std::int64_t count = std::max<std::int64_t>((last - first + step + (step > 0 ? -1 : 1)) / step, 0);
    std::vector<std::int64_t> values;
    for (std::int64_t i = 0; i < count; ++i)
        values.push_back(first + i * step);
    return cast(constant(host_tensor::from(values, dims{count})), type);
}

// Inference: the data passes unchanged; the mask, when asked for, is all true.
inline std::vector<value> importer::dropout(const onnx_node& n) {
    const value x = input(n, 0);
    if (has_input(n, 2)) {
        const std::vector<std::int64_t> training = required_ints(n, 2, "training_mode");
        if (!training.empty() && training[0] != 0) unsupported(n, "training_mode (random masks)");
    }
    if (opset_ < 7 && int_attribute(n, "is_test", 0) == 0) unsupported(n, "training (is_test = 0)");
    host_tensor mask(dtype::boolean, x.shape());
    std::memset(mask.raw(), 1, mask.byte_size());
    return {x, constant(std::move(mask))};
}

inline value importer::expand(const onnx_node& n) {
    const value x = input(n, 0);
    const std::vector<std::int64_t> shape = required_ints(n, 1, "the shape");
    const dims from = x.shape();
    // numpy's broadcast of x's shape and the given one (either may be 1 where the other is not).
    std::vector<std::int64_t> out(std::max(shape.size(), from.rank()), 1);
    for (std::size_t i = 0; i < out.size(); ++i) {
        const std::size_t back = out.size() - i;
        const std::int64_t a = back <= from.rank() ? from[from.rank() - back] : 1;
        const std::int64_t b = back <= shape.size() ? shape[shape.size() - back] : 1;
        if (a != b && a != 1 && b != 1)
            throw shape_error(message(where(n), ": ", x.shape(), " does not expand to ",
                                      anvil::detail::extents_to_string(shape, false)));
        out[i] = a == 1 ? b : a;
    }
    return broadcast_to(x, out);
}

inline value importer::tile(const onnx_node& n) {
    value x = input(n, 0);
    const std::vector<std::int64_t> repeats = required_ints(n, 1, "the repeats");
    if (repeats.size() != x.rank())
        throw shape_error(message(where(n), ": ", repeats.size(), " repeats for ", x.shape()));
    for (std::size_t axis = 0; axis < repeats.size(); ++axis) {
        if (repeats[axis] < 0) throw shape_error(message(where(n), ": a negative repeat"));
        if (repeats[axis] == 1) continue;
        if (repeats[axis] == 0) return slice(x, axis, 0, 0);
        std::vector<value> copies(static_cast<std::size_t>(repeats[axis]), x);
        attributes a;
        a.axis = static_cast<std::int64_t>(axis);
        x = g_.apply(op::concat, copies, a);
    }
    return x;
}

// Negative indices count from the end: settled here when the indices are constants, selected at run
// time otherwise.
inline value importer::gather(const onnx_node& n) {
    const value data = input(n, 0);
    const auto rank = static_cast<std::int64_t>(data.rank());
    const std::int64_t axis = normalized_axis(int_attribute(n, "axis", 0), rank, where(n));
    const std::int64_t extent = data.shape()[static_cast<std::size_t>(axis)];
    value indices;
    if (std::optional<host_tensor> constant_indices = known(n.inputs.at(1), where(n), false)) {
        std::vector<std::int64_t> values = integers_of(*constant_indices);
        for (auto& v : values) {
            if (v < -extent || v >= extent)
                throw shape_error(message(where(n), ": index ", v, " is out of range for extent ", extent));
            if (v < 0) v += extent;
        }
        indices = constant(host_tensor::from(values, constant_indices->shape()));
    } else {
        const value given = input(n, 1);
        indices = apply(op::where,
                        {apply(op::less, {given, scalar_like(0.0, given)}),
                         apply(op::add, {given, scalar_like(static_cast<double>(extent), given)}), given});
    }
    attributes a;
    a.axis = axis;
    return apply(op::gather, {data, indices}, a);
}

// starts, ends, axes, steps: attributes before opset 10, inputs since. anvil slices forwards only.
inline value importer::slice_node(const onnx_node& n) {
    const value x = input(n, 0);
    const auto rank = static_cast<std::int64_t>(x.rank());
    std::vector<std::int64_t> starts, ends, axes, steps;
    if (opset_ < 10) {
        starts = ints_attribute(n, "starts").value_or(std::vector<std::int64_t>{});
        ends = ints_attribute(n, "ends").value_or(std::vector<std::int64_t>{});
        axes = ints_attribute(n, "axes").value_or(std::vector<std::int64_t>{});
    } else {
        starts = required_ints(n, 1, "the starts");
        ends = required_ints(n, 2, "the ends");
        if (has_input(n, 3)) axes = required_ints(n, 3, "the axes");
        if (has_input(n, 4)) steps = required_ints(n, 4, "the steps");
    }
    if (axes.empty())
        for (std::size_t i = 0; i < starts.size(); ++i)
            axes.push_back(static_cast<std::int64_t>(i));
    if (steps.empty()) steps.assign(starts.size(), 1);
    if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
        throw shape_error(message(where(n), ": starts, ends, axes and steps differ in length"));
    attributes a;
    const std::vector<std::int64_t> shape = extents_of(x.shape());
    a.begin.assign(shape.size(), 0);
    a.end = shape;
    a.step.assign(shape.size(), 1);
    std::vector<std::pair<std::size_t, std::vector<std::int64_t>>> backwards;
    for (std::size_t i = 0; i < starts.size(); ++i) {
        const auto axis = static_cast<std::size_t>(normalized_axis(axes[i], rank, where(n)));
        if (steps[i] == 0) throw shape_error(message(where(n), ": step 0"));
        const std::int64_t extent = shape[axis];
        if (steps[i] < 0) {
            // ONNX clamps a backward slice's bounds to [-1, extent - 1]; the positions are then picked.
            const auto clamp = [extent](std::int64_t v) {
                return std::clamp<std::int64_t>(v < 0 ? v + extent : v, -1, extent - 1);
            };
            std::vector<std::int64_t> positions;
            for (std::int64_t at = clamp(starts[i]); at > clamp(ends[i]); at += steps[i])
                positions.push_back(at);
            backwards.emplace_back(axis, std::move(positions));
            continue;
        }
        const auto clamp = [extent](std::int64_t v) {
            return std::clamp<std::int64_t>(v < 0 ? v + extent : v, 0, extent);
        };
        a.begin[axis] = clamp(starts[i]);
        a.end[axis] = clamp(ends[i]);
        a.step[axis] = steps[i];
    }
    value y = g_.apply(op::slice, {x}, a);
    for (const auto& [axis, positions] : backwards)
        y = positions.empty() ? slice(y, axis, 0, 0) : pick(y, axis, positions);
    return y;
}

// The parts: the `split` attribute (input since opset 13), or equal parts.
inline std::vector<value> importer::split(const onnx_node& n) {
    const value x = input(n, 0);
    const auto rank = static_cast<std::int64_t>(x.rank());
    const auto axis = static_cast<std::size_t>(normalized_axis(int_attribute(n, "axis", 0), rank, where(n)));
    const std::int64_t extent = x.shape()[axis];
    std::vector<std::int64_t> parts;
    if (opset_ < 13) {
        parts = ints_attribute(n, "split").value_or(std::vector<std::int64_t>{});
    } else if (has_input(n, 1)) {
        parts = required_ints(n, 1, "the split");
    }
    if (parts.empty()) {
        const auto count = static_cast<std::int64_t>(n.outputs.size());
        const std::int64_t each = (extent + count - 1) / count;
        for (std::int64_t at = 0; at < extent; at += each)
            parts.push_back(std::min(each, extent - at));
    }
    std::int64_t total = 0;
    for (const std::int64_t p : parts) {
        if (p < 0) throw shape_error(message(where(n), ": a negative part"));
        total += p;
    }
    if (total != extent || parts.size() != n.outputs.size())
        throw shape_error(message(where(n), ": parts ", anvil::detail::extents_to_string(parts, false),
                                  " do not split extent ", extent, " into ", n.outputs.size(), " outputs"));
    std::vector<value> out;
    std::int64_t at = 0;
    for (const std::int64_t p : parts) {
        out.push_back(slice(x, axis, at, at + p));
        at += p;
    }
    return out;
}

// Constant padding (pads: an attribute before opset 11, an input since); negative pads crop.
inline value importer::pad(const onnx_node& n) {
    value x = input(n, 0);
    const std::string mode = string_attribute(n, "mode", "constant");
    if (mode != "constant" && mode != "reflect" && mode != "edge")
        unsupported(n, message("mode '", mode, "'"));
    std::vector<std::int64_t> pads;
    float fill = 0.0f;
    if (opset_ < 11) {
        pads = ints_attribute(n, "pads").value_or(
            ints_attribute(n, "paddings").value_or(std::vector<std::int64_t>{}));
        fill = float_attribute(n, "value", 0.0f);
    } else {
        pads = required_ints(n, 1, "the pads");
        const double given = optional_scalar(n, 2, "the constant value").value_or(0.0);
        fill = static_cast<float>(given);
        // pad's value is a float attribute: a float64 value it would round is refused, not rounded.
        if (x.type() == dtype::f64 && static_cast<double>(fill) != given && !std::isnan(given))
            unsupported(n, message("the float64 constant value ", given, ", which float32 would round"));
    }
    const std::size_t rank = x.rank();
    std::vector<std::int64_t> axes;
    if (has_input(n, 3)) {
        for (const std::int64_t a : required_ints(n, 3, "the axes"))
            axes.push_back(normalized_axis(a, static_cast<std::int64_t>(rank), where(n)));
    } else {
        for (std::size_t i = 0; i < rank; ++i)
            axes.push_back(static_cast<std::int64_t>(i));
    }
    if (pads.size() != 2 * axes.size())
        throw shape_error(message(where(n), ": ", pads.size(), " pads for ", axes.size(), " axes"));
    attributes a;
    a.begin.assign(rank, 0);
    a.end.assign(rank, 0);
    a.value = fill;
    bool crops = false;
    for (std::size_t i = 0; i < axes.size(); ++i) {
        const auto axis = static_cast<std::size_t>(axes[i]);
        a.begin[axis] = pads[i];
        a.end[axis] = pads[i + axes.size()];
        crops = crops || pads[i] < 0 || pads[i + axes.size()] < 0;
    }
    if (crops) {
        attributes cut;
        const std::vector<std::int64_t> shape = extents_of(x.shape());
        for (std::size_t axis = 0; axis < rank; ++axis) {
            cut.begin.push_back(std::max<std::int64_t>(-a.begin[axis], 0));
            cut.end.push_back(shape[axis] - std::max<std::int64_t>(-a.end[axis], 0));
            cut.step.push_back(1);
            a.begin[axis] = std::max<std::int64_t>(a.begin[axis], 0);
            a.end[axis] = std::max<std::int64_t>(a.end[axis], 0);
        }
        x = g_.apply(op::slice, {x}, cut);
    }
    if (mode == "constant") return g_.apply(op::pad, {x}, a);
    // Edge and reflect padding pick, along each padded axis, the positions numpy's pad reads: clamped to
    // the ends, or mirrored about them without repeating the edge.
    for (std::size_t axis = 0; axis < rank; ++axis) {
        if (a.begin[axis] == 0 && a.end[axis] == 0) continue;
        const std::int64_t extent = x.shape()[axis];
        if (extent == 0 || (mode == "reflect" && extent == 1))
            throw shape_error(message(where(n), ": cannot ", mode, "-pad axis ", axis, " of ", x.shape()));
        std::vector<std::int64_t> positions;
        for (std::int64_t i = -a.begin[axis]; i < extent + a.end[axis]; ++i) {
            std::int64_t at = i;
            if (mode == "edge") {
                at = std::clamp<std::int64_t>(i, 0, extent - 1);
            } else {
                const std::int64_t period = 2 * (extent - 1);
                at = ((i % period) + period) % period;
                if (at >= extent) at = period - at;
            }
            positions.push_back(at);
        }
        x = pick(x, axis, positions);
    }
    return x;
}

// The upper (or lower) triangle of the last two axes, from diagonal k: a select with a constant mask,
// exact for every element type.
inline value importer::trilu(const onnx_node& n) {
    const value x = input(n, 0);
    if (x.rank() < 2) throw shape_error(message(where(n), ": the input ", x.shape(), " is not a matrix"));
    std::int64_t k = 0;
    if (has_input(n, 1)) {
        const std::vector<std::int64_t> given = required_ints(n, 1, "k");
        if (given.size() != 1) throw shape_error(message(where(n), ": k must be one value"));
        k = given[0];
    }
    const bool upper = int_attribute(n, "upper", 1) != 0;
    const std::int64_t rows = x.shape()[x.rank() - 2], columns = x.shape()[x.rank() - 1];
    host_tensor mask(dtype::boolean, dims{rows, columns});
    auto* bits = static_cast<std::uint8_t*>(mask.raw());
    for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < columns; ++j)
            bits[i * columns + j] = upper ? (j - i >= k) : (j - i <= k);
    return apply(op::where, {constant(std::move(mask)), x, scalar_like(0.0, x)});
}

// DepthToSpace (DCR or CRD order) and SpaceToDepth as ONNX defines them: a reshape to six axes, a
// permutation, a reshape back.
inline value importer::depth_space(const onnx_node& n, bool to_space) {
    const value x = input(n, 0);
    if (x.rank() != 4) throw shape_error(message(where(n), ": the input ", x.shape(), " is not NCHW"));
    const std::int64_t b = int_attribute(n, "blocksize", 0);
    if (b <= 0) throw format_error(message(where(n), ": blocksize must be positive"));
    const std::int64_t batch = x.shape()[0], c = x.shape()[1], h = x.shape()[2], w = x.shape()[3];
    if (to_space) {
        if (c % (b * b) != 0)
            throw shape_error(message(where(n), ": ", c, " channels do not divide by blocksize^2"));
        const bool crd = string_attribute(n, "mode", "DCR") == "CRD";
        const value six =
            crd ? reshape(x, {batch, c / (b * b), b, b, h, w}) : reshape(x, {batch, b, b, c / (b * b), h, w});
        const value moved = crd ? permute(six, {0, 1, 4, 2, 5, 3}) : permute(six, {0, 3, 4, 1, 5, 2});
        return reshape(moved, {batch, c / (b * b), h * b, w * b});
    }
    if (h % b != 0 || w % b != 0)
        throw shape_error(message(where(n), ": ", h, "x", w, " does not divide by blocksize ", b));
    const value six = reshape(x, {batch, c, h / b, b, w / b, b});
    return reshape(permute(six, {0, 3, 5, 1, 2, 4}), {batch, c * b * b, h / b, w / b});
}

// The signal-processing windows of a size settled at import (periodic: of size + 1, its last value
// dropped), as constants.
inline value importer::window_node(const onnx_node& n) {
    const std::vector<std::int64_t> size_values = required_ints(n, 0, "the size");
    if (size_values.size() != 1 || size_values[0] < 0)
        throw shape_error(message(where(n), ": the size must be one non-negative value"));
    const std::int64_t size = size_values[0];
    const bool periodic = int_attribute(n, "periodic", 1) != 0;
    const double span = static_cast<double>(periodic ? size : size - 1);
    const double pi = 3.14159265358979323846;
    std::vector<double> values(static_cast<std::size_t>(size));
    for (std::int64_t i = 0; i < size; ++i) {
        const double phase = span > 0 ? 2.0 * pi * static_cast<double>(i) / span : 0.0;
        double w = 0.0;
        if (n.op_type == "HannWindow") w = 0.5 - 0.5 * std::cos(phase);
        if (n.op_type == "HammingWindow") w = 25.0 / 46.0 - (21.0 / 46.0) * std::cos(phase);
        if (n.op_type == "BlackmanWindow") w = 0.42 - 0.5 * std::cos(phase) + 0.08 * std::cos(2.0 * phase);
        values[static_cast<std::size_t>(i)] = w;
    }
    const std::optional<dtype> type =
        onnx_dtype(static_cast<std::int32_t>(int_attribute(n, "output_datatype", 1)));
    if (!type) unsupported(n, "the output_datatype");
    host_tensor out(dtype::f64, dims{size});
    if (size > 0) std::memcpy(out.raw(), values.data(), values.size() * sizeof(double));
    return cast(constant(std::move(out)), *type);
}

// 0, 1, ..., count - 1 as int64, laid along `axis` of a rank-`rank` shape (1 elsewhere).
inline value importer::positions_along(std::int64_t count, std::size_t axis, std::size_t rank) {
    std::vector<std::int64_t> values(static_cast<std::size_t>(count));
    for (std::int64_t i = 0; i < count; ++i)
        values[static_cast<std::size_t>(i)] = i;
    std::vector<std::int64_t> shape(rank, 1);
    shape[axis] = count;
    return constant(host_tensor::from(values, dims(shape)));
}

// values[1] where the index (negative: counted from depth) is the position along the new axis, values[0]
// elsewhere.
inline value importer::one_hot(const onnx_node& n) {
    value indices = input(n, 0);
    const std::vector<float> depth_values = required(n, 1, "the depth").to_f32();
    if (depth_values.size() != 1) throw shape_error(message(where(n), ": the depth must be one value"));
    const auto depth = static_cast<std::int64_t>(depth_values[0]);
    if (depth <= 0) throw shape_error(message(where(n), ": the depth must be positive"));
    const value values = input(n, 2);
    if (values.shape().element_count() != 2)
        throw shape_error(message(where(n), ": the values must be [off, on]"));
    const auto out_rank = static_cast<std::int64_t>(indices.rank() + 1);
    const auto axis =
        static_cast<std::size_t>(normalized_axis(int_attribute(n, "axis", -1), out_rank, where(n)));
    indices = cast(indices, dtype::i64);
    const value wrapped = apply(
        op::where, {apply(op::less, {indices, scalar(0.0, dtype::i64)}),
                    apply(op::add, {indices, scalar(static_cast<double>(depth), dtype::i64)}), indices});
    std::vector<std::int64_t> expanded = extents_of(indices.shape());
    expanded.insert(expanded.begin() + static_cast<std::ptrdiff_t>(axis), 1);
    const value hit = apply(op::equal, {reshape(wrapped, expanded),
                                        positions_along(depth, axis, static_cast<std::size_t>(out_rank))});
    const value flat = reshape(values, {2});
    return apply(op::where, {hit, reshape(slice(flat, 0, 1, 2), {}), reshape(slice(flat, 0, 0, 1), {})});
}

inline value importer::eye_like(const onnx_node& n) {
    const value x = input(n, 0);
    if (x.rank() != 2) throw shape_error(message(where(n), ": the input ", x.shape(), " is not a matrix"));
    dtype type = x.type();
    if (const onnx_attribute* to = n.find("dtype")) {
        const std::optional<dtype> given = onnx_dtype(static_cast<std::int32_t>(to->i));
        if (!given) unsupported(n, message("the dtype ", onnx_type_name(static_cast<std::int32_t>(to->i))));
        type = *given;
    }
    const std::int64_t k = int_attribute(n, "k", 0), rows = x.shape()[0], columns = x.shape()[1];
    std::vector<float> values(static_cast<std::size_t>(rows * columns), 0.0f);
    for (std::int64_t i = 0; i < rows; ++i)
        if (i + k >= 0 && i + k < columns) values[static_cast<std::size_t>(i * columns + i + k)] = 1.0f;
    return cast(constant(host_tensor::from(values, dims{rows, columns})), type);
}

}  // namespace anvil::models::onnx_detail
