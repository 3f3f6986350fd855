// anvil: stages — the runs of nodes a recipe marks while it builds a model (graph::begin_stage: the
// embedding, each decoder layer, the head) — and chunks: runs of whole stages whose weights fit one
// program. The Neural Engine partitioner (backend/ane/partition.hpp) chunks a graph by the weights it
// measures in it; the decoder planner (models/llm/decoder_plan.hpp) chunks a model by the weights its config
// implies, before any weight is read. Both call chunk_stages, so the plan a planner prints is the chunking
// the backend runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "anvil/compilation.hpp"
#include "anvil/graph/graph.hpp"

namespace anvil {

// The weights one stage's Neural Engine work reads.
struct stage_weights {
    std::size_t bytes = 0;            // fp16 bytes: what the ANE program embeds, whatever the checkpoint held
    std::vector<std::size_t> pieces;  // the same bytes per node that reads weights, in the order they run
};

// Stages [first, last] run as one chunk: one program, or `programs` when its single stage alone holds more
// weights than the limit and is split between its nodes.
struct stage_chunk {
    std::size_t first = 0, last = 0;
    std::size_t weight_bytes = 0;
    std::size_t programs = 1;
};

// Packs the stages, in order, into as few chunks as the limit allows: each chunk takes whole stages while
// their weights fit `max_program_weight_bytes` (a greedy fill, which for runs in a fixed order gives the
// fewest). A stage past the limit on its own is a chunk of its own, split between its nodes as
// split_programs says. Stages without weights join the chunk around them and never start one.
[[nodiscard]] std::vector<stage_chunk> chunk_stages(std::span<const stage_weights> stages,
                                                    std::size_t max_program_weight_bytes);

// How many programs weights read in the order of `pieces` fill, a new program starting before the piece
// that would take the current one past the limit (a piece past it alone gets a program to itself).
[[nodiscard]] std::size_t split_programs(std::span<const std::size_t> pieces,
                                         std::size_t max_program_weight_bytes);

// The stage of every node of `body` as chunking sees it: its own (node::stage), or the latest stage of the
// compute nodes it reads when that is later — a node a pass created without a stage, or built out of order,
// never runs before what it reads. Inputs and constants keep their own.
[[nodiscard]] std::vector<std::uint32_t> effective_stages(const graph_body& body);

// "layer 0 to layer 3", or "head" for one stage: how reports name a run of stages by their labels.
[[nodiscard]] std::string stage_range(std::string_view first, std::string_view last);

}  // namespace anvil

#if ANVIL_DEFINITIONS
#include "anvil/graph/stages-inl.hpp"
#endif
