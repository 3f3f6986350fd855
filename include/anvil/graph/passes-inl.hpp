// anvil: passes' definitions (see passes.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include "anvil/core/convert.hpp"
#include "anvil/graph/passes.hpp"
#include "anvil/graph/rewrite.hpp"

namespace anvil {

ANVIL_INLINE graph_body eliminate_dead_code(const graph_body& body) {
    std::vector<bool> live(body.nodes.size(), false);
    for (const value_id id : body.outputs)
        live[id] = true;
    for (std::size_t i = body.nodes.size(); i-- > 0;) {
        if (body.nodes[i].kind == op::input) live[i] = true;
        if (!live[i]) continue;
        for (const value_id input : body.nodes[i].inputs)
            live[input] = true;
    }
    return detail::compact(body, live, detail::identity_forward(body.nodes.size()));
}

ANVIL_INLINE graph_body fold_constants(const graph_body& body, const constant_evaluator& evaluate,
                                       folding how) {
    graph_body result = body;
    constexpr std::size_t small_bytes = 4096;  // tiny values are always worth folding
    const bool expand = how != folding::never_expand;
    for (auto& n : result.nodes) {
        if (n.kind == op::input || n.kind == op::constant || n.inputs.empty()) continue;
        if (how != folding::everything && (n.kind == op::dequantize_int8 || n.kind == op::dequantize_lut))
            continue;
        std::size_t input_bytes = 0;
        bool all_constant = true;
        std::vector<host_tensor> operands;
        for (const value_id input : n.inputs) {
            const node& producer = result.nodes[input];
            if (producer.kind != op::constant) {
                all_constant = false;
                break;
            }
            input_bytes += producer.data.byte_size();
            operands.push_back(producer.data);
        }
        if (!all_constant) continue;
        const std::size_t output_bytes =
            static_cast<std::size_t>(n.result.shape.element_count()) * dtype_size(n.result.type);
        if (!expand && output_bytes > input_bytes && output_bytes > small_bytes) continue;
        host_tensor folded = evaluate(n, operands);
        node replacement;
        replacement.kind = op::constant;
        replacement.result = n.result;
        // A folded cast or reshape of a weight keeps the weight's name, for dumps and reports.
        replacement.name = n.name.empty() && n.inputs.size() == 1 ? result.nodes[n.inputs[0]].name : n.name;
        replacement.data = std::move(folded);
        n = std::move(replacement);
    }
    return eliminate_dead_code(result);
}

namespace detail {

ANVIL_INLINE bool all_constant(const graph_body& body, const node& n, std::size_t first) {
    for (std::size_t i = first; i < n.inputs.size(); ++i) {
        if (body.nodes[n.inputs[i]].kind != op::constant) return false;
    }
    return true;
}

}  // namespace detail

ANVIL_INLINE graph_body fold_batch_norm(const graph_body& body) {
    const auto users = detail::users_of(body);
    const auto is_output = detail::output_mask(body);
    // Rebuilt in order: a folded batch_norm is replaced by two new constants and the rescaled conv2d; the
    // original conv2d is left without readers for dead-code elimination to drop.
    graph_body result;
    std::vector<value_id> new_id(body.nodes.size(), detail::no_value);
    auto emit = [&result](node n) {
        result.nodes.push_back(std::move(n));
        return static_cast<value_id>(result.nodes.size() - 1);
    };
    for (std::size_t id = 0; id < body.nodes.size(); ++id) {
        const node& bn = body.nodes[id];
        const bool foldable = bn.kind == op::batch_norm && detail::all_constant(body, bn, 1) &&
                              body.nodes[bn.inputs[0]].kind == op::conv2d &&
                              users[bn.inputs[0]].size() == 1 && !is_output[bn.inputs[0]] &&
                              detail::all_constant(body, body.nodes[bn.inputs[0]], 1);
        if (!foldable) {
            node copy = bn;
            for (auto& input : copy.inputs)
                input = new_id[input];
            new_id[id] = emit(std::move(copy));
            continue;
        }
        const node& conv = body.nodes[bn.inputs[0]];
        const auto channels = static_cast<std::size_t>(conv.result.shape[1]);
        auto vector_of = [&](std::size_t input) -> std::vector<float> {
            if (input >= bn.inputs.size()) return {};
            return body.nodes[bn.inputs[input]].data.to_f32();
        };
        const auto mean = vector_of(1), variance = vector_of(2), gamma = vector_of(3), beta = vector_of(4);
        const node& weight_node = body.nodes[conv.inputs[1]];
        std::vector<float> w = weight_node.data.to_f32();
        std::vector<float> bias = conv.inputs.size() == 3 ? body.nodes[conv.inputs[2]].data.to_f32()
                                                          : std::vector<float>(channels, 0.0f);
        const std::size_t per_channel = channels == 0 ? 0 : w.size() / channels;
        for (std::size_t c = 0; c < channels; ++c) {
            const double inv_std = 1.0 / std::sqrt(static_cast<double>(variance[c]) + bn.attrs.epsilon);
            const double factor = (gamma.empty() ? 1.0 : gamma[c]) * inv_std;
            for (std::size_t i = 0; i < per_channel; ++i) {
                w[c * per_channel + i] = static_cast<float>(w[c * per_channel + i] * factor);
            }
            bias[c] = static_cast<float>((bias[c] - mean[c]) * factor + (beta.empty() ? 0.0 : beta[c]));
        }
        node new_weight;
        new_weight.kind = op::constant;
        new_weight.result = {dtype::f32, weight_node.result.shape};
        new_weight.name = weight_node.name;
        new_weight.data = host_tensor::from(w, weight_node.result.shape);
        node new_bias;
        new_bias.kind = op::constant;
        new_bias.result = {dtype::f32, dims{static_cast<std::int64_t>(channels)}};
        new_bias.name = weight_node.name.empty() ? std::string() : weight_node.name + " (folded bias)";
        new_bias.data = host_tensor::from(bias, new_bias.result.shape);
        node folded = conv;
        folded.inputs = {new_id[conv.inputs[0]], emit(std::move(new_weight)), emit(std::move(new_bias))};
        if (!bn.name.empty()) folded.name = bn.name;
        new_id[id] = emit(std::move(folded));
    }
    for (const value_id id : body.outputs)
        result.outputs.push_back(new_id[id]);
    return eliminate_dead_code(result);
}

ANVIL_INLINE graph_body fuse_elementwise(const graph_body& body, std::size_t max_steps) {
    const auto users = detail::users_of(body);
    const auto is_output = detail::output_mask(body);
    const std::size_t count = body.nodes.size();
    std::vector<value_id> root_of(count, detail::no_value);  // the fused group a node was absorbed into
    graph_body result = body;
    std::vector<bool> keep(count, true);
    // Only floating results fuse: comparisons and logical ops (dtype::boolean results) stay nodes of their
    // own, read by a fused where as a leaf input, so a fused node computes in one floating type throughout.
    auto fusable = [&](const node& n) {
        return is_elementwise(n.kind) && n.kind != op::cast && is_floating(n.result.type);
    };
    for (std::size_t r = count; r-- > 0;) {
        const node& root = body.nodes[r];
        if (!fusable(root) || root_of[r] != detail::no_value) continue;
        // Collect the group: producers absorbed depth-first.
        std::vector<value_id> members{static_cast<value_id>(r)};
        for (std::size_t i = 0; i < members.size() && members.size() < max_steps; ++i) {
            for (const value_id input : body.nodes[members[i]].inputs) {
                const node& producer = body.nodes[input];
                if (!fusable(producer) || users[input].size() != 1 || is_output[input] ||
                    root_of[input] != detail::no_value || !(producer.result.shape == root.result.shape) ||
                    members.size() >= max_steps) {
                    continue;
                }
                root_of[input] = static_cast<value_id>(r);
                members.push_back(input);
            }
        }
        if (members.size() < 2) continue;
        std::sort(members.begin(), members.end());  // topological order
        // Leaf inputs: operands read by the group that are not members, deduplicated.
        std::vector<value_id> leaves;
        std::map<value_id, std::uint16_t> slot;
        for (const value_id m : members) {
            for (const value_id input : body.nodes[m].inputs) {
                if (std::binary_search(members.begin(), members.end(), input) || slot.count(input)) continue;
                slot[input] = static_cast<std::uint16_t>(leaves.size());
                leaves.push_back(input);
            }
        }
        for (std::size_t i = 0; i < members.size(); ++i) {
            slot[members[i]] = static_cast<std::uint16_t>(leaves.size() + i);
        }
        node fused;
        fused.kind = op::fused_elementwise;
        fused.stage = root.stage;
        fused.result = root.result;
        fused.inputs = leaves;
        fused.attrs.to = root.result.type;
        for (const value_id m : members) {
            const node& n = body.nodes[m];
            fused_step s;
            s.kind = n.kind;
            for (std::size_t k = 0; k < n.inputs.size(); ++k)
                s.operands[k] = slot[n.inputs[k]];
            s.alpha = n.attrs.min;
            s.beta = n.attrs.max;
            fused.attrs.steps.push_back(s);
            if (m != r) keep[m] = false;
        }
        result.nodes[r] = std::move(fused);
    }
    return detail::compact(result, keep, detail::identity_forward(count));
}

}  // namespace anvil
