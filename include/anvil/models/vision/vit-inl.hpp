// anvil: vit's definitions (see vit.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "anvil/backend/compile.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/json.hpp"
#include "anvil/expr/expr.hpp"
#include "anvil/io/checkpoint.hpp"
#include "anvil/models/common/lora_adapter.hpp"
#include "anvil/models/vision/vit.hpp"

namespace anvil::models {

ANVIL_INLINE vit_config vit_config::from_json(const config_reader& config) {
    vit_config c;
    c.model_type = config.string("model_type", "");
    if (c.model_type != "vit" && c.model_type != "deit") {
        throw unsupported_error(anvil::detail::message(config.source(), ": model_type '", c.model_type,
                                                       "' is not a ViT or DeiT model (\"vit\", \"deit\")"));
    }
    c.layers = config.integer("num_hidden_layers", c.layers);
    c.hidden = config.integer("hidden_size", c.hidden);
    c.heads = config.integer("num_attention_heads", c.heads);
    c.intermediate = config.integer("intermediate_size", c.intermediate);
    c.channels = config.integer("num_channels", c.channels);
    c.layer_norm_eps = config.positive_number("layer_norm_eps", c.layer_norm_eps);
    c.qkv_bias = config.boolean("qkv_bias", c.qkv_bias);
    c.act = parse_activation(config.string("hidden_act", "gelu"));
    c.hidden_dropout = config.probability("hidden_dropout_prob", c.hidden_dropout);
    c.attention_dropout = config.probability("attention_probs_dropout_prob", c.attention_dropout);
    std::tie(c.image_height, c.image_width) = extents(config, "image_size", 224);
    std::tie(c.patch_height, c.patch_width) = extents(config, "patch_size", 16);
    if (c.hidden % c.heads != 0) {
        throw format_error(anvil::detail::message(config.source(), ": hidden_size ", c.hidden,
                                                  " is not a multiple of num_attention_heads ", c.heads));
    }
    if (c.patch_height > c.image_height || c.patch_width > c.image_width) {
        throw format_error(anvil::detail::message(config.source(), ": patch_size ", c.patch_height, " x ",
                                                  c.patch_width, " is larger than image_size ",
                                                  c.image_height, " x ", c.image_width));
    }
    return c;
}

ANVIL_INLINE std::pair<std::int64_t, std::int64_t> vit_config::extents(const config_reader& config,
                                                                       std::string_view key,
                                                                       std::int64_t fallback) {
    const json::value* v = config.find(key);
    if (v == nullptr || !v->is_array()) {
        const std::int64_t size = config.integer(key, fallback);
        return {size, size};
    }
    const auto pair = config.integers(key, 1);
    if (pair.size() != 2) {
        throw format_error(anvil::detail::message(
            config.source(), ": '", key, "' must be a number or [height, width], got ", json::dump(*v)));
    }
    return {pair[0], pair[1]};
}

}  // namespace anvil::models

namespace anvil::models::recipe_detail {

ANVIL_INLINE std::pair<vit_head, std::int64_t> vit_head_of(const checkpoint& weights, const vit_config& c) {
    const std::string where = weights.path().string();
    const std::string prefix = c.model_type + ".";
    const std::string kind = c.distilled() ? "DeiT" : "ViT";
    if (!weights.contains(prefix + "embeddings.cls_token") && weights.contains("embeddings.cls_token")) {
        throw unsupported_error(anvil::detail::message(
            where, ": this is a bare ", kind, "Model checkpoint (tensors 'embeddings.*'",
            weights.contains("pooler.dense.weight") ? " and its pooler 'pooler.dense.*'" : "",
            " without the '", prefix, "' prefix and no classification head), not an image classifier (", kind,
            "ForImageClassification)"));
    }
    auto classes = [&](const std::string& name) {
        const dims shape(weights.tensor(name).shape());
        if (shape.rank() != 2) {
            throw shape_error(anvil::detail::message(
                where, ": tensor '", name, "': expected shape [classes, ", c.hidden, "], got ", shape));
        }
        return shape[0];
    };
    if (c.distilled() && weights.contains("cls_classifier.weight") &&
        weights.contains("distillation_classifier.weight")) {
        return {vit_head::cls_and_distillation, classes("cls_classifier.weight")};
    }
    if (weights.contains("classifier.weight")) return {vit_head::cls, classes("classifier.weight")};
    throw unsupported_error(anvil::detail::message(
        where, ": no classification head: expected the tensor 'classifier.weight' (", kind,
        "ForImageClassification)",
        c.distilled() ? " or 'cls_classifier.weight' and 'distillation_classifier.weight' "
                        "(DeiTForImageClassificationWithTeacher)"
                      : "",
        weights.contains(prefix + "pooler.dense.weight") ? "; the checkpoint has a pooler instead" : ""));
}

}  // namespace anvil::models::recipe_detail

