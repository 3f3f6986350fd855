// anvil: clip's definitions (see clip.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/backend/compile.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/json.hpp"
#include "anvil/expr/expr.hpp"
#include "anvil/io/checkpoint.hpp"
#include "anvil/models/common/lora_adapter.hpp"
#include "anvil/models/text/text_encoder.hpp"
#include "anvil/models/vision/clip.hpp"

namespace anvil::models::recipe_detail {

// text_config / vision_config, or the *_dict spelling of configs written before transformers 4.21; absent,
// the tower keeps transformers' defaults, as CLIPConfig does.
ANVIL_INLINE const json::value* clip_tower_config(const config_reader& config, std::string_view key) {
    const json::value* tower = config.find(key);
    if (tower == nullptr || tower->is_null()) tower = config.find(std::string(key) + "_dict");
    if (tower == nullptr || tower->is_null()) return nullptr;
    if (!tower->is_object()) {
        throw format_error(anvil::detail::message(config.source(), ": '", key, "' must be an object, got ",
                                                  json::dump(*tower)));
    }
    return tower;
}

ANVIL_INLINE void check_heads(const config_reader& tower, std::int64_t hidden, std::int64_t heads) {
    if (hidden % heads != 0) {
        throw format_error(anvil::detail::message(tower.source(), ": hidden_size ", hidden,
                                                  " is not a multiple of num_attention_heads ", heads));
    }
}

}  // namespace anvil::models::recipe_detail

