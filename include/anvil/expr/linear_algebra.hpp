// anvil: matmul, linear and conv2d on tensors. With static shapes the result's shape is computed at compile
// time and the operands are checked there (inner extents, in-features, channels, bias length, the window);
// options given as a template argument (matmul<matmul_options{.transpose_b = true}>(a, b),
// conv2d<conv2d_options{.stride = 2}>(x, w)) take part in that, options given at run time leave the
// extents they decide dyn. graph::apply checks everything again on the runtime shapes.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <utility>

#include "anvil/expr/elementwise.hpp"
#include "anvil/expr/tensor.hpp"

namespace anvil {

// Two extents (height, width): `.stride = 2` or `.stride = {2, 1}`.
struct size2d {
    std::int64_t height = 1;
    std::int64_t width = 1;

    constexpr size2d() noexcept = default;
    constexpr size2d(std::int64_t both) noexcept : height(both), width(both) {}
    constexpr size2d(std::int64_t rows, std::int64_t columns) noexcept : height(rows), width(columns) {}
};

// Padding around an image: `.padding = 1`, symmetric `{ph, pw}`, or `{top, bottom, left, right}`.
struct padding2d {
    std::int64_t top = 0;
    std::int64_t bottom = 0;
    std::int64_t left = 0;
    std::int64_t right = 0;

