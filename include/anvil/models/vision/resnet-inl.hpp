// anvil: resnet's definitions (see resnet.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/core/json.hpp"
#include "anvil/expr/expr.hpp"
#include "anvil/io/checkpoint.hpp"
#include "anvil/models/common/lora_adapter.hpp"
#include "anvil/models/common/weights.hpp"
#include "anvil/models/vision/resnet.hpp"

namespace anvil::detail {

ANVIL_INLINE std::string resnet_names::stem_convolution() const {
    return huggingface ? "resnet.embedder.embedder.convolution.weight" : "conv1.weight";
}

ANVIL_INLINE std::string resnet_names::stem_norm() const {
    return huggingface ? "resnet.embedder.embedder.normalization" : "bn1";
}

ANVIL_INLINE std::string resnet_names::block(std::size_t stage, std::int64_t index) const {
    return huggingface
               ? "resnet.encoder.stages." + std::to_string(stage) + ".layers." + std::to_string(index) + "."
               : "layer" + std::to_string(stage + 1) + "." + std::to_string(index) + ".";
}

ANVIL_INLINE std::string resnet_names::convolution(const std::string& block_prefix, std::size_t k) const {
    return block_prefix + (huggingface ? "layer." + std::to_string(k) + ".convolution.weight"
                                       : "conv" + std::to_string(k + 1) + ".weight");
}

ANVIL_INLINE std::string resnet_names::norm(const std::string& block_prefix, std::size_t k) const {
    return block_prefix +
           (huggingface ? "layer." + std::to_string(k) + ".normalization" : "bn" + std::to_string(k + 1));
}

ANVIL_INLINE std::string resnet_names::shortcut_convolution(const std::string& block_prefix) const {
    return block_prefix + (huggingface ? "shortcut.convolution.weight" : "downsample.0.weight");
}

ANVIL_INLINE std::string resnet_names::shortcut_norm(const std::string& block_prefix) const {
    return block_prefix + (huggingface ? "shortcut.normalization" : "downsample.1");
}

ANVIL_INLINE std::int64_t resnet_extent(const checkpoint& weights, const std::string& name, std::size_t rank,
                                        std::size_t axis) {
    const tensor_view& view = weights.tensor(name);
    if (view.rank() != rank) {
        throw shape_error(message(view.source_name(), ": tensor '", name, "': expected rank ", rank,
                                  ", got shape ", dims(view.shape())));
    }
    if (view.shape()[axis] < 1) {
        throw shape_error(message(view.source_name(), ": tensor '", name, "': shape ", dims(view.shape()),
                                  " has an empty axis ", axis));
    }
    return view.shape()[axis];
}

ANVIL_INLINE void infer_resnet_architecture(const checkpoint& weights, const resnet_names& names,
                                            models::resnet_config& c) {
    c.stem_channels = resnet_extent(weights, names.stem_convolution(), 4, 0);
    c.channels = resnet_extent(weights, names.stem_convolution(), 4, 1);
    c.bottleneck = weights.contains(names.convolution(names.block(0, 0), 2));
    const std::size_t last = c.bottleneck ? 2 : 1;
    for (std::size_t stage = 0; weights.contains(names.convolution(names.block(stage, 0), 0)); ++stage) {
        std::int64_t depth = 0;
        while (weights.contains(names.convolution(names.block(stage, depth), 0)))
            ++depth;
        c.depths.push_back(depth);
        const std::string first = names.block(stage, 0);
        c.widths.push_back(resnet_extent(weights, names.convolution(first, last), 4, 0));
        c.inner_widths.push_back(c.bottleneck ? resnet_extent(weights, names.convolution(first, 0), 4, 0)
                                              : 0);
    }
    if (c.depths.empty()) {
        throw format_error(message(weights.path().string(), ": the tensor '",
                                   names.convolution(names.block(0, 0), 0),
                                   "' is missing: a ResNet needs at least one stage of blocks"));
    }
    if (c.bottleneck) {
        const std::string name = names.convolution(names.block(0, 0), 1);
        const std::int64_t per_group = resnet_extent(weights, name, 4, 1);
        if (per_group <= 0 || c.inner_widths[0] % per_group != 0) {
            throw shape_error(message(
                weights.tensor(name).source_name(), ": tensor '", name, "': ", per_group,
                " input channels per group do not divide the block's ", c.inner_widths[0], " channels"));
        }
        c.groups = c.inner_widths[0] / per_group;
    }
    c.classes = resnet_extent(weights, names.classifier() + ".weight", 2, 0);
}

ANVIL_INLINE void read_resnet_config(const models::config_reader& config, const checkpoint& weights,
                                     const resnet_names& names, models::resnet_config& c) {
    c.channels = config.integer("num_channels", 3);
    c.stem_channels = config.integer("embedding_size", 64);
    c.widths = config.integers("hidden_sizes", 1);
    c.depths = config.integers("depths", 1);
    if (!config.contains("hidden_sizes")) c.widths = {256, 512, 1024, 2048};
    if (!config.contains("depths")) c.depths = {3, 4, 6, 3};
    if (c.depths.empty() || c.depths.size() != c.widths.size()) {
        throw format_error(message(config.source(), ": 'depths' lists ", c.depths.size(),
                                   " stages and 'hidden_sizes' ", c.widths.size(),
                                   " (expected the same number, at least one)"));
    }
    const std::string layer_type = config.string("layer_type", "bottleneck");
    if (layer_type != "basic" && layer_type != "bottleneck") {
        throw format_error(message(
            config.source(), ": 'layer_type' must be \"basic\" or \"bottleneck\", got \"", layer_type, "\""));
    }
    c.bottleneck = layer_type == "bottleneck";
    for (const std::int64_t width : c.widths) {
        if (c.bottleneck && width < 4) {
            throw format_error(message(config.source(), ": 'hidden_sizes' entry ", width,
                                       " is too small for a bottleneck block (it reduces the width by 4)"));
        }
        c.inner_widths.push_back(c.bottleneck ? width / 4 : 0);
    }
    c.act = models::parse_activation(config.string("hidden_act", "relu"));
    c.downsample_in_first_stage = config.boolean("downsample_in_first_stage", false);
    c.downsample_in_bottleneck = config.boolean("downsample_in_bottleneck", false);
    c.classes = resnet_extent(weights, names.classifier() + ".weight", 2, 0);
    // Layers the config does not describe would be silently dropped; refuse them instead.
    const auto refuse_extra = [&](const std::string& extra, std::string_view what) {
        if (weights.contains(extra)) {
            throw format_error(
                message(config.source(), ": ", what, ", but the checkpoint also has '", extra, "'"));
        }
    };
    for (std::size_t stage = 0; stage < c.depths.size(); ++stage) {
        refuse_extra(names.convolution(names.block(stage, c.depths[stage]), 0),
                     message("'depths' gives stage ", stage, " ", c.depths[stage], " layers"));
    }
    refuse_extra(names.convolution(names.block(c.depths.size(), 0), 0),
                 message("'depths' lists ", c.depths.size(), " stages"));
}

ANVIL_INLINE resnet_convolution describe_resnet_convolution(std::string weight, std::string norm,
                                                            const dims& shape, std::int64_t stride,
                                                            std::int64_t groups) {
    resnet_convolution conv;
    conv.label = std::move(weight);
    conv.norm = std::move(norm);
    conv.shape = shape;
    conv.stride = stride;
    conv.padding = shape[2] / 2;
    conv.groups = groups;
    return conv;
}

ANVIL_INLINE std::vector<resnet_block> describe_resnet_blocks(const checkpoint& weights,
                                                              const resnet_names& names,
                                                              const models::resnet_config& c) {
    std::vector<resnet_block> blocks;
    std::int64_t in = c.stem_channels;
    for (std::size_t stage = 0; stage < c.depths.size(); ++stage) {
        const std::int64_t out = c.widths[stage];
        const std::int64_t inner = c.inner_widths[stage];
        for (std::int64_t index = 0; index < c.depths[stage]; ++index) {
            const std::int64_t stride = index == 0 && (stage > 0 || c.downsample_in_first_stage) ? 2 : 1;
            const std::string p = names.block(stage, index);
            resnet_block block;
            const auto layer = [&](std::size_t k, const dims& shape, std::int64_t layer_stride,
                                   std::int64_t groups) {
                block.layers.push_back(describe_resnet_convolution(names.convolution(p, k), names.norm(p, k),
                                                                   shape, layer_stride, groups));
            };
            if (c.bottleneck) {
                if (inner % c.groups != 0) {
                    throw format_error(message(weights.path().string(), ": block ", p, " has ", inner,
                                               " bottleneck channels, not a multiple of the ", c.groups,
                                               " groups"));
                }
                const std::int64_t first_stride = c.downsample_in_bottleneck ? stride : 1;
                layer(0, dims{inner, in, 1, 1}, first_stride, 1);
                layer(1, dims{inner, inner / c.groups, 3, 3}, stride / first_stride, c.groups);
                layer(2, dims{out, inner, 1, 1}, 1, 1);
            } else {
                layer(0, dims{out, in, 3, 3}, stride, 1);
                layer(1, dims{out, out, 3, 3}, 1, 1);
            }
            // The projection is taken from the weights present; without one the input must fit the output.
            const std::string projection = names.shortcut_convolution(p);
            if (weights.contains(projection)) {
                block.projection = describe_resnet_convolution(projection, names.shortcut_norm(p),
                                                               dims{out, in, 1, 1}, stride);
            } else if (in != out || stride != 1) {
                throw format_error(message(weights.path().string(), ": the tensor '", projection,
                                           "' is missing: block ", p, " maps ", in, " channels to ", out,
                                           " with stride ", stride, ", so its shortcut needs a projection"));
            }
            blocks.push_back(std::move(block));
            in = out;
        }
    }
    return blocks;
}

ANVIL_INLINE resnet_layout read_resnet_layout(const checkpoint& weights,
                                              const std::filesystem::path& folder) {
    const std::filesystem::path directory =
        std::filesystem::is_directory(folder) ? folder : folder.parent_path();
    const std::filesystem::path config_path = directory / "config.json";
    std::optional<json::value> document;
    if (std::filesystem::is_regular_file(config_path))
        document = models::config_reader::read_file(config_path);

    resnet_layout layout;
    models::resnet_config& c = layout.config;
    resnet_names& names = layout.names;
    if (weights.contains("resnet.embedder.embedder.convolution.weight")) {
        names.huggingface = true;
        c.naming = "huggingface";
    } else if (weights.contains("conv1.weight")) {
        c.naming = "torchvision";
    } else if (weights.contains("embedder.embedder.convolution.weight")) {
        throw format_error(
            message(folder.string(),
                    ": a Hugging Face ResNetModel without its classifier (tensor names lack the "
                    "'resnet.' prefix of ResNetForImageClassification); image classification "
                    "needs classifier.1.weight"));
    } else {
        throw format_error(
            message(folder.string(),
                    ": not a ResNet checkpoint: it has neither 'conv1.weight' (torchvision's "
                    "naming) nor 'resnet.embedder.embedder.convolution.weight' (Hugging Face's "
                    "ResNetForImageClassification)"));
    }
    std::optional<models::config_reader> config;
    if (document) config.emplace(*document, config_path.string());
    if (names.huggingface && config) {
        read_resnet_config(*config, weights, names, c);
    } else {
        infer_resnet_architecture(weights, names, c);
    }
    layout.stem = describe_resnet_convolution(names.stem_convolution(), names.stem_norm(),
                                              dims{c.stem_channels, c.channels, 7, 7}, 2);
    layout.blocks = describe_resnet_blocks(weights, names, c);

    const json::value* timm_cfg = document ? document->find("pretrained_cfg") : nullptr;
    if (config && !names.huggingface && document->find("num_classes") != nullptr) {
        // timm: num_classes must be the classifier's rows.
        const std::int64_t declared = config->integer("num_classes", c.classes);
        if (declared != c.classes) {
            throw format_error(message(config_path.string(), ": num_classes ", declared,
                                       " does not match the classifier's ", c.classes, " rows (",
                                       names.classifier(), ".weight)"));
        }
    }
    const json::value* label_names = timm_cfg ? timm_cfg->find("label_names") : nullptr;
    if (label_names && label_names->is_array() &&
        static_cast<std::int64_t>(label_names->as_array().size()) == c.classes &&
        std::all_of(label_names->as_array().begin(), label_names->as_array().end(),
                    [](const json::value& v) { return v.is_string(); })) {
        for (const json::value& label : label_names->as_array())  // timm's pretrained_cfg.label_names
            layout.labels.push_back(label.as_string());
    } else if (config) {
        layout.labels = config->labels(c.classes);
    } else {
        for (std::int64_t i = 0; i < c.classes; ++i)
            layout.labels.push_back("LABEL_" + std::to_string(i));
    }
    return layout;
}

ANVIL_INLINE void fold_resnet_convolution(const checkpoint& weights, resnet_convolution& conv, double eps) {
    conv.folded = models::fold_batch_norm(weights, conv.label, conv.norm, conv.shape, eps);
}

ANVIL_INLINE tensor<float> apply_resnet_convolution(graph& g, const resnet_convolution& conv,
                                                    const tensor<float>& x) {
    const auto weight = g.constant<float>(conv.folded.weight, conv.label);
    const auto bias = g.constant<float>(conv.folded.bias, conv.label + " (folded bias)");
    conv2d_options options;
    options.stride = size2d(conv.stride);
    options.padding = padding2d(conv.padding);
    options.groups = conv.groups;
    return conv2d(x, weight, bias, options);
}

ANVIL_INLINE tensor<float> resnet_logits(models::weight_loader& weights, const resnet_layout& layout,
                                         const tensor<float>& pixels, const resnet_convolve& convolve) {
    const models::resnet_config& c = layout.config;
    auto h = models::activate(convolve(layout.stem, pixels), c.act);
    pool_options pool;
    pool.kernel = size2d(3);
    pool.stride = size2d(2);
    pool.padding = padding2d(1);
    h = max_pool2d(h, pool);
    for (const resnet_block& block : layout.blocks) {
        tensor<float> y = h;
        for (std::size_t k = 0; k < block.layers.size(); ++k) {
            y = convolve(block.layers[k], y);
            // Hugging Face's ResNetConvLayer keeps its default ReLU inside a block; hidden_act is for the
            // stem and the residual sum.
            if (k + 1 < block.layers.size()) y = relu(y);
        }
        const tensor<float> shortcut = block.projection ? convolve(*block.projection, h) : h;
        h = models::activate(y + shortcut, c.act);
    }
    const std::int64_t features = c.widths.back();
    const auto pooled = reshape(global_avg_pool2d(h), std::vector<std::int64_t>{pixels.shape()[0], features});
    const std::string name = layout.names.classifier();
    const auto weight = weights.load(name + ".weight", dims{c.classes, features});
    const auto bias = weights.load(name + ".bias", dims{c.classes});
    return linear(pooled, weight, bias);
}

ANVIL_INLINE tensor<float> unfolded_resnet_convolution(models::weight_loader& weights,
                                                       const resnet_convolution& conv,
                                                       const tensor<float>& x) {
    conv2d_options options;
    options.stride = size2d(conv.stride);
    options.padding = padding2d(conv.padding);
    options.groups = conv.groups;
    return conv2d(x, weights.load(conv.label, conv.shape), std::nullopt, options);
}

ANVIL_INLINE std::vector<value> build_resnet(graph& g, const resnet_network& net,
                                             std::span<const std::int64_t> key) {
    const auto pixels = g.input<float>("pixels", dims{key[0], net.layout.config.channels, key[1], key[2]});
    models::weight_loader classifier(g, net.weights);
    const resnet_convolve folded = [&g](const resnet_convolution& conv, const tensor<float>& x) {
        return apply_resnet_convolution(g, conv, x);
    };
    return {resnet_logits(classifier, net.layout, pixels, folded).value()};
}

}  // namespace anvil::detail

