// anvil: the CPU backend's fast data movement — permute, concat, slice, pad, gather (also of rows of ggml
// blocks), gather_elements and scatter_add. Each first merges the
// axes it can (size-1 axes vanish; neighbours that stay neighbours become one), so most calls reduce to
// copying contiguous runs with memcpy; a permute that moves the innermost axis becomes a cache-blocked
// transpose of two axes. Threaded over rows or tiles.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "anvil/backend/cpu/kernel.hpp"
#include "anvil/backend/cpu/reference/data_movement.hpp"
#include "anvil/backend/cpu/tensor_span.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/ggml_types.hpp"
#include "anvil/core/thread_pool.hpp"
#include "anvil/graph/graph.hpp"

namespace anvil::detail::cpu {

namespace movement {

inline constexpr std::int64_t grain_elements = 65536;  // copies: enough to be worth waking a thread

[[nodiscard]] inline std::size_t grain_for(std::int64_t per_item) {
    return static_cast<std::size_t>(
        std::max<std::int64_t>(1, grain_elements / std::max<std::int64_t>(per_item, 1)));
}

inline void copy_floats(float* to, const float* from, std::int64_t count) {
    if (count > 0) std::memcpy(to, from, static_cast<std::size_t>(count) * sizeof(float));
}

// A walk over an output in row-major order that reads the input at `strides` (per output axis): axes of
// extent 1 are dropped and neighbours merged where the input steps over them as one.
struct strided_view {
    std::size_t rank = 0;
    std::array<std::int64_t, max_rank> extents{};
    stride_array strides{};
};

[[nodiscard]] inline strided_view merge_axes(const dims& shape, const stride_array& strides) {
    strided_view view;
    for (std::size_t axis = 0; axis < shape.rank(); ++axis) {
        if (shape[axis] == 1) continue;
        if (view.rank > 0 && view.strides[view.rank - 1] == strides[axis] * shape[axis]) {
            view.extents[view.rank - 1] *= shape[axis];
            view.strides[view.rank - 1] = strides[axis];
            continue;
        }
        view.extents[view.rank] = shape[axis];
        view.strides[view.rank] = strides[axis];
        ++view.rank;
    }
    if (view.rank == 0) {
        view.extents[0] = 1;
        view.strides[0] = 1;
        view.rank = 1;
    }
    return view;
}

// The input offset of output row `row` (a row = the innermost merged axis).
[[nodiscard]] inline std::int64_t row_offset(const strided_view& view, std::int64_t row) {
    std::int64_t offset = 0;
    for (std::size_t axis = view.rank - 1; axis-- > 0;) {
        offset += (row % view.extents[axis]) * view.strides[axis];
        row /= view.extents[axis];
    }
    return offset;
}

// out (row-major, the view's shape) = the input read through the view, threaded over rows.
inline void copy_strided(const float* in, const strided_view& view, float* out, thread_pool& pool) {
    const std::int64_t inner = view.extents[view.rank - 1];
    const std::int64_t step = view.strides[view.rank - 1];
    std::int64_t rows = 1;
    for (std::size_t axis = 0; axis + 1 < view.rank; ++axis)
        rows *= view.extents[axis];
    pool.parallel_for(
        0, static_cast<std::size_t>(rows), grain_for(inner), [&](std::size_t first, std::size_t last) {
            for (auto row = static_cast<std::int64_t>(first); row < static_cast<std::int64_t>(last); ++row) {
                const float* from = in + row_offset(view, row);
                float* to = out + row * inner;
                if (step == 1) {
                    copy_floats(to, from, inner);
                } else {
                    for (std::int64_t i = 0; i < inner; ++i)
                        to[i] = from[i * step];
                }
            }
        });
}

// Output axis `q` (the innermost) reads the input with stride s; output axis `p` is the input's innermost
// (stride 1). Each 32 x 32 tile is read row by row into a padded buffer and written out column by column, so
// both sides move whole cache lines (strided reads of a large power-of-two stride would all land in one cache
// set).
inline void transpose_blocked(const float* in, const strided_view& view, std::size_t p, float* out,
                              thread_pool& pool) {
    constexpr std::int64_t tile = 32;
    const std::size_t q = view.rank - 1;
    const std::int64_t rows = view.extents[p], columns = view.extents[q];
    const std::int64_t column_stride = view.strides[q];
    stride_array out_strides{};
    std::int64_t stride = 1;
    for (std::size_t axis = view.rank; axis-- > 0;) {
        out_strides[axis] = stride;
        stride *= view.extents[axis];
    }
    std::int64_t batches = 1;
    for (std::size_t axis = 0; axis < q; ++axis) {
        if (axis != p) batches *= view.extents[axis];
    }
    const std::int64_t row_tiles = (rows + tile - 1) / tile, column_tiles = (columns + tile - 1) / tile;
    const std::int64_t items = batches * row_tiles * column_tiles;
    pool.parallel_for(0, static_cast<std::size_t>(items), grain_for(tile * tile),
                      [&](std::size_t first, std::size_t last) {
                          float buffer[tile][tile + 1];
                          for (auto item = static_cast<std::int64_t>(first);
                               item < static_cast<std::int64_t>(last); ++item) {
                              const std::int64_t column0 = item % column_tiles * tile;
                              const std::int64_t row0 = item / column_tiles % row_tiles * tile;
                              std::int64_t batch = item / column_tiles / row_tiles;
                              std::int64_t in_offset = 0, out_offset = 0;
                              for (std::size_t axis = q; axis-- > 0;) {
                                  if (axis == p) continue;
                                  const std::int64_t index = batch % view.extents[axis];
                                  batch /= view.extents[axis];
                                  in_offset += index * view.strides[axis];
                                  out_offset += index * out_strides[axis];
                              }
                              const std::int64_t height = std::min(tile, rows - row0),
                                                 width = std::min(tile, columns - column0);
                              // buffer[c][r] = in[column c, row r]: input lines are contiguous along the
                              // rows.
                              for (std::int64_t c = 0; c < width; ++c) {
                                  const float* from = in + in_offset + (column0 + c) * column_stride + row0;
                                  for (std::int64_t r = 0; r < height; ++r)
                                      buffer[c][r] = from[r];
                              }
                              for (std::int64_t r = 0; r < height; ++r) {
                                  float* to = out + out_offset + (row0 + r) * out_strides[p] + column0;
                                  for (std::int64_t c = 0; c < width; ++c)
                                      to[c] = buffer[c][r];
                              }
                          }
                      });
}

}  // namespace movement

// The output's axis i is the input's attrs.axes[i].
inline void permute(const node& n, std::span<const const_tensor_span> inputs, tensor_span output,
                    thread_pool& pool, std::span<float> /*workspace*/) {
    const dims& in_shape = inputs[0].shape;
    if (count_of(output.shape) == 0) return;
    const stride_array in_strides = row_major_strides(in_shape);
    stride_array strides{};
    for (std::size_t i = 0; i < n.attrs.axes.size(); ++i) {
        strides[i] = in_strides[static_cast<std::size_t>(n.attrs.axes[i])];
    }
    const movement::strided_view view = movement::merge_axes(output.shape, strides);
    if (view.strides[view.rank - 1] == 1)
        return movement::copy_strided(inputs[0].data, view, output.data, pool);
    std::size_t p = 0;
    while (view.strides[p] != 1)
        ++p;  // the input's innermost axis is one of the merged axes
    movement::transpose_blocked(inputs[0].data, view, p, output.data, pool);
}

// Along attrs.axis: each input's block of every outer row copied in turn.
inline void concat(const node& n, std::span<const const_tensor_span> inputs, tensor_span output,
                   thread_pool& pool, std::span<float> /*workspace*/) {
    const auto axis = static_cast<std::size_t>(n.attrs.axis);
    const std::int64_t outer = extent_product(output.shape, 0, axis);
    const std::int64_t inner = extent_product(output.shape, axis + 1, output.shape.rank());
    const std::int64_t out_row = output.shape[axis] * inner;
    if (outer == 0 || out_row == 0) return;
    pool.parallel_for(0, static_cast<std::size_t>(outer), movement::grain_for(out_row),
                      [&](std::size_t first, std::size_t last) {
                          for (auto o = static_cast<std::int64_t>(first); o < static_cast<std::int64_t>(last);
                               ++o) {
                              float* to = output.data + o * out_row;
                              for (const auto& input : inputs) {
                                  const std::int64_t row = input.shape[axis] * inner;
                                  movement::copy_floats(to, input.data + o * row, row);
                                  to += row;
                              }
                          }
                      });
}

// Element idx of the output reads the input at begin + idx * step on every axis (canonical bounds).
inline void slice(const node& n, std::span<const const_tensor_span> inputs, tensor_span output,
                  thread_pool& pool, std::span<float> /*workspace*/) {
    if (count_of(output.shape) == 0) return;
    const dims& in_shape = inputs[0].shape;
    const stride_array in_strides = row_major_strides(in_shape);
    std::int64_t start = 0;
    stride_array steps{};
    for (std::size_t axis = 0; axis < in_shape.rank(); ++axis) {
        start += n.attrs.begin[axis] * in_strides[axis];
        steps[axis] = n.attrs.step[axis] * in_strides[axis];
    }
    movement::copy_strided(inputs[0].data + start, movement::merge_axes(output.shape, steps), output.data,
                           pool);
}

// Constant padding: attrs.begin[axis] values before and attrs.end[axis] after x on each axis.
inline void pad(const node& n, std::span<const const_tensor_span> inputs, tensor_span output,
                thread_pool& pool, std::span<float> /*workspace*/) {
    const std::int64_t count = count_of(output.shape);
    if (count == 0) return;
    const float value = n.attrs.value;
    const dims& in_shape = inputs[0].shape;
    const std::size_t rank = output.shape.rank();
    if (rank == 0) {
        output.data[0] = inputs[0].data[0];
        return;
    }
    // Trailing axes without padding join the row: from the last padded axis on, whole runs of x copy at once.
    std::size_t unpadded_from = rank;
    while (unpadded_from > 0 && n.attrs.begin[unpadded_from - 1] == 0 &&
           n.attrs.end[unpadded_from - 1] == 0) {
        --unpadded_from;
    }
    const std::size_t row_axis = unpadded_from == 0 ? 0 : unpadded_from - 1;
    const std::int64_t tail = extent_product(in_shape, row_axis + 1, rank);  // unpadded trailing block
    const std::int64_t in_row = in_shape[row_axis] * tail;
    const std::int64_t out_row = output.shape[row_axis] * tail;
    const std::int64_t before = n.attrs.begin[row_axis] * tail;
    const std::int64_t rows = count / out_row;
    pool.parallel_for(
        0, static_cast<std::size_t>(rows), movement::grain_for(out_row),
        [&](std::size_t first, std::size_t last) {
            for (auto row = static_cast<std::int64_t>(first); row < static_cast<std::int64_t>(last); ++row) {
                float* to = output.data + row * out_row;
                // The input row this output row shows, if it is not padding on an outer axis.
                std::int64_t rest = row, in_row_index = 0, in_rows_stride = 1;
                bool inside = true;
                for (std::size_t axis = row_axis; axis-- > 0;) {
                    const std::int64_t index = rest % output.shape[axis] - n.attrs.begin[axis];
                    rest /= output.shape[axis];
                    inside = inside && index >= 0 && index < in_shape[axis];
                    in_row_index += index * in_rows_stride;
                    in_rows_stride *= in_shape[axis];
                }
                if (!inside || in_row == 0) {
                    std::fill(to, to + out_row, value);
                    continue;
                }
                std::fill(to, to + before, value);
                movement::copy_floats(to + before, inputs[0].data + in_row_index * in_row, in_row);
                std::fill(to + before + in_row, to + out_row, value);
            }
        });
}

// Rows of the table along attrs.axis named by the indices (whole numbers in [0, extent), checked first: an
// invalid one throws naming it, before anything is written).
inline void gather(const node& n, std::span<const const_tensor_span> inputs, tensor_span output,
                   thread_pool& pool, std::span<float> /*workspace*/) {
    const const_tensor_span& table = inputs[0];
    const const_tensor_span& indices = inputs[1];
    const auto axis = static_cast<std::size_t>(n.attrs.axis);
    const std::int64_t outer = extent_product(table.shape, 0, axis);
    const std::int64_t extent = table.shape[axis];
    const std::int64_t inner = extent_product(table.shape, axis + 1, table.shape.rank());
    const std::int64_t count = count_of(indices.shape);
    reference::check_row_indices("gather", indices, n.attrs.axis, table.shape);
    if (outer == 0 || count == 0 || inner == 0) return;
    pool.parallel_for(0, static_cast<std::size_t>(outer * count), movement::grain_for(inner),
                      [&](std::size_t first, std::size_t last) {
                          for (auto item = static_cast<std::int64_t>(first);
                               item < static_cast<std::int64_t>(last); ++item) {
                              const std::int64_t o = item / count;
                              const auto row = static_cast<std::int64_t>(indices.data[item % count]);
                              movement::copy_floats(output.data + item * inner,
                                                    table.data + (o * extent + row) * inner, inner);
                          }
                      });
}

// gather_elements: the indices checked first (as the reference does), then rows of the output's last axis
// taken in parallel, each from the data's offset of the row's other coordinates.
inline void gather_elements(const node& n, std::span<const const_tensor_span> inputs, tensor_span output,
                            thread_pool& pool, std::span<float> /*workspace*/) {
    const const_tensor_span& data = inputs[0];
    const const_tensor_span& indices = inputs[1];
    reference::check_gather_elements_indices(data, indices, n.attrs.axis);
    const dims& shape = indices.shape;
    const std::size_t rank = shape.rank();
    const std::int64_t width = shape[rank - 1];
    const std::int64_t count = count_of(shape);
    if (count == 0) return;
    const auto axis = static_cast<std::size_t>(n.attrs.axis);
    const std::int64_t extent = data.shape[axis];
    const stride_array strides = row_major_strides(data.shape);
    const std::int64_t along_stride = strides[axis];
    // The last axis steps the data by its stride unless it is the gathered axis (the index steps it then).
    const std::int64_t last_stride = axis == rank - 1 ? 0 : strides[rank - 1];
    pool.parallel_for(
        0, static_cast<std::size_t>(count / width), movement::grain_for(width),
        [&](std::size_t first, std::size_t last) {
            for (auto row = static_cast<std::int64_t>(first); row < static_cast<std::int64_t>(last); ++row) {
                std::int64_t base = 0;
                for (std::int64_t rest = row, a = static_cast<std::int64_t>(rank) - 1; a-- > 0;) {
                    const auto axis_a = static_cast<std::size_t>(a);
                    if (axis_a != axis) base += (rest % shape[axis_a]) * strides[axis_a];
                    rest /= shape[axis_a];
                }
                const float* row_indices = indices.data + row * width;
                float* to = output.data + row * width;
                for (std::int64_t j = 0; j < width; ++j) {
                    auto along = static_cast<std::int64_t>(row_indices[j]);
                    if (along < 0) along += extent;
                    to[j] = data.data[base + j * last_stride + along * along_stride];
                }
            }
        });
}

// scatter_add: the indices checked first (as the reference does), the table zeroed, then each update row
// added into its row. Threads split the table's columns (and its outer slices), never the indices, so every
// element sums the rows that meet there in index order — the reference's order, bit for bit. An embedding's
// gradient this way costs the table's zeroing and one add per looked-up element, where a one-hot product
// cost a multiply-add per table element and looked-up element.
inline void scatter_add(const node& n, std::span<const const_tensor_span> inputs, tensor_span output,
                        thread_pool& pool, std::span<float> /*workspace*/) {
    const const_tensor_span& updates = inputs[0];
    const const_tensor_span& indices = inputs[1];
    reference::check_row_indices("scatter_add", indices, n.attrs.axis, output.shape);
    const auto axis = static_cast<std::size_t>(n.attrs.axis);
    const std::int64_t outer = extent_product(output.shape, 0, axis);
    const std::int64_t extent = output.shape[axis];
    const std::int64_t inner = extent_product(output.shape, axis + 1, output.shape.rank());
    const std::int64_t count = count_of(indices.shape);
    const std::int64_t total = count_of(output.shape);
    if (total == 0) return;
    constexpr std::int64_t fill_block = 16384;
    pool.parallel_for(0, static_cast<std::size_t>((total + fill_block - 1) / fill_block),
                      movement::grain_for(fill_block), [&](std::size_t first, std::size_t last) {
                          const auto begin = static_cast<std::int64_t>(first) * fill_block;
                          const std::int64_t end =
                              std::min(total, static_cast<std::int64_t>(last) * fill_block);
                          std::fill(output.data + begin, output.data + end, 0.0f);
                      });
    if (count == 0 || inner == 0) return;
    // Column blocks wide enough to vectorise; as many items as outer slices times blocks.
    constexpr std::int64_t column_block = 256;
    const std::int64_t blocks = (inner + column_block - 1) / column_block;
    pool.parallel_for(0, static_cast<std::size_t>(outer * blocks),
                      movement::grain_for(count * std::min(inner, column_block)),
                      [&](std::size_t first, std::size_t last) {
                          for (auto item = static_cast<std::int64_t>(first);
                               item < static_cast<std::int64_t>(last); ++item) {
                              const std::int64_t o = item / blocks;
                              const std::int64_t column = (item % blocks) * column_block;
                              const std::int64_t width = std::min(column_block, inner - column);
                              for (std::int64_t i = 0; i < count; ++i) {
                                  const auto row = static_cast<std::int64_t>(indices.data[i]);
                                  const float* from = updates.data + (o * count + i) * inner + column;
                                  float* to = output.data + (o * extent + row) * inner + column;
                                  for (std::int64_t j = 0; j < width; ++j)
                                      to[j] += from[j];
                              }
                          }
                      });
}

// gather of rows from a table of ggml blocks (a GGUF file's quantised embeddings, op::dequantize_ggml of a
// constant [rows, bytes]): only the rows the indices name are dequantised, as llama.cpp's get_rows does, so
// the table stays in its blocks. Null when node `n` is not such a gather.
inline std::optional<prepared_kernel> gather_from_blocks(const graph_body& body, const node& n) {
    const node& table = body.nodes[n.inputs[0]];
    if (n.attrs.axis != 0 || table.kind != op::dequantize_ggml || table.result.shape.rank() != 2 ||
        body.nodes[table.inputs[0]].kind != op::constant)
        return std::nullopt;
    const host_tensor blocks = body.nodes[table.inputs[0]].data;
    const auto type = static_cast<ggml_type>(table.attrs.ggml_type);
    const std::int64_t rows = table.result.shape[0], row_values = table.result.shape[1];
    const auto row_bytes = static_cast<std::size_t>(blocks.shape()[1]);
    prepared_kernel parts;
    parts.reads_natively = {true, false};
    parts.weight_buffers.emplace_back(blocks.raw(), blocks.byte_size());
    parts.run = [blocks, type, rows, row_values, row_bytes](std::span<const const_tensor_span> in,
                                                            tensor_span out, thread_pool&, std::span<float>) {
        const const_tensor_span& indices = in[1];
        const std::int64_t count = count_of(indices.shape);
        const auto* bytes = static_cast<const std::byte*>(blocks.raw());
        for (std::int64_t i = 0; i < count; ++i) {
            const float index = indices.data[i];
            if (!(index >= 0.0f && index < static_cast<float>(rows) && std::trunc(index) == index)) {
                throw error(message("gather: index ", index, " (element ", i, " of the indices ",
                                    indices.shape, ") is out of range for axis 0 of the table [", rows, ", ",
                                    row_values, "] (expected a whole number in [0, ", rows, "))"));
            }
        }
        for (std::int64_t i = 0; i < count; ++i) {
            const auto row = static_cast<std::size_t>(indices.data[i]);
            dequantize_ggml(
                type, std::span<const std::byte>(bytes + row * row_bytes, row_bytes),
                std::span<float>(out.data + i * row_values, static_cast<std::size_t>(row_values)));
        }
    };
    return parts;
}

}  // namespace anvil::detail::cpu
