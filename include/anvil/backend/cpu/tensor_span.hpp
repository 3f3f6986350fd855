// anvil: how the CPU backend sees a value — a contiguous, row-major float32 array and its shape (float64 in a
// float64_program, whose reference kernels are the same templates) — and the index arithmetic its kernels
// share (row-major strides, numpy broadcasting strides, a multi-index walk). Integer and boolean values
// (indices, argmax results, masks, quantised weights) are held exactly as floats.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "anvil/core/shape.hpp"

namespace anvil::detail::cpu {

// Element is float for every program, or double where a graph computes in float64 (float64_program).
template <class Element>
struct basic_const_tensor_span {
    const Element* data;
    dims shape;
};

template <class Element>
struct basic_tensor_span {
    Element* data;
    dims shape;

    operator basic_const_tensor_span<Element>() const noexcept { return {data, shape}; }
};

using const_tensor_span = basic_const_tensor_span<float>;
using tensor_span = basic_tensor_span<float>;

// An operand of a kernel templated on its element type: the type is deduced from the output span alone, so
// an operand may be given as a writable span (which converts) or a read-only one.
template <class Element>
using operand_span = std::type_identity_t<basic_const_tensor_span<Element>>;

using index_array = std::array<std::int64_t, max_rank>;
using stride_array = std::array<std::int64_t, max_rank>;

// The element count as a signed extent: kernels index with it next to the shape's own extents.
[[nodiscard]] inline std::int64_t count_of(const dims& shape) {
    return static_cast<std::int64_t>(shape.element_count());
}

// The product of the extents in [first, last): the "outer" and "inner" sizes around an axis. Computed from
// the shape rather than as count / extent so that a zero extent elsewhere never divides by zero.
[[nodiscard]] inline std::int64_t extent_product(const dims& shape, std::size_t first, std::size_t last) {
    std::int64_t product = 1;
    for (std::size_t axis = first; axis < last; ++axis)
        product *= shape[axis];
    return product;
}

[[nodiscard]] inline stride_array row_major_strides(const dims& shape) {
    stride_array strides{};
    std::int64_t stride = 1;
    for (std::size_t axis = shape.rank(); axis-- > 0;) {
        strides[axis] = stride;
        stride *= shape[axis];
    }
    return strides;
}

// Strides that read `from` as if broadcast to `to` (numpy's rule, aligned from the right): an axis `from`
// lacks or holds with extent 1 gets stride 0. The shapes must broadcast; shape inference has checked that.
[[nodiscard]] inline stride_array broadcast_strides(const dims& from, const dims& to) {
    const stride_array own = row_major_strides(from);
    stride_array strides{};
    const std::size_t missing = to.rank() - from.rank();
    for (std::size_t axis = missing; axis < to.rank(); ++axis) {
        const std::size_t source_axis = axis - missing;
        strides[axis] = from[source_axis] == 1 ? 0 : own[source_axis];
    }
    return strides;
}

// Steps a row-major multi-index over `shape`; false once it has wrapped past the last position.
inline bool next_index(index_array& index, const dims& shape) noexcept {
    for (std::size_t axis = shape.rank(); axis-- > 0;) {
        if (++index[axis] < shape[axis]) return true;
        index[axis] = 0;
    }
    return false;
}

[[nodiscard]] inline std::int64_t offset_of(const index_array& index, const stride_array& strides,
                                            std::size_t rank) noexcept {
    std::int64_t offset = 0;
    for (std::size_t axis = 0; axis < rank; ++axis)
        offset += index[axis] * strides[axis];
    return offset;
}

}  // namespace anvil::detail::cpu
