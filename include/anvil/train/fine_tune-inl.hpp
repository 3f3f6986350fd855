// anvil: fine_tuning's definitions (see fine_tune.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <regex>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/core/bfloat16.hpp"
#include "anvil/core/convert.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/half.hpp"
#include "anvil/core/json.hpp"
#include "anvil/core/npy.hpp"
#include "anvil/expr/expr.hpp"
#include "anvil/io/checkpoint.hpp"
#include "anvil/io/image.hpp"
#include "anvil/io/image_transforms.hpp"
#include "anvil/io/safetensors_writer.hpp"
#include "anvil/io/tokenizer.hpp"
#include "anvil/models/common/config.hpp"
#include "anvil/models/common/lora_adapter.hpp"
#include "anvil/models/common/weights.hpp"
#include "anvil/models/text/cross_encoder.hpp"
#include "anvil/models/text/text_encoder.hpp"
#include "anvil/models/vision/batch_norm_folding.hpp"
#include "anvil/models/vision/resnet.hpp"
#include "anvil/models/vision/vit.hpp"
#include "anvil/train/adamw.hpp"
#include "anvil/train/fine_tune.hpp"
#include "anvil/train/layers.hpp"
#include "anvil/train/loss.hpp"
#include "anvil/train/numpy_random.hpp"
#include "anvil/train/sgd.hpp"

namespace anvil::detail::fine_tuning {

ANVIL_INLINE bool hf_decays(std::string_view name) {
    std::string lower(name);
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    static const std::regex excluded[] = {std::regex("bias"), std::regex("layernorm"), std::regex("rmsnorm"),
                                          std::regex("(?:^|\\.)norm(?:$|\\.)"), std::regex("_norm(?:$|\\.)")};
    return std::none_of(std::begin(excluded), std::end(excluded),
                        [&](const std::regex& r) { return std::regex_search(lower, r); });
}

}  // namespace anvil::detail::fine_tuning

namespace anvil::train {

namespace fine_tuning_detail {

using anvil::detail::message;

// The files of a Hub folder that travel with the weights.
inline constexpr std::string_view auxiliary_files[] = {"preprocessor_config.json",
                                                       "tokenizer.json",
                                                       "tokenizer_config.json",
                                                       "special_tokens_map.json",
                                                       "added_tokens.json",
                                                       "vocab.txt",
                                                       "vocab.json",
                                                       "merges.txt",
                                                       "sentencepiece.bpe.model",
                                                       "spiece.model",
                                                       "tokenizer.model"};

inline bool ends_with(std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// One example of TRAIN.jsonl.
struct example {
    std::vector<std::int32_t> ids, types;
    host_tensor pixels;  // [C, H, W]
    double label = 0.0;
    std::vector<float> multi_hot;  // multi-label classification: the label, one value in [0, 1] per class
};

// A tensor the model reads, as the models::weight_loader saw it.
struct read_tensor {
    std::string name;
    models::weight_role role = models::weight_role::other;
    dims shape;
};

// A BatchNorm's running statistics as the steps update them (train mode), in float64 as the reference keeps
// them between steps; a buffer that a freeze regex finds keeps its stored value.
struct running_statistics {
    std::string norm;  // the BatchNorm's prefix
    std::vector<double> mean, variance;
    bool mean_updated = true, variance_updated = true, count_updated = true;
};

// PyTorch's BatchNorm default: running = (1 - momentum) running + momentum batch.
inline constexpr double batch_norm_momentum = 0.1;

inline bool is_running_statistic(std::string_view name) {
    return ends_with(name, ".running_mean") || ends_with(name, ".running_var");
}

// Running statistics as a model file and an evaluation program take them: rounded to f32.
inline std::vector<float> narrowed(const std::vector<double>& values) {
    return std::vector<float>(values.begin(), values.end());
}

// Sets state::evaluating for its lifetime, so that however evaluate() leaves, the next build is training's.
class evaluation_mode {
public:
    explicit evaluation_mode(bool& evaluating) noexcept : evaluating_(evaluating) { evaluating_ = true; }
    ~evaluation_mode() { evaluating_ = false; }
    evaluation_mode(const evaluation_mode&) = delete;
    evaluation_mode& operator=(const evaluation_mode&) = delete;

private:
    bool& evaluating_;
};

inline std::string joined(const std::vector<std::string>& items, std::string_view separator = ", ") {
    std::string out;
    for (const auto& item : items)
        out += (out.empty() ? "" : std::string(separator)) + item;
    return out;
}

}  // namespace fine_tuning_detail

struct fine_tuning::state {
    fine_tune_options options;

    // The model.
    bool text = true;
    bool resnet = false;
    std::string model_type;
    std::shared_ptr<const checkpoint> weights;
    models::text_encoder_config text_config;
    std::string prefix;
    models::recipe_detail::classification_head head;
    models::vit_config vit_config;
    models::vit_head vit_head = models::vit_head::cls;
    anvil::detail::resnet_layout resnet_layout;
    std::int64_t labels = 0;
    bool regression = false;
    // problem_type multi_label_classification: BCEWithLogitsLoss on multi-hot labels [rows, labels].
    bool multi_label = false;
    std::int64_t max_tokens = 0;
    std::vector<fine_tuning_detail::read_tensor> reads;
    // BatchNorm in train mode: every norm in the forward's order (the order of its statistics among a step's
    // outputs), and per pixel shape {N, C, H, W} the values each norm's statistics were taken over.
    std::vector<fine_tuning_detail::running_statistics> running;
    std::map<std::vector<std::int64_t>, std::vector<std::int64_t>> batch_norm_counts;
    // Set while evaluate() has the trainer build and run its programs (evaluation_mode): BatchNorm runs in
    // eval mode, on the running statistics fed as program inputs, and dropout is x itself.
    bool evaluating = false;

    // LoRA: the adapter's settings as adapter_config.json holds them (target_list sorted, modules_to_save
    // with the entries PEFT adds), the adapted modules (sorted), their matrices' values (trained or not), the
    // head modules.
    bool lora = false;
    models::lora_config adapter_config;
    std::vector<std::string> lora_modules;
    std::vector<std::string> head_modules;
    std::map<std::string, host_tensor> fixed;  // frozen tensors whose value is not the checkpoint's (f32)
    std::map<std::string, dims> lora_shapes;   // lora matrix name -> shape
    std::map<std::string, dtype>
        adapter_types;  // --init-adapter's head tensors: the dtype they were saved in

    // What trains.
    std::vector<std::string> trained_names;  // in declaration order
    std::set<std::string> trained_set;
    parameter_set params;
    std::unique_ptr<optimizer> opt;
    std::unique_ptr<trainer> runner;

    // The data and where the run is.
    std::vector<fine_tuning_detail::example> examples;
    std::int64_t total = 0;
    std::int64_t done = 0;
    std::int64_t epoch = -1;
    std::vector<std::size_t> order;
    std::size_t cursor = 0;

    // Whether a freeze regex finds `name` (std::regex_search, as re.search).
    [[nodiscard]] bool frozen(const std::string& name) const;
    // The weights as the graph reads them (see weights.hpp's weight_substitute).
    std::optional<tensor<float>> substitute(graph& g, std::string_view name, models::weight_role role,
                                            const std::function<tensor<float>()>& stored) const;
    // The forward pass for a batch whose input ids are `input` [rows, length] (text) or whose pixels are
    // [rows, C, H, W]: logits [rows, labels] and, for a ResNet, every BatchNorm's batch statistics; `loader`
    // reads the weights.
    struct forward_pass {
        tensor<float> logits;
        std::vector<models::batch_norm_statistics> statistics;
    };
    forward_pass forward(graph& g, models::weight_loader& loader, const dims& input) const;
    training_graph build(std::span<const io_info> batch);
    // The batch of the examples `items` of `data` (the training set or an evaluation set) as program inputs.
    std::vector<named_tensor> collate(std::span<const fine_tuning_detail::example> data,
                                      std::span<const std::size_t> items) const;
    // The order of epoch `epoch`: numpy.random.default_rng(seed + epoch).permutation(n), or the lines in
    // order.
    void order_epoch();
    // running_mean / running_var from a step's batch statistics (its outputs after the logits).
    void update_running_statistics(step_result& result, const dims& pixels);

