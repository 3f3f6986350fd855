// anvil: partitioning a graph between the Neural Engine and the CPU. Each compute node is placed where the
// ANE lowering says it can run (supports()); the nodes are then scheduled into as few alternating segments
// as a greedy list schedule finds (keep taking ready nodes of the current device, switch only when none is
// ready). A model whose weights pass one program's limit is split into chunks of whole stages
// (graph/stages.hpp: the layers a recipe marked with graph::begin_stage), so that only the values between
// layers pass from one program to the next and each program reads its own layers' KV caches; the schedule
// finishes a chunk before it starts the next. A stage past the limit on its own (and a graph without stage
// marks, which is one stage) is split between its nodes, a new program before the node whose weights would
// pass the limit. Each segment knows the values it reads from outside and the values later segments or the
// program's outputs need from it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "anvil/backend/ane/support.hpp"
#include "anvil/core/error.hpp"
#include "anvil/graph/graph.hpp"
#include "anvil/graph/stages.hpp"

namespace anvil::detail::ane {

enum class segment_device : std::uint8_t { ane, cpu };

struct segment {
    segment_device device = segment_device::cpu;
    std::vector<value_id> nodes;    // compute nodes, topologically ordered
    std::vector<value_id> inputs;   // values read from outside: program inputs or earlier segments' results
    std::vector<value_id> outputs;  // values later segments or the program's outputs read
    std::size_t chunk = 0;          // the chunk of stages it belongs to (partition_result::chunks)
};

// A node the Neural Engine does not run, and why (for strict_device errors and the program's dump).
struct host_fallback {
    value_id node = 0;
    std::string reason;
};

struct partition_result {
    std::vector<segment> segments;
    std::vector<host_fallback> fallbacks;
    std::vector<stage_chunk> chunks;  // the stages each chunk holds, by effective stage (effective_stages)
};

struct partition_limits {
    // An ANE program's weights past this are split into several programs (RUNTIME.md §6: programs past
    // ~32 MB of weights leave the ANE's SRAM, and model files are limited to 1-2 GB).
    std::size_t max_program_weight_bytes = std::size_t{256} << 20;
};

// A weight: a constant, or the int8, palette or ggml-block dequantisation of constants that is not a program
// output (what the Core ML route keeps compressed). Segments take their own copies of weights: a weight is
// never scheduled, nor passed from one segment to another.
inline bool is_weight_value(const graph_body& body, value_id id) {
    const node& n = body.nodes[id];
    if (n.kind == op::constant) return true;
    if (n.kind != op::dequantize_int8 && n.kind != op::dequantize_lut && n.kind != op::dequantize_ggml)
        return false;
    const bool from_constants = std::all_of(n.inputs.begin(), n.inputs.end(), [&](value_id input) {
        return body.nodes[input].kind == op::constant;
    });
    return from_constants && std::find(body.outputs.begin(), body.outputs.end(), id) == body.outputs.end();
}

// The fp16 bytes of a weight as the ANE embeds it, whatever the checkpoint stored.
inline std::size_t weight_value_bytes(const graph_body& body, value_id id) {
    return static_cast<std::size_t>(body.nodes[id].result.shape.element_count()) * 2;
}

// The bytes of weights node `id` reads that no earlier node of the same program (or stage) read: each
// program embeds its own copy of a weight, once. `counted_in[w]` is where weight w was last counted.
inline std::size_t new_weight_bytes(const graph_body& body, value_id id, std::vector<std::size_t>& counted_in,
                                    std::size_t where) {
    std::size_t bytes = 0;
    for (const value_id input : body.nodes[id].inputs) {
        if (!is_weight_value(body, input) || counted_in[input] == where) continue;
        counted_in[input] = where;
        bytes += weight_value_bytes(body, input);
    }
    return bytes;
}

// The bytes of the weights a segment's nodes read, each counted once: what its program embeds.
inline std::size_t segment_weight_bytes(const graph_body& body, std::span<const value_id> nodes) {
    std::vector<std::size_t> counted_in(body.nodes.size(), 0);
    std::size_t bytes = 0;
    for (const value_id id : nodes)
        bytes += new_weight_bytes(body, id, counted_in, 1);
    return bytes;
}

// What each segment reads from outside (program inputs or other segments' results; constants are copied in)
// and what other segments or the program's outputs read from it.
inline void compute_boundaries(const graph_body& body, std::vector<segment>& segments) {
    const std::size_t count = body.nodes.size();
    std::vector<std::size_t> segment_of(count, static_cast<std::size_t>(-1));
    for (std::size_t s = 0; s < segments.size(); ++s)
        for (const value_id id : segments[s].nodes)
            segment_of[id] = s;
    std::vector<bool> is_output(count, false);
    for (const value_id id : body.outputs)
        is_output[id] = true;
    std::vector<std::vector<std::size_t>> read_by(count);
    for (std::size_t s = 0; s < segments.size(); ++s) {
        auto& seg = segments[s];
        std::vector<value_id> inputs;
        for (const value_id id : seg.nodes) {
            for (const value_id input : body.nodes[id].inputs) {
                const node& producer = body.nodes[input];
                if (is_weight_value(body, input)) continue;
                if (producer.kind != op::input && segment_of[input] == s) continue;
                if (std::find(inputs.begin(), inputs.end(), input) == inputs.end()) inputs.push_back(input);
                read_by[input].push_back(s);
            }
        }
        seg.inputs = std::move(inputs);
    }
    for (auto& seg : segments) {
        seg.outputs.clear();
        for (const value_id id : seg.nodes) {
            if (is_output[id] || !read_by[id].empty()) seg.outputs.push_back(id);
        }
    }
}

// Joins each run of neighbouring CPU segments into one (after ANE segments moved to the CPU), keeping the
// schedule's order, and recomputes every boundary.
inline void merge_cpu_neighbours(const graph_body& body, std::vector<segment>& segments) {
    std::vector<segment> merged;
    for (auto& seg : segments) {
        if (!merged.empty() && merged.back().device == segment_device::cpu &&
            seg.device == segment_device::cpu) {
            merged.back().nodes.insert(merged.back().nodes.end(), seg.nodes.begin(), seg.nodes.end());
            continue;
        }
        merged.push_back(std::move(seg));
    }
    segments = std::move(merged);
    compute_boundaries(body, segments);
}

// The graph must hold no compute node whose operands are all constants (callers materialise them first) but
// int8 and palette dequantisation, so every weight reaches a segment as a constant or a compressed weight
// (is_weight_value) it can embed or copy.
[[nodiscard]] inline partition_result partition(const graph_body& body, const lowering_options& options,
                                                bool strict_device, const partition_limits& limits = {}) {
    const std::size_t count = body.nodes.size();
    partition_result result;
    std::vector<segment_device> device(count, segment_device::cpu);
    std::vector<bool> is_compute(count, false);
    for (std::size_t id = 0; id < count; ++id) {
        const node& n = body.nodes[id];
        if (n.kind == op::input || is_weight_value(body, static_cast<value_id>(id))) continue;
        is_compute[id] = true;
        support_result support;
        if (n.result.shape.element_count() == 0) {
            support = {placement::host_only,
                       "the value is empty (a zero extent); the ANE has no empty tensors", true};
        } else {
            support = supports(body, static_cast<value_id>(id), options);
        }
        if (support.where == placement::host_only) {
            // strict_device refuses what the Neural Engine could run but will not; integer work (embedding
            // lookups, argmax) is the host's by nature and stays there.
            if (strict_device && !support.inherent) {
                throw unsupported_error(
                    message("compile: strict_device: ", describe_node(body, static_cast<value_id>(id)),
                            " cannot run on the Neural Engine: ", support.reason));
            }
            result.fallbacks.push_back({static_cast<value_id>(id), support.reason});
        } else {
            device[id] = segment_device::ane;
        }
    }

    // Only nodes some output needs are scheduled (the caller eliminated dead code; this keeps it robust).
    std::vector<bool> needed(count, false);
    for (const value_id id : body.outputs)
        needed[id] = true;
    for (std::size_t id = count; id-- > 0;) {
        if (!needed[id]) continue;
        for (const value_id input : body.nodes[id].inputs)
            needed[input] = true;
    }

    // The chunks: whole stages packed by the weights their Neural Engine nodes read (each weight counted
    // once per stage), in the order the schedule below would meet them.
    const std::vector<std::uint32_t> stage = effective_stages(body);
    std::uint32_t last_stage = 0;
    for (std::size_t id = 0; id < count; ++id)
        if (is_compute[id] && needed[id]) last_stage = std::max(last_stage, stage[id]);
    std::vector<stage_weights> stages(static_cast<std::size_t>(last_stage) + 1);
    {
        std::vector<std::size_t> counted_in(count, static_cast<std::size_t>(-1));
        for (std::size_t id = 0; id < count; ++id) {
            if (!is_compute[id] || !needed[id] || device[id] != segment_device::ane) continue;
            const std::size_t bytes =
                new_weight_bytes(body, static_cast<value_id>(id), counted_in, stage[id]);
            if (bytes == 0) continue;
            stages[stage[id]].bytes += bytes;
            stages[stage[id]].pieces.push_back(bytes);
        }
    }
    result.chunks = chunk_stages(stages, limits.max_program_weight_bytes);
    std::vector<std::size_t> chunk_of_stage(stages.size(), 0);
    for (std::size_t c = 0; c < result.chunks.size(); ++c)
        for (std::size_t s = result.chunks[c].first; s <= result.chunks[c].last; ++s)
            chunk_of_stage[s] = c;
    const auto chunk_of = [&](value_id id) { return chunk_of_stage[stage[id]]; };

    // Greedy list schedule: pending operand counts, a ready list per device. Chunks come in order (every
    // operand's chunk is at most its reader's, so the earliest chunk always has a ready node); within one,
    // the current device's ready nodes are taken until none is left, then the other device's.
    std::vector<std::size_t> pending(count, 0);
    std::vector<std::vector<value_id>> readers(count);
    for (std::size_t id = 0; id < count; ++id) {
        if (!is_compute[id] || !needed[id]) continue;
        for (const value_id input : body.nodes[id].inputs) {
            if (!is_compute[input]) continue;
            ++pending[id];
            readers[input].push_back(static_cast<value_id>(id));
        }
    }
    std::vector<value_id> ready[2];
    auto slot = [](segment_device d) { return d == segment_device::ane ? 0 : 1; };
    for (std::size_t id = 0; id < count; ++id) {
        if (is_compute[id] && needed[id] && pending[id] == 0)
            ready[slot(device[id])].push_back(static_cast<value_id>(id));
    }
    // The ready node of `list` in chunk `chunk` with the lowest id (which keeps the schedule close to the
    // graph's own order: stable dumps, stable MIL), or list.end().
    const auto first_in = [&](std::vector<value_id>& list, std::size_t chunk) {
        auto best = list.end();
        for (auto it = list.begin(); it != list.end(); ++it)
            if (chunk_of(*it) == chunk && (best == list.end() || *it < *best)) best = it;
        return best;
    };
    std::vector<std::size_t> counted_in(count, static_cast<std::size_t>(-1));
    std::size_t current_weight_bytes = 0;
    segment_device current = segment_device::cpu;
    auto open_segment = [&](segment_device d, std::size_t chunk) {
        result.segments.push_back({d, {}, {}, {}, chunk});
        current = d;
        current_weight_bytes = 0;
    };
    while (!ready[0].empty() || !ready[1].empty()) {
        std::size_t chunk = static_cast<std::size_t>(-1);
        for (const auto& list : ready)
            for (const value_id id : list)
                chunk = std::min(chunk, chunk_of(id));
        const bool in_chunk = !result.segments.empty() && result.segments.back().chunk == chunk;
        auto& list = ready[slot(current)];
        const auto it = in_chunk ? first_in(list, chunk) : list.end();
        if (it == list.end()) {
            // Within the chunk the other device takes over; a new chunk starts on the Neural Engine when it
            // has work there.
            const segment_device other =
                current == segment_device::ane ? segment_device::cpu : segment_device::ane;
            const bool ane_ready = first_in(ready[0], chunk) != ready[0].end();
            open_segment(in_chunk ? other : (ane_ready ? segment_device::ane : segment_device::cpu), chunk);
            continue;
        }
        const value_id id = *it;
        list.erase(it);
        if (current == segment_device::ane) {
            std::size_t where = result.segments.size() - 1;
            std::size_t bytes = new_weight_bytes(body, id, counted_in, where);
            if (current_weight_bytes > 0 && current_weight_bytes + bytes > limits.max_program_weight_bytes) {
                open_segment(segment_device::ane, chunk);
                bytes = new_weight_bytes(body, id, counted_in, ++where);
            }
            current_weight_bytes += bytes;
        }
        result.segments.back().nodes.push_back(id);
        for (const value_id reader : readers[id]) {
            if (--pending[reader] == 0) ready[slot(device[reader])].push_back(reader);
        }
    }

    compute_boundaries(body, result.segments);
    return result;
}

// "linear x3, gelu, softmax": a segment's ops by kind, in order of first appearance.
inline std::string ops_summary(const graph_body& body, std::span<const value_id> nodes) {
    std::vector<std::pair<op, std::size_t>> counts;
    for (const value_id id : nodes) {
        const op kind = body.nodes[id].kind;
        const auto found =
            std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == kind; });
        if (found == counts.end()) {
            counts.emplace_back(kind, 1);
        } else {
            ++found->second;
        }
    }
    std::string text;
    for (const auto& [kind, count] : counts)
        text += message(text.empty() ? "" : ", ", op_name(kind),
                        count > 1 ? message(" x", count) : std::string());
    return text;
}

}  // namespace anvil::detail::ane
