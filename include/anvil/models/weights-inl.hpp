// anvil: weights's definitions (see weights.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/io/checkpoint.hpp"
#include "anvil/models/weights.hpp"

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

ANVIL_INLINE weight_loader::weight_loader(graph g, std::shared_ptr<const checkpoint> weights)
    : graph_(std::move(g)), weights_(std::move(weights)) {
    if (!weights_) throw error("weight_loader: no checkpoint given");
}

ANVIL_INLINE bool weight_loader::contains(std::string_view name) const {
    return weights_->contains(name);
}

ANVIL_INLINE tensor<float> weight_loader::load(std::string_view name, const dims& expected) {
    return from_view(checked_tensor(*weights_, name, expected), expected);
}

ANVIL_INLINE std::optional<tensor<float>> weight_loader::load_optional(std::string_view name,
                                                                       const dims& expected) {
    const tensor_view* view = weights_->find(name);
    if (view == nullptr) return std::nullopt;
    return from_view(checked_weight(*view, expected), expected);
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
