// anvil: the ONNX importer's definitions (see onnx_import.hpp; compilation.hpp says when this file is
// compiled).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/graph/graph.hpp"
#include "anvil/models/onnx_import.hpp"

namespace anvil::models {

namespace onnx_detail {

using anvil::detail::message;

// One model's import: the values by name, the constant tensors by name (initializers and Constant nodes: what
// Reshape's shape, Squeeze's axes and Clip's bounds are read from), the model's default-domain opset.
class importer {
public:
    importer(const onnx_model& model, graph& g) : model_(model), g_(g), opset_(model.opset().value_or(1)) {}

    void bind(std::string name, value v) { values_[std::move(name)] = std::move(v); }
    void bind_constant(const onnx_tensor& t) {
        constants_[t.name] = &t;
        bind(t.name, g_.constant(host(t), t.name));
    }

    value input(const onnx_node& n, std::size_t index) const {
        const std::string& name = n.inputs.at(index);
        const auto found = values_.find(name);
        if (found == values_.end()) {
            throw format_error(message(model_.source_name(), ": node '", n.name, "' (", n.op_type,
                                       "): input '", name,
                                       "' is not a graph input, an initializer, nor the output of an earlier "
                                       "node (undefined, or the graph has a cycle)"));
        }
        return found->second;
    }
    bool has_input(const onnx_node& n, std::size_t index) const {
        return index < n.inputs.size() && !n.inputs[index].empty();
    }

    void node(const onnx_node& n) {
        if (!n.domain.empty() && n.domain != "ai.onnx")
            unsupported(n, message("the domain '", n.domain, "'"));
        if (n.outputs.empty()) throw format_error(message(where(n), ": no outputs"));
        const value result = import(n);
        bind(n.outputs[0], result);
    }

private:
    static host_tensor host(const onnx_tensor& t) {
        const std::optional<dtype> type = onnx_dtype(t.data_type);
        if (!type) {
            throw unsupported_error(message("ONNX tensor '", t.name, "': unsupported element type ",
                                            onnx_type_name(t.data_type)));
        }
        const std::vector<std::byte> bytes = t.to_bytes();
        host_tensor out(*type, dims(t.dims));
        if (!bytes.empty()) std::memcpy(out.raw(), bytes.data(), bytes.size());
        return out;
    }

    std::string where(const onnx_node& n) const {
        return message(model_.source_name(), ": node '", n.name, "' (", n.op_type, ", opset ", opset_, ")");
    }
    [[noreturn]] void unsupported(const onnx_node& n, std::string_view what) const {
        throw unsupported_error(message(model_.source_name(), ": unsupported ONNX op '", n.op_type,
                                        "' (node '", n.name, "', opset ", opset_, "): ", what));
    }

    std::int64_t int_attribute(const onnx_node& n, std::string_view name, std::int64_t fallback) const {
        const onnx_attribute* a = n.find(name);
        return a != nullptr ? a->i : fallback;
    }
    float float_attribute(const onnx_node& n, std::string_view name, float fallback) const {
        const onnx_attribute* a = n.find(name);
        return a != nullptr ? a->f : fallback;
    }

    // The integers of input `index`, which must be a constant (an initializer or a Constant node's output).
    std::vector<std::int64_t> constant_ints(const onnx_node& n, std::size_t index,
                                            std::string_view what) const {
        const auto found = constants_.find(n.inputs.at(index));
        if (found == constants_.end())
            unsupported(
                n, message(what, " '", n.inputs[index], "' computed at run time (anvil needs it constant)"));
        const host_tensor t = host(*found->second);
        if (t.type() == dtype::i64) return {t.values<std::int64_t>().begin(), t.values<std::int64_t>().end()};
        if (t.type() == dtype::i32) return {t.values<std::int32_t>().begin(), t.values<std::int32_t>().end()};
        throw type_error(
            message(where(n), ": ", what, " must be int64, got ", onnx_type_name(found->second->data_type)));
    }
    std::optional<float> constant_scalar(const onnx_node& n, std::size_t index, std::string_view what) const {
        if (!has_input(n, index)) return std::nullopt;
        const auto found = constants_.find(n.inputs[index]);
        if (found == constants_.end())
            unsupported(
                n, message(what, " '", n.inputs[index], "' computed at run time (anvil needs it constant)"));
        const std::vector<float> values = host(*found->second).to_f32();
        if (values.size() != 1) throw shape_error(message(where(n), ": ", what, " must be one value"));
        return values[0];
    }

