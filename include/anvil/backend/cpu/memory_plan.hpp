// anvil: the CPU backend's buffer plan. Every intermediate value gets an offset in one arena, assigned from
// the values' lifetimes (first definition to last read) so values that are never alive together share
// memory; a run then allocates nothing. Greedy by size, as TFLite's arena planner: place the largest values
// first, each at the lowest offset that does not collide with a placed value alive at the same time.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "anvil/core/error.hpp"

namespace anvil::detail::cpu {

inline constexpr std::size_t buffer_alignment = 64;  // a cache line; also AVX-512's vector width

struct buffer_request {
    std::size_t bytes = 0;
    std::size_t first_use = 0;  // the step that writes it
    std::size_t last_use = 0;   // the last step that reads it (inclusive)
};

struct memory_plan {
    std::vector<std::size_t> offsets;  // one per request
    std::size_t arena_bytes = 0;
};

[[nodiscard]] inline std::size_t align_up(std::size_t bytes, std::size_t alignment = buffer_alignment) {
    if (bytes > SIZE_MAX - alignment) throw error("memory plan: a buffer size overflows");
    return (bytes + alignment - 1) / alignment * alignment;
}

[[nodiscard]] inline memory_plan plan_memory(const std::vector<buffer_request>& requests) {
    memory_plan plan;
    plan.offsets.assign(requests.size(), 0);
    std::vector<std::size_t> order(requests.size());
    for (std::size_t i = 0; i < order.size(); ++i)
        order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return requests[a].bytes > requests[b].bytes; });
    struct placed {
        std::size_t offset, end, first_use, last_use;
    };
    std::vector<placed> live;  // every placed buffer, sorted by offset
    for (const std::size_t index : order) {
        const buffer_request& request = requests[index];
        const std::size_t size = align_up(request.bytes);
        std::size_t offset = 0;
        for (const placed& p : live) {
            const bool overlaps_in_time = p.first_use <= request.last_use && request.first_use <= p.last_use;
            if (!overlaps_in_time) continue;
            if (offset + size <= p.offset) break;  // fits in the gap before p
            offset = std::max(offset, p.end);
        }
        plan.offsets[index] = offset;
        plan.arena_bytes = std::max(plan.arena_bytes, offset + size);
        const placed entry{offset, offset + size, request.first_use, request.last_use};
        live.insert(std::upper_bound(live.begin(), live.end(), entry,
                                     [](const placed& a, const placed& b) { return a.offset < b.offset; }),
                    entry);
    }
    return plan;
}

// True when no two requests alive at the same step share bytes: what the tests check of every plan.
[[nodiscard]] inline bool plan_is_valid(const std::vector<buffer_request>& requests,
                                        const memory_plan& plan) {
    for (std::size_t a = 0; a < requests.size(); ++a) {
        for (std::size_t b = a + 1; b < requests.size(); ++b) {
            const bool in_time = requests[a].first_use <= requests[b].last_use &&
                                 requests[b].first_use <= requests[a].last_use;
            const bool in_space = plan.offsets[a] < plan.offsets[b] + requests[b].bytes &&
                                  plan.offsets[b] < plan.offsets[a] + requests[a].bytes;
            if (in_time && in_space && requests[a].bytes > 0 && requests[b].bytes > 0) return false;
        }
        if (plan.offsets[a] + requests[a].bytes > plan.arena_bytes) return false;
    }
    return true;
}

}  // namespace anvil::detail::cpu
