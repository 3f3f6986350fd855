// anvil: lowering of the structured graph ops (linear, convolution, pooling, resizing, norms, softmax,
// reductions, data movement, attention, rotary) to MIL, following MIL.md Part 2 and RUNTIME.md §4/§6: linear
// as a 1x1 conv on [1, K, 1, S] with the bias as a separate add, norms over the channel axis, every op
// parameter a named const, finite masks, attention decomposed (SDPA masks are ignored on the ANE).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "anvil/backend/ane/lowering_context.hpp"
#include "anvil/backend/ane/lowering_elementwise.hpp"

namespace anvil::detail::ane {

// A norm's epsilon as the fp16 scalar MIL gets: BERT's 1e-12 rounds to 0 in fp16, and a row with no spread
// would then divide by zero. Below fp16's smallest subnormal (2^-24) it becomes that value instead, which
// changes no row with any spread.
[[nodiscard]] inline float fp16_epsilon(float epsilon) noexcept {
    return epsilon > 0.0f ? std::max(epsilon, 0x1p-24f) : epsilon;
}

namespace lowering_detail {

inline std::vector<mil_argument> conv_parameters(segment_lowering& L, const std::string& name,
                                                 const std::vector<std::int64_t>& strides,
                                                 const std::vector<std::int64_t>& pad,
                                                 const std::vector<std::int64_t>& dilations,
                                                 std::int64_t groups, std::string_view pad_type) {
    mil_writer& mil = L.mil();
    return {{"dilations", {mil.const_ints(name + "_dilations", dilations)}},
            {"groups", {mil.const_int(name + "_groups", groups)}},
            {"pad", {mil.const_ints(name + "_pad", pad)}},
            {"pad_type", {mil.const_string(name + "_pad_type", pad_type)}},
            {"strides", {mil.const_ints(name + "_strides", strides)}}};
}

inline mil_ref per_channel(segment_lowering& L, std::span<const float> values, const dims& result,
                           const std::string& name) {
    // Values along axis 1 of an [N, C, ...] result: shaped [C, 1, ...] so that they broadcast to that axis.
    std::vector<std::int64_t> shape(result.rank() - 1, 1);
    shape[0] = static_cast<std::int64_t>(values.size());
    return L.broadcast_constant(values, dims(shape), result, value_layout::logical, name);
}

inline mil_ref softmax(segment_lowering& L, mil_ref x, std::size_t axis, const std::string& name) {
    mil_writer& mil = L.mil();
    const mil_shape& shape = mil.shape(x);
    if (shape[axis] <= L.options().softmax_max_axis && L.options().native(lowering_feature::softmax)) {
        return mil.op(
            "softmax", name, shape,
            {{"axis", {mil.const_int(name + "_axis", static_cast<std::int64_t>(axis))}}, {"x", {x}}});
    }
    // The ANE normalises long softmax axes per tile (RUNTIME.md §6), and the chip may refuse softmax: spell
    // it out.
    mil_shape reduced = shape;
    reduced[axis] = 1;
    const std::vector<std::int64_t> axes{static_cast<std::int64_t>(axis)};
    const auto reduce = [&](std::string_view type, mil_ref input, const std::string& out) {
        return mil.op(type, out, reduced,
                      {{"axes", {mil.const_ints(out + "_axes", axes)}},
                       {"keep_dims", {mil.const_bool(out + "_keep_dims", true)}},
                       {"x", {input}}});
    };
    const mil_ref largest = reduce("reduce_max", x, name + "_max");
    const mil_ref shifted = L.binary("sub", x, largest, name + "_shifted");
    const mil_ref exponent = exponential(L, shifted, name + "_exp");
    const mil_ref total = reduce("reduce_sum", exponent, name + "_sum");
    return L.binary("real_div", exponent, total, name);
}

// The largest intermediate a product without matmul builds: its broadcast mul holds every term of the sum
// ([..., M, K, N]), 288 MB per head for Whisper's encoder (1500 x 64 x 1500 fp16; RUNTIME.md §0b), far past
// what the ANE's ~32 MB of SRAM holds (§6). Past this the rows of `a` are taken a tile at a time.
inline constexpr std::int64_t max_product_terms_bytes = std::int64_t{4} << 20;

// How many rows of a [batch..., M, K] x [batch..., K, N] product to take at once so that the tile's terms
// stay under max_product_terms_bytes (at least one row).
inline std::int64_t product_tile_rows(const mil_shape& batch, std::int64_t m, std::int64_t k,
                                      std::int64_t n) {
    std::int64_t row_bytes = 2 * k * n;
    for (const std::int64_t extent : batch)
        row_bytes *= extent;
    return std::clamp<std::int64_t>(max_product_terms_bytes / std::max<std::int64_t>(row_bytes, 1), 1, m);
}

// `part(x, name)` when `tile` covers x's extent along `axis`; else `part` of each slice of `tile` along it,
// the results concatenated along it again (named `name`).
template <class Part>
mil_ref in_tiles(segment_lowering& L, mil_ref x, std::size_t axis, std::int64_t tile, const std::string& name,
                 Part&& part) {
    const std::int64_t extent = L.mil().shape(x)[axis];
    if (tile >= extent) return part(x, name);
    std::vector<mil_ref> tiles;
    for (std::int64_t first = 0; first < extent; first += tile) {
        const std::string tile_name = message(name, "_from", first);
        tiles.push_back(
            part(L.slice_axis(x, axis, first, std::min(extent, first + tile), tile_name), tile_name));
    }
    return L.concat(tiles, axis, name);
}

// a @ b as a broadcast mul and a reduce_sum, for chips without matmul (RUNTIME.md §0 #4): [..., M, K] and
// [..., K, N] gain an axis, [..., M, K, 1] * [..., 1, K, N] sums over K; with b transposed ([..., N, K]),
// [..., M, 1, K] * [..., 1, N, K] sums over the last axis. Batch axes broadcast as matmul's do.
inline mil_ref product_by_reduction(segment_lowering& L, mil_ref a, mil_ref b, bool transpose_a,
                                    bool transpose_b, const std::string& name) {
    mil_writer& mil = L.mil();
    if (transpose_a) {
        const std::size_t rank = mil.shape(a).size();
        std::vector<std::int64_t> perm(rank);
        for (std::size_t i = 0; i < rank; ++i)
            perm[i] = static_cast<std::int64_t>(i);
        std::swap(perm[rank - 1], perm[rank - 2]);
        a = L.transpose(a, perm, name + "_at");
    }
    const mil_shape x = mil.shape(a);
    const mil_shape y = mil.shape(b);
    const std::int64_t m = x[x.size() - 2], k = x[x.size() - 1];
    const std::int64_t n = transpose_b ? y[y.size() - 2] : y[y.size() - 1];
    mil_shape a_shape(x.begin(), x.end() - 2), b_shape(y.begin(), y.end() - 2);
    const mil_shape batch = broadcast_mil(a_shape, b_shape);
    if (transpose_b) {
        a_shape.insert(a_shape.end(), {m, 1, k});
        b_shape.insert(b_shape.end(), {1, n, k});
    } else {
        a_shape.insert(a_shape.end(), {m, k, 1});
        b_shape.insert(b_shape.end(), {1, k, n});
    }
    const mil_ref a_wide = L.reshape(a, a_shape, name + "_a", true);
    const mil_ref b_wide = L.reshape(b, b_shape, name + "_b", true);
    // The products of `rows` rows of a at once: [..., rows, K, N] (or [..., rows, N, K]), summed over K.
    const std::size_t row_axis = a_shape.size() - 3;
    const std::size_t axis = transpose_b ? a_shape.size() - 1 : a_shape.size() - 2;
    const auto product_rows = [&](mil_ref rows, const std::string& part) {
        const mil_ref products = L.binary("mul", rows, b_wide, part + "_products");
        mil_shape summed = mil.shape(products);
        summed[axis] = 1;
        return mil.op(
            "reduce_sum", part, summed,
            {{"axes",
              {mil.const_ints(part + "_axes", std::vector<std::int64_t>{static_cast<std::int64_t>(axis)})}},
             {"keep_dims", {mil.const_bool(part + "_keep_dims", true)}},
             {"x", {products}}});
    };
    const mil_ref sums =
        in_tiles(L, a_wide, row_axis, product_tile_rows(batch, m, k, n), name + "_sums", product_rows);
    mil_shape out = batch;
    out.insert(out.end(), {m, n});
    return L.reshape(sums, out, name, true);
}

inline mil_ref matmul(segment_lowering& L, mil_ref a, mil_ref b, bool transpose_a, bool transpose_b,
                      const std::string& name) {
    mil_writer& mil = L.mil();
    if (!L.options().native(lowering_feature::matmul))
        return product_by_reduction(L, a, b, transpose_a, transpose_b, name);
    const mil_shape& x = mil.shape(a);
    const mil_shape& y = mil.shape(b);
    mil_shape out = broadcast_mil(mil_shape(x.begin(), x.end() - 2), mil_shape(y.begin(), y.end() - 2));
    out.push_back(transpose_a ? x[x.size() - 1] : x[x.size() - 2]);
    out.push_back(transpose_b ? y[y.size() - 2] : y[y.size() - 1]);
    return mil.op("matmul", name, out,
                  {{"transpose_x", {mil.const_bool(name + "_transpose_x", transpose_a)}},
                   {"transpose_y", {mil.const_bool(name + "_transpose_y", transpose_b)}},
                   {"x", {a}},
                   {"y", {b}}});
}

// x [1, C, 1, W] and y [1, W, 1, U] to [1, C, 1, U], out[c, u] = sum over w of x[c, w] * y[w, u]: MIL's one
// einsum form, 'nchw,nwhu->nchu' (MIL.md §2.3), the product split-einsum attention is made of. Where the chip
// has no product of two computed tensors (RUNTIME.md §0 #4), a broadcast mul over [1, C, W, U] and a
// reduce_sum of its W axis, in the same layout.
inline mil_ref channel_product(segment_lowering& L, mil_ref x, mil_ref y, const std::string& name) {
    mil_writer& mil = L.mil();
    const mil_shape a = mil.shape(x);
    const mil_shape b = mil.shape(y);
    const std::int64_t channels = a[1], inner = a[3], width = b[3];
    const mil_shape out{1, channels, 1, width};
    if (L.options().native(lowering_feature::matmul)) {
        return mil.op("einsum", name, out,
                      {{"equation", {mil.const_string(name + "_equation", "nchw,nwhu->nchu")}},
                       {"values", {x, y}, true}});
    }
    const mil_ref columns = L.reshape(x, {1, channels, inner, 1}, name + "_x");
    const mil_ref rows = L.reshape(y, {1, 1, inner, width}, name + "_y");
    const auto product_channels = [&](mil_ref part_columns, const std::string& part) {
        const mil_ref products = L.binary("mul", part_columns, rows, part + "_products");
        mil_shape summed = mil.shape(products);
        summed[2] = 1;
        return mil.op("reduce_sum", part, summed,
                      {{"axes", {mil.const_ints(part + "_axes", std::vector<std::int64_t>{2})}},
                       {"keep_dims", {mil.const_bool(part + "_keep_dims", true)}},
                       {"x", {products}}});
    };
    // The terms [1, C, W, U] a few MB at a time, channels being the product's rows (product_tile_rows).
    return in_tiles(L, columns, 1, product_tile_rows({}, channels, inner, width), name, product_channels);
}

}  // namespace lowering_detail

inline void lower_linear(segment_lowering& L, value_id id) {
    using namespace lowering_detail;
    const node& n = L.at(id);
    mil_writer& mil = L.mil();
    const std::string name = L.base(id);
    const value_id x = n.inputs[0], weight = n.inputs[1];
    const dims& result = n.result.shape;
    const dims& w = L.ir_shape(weight);
    const bool has_bias = n.inputs.size() > 2;
    if (L.is_constant(weight) && L.channels_first_fits(L.ir_shape(x)) && L.channels_first_fits(result)) {
        // [1, K, 1, S] * weight [N, K, 1, 1] -> [1, N, 1, S] (MIL.md §2.1, RUNTIME.md §5 weight layout).
        const mil_ref input = L.channels_first(x);
        const mil_ref kernel = L.constant(weight, {w[0], w[1], 1, 1});
        std::vector<mil_argument> args = conv_parameters(L, name, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1, "valid");
        args.push_back({"weight", {kernel}});
        args.push_back({"x", {input}});
        const mil_shape cf = segment_lowering::channels_first_shape(result);
        mil_ref out = mil.op("conv", has_bias ? name + "_conv" : name, cf, std::move(args));
        if (has_bias) {
            const value_id bias = n.inputs[2];
            const mil_ref b = L.is_constant(bias)
                                  ? L.broadcast_constant(L.constant_values(bias), L.ir_shape(bias), result,
                                                         value_layout::channels_first, name + "_bias")
                                  : L.channels_first(bias);
            out = L.binary("add", out, b, name);
        }
        L.set_form(id, value_layout::channels_first, out);
        return;
    }
    // Operands are made one statement at a time: argument evaluation order would make the text
    // compiler-dependent.
    const mil_ref input = L.logical(x);
    const mil_ref weights = L.logical(weight);
    mil_ref out = matmul(L, input, weights, false, true, has_bias ? name + "_matmul" : name);
    if (has_bias) {
        const value_id bias = n.inputs[2];
        const mil_ref b = L.is_constant(bias)
                              ? L.broadcast_constant(L.constant_values(bias), L.ir_shape(bias), result,
                                                     value_layout::logical, name + "_bias")
                              : L.logical(bias);
        out = L.binary("add", out, b, name);
    }
    L.set_form(id, value_layout::logical, out);
}

// A patch conv (support.hpp is_patch_conv) as a space-to-depth rearrangement and a 1x1 conv (RUNTIME.md §0b
// #26; aneforge lowers ViT's so): x [N, C, H, W] as [N * C, H / P, P, W / Q, Q] — rank 5, the ANE's limit —
// transposed to [N * C, P, Q, H / P, W / Q] is [N, C * P * Q, H / P, W / Q], whose channel c * P * Q + i * Q
// + j holds pixel (i, j) of channel c's patches: the order of the weight [O, C, P, Q] read as [O, C * P * Q,
// 1, 1], so the weights need no reordering. Both routes lower it so: on the private one a kernel 16 or wider
// fails to compile (§0 #7), and through Core ML the rearrangement keeps the conv on the Neural Engine instead
// of leaving a wide kernel to Core ML's placement, with one lowering for device::coreml and the package
// shipped.
inline mil_ref patch_conv_input(segment_lowering& L, const node& n, const std::string& name) {
    const dims& x = L.ir_shape(n.inputs[0]);
    const dims& w = L.ir_shape(n.inputs[1]);
    const std::int64_t batch = x[0], channels = x[1], p = w[2], q = w[3];
    const std::int64_t rows = x[2] / p, columns = x[3] / q;
    mil_ref input = L.logical(n.inputs[0]);
    if (rows * p != x[2] || columns * q != x[3])  // the rows and columns past the last whole patch are unread
        input = L.slice(input, {0, 0, 0, 0}, {batch, channels, rows * p, columns * q}, name + "_whole");
    const mil_ref patches = L.reshape(input, {batch * channels, rows, p, columns, q}, name + "_patches");
    const mil_ref moved = L.transpose(patches, std::vector<std::int64_t>{0, 2, 4, 1, 3}, name + "_moved");
    return L.reshape(moved, {batch, channels * p * q, rows, columns}, name + "_depth");
}

inline void lower_conv2d(segment_lowering& L, value_id id) {
    using namespace lowering_detail;
    const node& n = L.at(id);
    mil_writer& mil = L.mil();
    const std::string name = L.base(id);
    const attributes& a = n.attrs;
    const bool has_bias = n.inputs.size() > 2;
    const dims& w = L.ir_shape(n.inputs[1]);
    std::vector<mil_argument> args;
    if (is_patch_conv(n, L.ir_shape(n.inputs[0]), w, L.options())) {
        args = conv_parameters(L, name, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1, "custom");
        args.push_back({"weight", {L.constant(n.inputs[1], {w[0], w[1] * w[2] * w[3], 1, 1})}});
        args.push_back({"x", {patch_conv_input(L, n, name)}});
    } else {
        args = conv_parameters(L, name, {a.stride[0], a.stride[1]},
                               {a.padding[0], a.padding[1], a.padding[2], a.padding[3]},
                               {a.dilation[0], a.dilation[1]}, a.groups, "custom");
        args.push_back({"weight", {L.constant(n.inputs[1], {w[0], w[1], w[2], w[3]})}});
        args.push_back({"x", {L.logical(n.inputs[0])}});
    }
    mil_ref out = mil.op("conv", has_bias ? name + "_conv" : name,
                         segment_lowering::logical_shape(n.result.shape), std::move(args));
    if (has_bias) {
        // No bias on conv (CONSTRAINTS.md): a separate add of a [1, O, 1, 1] const.
        out = L.binary("add", out,
                       per_channel(L, L.constant_values(n.inputs[2]), n.result.shape, name + "_bias"), name);
    }
    L.set_form(id, value_layout::logical, out);
}

// Max pooling as the maximum of kh * kw strided slices of the input padded with fp16's lowest value (MIL's
// max_pool is reported rejected, RUNTIME.md §0 #5).
inline mil_ref max_pool_by_slices(segment_lowering& L, const node& n, const std::string& name) {
    const attributes& a = n.attrs;
    mil_writer& mil = L.mil();
    mil_ref x = L.logical(n.inputs[0]);
    const dims& out = n.result.shape;
    if (a.padding[0] + a.padding[1] + a.padding[2] + a.padding[3] > 0) {
        mil_shape padded = mil.shape(x);
        padded[2] += a.padding[0] + a.padding[1];
        padded[3] += a.padding[2] + a.padding[3];
        x = mil.op("pad", name + "_padded", padded,
                   {{"constant_val", {L.scalar(-65504.0f, name + "_padded_constant_val")}},
                    {"mode", {mil.const_string(name + "_padded_mode", "constant")}},
                    {"pad",
                     {mil.const_ints(name + "_padded_pad",
                                     std::vector<std::int64_t>{0, 0, 0, 0, a.padding[0], a.padding[1],
                                                               a.padding[2], a.padding[3]})}},
                    {"x", {x}}});
    }
    const std::int64_t kh = a.kernel[0], kw = a.kernel[1];
    mil_ref result{};
    for (std::int64_t i = 0; i < kh; ++i) {
        for (std::int64_t j = 0; j < kw; ++j) {
            const bool last = i == kh - 1 && j == kw - 1;
            const mil_ref window = L.slice(
                x, {0, 0, i, j},
                {out[0], out[1], i + a.stride[0] * (out[2] - 1) + 1, j + a.stride[1] * (out[3] - 1) + 1},
                message(name, "_tap", i, "_", j), {1, 1, a.stride[0], a.stride[1]});
            result = i == 0 && j == 0 ? window
                                      : L.binary("maximum", result, window,
                                                 last ? name : message(name, "_max", i, "_", j));
        }
    }
    if (kh * kw == 1) result = L.reshape(result, mil.shape(result), name, true);
    return result;
}

// Average pooling as a depthwise conv with constant weights 1 / (kh * kw); where padding is excluded from the
// average, the sums are scaled by a constant of each window's own count instead (RUNTIME.md §0 #5).
inline mil_ref avg_pool_by_conv(segment_lowering& L, const node& n, const std::string& name) {
    using namespace lowering_detail;
    const attributes& a = n.attrs;
    mil_writer& mil = L.mil();
    const dims& in = L.ir_shape(n.inputs[0]);
    const dims& out = n.result.shape;
    const std::int64_t channels = in[1], kh = a.kernel[0], kw = a.kernel[1];
    const bool padded = a.padding[0] + a.padding[1] + a.padding[2] + a.padding[3] > 0;
    const bool per_window = padded && !a.count_include_pad;
    const float tap = per_window ? 1.0f : static_cast<float>(1.0 / static_cast<double>(kh * kw));
    std::vector<mil_argument> args =
        conv_parameters(L, name, {a.stride[0], a.stride[1]},
                        {a.padding[0], a.padding[1], a.padding[2], a.padding[3]}, {1, 1}, channels, "custom");
    const std::vector<float> weights(static_cast<std::size_t>(channels * kh * kw), tap);
    args.push_back({"weight", {L.fp16_const(name + "_weight", {channels, 1, kh, kw}, weights)}});
    args.push_back({"x", {L.logical(n.inputs[0])}});
    const mil_shape shape = segment_lowering::logical_shape(out);
    mil_ref sums = mil.op("conv", per_window ? name + "_sums" : name, shape, std::move(args));
    if (!per_window) return sums;
    std::vector<float> inverse(static_cast<std::size_t>(out.element_count()));
    for (std::size_t at = 0; at < inverse.size(); ++at) {
        const auto ow = static_cast<std::int64_t>(at) % out[3];
        const auto oh = (static_cast<std::int64_t>(at) / out[3]) % out[2];
        const auto inside = [](std::int64_t start, std::int64_t size, std::int64_t extent) {
            return std::min(start + size, extent) - std::max<std::int64_t>(start, 0);
        };
        const std::int64_t count = inside(oh * a.stride[0] - a.padding[0], kh, in[2]) *
                                   inside(ow * a.stride[1] - a.padding[2], kw, in[3]);
        inverse[at] = static_cast<float>(1.0 / static_cast<double>(std::max<std::int64_t>(count, 1)));
    }
    return L.binary("mul", sums, L.fp16_const(name + "_counts", shape, inverse), name);
}

inline void lower_pool(segment_lowering& L, value_id id) {
    const node& n = L.at(id);
    mil_writer& mil = L.mil();
    const std::string name = L.base(id);
    const attributes& a = n.attrs;
    const lowering_feature feature =
        n.kind == op::max_pool2d ? lowering_feature::max_pool : lowering_feature::avg_pool;
    if (!L.options().native(feature)) {
        L.set_form(id, value_layout::logical,
                   n.kind == op::max_pool2d ? max_pool_by_slices(L, n, name) : avg_pool_by_conv(L, n, name));
        return;
    }
    std::vector<mil_argument> args{
        {"ceil_mode", {mil.const_bool(name + "_ceil_mode", false)}},
        {"kernel_sizes",
         {mil.const_ints(name + "_kernel_sizes", std::vector<std::int64_t>{a.kernel[0], a.kernel[1]})}},
        {"pad",
         {mil.const_ints(name + "_pad",
                         std::vector<std::int64_t>{a.padding[0], a.padding[1], a.padding[2], a.padding[3]})}},
        {"pad_type", {mil.const_string(name + "_pad_type", "custom")}},
        {"strides", {mil.const_ints(name + "_strides", std::vector<std::int64_t>{a.stride[0], a.stride[1]})}},
        {"x", {L.logical(n.inputs[0])}}};
    if (n.kind == op::avg_pool2d) {
        args.push_back({"exclude_padding_from_average",
                        {mil.const_bool(name + "_exclude_padding_from_average", !a.count_include_pad)}});
    }
    L.set_form(id, value_layout::logical,
               mil.op(n.kind == op::max_pool2d ? "max_pool" : "avg_pool", name,
                      segment_lowering::logical_shape(n.result.shape), std::move(args)));
}

inline void lower_upsample(segment_lowering& L, value_id id) {
    const node& n = L.at(id);
    mil_writer& mil = L.mil();
    const std::string name = L.base(id);
    const dims& x = L.ir_shape(n.inputs[0]);
    std::vector<mil_argument> args{
        {"scale_factor_height", {mil.const_int(name + "_scale_factor_height", n.result.shape[2] / x[2])}},
        {"scale_factor_width", {mil.const_int(name + "_scale_factor_width", n.result.shape[3] / x[3])}},
        {"x", {L.logical(n.inputs[0])}}};
    if (n.kind == op::upsample_bilinear) {
        // PyTorch's align_corners=False is MIL's half-pixel centres.
        args.push_back({"align_corners", {mil.const_bool(name + "_align_corners", n.attrs.align_corners)}});
        args.push_back(
            {"half_pixel_centers", {mil.const_bool(name + "_half_pixel_centers", !n.attrs.align_corners)}});
    }
    L.set_form(id, value_layout::logical,
               mil.op(n.kind == op::upsample_nearest ? "upsample_nearest_neighbor" : "upsample_bilinear",
                      name, segment_lowering::logical_shape(n.result.shape), std::move(args)));
}

// layer_norm and rms_norm over the last axis: channels-first (axis 1) when it fits, else over the last axis.
inline void lower_last_axis_norm(segment_lowering& L, value_id id) {
    const node& n = L.at(id);
    mil_writer& mil = L.mil();
    const std::string name = L.base(id);
    const dims& shape = n.result.shape;
    const value_layout layout =
        L.channels_first_fits(shape) ? value_layout::channels_first : value_layout::logical;
    mil_ref x = L.form(n.inputs[0], layout);
    const std::size_t axis = layout == value_layout::channels_first ? 1 : mil.shape(x).size() - 1;
    const std::int64_t features = mil.shape(x)[axis];
    const auto norm = [&](mil_ref input, const std::string& out, bool affine) {
        std::vector<mil_argument> args{
            {"axes",
             {mil.const_ints(out + "_axes", std::vector<std::int64_t>{static_cast<std::int64_t>(axis)})}},
            {"epsilon", {L.scalar(fp16_epsilon(n.attrs.epsilon), out + "_epsilon")}},
            {"x", {input}}};
        if (affine && n.inputs.size() > 1) {
            const std::vector<float>& gamma = L.constant_values(n.inputs[1]);
            args.push_back({"gamma", {L.fp16_const(out + "_gamma", {features}, gamma)}});
        }
        if (affine && n.inputs.size() > 2) {
            const std::vector<float>& beta = L.constant_values(n.inputs[2]);
            args.push_back({"beta", {L.fp16_const(out + "_beta", {features}, beta)}});
        }
        return mil.op("layer_norm", out, mil.shape(input), std::move(args));
    };
    if (n.kind == op::layer_norm) {
        L.set_form(id, layout, norm(x, name, true));
        return;
    }
    // RMSNorm exactly and without squaring into fp16 overflow (MIL.md §2.6): [x, -x] has mean 0, so its
    // layer_norm divides by sqrt(mean(x^2) + epsilon); the first half is x's RMS-normalised value.
    const mil_ref negated = L.binary("mul", x, L.scalar(-1.0f, name + "_minus1"), name + "_neg");
    const mil_ref both = L.concat({x, negated}, axis, name + "_both");
    const mil_ref normalised = norm(both, name + "_norm", false);
    const bool has_weight = n.inputs.size() > 1;
    mil_ref out = L.slice_axis(normalised, axis, 0, features, has_weight ? name + "_half" : name);
    if (has_weight) {
        const value_id weight = n.inputs[1];
        const mil_ref w = L.is_constant(weight)
                              ? L.broadcast_constant(L.constant_values(weight), L.ir_shape(weight), shape,
                                                     layout, name + "_weight")
                              : L.form(weight, layout);
        out = L.binary("mul", out, w, name);
    }
    L.set_form(id, layout, out);
}

inline void lower_group_norm(segment_lowering& L, value_id id) {
    using namespace lowering_detail;
    const node& n = L.at(id);
    mil_writer& mil = L.mil();
    const std::string name = L.base(id);
    const dims& shape = n.result.shape;
    const std::int64_t groups = n.attrs.groups;
    const auto per_group = static_cast<std::int64_t>(shape.element_count()) / (shape[0] * groups);
    const mil_ref grouped =
        L.reshape(L.logical(n.inputs[0]), {shape[0], groups, per_group}, name + "_grouped", true);
    const mil_ref normalised =
        mil.op("layer_norm", name + "_norm", mil.shape(grouped),
               {{"axes", {mil.const_ints(name + "_norm_axes", std::vector<std::int64_t>{2})}},
                {"epsilon", {L.scalar(fp16_epsilon(n.attrs.epsilon), name + "_norm_epsilon")}},
                {"x", {grouped}}});
    const bool has_weight = n.inputs.size() > 1, has_bias = n.inputs.size() > 2;
    mil_ref out = L.reshape(normalised, segment_lowering::logical_shape(shape),
                            has_weight ? name + "_ungrouped" : name, true);
    if (has_weight) {
        out = L.binary("mul", out, per_channel(L, L.constant_values(n.inputs[1]), shape, name + "_weight"),
                       has_bias ? name + "_scaled" : name);
    }
    if (has_bias)
        out =
            L.binary("add", out, per_channel(L, L.constant_values(n.inputs[2]), shape, name + "_bias"), name);
    L.set_form(id, value_layout::logical, out);
}

inline void lower_batch_norm(segment_lowering& L, value_id id) {
    using namespace lowering_detail;
    const node& n = L.at(id);
    const std::string name = L.base(id);
    const std::vector<float>& mean = L.constant_values(n.inputs[1]);
    const std::vector<float>& variance = L.constant_values(n.inputs[2]);
    std::vector<float> scale(mean.size()), shift(mean.size());
    for (std::size_t c = 0; c < mean.size(); ++c) {
        const double weight = n.inputs.size() > 3 ? L.constant_values(n.inputs[3])[c] : 1.0;
        const double bias = n.inputs.size() > 4 ? L.constant_values(n.inputs[4])[c] : 0.0;
        const double s =
            weight / std::sqrt(static_cast<double>(variance[c]) + static_cast<double>(n.attrs.epsilon));
        scale[c] = static_cast<float>(s);
        shift[c] = static_cast<float>(bias - static_cast<double>(mean[c]) * s);
    }
    const dims& shape = n.result.shape;
    const mil_ref x = L.logical(n.inputs[0]);
    const mil_ref scaled =
        L.binary("mul", x, per_channel(L, scale, shape, name + "_scale"), name + "_scaled");
    L.set_form(id, value_layout::logical,
               L.binary("add", scaled, per_channel(L, shift, shape, name + "_shift"), name));
}

inline void lower_softmax(segment_lowering& L, value_id id) {
    const node& n = L.at(id);
    const std::string name = L.base(id);
    const dims& shape = n.result.shape;
    const auto axis = static_cast<std::size_t>(n.attrs.axis);
    std::vector<value_id> operands{n.inputs[0]};
    if (n.inputs.size() > 1) operands.push_back(n.inputs[1]);
    value_layout layout = elementwise_layout(L, operands, shape);
    if (axis + 1 != shape.rank()) layout = value_layout::logical;
    std::vector<mil_ref> values = elementwise_operands(L, operands, shape, layout, name);
    mil_ref x = values[0];
    if (values.size() > 1) x = L.binary("add", x, values[1], name + "_masked");
    L.set_form(id, layout,
               lowering_detail::softmax(L, x, layout == value_layout::channels_first ? 1 : axis, name));
}

inline void lower_reduction(segment_lowering& L, value_id id) {
    const node& n = L.at(id);
    mil_writer& mil = L.mil();
    const std::string name = L.base(id);
    const mil_ref x = L.logical(n.inputs[0]);
    mil_shape reduced = mil.shape(x);
    for (const auto axis : n.attrs.axes)
        reduced[static_cast<std::size_t>(axis)] = 1;
    // reduce_mean as reduce_sum times 1/n where the chip refuses it (RUNTIME.md §0 #9).
    const bool mean_as_sum = n.kind == op::reduce_mean && !L.options().native(lowering_feature::reduce_mean);
    const char* type = n.kind == op::reduce_sum || mean_as_sum ? "reduce_sum"
                       : n.kind == op::reduce_mean             ? "reduce_mean"
                       : n.kind == op::reduce_min              ? "reduce_min"
                                                               : "reduce_max";
    const mil_shape target = segment_lowering::logical_shape(n.result.shape);
    const bool exact = reduced == target && !mean_as_sum;
    // keep_dims bound to a named const (CONSTRAINTS.md); dropped axes are reshaped away afterwards.
    mil_ref out = mil.op(type, exact ? name : name + "_kept", reduced,
                         {{"axes", {mil.const_ints(name + "_axes", n.attrs.axes)}},
                          {"keep_dims", {mil.const_bool(name + "_keep_dims", true)}},
                          {"x", {x}}});
    if (mean_as_sum) {
        std::int64_t count = 1;
        const mil_shape& in = mil.shape(x);
        for (const auto axis : n.attrs.axes)
            count *= in[static_cast<std::size_t>(axis)];
        const bool same = reduced == target;
        out = L.binary("mul", out,
                       L.scalar(static_cast<float>(1.0 / static_cast<double>(count)), name + "_inverse"),
                       same ? name : name + "_mean");
    }
    L.set_form(id, value_layout::logical, L.reshape(out, target, name));
}

inline void lower_data_movement(segment_lowering& L, value_id id) {
    const node& n = L.at(id);
    mil_writer& mil = L.mil();
    const std::string name = L.base(id);
    const dims& shape = n.result.shape;
    const attributes& a = n.attrs;
    const value_id x = n.inputs[0];
    switch (n.kind) {
        case op::reshape: {
            const dims& in = L.ir_shape(x);
            // Same last extent: the channels-first form [1, C, 1, S] is the same tensor.
            if (L.has_channels_first(x) && !L.has_logical(x) && in.rank() > 0 && shape.rank() > 0 &&
                in[in.rank() - 1] == shape[shape.rank() - 1]) {
                L.set_form(id, value_layout::channels_first, L.channels_first(x));
                return;
            }
            const bool one_sequence =
                in.rank() >= 3 && shape.rank() >= 3 && in[0] == 1 && shape[0] == 1 && in[1] == shape[1];
            // [1, S, H, D] back to [1, S, H*D]: the channels-first tensor the heads were split from.
            if (const auto split = L.head_split_of(x);
                split && !split->heads_first && one_sequence && in.rank() == 4 && shape.rank() == 3) {
                L.set_form(id, value_layout::channels_first, split->channels_first);
                return;
            }
            // [1, S, H*D] to [1, S, H, D]: attention may read the heads off the channels. The logical form
            // below is made as well; the program keeps it only if something reads it.
            if (L.has_channels_first(x) && one_sequence && in.rank() == 3 && shape.rank() == 4)
                L.set_head_split(id, {L.channels_first(x), false});
            L.set_form(id, value_layout::logical,
                       L.reshape(L.logical(x), segment_lowering::logical_shape(shape), name));
            return;
        }
        case op::permute:
            if (const auto split = L.head_split_of(x);
                split && a.axes == std::vector<std::int64_t>{0, 2, 1, 3})
                L.set_head_split(id, {split->channels_first, !split->heads_first});
            L.set_form(id, value_layout::logical, L.transpose(L.logical(x), a.axes, name));
            return;
        case op::concat: {
            std::vector<mil_ref> parts;
            for (const value_id v : n.inputs)
                parts.push_back(L.logical(v));
            L.set_form(id, value_layout::logical, L.concat(parts, static_cast<std::size_t>(a.axis), name));
            return;
        }
        case op::slice: {
            bool unit = true;
            for (const auto s : a.step)
                unit = unit && s == 1;
            L.set_form(id, value_layout::logical,
                       L.slice(L.logical(x), a.begin, a.end, name, unit ? mil_shape{} : a.step));
            return;
        }
        case op::pad: {
            std::vector<std::int64_t> pad;
            for (std::size_t i = 0; i < a.begin.size(); ++i) {
                pad.push_back(a.begin[i]);
                pad.push_back(a.end[i]);
            }
            L.set_form(id, value_layout::logical,
                       mil.op("pad", name, segment_lowering::logical_shape(shape),
                              {{"constant_val", {L.scalar(a.value, name + "_constant_val")}},
                               {"mode", {mil.const_string(name + "_mode", "constant")}},
                               {"pad", {mil.const_ints(name + "_pad", pad)}},
                               {"x", {L.logical(x)}}}));
            return;
        }
        default:
            throw error(message("ane lowering: ", op_name(n.kind), " is not a data movement op"));
    }
}

namespace lowering_detail {

// The additive mask of attention node `n` (its constant mask, and -1e4 where a causal query must not see a
// key), [B, H, Sq, Sk] row-major; empty when it has neither.
inline std::vector<float> constant_mask(segment_lowering& L, const node& n, const mil_shape& scores_shape) {
    const bool mask_constant = n.inputs.size() > 3 && L.is_constant(n.inputs[3]);
    if (!mask_constant && !n.attrs.causal) return {};
    // One full-shape additive const (broadcast consts must be [1, C, 1, 1] or full, CONSTRAINTS.md): the mask
    // plus -1e4 where key j > query i + Sk - Sq (the queries are the last Sq positions).
    std::int64_t count = 1;
    for (const auto extent : scores_shape)
        count *= extent;
    std::vector<float> additive(static_cast<std::size_t>(count), 0.0f);
    if (mask_constant) {
        const dims& m = L.ir_shape(n.inputs[3]);
        additive =
            broadcast_values(L.constant_values(n.inputs[3]), mil_shape(m.begin(), m.end()), scores_shape);
    }
    if (n.attrs.causal) {
        const std::int64_t queries = scores_shape[2], keys = scores_shape[3];
        for (std::size_t at = 0; at < additive.size(); ++at) {
            const auto j = static_cast<std::int64_t>(at) % keys;
            const auto i = (static_cast<std::int64_t>(at) / keys) % queries;
            if (j > i + keys - queries) additive[at] = masked_score;
        }
    }
    return additive;
}

// Attention in the split-einsum form of Apple's ml-ane-transformers (MIL.md §2.3), for q, k and v that are
// channels-first projections split into heads: per head h, the channel slice q_h [1, D, 1, Sq], k's slice of
// its one transpose k^T [1, Sk, 1, D] and v_h [1, D, 1, Sk]; scores k^T_h q_h [1, Sk, 1, Sq] with the mask
// added, softmax over the keys (axis 1), then v_h weights [1, D, 1, Sq]; the heads concatenated on the
// channels. The width axis is moved once, for k; every tensor stays [1, C, 1, S], and each head's scores are
// small enough to stay on-chip (ml-ane-transformers' "Principle 2").
inline void lower_split_attention(segment_lowering& L, value_id id, mil_ref q_cf, mil_ref k_cf,
                                  mil_ref v_cf) {
    const node& n = L.at(id);
    const std::string name = L.base(id);
    const dims& q = L.ir_shape(n.inputs[0]);
    const dims& k = L.ir_shape(n.inputs[1]);
    const dims& v = L.ir_shape(n.inputs[2]);
    const std::int64_t heads = q[1], queries = q[2], depth = q[3];
    const std::int64_t kv_heads = k[1], keys = k[2], value_depth = v[3];
    const std::int64_t group = heads / kv_heads;
    const double factor = n.attrs.scale != 0.0f ? static_cast<double>(n.attrs.scale)
                                                : 1.0 / std::sqrt(static_cast<double>(depth));
    const mil_ref query =
        L.binary("mul", q_cf, L.scalar(static_cast<float>(factor), name + "_scale"), name + "_q");
    const mil_ref keys_first = L.swap_channels(k_cf, name + "_kt");  // [1, Sk, 1, Hkv * D]
    const auto head_slice = [&](mil_ref x, std::size_t axis, std::int64_t head, std::int64_t width,
                                std::int64_t count, const std::string& label) {
        if (count == 1) return x;
        return L.slice_axis(x, axis, head * width, (head + 1) * width, message(name, label, head));
    };
    // The masks in the scores' layout [1, Sk, 1, Sq]: one per head where they differ, else one for all.
    const mil_shape scores_shape{1, heads, queries, keys};
    const std::vector<float> additive = constant_mask(L, n, scores_shape);
    std::int64_t constant_heads = 1;
    if (n.inputs.size() > 3 && L.is_constant(n.inputs[3])) {
        const dims& m = L.ir_shape(n.inputs[3]);
        if (m.rank() >= 3 && m[m.rank() - 3] != 1) constant_heads = heads;
    }
    std::vector<mil_ref> constant_masks;
    for (std::int64_t h = 0; h < (additive.empty() ? 0 : constant_heads); ++h) {
        std::vector<float> layout(static_cast<std::size_t>(keys * queries));
        for (std::int64_t i = 0; i < queries; ++i)
            for (std::int64_t j = 0; j < keys; ++j)
                layout[static_cast<std::size_t>(j * queries + i)] =
                    additive[static_cast<std::size_t>((h * queries + i) * keys + j)];
        constant_masks.push_back(
            L.fp16_const(message(name, "_mask", constant_heads > 1 ? std::to_string(h) : ""),
                         {1, keys, 1, queries}, layout, true));
    }
    // A computed mask, broadcastable to [B, H, Sq, Sk], as [1, Sk, 1, Sq] per head (or one for all heads).
    std::vector<mil_ref> computed_masks;
    if (n.inputs.size() > 3 && !L.is_constant(n.inputs[3])) {
        const dims& m = L.ir_shape(n.inputs[3]);
        mil_shape m4(4 - std::min<std::size_t>(m.rank(), 4), 1);
        m4.insert(m4.end(), m.begin(), m.end());
        const mil_ref mask = L.reshape(L.logical(n.inputs[3]), m4, name + "_mask_4d");
        for (std::int64_t h = 0; h < m4[1]; ++h) {
            const mil_ref one =
                m4[1] == 1 ? mask : L.slice_axis(mask, 1, h, h + 1, message(name, "_mask_h", h));
            const mil_shape by_key{1, m4[3], 1, m4[2]};
            computed_masks.push_back(m4[2] == 1 || m4[3] == 1
                                         ? L.reshape(one, by_key, message(name, "_mask_keys", h))
                                         : L.transpose(one, std::vector<std::int64_t>{0, 3, 1, 2},
                                                       message(name, "_mask_keys", h)));
        }
    }
    std::vector<mil_ref> outputs;
    for (std::int64_t h = 0; h < heads; ++h) {
        const std::int64_t kv = h / group;
        const std::string head = message(name, "_h", h);
        const mil_ref q_h = head_slice(query, 1, h, depth, heads, "_q");
        const mil_ref k_h = head_slice(keys_first, 3, kv, depth, kv_heads, "_k");
        const mil_ref v_h = head_slice(v_cf, 1, kv, value_depth, kv_heads, "_v");
        mil_ref scores = channel_product(L, k_h, q_h, head + "_scores");
        if (!computed_masks.empty())
            scores = L.binary("add", scores,
                              computed_masks[computed_masks.size() == 1 ? 0 : static_cast<std::size_t>(h)],
                              head + "_masked");
        if (!constant_masks.empty())
            scores = L.binary("add", scores,
                              constant_masks[constant_masks.size() == 1 ? 0 : static_cast<std::size_t>(h)],
                              head + "_masked_const");
        const mil_ref weights = softmax(L, scores, 1, head + "_weights");
        outputs.push_back(channel_product(L, v_h, weights, heads == 1 ? name + "_cf" : head + "_out"));
    }
    const mil_ref joined = heads == 1 ? outputs[0] : L.concat(outputs, 1, name + "_cf");
    L.set_head_split(id, {joined, true});
    // The logical [1, H, Sq, Dv] form, kept only if something reads it (the output projection does not).
    const mil_ref by_head = L.reshape(joined, {1, heads, value_depth, queries}, name + "_by_head");
    L.set_form(id, value_layout::logical, L.transpose(by_head, std::vector<std::int64_t>{0, 1, 3, 2}, name));
}

}  // namespace lowering_detail

// softmax(q k^T * scale + mask) v as explicit MIL ops (RUNTIME.md §6: SDPA ignores masks on the ANE):
// per head in the split-einsum form when q, k and v are channels-first projections, else as batched
// products over [B, H, S, D].
inline void lower_attention(segment_lowering& L, value_id id) {
    using namespace lowering_detail;
    const node& n = L.at(id);
    {
        const auto q = L.head_split_of(n.inputs[0]);
        const auto k = L.head_split_of(n.inputs[1]);
        const auto v = L.head_split_of(n.inputs[2]);
        if (q && k && v && q->heads_first && k->heads_first && v->heads_first)
            return lower_split_attention(L, id, q->channels_first, k->channels_first, v->channels_first);
    }
    const std::string name = L.base(id);
    const dims& q = L.ir_shape(n.inputs[0]);
    const dims& k = L.ir_shape(n.inputs[1]);
    const dims& v = L.ir_shape(n.inputs[2]);
    const std::int64_t batch = q[0], heads = q[1], queries = q[2], depth = q[3];
    const std::int64_t kv_heads = k[1], keys = k[2];
    const std::int64_t group = heads / kv_heads;
    const double factor = n.attrs.scale != 0.0f ? static_cast<double>(n.attrs.scale)
                                                : 1.0 / std::sqrt(static_cast<double>(depth));
    const mil_ref q_input = L.logical(n.inputs[0]);
    mil_ref query =
        L.binary("mul", q_input, L.scalar(static_cast<float>(factor), name + "_scale"), name + "_q");
    // Grouped-query: heads h = kv * group + g, so [B, H, Sq, D] is [B, Hkv, group * Sq, D] in memory.
    if (group > 1) query = L.reshape(query, {batch, kv_heads, group * queries, depth}, name + "_q_grouped");
    mil_ref scores = matmul(L, query, L.logical(n.inputs[1]), false, true, name + "_scores");
    const mil_shape scores_shape{batch, heads, queries, keys};
    if (group > 1) scores = L.reshape(scores, scores_shape, name + "_scores_heads");
    if (n.inputs.size() > 3 && !L.is_constant(n.inputs[3]))
        scores = L.binary("add", scores, L.logical(n.inputs[3]), name + "_masked");
    if (const std::vector<float> additive = constant_mask(L, n, scores_shape); !additive.empty()) {
        scores = L.binary("add", scores, L.fp16_const(name + "_mask", scores_shape, additive, true),
                          name + "_masked_const");
    }
    mil_ref weights = softmax(L, scores, 3, name + "_weights");
    if (group > 1)
        weights = L.reshape(weights, {batch, kv_heads, group * queries, keys}, name + "_weights_grouped");
    mil_ref out =
        matmul(L, weights, L.logical(n.inputs[2]), false, false, group > 1 ? name + "_grouped" : name);
    if (group > 1) out = L.reshape(out, {batch, heads, queries, v[3]}, name);
    L.set_form(id, value_layout::logical, out);
}

// Rotary embeddings by slices (CPU reference: rotate-half pairs i with i + R/2, interleaved 2i with 2i + 1).
inline void lower_rotary(segment_lowering& L, value_id id) {
    const node& n = L.at(id);
    const std::string name = L.base(id);
    const dims& shape = n.result.shape;
    const std::size_t last = shape.rank() - 1;
    const std::int64_t features = shape[last];
    const std::int64_t half_count = L.ir_shape(n.inputs[1])[1];
    const std::int64_t rotated = 2 * half_count;
    const mil_ref x = L.logical(n.inputs[0]);
    mil_ref rotated_part = rotated < features ? L.slice_axis(x, last, 0, rotated, name + "_rot") : x;
    mil_shape part_shape(shape.begin(), shape.end());
    std::size_t pair_axis = last;
    if (n.attrs.interleaved) {
        part_shape[last] = half_count;
        part_shape.push_back(2);
        rotated_part = L.reshape(rotated_part, part_shape, name + "_pairs", true);
        pair_axis = last + 1;
    }
    // The two halves of each pair, shaped like the tables (with a trailing 1 in the interleaved form).
    const std::int64_t step = n.attrs.interleaved ? 1 : half_count;
    const mil_ref first = L.slice_axis(rotated_part, pair_axis, 0, step, name + "_x1");
    const mil_ref second = L.slice_axis(rotated_part, pair_axis, step, 2 * step, name + "_x2");
    const mil_shape& half_shape = L.mil().shape(first);
    const auto table = [&](value_id t, const char* role) {
        const dims& ts = L.ir_shape(t);
        dims table_shape = n.attrs.interleaved ? dims{ts[0], ts[1], 1} : ts;
        if (L.is_constant(t)) {
            return L.broadcast_constant(L.constant_values(t), table_shape, dims(half_shape),
                                        value_layout::logical, name + role);
        }
        return L.reshape(L.logical(t), mil_shape(table_shape.begin(), table_shape.end()),
                         name + role + "_shaped");
    };
    const mil_ref cos = table(n.inputs[1], "_cos");
    const mil_ref sin = table(n.inputs[2], "_sin");
    const mil_ref x1cos = L.binary("mul", first, cos, name + "_x1cos");
    const mil_ref x2sin = L.binary("mul", second, sin, name + "_x2sin");
    const mil_ref out1 = L.binary("sub", x1cos, x2sin, name + "_out1");
    const mil_ref x2cos = L.binary("mul", second, cos, name + "_x2cos");
    const mil_ref x1sin = L.binary("mul", first, sin, name + "_x1sin");
    const mil_ref out2 = L.binary("add", x2cos, x1sin, name + "_out2");
    const bool tail = rotated < features;
    mil_ref joined = L.concat({out1, out2}, pair_axis, n.attrs.interleaved || tail ? name + "_joined" : name);
    if (n.attrs.interleaved) {
        mil_shape flat(shape.begin(), shape.end());
        flat[last] = rotated;
        joined = L.reshape(joined, flat, tail ? name + "_flat" : name, true);
    }
    if (tail)
        joined = L.concat({joined, L.slice_axis(x, last, rotated, features, name + "_pass")}, last, name);
    L.set_form(id, value_layout::logical, joined);
}

}  // namespace anvil::detail::ane
