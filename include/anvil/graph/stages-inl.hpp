// anvil: stages' definitions (see stages.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/graph/stages.hpp"

namespace anvil {

ANVIL_INLINE std::size_t split_programs(std::span<const std::size_t> pieces,
                                        std::size_t max_program_weight_bytes) {
    std::size_t programs = 1, current = 0;
    for (const std::size_t bytes : pieces) {
        if (current > 0 && current + bytes > max_program_weight_bytes) {
            ++programs;
            current = 0;
        }
        current += bytes;
    }
    return programs;
}

ANVIL_INLINE std::vector<stage_chunk> chunk_stages(std::span<const stage_weights> stages,
                                                   std::size_t max_program_weight_bytes) {
    std::vector<stage_chunk> chunks;
    bool split = false;  // the open chunk is one stage past the limit
    for (std::size_t s = 0; s < stages.size(); ++s) {
        const std::size_t bytes = stages[s].bytes;
        const bool alone = bytes > max_program_weight_bytes;
        if (!chunks.empty() && bytes > 0 && chunks.back().weight_bytes > 0 &&
            (split || alone || chunks.back().weight_bytes + bytes > max_program_weight_bytes)) {
            chunks.push_back({s, s, 0, 1});
            split = false;
        }
        if (chunks.empty()) chunks.push_back({s, s, 0, 1});
        stage_chunk& chunk = chunks.back();
        chunk.last = s;
        chunk.weight_bytes += bytes;
        if (alone) {
            chunk.programs = split_programs(stages[s].pieces, max_program_weight_bytes);
            split = true;
        }
    }
    return chunks;
}

ANVIL_INLINE std::vector<std::uint32_t> effective_stages(const graph_body& body) {
    std::vector<std::uint32_t> stage(body.nodes.size(), 0);
    for (std::size_t id = 0; id < body.nodes.size(); ++id) {
        const node& n = body.nodes[id];
        stage[id] = n.stage;
        if (n.kind == op::input || n.kind == op::constant) continue;
        for (const value_id input : n.inputs) {
            const op kind = body.nodes[input].kind;
            if (kind != op::input && kind != op::constant) stage[id] = std::max(stage[id], stage[input]);
        }
    }
    return stage;
}

ANVIL_INLINE std::string stage_range(std::string_view first, std::string_view last) {
    if (first == last) return std::string(first);
    return detail::message(first, " to ", last);
}

}  // namespace anvil
