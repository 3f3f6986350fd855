// anvil: blocks's definitions (see blocks.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <cmath>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/expr/expr.hpp"
#include "anvil/models/common/blocks.hpp"

namespace anvil::models {

ANVIL_INLINE activation parse_activation(std::string_view name) {
    if (name == "gelu") return activation::gelu;
    if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast")
        return activation::gelu_tanh;
    if (name == "quick_gelu") return activation::quick_gelu;
    if (name == "relu") return activation::relu;
    if (name == "silu" || name == "swish") return activation::silu;
    throw unsupported_error(
        anvil::detail::message("hidden_act '", name,
                               "' is not supported (gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, "
                               "quick_gelu, relu, silu, swish)"));
}

ANVIL_INLINE tensor<float> activate(const tensor<float>& x, activation kind) {
    switch (kind) {
        case activation::gelu:
            return gelu(x);
        case activation::gelu_tanh:
            return gelu(x, gelu_approximation::tanh);
        case activation::quick_gelu:
            return quick_gelu(x);
        case activation::relu:
            return relu(x);
        case activation::silu:
            return silu(x);
    }
    throw error("activate: unknown activation");
}

ANVIL_INLINE linear_layer load_linear(weight_loader& weights, const std::string& prefix, std::int64_t out,
                                      std::int64_t in, bool with_bias) {
    linear_layer layer{weights.load(prefix + ".weight", dims{out, in}, weight_role::linear_weight),
                       std::nullopt};
    if (with_bias) layer.bias = weights.load(prefix + ".bias", dims{out});
    return layer;
}

ANVIL_INLINE tensor<float> apply(const linear_layer& layer, const tensor<float>& x) {
    return layer.bias ? linear(x, layer.weight, *layer.bias) : linear(x, layer.weight);
}

ANVIL_INLINE norm_layer load_layer_norm(weight_loader& weights, const std::string& prefix, std::int64_t size,
                                        double epsilon) {
    return {norm_layer::kind::layer_norm, weights.load(prefix + ".weight", dims{size}),
            weights.load(prefix + ".bias", dims{size}), epsilon};
}

ANVIL_INLINE tensor<float> apply(const norm_layer& norm, const tensor<float>& x) {
    if (norm.type == norm_layer::kind::rms_norm) return rms_norm(x, norm.weight, norm.epsilon);
    return norm.bias ? layer_norm(x, norm.weight, *norm.bias, norm.epsilon)
                     : layer_norm(x, norm.weight, std::nullopt, norm.epsilon);
}

ANVIL_INLINE batch_norm_pass train_mode_batch_norm(weight_loader& weights, const std::string& norm,
                                                   const tensor<float>& x, double epsilon) {
    const dims xs = x.shape();
    if (xs.rank() != 4) {
        throw shape_error(
            anvil::detail::message("BatchNorm ", norm, ": the input must be [N, C, H, W], got ", xs));
    }
    const std::int64_t channels = xs[1], count = xs[0] * xs[2] * xs[3];
    if (count < 2) {
        throw shape_error(anvil::detail::message("BatchNorm ", norm,
                                                 " in train mode needs more than 1 value per channel, got "
                                                 "input size ",
                                                 xs));
    }
    const std::vector<std::int64_t> per_channel{1, channels, 1, 1};
    const tensor<float> weight = reshape(weights.load(norm + ".weight", dims{channels}), per_channel);
    const tensor<float> bias = reshape(weights.load(norm + ".bias", dims{channels}), per_channel);
    const tensor<float> mean = anvil::mean(x, {0, 2, 3}, true);
    const tensor<float> centred = x - mean;
    const tensor<float> variance = anvil::mean(centred * centred, {0, 2, 3}, true);
    // The scale is per channel, [1, C, 1, 1]: one multiply of the whole activation instead of two.
    const tensor<float> scale = rsqrt(variance + static_cast<float>(epsilon)) * weight;
    const std::vector<std::int64_t> flat{channels};
    return {centred * scale + bias, {norm, reshape(mean, flat), reshape(variance, flat), count}};
}

ANVIL_INLINE tensor<float> eval_mode_batch_norm(weight_loader& weights, const std::string& norm,
                                                const tensor<float>& x, double epsilon) {
    const dims xs = x.shape();
    if (xs.rank() != 4) {
        throw shape_error(
            anvil::detail::message("BatchNorm ", norm, ": the input must be [N, C, H, W], got ", xs));
    }
    const std::int64_t channels = xs[1];
    const auto per_channel = [&](const char* suffix) {
        return reshape(weights.load(norm + suffix, dims{channels}),
                       std::vector<std::int64_t>{1, channels, 1, 1});
    };
    const tensor<float> scale =
        rsqrt(per_channel(".running_var") + static_cast<float>(epsilon)) * per_channel(".weight");
    return (x - per_channel(".running_mean")) * scale + per_channel(".bias");
}

}  // namespace anvil::models