namespace anvil::models {

ANVIL_INLINE pre_norm_encoder_layer load_vit_layer(weight_loader& weights, const vit_config& c,
                                                   std::int64_t index) {
    const std::string p = c.model_type + ".encoder.layer." + std::to_string(index) + ".";
    pre_norm_encoder_layer layer;
    layer.attention_norm = load_layer_norm(weights, p + "layernorm_before", c.hidden, c.layer_norm_eps);
    layer.attention.query =
        load_linear(weights, p + "attention.attention.query", c.hidden, c.hidden, c.qkv_bias);
    layer.attention.key = load_linear(weights, p + "attention.attention.key", c.hidden, c.hidden, c.qkv_bias);
    layer.attention.value =
        load_linear(weights, p + "attention.attention.value", c.hidden, c.hidden, c.qkv_bias);
    layer.attention.output = load_linear(weights, p + "attention.output.dense", c.hidden, c.hidden);
    layer.attention.heads = c.heads;
    layer.attention.kv_heads = c.heads;
    layer.attention.head_dim = c.hidden / c.heads;
    layer.attention.probability_dropout = load_dropout(weights, c.attention_dropout);
    layer.attention.output_dropout = load_dropout(weights, c.hidden_dropout);
    layer.mlp_norm = load_layer_norm(weights, p + "layernorm_after", c.hidden, c.layer_norm_eps);
    layer.mlp.up = load_linear(weights, p + "intermediate.dense", c.intermediate, c.hidden);
    layer.mlp.down = load_linear(weights, p + "output.dense", c.hidden, c.intermediate);
    layer.mlp.act = c.act;
    layer.mlp.output_dropout = load_dropout(weights, c.hidden_dropout);
    return layer;
}

ANVIL_INLINE vit_weights load_vit_weights(weight_loader& weights, const vit_config& c, vit_head head,
                                          std::int64_t classes) {
    const std::string e = c.model_type + ".embeddings.";
    vit_weights w;
    w.cls_token = weights.load(e + "cls_token", dims{1, 1, c.hidden});
    if (c.distilled()) w.distillation_token = weights.load(e + "distillation_token", dims{1, 1, c.hidden});
    w.position_embeddings = weights.load(e + "position_embeddings", dims{1, c.tokens(), c.hidden});
    w.patch_weight = weights.load(e + "patch_embeddings.projection.weight",
                                  dims{c.hidden, c.channels, c.patch_height, c.patch_width});
    w.patch_bias = weights.load(e + "patch_embeddings.projection.bias", dims{c.hidden});
    w.embedding_dropout = load_dropout(weights, c.hidden_dropout);
    for (std::int64_t i = 0; i < c.layers; ++i)
        w.layers.push_back(load_vit_layer(weights, c, i));
    w.final_norm = load_layer_norm(weights, c.model_type + ".layernorm", c.hidden, c.layer_norm_eps);
    if (head == vit_head::cls_and_distillation) {
        w.classifier = load_linear(weights, "cls_classifier", classes, c.hidden);
        w.distillation_classifier = load_linear(weights, "distillation_classifier", classes, c.hidden);
    } else {
        w.classifier = load_linear(weights, "classifier", classes, c.hidden);
    }
    return w;
}

}  // namespace anvil::models

namespace anvil::models::recipe_detail {

ANVIL_INLINE void check_vit_pixels(const vit_config& c, const dims& shape) {
    if (shape.rank() != 4 || shape[0] < 1 || shape[1] != c.channels) {
        throw shape_error(anvil::detail::message(c.model_type, ": expected pixels [batch, ", c.channels, ", ",
                                                 c.image_height, ", ", c.image_width, "], got ", shape));
    }
    if (shape[2] != c.image_height || shape[3] != c.image_width) {
        throw shape_error(
            anvil::detail::message(c.model_type, ": the image is ", shape[2], " x ", shape[3],
                                   " but the model takes ", c.image_height, " x ", c.image_width,
                                   " (config.json image_size); resize the image to the model's size"));
    }
}

}  // namespace anvil::models::recipe_detail

