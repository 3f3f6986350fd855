// anvil: tiling for the Neural Engine's limits. A linear layer whose output features exceed the dimension
// limit — a vocabulary head of 32,000 or 151,936 logits — or whose weights alone pass one program's weight
// limit becomes several linears over slices of its weight rows, each within both, joined by a concat
// (ANEMLL splits LM heads the same way, MIL.md §2.4; ORI #16 reports a 32,000-channel conv rejected). The
// tiles run on the ANE, as many in one program as its weight limit allows (partition.hpp); a concat whose
// result still exceeds the dimension limit runs on the host, reading the tiles' output surfaces.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/graph/graph.hpp"
#include "anvil/graph/shape_inference.hpp"

namespace anvil::detail::ane {

// Rows [first, first + count) of a constant's leading axis, in its stored type.
inline host_tensor leading_rows(const host_tensor& tensor, std::int64_t first, std::int64_t count) {
    const dims& shape = tensor.shape();
    const std::size_t row_bytes = tensor.byte_size() / static_cast<std::size_t>(shape[0]);
    std::vector<std::int64_t> extents(shape.begin(), shape.end());
    extents[0] = count;
    host_tensor rows(tensor.type(), dims(extents));
    std::memcpy(rows.raw(),
                static_cast<const std::byte*>(tensor.raw()) + static_cast<std::size_t>(first) * row_bytes,
                static_cast<std::size_t>(count) * row_bytes);
    return rows;
}

// How many row tiles a linear of `features` outputs and `weight_bytes` fp16 weight bytes needs: within
// `max_dimension` features and `max_weight_bytes` bytes each (1: none). The decoder planner
// (models/llm/decoder_plan.hpp) counts a head's tiles with it too.
[[nodiscard]] inline std::int64_t linear_tiles(std::int64_t features, std::size_t weight_bytes,
                                               std::int64_t max_dimension, std::size_t max_weight_bytes) {
    std::int64_t tiles = (features + max_dimension - 1) / max_dimension;
    if (max_weight_bytes > 0 && weight_bytes > max_weight_bytes && features > 0) {
        // Whole rows per tile: as many as fit the limit (at least one).
        const std::size_t row_bytes = weight_bytes / static_cast<std::size_t>(features);
        const auto rows = static_cast<std::int64_t>(std::max<std::size_t>(1, max_weight_bytes / row_bytes));
        tiles = std::max(tiles, (features + rows - 1) / rows);
    }
    return std::min(std::max<std::int64_t>(tiles, 1), std::max<std::int64_t>(features, 1));
}

// Splits every linear with constant weights whose output features exceed `max_dimension`, or whose weights
// (fp16) exceed `max_weight_bytes` (0: no limit), into row tiles of ceil(features / tiles) rows (the graph's
// constants are materialised first, so weights are op::constant nodes). Tiles keep the linear's stage.
[[nodiscard]] inline graph_body tile_wide_linears(const graph_body& body, std::int64_t max_dimension,
                                                  std::size_t max_weight_bytes = 0) {
    const auto tiles_of = [&](const graph_body& in, const node& n) -> std::int64_t {
        if (n.kind != op::linear || in.nodes[n.inputs[1]].kind != op::constant) return 1;
        if (n.inputs.size() == 3 && in.nodes[n.inputs[2]].kind != op::constant) return 1;
        const dims& weight = in.nodes[n.inputs[1]].result.shape;
        return linear_tiles(weight[0], static_cast<std::size_t>(weight.element_count()) * 2, max_dimension,
                            max_weight_bytes);
    };
    bool any = false;
    for (const auto& n : body.nodes)
        any = any || tiles_of(body, n) > 1;
    if (!any) return body;
    graph_body result;
    std::vector<value_id> mapped(body.nodes.size(), 0);
    auto append = [&](node n) {
        result.nodes.push_back(std::move(n));
        return static_cast<value_id>(result.nodes.size() - 1);
    };
    for (std::size_t id = 0; id < body.nodes.size(); ++id) {
        node n = body.nodes[id];
        for (auto& input : n.inputs)
            input = mapped[input];
        const std::int64_t tiles = tiles_of(result, n);
        if (tiles == 1) {
            mapped[id] = append(std::move(n));
            continue;
        }
        const node& weight = result.nodes[n.inputs[1]];
        const std::int64_t features = weight.result.shape[0];
        const std::int64_t per_tile = (features + tiles - 1) / tiles;
        std::vector<value_id> parts;
        for (std::int64_t first = 0; first < features; first += per_tile) {
            const std::int64_t count = std::min(per_tile, features - first);
            node w;
            w.kind = op::constant;
            w.data = leading_rows(result.nodes[n.inputs[1]].data, first, count);
            w.result = {w.data.type(), w.data.shape()};
            w.name = message(result.nodes[n.inputs[1]].name, "[", first, ":", first + count, "]");
            std::vector<value_id> inputs{n.inputs[0], append(std::move(w))};
            if (n.inputs.size() == 3) {
                node b;
                b.kind = op::constant;
                b.data = leading_rows(result.nodes[n.inputs[2]].data, first, count);
                b.result = {b.data.type(), b.data.shape()};
                inputs.push_back(append(std::move(b)));
            }
            node tile;
            tile.kind = op::linear;
            tile.stage = n.stage;
            tile.inputs = inputs;
            std::vector<value_type> types;
            for (const value_id input : inputs)
                types.push_back(result.nodes[input].result);
            tile.result = infer(op::linear, tile.attrs, types);
            parts.push_back(append(std::move(tile)));
        }
        node join;
        join.kind = op::concat;
        join.stage = n.stage;
        join.inputs = parts;
        join.attrs.axis = static_cast<std::int64_t>(n.result.shape.rank()) - 1;
        std::vector<value_type> types;
        for (const value_id part : parts)
            types.push_back(result.nodes[part].result);
        join.result = infer(op::concat, join.attrs, types);
        if (join.result.shape != n.result.shape) {
            throw error(message("tiling: the tiles of a linear with ", features, " features join to ",
                                join.result.shape, ", not ", n.result.shape));
        }
        mapped[id] = append(std::move(join));
    }
    for (const value_id id : body.outputs)
        result.outputs.push_back(mapped[id]);
    return result;
}

}  // namespace anvil::detail::ane
