// anvil: the trainable-graph builders' definitions (see layers.hpp; compilation.hpp says when this file is
// compiled).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/train/layers.hpp"

namespace anvil::train {

ANVIL_INLINE float uniform_generator::next(float low, float high) {
    // splitmix64 (Steele, Lea, Flood 2014): a full-period 64-bit sequence with good equidistribution.
    state_ += 0x9e3779b97f4a7c15ULL;
    std::uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    const float unit = static_cast<float>(z >> 40) * 0x1.0p-24f;  // [0, 1), exact in float
    return low + (high - low) * unit;
}

ANVIL_INLINE void parameter_set::declare(std::string name, const host_tensor& initial, bool weight_decay) {
    if (contains(name)) {
        throw error(anvil::detail::message("parameter_set: '", name, "' is already declared"));
    }
    const std::vector<float> values = initial.to_f32();
    parameters_.push_back({std::move(name), host_tensor::from(values, initial.shape()), weight_decay});
}

ANVIL_INLINE void parameter_set::declare_uniform(std::string name, const dims& shape, float bound,
                                                 bool weight_decay) {
    if (contains(name)) return;
    std::vector<float> values(static_cast<std::size_t>(shape.element_count()));
    for (float& v : values)
        v = generator_.next(-bound, bound);
    parameters_.push_back({std::move(name), host_tensor::from(values, shape), weight_decay});
}

ANVIL_INLINE void parameter_set::declare_filled(std::string name, const dims& shape, float fill,
                                                bool weight_decay) {
    if (contains(name)) return;
    std::vector<float> values(static_cast<std::size_t>(shape.element_count()), fill);
    parameters_.push_back({std::move(name), host_tensor::from(values, shape), weight_decay});
}

ANVIL_INLINE bool parameter_set::contains(std::string_view name) const {
    return std::any_of(parameters_.begin(), parameters_.end(),
                       [&](const parameter& p) { return p.name == name; });
}

ANVIL_INLINE const host_tensor& parameter_set::value_of(std::string_view name) const {
    for (const parameter& p : parameters_)
        if (p.name == name) return p.value;
    throw error(anvil::detail::message("parameter_set: no parameter named '", name, "'"));
}

ANVIL_INLINE value parameter_set::in(graph& g, std::string_view name) const {
    const host_tensor& initial = value_of(name);
    for (const value& v : g.parameters())
        if (v.producer().name == name) return v;
    return g.parameter(std::string(name), dtype::f32, initial.shape());
}

ANVIL_INLINE value linear(graph& g, parameter_set& params, const std::string& name, const value& x,
                          std::int64_t out_features, bool bias) {
    const std::int64_t in_features = x.shape()[x.rank() - 1];
    const float bound = in_features > 0 ? 1.0f / std::sqrt(static_cast<float>(in_features)) : 0.0f;
    params.declare_uniform(name + ".weight", dims{out_features, in_features}, bound);
    std::vector<value> operands{x, params.in(g, name + ".weight")};
    if (bias) {
        params.declare_uniform(name + ".bias", dims{out_features}, bound, false);
        operands.push_back(params.in(g, name + ".bias"));
    }
    return g.apply(op::linear, operands);
}

ANVIL_INLINE value conv2d(graph& g, parameter_set& params, const std::string& name, const value& x,
                          std::int64_t out_channels, std::int64_t kernel, std::int64_t stride,
                          std::int64_t padding, bool bias) {
    const std::int64_t in_channels = x.shape()[1];
    const std::int64_t fan_in = in_channels * kernel * kernel;
    const float bound = fan_in > 0 ? 1.0f / std::sqrt(static_cast<float>(fan_in)) : 0.0f;
    params.declare_uniform(name + ".weight", dims{out_channels, in_channels, kernel, kernel}, bound);
    std::vector<value> operands{x, params.in(g, name + ".weight")};
    if (bias) {
        params.declare_uniform(name + ".bias", dims{out_channels}, bound, false);
        operands.push_back(params.in(g, name + ".bias"));
    }
    attributes attrs;
    attrs.stride = {stride, stride};
    attrs.padding = {padding, padding, padding, padding};
    return g.apply(op::conv2d, operands, attrs);
}

ANVIL_INLINE value group_norm(graph& g, parameter_set& params, const std::string& name, const value& x,
                              std::int64_t groups, float epsilon) {
    const dims xs = x.shape();
    if (xs.rank() < 2)
        throw shape_error(
            anvil::detail::message("group_norm '", name, "': the input must be [N, C, ...], got ", xs));
    const std::int64_t batch = xs[0], channels = xs[1];
    if (groups <= 0 || channels % groups != 0) {
        throw shape_error(anvil::detail::message("group_norm '", name, "': ", channels, " channels of ", xs,
                                                 " do not split into ", groups, " groups"));
    }
    const std::int64_t per_group =
        batch * channels == 0 ? 0 : static_cast<std::int64_t>(xs.element_count()) / (batch * groups);
    attributes grouped;
    grouped.sizes = {batch, groups, per_group};
    const value v = g.apply(op::reshape, {x}, grouped);
    attributes over_group;
    over_group.axes = {2};
    over_group.keep_dims = true;
    const value centred = g.apply(op::sub, {v, g.apply(op::reduce_mean, {v}, over_group)});
    const value variance = g.apply(op::reduce_mean, {g.apply(op::mul, {centred, centred})}, over_group);
    const value rstd = g.apply(op::rsqrt, {g.apply(op::add, {variance, g.scalar(epsilon, x.type())})});
    attributes back;
    back.sizes.assign(xs.begin(), xs.end());
    const value normalised = g.apply(op::reshape, {g.apply(op::mul, {centred, rstd})}, back);
    params.declare_filled(name + ".weight", dims{channels}, 1.0f, false);
    params.declare_filled(name + ".bias", dims{channels}, 0.0f, false);
    attributes per_channel;
    std::vector<std::int64_t> channel_shape(xs.rank(), 1);
    channel_shape[1] = channels;
    per_channel.sizes = channel_shape;
    const value weight = g.apply(op::reshape, {params.in(g, name + ".weight")}, per_channel);
    const value bias = g.apply(op::reshape, {params.in(g, name + ".bias")}, per_channel);
    return g.apply(op::add, {g.apply(op::mul, {normalised, weight}), bias});
}

ANVIL_INLINE value conv_block(graph& g, parameter_set& params, const std::string& name, const value& x,
                              std::int64_t out_channels, std::int64_t groups) {
    const value conv = conv2d(g, params, name + ".conv", x, out_channels, 3, 1, 1, false);
    return g.apply(op::relu, {group_norm(g, params, name + ".norm", conv, groups)});
}

ANVIL_INLINE value cifar_cnn(graph& g, parameter_set& params, const value& x,
                             std::span<const std::int64_t> widths, std::int64_t classes,
                             std::int64_t groups) {
    value h = x;
    for (std::size_t i = 0; i < widths.size(); ++i) {
        h = conv_block(g, params, "block" + std::to_string(i), h, widths[i], std::min(groups, widths[i]));
        attributes pool;
        pool.kernel = {2, 2};
        pool.stride = {2, 2};
        h = g.apply(op::max_pool2d, {h}, pool);
    }
    attributes spatial;
    spatial.axes = {2, 3};
    const value features = g.apply(op::reduce_mean, {h}, spatial);
    return linear(g, params, "head", features, classes);
}

}  // namespace anvil::train
