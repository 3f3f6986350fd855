// anvil: pooling and resizing of NCHW images: max_pool2d, avg_pool2d, global average and max pooling (lowered
// to reductions over axes 2 and 3), nearest and bilinear upsampling. As with conv2d, options given as a
// template argument (max_pool2d<pool_options{.kernel = 2}>(x)) give a static output shape checked at compile
// time; options given at run time leave the spatial extents dyn.
#pragma once

#include <array>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "anvil/expr/linear_algebra.hpp"
#include "anvil/expr/tensor.hpp"

namespace anvil {

struct pool_options {
    size2d kernel{0, 0};
    size2d stride{0, 0};  // 0: the kernel's extent, as PyTorch's default
    padding2d padding{};  // at most half the kernel on each side
    bool ceil_mode = false;
    bool count_include_pad = true;  // avg_pool2d: padded zeros count in the divisor
};

namespace detail {

template <class X>
struct nchw_input : std::bool_constant<X::rank == 4> {};

template <auto Op, class X>
constexpr void require_nchw() noexcept {
    if constexpr (is_shape_v<X>) {
        static_assert(
            shape_rule<Op, nchw_input, X>::holds,
            "anvil: this op takes an image batch [N, C, H, W] (rank 4); shape_rule<op, nchw_input, x> "
            "names the op and the shape");
    }
}

[[nodiscard]] constexpr std::int64_t pool_stride(std::int64_t stride, std::int64_t kernel) noexcept {
    return stride == 0 ? kernel : stride;
}

template <pool_options Options>
struct pool_with {
    static constexpr bool padding_fits = 2 * Options.padding.top <= Options.kernel.height &&
                                         2 * Options.padding.bottom <= Options.kernel.height &&
                                         2 * Options.padding.left <= Options.kernel.width &&
                                         2 * Options.padding.right <= Options.kernel.width;
    static constexpr std::array<std::int64_t, 2> output_extents(std::int64_t h, std::int64_t w) {
        if (!padding_fits) return {invalid_extent, invalid_extent};
        return {static_window_extent(h, Options.padding.top, Options.padding.bottom, Options.kernel.height,
                                     pool_stride(Options.stride.height, Options.kernel.height), 1,
                                     Options.ceil_mode),
                static_window_extent(w, Options.padding.left, Options.padding.right, Options.kernel.width,
                                     pool_stride(Options.stride.width, Options.kernel.width), 1,
                                     Options.ceil_mode)};
    }
    // A positive kernel and stride, padding at most half the kernel, and the window within the padded image.
    template <class X>
    struct window_fits {
        static constexpr auto extents = output_extents(X::extents[2], X::extents[3]);
        static constexpr bool value = extents[0] != invalid_extent && extents[1] != invalid_extent;
    };
};

template <auto Op, pool_options Options, class X>
constexpr void require_pool_window() noexcept {
    if constexpr (is_shape_v<X>) {
        if constexpr (X::rank == 4) {
            static_assert(
                shape_rule<Op, pool_with<Options>::template window_fits, X>::holds,
                "anvil: the pooling window does not fit: expected a positive kernel and stride, padding "
                "at most half the kernel and a window within the padded image; shape_rule<op, "
                "pool_with<options>::window_fits, x> names the op, the options and the shape");
        }
    }
}

template <op Kind, bool Static, pool_options Options, class X>
struct pool_shape {
    using type = any_shape;
};
template <op Kind, bool Static, pool_options Options, std::int64_t... Extents>
struct pool_shape<Kind, Static, Options, shape<Extents...>> {
    using x = shape<Extents...>;
    static constexpr std::array<std::int64_t, 2> spatial = [] {
        if constexpr (x::rank != 4) {
            return std::array<std::int64_t, 2>{invalid_extent, invalid_extent};
        } else if constexpr (Static) {
            return pool_with<Options>::template window_fits<x>::extents;
        } else {
            return std::array<std::int64_t, 2>{dyn, dyn};
        }
    }();
    static constexpr bool valid = spatial[0] != invalid_extent && spatial[1] != invalid_extent;
    static constexpr std::array<std::int64_t, 4> extents = [] {
        if constexpr (valid) {
            return std::array<std::int64_t, 4>{x::extents[0], x::extents[1], spatial[0], spatial[1]};
        } else {
            return std::array<std::int64_t, 4>{};
        }
    }();
    using type = std::conditional_t<valid, array_to_shape_t<extents>, any_shape>;
};

inline value apply_pool(op kind, const value& x, const pool_options& options) {
    attributes attrs;
    attrs.kernel = {options.kernel.height, options.kernel.width};
    attrs.stride = {pool_stride(options.stride.height, options.kernel.height),
                    pool_stride(options.stride.width, options.kernel.width)};
    attrs.padding = {options.padding.top, options.padding.bottom, options.padding.left,
                     options.padding.right};
    attrs.ceil_mode = options.ceil_mode;
    if (kind == op::avg_pool2d) attrs.count_include_pad = options.count_include_pad;
    return apply_op(kind, {x}, std::move(attrs));
}

// [N, C, H, W] -> [N, C, 1, 1]: the spatial axes reduced, kept as extents of 1.
template <class X>
struct global_pool_shape {
    using type = any_shape;
};
template <std::int64_t... Extents>
struct global_pool_shape<shape<Extents...>> {
    using x = shape<Extents...>;
    static constexpr std::array<std::int64_t, 4> extents = [] {
        if constexpr (x::rank == 4) {
            return std::array<std::int64_t, 4>{x::extents[0], x::extents[1], 1, 1};
        } else {
            return std::array<std::int64_t, 4>{};
        }
    }();
    using type = std::conditional_t<x::rank == 4, array_to_shape_t<extents>, any_shape>;
};

inline value apply_global_pool(op reduction, const value& x) {
    attributes attrs;
    attrs.axes = {2, 3};
    attrs.keep_dims = true;
    return apply_op(reduction, {x}, std::move(attrs));
}

template <class X, std::int64_t Height, std::int64_t Width>
struct upsample_shape {
    using type = any_shape;
};
template <std::int64_t... Extents, std::int64_t Height, std::int64_t Width>
struct upsample_shape<shape<Extents...>, Height, Width> {
    using x = shape<Extents...>;
    static constexpr std::array<std::int64_t, 4> extents = [] {
        if constexpr (x::rank == 4) {
            return std::array<std::int64_t, 4>{x::extents[0], x::extents[1], Height, Width};
        } else {
            return std::array<std::int64_t, 4>{};
        }
    }();
    using type = std::conditional_t<x::rank == 4, array_to_shape_t<extents>, any_shape>;
};

inline value apply_upsample(op kind, const value& x, const size2d& size, bool align_corners) {
    attributes attrs;
    attrs.sizes = {size.height, size.width};
    attrs.align_corners = align_corners;
    return apply_op(kind, {x}, std::move(attrs));
}

}  // namespace detail

// Max over each window of x [N, C, H, W] (PyTorch's MaxPool2d; padding counts as -infinity).
template <pool_options Options, class T, class S>
[[nodiscard]] auto max_pool2d(const tensor<T, S>& x) {
    detail::require_nchw<op::max_pool2d, S>();
    detail::require_pool_window<op::max_pool2d, Options, S>();
    return tensor<T, typename detail::pool_shape<op::max_pool2d, true, Options, S>::type>(
        detail::apply_pool(op::max_pool2d, x.value(), Options));
}
template <class T, class S>
[[nodiscard]] auto max_pool2d(const tensor<T, S>& x, const pool_options& options) {
    detail::require_nchw<op::max_pool2d, S>();
    return tensor<T, typename detail::pool_shape<op::max_pool2d, false, pool_options{}, S>::type>(
        detail::apply_pool(op::max_pool2d, x.value(), options));
}

// Mean over each window (PyTorch's AvgPool2d).
template <pool_options Options, class T, class S>
[[nodiscard]] auto avg_pool2d(const tensor<T, S>& x) {
    detail::require_nchw<op::avg_pool2d, S>();
    detail::require_pool_window<op::avg_pool2d, Options, S>();
    return tensor<T, typename detail::pool_shape<op::avg_pool2d, true, Options, S>::type>(
        detail::apply_pool(op::avg_pool2d, x.value(), Options));
}
template <class T, class S>
[[nodiscard]] auto avg_pool2d(const tensor<T, S>& x, const pool_options& options) {
    detail::require_nchw<op::avg_pool2d, S>();
    return tensor<T, typename detail::pool_shape<op::avg_pool2d, false, pool_options{}, S>::type>(
        detail::apply_pool(op::avg_pool2d, x.value(), options));
}

// [N, C, H, W] -> [N, C, 1, 1]: reduce_mean (reduce_max) over axes 2 and 3, keeping them.
template <class T, class S>
[[nodiscard]] auto global_avg_pool2d(const tensor<T, S>& x) {
    detail::require_nchw<op::reduce_mean, S>();
    return tensor<T, typename detail::global_pool_shape<S>::type>(
        detail::apply_global_pool(op::reduce_mean, x.value()));
}
template <class T, class S>
[[nodiscard]] auto global_max_pool2d(const tensor<T, S>& x) {
    detail::require_nchw<op::reduce_max, S>();
    return tensor<T, typename detail::global_pool_shape<S>::type>(
        detail::apply_global_pool(op::reduce_max, x.value()));
}

// x [N, C, H, W] resized to [N, C, size.height, size.width]: upsample_nearest(x, {64, 64}), or with the size
// as a template argument for a static result: upsample_nearest<size2d{64, 64}>(x).
template <class T, class S>
[[nodiscard]] auto upsample_nearest(const tensor<T, S>& x, const size2d& size) {
    detail::require_nchw<op::upsample_nearest, S>();
    return tensor<T, typename detail::upsample_shape<S, dyn, dyn>::type>(
        detail::apply_upsample(op::upsample_nearest, x.value(), size, false));
}
template <size2d Size, class T, class S>
[[nodiscard]] auto upsample_nearest(const tensor<T, S>& x) {
    detail::require_nchw<op::upsample_nearest, S>();
    return tensor<T, typename detail::upsample_shape<S, Size.height, Size.width>::type>(
        detail::apply_upsample(op::upsample_nearest, x.value(), Size, false));
}
template <class T, class S>
[[nodiscard]] auto upsample_bilinear(const tensor<T, S>& x, const size2d& size, bool align_corners = false) {
    detail::require_nchw<op::upsample_bilinear, S>();
    return tensor<T, typename detail::upsample_shape<S, dyn, dyn>::type>(
        detail::apply_upsample(op::upsample_bilinear, x.value(), size, align_corners));
}
template <size2d Size, class T, class S>
[[nodiscard]] auto upsample_bilinear(const tensor<T, S>& x, bool align_corners = false) {
    detail::require_nchw<op::upsample_bilinear, S>();
    return tensor<T, typename detail::upsample_shape<S, Size.height, Size.width>::type>(
        detail::apply_upsample(op::upsample_bilinear, x.value(), Size, align_corners));
}

}  // namespace anvil
