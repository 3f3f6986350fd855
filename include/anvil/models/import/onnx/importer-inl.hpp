// anvil: the ONNX importer's state and the means its op imports share (models/import/onnx_import.hpp says
// what it does; compilation.hpp says when this file is compiled). The class keeps the IR value of every ONNX
// name and settles on the host the values no run's input decides; `import` dispatches each node to its op's
// import, defined by family in tensor_ops-inl.hpp (shapes and data movement), math_ops-inl.hpp (elementwise,
// products, reductions, losses, quantisation), network_ops-inl.hpp (convolution, pooling, normalisation,
// resizing) and recurrent_ops-inl.hpp (RNN, GRU, LSTM).
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

#include "anvil/backend/compile.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/graph/graph.hpp"
#include "anvil/io/onnx.hpp"

namespace anvil::models::onnx_detail {

using anvil::detail::message;

// The values of an integer (or boolean) tensor, widened.
inline std::vector<std::int64_t> integers_of(const host_tensor& t) {
    std::vector<std::int64_t> out;
    out.reserve(t.element_count());
    const auto copy = [&]<typename T>(T) {
        for (const T v : t.values<T>())
            out.push_back(static_cast<std::int64_t>(v));
    };
    switch (t.type()) {
        case dtype::i64:
            copy(std::int64_t{});
            break;
        case dtype::i32:
            copy(std::int32_t{});
            break;
        case dtype::i16:
            copy(std::int16_t{});
            break;
        case dtype::i8:
            copy(std::int8_t{});
            break;
        case dtype::u64:
            copy(std::uint64_t{});
            break;
        case dtype::u32:
            copy(std::uint32_t{});
            break;
        case dtype::u16:
            copy(std::uint16_t{});
            break;
        case dtype::u8:
            copy(std::uint8_t{});
            break;
        case dtype::boolean:
            copy(bool{});
            break;
        default:
            for (const float v : t.to_f32())
                out.push_back(static_cast<std::int64_t>(v));
    }
    return out;
}

inline std::vector<std::int64_t> extents_of(const dims& d) {
    return {d.begin(), d.end()};
}

// An axis as ONNX allows it (negative counts from the end), checked against the rank.
inline std::int64_t normalized_axis(std::int64_t axis, std::int64_t rank, const std::string& where) {
    if (axis < -rank || axis >= std::max<std::int64_t>(rank, 1))
        throw shape_error(message(where, ": axis ", axis, " is out of range for rank ", rank));
    return axis < 0 ? axis + rank : axis;
}

// One model's import. It keeps the IR value of every ONNX name, and evaluates on the host the values that do
// not depend on a run's inputs (initializers, Constant nodes, shapes, and what is computed from them), which
// is what Reshape's shape, Slice's bounds, Clip's limits and a PyTorch export's Shape -> Gather -> Concat
// chains need: anvil's programs have static shapes, so those are settled at import.
class importer {
public:
    importer(const onnx_model& model, graph& g, const std::map<std::string, host_tensor, std::less<>>& given)
        : model_(model), g_(g), opset_(model.opset().value_or(1)), given_(given) {}

    void bind(std::string name, value v) { values_[std::move(name)] = std::move(v); }
    void bind_initializer(const onnx_tensor& t) {
        initializers_[t.name] = &t;
        bind(t.name, g_.constant(onnx_host_tensor(t), t.name));
    }

    // A graph input: its IR input is made when an op first reads it as a tensor, so an input whose given
    // value only settled a shape (a Reshape's target) is not an input of the program.
    void declare_input(std::string name, dtype type, dims shape) {
        pending_.emplace(std::move(name), value_type{type, std::move(shape)});
    }
    // The graph inputs the program takes, by name.
    [[nodiscard]] bool made_input(const std::string& name) const { return made_.contains(name); }

    // The value called `name`; `where` says who asks, for the error.
    value lookup(const std::string& name, std::string_view where) {
        const auto found = values_.find(name);
        if (found != values_.end()) return found->second;
        if (const auto pending = pending_.find(name); pending != pending_.end()) {
            const value v = g_.input(name, pending->second.type, pending->second.shape);
            made_.insert(name);
            bind(name, v);
            return v;
        }
        // The reader's checker refuses undefined names; a name that reaches here was defined but never
        // bound by this import (an internal error, named rather than a crash).
        throw format_error(
            message(where, ": input '", name,
                    "' is not a graph input, an initializer, nor the output of an earlier node "
                    "(undefined, or the graph has a cycle)"));
    }