    // A scalar of v's floating type.
    value scalar(float x, const value& like) {
        value s = g_.constant(host_tensor::from(std::vector<float>{x}, dims{}));
        if (like.type() == dtype::f32) return s;
        attributes to;
        to.to = like.type();
        return g_.apply(op::cast, {s}, to);
    }

    value reshape(const value& v, std::vector<std::int64_t> sizes) {
        attributes a;
        a.sizes = std::move(sizes);
        return g_.apply(op::reshape, {v}, a);
    }

    value import(const onnx_node& n) {
        const std::string& type = n.op_type;
        static const std::map<std::string_view, op, std::less<>> unary = {
            {"Relu", op::relu}, {"Sigmoid", op::sigmoid}, {"Tanh", op::tanh}, {"Exp", op::exp},
            {"Log", op::log},   {"Sqrt", op::sqrt},       {"Abs", op::abs},   {"Neg", op::neg}};
        static const std::map<std::string_view, op, std::less<>> binary = {
            {"Add", op::add}, {"Sub", op::sub}, {"Mul", op::mul}, {"Div", op::div}, {"Pow", op::pow}};
        if (const auto u = unary.find(type); u != unary.end()) return g_.apply(u->second, {input(n, 0)});
        if (const auto b = binary.find(type); b != binary.end())
            return g_.apply(b->second, {input(n, 0), input(n, 1)});
        if (type == "Identity") return input(n, 0);
        if (type == "Max" || type == "Min") {
            value out = input(n, 0);
            for (std::size_t i = 1; i < n.inputs.size(); ++i)
                out = g_.apply(type == "Max" ? op::maximum : op::minimum, {out, input(n, i)});
            return out;
        }
        if (type == "MatMul") return matmul(n);
        if (type == "Gemm") return gemm(n);
        if (type == "Softmax") return softmax(n);
        if (type == "Reshape") return reshape_node(n);
        if (type == "Transpose") {
            const value x = input(n, 0);
            attributes a;
            if (const onnx_attribute* perm = n.find("perm")) {
                a.axes = perm->ints;
            } else {
                for (std::size_t i = x.rank(); i-- > 0;)
                    a.axes.push_back(static_cast<std::int64_t>(i));
            }
            return g_.apply(op::permute, {x}, a);
        }
        if (type == "Flatten") {
            const value x = input(n, 0);
            const auto rank = static_cast<std::int64_t>(x.rank());
            std::int64_t axis = int_attribute(n, "axis", 1);
            if (axis < 0) axis += rank;
            if (axis < 0 || axis > rank)
                throw shape_error(message(where(n), ": axis out of range for ", x.shape()));
            std::int64_t outer = 1, inner = 1;
            for (std::int64_t i = 0; i < rank; ++i)
                (i < axis ? outer : inner) *= x.shape()[static_cast<std::size_t>(i)];
            return reshape(x, {outer, inner});
        }
        if (type == "Concat") {
            std::vector<value> parts;
            for (std::size_t i = 0; i < n.inputs.size(); ++i)
                parts.push_back(input(n, i));
            attributes a;
            const onnx_attribute* axis = n.find("axis");
            if (axis == nullptr) throw format_error(message(where(n), ": Concat needs its axis attribute"));
            a.axis = axis->i;
            return g_.apply(op::concat, parts, a);
        }
        if (type == "Squeeze" || type == "Unsqueeze") return squeeze(n, type == "Unsqueeze");
        if (type == "Clip") {
            const value x = input(n, 0);
            attributes a;
            a.min = std::numeric_limits<float>::lowest();
            a.max = std::numeric_limits<float>::max();
            if (opset_ < 11) {
                a.min = float_attribute(n, "min", a.min);
                a.max = float_attribute(n, "max", a.max);
            } else {
                a.min = constant_scalar(n, 1, "the minimum").value_or(a.min);
                a.max = constant_scalar(n, 2, "the maximum").value_or(a.max);
            }
            return g_.apply(op::clamp, {x}, a);
        }
        if (type == "Constant") return constant(n);
        unsupported(n, "no import for this op yet");
    }

