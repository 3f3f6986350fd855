// anvil: the transformer blocks the IR has as single ops: scaled dot-product attention (multi-head, grouped
// query heads, optional additive mask, causal) and rotary position embedding. With static shapes the operands
// are checked at compile time (q/k/v compatibility, the mask, the cos/sin tables).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <utility>

#include "anvil/expr/elementwise.hpp"
#include "anvil/expr/normalization.hpp"
#include "anvil/expr/tensor.hpp"

namespace anvil {

struct attention_options {
    bool causal = false;  // query i sees keys 0 .. i + (Sk - Sq) only
    double scale = 0.0;   // 0: 1 / sqrt(D)
};

enum class rotary_form : std::uint8_t {
    rotate_half,  // pairs (i, i + R/2): Llama, GPT-NeoX
    interleaved,  // pairs (2i, 2i + 1): GPT-J, the original RoFormer
};

namespace detail {

// q [B, H, Sq, D], k [B, Hkv, Sk, D], v [B, Hkv, Sk, Dv], H a multiple of Hkv.
template <class Q, class K, class V>
struct attention_operands_fit {
    static constexpr bool value = [] {
        if constexpr (Q::rank != 4 || K::rank != 4 || V::rank != 4) {
            return false;
        } else {
            const auto& q = Q::extents;
            const auto& k = K::extents;
            const auto& v = V::extents;
            const bool heads_divide = q[1] == dyn || k[1] == dyn || (k[1] != 0 && q[1] % k[1] == 0);
            return extents_agree(q[0], k[0]) && extents_agree(q[0], v[0]) && extents_agree(k[1], v[1]) &&
                   extents_agree(k[2], v[2]) && extents_agree(q[3], k[3]) && heads_divide;
        }
    }();
};

template <class Q, class K, class V>
struct attention_shapes {
    using type = any_shape;
    using scores = any_shape;
};
template <std::int64_t... Q, std::int64_t... K, std::int64_t... V>
struct attention_shapes<shape<Q...>, shape<K...>, shape<V...>> {
    static constexpr bool valid = attention_operands_fit<shape<Q...>, shape<K...>, shape<V...>>::value;
    static constexpr std::array<std::int64_t, 4> output = [] {
        if constexpr (valid) {
            constexpr std::array<std::int64_t, 4> q{Q...}, v{V...};
            return std::array<std::int64_t, 4>{q[0], q[1], q[2], v[3]};
        } else {
            return std::array<std::int64_t, 4>{};
        }
    }();
    static constexpr std::array<std::int64_t, 4> score_extents = [] {
        if constexpr (valid) {
            constexpr std::array<std::int64_t, 4> q{Q...}, k{K...};
            return std::array<std::int64_t, 4>{q[0], q[1], q[2], k[2]};
        } else {
            return std::array<std::int64_t, 4>{};
        }
    }();
    using type = std::conditional_t<valid, array_to_shape_t<output>, any_shape>;
    using scores = std::conditional_t<valid, array_to_shape_t<score_extents>, any_shape>;
};

// x [..., S, D], cos and sin [S, R / 2] with R <= D (R: the rotated features).
template <class X, class Cos, class Sin>
struct rotary_tables_fit {
    static constexpr bool value = [] {
        if constexpr (X::rank < 2 || Cos::rank != 2 || Sin::rank != 2) {
            return false;
        } else {
            const std::int64_t s = X::extents[X::rank - 2], d = X::extents[X::rank - 1];
            const std::int64_t half = Cos::extents[1];
            const bool fits_d = half == dyn || d == dyn || 2 * half <= d;
            return static_compatible<Cos, Sin>() && extents_agree(Cos::extents[0], s) && fits_d;
        }
    }();
};

inline value apply_attention(const value& q, const value& k, const value& v, const std::optional<value>& mask,
                             const attention_options& options) {
    attributes attrs;
    attrs.causal = options.causal;
    attrs.scale = static_cast<float>(options.scale);
    return apply_with_optional(op::attention, {q, k, v}, {mask}, {"the mask"}, std::move(attrs));
}

inline value apply_rotary(const value& x, const value& cos, const value& sin, rotary_form form) {
    attributes attrs;
    attrs.interleaved = form == rotary_form::interleaved;
    return apply_op(op::rotary, {x, cos, sin}, std::move(attrs));
}

}  // namespace detail

// softmax(q k^T * scale + mask) v per head: q [B, H, Sq, D], k [B, Hkv, Sk, D], v [B, Hkv, Sk, Dv] ->
// [B, H, Sq, Dv]; query head h reads key/value head h / (H / Hkv) (grouped-query attention). The optional
// additive mask broadcasts to the scores [B, H, Sq, Sk].
template <class TQ, class SQ, class TK, class SK, class TV, class SV, optional_operand Mask = std::nullopt_t>
[[nodiscard]] auto attention(const tensor<TQ, SQ>& q, const tensor<TK, SK>& k, const tensor<TV, SV>& v,
                             const Mask& mask = std::nullopt, const attention_options& options = {}) {
    detail::require_same_element_type<op::attention, TQ, TK>();
    detail::require_same_element_type<op::attention, TQ, TV>();
    if constexpr (detail::all_shapes_v<SQ, SK, SV>) {
        static_assert(
            detail::shape_rule<op::attention, detail::attention_operands_fit, SQ, SK, SV>::holds,
            "anvil::attention: expected q [B, H, Sq, D], k [B, Hkv, Sk, D], v [B, Hkv, Sk, Dv] with H a "
            "multiple of Hkv; shape_rule<op::attention, attention_operands_fit, q, k, v> names the shapes");
    }
    using shapes = detail::attention_shapes<SQ, SK, SV>;
    detail::require_mask_broadcasts<op::attention, detail::operand_shape_t<Mask>, typename shapes::scores>();
    return tensor<TQ, typename shapes::type>(
        detail::apply_attention(q.value(), k.value(), v.value(), detail::operand_value(mask), options));
}
template <class TQ, class SQ, class TK, class SK, class TV, class SV>
[[nodiscard]] auto attention(const tensor<TQ, SQ>& q, const tensor<TK, SK>& k, const tensor<TV, SV>& v,
                             const attention_options& options) {
    return attention(q, k, v, std::nullopt, options);
}

// Rotary position embedding of x [..., S, D] with cos, sin [S, R / 2]: the first R features rotate in pairs
// (`form` says which features pair up); the rest pass through.
template <class T, class S, class TC, class SC, class TS, class SS>
[[nodiscard]] tensor<T, S> rotary(const tensor<T, S>& x, const tensor<TC, SC>& cos, const tensor<TS, SS>& sin,
                                  rotary_form form = rotary_form::rotate_half) {
    if constexpr (detail::all_shapes_v<S, SC, SS>) {
        static_assert(detail::shape_rule<op::rotary, detail::rotary_tables_fit, S, SC, SS>::holds,
                      "anvil::rotary: expected x [..., S, D] and cos, sin both [S, R / 2] with R <= D; "
                      "shape_rule<op::rotary, rotary_tables_fit, x, cos, sin> names the shapes");
    }
    return tensor<T, S>(detail::apply_rotary(x.value(), cos.value(), sin.value(), form));
}

}  // namespace anvil