    void node(const onnx_node& n) {
        if (!n.domain.empty() && n.domain != "ai.onnx")
            unsupported(n, message("the domain '", n.domain, "'"));
        if (n.outputs.empty()) throw format_error(message(where(n), ": no outputs"));
        // Single assignment, defined inputs and topological order were checked when the model was read
        // (io/onnx-inl.hpp, onnx_graph_checker, as ONNX's checker does): every output here is a new name.
        const std::vector<value> results = import(n);
        for (std::size_t i = 0; i < n.outputs.size(); ++i) {
            if (n.outputs[i].empty()) continue;
            if (i >= results.size()) unsupported(n, message("its output ", i, " ('", n.outputs[i], "')"));
            bind(n.outputs[i], results[i]);
        }
    }

    // The graph inputs whose given values the import built into the program.
    [[nodiscard]] const std::set<std::string>& fixed_inputs() const noexcept { return fixed_; }

private:
    std::string where(const onnx_node& n) const {
        return message(model_.source_name(), ": node '", n.name, "' (", n.op_type, ", opset ", opset_, ")");
    }
    [[noreturn]] void unsupported(const onnx_node& n, std::string_view what) const {
        throw unsupported_error(message(model_.source_name(), ": unsupported ONNX op '", n.op_type,
                                        "' (node '", n.name, "', opset ", opset_, "): ", what));
    }

    // --- operands ------------------------------------------------------------------------------------

    value input(const onnx_node& n, std::size_t index) {
        if (!has_input(n, index)) throw format_error(message(where(n), ": input ", index, " is missing"));
        return lookup(n.inputs[index], where(n));
    }
    static bool has_input(const onnx_node& n, std::size_t index) {
        return index < n.inputs.size() && !n.inputs[index].empty();
    }

    std::int64_t int_attribute(const onnx_node& n, std::string_view name, std::int64_t fallback) const {
        const onnx_attribute* a = n.find(name);
        return a != nullptr ? a->i : fallback;
    }
    float float_attribute(const onnx_node& n, std::string_view name, float fallback) const {
        const onnx_attribute* a = n.find(name);
        return a != nullptr ? a->f : fallback;
    }
    std::string string_attribute(const onnx_node& n, std::string_view name, std::string fallback) const {
        const onnx_attribute* a = n.find(name);
        return a != nullptr ? a->s : fallback;
    }
    std::optional<std::vector<std::int64_t>> ints_attribute(const onnx_node& n, std::string_view name) const {
        const onnx_attribute* a = n.find(name);
        if (a == nullptr) return std::nullopt;
        return a->ints;
    }

    // Whether node `id` depends on a graph input (memoised over the nodes appended so far).
    bool runtime(value_id id) {
        const std::vector<anvil::node>& nodes = g_.nodes();
        for (std::size_t i = runtime_.size(); i < nodes.size(); ++i) {
            bool depends = nodes[i].kind == op::input;
            for (const value_id in : nodes[i].inputs)
                depends = depends || runtime_[in] != 0;
            runtime_.push_back(depends ? 1 : 0);
        }
        return runtime_[id] != 0;
    }

    // The host value of `name` when no run's input decides it: an initializer, a Constant, a graph input
    // whose value the caller gave (the program is then specialised to it), or what the graph computes from
    // those, evaluated once on the CPU.
    // `use_given` false asks only whether the value is a constant of the model itself: an import that could
    // do without it (Gather's negative indices, settled early) must not specialise the program to an input.
    std::optional<host_tensor> known(const std::string& name, std::string_view asker, bool use_given = true) {
        if (const auto cached = known_.find(name); cached != known_.end()) {
            if (!cached->second.settles.empty() && !use_given) return std::nullopt;
            fixed_.insert(cached->second.settles.begin(), cached->second.settles.end());
            return cached->second.value;
        }
        std::optional<host_tensor> result;
        std::vector<std::string> settles;
        if (const auto init = initializers_.find(name); init != initializers_.end()) {
            result = onnx_host_tensor(*init->second);
        } else if (const auto given = given_.find(name); given != given_.end() && is_graph_input(name)) {
            if (!use_given) return std::nullopt;
            result = given->second;
            settles.push_back(name);
        } else {
            const value v = lookup(name, asker);
            if (v.producer().kind == op::constant) {
                result = v.producer().data;
            } else {
                std::vector<named_tensor> feeds;
                if (runtime(v.id())) {
                    // Computed from graph inputs: known only when every one of them was given.
                    if (!use_given) return std::nullopt;
                    for (const anvil::node& leaf : leaves(v.id())) {
                        const auto found = given_.find(leaf.name);
                        if (found == given_.end()) return std::nullopt;
                        feeds.push_back({leaf.name, found->second});
                        settles.push_back(leaf.name);
                    }
                }
                result = evaluate(v, feeds);
            }
        }
        fixed_.insert(settles.begin(), settles.end());
        known_.emplace(name, known_value{*result, std::move(settles)});
        return result;
    }
    bool is_graph_input(const std::string& name) const { return pending_.contains(name); }