    // A constant matrix [K, N] as a linear layer's weight [N, K] (transposed on the host once), or as it is
    // when it is [N, K] already: a product with a constant weight is what the Neural Engine runs as a
    // convolution (a matmul with a computed operand needs the matmul op, which an M1 lacks).
    std::optional<value> linear_weight(const onnx_node& n, std::size_t index, bool stored_out_in) {
        const auto found = constants_.find(n.inputs.at(index));
        if (found == constants_.end() || found->second->dims.size() != 2) return std::nullopt;
        const host_tensor stored = host(*found->second);
        if (stored_out_in) return values_.at(n.inputs[index]);
        const std::int64_t k = stored.shape()[0], columns = stored.shape()[1];
        host_tensor weight(stored.type(), dims{columns, k});
        const std::size_t size = dtype_size(stored.type());
        const auto* from = static_cast<const std::byte*>(stored.raw());
        auto* to = static_cast<std::byte*>(weight.raw());
        for (std::int64_t r = 0; r < k; ++r)
            for (std::int64_t c = 0; c < columns; ++c)
                std::memcpy(to + static_cast<std::size_t>(c * k + r) * size,
                            from + static_cast<std::size_t>(r * columns + c) * size, size);
        return g_.constant(std::move(weight), n.inputs[index] + " (transposed)");
    }

    value matmul(const onnx_node& n) {
        const value a = input(n, 0);
        if (a.rank() >= 2) {
            if (const std::optional<value> w = linear_weight(n, 1, false))
                return g_.apply(op::linear, {a, *w});
        }
        return g_.apply(op::matmul, {a, input(n, 1)});
    }

    // Y = alpha * A' B' + beta * C, A' and B' transposed as transA and transB say.
    value gemm(const onnx_node& n) {
        const bool transpose_a = int_attribute(n, "transA", 0) != 0;
        const bool transpose_b = int_attribute(n, "transB", 0) != 0;
        const float alpha = float_attribute(n, "alpha", 1.0f), beta = float_attribute(n, "beta", 1.0f);
        std::optional<value> w;
        if (!transpose_a) w = linear_weight(n, 1, transpose_b);
        value y;
        bool bias_added = false;
        if (w) {
            std::vector<value> operands{input(n, 0), *w};
            // C as the linear layer's bias when it is one value per output and beta 1.
            if (has_input(n, 2) && beta == 1.0f && alpha == 1.0f && input(n, 2).rank() == 1 &&
                input(n, 2).shape()[0] == w->shape()[0]) {
                operands.push_back(input(n, 2));
                bias_added = true;
            }
            y = g_.apply(op::linear, operands);
        } else {
            attributes a;
            a.transpose_a = transpose_a;
            a.transpose_b = transpose_b;
            y = g_.apply(op::matmul, {input(n, 0), input(n, 1)}, a);
        }
        if (alpha != 1.0f) y = g_.apply(op::mul, {y, scalar(alpha, y)});
        if (has_input(n, 2) && !bias_added) {
            value c = input(n, 2);
            if (beta != 1.0f) c = g_.apply(op::mul, {c, scalar(beta, c)});
            y = g_.apply(op::add, {y, c});
        }
        return y;
    }

