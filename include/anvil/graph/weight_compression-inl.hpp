// anvil: compress_weights' definitions (see weight_compression.hpp; compilation.hpp says when this file is
// compiled).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "anvil/core/convert.hpp"
#include "anvil/graph/rewrite.hpp"
#include "anvil/graph/shape_inference.hpp"
#include "anvil/graph/weight_compression.hpp"

namespace anvil {

ANVIL_INLINE std::optional<weight_compression> parse_weight_compression(std::string_view text) {
    for (const weight_compression how :
         {weight_compression::none, weight_compression::int8, weight_compression::lut4,
          weight_compression::lut4g32, weight_compression::lut6})
        if (weight_compression_name(how) == text) return how;
    return std::nullopt;
}

ANVIL_INLINE std::string_view weight_compression_name(weight_compression how) noexcept {
    switch (how) {
        case weight_compression::none:
            return "none";
        case weight_compression::int8:
            return "int8";
        case weight_compression::lut4:
            return "lut4";
        case weight_compression::lut4g32:
            return "lut4g32";
        case weight_compression::lut6:
            return "lut6";
    }
    return "none";
}

namespace detail::compression {

// 1-D k-means of `values` into `k` entries, ascending. On the sorted distinct values (with their counts)
// each cluster is a contiguous run, so one Lloyd iteration is k binary searches and k means from prefix
// sums; it stops when no boundary moves, the entries then being exactly their runs' means. A cluster left
// empty restarts at the value farthest from the mean of the cluster with the largest squared error. With at
// most k distinct values each is an entry of its own (no error; the last repeated in unused entries).
ANVIL_INLINE std::vector<float> palette(std::vector<float> values, std::size_t k) {
    std::sort(values.begin(), values.end());
    std::vector<double> distinct;
    std::vector<double> count;
    for (const float v : values) {
        if (distinct.empty() || distinct.back() != static_cast<double>(v)) {
            distinct.push_back(v);
            count.push_back(0.0);
        }
        count.back() += 1.0;
    }
    const std::size_t n = distinct.size();
    std::vector<float> table(k, 0.0f);
    if (n <= k) {
        for (std::size_t j = 0; j < k; ++j)
            table[j] = static_cast<float>(distinct[std::min(j, n - 1)]);
        return table;
    }
    // Prefix sums of counts, values and squares, for any run [lo, hi).
    std::vector<double> weight(n + 1, 0.0), sum(n + 1, 0.0), squares(n + 1, 0.0);
    for (std::size_t i = 0; i < n; ++i) {
        weight[i + 1] = weight[i] + count[i];
        sum[i + 1] = sum[i] + count[i] * distinct[i];
        squares[i + 1] = squares[i] + count[i] * distinct[i] * distinct[i];
    }
    const auto mean = [&](std::size_t lo, std::size_t hi) {
        return (sum[hi] - sum[lo]) / (weight[hi] - weight[lo]);
    };
    const auto error = [&](std::size_t lo, std::size_t hi) {
        if (hi <= lo) return 0.0;
        const double m = sum[hi] - sum[lo];
        return squares[hi] - squares[lo] - m * m / (weight[hi] - weight[lo]);
    };
    // Lloyd's iterations from `centroids` (k distinct values, ascending) to a fixed point; returns its
    // squared error.
    const auto lloyd = [&](std::vector<double>& centroids) {
        std::vector<std::size_t> bounds(k + 1, 0), previous;
        for (int iteration = 0; iteration < 300; ++iteration) {
            // Run j: the distinct values nearer centroid j than its neighbours.
            bounds[0] = 0;
            bounds[k] = n;
            for (std::size_t j = 0; j + 1 < k; ++j) {
                const double boundary = 0.5 * (centroids[j] + centroids[j + 1]);
                bounds[j + 1] = static_cast<std::size_t>(
                    std::upper_bound(distinct.begin(), distinct.end(), boundary) - distinct.begin());
                bounds[j + 1] = std::max(bounds[j + 1], bounds[j]);
            }
            if (bounds == previous) break;
            previous = bounds;
            std::size_t empty = k;
            for (std::size_t j = 0; j < k; ++j) {
                if (bounds[j + 1] > bounds[j]) {
                    centroids[j] = mean(bounds[j], bounds[j + 1]);
                } else if (empty == k) {
                    empty = j;
                }
            }
            if (empty < k) {
                std::size_t worst = 0;
                for (std::size_t j = 1; j < k; ++j)
                    if (error(bounds[j], bounds[j + 1]) > error(bounds[worst], bounds[worst + 1])) worst = j;
                const double centre = mean(bounds[worst], bounds[worst + 1]);
                const double low = distinct[bounds[worst]], high = distinct[bounds[worst + 1] - 1];
                centroids[empty] = centre - low > high - centre ? low : high;
                previous.clear();
            }
            std::sort(centroids.begin(), centroids.end());
        }
        double total = 0.0;
        for (std::size_t j = 0; j < k; ++j)
            total += error(bounds[j], bounds[j + 1]);
        return total;
    };
    // Two starts, the better fixed point kept: evenly spaced levels over [min, max] (Lloyd's iterations never
    // increase the error, so the palette is never worse than uniform quantisation), and evenly spaced
    // quantiles (better where a few outliers stretch the range).
    std::vector<double> levels(k), quantiles;
    for (std::size_t j = 0; j < k; ++j)
        levels[j] = distinct[0] +
                    (distinct[n - 1] - distinct[0]) * static_cast<double>(j) / static_cast<double>(k - 1);
    std::size_t next = 0;
    for (std::size_t j = 0; j < k; ++j) {
        const double target = (static_cast<double>(j) + 0.5) / static_cast<double>(k) * weight[n];
        std::size_t at = static_cast<std::size_t>(std::upper_bound(weight.begin() + 1, weight.end(), target) -
                                                  weight.begin() - 1);
        at = std::min(std::max(at, next), n - (k - j));  // a distinct value left for each later one
        quantiles.push_back(distinct[at]);
        next = at + 1;
    }
    const double uniform_error = lloyd(levels);
    const double quantile_error = lloyd(quantiles);
    const std::vector<double>& centroids = quantile_error < uniform_error ? quantiles : levels;
    for (std::size_t j = 0; j < k; ++j)
        table[j] = static_cast<float>(centroids[j]);
    return table;
}

// The index of the entry of the ascending `table` nearest `v` (the lower on a tie).
ANVIL_INLINE std::uint8_t nearest(const std::vector<float>& table, float v) {
    const auto above = std::lower_bound(table.begin(), table.end(), v);
    if (above == table.begin()) return 0;
    if (above == table.end()) return static_cast<std::uint8_t>(table.size() - 1);
    const auto below = above - 1;
    return static_cast<std::uint8_t>((v - *below <= *above - v ? below : above) - table.begin());
}

// The largest divisor of `channels` that is at most `limit`.
ANVIL_INLINE std::int64_t group_rows(std::int64_t channels, std::int64_t limit) {
    for (std::int64_t rows = std::min(channels, limit); rows > 1; --rows)
        if (channels % rows == 0) return rows;
    return 1;
}

struct compressed_weight {
    host_tensor values;  // i8 or u8, the weight's shape
    host_tensor table;   // the scale [C] or the palette [L] / [G, L], as f32
    op kind = op::dequantize_int8;
};

ANVIL_INLINE compressed_weight compress(const host_tensor& weight, weight_compression how) {
    const dims shape = weight.shape();
    std::vector<float> w(static_cast<std::size_t>(shape.element_count()));
    convert_to_f32(weight.type(), weight.raw(), w.size(), w.data(), conversion_path::portable);
    const auto channels = static_cast<std::size_t>(shape[0]);
    const std::size_t row = w.size() / channels;
    compressed_weight made;
    if (how == weight_compression::int8) {
        std::vector<std::int8_t> q(w.size());
        std::vector<float> scale(channels);
        for (std::size_t c = 0; c < channels; ++c) {
            float largest = 0.0f;
            for (std::size_t i = 0; i < row; ++i)
                largest = std::max(largest, std::fabs(w[c * row + i]));
            scale[c] = largest > 0.0f ? largest / 127.0f : 1.0f;
            for (std::size_t i = 0; i < row; ++i) {
                const float level = std::nearbyint(w[c * row + i] / scale[c]);
                q[c * row + i] = static_cast<std::int8_t>(std::clamp(level, -127.0f, 127.0f));
            }
        }
        made.values = host_tensor::from(q, shape);
        made.table = host_tensor::from(scale, dims{shape[0]});
        return made;
    }
    const std::size_t length = how == weight_compression::lut6 ? 64 : 16;
    const std::size_t rows =
        how == weight_compression::lut4g32 ? static_cast<std::size_t>(group_rows(shape[0], 32)) : channels;
    const std::size_t groups = channels / rows;
    std::vector<std::uint8_t> indices(w.size());
    std::vector<float> tables;
    for (std::size_t g = 0; g < groups; ++g) {
        const auto first = w.begin() + static_cast<std::ptrdiff_t>(g * rows * row);
        const std::vector<float> table =
            palette(std::vector<float>(first, first + static_cast<std::ptrdiff_t>(rows * row)), length);
        for (std::size_t i = g * rows * row; i < (g + 1) * rows * row; ++i)
            indices[i] = nearest(table, w[i]);
        tables.insert(tables.end(), table.begin(), table.end());
    }
    made.kind = op::dequantize_lut;
    made.values = host_tensor::from(indices, shape);
    made.table = how == weight_compression::lut4g32
                     ? host_tensor::from(
                           tables, dims{static_cast<std::int64_t>(groups), static_cast<std::int64_t>(length)})
                     : host_tensor::from(tables, dims{static_cast<std::int64_t>(length)});
    return made;
}

// The scale or palette (f32) in the type the dequantised weight is read as.
ANVIL_INLINE host_tensor table_as(const host_tensor& table, dtype type) {
    if (type == dtype::f32) return table;
    host_tensor converted(type, table.shape());
    const auto values = table.values<float>();
    if (type == dtype::f16) {
        convert_f32_to_f16(values.data(), values.size(), converted.values<half>().data());
    } else {
        convert_f32_to_bf16(values.data(), values.size(), converted.values<bfloat16>().data());
    }
    return converted;
}

ANVIL_INLINE bool is_weight_slot(const node& reader, value_id id) {
    if (reader.kind != op::linear && reader.kind != op::conv2d) return false;
    for (std::size_t slot = 0; slot < reader.inputs.size(); ++slot)
        if (reader.inputs[slot] == id && slot != 1) return false;
    return reader.inputs.size() > 1 && reader.inputs[1] == id;
}

}  // namespace detail::compression

ANVIL_INLINE std::size_t compressed_weight_bytes(std::int64_t rows, std::int64_t columns,
                                                 weight_compression how) {
    const auto elements = static_cast<std::size_t>(rows * columns);
    if (how == weight_compression::none || rows * columns < min_compressed_elements) return 2 * elements;
    const auto channels = static_cast<std::size_t>(rows);
    switch (how) {
        case weight_compression::int8:
            return elements + 2 * channels;
        case weight_compression::lut4:
            return (elements * 4 + 7) / 8 + 16 * 2;
        case weight_compression::lut4g32:
            return (elements * 4 + 7) / 8 +
                   channels / static_cast<std::size_t>(detail::compression::group_rows(rows, 32)) * 16 * 2;
        case weight_compression::lut6:
            return (elements * 6 + 7) / 8 + 64 * 2;
        case weight_compression::none:
            break;
    }
    return 2 * elements;
}

ANVIL_INLINE graph_body compress_weights(const graph_body& body, weight_compression how) {
    using namespace detail::compression;
    if (how == weight_compression::none) return body;
    const std::vector<std::vector<value_id>> users = detail::users_of(body);
    const std::vector<bool> is_output = detail::output_mask(body);
    // What each compressible constant becomes read as: the type its readers see (its own, or its casts').
    std::vector<std::optional<dtype>> compressible(body.nodes.size());
    std::vector<bool> folded_cast(body.nodes.size(), false);
    for (std::size_t id = 0; id < body.nodes.size(); ++id) {
        const node& n = body.nodes[id];
        const auto supported = [](dtype t) { return t == dtype::f32 || t == dtype::f16 || t == dtype::bf16; };
        if (n.kind != op::constant || !supported(n.result.type) || n.result.shape.rank() < 2 ||
            n.result.shape.element_count() < min_compressed_elements || users[id].empty() || is_output[id])
            continue;
        std::optional<dtype> seen;
        bool fits = true;
        for (const value_id reader : users[id]) {
            const node& r = body.nodes[reader];
            dtype type = n.result.type;
            if (r.kind == op::cast && supported(r.result.type) && !is_output[reader] &&
                !users[reader].empty()) {
                type = r.result.type;
                for (const value_id next : users[reader])
                    fits = fits && is_weight_slot(body.nodes[next], reader);
            } else {
                fits = fits && is_weight_slot(r, static_cast<value_id>(id));
            }
            fits = fits && (!seen || *seen == type);
            seen = type;
        }
        if (!fits) continue;
        compressible[id] = seen;
        for (const value_id reader : users[id])
            if (body.nodes[reader].kind == op::cast) folded_cast[reader] = true;
    }

    graph_body result;
    std::vector<value_id> mapped(body.nodes.size(), detail::no_value);
    const auto append = [&](node n) {
        result.nodes.push_back(std::move(n));
        return static_cast<value_id>(result.nodes.size() - 1);
    };
    for (std::size_t id = 0; id < body.nodes.size(); ++id) {
        node n = body.nodes[id];
        if (folded_cast[id]) {  // its constant's dequantisation gives the cast's type already
            mapped[id] = mapped[n.inputs[0]];
            continue;
        }
        for (auto& input : n.inputs)
            input = mapped[input];
        if (!compressible[id]) {
            mapped[id] = append(std::move(n));
            continue;
        }
        compressed_weight made = compress(n.data, how);
        const dtype read_as = *compressible[id];
        made.table = table_as(made.table, read_as);
        node values;
        values.kind = op::constant;
        values.result = {made.values.type(), made.values.shape()};
        values.name = n.name + (made.kind == op::dequantize_int8 ? " (int8)" : " (palette indices)");
        values.data = std::move(made.values);
        node table;
        table.kind = op::constant;
        table.result = {made.table.type(), made.table.shape()};
        table.name = n.name + (made.kind == op::dequantize_int8 ? " (scale)" : " (palette)");
        table.data = std::move(made.table);
        node dequantise;
        dequantise.kind = made.kind;
        dequantise.attrs.axis = 0;
        dequantise.name = n.name;
        dequantise.result = {read_as, n.result.shape};
        dequantise.inputs = {append(std::move(values)), append(std::move(table))};
        mapped[id] = append(std::move(dequantise));
    }
    for (const value_id id : body.outputs)
        result.outputs.push_back(mapped[id]);
    return result;
}

}  // namespace anvil