namespace anvil::models {

ANVIL_INLINE clip_config clip_config::from_json(const config_reader& config) {
    const std::string type = config.string("model_type", "");
    if (type != "clip") {
        throw unsupported_error(
            anvil::detail::message(config.source(), ": model_type '", type,
                                   "' is not a CLIP model (\"clip\": CLIPModel, both towers)"));
    }
    clip_config c;
    c.projection_dim = config.integer("projection_dim", c.projection_dim);
    const json::value empty = json::value(json::object{});
    const json::value* text_json = recipe_detail::clip_tower_config(config, "text_config");
    const json::value* vision_json = recipe_detail::clip_tower_config(config, "vision_config");
    const config_reader text(text_json ? *text_json : empty, config.source() + ": text_config");
    const config_reader vision(vision_json ? *vision_json : empty, config.source() + ": vision_config");

    clip_text_config& t = c.text;
    t.vocab_size = text.integer("vocab_size", t.vocab_size);
    t.hidden = text.integer("hidden_size", t.hidden);
    t.heads = text.integer("num_attention_heads", t.heads);
    t.intermediate = text.integer("intermediate_size", t.intermediate);
    t.layers = text.integer("num_hidden_layers", t.layers);
    t.max_positions = text.integer("max_position_embeddings", t.max_positions);
    t.layer_norm_eps = text.positive_number("layer_norm_eps", t.layer_norm_eps);
    t.act = parse_activation(text.string("hidden_act", "quick_gelu"));
    t.bos_token_id = text.integer("bos_token_id", t.bos_token_id, 0);
    t.eos_token_id = text.integer("eos_token_id", t.eos_token_id, 0);
    recipe_detail::check_heads(text, t.hidden, t.heads);

    clip_vision_config& v = c.vision;
    v.hidden = vision.integer("hidden_size", v.hidden);
    v.heads = vision.integer("num_attention_heads", v.heads);
    v.intermediate = vision.integer("intermediate_size", v.intermediate);
    v.layers = vision.integer("num_hidden_layers", v.layers);
    v.image_size = vision.integer("image_size", v.image_size);
    v.patch_size = vision.integer("patch_size", v.patch_size);
    v.channels = vision.integer("num_channels", v.channels);
    v.layer_norm_eps = vision.positive_number("layer_norm_eps", v.layer_norm_eps);
    v.act = parse_activation(vision.string("hidden_act", "quick_gelu"));
    recipe_detail::check_heads(vision, v.hidden, v.heads);
    if (v.patch_size > v.image_size) {
        throw format_error(anvil::detail::message(vision.source(), ": patch_size ", v.patch_size,
                                                  " is larger than image_size ", v.image_size));
    }
    return c;
}

ANVIL_INLINE pre_norm_encoder_layer load_clip_layer(weight_loader& weights, const std::string& prefix,
                                                    std::int64_t hidden, std::int64_t heads,
                                                    std::int64_t intermediate, double epsilon, activation act,
                                                    std::int64_t index) {
    const std::string p = prefix + "encoder.layers." + std::to_string(index) + ".";
    pre_norm_encoder_layer layer;
    layer.attention_norm = load_layer_norm(weights, p + "layer_norm1", hidden, epsilon);
    layer.attention.query = load_linear(weights, p + "self_attn.q_proj", hidden, hidden);
    layer.attention.key = load_linear(weights, p + "self_attn.k_proj", hidden, hidden);
    layer.attention.value = load_linear(weights, p + "self_attn.v_proj", hidden, hidden);
    layer.attention.output = load_linear(weights, p + "self_attn.out_proj", hidden, hidden);
    layer.attention.heads = heads;
    layer.attention.kv_heads = heads;
    layer.attention.head_dim = hidden / heads;
    layer.mlp_norm = load_layer_norm(weights, p + "layer_norm2", hidden, epsilon);
    layer.mlp.up = load_linear(weights, p + "mlp.fc1", intermediate, hidden);
    layer.mlp.down = load_linear(weights, p + "mlp.fc2", hidden, intermediate);
    layer.mlp.act = act;
    return layer;
}

ANVIL_INLINE clip_text_weights load_clip_text_weights(weight_loader& weights, const clip_config& c) {
    const clip_text_config& t = c.text;
    const std::string prefix = "text_model.";
    clip_text_weights w;
    w.token_embedding =
        weights.load(prefix + "embeddings.token_embedding.weight", dims{t.vocab_size, t.hidden});
    w.position_embedding =
        weights.load(prefix + "embeddings.position_embedding.weight", dims{t.max_positions, t.hidden});
    for (std::int64_t i = 0; i < t.layers; ++i) {
        w.layers.push_back(
            load_clip_layer(weights, prefix, t.hidden, t.heads, t.intermediate, t.layer_norm_eps, t.act, i));
    }
    w.final_norm = load_layer_norm(weights, prefix + "final_layer_norm", t.hidden, t.layer_norm_eps);
    w.projection = load_linear(weights, "text_projection", c.projection_dim, t.hidden, false);
    return w;
}

ANVIL_INLINE clip_vision_weights load_clip_vision_weights(weight_loader& weights, const clip_config& c) {
    const clip_vision_config& v = c.vision;
    const std::string prefix = "vision_model.";
    clip_vision_weights w;
    w.class_embedding = weights.load(prefix + "embeddings.class_embedding", dims{v.hidden});
    w.patch_weight = weights.load(prefix + "embeddings.patch_embedding.weight",
                                  dims{v.hidden, v.channels, v.patch_size, v.patch_size});
    w.position_embedding =
        weights.load(prefix + "embeddings.position_embedding.weight", dims{v.tokens(), v.hidden});
    w.pre_norm = load_layer_norm(weights, prefix + "pre_layrnorm", v.hidden, v.layer_norm_eps);
    for (std::int64_t i = 0; i < v.layers; ++i) {
        w.layers.push_back(
            load_clip_layer(weights, prefix, v.hidden, v.heads, v.intermediate, v.layer_norm_eps, v.act, i));
    }
    w.post_norm = load_layer_norm(weights, prefix + "post_layernorm", v.hidden, v.layer_norm_eps);
    w.projection = load_linear(weights, "visual_projection", c.projection_dim, v.hidden, false);
    return w;
}

ANVIL_INLINE tensor<float> clip_text_features(const clip_text_weights& w, const clip_config& c,
                                              const tensor<std::int32_t>& ids, const tensor<float>& pooled) {
    const dims shape = ids.shape();
    if (shape.rank() != 2 || shape[1] < 1 || shape[1] > c.text.max_positions || pooled.shape() != shape) {
        throw shape_error(anvil::detail::message(
            "clip text: expected ids and pooled [batch, length <= ", c.text.max_positions, "], got ", shape,
            " and ", pooled.shape()));
    }
    const std::int64_t rows = shape[0], length = shape[1], hidden = c.text.hidden;
    const tensor<float> positions =
        reshape(slice(w.position_embedding, 0, 0, length), std::vector<std::int64_t>{1, length, hidden});
    tensor<float> h = embedding(w.token_embedding, ids) + positions;
    for (const auto& layer : w.layers)
        h = apply(layer, h, std::nullopt, attention_options{.causal = true});
    // final_layer_norm is per token, so only the pooled row needs it.
    const tensor<float> row = reshape(matmul(reshape(pooled, std::vector<std::int64_t>{rows, 1, length}), h),
                                      std::vector<std::int64_t>{rows, hidden});
    return apply(w.projection, apply(w.final_norm, row));
}

ANVIL_INLINE tensor<float> clip_image_features(const clip_vision_weights& w, const clip_config& c,
                                               const tensor<float>& pixels) {
    const clip_vision_config& v = c.vision;
    const dims shape = pixels.shape();
    if (shape.rank() != 4 || shape[0] < 1 || shape[1] != v.channels || shape[2] != v.image_size ||
        shape[3] != v.image_size) {
        throw shape_error(anvil::detail::message("clip vision: expected pixels [batch, ", v.channels, ", ",
                                                 v.image_size, ", ", v.image_size, "], got ", shape));
    }
    const std::int64_t batch = shape[0];
    // [N, hidden, g, g] -> [N, patches, hidden], with their positions.
    const tensor<float> grid =
        conv2d(pixels, w.patch_weight, conv2d_options{.stride = {v.patch_size, v.patch_size}});
    const tensor<float> table =
        reshape(w.position_embedding, std::vector<std::int64_t>{1, v.tokens(), v.hidden});
    const tensor<float> patches =
        permute(reshape(grid, std::vector<std::int64_t>{batch, v.hidden, v.patches()}), {0, 2, 1}) +
        slice(table, 1, 1, end_of_axis);
    // The class token with its position added once, then repeated over the batch.
    const tensor<float> cls =
        reshape(w.class_embedding, std::vector<std::int64_t>{1, 1, v.hidden}) + slice(table, 1, 0, 1);
    const std::vector<tensor<float>> copies(static_cast<std::size_t>(batch), cls);
    const tensor<float> classes = batch == 1 ? cls : concat(copies, 0);
    tensor<float> h = apply(w.pre_norm, concat(std::vector<tensor<float>>{classes, patches}, 1));
    for (const auto& layer : w.layers)
        h = apply(layer, h, std::nullopt);
    const tensor<float> pooled = reshape(slice(h, 1, 0, 1), std::vector<std::int64_t>{batch, v.hidden});
    return apply(w.projection, apply(w.post_norm, pooled));
}

}  // namespace anvil::models