namespace anvil::models::recipe_detail {

ANVIL_INLINE tensor<float> split_heads(const tensor<float>& x, std::int64_t heads, std::int64_t head_dim) {
    const dims& s = x.shape();
    return permute(reshape(x, std::vector<std::int64_t>{s[0], s[1], heads, head_dim}), {0, 2, 1, 3});
}

ANVIL_INLINE tensor<float> merge_heads(const tensor<float>& x) {
    const dims& s = x.shape();
    return reshape(permute(x, {0, 2, 1, 3}), std::vector<std::int64_t>{s[0], s[2], s[1] * s[3]});
}

ANVIL_INLINE tensor<float> l2_normalized_rows(const tensor<float>& x) {
    return x / clamp(sqrt(sum(x * x, {1}, true)), 1e-12, 3.0e38);
}

}  // namespace anvil::models::recipe_detail

namespace anvil::models {

ANVIL_INLINE dropout_layer load_dropout(const weight_loader& weights, double probability) {
    return {probability, weights.dropout()};
}

ANVIL_INLINE tensor<float> apply(const dropout_layer& dropout, const tensor<float>& x) {
    return dropout.active() ? dropout.hook(x, dropout.probability) : x;
}

ANVIL_INLINE tensor<float> self_attention(const attention_layer& layer, const tensor<float>& x,
                                          const std::optional<tensor<float>>& mask,
                                          const attention_options& options) {
    if (x.rank() != 3) {
        throw shape_error(
            anvil::detail::message("self_attention: expected x [batch, sequence, hidden], got ", x.shape()));
    }
    const auto q = recipe_detail::split_heads(apply(layer.query, x), layer.heads, layer.head_dim);
    const auto k = recipe_detail::split_heads(apply(layer.key, x), layer.kv_heads, layer.head_dim);
    const auto v = recipe_detail::split_heads(apply(layer.value, x), layer.kv_heads, layer.head_dim);
    tensor<float> context;
    if (layer.probability_dropout.active()) {
        // Dropout acts on the probabilities between the softmax and the product with the values, inside the
        // fused attention op: training spells the attention out in the same order as Hugging Face's eager
        // attention (scores * scale + mask, softmax over the keys, dropout, times the values). Every op
        // there has its derivative and runs on every backend.
        if (options.causal || layer.kv_heads != layer.heads) {
            throw unsupported_error(
                "self_attention: attention dropout with causal or grouped-query attention is not supported");
        }
        const double scale =
            options.scale > 0.0 ? options.scale : 1.0 / std::sqrt(static_cast<double>(layer.head_dim));
        tensor<float> scores = matmul(q, k, matmul_options{.transpose_b = true}) * static_cast<float>(scale);
        if (mask) scores = scores + *mask;
        context = matmul(apply(layer.probability_dropout, softmax(scores, -1)), v);
    } else {
        context = mask ? attention(q, k, v, *mask, options) : attention(q, k, v, options);
    }
    return apply(layer.output_dropout, apply(layer.output, recipe_detail::merge_heads(context)));
}

ANVIL_INLINE tensor<float> cross_attention(const attention_layer& layer, const tensor<float>& x,
                                           const tensor<float>& keys, const tensor<float>& values) {
    const auto q = recipe_detail::split_heads(apply(layer.query, x), layer.heads, layer.head_dim);
    return apply(layer.output, recipe_detail::merge_heads(attention(q, keys, values)));
}

ANVIL_INLINE tensor<float> apply(const mlp_layer& mlp, const tensor<float>& x) {
    const tensor<float> inner = mlp.gate ? activate(apply(*mlp.gate, x), mlp.act) * apply(mlp.up, x)
                                         : activate(apply(mlp.up, x), mlp.act);
    return apply(mlp.output_dropout, apply(mlp.down, inner));
}

ANVIL_INLINE tensor<float> apply(const post_norm_encoder_layer& layer, const tensor<float>& x,
                                 const std::optional<tensor<float>>& mask) {
    const auto h = apply(layer.attention_norm, x + self_attention(layer.attention, x, mask));
    return apply(layer.output_norm, h + apply(layer.mlp, h));
}

ANVIL_INLINE tensor<float> apply(const pre_norm_encoder_layer& layer, const tensor<float>& x,
                                 const std::optional<tensor<float>>& mask, const attention_options& options) {
    const auto h = x + self_attention(layer.attention, apply(layer.attention_norm, x), mask, options);
    return h + apply(layer.mlp, apply(layer.mlp_norm, h));
}

ANVIL_INLINE tensor<float> rotate_half_rows(const tensor<float>& x, const tensor<float>& cos,
                                            const tensor<float>& sin) {
    const std::int64_t d = x.shape()[3];
    const std::int64_t half = cos.shape()[3];
    if (2 * half > d) {
        throw shape_error(anvil::detail::message("rotary: tables of ", half, " frequencies rotate ", 2 * half,
                                                 " features, but a head has ", d));
    }
    const auto x1 = slice(x, 3, 0, half);
    const auto x2 = slice(x, 3, half, 2 * half);
    std::vector<tensor<float>> parts{x1 * cos - x2 * sin, x2 * cos + x1 * sin};
    if (2 * half < d) parts.push_back(slice(x, 3, 2 * half, d));
    return concat(parts, 3);
}

ANVIL_INLINE decoder_layer_result cached_self_attention(const attention_layer& a, const tensor<float>& h,
                                                        const std::vector<tensor<float>>& earlier_keys,
                                                        const std::vector<tensor<float>>& earlier_values,
                                                        const tensor<float>& mask,
                                                        const cached_attention_options& options) {
    auto q = recipe_detail::split_heads(apply(a.query, h), a.heads, a.head_dim);
    auto k = recipe_detail::split_heads(apply(a.key, h), a.kv_heads, a.head_dim);
    const auto v = recipe_detail::split_heads(apply(a.value, h), a.kv_heads, a.head_dim);
    if (options.query_norm) q = apply(*options.query_norm, q);
    if (options.key_norm) k = apply(*options.key_norm, k);
    if (options.rope) {
        q = rotate_half_rows(q, options.rope->first, options.rope->second);
        k = rotate_half_rows(k, options.rope->first, options.rope->second);
    }
    std::vector<tensor<float>> key_parts = earlier_keys, value_parts = earlier_values;
    key_parts.push_back(k);
    value_parts.push_back(v);
    attention_options scaled;
    scaled.scale = options.scale;
    const auto context = attention(q, concat(key_parts, 2), concat(value_parts, 2), mask, scaled);
    return {apply(a.output, recipe_detail::merge_heads(context)), k, v};
}

ANVIL_INLINE decoder_layer_result apply(const decoder_layer& layer, const tensor<float>& x,
                                        const std::vector<tensor<float>>& earlier_keys,
                                        const std::vector<tensor<float>>& earlier_values,
                                        const tensor<float>& mask,
                                        const std::optional<std::pair<tensor<float>, tensor<float>>>& rope) {
    cached_attention_options options;
    options.query_norm = layer.query_norm ? &*layer.query_norm : nullptr;
    options.key_norm = layer.key_norm ? &*layer.key_norm : nullptr;
    options.rope = rope ? &*rope : nullptr;
    options.scale = layer.attention_scale;
    const decoder_layer_result attended = cached_self_attention(
        layer.attention, apply(layer.attention_norm, x), earlier_keys, earlier_values, mask, options);
    const auto out = x + attended.hidden;
    return {out + apply(layer.mlp, apply(layer.mlp_norm, out)), attended.key, attended.value};
}

ANVIL_INLINE decoder_layer_result apply(const decoder_layer& layer, const tensor<float>& x,
                                        const tensor<float>& cached_key, const tensor<float>& cached_value,
                                        const tensor<float>& mask,
                                        const std::optional<std::pair<tensor<float>, tensor<float>>>& rope) {
    return apply(layer, x, std::vector<tensor<float>>{cached_key}, std::vector<tensor<float>>{cached_value},
                 mask, rope);
}

}  // namespace anvil::models