    // v computed on the CPU from a copy of the nodes it reads (a program over the whole graph would ask for
    // every input in it).
    host_tensor evaluate(const value& v, const std::vector<named_tensor>& feeds) const {
        const std::vector<anvil::node>& nodes = g_.nodes();
        std::vector<char> needed(nodes.size(), 0);
        needed[v.id()] = 1;
        for (std::size_t i = v.id() + 1; i-- > 0;)
            if (needed[i] != 0)
                for (const value_id in : nodes[i].inputs)
                    needed[in] = 1;
        graph part;
        std::vector<value> copies(v.id() + 1);
        for (std::size_t i = 0; i <= v.id(); ++i) {
            if (needed[i] == 0) continue;
            const anvil::node& at = nodes[i];
            if (at.kind == op::input) {
                copies[i] = part.input(at.name, at.result.type, at.result.shape);
            } else if (at.kind == op::constant) {
                copies[i] = part.constant(at.data, at.name);
            } else {
                std::vector<value> operands;
                for (const value_id in : at.inputs)
                    operands.push_back(copies[in]);
                copies[i] = part.apply(at.kind, operands, at.attrs);
            }
        }
        program p = compile({copies[v.id()]});
        return p.run(feeds).at(0);
    }
    // The graph inputs node `id` reads.
    std::vector<anvil::node> leaves(value_id id) const {
        const std::vector<anvil::node>& nodes = g_.nodes();
        std::vector<char> seen(nodes.size(), 0);
        std::vector<value_id> stack{id};
        std::vector<anvil::node> found;
        while (!stack.empty()) {
            const value_id at = stack.back();
            stack.pop_back();
            if (seen[at] != 0) continue;
            seen[at] = 1;
            if (nodes[at].kind == op::input) found.push_back(nodes[at]);
            stack.insert(stack.end(), nodes[at].inputs.begin(), nodes[at].inputs.end());
        }
        return found;
    }

    std::optional<host_tensor> known(const onnx_node& n, std::size_t index) {
        if (!has_input(n, index)) return std::nullopt;
        return known(n.inputs[index], where(n));
    }
    // Input `index`, which anvil needs settled at import.
    host_tensor required(const onnx_node& n, std::size_t index, std::string_view what) {
        std::optional<host_tensor> t = known(n, index);
        if (!t) {
            unsupported(n, message(what, " '", n.inputs.at(index),
                                   "' is computed at run time (anvil needs it settled at import: give its "
                                   "value, or the values of the inputs it is computed from)"));
        }
        return std::move(*t);
    }
    std::vector<std::int64_t> required_ints(const onnx_node& n, std::size_t index, std::string_view what) {
        const host_tensor t = required(n, index, what);
        if (is_floating(t.type()))
            throw type_error(message(where(n), ": ", what, " must be integers, got ", dtype_name(t.type())));
        return integers_of(t);
    }
    // A float64 scalar is read as it is, every other type through float.
    std::optional<double> optional_scalar(const onnx_node& n, std::size_t index, std::string_view what) {
        if (!has_input(n, index)) return std::nullopt;
        const host_tensor t = required(n, index, what);
        if (t.element_count() != 1) throw shape_error(message(where(n), ": ", what, " must be one value"));
        if (t.type() == dtype::f64) return t.values<double>()[0];
        return t.to_f32()[0];
    }

    // --- building blocks -------------------------------------------------------------------------------

