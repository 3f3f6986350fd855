// anvil: optimizer's definitions (see optimizer.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "anvil/core/dtype.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/train/optimizer.hpp"

namespace anvil::detail::optimizers {

ANVIL_INLINE host_tensor deep_copy(const host_tensor& tensor) {
    host_tensor copy(tensor.type(), tensor.shape());
    if (tensor.byte_size() != 0) std::memcpy(copy.raw(), tensor.raw(), tensor.byte_size());
    return copy;
}

ANVIL_INLINE void check_non_negative(std::string_view optimizer, std::string_view what, double value) {
    if (!(value >= 0.0)) {
        throw error(message(optimizer, ": invalid ", what, " ", value, " (it must be >= 0)"));
    }
}

}  // namespace anvil::detail::optimizers

namespace anvil::train {

ANVIL_INLINE optimizer::optimizer(std::string name, std::vector<parameter> parameters,
                                  std::vector<std::string> buffer_names)
    : name_(std::move(name)), parameters_(std::move(parameters)), buffer_names_(std::move(buffer_names)) {
    std::unordered_set<std::string_view> seen;
    for (const auto& param : parameters_) {
        if (param.name.empty()) throw error(detail::message(name_, ": a parameter has an empty name"));
        if (!seen.insert(param.name).second) {
            // Two parameters of one name could not be told apart in a saved state.
            throw error(detail::message(name_, ": parameter '", param.name, "' is given twice"));
        }
        if (param.value.type() != dtype::f32) {
            throw type_error(detail::message(name_, ": parameter '", param.name, "' holds ",
                                             dtype_name(param.value.type()),
                                             "; the optimizer updates f32 master weights"));
        }
    }
}

ANVIL_INLINE std::string optimizer::buffer_name(std::size_t buffer, std::size_t param) const {
    // The buffer's name first: "exp_avg." and "exp_avg_sq." differ before any parameter name starts, so no
    // two (buffer, parameter) pairs share a name.
    return buffer_names_[buffer] + "." + parameters_[param].name;
}

ANVIL_INLINE void optimizer::step(std::span<const host_tensor> grads, double lr) {
    detail::optimizers::check_non_negative(name_, "learning rate", lr);
    if (grads.size() != parameters_.size()) {
        throw error(detail::message(name_, ": step got ", grads.size(), " gradients for ", parameters_.size(),
                                    " parameters"));
    }
    for (std::size_t i = 0; i < grads.size(); ++i) {
        const auto& param = parameters_[i];
        if (grads[i].type() != dtype::f32) {
            throw type_error(detail::message(name_, ": the gradient of '", param.name, "' holds ",
                                             dtype_name(grads[i].type()), ", not f32"));
        }
        if (grads[i].shape() != param.value.shape()) {
            throw shape_error(detail::message(name_, ": the gradient of '", param.name, "' has shape ",
                                              grads[i].shape(), ", the parameter ", param.value.shape()));
        }
    }
    if (step_ == 0) {
        buffers_.resize(parameters_.size());
        for (std::size_t i = 0; i < parameters_.size(); ++i) {
            buffers_[i].clear();
            for (std::size_t b = 0; b < buffer_names_.size(); ++b)
                buffers_[i].emplace_back(dtype::f32, parameters_[i].value.shape());
        }
    }
    ++step_;
    for (std::size_t i = 0; i < parameters_.size(); ++i) {
        auto& param = parameters_[i];
        update(param, param.value.values<float>(), grads[i].values<float>(), buffers_[i], lr, step_);
    }
}

ANVIL_INLINE optimizer_state optimizer::state() const {
    optimizer_state saved{name_, step_, {}};
    if (step_ == 0) return saved;
    for (std::size_t i = 0; i < parameters_.size(); ++i) {
        for (std::size_t b = 0; b < buffer_names_.size(); ++b)
            saved.tensors.push_back({buffer_name(b, i), detail::optimizers::deep_copy(buffers_[i][b])});
    }
    return saved;
}

ANVIL_INLINE void optimizer::load_state(const optimizer_state& saved) {
    if (saved.name != name_) {
        throw error(detail::message(name_, ": cannot load the state of optimizer '", saved.name, "'"));
    }
    if (saved.step < 0) {
        throw error(detail::message(name_, ": the saved state has a negative step count (", saved.step, ")"));
    }
    // Every buffer the parameters have after saved.step steps, by name, then each saved tensor in its slot.
    std::unordered_map<std::string, std::size_t> slots;
    if (saved.step != 0) {
        for (std::size_t i = 0; i < parameters_.size(); ++i) {
            for (std::size_t b = 0; b < buffer_names_.size(); ++b)
                slots.emplace(buffer_name(b, i), i * buffer_names_.size() + b);
        }
    }
    std::vector<const named_tensor*> found(slots.size(), nullptr);
    for (const auto& tensor : saved.tensors) {
        const auto slot = slots.find(tensor.name);
        if (slot == slots.end()) {
            throw error(detail::message(name_, ": the saved state has '", tensor.name, "', which ",
                                        saved.step == 0 ? "a state before the first step cannot have"
                                                        : "names no buffer of these parameters"));
        }
        if (found[slot->second] != nullptr) {
            throw error(detail::message(name_, ": the saved state has '", tensor.name, "' twice"));
        }
        const auto& shape = parameters_[slot->second / buffer_names_.size()].value.shape();
        if (tensor.tensor.type() != dtype::f32 || tensor.tensor.shape() != shape) {
            throw shape_error(detail::message(name_, ": saved tensor '", tensor.name, "' is ",
                                              dtype_name(tensor.tensor.type()), " ", tensor.tensor.shape(),
                                              ", expected f32 ", shape));
        }
        found[slot->second] = &tensor;
    }
    std::vector<std::vector<host_tensor>> loaded(saved.step == 0 ? 0 : parameters_.size());
    for (std::size_t i = 0; i < loaded.size(); ++i) {
        for (std::size_t b = 0; b < buffer_names_.size(); ++b) {
            const auto* tensor = found[i * buffer_names_.size() + b];
            if (tensor == nullptr) {
                throw error(detail::message(name_, ": the saved state lacks '", buffer_name(b, i), "'"));
            }
            loaded[i].push_back(detail::optimizers::deep_copy(tensor->tensor));
        }
    }
    buffers_ = std::move(loaded);
    step_ = saved.step;
}

}  // namespace anvil::train
