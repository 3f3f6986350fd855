// anvil: dump's definitions (see dump.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/core/shape.hpp"
#include "anvil/graph/dump.hpp"
#include "anvil/graph/graph.hpp"
#include "anvil/graph/op.hpp"

namespace anvil {

namespace detail {

ANVIL_INLINE void dump_list(std::ostringstream& out, const char* key,
                            const std::vector<std::int64_t>& values) {
    if (values.empty()) return;
    out << ' ' << key << '=' << extents_to_string(values, false);
}

ANVIL_INLINE std::string dump_attributes(const node& n) {
    const attributes defaults;
    const attributes& a = n.attrs;
    std::ostringstream out;
    dump_list(out, "axes", a.axes);
    dump_list(out, "sizes", a.sizes);
    dump_list(out, "begin", a.begin);
    dump_list(out, "end", a.end);
    dump_list(out, "step", a.step);
    if (a.axis != defaults.axis) out << " axis=" << a.axis;
    if (a.keep_dims) out << " keep_dims";
    dump_array(out, "kernel", a.kernel, defaults.kernel);
    dump_array(out, "stride", a.stride, defaults.stride);
    dump_array(out, "dilation", a.dilation, defaults.dilation);
    dump_array(out, "padding", a.padding, defaults.padding);
    if (a.groups != defaults.groups) out << " groups=" << a.groups;
    if (a.ceil_mode) out << " ceil_mode";
    if (!a.count_include_pad) out << " exclude_pad";
    if (a.epsilon != defaults.epsilon) out << " epsilon=" << a.epsilon;
    if (n.kind == op::clamp) out << " min=" << a.min << " max=" << a.max;
    if (n.kind == op::pad && a.value != defaults.value) out << " value=" << a.value;
    if (a.scale != defaults.scale) out << " scale=" << a.scale;
    if (a.transpose_a) out << " transpose_a";
    if (a.transpose_b) out << " transpose_b";
    if (a.align_corners) out << " align_corners";
    if (a.causal) out << " causal";
    if (a.interleaved) out << " interleaved";
    if (a.exclusive) out << " exclusive";
    if (a.reverse) out << " reverse";
    if (a.ggml_type != 0) out << " ggml_type=" << a.ggml_type;
    if (!a.steps.empty()) {
        const std::size_t input_count = n.inputs.size();
        out << " steps=[";
        for (std::size_t i = 0; i < a.steps.size(); ++i) {
            const fused_step& s = a.steps[i];
            if (i != 0) out << "; ";
            out << '$' << input_count + i << '=' << op_name(s.kind) << '(';
            const std::size_t arity = info(s.kind).category == op_category::unary    ? 1
                                      : info(s.kind).category == op_category::binary ? 2
                                                                                     : 3;
            for (std::size_t k = 0; k < arity; ++k)
                out << (k ? ", $" : "$") << s.operands[k];
            out << ')';
            if (s.kind == op::clamp) out << '[' << s.alpha << ", " << s.beta << ']';
        }
        out << ']';
    }
    const std::string text = out.str();
    return text.empty() ? text : " {" + text.substr(1) + "}";
}

}  // namespace detail

ANVIL_INLINE std::string describe_node(const graph_body& body, value_id id) {
    const node& n = body.nodes[id];
    std::string text = detail::message("node ", id, " (", op_name(n.kind));
    if (!n.name.empty()) {
        text += detail::message(" '", n.name, "'");
    } else {
        // Compute nodes are unnamed: the weight or input they read is what a user recognises.
        for (const value_id input : n.inputs) {
            const node& producer = body.nodes[input];
            if ((producer.kind == op::constant || producer.kind == op::input) && !producer.name.empty()) {
                text += detail::message(" of '", producer.name, "'");
                break;
            }
        }
    }
    return text + detail::message(", ", dtype_name(n.result.type), " ", n.result.shape, ")");
}

ANVIL_INLINE std::string dump(const graph_body& body) {
    std::ostringstream out;
    for (std::size_t id = 0; id < body.nodes.size(); ++id) {
        const node& n = body.nodes[id];
        out << '%' << id << " = " << op_name(n.kind);
        if (!n.name.empty()) out << " \"" << n.name << '"';
        if (!n.inputs.empty()) {
            out << '(';
            for (std::size_t i = 0; i < n.inputs.size(); ++i)
                out << (i ? ", %" : "%") << n.inputs[i];
            out << ')';
        }
        out << detail::dump_attributes(n) << " : " << dtype_name(n.result.type) << ' ' << n.result.shape
            << '\n';
    }
    if (!body.outputs.empty()) {
        out << "outputs:";
        for (const value_id id : body.outputs)
            out << " %" << id;
        out << '\n';
    }
    return out.str();
}

ANVIL_INLINE std::string dump(const graph& g) {
    return dump(*g.body());
}

}  // namespace anvil
