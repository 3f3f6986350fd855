// anvil: weights's definitions (see weights.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/io/checkpoint.hpp"
#include "anvil/models/common/weights.hpp"

namespace anvil::models {

ANVIL_INLINE const tensor_view& checked_weight(const tensor_view& view, const dims& expected,
                                               std::string_view layout) {
    if (!(dims(view.shape()) == expected)) {
        throw shape_error(anvil::detail::message(view.source_name(), ": tensor '", view.name(),
                                                 "': expected shape ", expected, layout, ", got ",
                                                 dims(view.shape())));
    }
    if (!is_floating(view.type())) {
        throw type_error(anvil::detail::message(view.source_name(), ": tensor '", view.name(),
                                                "': expected floating-point weights, got ",
                                                dtype_name(view.type())));
    }
    return view;
}

ANVIL_INLINE const tensor_view& checked_tensor(const checkpoint& weights, std::string_view name,
                                               const dims& expected, std::string_view layout) {
    const tensor_view* view = weights.find(name);
    if (view == nullptr) {
        throw format_error(anvil::detail::message(weights.path().string(), ": the tensor '", name,
                                                  "' is missing (expected shape ", expected, ")"));
    }
    return checked_weight(*view, expected, layout);
}

ANVIL_INLINE weight_loader::weight_loader(graph g, std::shared_ptr<const checkpoint> weights,
                                          weight_substitute substitute, dropout_hook dropout)
    : graph_(std::move(g)),
      weights_(std::move(weights)),
      substitute_(std::move(substitute)),
      dropout_(std::move(dropout)) {
    if (!weights_) throw error("weight_loader: no checkpoint given");
}

ANVIL_INLINE bool weight_loader::contains(std::string_view name) const {
    return weights_->contains(name) || squeezellm_prefix(name).has_value();
}

ANVIL_INLINE tensor<float> weight_loader::load(std::string_view name, const dims& expected,
                                               weight_role role) {
    const tensor_view* view = weights_->find(name);
    if (view != nullptr && view->type() == dtype::i8) return from_int8_view(*view, expected);
    if (view == nullptr) {
        if (const std::optional<std::string> prefix = squeezellm_prefix(name))
            return from_squeezellm(*prefix, expected);
    }
    return from_float_view(checked_tensor(*weights_, name, expected), expected, role);
}

ANVIL_INLINE std::optional<tensor<float>> weight_loader::load_optional(std::string_view name,
                                                                       const dims& expected,
                                                                       weight_role role) {
    const tensor_view* view = weights_->find(name);
    if (view == nullptr) {
        if (const std::optional<std::string> prefix = squeezellm_prefix(name))
            return from_squeezellm(*prefix, expected);
        return std::nullopt;
    }
    if (view->type() == dtype::i8) return from_int8_view(*view, expected);
    return from_float_view(checked_weight(*view, expected), expected, role);
}

ANVIL_INLINE tensor<float> weight_loader::from_float_view(const tensor_view& view, const dims& expected,
                                                          weight_role role) {
    if (substitute_ && !view.blocks()) {
        const std::function<tensor<float>()> stored = [&] { return from_view(view, expected); };
        if (std::optional<tensor<float>> given = substitute_(graph_, view.name(), role, expected, stored))
            return *std::move(given);
    }
    return from_view(view, expected);
}

ANVIL_INLINE std::optional<std::string> weight_loader::squeezellm_prefix(std::string_view name) const {
    constexpr std::string_view suffix = ".weight";
    if (!name.ends_with(suffix)) return std::nullopt;
    std::string prefix(name.substr(0, name.size() - suffix.size()));
    if (!weights_->contains(prefix + ".qweight") || !weights_->contains(prefix + ".lookup_table"))
        return std::nullopt;
    return prefix;
}

ANVIL_INLINE tensor<float> weight_loader::from_squeezellm(std::string_view prefix, const dims& expected) {
    using anvil::detail::message;
    const tensor_view& packed = *weights_->find(message(prefix, ".qweight"));
    const tensor_view& table = *weights_->find(message(prefix, ".lookup_table"));
    if (expected.rank() != 2) {
        throw type_error(message(packed.source_name(), ": tensor '", packed.name(),
                                 "': SqueezeLLM's palettised layout holds matrices, but '", prefix,
                                 ".weight' is expected with shape ", expected));
    }
    const std::int64_t out = expected[0], in = expected[1];
    if (in % 8 != 0 || packed.type() != dtype::i32 || !(dims(packed.shape()) == dims{in / 8, out})) {
        throw shape_error(
            message(packed.source_name(), ": tensor '", packed.name(),
                    "': SqueezeLLM's packed indices for a weight of shape ", expected, " are i32 [", in / 8,
                    ", ", out,
                    "] (eight 4-bit indices a word along the input axis; the input size must be "
                    "a multiple of 8), got ",
                    dims(packed.shape()), " ", dtype_name(packed.type())));
    }
    constexpr std::int64_t entries = 16;
    if (!is_floating(table.type()) || !(dims(table.shape()) == dims{out, entries})) {
        throw shape_error(message(table.source_name(), ": tensor '", table.name(),
                                  "': SqueezeLLM's lookup table for a weight of shape ", expected,
                                  " is floating [", out, ", ", entries,
                                  "] (one 4-bit palette per output channel), got ", dims(table.shape()), " ",
                                  dtype_name(table.type())));
    }
    // Word (r, c) holds inputs 8r..8r+7 of output c, lowest nibble first: transposed to a byte per index, row
    // by output channel, as the GEMM reads palette indices.
    host_tensor indices(dtype::u8, expected);
    std::uint8_t* const unpacked = indices.values<std::uint8_t>().data();
    const std::byte* words = packed.bytes().data();
    for (std::int64_t r = 0; r < in / 8; ++r) {
        for (std::int64_t c = 0; c < out; ++c) {
            const std::byte* word = words + (r * out + c) * 4;
            std::uint8_t* row = unpacked + c * in + r * 8;
            for (int j = 0; j < 8; ++j) {
                const auto byte = static_cast<unsigned>(word[j / 2]);
                row[j] = static_cast<std::uint8_t>(j % 2 == 0 ? byte & 15u : byte >> 4);
            }
        }
    }
    const value stored = graph_.constant(std::move(indices), packed.name());
    const value palettes = graph_.constant(
        host_tensor::from(
            host_tensor(table.type(), dims{out, entries}, table.bytes().data(), weights_).to_f32(),
            dims{out, entries}),
        table.name());
    return tensor<float>(graph_.apply(op::dequantize_lut, {stored, palettes}, attributes{}));
}

ANVIL_INLINE tensor<float> weight_loader::from_int8_view(const tensor_view& view, const dims& expected) {
    using anvil::detail::message;
    const std::string where = message(view.source_name(), ": tensor '", view.name(), "'");
    if (!(dims(view.shape()) == expected)) {
        throw shape_error(message(where, ": expected shape ", expected, ", got ", dims(view.shape())));
    }
    if (expected.rank() < 2) {
        throw type_error(message(where,
                                 ": expected floating-point weights, got i8 (int8 is read for matrices "
                                 "with a scale per output channel)"));
    }
    const std::int64_t channels = expected[0];
    // A vector of one value per output channel, [C] or [C, 1], as f32.
    const auto per_channel = [&](const tensor_view& t, std::string_view what) {
        const bool column = t.rank() == 2 && t.shape()[1] == 1;
        if (!((t.rank() == 1 || column) && t.shape()[0] == channels) ||
            !(is_floating(t.type()) || t.type() == dtype::i8 || t.type() == dtype::i32)) {
            throw shape_error(message(view.source_name(), ": tensor '", t.name(), "' (the ", what,
                                      " of the int8 weight '", view.name(),
                                      "') must hold one value per output channel, [", channels, "] or [",
                                      channels, ", 1], got ", dims(t.shape()), " ", dtype_name(t.type())));
        }
        return host_tensor(t.type(), dims{channels}, t.bytes().data(), weights_).to_f32();
    };
    const std::string scale_name = view.name() + "_scale";
    const tensor_view* scale = weights_->find(scale_name);
    if (scale == nullptr || !is_floating(scale->type())) {
        throw type_error(message(where, " is int8 ", scale == nullptr ? "without" : "with a non-floating",
                                 " '", scale_name,
                                 "': anvil reads int8 weights with a floating-point scale "
                                 "per output channel beside them (w = (q - zero_point) * scale, as "
                                 "compressed-tensors' int-quantized checkpoints store them)"));
    }
    std::vector<value> inputs{
        graph_.constant(host_tensor(dtype::i8, expected, view.bytes().data(), weights_), view.name())};
    inputs.push_back(
        graph_.constant(host_tensor::from(per_channel(*scale, "scale"), dims{channels}), scale_name));
    if (const tensor_view* zero_point = weights_->find(view.name() + "_zero_point")) {
        std::vector<float> zeros = per_channel(*zero_point, "zero point");
        if (std::any_of(zeros.begin(), zeros.end(), [](float z) { return z != 0.0f; }))
            inputs.push_back(
                graph_.constant(host_tensor::from(std::move(zeros), dims{channels}), zero_point->name()));
    }
    attributes along_channels;
    along_channels.axis = 0;
    return tensor<float>(graph_.apply(op::dequantize_int8, inputs, along_channels));
}

ANVIL_INLINE tensor<float> weight_loader::from_view(const tensor_view& view, const dims& expected) {
    // The constant keeps the whole checkpoint (and so its mapping) alive.
    if (const std::optional<ggml_type> blocks = view.blocks()) {
        // Quantised as a GGUF file stores it: the blocks stay in the program, [rows, bytes per row], and
        // the GEMM reads them in place (checkpoint::from_tensors checked that they are whole rows of blocks).
        std::vector<std::int64_t> block_shape(expected.begin(), expected.end());
        const std::int64_t rows = static_cast<std::int64_t>(view.element_count()) / block_shape.back();
        block_shape.back() = static_cast<std::int64_t>(view.byte_size()) / rows;
        const value stored = graph_.constant(
            host_tensor(dtype::u8, dims(block_shape), view.bytes().data(), weights_), view.name());
        attributes type;
        type.ggml_type = static_cast<std::uint32_t>(*blocks);
        return tensor<float>(graph_.apply(op::dequantize_ggml, {stored}, type));
    }
    host_tensor data(view.type(), expected, view.bytes().data(), weights_);
    const value stored = graph_.constant(std::move(data), view.name());
    if (view.type() == dtype::f32) return tensor<float>(stored);
    attributes to_f32;
    to_f32.to = dtype::f32;
    return tensor<float>(graph_.apply(op::cast, {stored}, to_f32));
}

}  // namespace anvil::models
