// anvil: gradients()' definition (see autodiff.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/graph/autodiff.hpp"
#include "anvil/graph/dump.hpp"
#include "anvil/graph/vjp.hpp"

namespace anvil {

ANVIL_INLINE std::vector<value> gradients(const value& loss, std::span<const value> wrt) {
    if (!loss.valid()) throw error("gradients: the loss is an empty value");
    if (loss.shape().element_count() != 1) {
        throw shape_error(
            detail::message("gradients: the loss ", loss.shape(),
                            " holds more than one element; reduce it to a scalar or give the seed "
                            "(the cotangent of each element)"));
    }
    std::vector<float> one{1.0f};
    detail::autodiff::builder build(graph::of(loss));
    return gradients(loss, wrt, build.constant(std::move(one), loss.shape(), loss.type(), "seed"));
}

ANVIL_INLINE std::vector<value> gradients(const value& loss, std::span<const value> wrt, const value& seed) {
    using detail::message;
    if (!loss.valid()) throw error("gradients: the loss is an empty value");
    if (!is_floating(loss.type())) {
        throw type_error(
            message("gradients: the loss is ", dtype_name(loss.type()), "; it must be floating point"));
    }
    if (!seed.valid() || seed.owner() != loss.owner() || seed.type() != loss.type() ||
        !(seed.shape() == loss.shape())) {
        throw error(message("gradients: the seed must be a value of the loss's graph, of its type ",
                            dtype_name(loss.type()), " and shape ", loss.shape()));
    }
    const graph_body& body = *loss.owner();
    for (std::size_t i = 0; i < wrt.size(); ++i) {
        if (!wrt[i].valid() || wrt[i].owner() != loss.owner()) {
            throw error(message("gradients: value ", i, " asked about is not a value of the loss's graph"));
        }
        if (!is_floating(wrt[i].type())) {
            throw type_error(message("gradients: value ", i, " asked about, ",
                                     describe_node(body, wrt[i].id()), ", is ", dtype_name(wrt[i].type()),
                                     "; only floating-point values have gradients"));
        }
    }

    // The nodes a gradient must pass through: those that depend on a value asked about (forward from them)
    // and that the loss depends on (the walk below starts at the loss).
    const std::size_t count = static_cast<std::size_t>(loss.id()) + 1;
    std::vector<bool> depends(count, false);
    for (const value& v : wrt)
        if (v.id() < count) depends[v.id()] = true;
    for (std::size_t id = 0; id < count; ++id) {
        if (depends[id]) continue;
        for (const value_id input : body.nodes[id].inputs)
            if (depends[input]) depends[id] = true;
    }
    // Values of an integer or boolean type carry no gradient (comparisons, argmax, index casts).
    for (std::size_t id = 0; id < count; ++id)
        if (!is_floating(body.nodes[id].result.type)) depends[id] = false;

    detail::autodiff::builder build(graph::of(loss));
    std::vector<value> adjoint(count);
    adjoint[loss.id()] = seed;
    for (std::size_t id = count; id-- > 0;) {
        if (!adjoint[id].valid() || !depends[id]) continue;
        // A copy: appending backward nodes may move the node list.
        const node forward = loss.owner()->nodes[id];
        if (forward.kind == op::input || forward.kind == op::constant) continue;
        std::vector<bool> wanted;
        bool any = false;
        for (const value_id input : forward.inputs) {
            wanted.push_back(depends[input]);
            any = any || depends[input];
        }
        if (!any) continue;
        const detail::autodiff::vjp_entry entry = detail::autodiff::vjp_of(forward.kind);
        if (entry.rule == nullptr) {
            throw error(message("gradients: ", describe_node(*loss.owner(), static_cast<value_id>(id)),
                                " has no gradient: ", entry.no_gradient));
        }
        detail::autodiff::vjp_call call{build,
                                        forward,
                                        {},
                                        value(loss.owner(), static_cast<value_id>(id)),
                                        adjoint[id],
                                        wanted,
                                        std::vector<value>(forward.inputs.size())};
        for (const value_id input : forward.inputs)
            call.operands.emplace_back(loss.owner(), input);
        try {
            entry.rule(call);
        } catch (const error& e) {
            throw error(message("gradients: the gradient of ",
                                describe_node(*loss.owner(), static_cast<value_id>(id)), ": ", e.what()));
        }
        for (std::size_t i = 0; i < forward.inputs.size(); ++i) {
            const value& contribution = call.operand_gradients[i];
            if (!wanted[i] || !contribution.valid()) continue;
            value& total = adjoint[forward.inputs[i]];
            total = total.valid() ? build.add(total, contribution) : contribution;
        }
    }

    std::vector<value> result;
    for (const value& v : wrt) {
        const bool reached = v.id() < count && adjoint[v.id()].valid();
        result.push_back(reached ? adjoint[v.id()] : build.zeros(v.type(), v.shape()));
    }
    return result;
}

}  // namespace anvil
