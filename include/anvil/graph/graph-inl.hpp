// anvil: graph's definitions (see graph.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/graph/graph.hpp"
#include "anvil/graph/op.hpp"
#include "anvil/graph/shape_inference.hpp"

namespace anvil {

ANVIL_INLINE value graph::input_named(std::string_view name) const {
    for (std::size_t id = 0; id < body_->nodes.size(); ++id) {
        const node& n = body_->nodes[id];
        if (n.kind == op::input && n.name == name) return value(body_, static_cast<value_id>(id));
    }
    throw error(detail::message("graph: there is no input named '", name, "'"));
}

ANVIL_INLINE value graph::input(std::string name, dtype type, dims shape) {
    if (name.empty()) throw error("graph::input: an input needs a name");
    for (const auto& existing : body_->nodes) {
        if (existing.kind == op::input && existing.name == name) {
            throw error(detail::message("graph::input: there is already an input named '", name, "'"));
        }
    }
    node n;
    n.kind = op::input;
    n.result = {type, shape};
    n.name = std::move(name);
    return append(std::move(n));
}

ANVIL_INLINE value graph::parameter(std::string name, dtype type, dims shape) {
    if (!is_floating(type)) {
        throw type_error(detail::message("graph::parameter: '", name, "' is ", dtype_name(type),
                                         "; a trainable tensor must be floating point"));
    }
    value v = input(std::move(name), type, shape);
    body_->parameters.push_back(v.id());
    return v;
}

ANVIL_INLINE std::vector<value> graph::parameters() const {
    std::vector<value> result;
    for (const value_id id : body_->parameters)
        result.emplace_back(body_, id);
    return result;
}

ANVIL_INLINE value graph::constant(host_tensor data, std::string label) {
    node n;
    n.kind = op::constant;
    n.result = {data.type(), data.shape()};
    n.name = std::move(label);
    n.data = std::move(data);
    return append(std::move(n));
}

ANVIL_INLINE value graph::scalar(double number, dtype type) {
    host_tensor data(dtype::f64, dims{});
    data.values<double>()[0] = number;
    if (type != dtype::f64) data = convert_scalar(data, type);
    return constant(std::move(data));
}

ANVIL_INLINE value graph::apply(op kind, std::span<const value> inputs, attributes attrs) {
    std::vector<value_type> types;
    node n;
    n.kind = kind;
    for (const value& input : inputs) {
        if (!input.valid()) {
            throw error(detail::message(op_name(kind), ": operand ", types.size(), " is an empty value"));
        }
        if (input.owner() != body_) {
            throw error(
                detail::message(op_name(kind), ": operand ", types.size(), " belongs to another graph"));
        }
        types.push_back(input.producer().result);
        n.inputs.push_back(input.id());
    }
    n.result = infer(kind, attrs, types);
    n.attrs = std::move(attrs);
    return append(std::move(n));
}

ANVIL_INLINE std::uint32_t graph::begin_stage(std::string label) {
    std::vector<std::string>& labels = body_->stage_labels;
    if (labels.empty()) labels.emplace_back();  // stage 0: what was appended before any mark
    if (labels.size() >= std::numeric_limits<std::uint32_t>::max()) throw error("graph: too many stages");
    labels.push_back(std::move(label));
    return static_cast<std::uint32_t>(labels.size() - 1);
}

ANVIL_INLINE graph graph::of(const value& v) {
    if (!v.valid()) throw error("graph::of: an empty value belongs to no graph");
    return graph(v.owner());
}

ANVIL_INLINE graph_body body_of(std::span<const value> outputs, std::string_view caller) {
    if (outputs.empty()) throw error(detail::message(caller, ": no outputs given"));
    graph_body body;
    const auto& owner = outputs[0].owner();
    for (std::size_t i = 0; i < outputs.size(); ++i) {
        if (!outputs[i].valid()) throw error(detail::message(caller, ": output ", i, " is an empty value"));
        if (outputs[i].owner() != owner) {
            throw error(detail::message(caller, ": output ", i, " belongs to another graph than output 0"));
        }
        body.outputs.push_back(outputs[i].id());
    }
    body.nodes = owner->nodes;
    body.stage_labels = owner->stage_labels;
    return body;
}

ANVIL_INLINE value graph::append(node n) {
    if (body_->nodes.size() >= std::numeric_limits<value_id>::max()) {
        throw error("graph: too many nodes");
    }
    if (!body_->stage_labels.empty()) n.stage = static_cast<std::uint32_t>(body_->stage_labels.size() - 1);
    body_->nodes.push_back(std::move(n));
    return {body_, static_cast<value_id>(body_->nodes.size() - 1)};
}

ANVIL_INLINE host_tensor graph::convert_scalar(const host_tensor& number, dtype type) {
    host_tensor out(type, dims{});
    const double v = number.values<double>()[0];
    switch (type) {
        case dtype::f32:
            out.values<float>()[0] = static_cast<float>(v);
            break;
        case dtype::f16:
            out.values<half>()[0] = half(static_cast<float>(v));
            break;
        case dtype::bf16:
            out.values<bfloat16>()[0] = bfloat16(static_cast<float>(v));
            break;
        case dtype::i64:
            out.values<std::int64_t>()[0] = static_cast<std::int64_t>(v);
            break;
        case dtype::i32:
            out.values<std::int32_t>()[0] = static_cast<std::int32_t>(v);
            break;
        case dtype::i16:
            out.values<std::int16_t>()[0] = static_cast<std::int16_t>(v);
            break;
        case dtype::i8:
            out.values<std::int8_t>()[0] = static_cast<std::int8_t>(v);
            break;
        case dtype::u64:
            out.values<std::uint64_t>()[0] = static_cast<std::uint64_t>(v);
            break;
        case dtype::u32:
            out.values<std::uint32_t>()[0] = static_cast<std::uint32_t>(v);
            break;
        case dtype::u16:
            out.values<std::uint16_t>()[0] = static_cast<std::uint16_t>(v);
            break;
        case dtype::u8:
            out.values<std::uint8_t>()[0] = static_cast<std::uint8_t>(v);
            break;
        case dtype::boolean:
            out.values<bool>()[0] = v != 0.0;
            break;
        default:
            throw type_error(
                detail::message("graph::scalar: no scalar constants of type ", dtype_name(type)));
    }
    return out;
}

}  // namespace anvil