    value apply(op kind, std::initializer_list<value> inputs, attributes a = {}) {
        return g_.apply(kind, inputs, std::move(a));
    }
    value scalar(double x, dtype type) { return g_.scalar(x, type); }
    value scalar_like(double x, const value& like) { return g_.scalar(x, like.type()); }
    value reshape(const value& v, std::vector<std::int64_t> sizes) {
        if (sizes == extents_of(v.shape())) return v;
        attributes a;
        a.sizes = std::move(sizes);
        return g_.apply(op::reshape, {v}, a);
    }
    value cast(const value& v, dtype to) {
        if (v.type() == to) return v;
        attributes a;
        a.to = to;
        return g_.apply(op::cast, {v}, a);
    }
    value permute(const value& v, std::vector<std::int64_t> axes) {
        attributes a;
        a.axes = std::move(axes);
        return g_.apply(op::permute, {v}, a);
    }
    value slice(const value& v, std::size_t axis, std::int64_t begin, std::int64_t end,
                std::int64_t step = 1) {
        attributes a;
        const dims shape = v.shape();
        for (std::size_t i = 0; i < shape.rank(); ++i) {
            a.begin.push_back(i == axis ? begin : 0);
            a.end.push_back(i == axis ? end : shape[i]);
            a.step.push_back(i == axis ? step : 1);
        }
        return g_.apply(op::slice, {v}, a);
    }
    // x's elements at the given positions along `axis` (a gather of constant indices): anvil's slice steps
    // forwards only, so a backward slice or a reversal is this.
    value pick(const value& x, std::size_t axis, const std::vector<std::int64_t>& positions) {
        attributes a;
        a.axis = static_cast<std::int64_t>(axis);
        const auto count = static_cast<std::int64_t>(positions.size());
        return g_.apply(op::gather, {x, constant(host_tensor::from(positions, dims{count}))}, a);
    }
    value reversed(const value& x, std::size_t axis) {
        std::vector<std::int64_t> positions;
        for (std::int64_t i = x.shape()[axis]; i-- > 0;)
            positions.push_back(i);
        return pick(x, axis, positions);
    }
    value reduce(op kind, const value& v, std::vector<std::int64_t> axes, bool keep) {
        attributes a;
        a.axes = std::move(axes);
        a.keep_dims = keep;
        return g_.apply(kind, {v}, a);
    }
    value constant(host_tensor t, std::string label = {}) {
        return g_.constant(std::move(t), std::move(label));
    }
    // x broadcast to `shape` (numpy rules), exactly: a select whose condition is a constant true of the
    // extents x lacks, so any element type passes through unchanged.
    value broadcast_to(const value& x, const std::vector<std::int64_t>& shape) {
        const dims from = x.shape();
        std::vector<std::int64_t> mask(shape.size(), 1);
        bool grows = shape.size() != from.rank();
        for (std::size_t i = 0; i < shape.size(); ++i) {
            const std::size_t back = shape.size() - i;
            const std::int64_t have = back <= from.rank() ? from[from.rank() - back] : 1;
            if (have != shape[i]) {
                mask[i] = shape[i];
                grows = true;
            }
        }
        if (!grows) return x;
        host_tensor ones(dtype::boolean, dims(mask));
        std::memset(ones.raw(), 1, ones.byte_size());
        return g_.apply(op::where, {constant(std::move(ones)), x, x});
    }

    // --- the ops ------------------------------------------------------------------------------------------

