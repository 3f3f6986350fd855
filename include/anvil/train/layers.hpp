// anvil: trainable-graph builders — the tensors a model trains (parameter_set: names, initial values, weight
// decay) and the layers that declare and use them: linear, conv2d, a GroupNorm built from differentiable
// primitives, conv_block (conv, GroupNorm, ReLU) and a small CIFAR-style CNN. Initial values follow
// PyTorch's reset_parameters (nn.Linear, nn.Conv2d: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias,
// which is kaiming_uniform_ with a = sqrt(5)), drawn from a seeded generator that is the same on every
// platform.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "anvil/compilation.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/graph/graph.hpp"
#include "anvil/train/optimizer.hpp"

namespace anvil::train {

// Uniform floats from a 64-bit seed, identical on every compiler and platform (std::uniform_real_distribution
// is not specified bit for bit): splitmix64, 24 bits per float.
class uniform_generator {
public:
    explicit uniform_generator(std::uint64_t seed) : state_(seed) {}
    // A float in [low, high).
    float next(float low, float high);

private:
    std::uint64_t state_;
};

// The tensors a model trains. Declared once with their initial values (f32 master weights); each graph the
// model is built into (one per batch shape) gets them as graph::parameter inputs through in().
class parameter_set {
public:
    explicit parameter_set(std::uint64_t seed = 0) : generator_(seed) {}

    // Declares `name` with a copy of `initial` (converted to f32). Throws when the name is taken.
    void declare(std::string name, const host_tensor& initial, bool weight_decay = true);
    // Declares `name` with U(-bound, bound) values from this set's generator, unless it is already declared
    // (a model built again for another batch shape declares nothing new).
    void declare_uniform(std::string name, const dims& shape, float bound, bool weight_decay = true);
    // Declares `name` filled with `fill` unless already declared.
    void declare_filled(std::string name, const dims& shape, float fill, bool weight_decay = true);
    [[nodiscard]] bool contains(std::string_view name) const;

    // The parameter input `name` of graph g (made on first use in that graph). Throws for an undeclared name.
    value in(graph& g, std::string_view name) const;

    // The declared tensors in declaration order; their values are the master weights the optimizer updates.
    [[nodiscard]] const std::vector<parameter>& parameters() const noexcept { return parameters_; }
    [[nodiscard]] std::vector<parameter>& parameters() noexcept { return parameters_; }
    [[nodiscard]] const host_tensor& value_of(std::string_view name) const;

private:
    uniform_generator generator_;
    std::vector<parameter> parameters_;
};

// x [..., in] -> [..., out]: weight [out, in] and bias [out] named "<name>.weight" and "<name>.bias" (the
// bias is kept out of weight decay, as Hugging Face's Trainer does).
[[nodiscard]] value linear(graph& g, parameter_set& params, const std::string& name, const value& x,
                           std::int64_t out_features, bool bias = true);

// x [N, C, H, W] -> [N, out, H', W'] with a square kernel, weight "<name>.weight" [out, C, k, k] and bias.
[[nodiscard]] value conv2d(graph& g, parameter_set& params, const std::string& name, const value& x,
                           std::int64_t out_channels, std::int64_t kernel, std::int64_t stride = 1,
                           std::int64_t padding = 0, bool bias = true);

// GroupNorm over x [N, C, ...] built from reshape, reductions and elementwise ops (each differentiable on
// every backend, where the fused op's backward would not run on the Neural Engine): per group, (x - mean) /
// sqrt(biased variance + eps), then "<name>.weight" (ones) and "<name>.bias" (zeros) per channel, both kept
// out of weight decay as norm parameters.
[[nodiscard]] value group_norm(graph& g, parameter_set& params, const std::string& name, const value& x,
                               std::int64_t groups, float epsilon = 1e-5f);

// conv2d (3x3, padding 1, no bias), group_norm, ReLU.
[[nodiscard]] value conv_block(graph& g, parameter_set& params, const std::string& name, const value& x,
                               std::int64_t out_channels, std::int64_t groups);

// A small CIFAR-style classifier: per width, conv_block then 2x2 max pooling; the spatial mean; a linear
// head. x [N, C, H, W] -> logits [N, classes].
[[nodiscard]] value cifar_cnn(graph& g, parameter_set& params, const value& x,
                              std::span<const std::int64_t> widths, std::int64_t classes,
                              std::int64_t groups = 4);

}  // namespace anvil::train

#if ANVIL_DEFINITIONS
#include "anvil/train/layers-inl.hpp"
#endif
