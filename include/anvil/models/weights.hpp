// anvil: the one mechanism every model recipe loads its weights with. Each tensor is looked up by its Hugging
// Face name and checked against the shape the config implies, so a folder that does not fit the architecture
// fails at load naming the tensor and both shapes. Weights become graph constants that point into the mapped
// checkpoint (nothing is copied) and enter the graph as f32 values: a cast of the stored f16/bf16 data that
// the CPU backend folds into the GEMM's packing.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "anvil/core/error.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/expr/expr.hpp"
#include "anvil/io/checkpoint.hpp"

namespace anvil::models {

class weight_loader {
public:
    weight_loader(graph g, std::shared_ptr<const checkpoint> weights)
        : graph_(std::move(g)), weights_(std::move(weights)) {
        if (!weights_) throw error("weight_loader: no checkpoint given");
    }

    [[nodiscard]] bool contains(std::string_view name) const { return weights_->contains(name); }

    // The tensor `name`, which must have shape `expected`, as an f32 graph value.
    [[nodiscard]] tensor<float> load(std::string_view name, const dims& expected) {
        const tensor_view* view = weights_->find(name);
        if (view == nullptr) {
            throw format_error(anvil::detail::message(weights_->path().string(), ": the tensor '", name,
                                                      "' is missing (expected shape ", expected, ")"));
        }
        return from_view(*view, expected);
    }

    // The same for a tensor the architecture may or may not have (a bias, say).
    [[nodiscard]] std::optional<tensor<float>> load_optional(std::string_view name, const dims& expected) {
        const tensor_view* view = weights_->find(name);
        if (view == nullptr) return std::nullopt;
        return from_view(*view, expected);
    }

    [[nodiscard]] graph& target() noexcept { return graph_; }
    [[nodiscard]] const checkpoint& source() const noexcept { return *weights_; }

private:
    tensor<float> from_view(const tensor_view& view, const dims& expected) {
        if (!(dims(view.shape()) == expected)) {
            throw shape_error(anvil::detail::message(view.source_name(), ": tensor '", view.name(),
                                                     "': expected shape ", expected, ", got ",
                                                     dims(view.shape())));
        }
        if (!is_floating(view.type())) {
            throw type_error(anvil::detail::message(view.source_name(), ": tensor '", view.name(),
                                                    "': expected floating-point weights, got ",
                                                    dtype_name(view.type())));
        }
        // The constant keeps the whole checkpoint (and so its mapping) alive.
        host_tensor data(view.type(), expected, view.bytes().data(), weights_);
        const value stored = graph_.constant(std::move(data), view.name());
        if (view.type() == dtype::f32) return tensor<float>(stored);
        attributes to_f32;
        to_f32.to = dtype::f32;
        return tensor<float>(graph_.apply(op::cast, {stored}, to_f32));
    }

    graph graph_;
    std::shared_ptr<const checkpoint> weights_;
};

}  // namespace anvil::models