    std::vector<value> import(const onnx_node& n) {
        const std::string& type = n.op_type;
        static const std::map<std::string_view, op, std::less<>> unary = {
            {"Relu", op::relu}, {"Sigmoid", op::sigmoid}, {"Tanh", op::tanh}, {"Exp", op::exp},
            {"Log", op::log},   {"Sqrt", op::sqrt},       {"Abs", op::abs},   {"Neg", op::neg},
            {"Erf", op::erf},   {"Floor", op::floor},     {"Ceil", op::ceil}, {"Round", op::round},
            {"Sign", op::sign}, {"Sin", op::sin},         {"Cos", op::cos},   {"Not", op::logical_not}};
        static const std::map<std::string_view, op, std::less<>> binary = {
            {"Add", op::add},
            {"Sub", op::sub},
            {"Mul", op::mul},
            {"Div", op::div},
            {"Equal", op::equal},
            {"Less", op::less},
            {"LessOrEqual", op::less_equal},
            {"Greater", op::greater},
            {"GreaterOrEqual", op::greater_equal},
            {"And", op::logical_and},
            {"Or", op::logical_or},
            {"Xor", op::logical_xor}};
        if (const auto u = unary.find(type); u != unary.end()) {
            const value x = input(n, 0);
            // anvil's unary ops are for floating types; integer negation and magnitude (shape arithmetic,
            // mostly) go through subtraction.
            if (!is_floating(x.type()) && (type == "Neg" || type == "Abs")) {
                const value negated = apply(op::sub, {scalar_like(0.0, x), x});
                return {type == "Neg" ? negated : apply(op::maximum, {x, negated})};
            }
            return {apply(u->second, {x})};
        }
        if (const auto b = binary.find(type); b != binary.end())
            return {apply(b->second, {input(n, 0), input(n, 1)})};
        if (type == "Identity") return {input(n, 0)};
        if (type == "Pow") return {power(n)};
        if (type == "Max" || type == "Min" || type == "Sum" || type == "Mean") return {variadic(n)};
        if (type == "MatMul") return {matmul(n)};
        if (type == "Gemm") return {gemm(n)};
        if (type == "Softmax" || type == "LogSoftmax") return {softmax(n, type == "LogSoftmax")};
        if (type == "Reshape") return {reshape_node(n)};
        if (type == "Transpose") return {transpose(n)};
        if (type == "Flatten") return {flatten(n)};
        if (type == "Concat") return {concat(n)};
        if (type == "Squeeze" || type == "Unsqueeze") return {squeeze(n, type == "Unsqueeze")};
        if (type == "Clip") return {clip(n)};
        if (type == "Constant") return {constant_node(n)};
        if (type == "Cast" || type == "CastLike") return {cast_node(n)};
        if (type == "Shape") return {shape_node(n)};
        if (type == "Size") return {size_node(n)};
        if (type == "ConstantOfShape") return {constant_of_shape(n)};
        if (type == "Range") return {range(n)};
        if (type == "Dropout") return dropout(n);
        if (type == "Where") return {apply(op::where, {input(n, 0), input(n, 1), input(n, 2)})};
        if (type == "Expand") return {expand(n)};
        if (type == "Tile") return {tile(n)};
        if (type == "Gather") return {gather(n)};
        if (type == "Slice") return {slice_node(n)};
        if (type == "Split") return split(n);
        if (type == "Pad") return {pad(n)};
        if (type == "Trilu") return {trilu(n)};
        if (type == "DepthToSpace" || type == "SpaceToDepth") return {depth_space(n, type == "DepthToSpace")};
        if (type == "Conv") return {conv(n)};
        if (type == "ConvTranspose") return {conv_transpose(n)};
        if (type == "MaxPool" || type == "AveragePool") return {pool(n, type == "MaxPool")};
        if (type == "GlobalAveragePool" || type == "GlobalMaxPool") {
            const value x = input(n, 0);
            std::vector<std::int64_t> axes;
            for (std::size_t i = 2; i < x.rank(); ++i)
                axes.push_back(static_cast<std::int64_t>(i));
            if (axes.empty())
                throw shape_error(message(where(n), ": the input ", x.shape(), " has no spatial axes"));
            return {reduce(type == "GlobalMaxPool" ? op::reduce_max : op::reduce_mean, x, axes, true)};
        }
        if (type == "BatchNormalization") return {batch_norm(n)};
        if (type == "InstanceNormalization") return {instance_norm(n)};
        if (type == "LayerNormalization") return layer_norm(n);
        if (type.starts_with("Reduce")) return {reduction(n)};
        if (type == "ArgMax" || type == "ArgMin") return {arg_extreme(n, type == "ArgMin")};
        if (type == "Resize" || type == "Upsample") return {resize(n)};
        if (type == "Reciprocal") {
            const value x = input(n, 0);
            return {apply(op::div, {scalar_like(1.0, x), x})};
        }
        if (type == "Tan") {
            const value x = input(n, 0);
            return {apply(op::div, {apply(op::sin, {x}), apply(op::cos, {x})})};
        }
        if (type == "Sinh" || type == "Cosh") {
            // (e^x -+ e^-x) / 2
            const value x = input(n, 0);
            const value up = apply(op::exp, {x}), down = apply(op::exp, {apply(op::neg, {x})});
            return {
                apply(op::mul, {apply(type == "Sinh" ? op::sub : op::add, {up, down}), scalar_like(0.5, x)})};
        }
        if (type == "IsNaN") {
            const value x = input(n, 0);
            return {apply(op::logical_not, {apply(op::equal, {x, x})})};
        }
        if (type == "IsInf") {
            const value x = input(n, 0);
            const bool positive = int_attribute(n, "detect_positive", 1) != 0;
            const bool negative = int_attribute(n, "detect_negative", 1) != 0;
            const double inf = std::numeric_limits<double>::infinity();
            const value up = apply(op::equal, {x, scalar_like(inf, x)});
            const value down = apply(op::equal, {x, scalar_like(-inf, x)});
            if (positive && negative) return {apply(op::logical_or, {up, down})};
            if (positive) return {up};
            if (negative) return {down};
            return {apply(op::logical_and, {up, down})};  // neither: all false
        }
        if (type == "ThresholdedRelu") {
            const value x = input(n, 0);
            const double alpha = float_attribute(n, "alpha", 1.0f);
            return {
                apply(op::where, {apply(op::greater, {x, scalar_like(alpha, x)}), x, scalar_like(0.0, x)})};
        }
        if (type == "Shrink") {
            const value x = input(n, 0);
            const double lambd = float_attribute(n, "lambd", 0.5f), bias = float_attribute(n, "bias", 0.0f);
            const value above =
                apply(op::where, {apply(op::greater, {x, scalar_like(lambd, x)}),
                                  apply(op::sub, {x, scalar_like(bias, x)}), scalar_like(0.0, x)});
            return {apply(op::where, {apply(op::less, {x, scalar_like(-lambd, x)}),
                                      apply(op::add, {x, scalar_like(bias, x)}), above})};
        }
        if (type == "Asinh" || type == "Acosh" || type == "Atanh") return {inverse_hyperbolic(n)};
        if (type == "Mod") return {modulo(n)};
        if (type == "GatherElements") {
            const value data = input(n, 0);
            attributes a;
            a.axis = normalized_axis(int_attribute(n, "axis", 0), static_cast<std::int64_t>(data.rank()),
                                     where(n));
            return {g_.apply(op::gather_elements, {data, input(n, 1)}, a)};
        }
        if (type == "CumSum") {
            const value x = input(n, 0);
            const std::vector<std::int64_t> axis = required_ints(n, 1, "the axis");
            if (axis.size() != 1) throw shape_error(message(where(n), ": the axis must be one value"));
            attributes a;
            a.axis = normalized_axis(axis[0], static_cast<std::int64_t>(x.rank()), where(n));
            a.exclusive = int_attribute(n, "exclusive", 0) != 0;
            a.reverse = int_attribute(n, "reverse", 0) != 0;
            return {g_.apply(op::cumsum, {x}, a)};
        }
        if (type == "BitShift") return {bit_shift(n)};
        if (type == "Einsum") return {einsum(n)};
        if (type == "HannWindow" || type == "HammingWindow" || type == "BlackmanWindow")
            return {window_node(n)};
        if (type == "DequantizeLinear") return {dequantize_linear(n)};
        if (type == "QuantizeLinear") return {quantize_linear(n)};
        if (type == "DynamicQuantizeLinear") return dynamic_quantize_linear(n);
        if (type == "LRN") return {local_response_norm(n)};
        if (type == "RNN" || type == "GRU" || type == "LSTM") return recurrent(n);
        if (type == "Hardmax") return {hardmax(n)};
        if (type == "OneHot") return {one_hot(n)};
        if (type == "EyeLike") return {eye_like(n)};
        if (type == "NegativeLogLikelihoodLoss") {
            std::optional<value> weight;
            if (has_input(n, 2)) weight = input(n, 2);
            return {negative_log_likelihood(n, input(n, 0), input(n, 1), weight)};
        }
        if (type == "SoftmaxCrossEntropyLoss") {
            const value log_prob = log_softmax(input(n, 0), 1);
            std::optional<value> weight;
            if (has_input(n, 2)) weight = input(n, 2);
            return {negative_log_likelihood(n, log_prob, input(n, 1), weight), log_prob};
        }
        if (type == "Gelu") {
            // Opset 20: exact (erf) or, with approximate = "tanh", the tanh form; anvil has both as ops.
            const std::string approximate = string_attribute(n, "approximate", "none");
            if (approximate != "none" && approximate != "tanh")
                throw format_error(message(where(n), ": approximate '", approximate, "'"));
            return {apply(approximate == "tanh" ? op::gelu_tanh : op::gelu, {input(n, 0)})};
        }
        if (type == "Elu" || type == "Selu" || type == "Celu" || type == "LeakyRelu" || type == "PRelu" ||
            type == "HardSigmoid" || type == "HardSwish" || type == "Softplus" || type == "Softsign")
            return {activation(n)};
        unsupported(n, "no import for this op yet");
    }

