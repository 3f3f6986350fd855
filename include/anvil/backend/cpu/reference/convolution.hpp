// anvil: the reference kernels over NCHW images — conv2d (stride, four-sided padding, dilation, groups),
// max and average pooling (ceil_mode and count_include_pad as PyTorch), and resizing to a given size exactly
// as torch.nn.functional.interpolate(size=...) does in modes 'nearest' and 'bilinear'.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>

#include "anvil/backend/cpu/tensor_span.hpp"
#include "anvil/core/error.hpp"
#include "anvil/graph/op.hpp"

namespace anvil::detail::cpu::reference {

// x [N, C, H, W], weight [O, C / groups, KH, KW], bias [O] or none; out [N, O, OH, OW]. attrs: stride,
// dilation, padding (top, bottom, left, right), groups. Padding reads as zeros.
template <class T>
void conv2d(operand_span<T> x, operand_span<T> weight, std::optional<operand_span<T>> bias,
            const attributes& attrs, basic_tensor_span<T> out) {
    const std::int64_t batch = x.shape[0], channels = x.shape[1], height = x.shape[2], width = x.shape[3];
    const std::int64_t outputs = weight.shape[0], group_channels = weight.shape[1];
    const std::int64_t kernel_h = weight.shape[2], kernel_w = weight.shape[3];
    const std::int64_t out_h = out.shape[2], out_w = out.shape[3];
    const std::int64_t outputs_per_group = outputs / attrs.groups;
    for (std::int64_t b = 0; b < batch; ++b) {
        for (std::int64_t o = 0; o < outputs; ++o) {
            const std::int64_t first_channel = (o / outputs_per_group) * group_channels;
            for (std::int64_t oh = 0; oh < out_h; ++oh) {
                for (std::int64_t ow = 0; ow < out_w; ++ow) {
                    double sum = bias ? static_cast<double>(bias->data[o]) : 0.0;
                    for (std::int64_t c = 0; c < group_channels; ++c) {
                        const T* plane = x.data + (b * channels + first_channel + c) * height * width;
                        const T* kernel = weight.data + (o * group_channels + c) * kernel_h * kernel_w;
                        for (std::int64_t kh = 0; kh < kernel_h; ++kh) {
                            const std::int64_t ih =
                                oh * attrs.stride[0] - attrs.padding[0] + kh * attrs.dilation[0];
                            if (ih < 0 || ih >= height) continue;
                            for (std::int64_t kw = 0; kw < kernel_w; ++kw) {
                                const std::int64_t iw =
                                    ow * attrs.stride[1] - attrs.padding[2] + kw * attrs.dilation[1];
                                if (iw < 0 || iw >= width) continue;
                                sum += static_cast<double>(plane[ih * width + iw]) *
                                       static_cast<double>(kernel[kh * kernel_w + kw]);
                            }
                        }
                    }
                    out.data[((b * outputs + o) * out_h + oh) * out_w + ow] = static_cast<T>(sum);
                }
            }
        }
    }
}

// One axis of a pooling window as PyTorch bounds it: [begin, end) clipped to the input, and `padded_size`,
// the window clipped to the padded input only (avg_pool2d's divisor with count_include_pad).
struct pool_window {
    std::int64_t begin;
    std::int64_t end;
    std::int64_t padded_size;
};

[[nodiscard]] inline pool_window window_along(std::int64_t out_index, std::int64_t size, std::int64_t kernel,
                                              std::int64_t stride, std::int64_t pad_before,
                                              std::int64_t pad_after) {
    const std::int64_t start = out_index * stride - pad_before;
    const std::int64_t stop = std::min(start + kernel, size + pad_after);
    return {std::max<std::int64_t>(start, 0), std::min(stop, size), stop - start};
}

// Calls reduce(plane, width, rows, columns) -> T for every output position of every N, C plane.
template <class T, class Reduce>
void pool2d(basic_const_tensor_span<T> x, const attributes& attrs, basic_tensor_span<T> out, Reduce reduce) {
    const std::int64_t planes = x.shape[0] * x.shape[1], height = x.shape[2], width = x.shape[3];
    const std::int64_t out_h = out.shape[2], out_w = out.shape[3];
    for (std::int64_t p = 0; p < planes; ++p) {
        const T* plane = x.data + p * height * width;
        for (std::int64_t oh = 0; oh < out_h; ++oh) {
            const pool_window rows = window_along(oh, height, attrs.kernel[0], attrs.stride[0],
                                                  attrs.padding[0], attrs.padding[1]);
            for (std::int64_t ow = 0; ow < out_w; ++ow) {
                const pool_window columns = window_along(ow, width, attrs.kernel[1], attrs.stride[1],
                                                         attrs.padding[2], attrs.padding[3]);
                out.data[(p * out_h + oh) * out_w + ow] = reduce(plane, width, rows, columns);
            }
        }
    }
}

// attrs: kernel, stride, padding, ceil_mode (through out's shape). Padding never wins; NaN does, as in
// PyTorch. Shape inference guarantees every window holds an input element.
template <class T>
void max_pool2d(operand_span<T> x, const attributes& attrs, basic_tensor_span<T> out) {
    pool2d<T>(x, attrs, out, [](const T* plane, std::int64_t width, pool_window rows, pool_window columns) {
        T best = -std::numeric_limits<T>::infinity();
        for (std::int64_t h = rows.begin; h < rows.end; ++h) {
            for (std::int64_t w = columns.begin; w < columns.end; ++w) {
                const T v = plane[h * width + w];
                if (v > best || std::isnan(v)) best = v;
                if (std::isnan(best)) return best;
            }
        }
        return best;
    });
}

// The divisor is the window's size inside the padded input with count_include_pad (so a ceil_mode window
// hanging past the padding counts only its padded part), else the number of input elements it covers.
template <class T>
void avg_pool2d(operand_span<T> x, const attributes& attrs, basic_tensor_span<T> out) {
    const bool include_pad = attrs.count_include_pad;
    pool2d<T>(x, attrs, out,
              [include_pad](const T* plane, std::int64_t width, pool_window rows, pool_window columns) {
                  double sum = 0.0;
                  for (std::int64_t h = rows.begin; h < rows.end; ++h) {
                      for (std::int64_t w = columns.begin; w < columns.end; ++w)
                          sum += plane[h * width + w];
                  }
                  const std::int64_t divisor = include_pad
                                                   ? rows.padded_size * columns.padded_size
                                                   : (rows.end - rows.begin) * (columns.end - columns.begin);
                  return static_cast<T>(sum / static_cast<double>(divisor));
              });
}

// PyTorch's nearest source index (UpSample.h, nearest_idx): float arithmetic, floor, clamped to the input.
[[nodiscard]] inline std::int64_t nearest_source(std::int64_t out_index, std::int64_t in_size,
                                                 std::int64_t out_size) {
    if (out_size == in_size) return out_index;
    if (out_size == 2 * in_size) return out_index >> 1;
    const float scale = static_cast<float>(in_size) / static_cast<float>(out_size);
    const auto source = static_cast<std::int64_t>(std::floor(static_cast<float>(out_index) * scale));
    return std::min(source, in_size - 1);
}

// Resizing has no source pixel to read when the input plane is empty (PyTorch refuses it too).
template <class T>
void require_source_pixels(op kind, operand_span<T> x, basic_tensor_span<T> out) {
    if (count_of(out.shape) != 0 && (x.shape[2] == 0 || x.shape[3] == 0)) {
        throw shape_error(
            message(op_name(kind), ": cannot resize the empty input ", x.shape, " to ", out.shape));
    }
}

// x [N, C, H, W] -> out [N, C, OH, OW], mode 'nearest' (not 'nearest-exact').
template <class T>
void upsample_nearest(operand_span<T> x, basic_tensor_span<T> out) {
    require_source_pixels(op::upsample_nearest, x, out);
    const std::int64_t planes = x.shape[0] * x.shape[1], height = x.shape[2], width = x.shape[3];
    const std::int64_t out_h = out.shape[2], out_w = out.shape[3];
    for (std::int64_t p = 0; p < planes; ++p) {
        for (std::int64_t oh = 0; oh < out_h; ++oh) {
            const std::int64_t ih = nearest_source(oh, height, out_h);
            for (std::int64_t ow = 0; ow < out_w; ++ow) {
                const std::int64_t iw = nearest_source(ow, width, out_w);
                out.data[(p * out_h + oh) * out_w + ow] = x.data[(p * height + ih) * width + iw];
            }
        }
    }
}

// The two source indices and their weights for one output index, as PyTorch's linear interpolation
// computes them (area_pixel_compute_source_index and guard_index_and_lambda, in float).
struct linear_taps {
    std::int64_t first;
    std::int64_t second;
    float first_weight;
    float second_weight;
};

[[nodiscard]] inline linear_taps linear_source(std::int64_t out_index, std::int64_t in_size,
                                               std::int64_t out_size, bool align_corners) {
    float source = 0.0f;
    if (align_corners) {
        const float scale =
            out_size > 1 ? static_cast<float>(in_size - 1) / static_cast<float>(out_size - 1) : 0.0f;
        source = scale * static_cast<float>(out_index);
    } else {
        const float scale = static_cast<float>(in_size) / static_cast<float>(out_size);
        source = std::max(scale * (static_cast<float>(out_index) + 0.5f) - 0.5f, 0.0f);
    }
    const std::int64_t first = std::min(static_cast<std::int64_t>(std::floor(source)), in_size - 1);
    const std::int64_t second = first + (first < in_size - 1 ? 1 : 0);
    const float weight = std::clamp(source - static_cast<float>(first), 0.0f, 1.0f);
    return {first, second, 1.0f - weight, weight};
}

// x [N, C, H, W] -> out [N, C, OH, OW], mode 'bilinear' without antialiasing.
template <class T>
void upsample_bilinear(operand_span<T> x, bool align_corners, basic_tensor_span<T> out) {
    require_source_pixels(op::upsample_bilinear, x, out);
    const std::int64_t planes = x.shape[0] * x.shape[1], height = x.shape[2], width = x.shape[3];
    const std::int64_t out_h = out.shape[2], out_w = out.shape[3];
    for (std::int64_t p = 0; p < planes; ++p) {
        const T* plane = x.data + p * height * width;
        for (std::int64_t oh = 0; oh < out_h; ++oh) {
            const linear_taps rows = linear_source(oh, height, out_h, align_corners);
            for (std::int64_t ow = 0; ow < out_w; ++ow) {
                const linear_taps columns = linear_source(ow, width, out_w, align_corners);
                const auto at = [&](std::int64_t h, std::int64_t w) { return plane[h * width + w]; };
                // The weights are PyTorch's, in float; the values are interpolated in T.
                const T top = columns.first_weight * at(rows.first, columns.first) +
                              columns.second_weight * at(rows.first, columns.second);
                const T bottom = columns.first_weight * at(rows.second, columns.first) +
                                 columns.second_weight * at(rows.second, columns.second);
                out.data[(p * out_h + oh) * out_w + ow] =
                    rows.first_weight * top + rows.second_weight * bottom;
            }
        }
    }
}

}  // namespace anvil::detail::cpu::reference
