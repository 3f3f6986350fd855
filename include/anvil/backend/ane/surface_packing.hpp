// anvil: moving values between the host and an ANE input or output surface laid out as surface_layout says:
// rows ([1, leading, 1, last], the IR's memory order) or columns ([1, last, 1, leading], channels-first, the
// host transposing while it converts), channel c at c * channel_stride bytes, fp16, the I/O width padding
// past `width` untouched (the program slices it off). A packed input (surface_layout::packed) starts
// first_channel channels into the surface it shares with others.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <vector>

#include "anvil/backend/ane/io_surface.hpp"
#include "anvil/backend/ane/lowering.hpp"
#include "anvil/core/convert.hpp"
#include "anvil/core/half.hpp"

namespace anvil::detail::ane {

// fp32 values into an fp16 surface laid out as the lowering chose: rows ([1, leading, 1, last]) or
// columns ([1, last, 1, leading], the channels-first form, transposed here while converting), channel c at
// c * channel_stride. Each row converts in one vectorised call; a transposed row is gathered first. The
// padding past `width` is left alone: the program slices it off.
inline void pack(const surface_layout& layout, const float* values, std::byte* surface) {
    std::byte* const base = surface + layout.offset();  // a packed input's channels start further in
    const auto channels = static_cast<std::size_t>(layout.channels);
    const auto width = static_cast<std::size_t>(layout.width);
    std::vector<float> gathered(layout.order == surface_order::rows ? 0 : width);
    for (std::size_t c = 0; c < channels; ++c) {
        auto* row = reinterpret_cast<half*>(base + c * layout.channel_stride);
        const float* source = values + c * width;
        if (layout.order == surface_order::columns) {
            for (std::size_t w = 0; w < width; ++w)
                gathered[w] = values[w * channels + c];
            source = gathered.data();
        }
        convert_f32_to_f16(source, width, row);
    }
}

// Runs of `length` elements of the full input starting at `starts` (f32 values in `values`, indexed as
// the input) into a surface packed as pack() packs the whole: in rows order a run converts row by row, in
// columns order element by element (each lands in another row). Nothing else of the surface is touched.
inline void pack_region(const surface_layout& layout, std::span<const std::size_t> starts, std::size_t length,
                        const float* values, std::byte* surface) {
    std::byte* const base = surface + layout.offset();
    const auto channels = static_cast<std::size_t>(layout.channels);
    const auto width = static_cast<std::size_t>(layout.width);
    const std::size_t last = layout.order == surface_order::rows ? width : channels;
    for (const std::size_t start : starts) {
        std::size_t f = start;
        const std::size_t end = f + length;
        if (layout.order == surface_order::rows) {
            while (f < end) {
                const std::size_t c = f / last, w = f % last;
                const std::size_t n = std::min(end - f, last - w);
                convert_f32_to_f16(values + f, n,
                                   reinterpret_cast<half*>(base + c * layout.channel_stride) + w);
                f += n;
            }
        } else {
            for (; f < end; ++f) {
                const std::size_t c = f % last, w = f / last;
                convert_f32_to_f16(values + f, 1,
                                   reinterpret_cast<half*>(base + c * layout.channel_stride) + w);
            }
        }
    }
}

inline void unpack(const surface_layout& layout, const std::byte* surface, float* values) {
    const std::byte* const base = surface + layout.offset();
    const auto channels = static_cast<std::size_t>(layout.channels);
    const auto width = static_cast<std::size_t>(layout.width);
    std::vector<float> row_values(layout.order == surface_order::rows ? 0 : width);
    for (std::size_t c = 0; c < channels; ++c) {
        const void* row = base + c * layout.channel_stride;
        if (layout.order == surface_order::rows) {
            convert_to_f32(dtype::f16, row, width, values + c * width);
            continue;
        }
        convert_to_f32(dtype::f16, row, width, row_values.data());
        for (std::size_t w = 0; w < width; ++w)
            values[w * channels + c] = row_values[w];
    }
}

// Ones in every element of an input surface, padding included: what a program's first evaluation reads (not
// zeros, which would turn log and rsqrt into infinities).
inline void fill_with_ones(const surface_layout& layout, std::byte* surface) {
    std::byte* const base = surface + layout.offset();
    const std::vector<half> ones(static_cast<std::size_t>(layout.surface_width), half(1.0f));
    for (std::int64_t c = 0; c < layout.channels; ++c)
        std::memcpy(base + static_cast<std::size_t>(c) * layout.channel_stride, ones.data(),
                    ones.size() * sizeof(half));
}

inline void fill_with_ones(const surface_layout& layout, const io_surface& surface) {
    auto guard = surface.lock(false);
    fill_with_ones(layout, guard.data());
}

}  // namespace anvil::detail::ane