    // ONNX's Pow takes an exponent of another type (T1) and keeps the base's: computed in the base's type
    // when it is floating, else in f32 and converted back, as the reference computes it in doubles.
    value power(const onnx_node& n);

    value variadic(const onnx_node& n);

    // A constant matrix [K, N] as a linear layer's weight [N, K] (transposed on the host once), or as it is
    // when it is [N, K] already: a product with a constant weight is what the Neural Engine runs as a
    // convolution (a matmul with a computed operand needs the matmul op, which an M1 lacks).
    std::optional<value> linear_weight(const onnx_node& n, std::size_t index, bool stored_out_in);

    // numpy's matmul: a vector operand is a matrix for the product, its axis dropped afterwards.
    value matmul(const onnx_node& n);

    // Y = alpha * A' B' + beta * C, A' and B' transposed as transA and transB say.
    value gemm(const onnx_node& n);

    // log softmax as x - max - log(sum(exp(x - max))): the log of softmax's result would lose the small
    // probabilities to underflow.
    value log_softmax(const value& x, std::int64_t axis);

    // Opset 13 made Softmax (and LogSoftmax) one axis (default -1); before, the input was read as a matrix
    // [d0..axis-1, axis..] (default axis 1) and normalised over its rows.
    value softmax(const onnx_node& n, bool log);