namespace anvil::models::recipe_detail {

ANVIL_INLINE std::size_t clip_pooled_position(const clip_text_config& c, std::span<const std::int32_t> ids,
                                              std::size_t text) {
    if (ids.empty()) throw error(anvil::detail::message("clip: text ", text, " has no tokens"));
    if (c.legacy_pooling()) {
        return static_cast<std::size_t>(std::max_element(ids.begin(), ids.end()) - ids.begin());
    }
    const auto eos = std::find(ids.begin(), ids.end(), static_cast<std::int32_t>(c.eos_token_id));
    if (eos == ids.end()) {
        throw error(anvil::detail::message("clip: text ", text, " has no end-of-text token (id ",
                                           c.eos_token_id,
                                           "): the text tower pools at it; tokenise with special tokens"));
    }
    return static_cast<std::size_t>(eos - ids.begin());
}

ANVIL_INLINE void normalize_rows(host_tensor& rows) {
    const dims shape = rows.shape();
    const auto n = static_cast<std::size_t>(shape[0]);
    const auto d = static_cast<std::size_t>(shape[1]);
    std::span<float> values = rows.values<float>();
    for (std::size_t r = 0; r < n; ++r) {
        const std::span<float> row = values.subspan(r * d, d);
        double squares = 0.0;
        for (const float x : row)
            squares += double{x} * double{x};
        const double norm = std::sqrt(squares);
        if (norm == 0.0) continue;  // an all-zero row stays zero rather than becoming NaN
        for (float& x : row)
            x = static_cast<float>(double{x} / norm);
    }
}

// CLIPImageProcessor's defaults (openai/clip-vit-*) at the model's image size.
ANVIL_INLINE image_preprocessing clip_default_preprocessing(std::int64_t image_size) {
    image_preprocessing p;
    p.resize_shortest_edge = image_size;
    p.resize_height = p.resize_width = 0;
    p.filter = resample::bicubic;
    p.antialias = true;
    p.crop_height = p.crop_width = image_size;
    p.rounding = crop_rounding::down;
    p.rescale_factor = 1.0 / 255.0;
    p.normalize = true;
    p.mean = {0.48145466f, 0.4578275f, 0.40821073f};
    p.std = {0.26862954f, 0.26130258f, 0.27577711f};
    return p;
}

}  // namespace anvil::models::recipe_detail

