// anvil: weight decompression ops: int8 values with a per-channel scale (and zero point), and u8 indices into
// a lookup table (palettised weights). The result has the scale's (the table's) floating-point type; a
// backend may fuse these into the matmul or conv that reads them, so the weights are never materialised
// whole.
#pragma once

#include <cstdint>
#include <optional>
#include <type_traits>
#include <utility>

#include "anvil/expr/tensor.hpp"

namespace anvil {

namespace detail {

template <class TQ, class TS>
struct int8_values_with_floating_scale
    : std::bool_constant<std::is_same_v<TQ, std::int8_t> && is_floating(dtype_or_f32<TS>())> {};

template <class TI, class TL>
struct u8_indices_with_floating_table
    : std::bool_constant<std::is_same_v<TI, std::uint8_t> && is_floating(dtype_or_f32<TL>())> {};

// A table [L] shared by every index, or [G, L] with one row per group of slices along the indices' axis 0
// (G dividing that extent: G equal to it is a table per slice); 1 <= L <= 256.
template <class Indices, class Lut>
struct lookup_table_fits {
    static constexpr bool value = [] {
        if constexpr (Lut::rank != 1 && Lut::rank != 2) {
            return false;
        } else {
            const std::int64_t length = Lut::extents[Lut::rank - 1];
            const bool length_fits = length == dyn || (length >= 1 && length <= 256);
            if constexpr (Lut::rank == 2) {
                if constexpr (Indices::rank == 0) {
                    return false;
                } else {
                    const std::int64_t groups = Lut::extents[0], slices = Indices::extents[0];
                    const bool divides =
                        groups == dyn || slices == dyn || (groups >= 1 && slices % groups == 0);
                    return length_fits && divides;
                }
            } else {
                return length_fits;
            }
        }
    }();
};

inline value apply_dequantize_int8(const value& q, const value& scale, const std::optional<value>& zero_point,
                                   std::int64_t axis) {
    attributes attrs;
    attrs.axis = axis;
    return apply_with_optional(op::dequantize_int8, {q, scale}, {zero_point}, {"the zero point"},
                               std::move(attrs));
}

}  // namespace detail

// (q - zero_point) * scale, with scale and zero_point [C] along `axis` of q (i8): a tensor of scale's type.
template <class TQ, class SQ, class TS, class SS, optional_operand ZeroPoint>
[[nodiscard]] tensor<TS, SQ> dequantize_int8(const tensor<TQ, SQ>& q, const tensor<TS, SS>& scale,
                                             const ZeroPoint& zero_point, std::int64_t axis = 0) {
    static_assert(
        detail::operand_rule<op::dequantize_int8, detail::int8_values_with_floating_scale, TQ, TS>::holds,
        "anvil::dequantize_int8: the values must be std::int8_t and the scale floating point; "
        "operand_rule<op::dequantize_int8, int8_values_with_floating_scale, values, scale> names both "
        "types");
    return tensor<TS, SQ>(
        detail::apply_dequantize_int8(q.value(), scale.value(), detail::operand_value(zero_point), axis));
}
template <class TQ, class SQ, class TS, class SS>
[[nodiscard]] tensor<TS, SQ> dequantize_int8(const tensor<TQ, SQ>& q, const tensor<TS, SS>& scale,
                                             std::int64_t axis = 0) {
    return dequantize_int8(q, scale, std::nullopt, axis);
}

// lut[index] for u8 indices: lut [L] for every element, or [G, L] per group of C / G consecutive slices
// along the indices' axis 0 (of extent C). A tensor of the table's type with the indices' shape.
template <class TI, class SI, class TL, class SL>
[[nodiscard]] tensor<TL, SI> dequantize_lut(const tensor<TI, SI>& indices, const tensor<TL, SL>& lut) {
    static_assert(
        detail::operand_rule<op::dequantize_lut, detail::u8_indices_with_floating_table, TI, TL>::holds,
        "anvil::dequantize_lut: the indices must be std::uint8_t and the table floating point; "
        "operand_rule<op::dequantize_lut, u8_indices_with_floating_table, indices, table> names both "
        "types");
    if constexpr (detail::all_shapes_v<SI, SL>) {
        static_assert(
            detail::shape_rule<op::dequantize_lut, detail::lookup_table_fits, SI, SL>::holds,
            "anvil::dequantize_lut: the table must be [L] or [G, L] with G dividing the indices' first "
            "extent "
            "and 1 <= L <= 256; shape_rule<op::dequantize_lut, lookup_table_fits, indices, table> names both "
            "shapes");
    }
    return tensor<TL, SI>(detail::apply_op(op::dequantize_lut, {indices.value(), lut.value()}));
}

}  // namespace anvil