    // Opset 13 made Softmax one axis (default -1); before, the input was read as a matrix [d0..axis-1,
    // axis..] (default axis 1) and normalised over its rows.
    value softmax(const onnx_node& n) {
        const value x = input(n, 0);
        const auto rank = static_cast<std::int64_t>(x.rank());
        attributes a;
        if (opset_ >= 13) {
            a.axis = int_attribute(n, "axis", -1);
            return g_.apply(op::softmax, {x}, a);
        }
        std::int64_t axis = int_attribute(n, "axis", 1);
        if (axis < 0) axis += rank;
        if (axis < 0 || axis >= std::max<std::int64_t>(rank, 1))
            throw shape_error(message(where(n), ": axis out of range for ", x.shape()));
        if (axis == rank - 1) {
            a.axis = axis;
            return g_.apply(op::softmax, {x}, a);
        }
        std::int64_t outer = 1, inner = 1;
        for (std::int64_t i = 0; i < rank; ++i)
            (i < axis ? outer : inner) *= x.shape()[static_cast<std::size_t>(i)];
        a.axis = 1;
        const value rows = g_.apply(op::softmax, {reshape(x, {outer, inner})}, a);
        const dims shape = x.shape();  // by value: begin() and end() of one copy
        return reshape(rows, std::vector<std::int64_t>(shape.begin(), shape.end()));
    }