namespace anvil::models {

ANVIL_INLINE clip clip::load(const std::filesystem::path& folder, const load_options& given) {
    const load_options options = with_model_source(given, folder);
    const json::value document = config_reader::read_file(folder / "config.json");
    const config_reader reader(document, (folder / "config.json").string());
    clip result;
    result.config_ = clip_config::from_json(reader);
    auto weights = open_weights(folder, options);
    const tensor_view* scale = weights->find("logit_scale");
    if (scale == nullptr || scale->element_count() != 1) {
        throw format_error(anvil::detail::message(
            weights->path().string(), ": ",
            scale == nullptr ? std::string("no tensor 'logit_scale'")
                             : anvil::detail::message("tensor 'logit_scale': expected one value, got shape ",
                                                      dims(scale->shape())),
            " (CLIPModel keeps the log of its logits' scale there)"));
    }
    result.logit_scale_ = scale->to_f32().front();
    // Every tensor is looked up and its shape checked now, so a folder that does not fit fails at load.
    {
        weight_loader check(graph{}, weights);
        static_cast<void>(load_clip_text_weights(check, result.config_));
        static_cast<void>(load_clip_vision_weights(check, result.config_));
    }
    namespace fs = std::filesystem;
    if (fs::exists(folder / "tokenizer.json") || fs::exists(folder / "vocab.json"))
        result.tokenizer_ = std::make_shared<const tokenizer>(tokenizer::load(folder));
    result.preprocessing_ = fs::exists(folder / "preprocessor_config.json")
                                ? image_preprocessing::load(folder)
                                : recipe_detail::clip_default_preprocessing(result.config_.vision.image_size);

    const clip_config config = result.config_;
    result.text_ = std::make_unique<compiled_shapes>(
        options.compile,
        [config, weights](graph& g, std::span<const std::int64_t> key) -> std::vector<value> {
            weight_loader loader(g, weights);
            const clip_text_weights w = load_clip_text_weights(loader, config);
            const auto ids = g.input<std::int32_t>("input_ids", dims{key[0], key[1]});
            const auto pooled = g.input<float>("pooled", dims{key[0], key[1]});
            return {clip_text_features(w, config, ids, pooled)};
        });
    result.vision_ = std::make_unique<compiled_shapes>(
        options.compile,
        [config, weights](graph& g, std::span<const std::int64_t> key) -> std::vector<value> {
            weight_loader loader(g, weights);
            const clip_vision_weights w = load_clip_vision_weights(loader, config);
            const clip_vision_config& v = config.vision;
            const auto pixels =
                g.input<float>("pixels", dims{key[0], v.channels, v.image_size, v.image_size});
            return {clip_image_features(w, config, pixels)};
        });
    return result;
}

namespace clip_detail {

[[noreturn]] inline void no_tokenizer() {
    throw error(
        "clip: the model folder has no tokenizer (tokenizer.json, or vocab.json + merges.txt); give token "
        "ids "
        "instead");
}

}  // namespace clip_detail

ANVIL_INLINE std::string clip::text(std::span<const std::int32_t> ids) const {
    if (!tokenizer_) clip_detail::no_tokenizer();
    // CLIPTokenizer.convert_tokens_to_string, and CLIPTokenizerFast's wrapped decode: the byte-level text,
    // then "</w>" -> " " and strip().
    const std::string decoded = tokenizer_->decode(ids);
    constexpr std::string_view end_of_word = "</w>";
    std::string out;
    for (std::size_t at = 0; at < decoded.size();) {
        if (std::string_view(decoded).substr(at, end_of_word.size()) == end_of_word) {
            out += ' ';
            at += end_of_word.size();
        } else {
            out += decoded[at++];
        }
    }
    const auto space = [](char c) {
        return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
    };
    std::size_t begin = 0, end = out.size();
    while (begin < end && space(out[begin]))
        ++begin;
    while (end > begin && space(out[end - 1]))
        --end;
    return out.substr(begin, end - begin);
}

ANVIL_INLINE host_tensor clip::text_embeddings(std::span<const std::string> texts, bool normalize) {
    if (!tokenizer_) clip_detail::no_tokenizer();
    anvil::encode_options options;
    options.max_length = static_cast<std::size_t>(config_.text.max_positions);
    std::vector<std::vector<std::int32_t>> ids;
    ids.reserve(texts.size());
    for (const std::string& text : texts)
        ids.push_back(tokenizer_->encode(text, options).ids);
    return text_embeddings_from_ids(ids, normalize);
}

ANVIL_INLINE host_tensor clip::text_embeddings_from_ids(std::span<const std::vector<std::int32_t>> ids,
                                                        bool normalize) {
    const clip_text_config& t = config_.text;
    const std::int64_t dim = config_.projection_dim;
    std::vector<std::size_t> pooled_at(ids.size());
    std::size_t longest = 1;
    for (std::size_t i = 0; i < ids.size(); ++i) {
        const std::vector<std::int32_t>& text = ids[i];
        if (static_cast<std::int64_t>(text.size()) > t.max_positions) {
            throw shape_error(anvil::detail::message("clip: text ", i, " has ", text.size(),
                                                     " tokens; the text tower takes at most ",
                                                     t.max_positions, " (max_position_embeddings)"));
        }
        for (const std::int32_t id : text) {
            if (id < 0 || id >= t.vocab_size) {
                throw error(anvil::detail::message("clip: text ", i, ": token id ", id,
                                                   " is out of range (vocab_size ", t.vocab_size, ")"));
            }
        }
        pooled_at[i] = recipe_detail::clip_pooled_position(t, text, i);
        longest = std::max(longest, text.size());
    }
    host_tensor out(dtype::f32, dims{static_cast<std::int64_t>(ids.size()), dim});
    const std::int64_t length = bucketed_length(static_cast<std::int64_t>(longest), t.max_positions);
    constexpr std::size_t batch_size = 16;
    for (std::size_t start = 0; start < ids.size(); start += batch_size) {
        const std::size_t count = std::min(batch_size, ids.size() - start);
        const std::int64_t rows = bucketed_rows(count, batch_size);
        const auto row_count = static_cast<std::size_t>(rows), width = static_cast<std::size_t>(length);
        // Filler rows repeat the batch's first text; each text is padded with its last id (its EOS), which
        // causal attention keeps from its pooled row.
        std::vector<std::int32_t> id_values(row_count * width);
        std::vector<float> pooled(row_count * width, 0.0f);
        for (std::size_t r = 0; r < row_count; ++r) {
            const std::size_t item = start + (r < count ? r : 0);
            const std::vector<std::int32_t>& text = ids[item];
            for (std::size_t k = 0; k < width; ++k)
                id_values[r * width + k] = k < text.size() ? text[k] : text.back();
            pooled[r * width + pooled_at[item]] = 1.0f;
        }
        program& p = text_->at({rows, length});
        const host_tensor features = p.run({{"input_ids", host_tensor::from(id_values, dims{rows, length})},
                                            {"pooled", host_tensor::from(pooled, dims{rows, length})}})
                                         .front();
        const auto d = static_cast<std::size_t>(dim);
        std::copy_n(features.values<float>().begin(), count * d,
                    out.values<float>().begin() + static_cast<std::ptrdiff_t>(start * d));
    }
    if (normalize) recipe_detail::normalize_rows(out);
    return out;
}

ANVIL_INLINE host_tensor clip::image_embeddings(const host_tensor& pixels, bool normalize) {
    const clip_vision_config& v = config_.vision;
    const dims shape = pixels.shape();
    if (shape.rank() != 4 || shape[0] < 1 || shape[1] != v.channels || shape[2] != v.image_size ||
        shape[3] != v.image_size) {
        throw shape_error(anvil::detail::message("clip: expected pixels [batch, ", v.channels, ", ",
                                                 v.image_size, ", ", v.image_size,
                                                 "] (vision_config image_size), got ", shape));
    }
    if (pixels.type() != dtype::f32) {
        throw type_error(
            anvil::detail::message("clip: expected f32 pixels, got ", dtype_name(pixels.type())));
    }
    program& p = vision_->at({shape[0]});
    host_tensor out = p.run({{"pixels", pixels}}).front();
    if (normalize) recipe_detail::normalize_rows(out);
    return out;
}

ANVIL_INLINE host_tensor clip::image_embeddings(std::span<const image> images, bool normalize) {
    return image_embeddings(preprocess(images, preprocessing_), normalize);
}

ANVIL_INLINE host_tensor clip::logits_per_image(const host_tensor& pixels,
                                                std::span<const std::string> texts) {
    const host_tensor images = image_embeddings(pixels, true);
    const host_tensor words = text_embeddings(texts, true);
    const auto n = static_cast<std::size_t>(images.shape()[0]);
    const auto l = static_cast<std::size_t>(words.shape()[0]);
    const auto d = static_cast<std::size_t>(config_.projection_dim);
    const double scale = std::exp(double{logit_scale_});
    host_tensor out(dtype::f32, dims{images.shape()[0], words.shape()[0]});
    const std::span<const float> a = images.values<float>(), b = words.values<float>();
    std::span<float> logits = out.values<float>();
    for (std::size_t i = 0; i < n; ++i) {
        for (std::size_t j = 0; j < l; ++j) {
            double dot = 0.0;
            for (std::size_t k = 0; k < d; ++k)
                dot += double{a[i * d + k]} * double{b[j * d + k]};
            logits[i * l + j] = static_cast<float>(scale * dot);
        }
    }
    return out;
}

ANVIL_INLINE std::vector<std::vector<zero_shot_label>> clip::zero_shot(const host_tensor& pixels,
                                                                       std::span<const std::string> labels,
                                                                       std::string_view label_template) {
    if (labels.empty()) throw error("clip: zero-shot classification needs at least one label");
    const std::size_t slot = label_template.find("{}");
    if (slot == std::string_view::npos) {
        throw error(anvil::detail::message("clip: the label template '", label_template,
                                           "' has no {} to put the label in"));
    }
    std::vector<std::string> texts;
    texts.reserve(labels.size());
    for (const std::string& label : labels) {
        texts.push_back(std::string(label_template.substr(0, slot)) + label +
                        std::string(label_template.substr(slot + 2)));
    }
    const host_tensor logits = logits_per_image(pixels, texts);
    const auto n = static_cast<std::size_t>(logits.shape()[0]);
    const std::size_t l = labels.size();
    const std::span<const float> values = logits.values<float>();
    std::vector<std::vector<zero_shot_label>> result(n);
    for (std::size_t i = 0; i < n; ++i) {
        const std::span<const float> row = values.subspan(i * l, l);
        const double top = *std::max_element(row.begin(), row.end());
        double total = 0.0;
        for (const float x : row)
            total += std::exp(double{x} - top);
        for (std::size_t j = 0; j < l; ++j) {
            result[i].push_back(zero_shot_label{
                j, labels[j], static_cast<float>(std::exp(double{row[j]} - top) / total), row[j]});
        }
        std::stable_sort(
            result[i].begin(), result[i].end(),
            [](const zero_shot_label& a, const zero_shot_label& b) { return a.probability > b.probability; });
    }
    return result;
}

ANVIL_INLINE mlpackage_function clip::export_text_function(std::int64_t length) const {
    if (length < 2 || length > config_.text.max_positions) {
        throw error(anvil::detail::message("clip: an exported text function takes 2 to ",
                                           config_.text.max_positions, " tokens, not ", length));
    }
    graph g;
    const tensor<float> features(build_text_graph(g, 1, length).front());
    return {"text", {recipe_detail::l2_normalized_rows(features).value()}, {"text_embeds"}, {}};
}

ANVIL_INLINE mlpackage_function clip::export_image_function() const {
    graph g;
    const tensor<float> features(build_image_graph(g, 1).front());
    return {"image", {recipe_detail::l2_normalized_rows(features).value()}, {"image_embeds"}, {}};
}

}  // namespace anvil::models
