// anvil: the reference data-movement kernels — reshape, permute, concat, slice, pad, gather, gather_elements
// and gather's transpose, scatter_add. They move values without arithmetic (scatter_add adds the rows that
// meet); slice takes the canonical (clamped, non-negative) bounds shape inference leaves.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "anvil/backend/cpu/tensor_span.hpp"
#include "anvil/core/error.hpp"

namespace anvil::detail::cpu::reference {

// Row-major order is unchanged by a reshape: a copy.
template <class T>
void reshape(operand_span<T> x, basic_tensor_span<T> out) {
    std::copy(x.data, x.data + count_of(x.shape), out.data);
}

// The output's axis i is the input's axes[i].
template <class T>
void permute(operand_span<T> x, std::span<const std::int64_t> axes, basic_tensor_span<T> out) {
    if (count_of(out.shape) == 0) return;
    const stride_array input_strides = row_major_strides(x.shape);
    stride_array strides{};  // input strides in the output's axis order
    for (std::size_t i = 0; i < axes.size(); ++i)
        strides[i] = input_strides[static_cast<std::size_t>(axes[i])];
    index_array index{};
    std::int64_t o = 0;
    do {
        out.data[o++] = x.data[offset_of(index, strides, out.shape.rank())];
    } while (next_index(index, out.shape));
}

template <class T>
void concat(std::span<const basic_const_tensor_span<T>> inputs, std::int64_t axis, basic_tensor_span<T> out) {
    const auto axis_index = static_cast<std::size_t>(axis);
    const std::int64_t outer = extent_product(out.shape, 0, axis_index);
    const std::int64_t inner = extent_product(out.shape, axis_index + 1, out.shape.rank());
    const std::int64_t out_row = out.shape[axis_index] * inner;
    std::int64_t position = 0;  // where the current input starts within an output row
    for (const auto& input : inputs) {
        const std::int64_t row = input.shape[axis_index] * inner;
        for (std::int64_t o = 0; o < outer; ++o) {
            std::copy(input.data + o * row, input.data + (o + 1) * row, out.data + o * out_row + position);
        }
        position += row;
    }
}

// Element idx of the output reads the input at begin + idx * step on every axis.
template <class T>
void slice(operand_span<T> x, std::span<const std::int64_t> begin, std::span<const std::int64_t> step,
           basic_tensor_span<T> out) {
    if (count_of(out.shape) == 0) return;
    const stride_array strides = row_major_strides(x.shape);
    std::int64_t start = 0;
    stride_array steps{};
    for (std::size_t axis = 0; axis < x.shape.rank(); ++axis) {
        start += begin[axis] * strides[axis];
        steps[axis] = step[axis] * strides[axis];
    }
    index_array index{};
    std::int64_t o = 0;
    do {
        out.data[o++] = x.data[start + offset_of(index, steps, out.shape.rank())];
    } while (next_index(index, out.shape));
}

// Constant padding: `before[axis]` and `after[axis]` elements of `value` around x on each axis.
template <class T>
void pad(operand_span<T> x, std::span<const std::int64_t> before, float value, basic_tensor_span<T> out) {
    std::fill(out.data, out.data + count_of(out.shape), value);
    if (count_of(x.shape) == 0) return;
    const stride_array out_strides = row_major_strides(out.shape);
    std::int64_t start = 0;
    for (std::size_t axis = 0; axis < out.shape.rank(); ++axis)
        start += before[axis] * out_strides[axis];
    index_array index{};
    std::int64_t i = 0;
    do {
        out.data[start + offset_of(index, out_strides, x.shape.rank())] = x.data[i++];
    } while (next_index(index, x.shape));
}

// Row indices of gather and scatter_add (whole numbers in [0, extent) of the table's `axis`) checked before
// anything is written: an invalid one throws, naming `op`, the index and where it is. Shared with the fast
// kernels, so both report the same message.
template <class T>
void check_row_indices(std::string_view op, basic_const_tensor_span<T> indices, std::int64_t axis,
                       const dims& table) {
    const std::int64_t extent = table[static_cast<std::size_t>(axis)];
    const std::int64_t count = count_of(indices.shape);
    for (std::int64_t i = 0; i < count; ++i) {
        const T index = indices.data[i];
        if (!(index >= T(0) && index < static_cast<T>(extent) && std::trunc(index) == index)) {
            throw error(message(op, ": index ", index, " (element ", i, " of the indices ", indices.shape,
                                ") is out of range for axis ", axis, " of the table ", table,
                                " (expected a whole number in [0, ", extent, "))"));
        }
    }
}

// The rows of `table` along `axis` that `indices` name: out = table[:axis] + indices.shape + table[axis+1:].
// Indices must be whole numbers in [0, extent); anything else throws, naming the index, the axis and the
// table's shape.
template <class T>
void gather(operand_span<T> table, operand_span<T> indices, std::int64_t axis, basic_tensor_span<T> out) {
    const auto axis_index = static_cast<std::size_t>(axis);
    const std::int64_t outer = extent_product(table.shape, 0, axis_index);
    const std::int64_t extent = table.shape[axis_index];
    const std::int64_t inner = extent_product(table.shape, axis_index + 1, table.shape.rank());
    const std::int64_t count = count_of(indices.shape);
    check_row_indices("gather", indices, axis, table.shape);
    for (std::int64_t o = 0; o < outer; ++o) {
        for (std::int64_t i = 0; i < count; ++i) {
            const auto row = static_cast<std::int64_t>(indices.data[i]);
            const T* source = table.data + (o * extent + row) * inner;
            std::copy(source, source + inner, out.data + (o * count + i) * inner);
        }
    }
}

// The transpose of gather: out (the table's shape) starts at zero and each row of `updates` (laid out as
// gather's result: table[:axis] + indices.shape + table[axis+1:]) is added into the row its index names.
// Rows that meet are summed in the order of the indices, element by element.
template <class T>
void scatter_add(operand_span<T> updates, operand_span<T> indices, std::int64_t axis,
                 basic_tensor_span<T> out) {
    check_row_indices("scatter_add", indices, axis, out.shape);
    const auto axis_index = static_cast<std::size_t>(axis);
    const std::int64_t outer = extent_product(out.shape, 0, axis_index);
    const std::int64_t extent = out.shape[axis_index];
    const std::int64_t inner = extent_product(out.shape, axis_index + 1, out.shape.rank());
    const std::int64_t count = count_of(indices.shape);
    std::fill(out.data, out.data + count_of(out.shape), T(0));
    for (std::int64_t o = 0; o < outer; ++o) {
        for (std::int64_t i = 0; i < count; ++i) {
            const auto row = static_cast<std::int64_t>(indices.data[i]);
            const T* from = updates.data + (o * count + i) * inner;
            T* to = out.data + (o * extent + row) * inner;
            for (std::int64_t j = 0; j < inner; ++j)
                to[j] += from[j];
        }
    }
}

// gather_elements' indices (whole numbers in [-extent, extent) of the data's `axis`; negative ones count
// from the end) checked before anything is written: an invalid one throws, naming it and where it is.
// Shared with the fast kernel, so both report the same message.
template <class T>
void check_gather_elements_indices(basic_const_tensor_span<T> data, basic_const_tensor_span<T> indices,
                                   std::int64_t axis) {
    const std::int64_t extent = data.shape[static_cast<std::size_t>(axis)];
    const std::int64_t count = count_of(indices.shape);
    for (std::int64_t i = 0; i < count; ++i) {
        const T index = indices.data[i];
        if (!(index >= static_cast<T>(-extent) && index < static_cast<T>(extent) &&
              std::trunc(index) == index)) {
            throw error(message("gather_elements: index ", index, " (element ", i, " of the indices ",
                                indices.shape, ") is out of range for axis ", axis, " of the data ",
                                data.shape, " (expected a whole number in [", -extent, ", ", extent, "))"));
        }
    }
}

// out[i][j][k] = data[i][indices[i][j][k]][k] for axis 1 (and so on for the other axes); out has the
// indices' shape.
template <class T>
void gather_elements(operand_span<T> data, operand_span<T> indices, std::int64_t axis,
                     basic_tensor_span<T> out) {
    check_gather_elements_indices(data, indices, axis);
    if (count_of(indices.shape) == 0) return;
    const auto axis_index = static_cast<std::size_t>(axis);
    const std::int64_t extent = data.shape[axis_index];
    const stride_array strides = row_major_strides(data.shape);
    index_array index{};
    std::int64_t o = 0;
    do {
        auto along = static_cast<std::int64_t>(indices.data[o]);
        if (along < 0) along += extent;
        index_array at = index;
        at[axis_index] = along;
        out.data[o++] = data.data[offset_of(at, strides, data.shape.rank())];
    } while (next_index(index, indices.shape));
}

}  // namespace anvil::detail::cpu::reference