    // The target shape: an attribute before opset 5, a constant input since; 0 copies the input's extent
    // (unless allowzero, opset 14), one -1 is inferred.
    value reshape_node(const onnx_node& n) {
        const value x = input(n, 0);
        std::vector<std::int64_t> sizes;
        if (opset_ < 5) {
            const onnx_attribute* shape = n.find("shape");
            if (shape == nullptr)
                throw format_error(message(where(n), ": Reshape needs its shape attribute"));
            sizes = shape->ints;
        } else {
            sizes = constant_ints(n, 1, "the shape");
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

    // The axes: an attribute before opset 13, a constant input since (Squeeze's optional: every extent 1).
    value squeeze(const onnx_node& n, bool unsqueeze) {
        const value x = input(n, 0);
        std::vector<std::int64_t> axes;
        if (opset_ < 13) {
            if (const onnx_attribute* a = n.find("axes")) axes = a->ints;
        } else if (has_input(n, 1)) {
            axes = constant_ints(n, 1, "the axes");
        }
        const dims shape = x.shape();  // by value: begin() and end() of one copy
        const std::vector<std::int64_t> in(shape.begin(), shape.end());
        const auto out_rank = static_cast<std::int64_t>(unsqueeze ? in.size() + axes.size() : in.size());
        for (auto& axis : axes) {
            if (axis < 0) axis += out_rank;
            if (axis < 0 || axis >= out_rank)
                throw shape_error(message(where(n), ": an axis is out of range for ", x.shape()));
        }
        std::vector<std::int64_t> sizes;
        if (unsqueeze) {
            if (axes.empty()) throw format_error(message(where(n), ": Unsqueeze needs axes"));
            std::size_t next = 0;
            for (std::int64_t i = 0; i < out_rank; ++i) {
                if (std::find(axes.begin(), axes.end(), i) != axes.end()) {
                    sizes.push_back(1);
                } else {
                    sizes.push_back(in.at(next++));
                }
            }
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

    value constant(const onnx_node& n) {
        if (n.attributes.size() != 1)
            throw format_error(message(where(n), ": a Constant holds one attribute"));
        const onnx_attribute& a = n.attributes[0];
        if (a.name == "value" && a.tensors.size() == 1) {
            onnx_tensor t = a.tensors[0];
            t.name = n.outputs[0];
            owned_.push_back(std::make_unique<onnx_tensor>(std::move(t)));
            constants_[n.outputs[0]] = owned_.back().get();
            return g_.constant(host(*owned_.back()), n.outputs[0]);
        }
        onnx_tensor t;
        t.name = n.outputs[0];
        if (a.name == "value_float") {
            t.data_type = static_cast<std::int32_t>(onnx_type::float32);
            t.floats = {a.f};
        } else if (a.name == "value_floats") {
            t.data_type = static_cast<std::int32_t>(onnx_type::float32);
            t.floats = a.floats;
            t.dims = {static_cast<std::int64_t>(a.floats.size())};
        } else if (a.name == "value_int") {
            t.data_type = static_cast<std::int32_t>(onnx_type::int64);
            t.integers = {a.i};
        } else if (a.name == "value_ints") {
            t.data_type = static_cast<std::int32_t>(onnx_type::int64);
            t.integers = a.ints;
            t.dims = {static_cast<std::int64_t>(a.ints.size())};
        } else {
            unsupported(n, message("a Constant's '", a.name, "' attribute"));
        }
        owned_.push_back(std::make_unique<onnx_tensor>(std::move(t)));
        constants_[n.outputs[0]] = owned_.back().get();
        return g_.constant(host(*owned_.back()), n.outputs[0]);
    }

    const onnx_model& model_;
    graph& g_;
    std::int64_t opset_;
    std::map<std::string, value, std::less<>> values_;
    std::map<std::string, const onnx_tensor*, std::less<>> constants_;
    std::vector<std::unique_ptr<onnx_tensor>> owned_;
};

}  // namespace onnx_detail

ANVIL_INLINE onnx_import import_onnx(const onnx_model& model,
                                     const std::map<std::string, dims, std::less<>>& input_shapes) {
    using anvil::detail::message;
    onnx_import result;
    onnx_detail::importer in(model, result.g);
    const onnx_graph& g = model.graph();
    std::map<std::string, const onnx_tensor*, std::less<>> initializers;
    for (const onnx_tensor& t : g.initializers) {
        initializers[t.name] = &t;
        in.bind_constant(t);
    }
    for (const auto& given : input_shapes) {
        const std::string& name = given.first;
        const bool known = std::any_of(g.inputs.begin(), g.inputs.end(),
                                       [&](const onnx_value_info& v) { return v.name == name; });
        if (!known) throw shape_error(message(model.source_name(), ": the model has no input '", name, "'"));
    }
    std::map<std::string, std::int64_t, std::less<>> symbols;
    for (const onnx_value_info& v : g.inputs) {
        if (initializers.contains(v.name)) continue;  // IR < 4 lists initializers as inputs too
        if (v.kind != "tensor") {
            throw unsupported_error(
                message(model.source_name(), ": unsupported input '", v.name, "': a ", v.kind));
        }
        const std::optional<dtype> type = onnx_dtype(v.elem_type);
        if (!type) {
            throw unsupported_error(message(model.source_name(), ": unsupported input '", v.name,
                                            "': element type ", onnx_type_name(v.elem_type)));
        }
        const auto given = input_shapes.find(v.name);
        std::vector<std::int64_t> extents;
        if (given != input_shapes.end()) {
            extents.assign(given->second.begin(), given->second.end());
            if (v.has_shape && v.shape.size() != extents.size()) {
                throw shape_error(message(model.source_name(), ": input '", v.name, "' has rank ",
                                          v.shape.size(), ", given ", given->second));
            }
        } else if (!v.has_shape) {
            throw shape_error(message(model.source_name(), ": input '", v.name,
                                      "' declares no shape: give it (--input NAME=F.npy gives the array's)"));
        }
        for (std::size_t i = 0; v.has_shape && i < v.shape.size(); ++i) {
            const onnx_dim& d = v.shape[i];
            if (given == input_shapes.end()) {
                if (!d.value) {
                    throw shape_error(message(model.source_name(), ": input '", v.name, "' dim ", i, " is ",
                                              d.param.empty() ? std::string("unknown") : "'" + d.param + "'",
                                              ": give the input's shape"));
                }
                extents.push_back(*d.value);
                continue;
            }
            if (d.value && *d.value != extents[i]) {
                throw shape_error(message(model.source_name(), ": input '", v.name, "' dim ", i, " is ",
                                          *d.value, ", given ", given->second));
            }
            if (!d.param.empty()) {
                const auto [at, fresh] = symbols.emplace(d.param, extents[i]);
                if (!fresh && at->second != extents[i]) {
                    throw shape_error(message(model.source_name(), ": dim '", d.param, "' is ", at->second,
                                              " in one input and ", extents[i], " in input '", v.name, "'"));
                }
            }
        }
        in.bind(v.name, result.g.input(v.name, *type, dims(extents)));
        result.input_names.push_back(v.name);
    }
    for (const onnx_node& n : g.nodes)
        in.node(n);
    for (const onnx_value_info& v : g.outputs) {
        onnx_node probe;
        probe.name = "(graph outputs)";
        probe.op_type = "output";
        probe.inputs = {v.name};
        result.outputs.push_back(in.input(probe, 0));
        result.output_names.push_back(v.name);
    }
    return result;
}

}  // namespace anvil::models