    constexpr padding2d() noexcept = default;
    constexpr padding2d(std::int64_t all) noexcept : top(all), bottom(all), left(all), right(all) {}
    constexpr padding2d(std::int64_t rows, std::int64_t columns) noexcept
        : top(rows), bottom(rows), left(columns), right(columns) {}
    constexpr padding2d(std::int64_t top_rows, std::int64_t bottom_rows, std::int64_t left_columns,
                        std::int64_t right_columns) noexcept
        : top(top_rows), bottom(bottom_rows), left(left_columns), right(right_columns) {}
};

struct matmul_options {
    bool transpose_a = false;
    bool transpose_b = false;
};

struct conv2d_options {
    size2d stride{1, 1};
    padding2d padding{};
    size2d dilation{1, 1};
    std::int64_t groups = 1;
};

namespace detail {

// --- matmul ---

template <class A, class B>
struct matmul_operands_are_matrices : std::bool_constant<(A::rank >= 2 && B::rank >= 2)> {};

template <bool TransposeA, bool TransposeB>
struct matmul_transposed {
    // a [..., M, K] and b [..., K, N] (or the transposed forms): the K extents agree.
    template <class A, class B>
    struct inner_extents_match {
        static constexpr bool value = [] {
            if constexpr (A::rank < 2 || B::rank < 2) {
                return false;
            } else {
                const std::int64_t ka = A::extents[TransposeA ? A::rank - 2 : A::rank - 1];
                const std::int64_t kb = B::extents[TransposeB ? B::rank - 1 : B::rank - 2];
                return extents_agree(ka, kb);
            }
        }();
    };
};

template <bool Static, bool TransposeA, bool TransposeB, class A, class B>
constexpr void require_matmul_operands() noexcept {
    if constexpr (all_shapes_v<A, B>) {
        static_assert(shape_rule<op::matmul, matmul_operands_are_matrices, A, B>::holds,
                      "anvil::matmul: both operands need rank >= 2 (a [..., M, K], b [..., K, N]); "
                      "shape_rule<op::matmul, matmul_operands_are_matrices, a, b> names both shapes");
        if constexpr (matmul_operands_are_matrices<A, B>::value) {
            if constexpr (Static) {
                static_assert(
                    shape_rule<op::matmul,
                               matmul_transposed<TransposeA, TransposeB>::template inner_extents_match, A,
                               B>::holds,
                    "anvil::matmul: the inner extents differ (expected a [..., M, K] and b [..., K, N], each "
                    "transposed if the options say so); shape_rule<op::matmul, "
                    "matmul_transposed<transpose_a, "
                    "transpose_b>::inner_extents_match, a, b> names both shapes");
            }
            require_broadcastable<op::matmul, drop_last_t<A, 2>, drop_last_t<B, 2>>();
        }
    }
}

// [..batch, M, N], the batch axes broadcast. With options known only at run time (Static false), M is known
// where a's last two extents are equal, N likewise.
template <bool Static, bool TransposeA, bool TransposeB, class A, class B>
struct matmul_shape {
    using type = any_shape;
};
template <bool Static, bool TransposeA, bool TransposeB, std::int64_t... ExtentsA, std::int64_t... ExtentsB>
requires(sizeof...(ExtentsA) >= 2 &&
         sizeof...(ExtentsB) >=
             2) struct matmul_shape<Static, TransposeA, TransposeB, shape<ExtentsA...>, shape<ExtentsB...>> {
    using a = shape<ExtentsA...>;
    using b = shape<ExtentsB...>;
    static constexpr std::int64_t either(std::int64_t first, std::int64_t second) {
        return first == second ? first : dyn;
    }
    static constexpr std::int64_t a_rows = a::extents[a::rank - 2], a_columns = a::extents[a::rank - 1];
    static constexpr std::int64_t b_rows = b::extents[b::rank - 2], b_columns = b::extents[b::rank - 1];
    static constexpr std::int64_t m = !Static ? either(a_rows, a_columns) : TransposeA ? a_columns : a_rows;
    static constexpr std::int64_t n = !Static ? either(b_rows, b_columns) : TransposeB ? b_rows : b_columns;
    using batch = broadcast_result_t<drop_last_t<a, 2>, drop_last_t<b, 2>>;
    using type = typename std::conditional_t<is_shape_v<batch>, append_extents<batch, m, n>,
                                             std::type_identity<any_shape>>::type;
};

inline value apply_matmul(const value& a, const value& b, const matmul_options& options) {
    attributes attrs;
    attrs.transpose_a = options.transpose_a;
    attrs.transpose_b = options.transpose_b;
    return apply_op(op::matmul, {a, b}, std::move(attrs));
}

// --- linear ---

// x [..., in] and weight [out, in].
template <class X, class W>
struct in_features_match {
    static constexpr bool value = [] {
        if constexpr (X::rank < 1 || W::rank != 2) {
            return false;
        } else {
            return extents_agree(X::extents[X::rank - 1], W::extents[1]);
        }
    }();
};

// A bias [out] for a weight [out, ...] (linear, conv2d).
template <class W, class B>
struct bias_matches_out_features {
    static constexpr bool value = [] {
        if constexpr (B::rank != 1 || W::rank < 1) {
            return false;
        } else {
            return extents_agree(B::extents[0], W::extents[0]);
        }
    }();
};

// The last extent replaced (Shape has rank >= 1).
template <class Shape, std::int64_t Extent>
struct replace_last {
    using type = append_extents_t<drop_last_t<Shape, 1>, Extent>;
};

template <class X, class W>
constexpr void require_linear_operands() noexcept {
    if constexpr (all_shapes_v<X, W>) {
        static_assert(
            shape_rule<op::linear, in_features_match, X, W>::holds,
            "anvil::linear: expected x [..., in] and weight [out, in] (Hugging Face's nn.Linear layout); "
            "shape_rule<op::linear, in_features_match, x, weight> names both shapes");
    }
}

// x [..., in] -> [..., out]; out is dyn when the weight's shape is known only at run time.
template <class X, class W>
struct linear_shape {
    using type = any_shape;
};
template <std::int64_t... ExtentsX, class W>
requires(sizeof...(ExtentsX) >= 1) struct linear_shape<shape<ExtentsX...>, W> {
    using x = shape<ExtentsX...>;
    static constexpr bool fits = [] {
        if constexpr (is_shape_v<W>) {
            return in_features_match<x, W>::value;
        } else {
            return true;
        }
    }();
    static constexpr std::int64_t out = [] {
        if constexpr (is_shape_v<W>) {
            if constexpr (W::rank >= 1) return W::extents[0];
        }
        return dyn;
    }();
    using type = typename std::conditional_t<fits, replace_last<x, out>, std::type_identity<any_shape>>::type;
};

template <auto Op, class W, class Bias>
constexpr void require_bias_fits() noexcept {
    if constexpr (all_shapes_v<W, operand_shape_t<Bias>>) {
        static_assert(
            shape_rule<Op, bias_matches_out_features, W, operand_shape_t<Bias>>::holds,
            "anvil: the bias must be a vector with one element per output feature (weight [out, ...], "
            "bias [out]); shape_rule<op, bias_matches_out_features, weight, bias> names both shapes");
    }
}

// --- conv2d ---

// x [N, C, H, W] and weight [out, C / groups, kh, kw], groups unknown until run time: C divides by the
// weight's.
template <class X, class W>
struct conv2d_operands_fit {
    static constexpr bool value = [] {
        if constexpr (X::rank != 4 || W::rank != 4) {
            return false;
        } else {
            const std::int64_t channels = X::extents[1], per_group = W::extents[1];
            return channels == dyn || per_group == dyn || (per_group > 0 && channels % per_group == 0);
        }
    }();
};

template <std::int64_t Groups>
struct conv2d_groups {
    // x [N, C, H, W], weight [out, C / groups, kh, kw] with out divisible by groups.
    template <class X, class W>
    struct operands_fit {
        static constexpr bool value = [] {
            if constexpr (X::rank != 4 || W::rank != 4 || Groups <= 0) {
                return false;
            } else {
                const std::int64_t channels = X::extents[1], per_group = W::extents[1], out = W::extents[0];
                return (channels == dyn || per_group == dyn || channels == per_group * Groups) &&
                       (out == dyn || out % Groups == 0);
            }
        }();
    };
};

template <conv2d_options Options>
struct conv2d_with {
    static constexpr std::array<std::int64_t, 2> output_extents(std::int64_t h, std::int64_t w,
                                                                std::int64_t kh, std::int64_t kw) {
        if (kh == dyn || kw == dyn) return {dyn, dyn};
        return {static_window_extent(h, Options.padding.top, Options.padding.bottom, kh,
                                     Options.stride.height, Options.dilation.height, false),
                static_window_extent(w, Options.padding.left, Options.padding.right, kw, Options.stride.width,
                                     Options.dilation.width, false)};
    }
    // The dilated kernel fits the padded image, and stride and dilation are positive, padding >= 0.
    template <class X, class W>
    struct window_fits {
        static constexpr auto extents =
            output_extents(X::extents[2], X::extents[3], W::extents[2], W::extents[3]);
        static constexpr bool value = extents[0] != invalid_extent && extents[1] != invalid_extent;
    };
};

template <bool Static, conv2d_options Options, class X, class W>
constexpr void require_conv2d_operands() noexcept {
    if constexpr (all_shapes_v<X, W>) {
        if constexpr (Static) {
            static_assert(
                shape_rule<op::conv2d, conv2d_groups<Options.groups>::template operands_fit, X, W>::holds,
                "anvil::conv2d: expected x [N, C, H, W] and weight [out, C / groups, kh, kw] with out "
                "divisible by groups; shape_rule<op::conv2d, conv2d_groups<groups>::operands_fit, x, "
                "weight> names both shapes");
            if constexpr (conv2d_groups<Options.groups>::template operands_fit<X, W>::value) {
                static_assert(
                    shape_rule<op::conv2d, conv2d_with<Options>::template window_fits, X, W>::holds,
                    "anvil::conv2d: the (dilated) kernel does not fit the padded image, or stride or "
                    "dilation is not positive, or padding is negative; shape_rule<op::conv2d, "
                    "conv2d_with<options>::window_fits, x, weight> names the options and both shapes");
            }
        } else {
            static_assert(
                shape_rule<op::conv2d, conv2d_operands_fit, X, W>::holds,
                "anvil::conv2d: expected x [N, C, H, W] and weight [out, C / groups, kh, kw] (C a "
                "multiple of the weight's second extent); shape_rule<op::conv2d, conv2d_operands_fit, x, "
                "weight> names both shapes");
        }
    }
}

// [N, out, H', W']; H' and W' are dyn when the options are known only at run time.
template <bool Static, conv2d_options Options, class X, class W>
struct conv2d_shape {
    using type = any_shape;
};
template <bool Static, conv2d_options Options, std::int64_t... ExtentsX, std::int64_t... ExtentsW>
struct conv2d_shape<Static, Options, shape<ExtentsX...>, shape<ExtentsW...>> {
    using x = shape<ExtentsX...>;
    using w = shape<ExtentsW...>;
    static constexpr bool fits = [] {
        if constexpr (Static) {
            return conv2d_groups<Options.groups>::template operands_fit<x, w>::value;
        } else {
            return conv2d_operands_fit<x, w>::value;
        }
    }();
    static constexpr std::array<std::int64_t, 2> spatial = [] {
        if constexpr (Static && fits) {
            return conv2d_with<Options>::template window_fits<x, w>::extents;
        } else {
            return std::array<std::int64_t, 2>{dyn, dyn};
        }
    }();
    static constexpr bool valid = fits && spatial[0] != invalid_extent && spatial[1] != invalid_extent;
    static constexpr std::array<std::int64_t, 4> extents = [] {
        if constexpr (valid) {
            return std::array<std::int64_t, 4>{x::extents[0], w::extents[0], spatial[0], spatial[1]};
        } else {
            return std::array<std::int64_t, 4>{};
        }
    }();
    using type = std::conditional_t<valid, array_to_shape_t<extents>, any_shape>;
};

inline value apply_conv2d(const value& x, const value& weight, const std::optional<value>& bias,
                          const conv2d_options& options) {
    attributes attrs;
    attrs.stride = {options.stride.height, options.stride.width};
    attrs.dilation = {options.dilation.height, options.dilation.width};
    attrs.padding = {options.padding.top, options.padding.bottom, options.padding.left,
                     options.padding.right};
    attrs.groups = options.groups;
    return apply_with_optional(op::conv2d, {x, weight}, {bias}, {"the bias"}, std::move(attrs));
}

}  // namespace detail

// a [..., M, K] x b [..., K, N] -> [..., M, N], the batch axes broadcast. Options as a template argument
// (matmul<matmul_options{.transpose_b = true}>(q, k)) are checked at compile time.
template <matmul_options Options = matmul_options{}, class TA, class SA, class TB, class SB>
[[nodiscard]] auto matmul(const tensor<TA, SA>& a, const tensor<TB, SB>& b) {
    detail::require_same_element_type<op::matmul, TA, TB>();
    detail::require_matmul_operands<true, Options.transpose_a, Options.transpose_b, SA, SB>();
    using result =
        typename detail::matmul_shape<true, Options.transpose_a, Options.transpose_b, SA, SB>::type;
    return tensor<TA, result>(detail::apply_matmul(a.value(), b.value(), Options));
}
// The same with options known at run time: matmul(q, k, {.transpose_b = true}). M and N are static only
// where they do not depend on the options.
template <class TA, class SA, class TB, class SB>
[[nodiscard]] auto matmul(const tensor<TA, SA>& a, const tensor<TB, SB>& b, const matmul_options& options) {
    detail::require_same_element_type<op::matmul, TA, TB>();
    detail::require_matmul_operands<false, false, false, SA, SB>();
    using result = typename detail::matmul_shape<false, false, false, SA, SB>::type;
    return tensor<TA, result>(detail::apply_matmul(a.value(), b.value(), options));
}

// x [..., in] * weight [out, in]^T (+ bias [out]) -> [..., out]. The weight may have another element type
// (f16, bf16 weights with f32 activations); the result has x's.
template <class TX, class SX, class TW, class SW, optional_operand Bias = std::nullopt_t>
[[nodiscard]] auto linear(const tensor<TX, SX>& x, const tensor<TW, SW>& weight,
                          const Bias& bias = std::nullopt) {
    detail::require_linear_operands<SX, SW>();
    detail::require_bias_fits<op::linear, SW, Bias>();
    using result = typename detail::linear_shape<SX, SW>::type;
    return tensor<TX, result>(detail::apply_with_optional(op::linear, {x.value(), weight.value()},
                                                          {detail::operand_value(bias)}, {"the bias"}));
}

// x [N, C, H, W], weight [out, C / groups, kh, kw], optional bias [out] -> [N, out, H', W'] (PyTorch's
// Conv2d). With the options as a template argument (default: stride 1, no padding) H' and W' are computed
// and checked at compile time.
template <conv2d_options Options = conv2d_options{}, class TX, class SX, class TW, class SW,
          optional_operand Bias = std::nullopt_t>
[[nodiscard]] auto conv2d(const tensor<TX, SX>& x, const tensor<TW, SW>& weight,
                          const Bias& bias = std::nullopt) {
    detail::require_conv2d_operands<true, Options, SX, SW>();
    detail::require_bias_fits<op::conv2d, SW, Bias>();
    using result = typename detail::conv2d_shape<true, Options, SX, SW>::type;
    return tensor<TX, result>(
        detail::apply_conv2d(x.value(), weight.value(), detail::operand_value(bias), Options));
}
// Options known at run time: conv2d(x, w, bias, {.stride = 2, .padding = 1}); H' and W' are dyn.
template <class TX, class SX, class TW, class SW, optional_operand Bias>
[[nodiscard]] auto conv2d(const tensor<TX, SX>& x, const tensor<TW, SW>& weight, const Bias& bias,
                          const conv2d_options& options) {
    detail::require_conv2d_operands<false, conv2d_options{}, SX, SW>();
    detail::require_bias_fits<op::conv2d, SW, Bias>();
    using result = typename detail::conv2d_shape<false, conv2d_options{}, SX, SW>::type;
    return tensor<TX, result>(
        detail::apply_conv2d(x.value(), weight.value(), detail::operand_value(bias), options));
}
template <class TX, class SX, class TW, class SW>
[[nodiscard]] auto conv2d(const tensor<TX, SX>& x, const tensor<TW, SW>& weight,
                          const conv2d_options& options) {
    return conv2d(x, weight, std::nullopt, options);
}

}  // namespace anvil