    // The target shape: an attribute before opset 5, an input since; 0 copies the input's extent (unless
    // allowzero, opset 14), one -1 is inferred.
    value reshape_node(const onnx_node& n);

    value transpose(const onnx_node& n);

    value flatten(const onnx_node& n);

    value concat(const onnx_node& n);

    // The axes: an attribute before opset 13, an input since (Squeeze's optional: every extent 1).
    value squeeze(const onnx_node& n, bool unsqueeze);

    // The bounds: attributes before opset 11, optional inputs since. anvil's clamp is for floating types;
    // integers go through maximum and minimum with constants of their type.
    value clip(const onnx_node& n);

    value constant_node(const onnx_node& n);

    value cast_node(const onnx_node& n);

    // The input's shape (opset 15: the axes [start, end) of it), a constant: shapes are static here.
    value shape_node(const onnx_node& n);

    value size_node(const onnx_node& n);

    value constant_of_shape(const onnx_node& n);

    // start, start + delta, ... up to limit (exclusive): settled at import, in the inputs' type.
    value range(const onnx_node& n);

    // Inference: the data passes unchanged; the mask, when asked for, is all true.
    std::vector<value> dropout(const onnx_node& n);

    value expand(const onnx_node& n);

    value tile(const onnx_node& n);

    // Negative indices count from the end: settled here when the indices are constants, selected at run
    // time otherwise.
    value gather(const onnx_node& n);

    // starts, ends, axes, steps: attributes before opset 10, inputs since. anvil slices forwards only.
    value slice_node(const onnx_node& n);

    // The parts: the `split` attribute (input since opset 13), or equal parts.
    std::vector<value> split(const onnx_node& n);

    // Constant padding (pads: an attribute before opset 11, an input since); negative pads crop.
    value pad(const onnx_node& n);

    // The upper (or lower) triangle of the last two axes, from diagonal k: a select with a constant mask,
    // exact for every element type.
    value trilu(const onnx_node& n);

    // DepthToSpace (DCR or CRD order) and SpaceToDepth as ONNX defines them: a reshape to six axes, a
    // permutation, a reshape back.
    value depth_space(const onnx_node& n, bool to_space);

    // The padding of one spatial axis: explicit pads, or auto_pad's SAME_UPPER / SAME_LOWER / VALID.
    struct window {
        std::vector<std::int64_t> kernel, stride, dilation, pad_begin, pad_end;
    };
    window window_of(const onnx_node& n, const value& x, std::vector<std::int64_t> kernel);
    // A 1-D window becomes a 2-D one of height 1 (x [N, C, L] -> [N, C, 1, L]); 3-D and more are refused.
    value as_2d(const onnx_node& n, const value& x);
    static void set_window(attributes& a, const window& w);

    value conv(const onnx_node& n);

    // A transposed convolution as the convolution it is: the input spread `stride` apart (zeros between),
    // padded by (kernel - 1) * dilation less the given padding (plus output_padding after), convolved at
    // stride 1 with the weight's in and out channels swapped within each group and its window flipped. The
    // weight's rearrangement folds to a constant when the weight is one.
    value conv_transpose(const onnx_node& n);

    value pool(const onnx_node& n, bool max);

    // ONNX: X, scale, B, mean, var; anvil: x, mean, variance, weight, bias.
    value batch_norm(const onnx_node& n);

    value instance_norm(const onnx_node& n);

    // Over the axes from `axis` on: the last axis is anvil's layer_norm; several are flattened into one
    // first. The optional Mean and InvStdDev outputs are computed the same way when asked for.
    std::vector<value> layer_norm(const onnx_node& n);

    // The axes: an attribute, or (ReduceSum from opset 13, the others from 18) an input; none means all,
    // unless noop_with_empty_axes. Min, the L1 and L2 norms, the sum of squares and the log-sums are
    // built from anvil's sum, mean and max.
    value reduction(const onnx_node& n);

    // The first index of the largest (ArgMin: smallest) value; select_last_index reads the axis reversed.
    value arg_extreme(const onnx_node& n, bool minimum);