namespace anvil::models {

ANVIL_INLINE tensor<float> vit_logits(const vit_weights& w, const vit_config& c,
                                      const tensor<float>& pixels) {
    const dims shape = pixels.shape();
    recipe_detail::check_vit_pixels(c, shape);
    const std::int64_t batch = shape[0];
    const std::int64_t prefix = c.prefix_tokens();

    // [N, hidden, H / ph, W / pw] -> [N, patches, hidden]
    const tensor<float> grid = conv2d(pixels, w.patch_weight, w.patch_bias,
                                      conv2d_options{.stride = {c.patch_height, c.patch_width}});
    const tensor<float> patches =
        permute(reshape(grid, std::vector<std::int64_t>{batch, c.hidden, c.patches()}), {0, 2, 1}) +
        slice(w.position_embeddings, 1, prefix, end_of_axis);

    // The prefix tokens with their positions added once, then repeated over the batch: the same sums
    // as adding the position embeddings after the concatenation.
    std::vector<tensor<float>> special{w.cls_token};
    if (w.distillation_token) special.push_back(*w.distillation_token);
    tensor<float> joined = special.front();
    if (special.size() > 1) joined = concat(special, 1);
    const tensor<float> positioned = joined + slice(w.position_embeddings, 1, 0, prefix);
    const std::vector<tensor<float>> copies(static_cast<std::size_t>(batch), positioned);
    const tensor<float> prefix_tokens = batch == 1 ? positioned : concat(copies, 0);

    tensor<float> h =
        apply(w.embedding_dropout, concat(std::vector<tensor<float>>{prefix_tokens, patches}, 1));
    for (const auto& layer : w.layers)
        h = apply(layer, h, std::nullopt);

    // The final layernorm is per token, so only the tokens the heads read need it.
    const tensor<float> read = apply(w.final_norm, slice(h, 1, 0, prefix));
    auto token = [&](std::int64_t index) {
        return reshape(slice(read, 1, index, index + 1), std::vector<std::int64_t>{batch, c.hidden});
    };
    if (!w.distillation_classifier) return apply(w.classifier, token(0));
    return (apply(w.classifier, token(0)) + apply(*w.distillation_classifier, token(1))) * 0.5f;
}

ANVIL_INLINE vit vit::load(const std::filesystem::path& folder, const load_options& given) {
    const load_options options = with_model_source(given, folder);
    const json::value document = config_reader::read_file(folder / "config.json");
    const config_reader reader(document, (folder / "config.json").string());
    vit result;
    result.config_ = vit_config::from_json(reader);
    auto weights = open_weights(folder, options);
    const auto found = recipe_detail::vit_head_of(*weights, result.config_);
    const vit_head head = found.first;
    const std::int64_t classes = found.second;
    result.head_ = head;
    result.labels_ = reader.labels(classes);
    // Every tensor is looked up and its shape checked now, so a folder that does not fit fails at load.
    {
        weight_loader check(graph{}, weights);
        static_cast<void>(load_vit_weights(check, result.config_, head, classes));
    }
    result.programs_ = std::make_unique<compiled_shapes>(
        options.compile,
        [config = result.config_, weights, head, classes](
            graph& g, std::span<const std::int64_t> key) -> std::vector<value> {
            weight_loader loader(g, weights);
            const vit_weights w = load_vit_weights(loader, config, head, classes);
            const auto pixels = g.input<float>(
                "pixels", dims{key[0], config.channels, config.image_height, config.image_width});
            return {vit_logits(w, config, pixels)};
        });
    return result;
}

ANVIL_INLINE host_tensor vit::logits(const host_tensor& pixels) {
    recipe_detail::check_vit_pixels(config_, pixels.shape());
    if (pixels.type() != dtype::f32) {
        throw type_error(anvil::detail::message("vit: expected f32 pixels, got ", dtype_name(pixels.type())));
    }
    program& p = programs_->at({pixels.shape()[0]});
    return p.run({{"pixels", pixels}}).front();
}

}  // namespace anvil::models