    // load()'s parts, in order.
    void load_model();
    void record_reads();
    void read_running_statistics();
    [[nodiscard]] std::vector<fine_tuning_detail::example> read_examples(const std::filesystem::path& path,
                                                                         std::string_view flag) const;
    // The options that shape the run, as a checkpoint records them (flag -> value).
    [[nodiscard]] json::object run_options() const;
    void set_up_lora();
    void choose_trained();
    void start_training();
};

ANVIL_INLINE bool fine_tuning::state::frozen(const std::string& name) const {
    return std::any_of(options.freeze.begin(), options.freeze.end(), [&](const std::string& pattern) {
        return std::regex_search(name, std::regex(pattern));
    });
}

ANVIL_INLINE std::optional<tensor<float>> fine_tuning::state::substitute(
    graph& g, std::string_view name, models::weight_role role,
    const std::function<tensor<float>()>& stored) const {
    // A trained tensor is a parameter input; a frozen one whose value is not the checkpoint's a constant.
    const auto replacement = [&](const std::string& key) -> std::optional<tensor<float>> {
        if (trained_set.count(key) != 0) return tensor<float>(params.in(g, key));
        if (const auto found = fixed.find(key); found != fixed.end())
            return tensor<float>(g.constant(found->second, key));
        return std::nullopt;
    };
    const auto read_value = [&](const std::string& key) -> tensor<float> {
        if (std::optional<tensor<float>> value = replacement(key)) return *std::move(value);
        throw error(fine_tuning_detail::message("fine-tuning: no value for '", key, "'"));
    };
    const std::string key(name);
    if (evaluating && fine_tuning_detail::is_running_statistic(key))
        return g.input<float>(key, dims(weights->tensor(key).shape()));
    if (lora && role == models::weight_role::linear_weight && fine_tuning_detail::ends_with(key, ".weight")) {
        const std::string module = key.substr(0, key.size() - 7);
        if (std::binary_search(lora_modules.begin(), lora_modules.end(), module)) {
            // W + (alpha / r) B A: the same product as PEFT's base(x) + lora_B(lora_A(x)) * scaling, and the
            // same gradients for A and B.
            const tensor<float> a = read_value(module + ".lora_A.weight");
            const tensor<float> b = read_value(module + ".lora_B.weight");
            return stored() + matmul(b, a) * static_cast<float>(adapter_config.scaling());
        }
    }
    return replacement(key);
}

ANVIL_INLINE fine_tuning::state::forward_pass fine_tuning::state::forward(graph& g,
                                                                          models::weight_loader& loader,
                                                                          const dims& input) const {
    if (text) {
        const auto w = models::load_text_encoder(loader, text_config, prefix);
        const auto hidden = models::text_encoder_forward(g, w, text_config, input[0], input[1],
                                                         models::text_positions::inputs);
        return {models::recipe_detail::classification_logits(loader, head, labels, hidden), {}};
    }
    const auto pixels = g.input<float>("pixels", input);
    if (resnet && evaluating) return {models::resnet_eval_forward(loader, resnet_layout, pixels), {}};
    if (resnet) {
        models::resnet_training_pass pass = models::resnet_train_forward(loader, resnet_layout, pixels);
        return {pass.logits, std::move(pass.statistics)};
    }
    const auto w = models::load_vit_weights(loader, vit_config, vit_head, labels);
    return {models::vit_logits(w, vit_config, pixels), {}};
}

ANVIL_INLINE training_graph fine_tuning::state::build(std::span<const io_info> batch) {
    dims input;
    for (const io_info& given : batch) {
        if (given.name == (text ? models::input_ids_name : std::string_view("pixels"))) input = given.shape;
    }
    const std::int64_t rows = input[0];
    training_graph result;
    graph& g = result.model;
    // Dropout where the Hugging Face class has it, with config.json's probabilities: each site is an input
    // the trainer fills with a fresh mask every step. An evaluation program has no sites (model.eval():
    // dropout is x itself), but keeps the hook, so that its attention is spelled out in training's order
    // rather than the fused attention op, and evaluates as it always has.
    models::weight_loader loader(
        g, weights,
        [this](graph& target, std::string_view name, models::weight_role role, const dims&,
               const std::function<tensor<float>()>& stored) {
            return substitute(target, name, role, stored);
        },
        [this, &result](const tensor<float>& x, double probability) {
            return evaluating ? x : dropout(result, x, probability);
        });
    const forward_pass pass = forward(g, loader, input);
    const tensor<float>& out = pass.logits;
    if (regression) {
        const auto target = g.input<float>("labels", dims{rows});
        result.loss = mse_loss(reshape(out, std::vector<std::int64_t>{rows}).value(), target.value());
    } else if (multi_label) {
        const auto target = g.input<float>("labels", dims{rows, labels});
        result.loss = binary_cross_entropy_with_logits(out.value(), target.value());
    } else {
        const auto target = g.input<std::int32_t>("labels", dims{rows});
        result.loss = cross_entropy(out.value(), target.value());
    }
    result.outputs = {out.value()};
    std::vector<std::int64_t> counts;
    for (const models::batch_norm_statistics& statistics : pass.statistics) {
        result.outputs.push_back(statistics.mean.value());
        result.outputs.push_back(statistics.variance.value());
        counts.push_back(statistics.count);
    }
    if (!pass.statistics.empty())
        batch_norm_counts[std::vector<std::int64_t>(input.begin(), input.end())] = counts;
    return result;
}

ANVIL_INLINE void fine_tuning::state::order_epoch() {
    const std::size_t n = examples.size();
    if (options.shuffle) {
        order = numpy_generator(options.seed + static_cast<std::uint64_t>(epoch)).permutation(n);
    } else {
        order.resize(n);
        std::iota(order.begin(), order.end(), std::size_t{0});
    }
}

ANVIL_INLINE std::vector<named_tensor> fine_tuning::state::collate(
    std::span<const fine_tuning_detail::example> data, std::span<const std::size_t> items) const {
    const auto rows = static_cast<std::int64_t>(items.size());
    std::vector<named_tensor> inputs;
    if (text) {
        // DataCollatorWithPadding: padded on the right to the batch's longest example.
        std::size_t longest = 0;
        for (const std::size_t i : items)
            longest = std::max(longest, data[i].ids.size());
        const auto length = static_cast<std::int64_t>(longest);
        const auto cells = static_cast<std::size_t>(rows * length);
        const models::text_encoder_config& c = text_config;
        std::vector<std::int32_t> ids(cells, static_cast<std::int32_t>(c.pad_token_id)), types(cells, 0),
            positions(cells, 0);
        std::vector<float> mask(cells, 0.0f);
        for (std::size_t r = 0; r < items.size(); ++r) {
            const fine_tuning_detail::example& e = data[items[r]];
            const std::size_t row = r * longest;
            std::copy(e.ids.begin(), e.ids.end(), ids.begin() + static_cast<std::ptrdiff_t>(row));
            if (!e.types.empty())
                std::copy(e.types.begin(), e.types.end(), types.begin() + static_cast<std::ptrdiff_t>(row));
            std::fill_n(mask.begin() + static_cast<std::ptrdiff_t>(row), e.ids.size(), 1.0f);
            std::int64_t seen = 0;
            for (std::size_t t = 0; t < longest; ++t) {
                auto& p = positions[row + t];
                if (c.padding_idx < 0) {
                    p = static_cast<std::int32_t>(t);
                } else {  // RoBERTa's create_position_ids_from_input_ids: padding keeps padding_idx
                    const bool token = ids[row + t] != c.padding_idx;
                    seen += token ? 1 : 0;
                    p = static_cast<std::int32_t>(token ? c.padding_idx + seen : c.padding_idx);
                }
            }
        }
        const dims shape{rows, length};
        inputs.push_back({std::string(models::input_ids_name), host_tensor::from(ids, shape)});
        inputs.push_back({std::string(models::position_ids_name), host_tensor::from(positions, shape)});
        if (c.table().token_types)
            inputs.push_back({std::string(models::token_type_ids_name), host_tensor::from(types, shape)});
        inputs.push_back({std::string(models::attention_mask_name), host_tensor::from(mask, shape)});
    } else {
        const dims& image = data[items[0]].pixels.shape();
        host_tensor pixels(dtype::f32, dims{rows, image[0], image[1], image[2]});
        const std::size_t each = data[items[0]].pixels.element_count();
        for (std::size_t r = 0; r < items.size(); ++r) {
            const auto source = data[items[r]].pixels.values<float>();
            std::copy(source.begin(), source.end(),
                      pixels.values<float>().begin() + static_cast<std::ptrdiff_t>(r * each));
        }
        inputs.push_back({"pixels", std::move(pixels)});
    }
    if (regression) {
        std::vector<float> targets(items.size());
        for (std::size_t r = 0; r < items.size(); ++r)
            targets[r] = static_cast<float>(data[items[r]].label);
        inputs.push_back({"labels", host_tensor::from(targets, dims{rows})});
    } else if (multi_label) {
        std::vector<float> targets;
        for (const std::size_t i : items)
            targets.insert(targets.end(), data[i].multi_hot.begin(), data[i].multi_hot.end());
        inputs.push_back({"labels", host_tensor::from(targets, dims{rows, labels})});
    } else {
        std::vector<std::int32_t> targets(items.size());
        for (std::size_t r = 0; r < items.size(); ++r)
            targets[r] = static_cast<std::int32_t>(data[items[r]].label);
        inputs.push_back({"labels", host_tensor::from(targets, dims{rows})});
    }
    return inputs;
}

namespace fine_tuning_detail {

inline void check_options(const fine_tune_options& o) {
    if (o.batch_size <= 0) throw error("--batch-size must be positive");
    if ((o.steps && *o.steps <= 0) || (o.epochs && *o.epochs <= 0))
        throw error("--steps / --epochs must be positive");
    if (o.steps && o.epochs) throw error("give --steps or --epochs, not both");
    if (o.warmup_steps < 0) throw error("--warmup-steps must not be negative");
    if (!std::isfinite(o.lr) || o.lr < 0)
        throw error(message("--lr must be a non-negative number, got ", o.lr));
    if (o.optimizer != "adamw" && o.optimizer != "sgd")
        throw error(message("--optimizer must be adamw or sgd, got '", o.optimizer, "'"));
    if (o.nesterov && (o.optimizer != "sgd" || !(o.momentum > 0)))
        throw error("--nesterov needs --optimizer sgd and a positive --momentum");
    if (o.max_grad_norm && !(*o.max_grad_norm > 0))
        throw error(message("--max-grad-norm must be positive, got ", *o.max_grad_norm));
    if (!o.lora_rank && o.init_adapter.empty() && (o.lora_alpha || o.lora_targets))
        throw error("--lora-alpha / --lora-targets need --lora R");
    for (const std::string& pattern : o.freeze) {
        try {
            static_cast<void>(std::regex(pattern));
        } catch (const std::regex_error& e) {
            throw error(message("--freeze: bad regex '", pattern, "' (", e.what(), ")"));
        }
    }
}

// transformers' num_labels: num_labels, else the length of id2label, else timm's num_classes, else 2.
inline std::int64_t configured_labels(const models::config_reader& config) {
    if (const json::value* n = config.find("num_labels"); n != nullptr && n->is_integer()) return n->as_int();
    if (const json::value* m = config.find("id2label"); m != nullptr && m->is_object())
        return static_cast<std::int64_t>(m->as_object().size());
    if (const json::value* n = config.find("num_classes"); n != nullptr && n->is_integer())
        return n->as_int();
    return 2;
}

}  // namespace fine_tuning_detail

ANVIL_INLINE void fine_tuning::state::load_model() {
    using fine_tuning_detail::message;
    const std::filesystem::path config_path = options.model / "config.json";
    if (!std::filesystem::exists(config_path))
        throw io_error(message("--model: ", config_path.string(), " does not exist"));
    const json::value document = models::config_reader::read_file(config_path);
    const models::config_reader config(document, config_path.string());
    model_type = config.string("model_type", "");
    const json::value* architectures = config.find("architectures");
    const std::string architecture = architectures != nullptr && architectures->is_array() &&
                                             !architectures->as_array().empty() &&
                                             architectures->as_array().front().is_string()
                                         ? architectures->as_array().front().as_string()
                                         : std::string();
    if (model_type == "bert" || model_type == "roberta" || model_type == "xlm-roberta" ||
        model_type == "mpnet" || model_type == "distilbert") {
        text = true;
        text_config = models::text_encoder_config::from_json(document, config_path.string());
        if (!architecture.empty() &&
            !fine_tuning_detail::ends_with(architecture, "ForSequenceClassification")) {
            throw unsupported_error(message("--model: ", options.model.string(), " is a ", architecture,
                                            ", not a ...ForSequenceClassification"));
        }
        max_tokens = text_config.max_tokens();
    } else if (model_type == "vit" || model_type == "deit") {
        text = false;
        vit_config = models::vit_config::from_json(config);
    } else if (model_type == "resnet" || (model_type.empty() && config.contains("architecture"))) {
        // Hugging Face's ResNetForImageClassification, or a timm folder ({"architecture": "resnet50", ...})
        // of torchvision's names; resnet.hpp reads both from the tensors present.
        const std::string timm = model_type.empty() ? config.string("architecture", "") : std::string();
        if (model_type.empty() && timm.find("resnet") == std::string::npos &&
            timm.find("resnext") == std::string::npos) {
            throw unsupported_error(message("--model: config.json architecture '", timm,
                                            "' is not a ResNet (train supports timm's resnet*, resnext* and "
                                            "wide_resnet* folders)"));
        }
        text = false;
        resnet = true;
    } else {
        throw unsupported_error(
            message("--model: config.json model_type '", model_type,
                    "' is not a supported classifier (bert, roberta, xlm-roberta, mpnet, "
                    "distilbert, vit, deit, resnet; or a timm ResNet's \"architecture\")"));
    }
    weights = std::make_shared<const checkpoint>(checkpoint::open(options.model));
    if (resnet) {
        resnet_layout = anvil::detail::read_resnet_layout(*weights, options.model);
        labels = resnet_layout.config.classes;
    } else if (text) {
        prefix = models::detect_prefix(*weights, text_config);
        head = models::recipe_detail::head_for(text_config, prefix);
        const std::string out_name = head.second + ".weight";
        const tensor_view* out = weights->find(out_name);
        if (out == nullptr || out->rank() != 2) {
            throw format_error(message("--model: ", weights->path().string(),
                                       ": the classification head's tensor '", out_name,
                                       out == nullptr ? "' is missing" : "' is not a matrix"));
        }
        labels = out->shape()[0];
    } else {
        const auto found = models::recipe_detail::vit_head_of(*weights, vit_config);
        vit_head = found.first;
        labels = found.second;
    }
    const std::int64_t configured = fine_tuning_detail::configured_labels(config);
    if (configured != labels) {
        throw format_error(message("--model: config.json has ", configured,
                                   " labels but the checkpoint's head has ", labels));
    }
    std::string problem = config.string("problem_type", "");
    if (problem.empty()) problem = labels == 1 ? "regression" : "single_label_classification";
    if ((problem != "regression" && problem != "single_label_classification" &&
         problem != "multi_label_classification") ||
        (problem == "regression" && labels != 1)) {
        throw unsupported_error(
            message("--model: problem_type ", problem, " with num_labels ", labels, " is not supported"));
    }
    regression = problem == "regression";
    multi_label = problem == "multi_label_classification";
}

ANVIL_INLINE void fine_tuning::state::record_reads() {
    // Every tensor the model reads, with its role, found by building it once (which also checks every
    // shape against the config).
    graph scratch;
    models::weight_loader loader(
        scratch, weights,
        [this](graph&, std::string_view name, models::weight_role role, const dims& shape,
               const std::function<tensor<float>()>&) -> std::optional<tensor<float>> {
            const auto known =
                std::find_if(reads.begin(), reads.end(), [&](const auto& r) { return r.name == name; });
            if (known == reads.end()) reads.push_back({std::string(name), role, shape});
            return std::nullopt;
        });
    // Any size builds the graph; a ResNet's BatchNorms need two values per channel, hence two images.
    const dims input = text ? dims{1, 1}
                       : resnet
                           ? dims{2, resnet_layout.config.channels, 32, 32}
                           : dims{1, vit_config.channels, vit_config.image_height, vit_config.image_width};
    for (models::batch_norm_statistics& statistics : forward(scratch, loader, input).statistics) {
        fine_tuning_detail::running_statistics r;
        r.norm = std::move(statistics.norm);
        running.push_back(std::move(r));
    }
}

ANVIL_INLINE void fine_tuning::state::read_running_statistics() {
    using fine_tuning_detail::message;
    for (fine_tuning_detail::running_statistics& r : running) {
        // The norm's weight was read with its shape [C]; the running statistics must match it.
        const std::int64_t channels = weights->tensor(r.norm + ".weight").shape()[0];
        r.mean = anvil::detail::values_f64(
            models::checked_tensor(*weights, r.norm + ".running_mean", dims{channels}));
        r.variance = anvil::detail::values_f64(
            models::checked_tensor(*weights, r.norm + ".running_var", dims{channels}));
        r.mean_updated = !frozen(r.norm + ".running_mean");
        r.variance_updated = !frozen(r.norm + ".running_var");
        r.count_updated = !frozen(r.norm + ".num_batches_tracked");
        if (const tensor_view* count = weights->find(r.norm + ".num_batches_tracked");
            count != nullptr && (count->type() != dtype::i64 || count->element_count() != 1)) {
            throw format_error(message(count->source_name(), ": tensor '", count->name(),
                                       "': expected one i64 (a BatchNorm's step count), got ",
                                       dtype_name(count->type()), " ", dims(count->shape())));
        }
    }
}

ANVIL_INLINE std::vector<fine_tuning_detail::example> fine_tuning::state::read_examples(
    const std::filesystem::path& path, std::string_view flag) const {
    using fine_tuning_detail::message;
    if (!std::filesystem::exists(path)) throw io_error(message(flag, ": ", path.string(), " does not exist"));
    std::ifstream file(path, std::ios::binary);
    if (!file) throw io_error(message(flag, ": cannot read ", path.string()));
    std::vector<fine_tuning_detail::example> loaded;
    const std::filesystem::path base = std::filesystem::absolute(path).parent_path();
    std::shared_ptr<const tokenizer> words;
    // ViT takes its configured size; a ResNet any size, the same for every example (batches stack them).
    const std::int64_t channels = resnet ? resnet_layout.config.channels : vit_config.channels;
    std::optional<std::pair<std::int64_t, std::int64_t>> size;
    if (!text && !resnet) size.emplace(vit_config.image_height, vit_config.image_width);
    const auto check_size = [&](const std::string& where, const std::string& what, std::int64_t height,
                                std::int64_t width) {
        if (!size) size.emplace(height, width);
        if (height != size->first || width != size->second) {
            throw shape_error(message(where, ": ", what, " ", height, "x", width,
                                      resnet ? ", the first example's are " : ", the model takes ",
                                      size->first, "x", size->second));
        }
    };
    image_preprocessing preprocessing;
    bool preprocessing_loaded = false;
    std::string line;
    for (std::int64_t number = 1; std::getline(file, line); ++number) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        const std::string where = message(path.string(), " line ", number);
        json::value record;
        try {
            record = json::parse(line, where);
        } catch (const error& e) {
            throw format_error(message(where, ": not JSON (", e.what(), ")"));
        }
        const json::value* label = record.is_object() ? record.find("label") : nullptr;
        if (label == nullptr) throw format_error(message(where, ": no label"));
        fine_tuning_detail::example e;
        if (regression) {
            if (!label->is_number())
                throw format_error(message(where, ": label ", json::dump(*label),
                                           " is not a number (num_labels 1: regression)"));
            e.label = label->as_double();
        } else if (multi_label) {
            // Hugging Face takes the multi-hot row as floats, so a soft label is a label too.
            const bool row = label->is_array() &&
                             static_cast<std::int64_t>(label->as_array().size()) == labels &&
                             std::all_of(label->as_array().begin(), label->as_array().end(),
                                         [](const json::value& v) { return v.is_number(); });
            if (!row)
                throw format_error(message(where, ": label ", json::dump(*label), " is not a list of ",
                                           labels, " numbers (problem_type multi_label_classification)"));
            for (const json::value& v : label->as_array()) {
                if (!(v.as_double() >= 0.0 && v.as_double() <= 1.0))
                    throw format_error(message(where, ": label ", json::dump(*label),
                                               " has a value outside [0, 1] (problem_type "
                                               "multi_label_classification)"));
                e.multi_hot.push_back(static_cast<float>(v.as_double()));
            }
        } else {
            if (!label->is_integer() || label->as_int() < 0 || label->as_int() >= labels)
                throw format_error(
                    message(where, ": label ", json::dump(*label), " out of range [0, ", labels, ")"));
            e.label = static_cast<double>(label->as_int());
        }
        if (text) {
            const auto integers = [&](const json::value* list, std::string_view what) {
                std::vector<std::int32_t> values;
                if (list == nullptr || !list->is_array())
                    throw format_error(message(where, ": ", what, " must be a list of integers"));
                for (const json::value& v : list->as_array()) {
                    if (!v.is_integer() || v.as_int() < INT32_MIN || v.as_int() > INT32_MAX)
                        throw format_error(message(where, ": ", what, " must be a list of integers"));
                    values.push_back(static_cast<std::int32_t>(v.as_int()));
                }
                return values;
            };
            if (const json::value* ids = record.find("ids")) {
                e.ids = integers(ids, "ids");
                if (e.ids.empty())
                    throw format_error(message(where, ": ids must be a non-empty list of integers"));
                if (const json::value* types = record.find("type_ids")) {
                    e.types = integers(types, "type_ids");
                    if (e.types.size() != e.ids.size())
                        throw format_error(
                            message(where, ": type_ids must be a list of integers as long as ids"));
                }
            } else if (const json::value* first = record.find("text");
                       first != nullptr && first->is_string()) {
                if (!words) {
                    try {
                        words = std::make_shared<const tokenizer>(tokenizer::load(options.model));
                    } catch (const error& problem) {
                        throw io_error(message(where,
                                               ": the \"text\" form needs the model folder's tokenizer (",
                                               problem.what(), ")"));
                    }
                }
                const json::value* second = record.find("text_pair");
                if (second != nullptr && !second->is_string() && !second->is_null())
                    throw format_error(message(where, ": text_pair must be a string"));
                const encoding encoded = second != nullptr && second->is_string()
                                             ? words->encode_pair(first->as_string(), second->as_string())
                                             : words->encode(first->as_string());
                e.ids = encoded.ids;
                e.types = encoded.type_ids;
            } else {
                throw format_error(message(where, ": no \"ids\" or \"text\""));
            }
            if (static_cast<std::int64_t>(e.ids.size()) > max_tokens) {
                if (!options.truncate) {
                    throw shape_error(message(where, ": example of ", e.ids.size(),
                                              " tokens is longer than the model's ", max_tokens,
                                              " positions (--truncate keeps the first ", max_tokens, ")"));
                }
                e.ids.resize(static_cast<std::size_t>(max_tokens));
                if (!e.types.empty()) e.types.resize(static_cast<std::size_t>(max_tokens));
            }
            for (const std::int32_t id : e.ids) {
                if (id < 0 || id >= text_config.vocab_size)
                    throw format_error(message(where, ": id ", id, " out of the vocabulary [0, ",
                                               text_config.vocab_size, ")"));
            }
            if (!text_config.table().token_types) {
                e.types.clear();
            } else {
                for (const std::int32_t t : e.types) {
                    if (t < 0 || t >= text_config.type_vocab_size)
                        throw format_error(message(where, ": type id ", t, " out of range [0, ",
                                                   text_config.type_vocab_size, ")"));
                }
            }
        } else {
            if (const json::value* pixels = record.find("pixels"); pixels != nullptr && pixels->is_string()) {
                const std::filesystem::path file_path = base / pixels->as_string();
                if (!std::filesystem::exists(file_path))
                    throw io_error(message(where, ": pixels file ", file_path.string(), " is missing"));
                npy::array read;
                try {
                    read = npy::read(file_path);
                } catch (const error& problem) {
                    throw format_error(
                        message(where, ": pixels file ", file_path.string(), ": ", problem.what()));
                }
                if (read.type != dtype::f32 || read.shape.size() != 3 || read.shape[0] != channels) {
                    throw format_error(message(where, ": pixels ", file_path.string(), " are ",
                                               dtype_name(read.type), " ", dims(read.shape),
                                               ", not float32 [", channels, ", H, W]"));
                }
                check_size(where, message("pixels ", file_path.string(), " are"), read.shape[1],
                           read.shape[2]);
                e.pixels = host_tensor(dtype::f32, dims(read.shape));
                std::memcpy(e.pixels.raw(), read.data.data(), read.data.size());
            } else if (const json::value* picture = record.find("image");
                       picture != nullptr && picture->is_string()) {
                const std::filesystem::path file_path = base / picture->as_string();
                if (!std::filesystem::exists(file_path))
                    throw io_error(message(where, ": image file ", file_path.string(), " is missing"));
                if (!preprocessing_loaded) {
                    preprocessing = image_preprocessing::load(options.model);
                    preprocessing_loaded = true;
                }
                host_tensor made = preprocess(read_image(file_path), preprocessing);
                const dims& shape = made.shape();
                if (shape.rank() != 3 || shape[0] != channels) {
                    throw shape_error(message(where, ": the folder's preprocessing makes ", shape,
                                              " pixels but the model takes [", channels, ", H, W]"));
                }
                check_size(where, "the folder's preprocessing makes images of", shape[1], shape[2]);
                e.pixels = std::move(made);
            } else {
                throw format_error(message(where, ": no \"pixels\" or \"image\""));
            }
        }
        loaded.push_back(std::move(e));
    }
    if (loaded.empty()) throw format_error(message(flag, ": ", path.string(), " has no examples"));
    return loaded;
}

ANVIL_INLINE void fine_tuning::state::set_up_lora() {
    using fine_tuning_detail::message;
    if (!options.lora_rank && options.init_adapter.empty()) return;
    if (resnet) {
        throw unsupported_error(message(
            options.lora_rank ? "--lora" : "--init-adapter",
            ": LoRA on a ResNet is not supported (PEFT adapts Linear layers, and a ResNet's one Linear, "
            "its classifier, is trained fully as modules_to_save); train it fully, with --freeze for "
            "what should stay"));
    }
    lora = true;
    // PEFT's modules_to_save for the head: PeftModelForSequenceClassification's for a text classifier, ViT's
    // classifier otherwise.
    const std::vector<std::string> default_heads =
        text ? std::vector<std::string>(std::begin(models::sequence_classification_heads),
                                        std::end(models::sequence_classification_heads))
             : std::vector<std::string>{"classifier"};
    models::lora_config& config = adapter_config;
    std::optional<checkpoint> adapter;
    if (!options.init_adapter.empty()) {
        config = models::lora_config::read(options.init_adapter, "--init-adapter");
        std::vector<std::string>& heads = config.modules_to_save;
        if (text || heads.empty()) {
            for (const std::string& h : default_heads)
                if (std::find(heads.begin(), heads.end(), h) == heads.end()) heads.push_back(h);
        }
        if (options.lora_rank && *options.lora_rank != config.rank)
            throw error(
                message("--lora ", *options.lora_rank, " disagrees with the adapter's r ", config.rank));
        if (options.lora_alpha && *options.lora_alpha != config.alpha)
            throw error(message("--lora-alpha ", *options.lora_alpha,
                                " disagrees with the adapter's lora_alpha ", config.alpha));
        if (options.lora_targets) {
            std::vector<std::string> given = *options.lora_targets;
            std::sort(given.begin(), given.end());
            std::vector<std::string> stored = config.target_list;
            std::sort(stored.begin(), stored.end());
            if (config.target_pattern || given != stored)
                throw error(message("--lora-targets disagrees with the adapter's target_modules"));
        }
        adapter = models::open_lora_tensors(options.init_adapter, "--init-adapter");
    } else {
        config.rank = *options.lora_rank;
        if (config.rank <= 0) throw error("--lora must be positive");
        config.alpha = options.lora_alpha.value_or(8.0);
        if (options.lora_targets) {
            config.target_list = *options.lora_targets;
        } else if (model_type == "bert" || model_type == "roberta" || model_type == "xlm-roberta") {
            config.target_list = {"query", "value"};  // PEFT's default for these model types
        } else {
            throw error(message("--lora-targets is needed for model_type ", model_type));
        }
        config.modules_to_save = default_heads;
        if (text) config.task_type = "SEQ_CLS";
    }
    std::vector<std::string>& targets = config.target_list;
    std::sort(targets.begin(), targets.end());
    targets.erase(std::unique(targets.begin(), targets.end()), targets.end());

    // The modules the model has (every prefix of a tensor name) and which are linear layers.
    std::vector<std::string> modules;
    std::set<std::string> linear;
    for (const auto& r : reads) {
        for (std::string& m : models::modules_of(r.name))
            if (std::find(modules.begin(), modules.end(), m) == modules.end())
                modules.push_back(std::move(m));
        if (r.role == models::weight_role::linear_weight) linear.insert(r.name.substr(0, r.name.size() - 7));
    }
    models::lora_modules chosen = models::match_lora_modules(config, modules, linear, config.modules_to_save);
    lora_modules = std::move(chosen.adapted);
    head_modules = std::move(chosen.saved);

    // A fresh adapter: lora_A as numpy's default_rng(seed).uniform(-1/sqrt(in), 1/sqrt(in)) per module in
    // sorted order (kaiming_uniform_(a=sqrt(5))'s bound), lora_B zero.
    numpy_generator rng(options.seed);
    for (const std::string& module : lora_modules) {
        const auto read = std::find_if(reads.begin(), reads.end(),
                                       [&](const auto& r) { return r.name == module + ".weight"; });
        const std::int64_t out = read->shape[0], in = read->shape[1];
        const double bound = 1.0 / std::sqrt(static_cast<double>(in));
        const std::vector<double> drawn =
            rng.uniform(-bound, bound, static_cast<std::size_t>(config.rank * in));
        std::vector<float> a(drawn.size());
        std::transform(drawn.begin(), drawn.end(), a.begin(), [](double v) { return static_cast<float>(v); });
        fixed[module + ".lora_A.weight"] = host_tensor::from(a, dims{config.rank, in});
        fixed[module + ".lora_B.weight"] = host_tensor(dtype::f32, dims{out, config.rank});
        lora_shapes[module + ".lora_A.weight"] = dims{config.rank, in};
        lora_shapes[module + ".lora_B.weight"] = dims{out, config.rank};
    }
    if (!adapter) return;
    std::map<std::string, dims> head_shapes;
    for (const auto& r : reads) {
        for (const std::string& h : head_modules)
            if (r.name.rfind(h + ".", 0) == 0) head_shapes[r.name] = r.shape;
    }
    for (const auto& [name, view] :
         models::lora_tensors(*adapter, lora_shapes, head_shapes, "--init-adapter")) {
        fixed[name] = host_tensor::from(view->to_f32(), dims(view->shape()));
        adapter_types[name] = view->type();
    }
}

ANVIL_INLINE void fine_tuning::state::choose_trained() {
    using fine_tuning_detail::message;
    std::vector<std::string> candidates;
    if (lora) {
        for (const std::string& module : lora_modules) {
            candidates.push_back(module + ".lora_A.weight");
            candidates.push_back(module + ".lora_B.weight");
        }
        for (const auto& r : reads) {
            for (const std::string& h : head_modules)
                if (r.name.rfind(h + ".", 0) == 0) candidates.push_back(r.name);
        }
    } else {
        for (const auto& r : reads)
            candidates.push_back(r.name);
    }
    for (const std::string& name : candidates) {
        if (frozen(name)) continue;
        const auto start = fixed.find(name);
        const host_tensor initial =
            start != fixed.end()
                ? start->second
                : host_tensor::from(weights->tensor(name).to_f32(), dims(weights->tensor(name).shape()));
        params.declare(name, initial, anvil::detail::fine_tuning::hf_decays(name));
        trained_names.push_back(name);
        trained_set.insert(name);
        if (start != fixed.end()) fixed.erase(start);
    }
    if (trained_names.empty()) {
        std::string flags;
        for (const std::string& pattern : options.freeze)
            flags += (flags.empty() ? "--freeze " : " --freeze ") + pattern;
        throw error(
            message(flags.empty() ? std::string("the options") : flags, " freezes every trainable tensor"));
    }
}

ANVIL_INLINE void fine_tuning::state::start_training() {
    const auto n = static_cast<std::int64_t>(examples.size());
    const std::int64_t per_epoch = (n + options.batch_size - 1) / options.batch_size;
    total = options.steps ? *options.steps : options.epochs.value_or(3) * per_epoch;
    std::vector<parameter> optimized = params.parameters();  // shares the set's elements
    if (options.optimizer == "sgd") {
        sgd_options o;
        o.momentum = options.momentum;
        o.weight_decay = options.weight_decay;
        o.nesterov = options.nesterov;
        opt = std::make_unique<sgd>(std::move(optimized), o);
    } else {
        adamw_options o;
        o.beta1 = options.beta1;
        o.beta2 = options.beta2;
        o.eps = options.eps;
        o.weight_decay = options.weight_decay;
        opt = std::make_unique<adamw>(std::move(optimized), o);
    }
    trainer_options t;
    t.compile = options.compile;
    t.max_grad_norm = options.max_grad_norm;
    t.seed = options.seed;
    runner = std::make_unique<trainer>(
        params, [this](std::span<const io_info> batch) { return build(batch); }, *opt,
        lr_schedule(options.schedule, options.lr, options.warmup_steps, total), t);
}

ANVIL_INLINE fine_tuning::fine_tuning(std::unique_ptr<state> s) : state_(std::move(s)) {}
ANVIL_INLINE fine_tuning::fine_tuning(fine_tuning&&) noexcept = default;
ANVIL_INLINE fine_tuning& fine_tuning::operator=(fine_tuning&&) noexcept = default;
ANVIL_INLINE fine_tuning::~fine_tuning() = default;

ANVIL_INLINE fine_tuning fine_tuning::load(const fine_tune_options& options) {
    fine_tuning_detail::check_options(options);
    auto s = std::make_unique<state>();
    s->options = options;
    s->load_model();
    s->record_reads();
    s->read_running_statistics();
    s->set_up_lora();
    s->choose_trained();
    s->examples = s->read_examples(options.data, "--data");
    s->start_training();
    return fine_tuning(std::move(s));
}

ANVIL_INLINE std::int64_t fine_tuning::total_steps() const noexcept {
    return state_->total;
}
ANVIL_INLINE std::int64_t fine_tuning::steps_done() const noexcept {
    return state_->done;
}
ANVIL_INLINE const std::vector<parameter>& fine_tuning::trained() const noexcept {
    return state_->params.parameters();
}
ANVIL_INLINE std::size_t fine_tuning::programs_compiled() const noexcept {
    return state_->runner->programs_compiled();
}
ANVIL_INLINE std::size_t fine_tuning::examples() const noexcept {
    return state_->examples.size();
}

ANVIL_INLINE step_result fine_tuning::step() {
    state& s = *state_;
    if (s.done >= s.total)
        throw error(anvil::detail::message("fine-tuning: all ", s.total, " steps are done"));
    const std::size_t n = s.examples.size();
    if (s.epoch < 0 || s.cursor >= n) {
        ++s.epoch;
        s.cursor = 0;
        s.order_epoch();
    }
    const std::size_t end = std::min(n, s.cursor + static_cast<std::size_t>(s.options.batch_size));
    const std::span<const std::size_t> items(s.order.data() + s.cursor, end - s.cursor);
    s.cursor = end;
    const std::vector<named_tensor> inputs = s.collate(s.examples, items);
    step_result result = s.runner->step(inputs);
    ++s.done;
    if (!s.running.empty()) {
        const auto pixels = std::find_if(inputs.begin(), inputs.end(),
                                         [](const named_tensor& input) { return input.name == "pixels"; });
        s.update_running_statistics(result, pixels->tensor.shape());
    }
    return result;
}

ANVIL_INLINE void fine_tuning::state::update_running_statistics(step_result& result, const dims& pixels) {
    using fine_tuning_detail::batch_norm_momentum;
    // The forward ran in train mode whether or not loss scaling skipped the update, so the statistics move
    // every step, as nn.BatchNorm2d's do.
    const std::vector<std::int64_t>& counts =
        batch_norm_counts.at(std::vector<std::int64_t>(pixels.begin(), pixels.end()));
    for (std::size_t i = 0; i < running.size(); ++i) {
        fine_tuning_detail::running_statistics& r = running[i];
        const std::vector<float> mean = result.outputs[1 + 2 * i].to_f32();
        const std::vector<float> biased = result.outputs[2 + 2 * i].to_f32();
        const auto m = static_cast<double>(counts[i]);
        for (std::size_t c = 0; c < r.mean.size(); ++c) {
            if (r.mean_updated)
                r.mean[c] = (1 - batch_norm_momentum) * r.mean[c] + batch_norm_momentum * double{mean[c]};
            if (r.variance_updated) {
                const double unbiased = double{biased[c]} * m / (m - 1);
                r.variance[c] = (1 - batch_norm_momentum) * r.variance[c] + batch_norm_momentum * unbiased;
            }
        }
    }
    // The step's outputs are the logits, as for every other model.
    result.outputs.resize(1);
}

namespace fine_tuning_detail {

// fp32 master weights as a checkpoint's dtype stores them (round to nearest even).
inline std::vector<std::byte> stored_bytes(dtype type, std::span<const float> values) {
    std::vector<std::byte> bytes(values.size() * dtype_size(type));
    switch (type) {
        case dtype::f32:
            std::memcpy(bytes.data(), values.data(), bytes.size());
            break;
        case dtype::f64:
            for (std::size_t i = 0; i < values.size(); ++i) {
                const auto v = static_cast<double>(values[i]);
                std::memcpy(bytes.data() + i * sizeof v, &v, sizeof v);
            }
            break;
        case dtype::f16:
            anvil::convert_f32_to_f16(values.data(), values.size(), reinterpret_cast<half*>(bytes.data()));
            break;
        case dtype::bf16:
            anvil::convert_f32_to_bf16(values.data(), values.size(),
                                       reinterpret_cast<bfloat16*>(bytes.data()));
            break;
        default:
            throw type_error(message("fine-tuning: cannot store trained values as ", dtype_name(type)));
    }
    return bytes;
}

inline void copy_auxiliary(const std::filesystem::path& from, const std::filesystem::path& to,
                           bool with_config) {
    std::vector<std::string_view> names(std::begin(auxiliary_files), std::end(auxiliary_files));
    if (with_config) names.insert(names.begin(), "config.json");
    for (const std::string_view name : names) {
        const std::filesystem::path source = from / name;
        if (std::filesystem::is_regular_file(source))
            std::filesystem::copy_file(source, to / name, std::filesystem::copy_options::overwrite_existing);
    }
}

}  // namespace fine_tuning_detail

ANVIL_INLINE void fine_tuning::save(const std::filesystem::path& out) const {
    using fine_tuning_detail::stored_bytes;
    const state& s = *state_;
    std::filesystem::create_directories(out);
    safetensors_writer writer;
    writer.set_metadata("format", "pt");
    if (!s.lora) {
        // Exactly the input's tensors: the trained ones and the updated BatchNorm statistics rounded to their
        // stored dtype (the statistics through f32, as the reference rounds them), the rest byte for byte.
        std::map<std::string, std::vector<float>> statistics;
        std::set<std::string> counters;
        for (const fine_tuning_detail::running_statistics& r : s.running) {
            if (r.mean_updated) statistics[r.norm + ".running_mean"] = fine_tuning_detail::narrowed(r.mean);
            if (r.variance_updated)
                statistics[r.norm + ".running_var"] = fine_tuning_detail::narrowed(r.variance);
            if (r.count_updated) counters.insert(r.norm + ".num_batches_tracked");
        }
        for (const tensor_view* view : s.weights->tensors()) {
            const std::vector<std::int64_t> shape(view->shape().begin(), view->shape().end());
            if (s.trained_set.count(view->name()) != 0) {
                writer.add(view->name(), view->type(), shape,
                           stored_bytes(view->type(), s.params.value_of(view->name()).values<float>()));
            } else if (const auto found = statistics.find(view->name()); found != statistics.end()) {
                writer.add(view->name(), view->type(), shape, stored_bytes(view->type(), found->second));
            } else if (counters.count(view->name()) != 0) {
                // One increment per forward pass in train mode, as nn.BatchNorm2d counts.
                std::int64_t count = 0;
                std::memcpy(&count, view->bytes().data(), sizeof count);
                count += s.done;
                std::vector<std::byte> bytes(sizeof count);
                std::memcpy(bytes.data(), &count, sizeof count);
                writer.add(view->name(), view->type(), shape, bytes);
            } else {
                writer.add(*view);
            }
        }
        fine_tuning_detail::copy_auxiliary(s.options.model, out, true);
        writer.write(out / "model.safetensors");
        return;
    }
    // PEFT's save_pretrained: lora matrices in f32, the head's tensors in the dtype they came in, under
    // base_model.model.<name> (no adapter name, no "modules_to_save.default.").
    const auto value_of = [&](const std::string& name) -> const host_tensor& {
        if (s.trained_set.count(name) != 0) return s.params.value_of(name);
        return s.fixed.at(name);
    };
    for (const auto& [name, shape] : s.lora_shapes) {
        const host_tensor& v = value_of(name);
        writer.add("base_model.model." + name, dtype::f32,
                   std::vector<std::int64_t>(shape.begin(), shape.end()),
                   stored_bytes(dtype::f32, v.values<float>()));
    }
    for (const auto& r : s.reads) {
        const bool in_head = std::any_of(s.head_modules.begin(), s.head_modules.end(),
                                         [&](const std::string& h) { return r.name.rfind(h + ".", 0) == 0; });
        if (!in_head) continue;
        const std::string saved = "base_model.model." + r.name;
        const auto given = s.adapter_types.find(r.name);
        const dtype type = given != s.adapter_types.end() ? given->second : s.weights->tensor(r.name).type();
        if (s.trained_set.count(r.name) == 0 && s.fixed.count(r.name) == 0) {
            writer.add(saved, s.weights->tensor(r.name));
            continue;
        }
        writer.add(saved, type, std::vector<std::int64_t>(r.shape.begin(), r.shape.end()),
                   stored_bytes(type, value_of(r.name).values<float>()));
    }
    writer.write(out / "adapter_model.safetensors");

    json::object config;
    const auto number = [](double v) {
        return v == std::floor(v) && std::abs(v) < 1e15 ? json::value(static_cast<std::int64_t>(v))
                                                        : json::value(v);
    };
    json::array saved_heads, targets;
    const models::lora_config& adapter = s.adapter_config;
    for (const std::string& h : adapter.modules_to_save)
        saved_heads.emplace_back(h);
    for (const std::string& t : adapter.target_list)
        targets.emplace_back(t);
    config["alpha_pattern"] = json::object{};
    config["auto_mapping"] = nullptr;
    config["base_model_name_or_path"] = s.options.model.string();
    config["bias"] = "none";
    config["fan_in_fan_out"] = false;
    config["inference_mode"] = true;
    config["init_lora_weights"] = true;
    config["layers_pattern"] = nullptr;
    config["layers_to_transform"] = nullptr;
    config["lora_alpha"] = number(adapter.alpha);
    config["lora_dropout"] = 0.0;
    config["modules_to_save"] = std::move(saved_heads);
    config["peft_type"] = "LORA";
    config["r"] = adapter.rank;
    config["rank_pattern"] = json::object{};
    config["revision"] = nullptr;
    config["target_modules"] =
        adapter.target_pattern ? json::value(*adapter.target_pattern) : json::value(std::move(targets));
    config["task_type"] = adapter.task_type ? json::value(*adapter.task_type) : json::value(nullptr);
    config["use_dora"] = false;
    config["use_rslora"] = false;
    std::ofstream file(out / "adapter_config.json", std::ios::binary);
    file << json::dump(json::value(std::move(config)), 2);
    if (!file)
        throw io_error(anvil::detail::message("cannot write ", (out / "adapter_config.json").string()));
    fine_tuning_detail::copy_auxiliary(s.options.model, out, false);
}

ANVIL_INLINE bool fine_tuning::at_epoch_end() const noexcept {
    return state_->epoch >= 0 && state_->cursor >= state_->examples.size();
}

ANVIL_INLINE std::int64_t fine_tuning::epochs_done() const noexcept {
    return state_->epoch + (at_epoch_end() ? 1 : 0);
}

ANVIL_INLINE json::object fine_tuning::state::run_options() const {
    // What decides the numbers of every step: a resumed run must agree on all of it. Paths as given.
    const fine_tune_options& o = options;
    json::object r;
    const auto text_of = [](double v) { return json::dump(json::value(v)); };
    r["--model"] = o.model.string();
    r["--data"] = o.data.string();
    r["total steps"] = total;
    r["--batch-size"] = o.batch_size;
    r["--lr"] = text_of(o.lr);
    r["--optimizer"] = o.optimizer;
    r["--momentum"] = text_of(o.momentum);
    r["--nesterov"] = o.nesterov;
    r["--weight-decay"] = text_of(o.weight_decay);
    r["--betas"] = text_of(o.beta1) + "," + text_of(o.beta2);
    r["--eps"] = text_of(o.eps);
    r["--schedule"] = std::string(schedule_name(o.schedule));
    r["--warmup-steps"] = o.warmup_steps;
    r["--max-grad-norm"] = o.max_grad_norm ? json::value(text_of(*o.max_grad_norm)) : json::value(nullptr);
    r["--no-shuffle"] = !o.shuffle;
    r["--seed"] = static_cast<std::int64_t>(o.seed);
    json::array freeze;
    for (const std::string& f : o.freeze)
        freeze.emplace_back(f);
    r["--freeze"] = std::move(freeze);
    const models::lora_config& adapter = adapter_config;
    r["--lora"] = lora ? json::value(adapter.rank) : json::value(nullptr);
    r["--lora-alpha"] = lora ? json::value(text_of(adapter.alpha)) : json::value(nullptr);
    json::array targets;
    for (const std::string& t : adapter.target_list)
        targets.emplace_back(t);
    r["--lora-targets"] =
        adapter.target_pattern ? json::value(*adapter.target_pattern) : json::value(std::move(targets));
    r["--init-adapter"] = o.init_adapter.string();
    r["--truncate"] = o.truncate;
    const device target = o.compile.target;
    r["--backend"] = target == device::cpu      ? "cpu"
                     : target == device::ane    ? "ane"
                     : target == device::coreml ? "coreml"
                                                : "auto";
    return r;
}

ANVIL_INLINE void fine_tuning::save_checkpoint(const std::filesystem::path& folder) const {
    const state& s = *state_;
    save(folder);
    safetensors_writer master;
    for (const parameter& p : s.params.parameters())
        master.add(p.name, std::vector<std::int64_t>(p.value.shape().begin(), p.value.shape().end()),
                   p.value.values<float>());
    master.write(folder / "master_weights.safetensors");
    const optimizer_state o = s.opt->state();
    safetensors_writer moments;
    moments.set_metadata("optimizer", o.name);
    moments.set_metadata("step", std::to_string(o.step));
    for (const named_tensor& t : o.tensors)
        moments.add(t.name, std::vector<std::int64_t>(t.tensor.shape().begin(), t.tensor.shape().end()),
                    t.tensor.values<float>());
    moments.write(folder / "optimizer.safetensors");
    if (!s.running.empty()) {
        // The BatchNorm statistics as the steps keep them (float64; model.safetensors has them rounded).
        safetensors_writer statistics;
        for (const fine_tuning_detail::running_statistics& r : s.running) {
            const std::vector<std::int64_t> shape{static_cast<std::int64_t>(r.mean.size())};
            statistics.add(r.norm + ".running_mean", shape, r.mean);
            statistics.add(r.norm + ".running_var", shape, r.variance);
        }
        statistics.write(folder / "running_statistics.safetensors");
    }
    const trainer_progress progress = s.runner->progress();
    json::object where;
    where["step"] = s.done;
    where["epoch"] = s.epoch;
    where["cursor"] = static_cast<std::int64_t>(s.cursor);
    where["steps_tried"] = progress.steps_tried;
    where["loss_scale"] = progress.loss_scale;
    where["clean_steps"] = progress.clean_steps;
    where["options"] = s.run_options();
    std::ofstream file(folder / "trainer_state.json", std::ios::binary);
    file << json::dump(json::value(std::move(where)), 2) << "\n";
    if (!file)
        throw io_error(anvil::detail::message("cannot write ", (folder / "trainer_state.json").string()));
}

ANVIL_INLINE void fine_tuning::resume(const std::filesystem::path& folder) {
    using fine_tuning_detail::message;
    state& s = *state_;
    const std::filesystem::path state_path = folder / "trainer_state.json";
    if (!std::filesystem::exists(state_path))
        throw io_error(
            message("--resume: ", state_path.string(), " does not exist (not a checkpoint folder)"));
    const json::value saved = json::parse_file(state_path);
    const json::value* given = saved.is_object() ? saved.find("options") : nullptr;
    if (given == nullptr || !given->is_object())
        throw format_error(message("--resume: ", state_path.string(), " has no options"));
    const json::object now = s.run_options();
    for (const auto& [key, value] : now) {
        const json::value* then = given->find(key);
        if (then == nullptr || *then != value) {
            throw error(message("--resume: the checkpoint was trained with ", key, " ",
                                then == nullptr ? std::string("(unset)") : json::dump(*then),
                                ", this run has ", json::dump(value)));
        }
    }
    const auto integer = [&](std::string_view key) {
        const json::value* v = saved.find(key);
        if (v == nullptr || !v->is_integer())
            throw format_error(message("--resume: ", state_path.string(), ": '", key, "' is missing"));
        return v->as_int();
    };
    const json::value* scale = saved.find("loss_scale");
    if (scale == nullptr || !scale->is_number())
        throw format_error(message("--resume: ", state_path.string(), ": 'loss_scale' is missing"));
    const std::int64_t step = integer("step"), epoch = integer("epoch"), cursor = integer("cursor");
    if (step < 0 || step > s.total || epoch < -1 || cursor < 0 ||
        cursor > static_cast<std::int64_t>(s.examples.size()))
        throw format_error(message("--resume: ", state_path.string(), " is out of range for this run"));

    // The weights: every trained tensor, bit for bit, into the tensors the optimizer shares.
    const checkpoint master = checkpoint::open(folder / "master_weights.safetensors");
    for (parameter& p : s.params.parameters()) {
        const tensor_view* v = master.find(p.name);
        if (v == nullptr || v->type() != dtype::f32 || dims(v->shape()) != p.value.shape())
            throw format_error(
                message("--resume: master_weights.safetensors lacks f32 ", p.name, " ", p.value.shape()));
        std::memcpy(p.value.raw(), v->bytes().data(), p.value.byte_size());
    }
    if (master.size() != s.params.parameters().size())
        throw format_error(message("--resume: master_weights.safetensors holds ", master.size(),
                                   " tensors; this run trains ", s.params.parameters().size()));
    const checkpoint moments = checkpoint::open(folder / "optimizer.safetensors");
    optimizer_state o;
    for (const auto& [key, value] : moments.files().front().metadata()) {
        if (key == "optimizer") o.name = value;
        if (key == "step") o.step = std::stoll(value);
    }
    for (const tensor_view* v : moments.tensors())
        o.tensors.push_back({v->name(), host_tensor::from(v->to_f32(), dims(v->shape()))});
    s.opt->load_state(o);
    if (!s.running.empty()) {
        const checkpoint statistics = checkpoint::open(folder / "running_statistics.safetensors");
        for (fine_tuning_detail::running_statistics& r : s.running) {
            for (auto* values : {&r.mean, &r.variance}) {
                const std::string name = r.norm + (values == &r.mean ? ".running_mean" : ".running_var");
                const tensor_view* v = statistics.find(name);
                if (v == nullptr || v->type() != dtype::f64 || v->element_count() != values->size())
                    throw format_error(message("--resume: running_statistics.safetensors lacks f64 ", name));
                std::memcpy(values->data(), v->bytes().data(), values->size() * sizeof(double));
            }
        }
    }
    s.runner->restore({integer("steps_tried"), scale->as_double(), integer("clean_steps")});
    s.done = step;
    s.epoch = epoch;
    s.cursor = static_cast<std::size_t>(cursor);
    if (s.epoch >= 0) s.order_epoch();  // the order of the epoch under way, as step() made it
}

ANVIL_INLINE evaluation fine_tuning::evaluate(const std::filesystem::path& data) {
    state& s = *state_;
    const std::vector<fine_tuning_detail::example> examples = s.read_examples(data, "--eval");
    // A ResNet evaluates with BatchNorm in eval mode: its running statistics as the steps left them, inputs
    // of the evaluation program like the trained tensors, so that each evaluation batch shape compiles once.
    std::vector<named_tensor> statistics;
    for (const fine_tuning_detail::running_statistics& r : s.running) {
        const dims channels{static_cast<std::int64_t>(r.mean.size())};
        statistics.push_back(
            {r.norm + ".running_mean", host_tensor::from(fine_tuning_detail::narrowed(r.mean), channels)});
        statistics.push_back(
            {r.norm + ".running_var", host_tensor::from(fine_tuning_detail::narrowed(r.variance), channels)});
    }
    const fine_tuning_detail::evaluation_mode eval_mode(s.evaluating);
    evaluation result;
    result.examples = examples.size();
    double loss = 0.0, hits = 0.0, squared = 0.0;
    const auto batch = static_cast<std::size_t>(s.options.batch_size);
    std::vector<std::size_t> items;
    for (std::size_t start = 0; start < examples.size(); start += batch) {
        items.resize(std::min(batch, examples.size() - start));
        std::iota(items.begin(), items.end(), start);
        std::vector<named_tensor> inputs = s.collate(examples, items);
        inputs.insert(inputs.end(), statistics.begin(), statistics.end());
        const step_result r = s.runner->evaluate(inputs);
        loss += r.loss * static_cast<double>(items.size());
        const std::vector<float> logits = r.outputs.at(0).to_f32();
        const auto width = static_cast<std::size_t>(s.labels);
        for (std::size_t i = 0; i < items.size(); ++i) {
            const fine_tuning_detail::example& e = examples[items[i]];
            const std::span<const float> row = std::span<const float>(logits).subspan(i * width, width);
            if (s.regression) {
                const double d = static_cast<double>(row[0]) - e.label;
                squared += d * d;
            } else if (s.multi_label) {
                // Right when every class is: predicted (logit above 0, probability above 1/2) exactly where
                // the label is above 1/2.
                bool right = true;
                for (std::size_t c = 0; c < width; ++c)
                    right = right && (row[c] > 0.0f) == (e.multi_hot[c] > 0.5f);
                hits += right ? 1.0 : 0.0;
            } else {
                const auto top = std::max_element(row.begin(), row.end()) - row.begin();
                hits += static_cast<double>(top) == e.label ? 1.0 : 0.0;
            }
        }
    }
    const auto n = static_cast<double>(examples.size());
    result.loss = loss / n;
    if (s.regression) {
        result.mean_squared_error = squared / n;
    } else {
        result.accuracy = hits / n;
    }
    return result;
}

ANVIL_INLINE void fine_tune(const fine_tune_options& options, const std::filesystem::path& out,
                            const std::function<void(const step_result&, std::int64_t)>& on_step) {
    fine_tuning run = fine_tuning::load(options);
    while (run.steps_done() < run.total_steps()) {
        const step_result result = run.step();
        if (on_step) on_step(result, run.total_steps());
    }
    run.save(out);
}

}  // namespace anvil::train
