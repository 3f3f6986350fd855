// anvil: the CPU backend's fast scan — cumsum along one axis. Each slice [outer, extent, inner] is walked
// along the axis once, carrying a block of running sums across the contiguous inner elements (so the inner
// loop vectorises); blocks run in parallel. Sums are kept in double, as the reference and torch.cumsum do.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "anvil/backend/cpu/kernel.hpp"
#include "anvil/backend/cpu/tensor_span.hpp"
#include "anvil/core/thread_pool.hpp"
#include "anvil/graph/graph.hpp"

namespace anvil::detail::cpu {

inline void cumsum(const node& n, std::span<const const_tensor_span> inputs, tensor_span output,
                   thread_pool& pool, std::span<float> /*workspace*/) {
    constexpr std::int64_t block = 64;  // running sums carried at once: a few cache lines of doubles
    const const_tensor_span& x = inputs[0];
    const auto axis = static_cast<std::size_t>(n.attrs.axis);
    const bool exclusive = n.attrs.exclusive, reverse = n.attrs.reverse;
    const std::int64_t outer = extent_product(x.shape, 0, axis);
    const std::int64_t extent = x.shape[axis];
    const std::int64_t inner = extent_product(x.shape, axis + 1, x.shape.rank());
    if (outer == 0 || extent == 0 || inner == 0) return;
    const std::int64_t blocks = (inner + block - 1) / block;
    const auto grain =
        static_cast<std::size_t>(std::max<std::int64_t>(1, 16384 / (extent * std::min(inner, block))));
    pool.parallel_for(0, static_cast<std::size_t>(outer * blocks), grain,
                      [&](std::size_t first, std::size_t last) {
                          std::array<double, block> sums{};
                          for (auto item = static_cast<std::int64_t>(first);
                               item < static_cast<std::int64_t>(last); ++item) {
                              const std::int64_t o = item / blocks;
                              const std::int64_t begin = (item % blocks) * block;
                              const std::int64_t width = std::min(block, inner - begin);
                              std::fill(sums.begin(), sums.end(), 0.0);
                              for (std::int64_t step = 0; step < extent; ++step) {
                                  const std::int64_t k = reverse ? extent - 1 - step : step;
                                  const std::int64_t at = (o * extent + k) * inner + begin;
                                  const float* from = x.data + at;
                                  float* to = output.data + at;
                                  for (std::int64_t i = 0; i < width; ++i) {
                                      const auto slot = static_cast<std::size_t>(i);
                                      const double before = sums[slot];
                                      sums[slot] = before + static_cast<double>(from[i]);
                                      to[i] = static_cast<float>(exclusive ? before : sums[slot]);
                                  }
                              }
                          }
                      });
}

}  // namespace anvil::detail::cpu