namespace anvil::models {

ANVIL_INLINE bool resnet::recognizes(const checkpoint& weights) {
    return (weights.contains("conv1.weight") && weights.contains("layer1.0.conv1.weight")) ||
           weights.contains("resnet.embedder.embedder.convolution.weight");
}

ANVIL_INLINE resnet_training_pass resnet_train_forward(weight_loader& weights,
                                                       const anvil::detail::resnet_layout& layout,
                                                       const tensor<float>& pixels) {
    resnet_training_pass pass;
    const double eps = layout.config.batch_norm_eps;
    const anvil::detail::resnet_convolve train_mode = [&](const anvil::detail::resnet_convolution& conv,
                                                          const tensor<float>& x) {
        batch_norm_pass norm = train_mode_batch_norm(
            weights, conv.norm, anvil::detail::unfolded_resnet_convolution(weights, conv, x), eps);
        pass.statistics.push_back(std::move(norm.statistics));
        return norm.output;
    };
    pass.logits = anvil::detail::resnet_logits(weights, layout, pixels, train_mode);
    return pass;
}

ANVIL_INLINE tensor<float> resnet_eval_forward(weight_loader& weights,
                                               const anvil::detail::resnet_layout& layout,
                                               const tensor<float>& pixels) {
    const double eps = layout.config.batch_norm_eps;
    const anvil::detail::resnet_convolve eval_mode = [&](const anvil::detail::resnet_convolution& conv,
                                                         const tensor<float>& x) {
        return eval_mode_batch_norm(weights, conv.norm,
                                    anvil::detail::unfolded_resnet_convolution(weights, conv, x), eps);
    };
    return anvil::detail::resnet_logits(weights, layout, pixels, eval_mode);
}

ANVIL_INLINE resnet resnet::load(const std::filesystem::path& folder, const load_options& given) {
    const load_options options = with_model_source(given, folder);
    auto weights = open_weights(folder, options);
    auto net = std::make_shared<anvil::detail::resnet_network>();
    net->weights = weights;
    net->layout = anvil::detail::read_resnet_layout(*weights, folder);
    anvil::detail::resnet_layout& layout = net->layout;
    const resnet_config& c = layout.config;
    anvil::detail::fold_resnet_convolution(*weights, layout.stem, c.batch_norm_eps);
    for (anvil::detail::resnet_block& block : layout.blocks) {
        for (anvil::detail::resnet_convolution& conv : block.layers)
            anvil::detail::fold_resnet_convolution(*weights, conv, c.batch_norm_eps);
        if (block.projection)
            anvil::detail::fold_resnet_convolution(*weights, *block.projection, c.batch_norm_eps);
    }
    const std::string classifier = layout.names.classifier();
    static_cast<void>(checked_tensor(*weights, classifier + ".weight", dims{c.classes, c.widths.back()}));
    static_cast<void>(checked_tensor(*weights, classifier + ".bias", dims{c.classes}));

    resnet model;
    model.config_ = c;
    model.labels_ = layout.labels;
    std::shared_ptr<const anvil::detail::resnet_network> network = std::move(net);
    model.programs_ = std::make_unique<compiled_shapes>(
        options.compile, [network](graph& g, std::span<const std::int64_t> key) {
            return anvil::detail::build_resnet(g, *network, key);
        });
    return model;
}

ANVIL_INLINE host_tensor resnet::logits(const host_tensor& pixels) {
    const dims& shape = pixels.shape();
    if (pixels.type() != dtype::f32) {
        throw type_error(
            anvil::detail::message("resnet: pixels must be f32, got ", dtype_name(pixels.type())));
    }
    if (shape.rank() != 4 || shape[1] != config_.channels || shape[0] < 1 || shape[2] < 1 || shape[3] < 1) {
        throw shape_error(anvil::detail::message("resnet: pixels must be [N, ", config_.channels,
                                                 ", H, W] with N, H, W >= 1, got ", shape));
    }
    program& run = programs_->at({shape[0], shape[2], shape[3]});
    return run.run({{"pixels", pixels}}).front();
}

}  // namespace anvil::models
