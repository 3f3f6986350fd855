// anvil: rewrite's definitions (see rewrite.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/graph/graph.hpp"
#include "anvil/graph/rewrite.hpp"

namespace anvil::detail {

ANVIL_INLINE std::vector<std::vector<value_id>> users_of(const graph_body& body) {
    std::vector<std::vector<value_id>> users(body.nodes.size());
    for (std::size_t id = 0; id < body.nodes.size(); ++id) {
        for (const value_id input : body.nodes[id].inputs)
            users[input].push_back(static_cast<value_id>(id));
    }
    return users;
}

ANVIL_INLINE std::vector<bool> output_mask(const graph_body& body) {
    std::vector<bool> is_output(body.nodes.size(), false);
    for (const value_id id : body.outputs)
        is_output[id] = true;
    return is_output;
}

ANVIL_INLINE graph_body compact(const graph_body& body, const std::vector<bool>& keep,
                                std::vector<value_id> forward) {
    auto resolve = [&forward](value_id id) {
        while (forward[id] != id)
            id = forward[id];
        return id;
    };
    std::vector<value_id> new_id(body.nodes.size(), no_value);
    graph_body result;
    for (std::size_t id = 0; id < body.nodes.size(); ++id) {
        if (!keep[id]) continue;
        node n = body.nodes[id];
        for (auto& input : n.inputs) {
            input = new_id[resolve(input)];
            if (input == no_value) throw error("graph pass: a kept node reads a dropped one");
        }
        new_id[id] = static_cast<value_id>(result.nodes.size());
        result.nodes.push_back(std::move(n));
    }
    for (const value_id id : body.outputs) {
        const value_id mapped = new_id[resolve(id)];
        if (mapped == no_value) throw error("graph pass: an output was dropped");
        result.outputs.push_back(mapped);
    }
    return result;
}

ANVIL_INLINE std::vector<value_id> identity_forward(std::size_t count) {
    std::vector<value_id> forward(count);
    for (std::size_t id = 0; id < count; ++id)
        forward[id] = static_cast<value_id>(id);
    return forward;
}

}  // namespace anvil::detail