    // Resizing the two spatial axes of NCHW: nearest with asymmetric coordinates rounded down (Upsample's,
    // and PyTorch's 'nearest'), or linear with half-pixel or corner-aligned coordinates (PyTorch's
    // bilinear). Other modes and coordinate transforms are refused by name.
    value resize(const onnx_node& n);

    value inverse_hyperbolic(const onnx_node& n);

    // a mod b: with the divisor's sign (fmod 0, integers: a - b floor(a / b)) or the dividend's (fmod 1:
    // a - b trunc(a / b)), computed in f32 as anvil's CPU computes integers (exact below 2^24) and converted
    // back to the operands' type.
    value modulo(const onnx_node& n);

    // x << y (the bits shifted past the type's width dropped) or x >> y, for unsigned integers: x * 2^y
    // modulo 2^bits, or floor(x / 2^y), computed in f32 as anvil's CPU computes integers (exact below 2^24).
    value bit_shift(const onnx_node& n);

    // Einsum of one or two operands without repeated letters within an operand (no diagonals): letters only
    // in one operand and not in the output are summed first; then the shared ones are batch axes (kept) or
    // contracted (summed by a batched product), and the rest are free. The product is a matmul of
    // [batch, left, contracted] by [batch, contracted, right], permuted to the output's order.
    value einsum(const onnx_node& n);

    // The signal-processing windows of a size settled at import (periodic: of size + 1, its last value
    // dropped), as constants.
    value window_node(const onnx_node& n);

    // A per-axis parameter (scale, zero point) shaped to broadcast along `axis` of x; a scalar as it is.
    value along_axis(const onnx_node& n, const value& parameter, const value& x);
    static std::pair<double, double> integer_range(dtype type);

    // (x - zero_point) * scale, per tensor or per slice along `axis`.
    value dequantize_linear(const onnx_node& n);

    // saturate(round(x / scale) + zero_point), rounding half to even, in the zero point's type (uint8 when
    // it is left out).
    value quantize_linear(const onnx_node& n);

    // uint8 quantisation with the scale and zero point of x's own range (widened to hold 0).
    std::vector<value> dynamic_quantize_linear(const onnx_node& n);

    // x / (bias + alpha / size * (sum of squares over `size` neighbouring channels))^beta.
    value local_response_norm(const onnx_node& n);

    // RNN, GRU and LSTM, unrolled over the sequence (its length is static here): the input's projection for
    // every step at once, then per step the hidden state's projection and the gates, as onnx/Operators.md
    // writes them (gate orders: GRU z, r, h; LSTM i, o, f, c). Both directions, both layouts, peepholes,
    // GRU's linear_before_reset, LSTM's input_forget, clip, and the Sigmoid, Tanh and Relu activations.
    std::vector<value> recurrent(const onnx_node& n);

    // 0, 1, ..., count - 1 as int64, laid along `axis` of a rank-`rank` shape (1 elsewhere).
    value positions_along(std::int64_t count, std::size_t axis, std::size_t rank);

    // 1 at the first largest value along the axis, 0 elsewhere (before opset 13: of the input read as a
    // matrix, as Softmax).
    value hardmax(const onnx_node& n);

    // values[1] where the index (negative: counted from depth) is the position along the new axis, values[0]
    // elsewhere.
    value one_hot(const onnx_node& n);

    value eye_like(const onnx_node& n);

    // -input[n, target[n, ...], ...] * weight[target], reduced as `reduction` says; a target equal to
    // ignore_index counts for nothing (nor in the mean's total weight). The class is picked with a one-hot
    // select (equal to each class position), which also drops targets outside [0, C).
    value negative_log_likelihood(const onnx_node& n, const value& x, const value& target,
                                  std::optional<value> weight);

    value activation(const onnx_node& n);

    const onnx_model& model_;
    graph& g_;
    std::int64_t opset_;
    const std::map<std::string, host_tensor, std::less<>>& given_;
    std::map<std::string, value, std::less<>> values_;
    std::map<std::string, const onnx_tensor*, std::less<>> initializers_;
    // A value settled at import, and the given inputs it was settled from (none for the model's constants).
    struct known_value {
        host_tensor value;
        std::vector<std::string> settles;
    };
    std::map<std::string, known_value, std::less<>> known_;
    std::vector<signed char> runtime_;
    std::set<std::string> fixed_;
    std::map<std::string, value_type, std::less<>> pending_;
    std::set<std::string, std::less<>> made_;
};

}  // namespace anvil::models::onnx_detail
