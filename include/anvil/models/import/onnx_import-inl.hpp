// anvil: the ONNX importer's definitions (see onnx_import.hpp; compilation.hpp says when this file is
// compiled).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/graph/graph.hpp"
#include "anvil/models/import/onnx/importer-inl.hpp"
#include "anvil/models/import/onnx/math_ops-inl.hpp"
#include "anvil/models/import/onnx/network_ops-inl.hpp"
#include "anvil/models/import/onnx/recurrent_ops-inl.hpp"
#include "anvil/models/import/onnx/tensor_ops-inl.hpp"
#include "anvil/models/import/onnx_import.hpp"

namespace anvil::models {

ANVIL_INLINE onnx_import import_onnx(const onnx_model& model,
                                     const std::map<std::string, dims, std::less<>>& input_shapes,
                                     const std::map<std::string, host_tensor, std::less<>>& input_values) {
    using anvil::detail::message;
    onnx_import result;
    // Values give shapes too.
    std::map<std::string, dims, std::less<>> shapes = input_shapes;
    for (const auto& given : input_values) {
        const auto [at, fresh] = shapes.emplace(given.first, given.second.shape());
        if (!fresh && !(at->second == given.second.shape())) {
            throw shape_error(message(model.source_name(), ": input '", given.first, "' is given the shape ",
                                      at->second, " and a value of shape ", given.second.shape()));
        }
    }
    onnx_detail::importer in(model, result.g, input_values);
    const onnx_graph& g = model.graph();
    std::set<std::string, std::less<>> initializers;
    for (const onnx_tensor& t : g.initializers) {
        initializers.insert(t.name);
        in.bind_initializer(t);
    }
    for (const auto& given : shapes) {
        const std::string& name = given.first;
        const bool known = std::any_of(g.inputs.begin(), g.inputs.end(),
                                       [&](const onnx_value_info& v) { return v.name == name; });
        if (!known) throw shape_error(message(model.source_name(), ": the model has no input '", name, "'"));
    }
    std::map<std::string, std::int64_t, std::less<>> symbols;
    std::vector<std::string> inputs;
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
        const auto given = shapes.find(v.name);
        std::vector<std::int64_t> extents;
        if (given != shapes.end()) {
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
            if (given == shapes.end()) {
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
        if (const auto value = input_values.find(v.name);
            value != input_values.end() && value->second.type() != *type) {
            throw type_error(message(model.source_name(), ": input '", v.name, "' is ",
                                     onnx_type_name(v.elem_type), ", given ",
                                     dtype_name(value->second.type())));
        }
        in.declare_input(v.name, *type, dims(extents));
        inputs.push_back(v.name);
    }
    for (const onnx_node& n : g.nodes)
        in.node(n);
    for (const onnx_value_info& v : g.outputs) {
        result.outputs.push_back(
            in.lookup(v.name, message(model.source_name(), ": graph output '", v.name, "'")));
        result.output_names.push_back(v.name);
    }
    for (const std::string& name : inputs)
        if (in.made_input(name)) result.input_names.push_back(name);
    result.fixed_inputs.assign(in.fixed_inputs().begin(), in.fixed_inputs().end());
    return result;
}

}  // namespace anvil::models
