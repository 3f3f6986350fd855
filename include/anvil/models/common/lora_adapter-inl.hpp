// anvil: lora_adapter's definitions (see lora_adapter.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/core/json.hpp"
#include "anvil/io/checkpoint.hpp"
#include "anvil/models/common/lora_adapter.hpp"

namespace anvil::models {

ANVIL_INLINE lora_config lora_config::read(const std::filesystem::path& folder, std::string_view what) {
    using anvil::detail::message;
    const std::filesystem::path config_path = folder / "adapter_config.json";
    if (!std::filesystem::exists(config_path))
        throw io_error(message(what, ": ", config_path.string(), " does not exist"));
    const json::value document = json::parse_file(config_path);
    if (!document.is_object())
        throw format_error(message(what, ": ", config_path.string(), " is not an object"));
    const json::value* type = document.find("peft_type");
    if (type == nullptr || !type->is_string() || type->as_string() != "LORA")
        throw unsupported_error(message(what, ": ", folder.string(), " is not a LoRA adapter (peft_type ",
                                        type == nullptr ? std::string("missing") : json::dump(*type), ")"));
    // What PEFT can store that anvil does not compute: each key must be absent, null or this value.
    const std::pair<std::string_view, json::value> plain[] = {
        {"use_rslora", json::value(false)},
        {"use_dora", json::value(false)},
        {"bias", json::value("none")},
        {"fan_in_fan_out", json::value(false)},
        {"lora_bias", json::value(false)},
        {"use_qalora", json::value(false)},
        {"rank_pattern", json::value(json::object{})},
        {"alpha_pattern", json::value(json::object{})},
        {"layers_to_transform", json::value(nullptr)},
        {"exclude_modules", json::value(nullptr)},
        {"layer_replication", json::value(nullptr)},
        {"target_parameters", json::value(json::array{})},
        {"trainable_token_indices", json::value(nullptr)},
        {"alora_invocation_tokens", json::value(nullptr)}};
    for (const auto& [key, fine] : plain) {
        const json::value* given = document.find(key);
        if (given != nullptr && !given->is_null() && *given != fine)
            throw unsupported_error(message(what, ": ", config_path.string(), " ", key, " = ",
                                            json::dump(*given), " is not supported"));
    }
    const json::value* r = document.find("r");
    const json::value* a = document.find("lora_alpha");
    const json::value* targets = document.find("target_modules");
    if (r == nullptr || !r->is_integer() || r->as_int() <= 0 || a == nullptr || !a->is_number() ||
        targets == nullptr)
        throw format_error(
            message(what, ": ", config_path.string(), " needs r, lora_alpha and target_modules"));
    lora_config c;
    c.rank = r->as_int();
    c.alpha = a->as_double();
    if (targets->is_string()) {
        c.target_pattern = targets->as_string();
        try {
            static_cast<void>(std::regex(*c.target_pattern));
        } catch (const std::regex_error& e) {
            throw format_error(message(what, ": ", config_path.string(), " target_modules '",
                                       *c.target_pattern, "' is not a regular expression (", e.what(), ")"));
        }
    } else if (targets->is_array()) {
        for (const json::value& t : targets->as_array()) {
            if (!t.is_string()) throw format_error(message(what, ": target_modules must hold strings"));
            c.target_list.push_back(t.as_string());
        }
    } else {
        throw format_error(message(what, ": target_modules must be a list or a pattern"));
    }
    if (const json::value* saved = document.find("modules_to_save"); saved != nullptr && saved->is_array()) {
        for (const json::value& m : saved->as_array())
            if (m.is_string()) c.modules_to_save.push_back(m.as_string());
    }
    if (const json::value* task = document.find("task_type"); task != nullptr && task->is_string())
        c.task_type = task->as_string();
    return c;
}

ANVIL_INLINE checkpoint open_lora_tensors(const std::filesystem::path& folder, std::string_view what) {
    const std::filesystem::path tensors = folder / "adapter_model.safetensors";
    if (!std::filesystem::exists(tensors))
        throw io_error(anvil::detail::message(what, ": ", tensors.string(), " does not exist"));
    return checkpoint::open(tensors);
}

ANVIL_INLINE std::vector<std::string> modules_of(std::string_view tensor) {
    std::vector<std::string> result;
    for (std::size_t dot = tensor.find('.'); dot != std::string_view::npos; dot = tensor.find('.', dot + 1))
        result.emplace_back(tensor.substr(0, dot));
    return result;
}

ANVIL_INLINE lora_modules match_lora_modules(const lora_config& config, std::span<const std::string> modules,
                                             const std::set<std::string>& linear,
                                             std::span<const std::string> heads) {
    using anvil::detail::message;
    // PEFT's check_target_module_exists, skipping modules inside modules_to_save.
    std::set<std::string> used, in_head;
    lora_modules result;
    const auto suffix_match = [](const std::string& name, const std::string& t) {
        return name == t || name.ends_with("." + t);
    };
    std::vector<std::regex> head_patterns;
    for (const std::string& m : heads)
        head_patterns.emplace_back("(^|.*\\.)" + m + "($|\\..*)");
    std::optional<std::regex> pattern;
    if (config.target_pattern) pattern.emplace(*config.target_pattern);
    for (const std::string& name : modules) {
        const bool saved = std::any_of(head_patterns.begin(), head_patterns.end(),
                                       [&](const std::regex& h) { return std::regex_match(name, h); });
        if (saved) {
            for (const std::string& t : config.target_list)
                if (suffix_match(name, t)) in_head.insert(t);
            continue;
        }
        bool hit = false;
        if (pattern) {
            hit = std::regex_match(name, *pattern);
            if (hit) used.insert(*config.target_pattern);
        } else {
            for (const std::string& t : config.target_list) {
                if (suffix_match(name, t)) {
                    used.insert(t);
                    hit = true;
                }
            }
        }
        if (!hit) continue;
        if (linear.count(name) == 0)
            throw error(
                message("LoRA target module ", name, " is not a Linear (LoRA adapts linear layers here)"));
        result.adapted.push_back(name);
    }
    const std::vector<std::string> wanted =
        config.target_pattern ? std::vector<std::string>{*config.target_pattern} : config.target_list;
    for (const std::string& t : wanted) {
        if (used.count(t) != 0) continue;
        if (in_head.count(t) != 0)
            throw error(
                message("LoRA target module '", t, "' is in modules_to_save (the head is trained fully)"));
        throw error(message("unknown LoRA target module '", t, "' (no module of the model is named so)"));
    }
    std::sort(result.adapted.begin(), result.adapted.end());
    result.adapted.erase(std::unique(result.adapted.begin(), result.adapted.end()), result.adapted.end());
    // PEFT's _set_trainable: modules whose name ends with an entry, not those inside one already chosen.
    for (const std::string& name : modules) {
        const bool named =
            std::any_of(heads.begin(), heads.end(), [&](const std::string& h) { return name.ends_with(h); });
        const bool inside = std::any_of(result.saved.begin(), result.saved.end(),
                                        [&](const std::string& c) { return name.starts_with(c + "."); });
        if (named && !inside) result.saved.push_back(name);
    }
    return result;
}

ANVIL_INLINE std::map<std::string, const tensor_view*> lora_tensors(
    const checkpoint& adapter, const std::map<std::string, dims>& matrices,
    const std::map<std::string, dims>& heads, std::string_view what) {
    using anvil::detail::message;
    std::map<std::string, const tensor_view*> found;
    for (const tensor_view* view : adapter.tensors()) {
        const std::string& saved = view->name();
        if (saved.find(".lora_embedding_") != std::string::npos ||
            saved.find(".lora_magnitude_vector") != std::string::npos) {
            throw unsupported_error(message(what, ": adapter tensor ", saved,
                                            " is not supported (anvil applies LoRA to linear layers, without "
                                            "DoRA's magnitude vector)"));
        }
        const std::string name =
            saved.starts_with(lora_saved_prefix) ? saved.substr(lora_saved_prefix.size()) : std::string();
        const auto matrix = matrices.find(name);
        const auto head = matrix == matrices.end() ? heads.find(name) : heads.end();
        if (name.empty() || (matrix == matrices.end() && head == heads.end()))
            throw format_error(
                message(what, ": adapter tensor ", saved, " belongs to no LoRA module or head of the model"));
        const dims& expected = matrix != matrices.end() ? matrix->second : head->second;
        if (dims(view->shape()) != expected)
            throw shape_error(
                message(what, ": ", saved, " has shape ", dims(view->shape()), ", expected ", expected));
        if (!is_floating(view->type()) || view->blocks())
            throw type_error(message(what, ": ", saved, " holds ", dtype_name(view->type()),
                                     " values, not floating-point weights"));
        found[name] = view;
    }
    for (const auto& [name, shape] : matrices) {
        if (found.count(name) == 0)
            throw format_error(message(what, ": adapter_model.safetensors has no ", lora_saved_prefix, name));
    }
    return found;
}

namespace lora_detail {

// What keeps a merged checkpoint's bytes: the base's and the adapter's mappings and the merged weights.
struct merged_storage {
    std::shared_ptr<const checkpoint> base;
    std::unique_ptr<checkpoint> adapter;
    std::vector<std::vector<float>> merged;
};

}  // namespace lora_detail

ANVIL_INLINE std::shared_ptr<const checkpoint> apply_lora_adapter(std::shared_ptr<const checkpoint> base,
                                                                  const std::filesystem::path& folder) {
    using anvil::detail::message;
    if (!base) throw error("apply_lora_adapter: no checkpoint given");
    const std::string what = message("LoRA adapter ", folder.string());
    if (!std::filesystem::is_directory(folder))
        throw io_error(message(what,
                               ": not a folder (PEFT's save_pretrained writes adapter_config.json and "
                               "adapter_model.safetensors into one)"));
    const lora_config config = lora_config::read(folder, what);
    auto storage = std::make_shared<lora_detail::merged_storage>();
    storage->base = base;
    storage->adapter = std::make_unique<checkpoint>(open_lora_tensors(folder, what));

    // The base's modules, and which are linear layers: a floating-point matrix `<module>.weight`.
    std::vector<std::string> modules;
    std::set<std::string> seen, linear;
    for (const tensor_view* view : base->tensors()) {
        for (std::string& m : modules_of(view->name()))
            if (seen.insert(m).second) modules.push_back(std::move(m));
        if (view->name().ends_with(".weight") && view->rank() == 2 && is_floating(view->type()))
            linear.insert(view->name().substr(0, view->name().size() - 7));
    }
    std::vector<std::string> heads = config.modules_to_save;
    if (config.task_type == "SEQ_CLS") {
        for (const std::string_view h : sequence_classification_heads)
            if (std::find(heads.begin(), heads.end(), h) == heads.end()) heads.emplace_back(h);
    }
    lora_modules chosen;
    try {
        chosen = match_lora_modules(config, modules, linear, heads);
    } catch (const error& e) {
        throw error(message(what, " does not fit ", base->path().string(), ": ", e.what()));
    }

    std::map<std::string, dims> matrices, head_tensors;
    for (const std::string& module : chosen.adapted) {
        const tensor_view& w = base->tensor(module + ".weight");
        const std::int64_t out = w.shape()[0], in = w.shape()[1];
        matrices[module + ".lora_A.weight"] = dims{config.rank, in};
        matrices[module + ".lora_B.weight"] = dims{out, config.rank};
    }
    for (const tensor_view* view : base->tensors()) {
        for (const std::string& h : chosen.saved)
            if (view->name().starts_with(h + ".")) head_tensors[view->name()] = dims(view->shape());
    }
    const std::map<std::string, const tensor_view*> given =
        lora_tensors(*storage->adapter, matrices, head_tensors, what);

    // W + scaling B A, in f32: row i of the update is the sum over k of B[i, k] A[k, :].
    const auto scaling = static_cast<float>(config.scaling());
    std::map<std::string, std::size_t> merged_index;
    for (const std::string& module : chosen.adapted) {
        const tensor_view& w = base->tensor(module + ".weight");
        const auto out = static_cast<std::size_t>(w.shape()[0]), in = static_cast<std::size_t>(w.shape()[1]);
        const auto rank = static_cast<std::size_t>(config.rank);
        std::vector<float> merged = w.to_f32();
        const std::vector<float> a = given.at(module + ".lora_A.weight")->to_f32();
        const std::vector<float> b = given.at(module + ".lora_B.weight")->to_f32();
        std::vector<float> update(in);
        for (std::size_t i = 0; i < out; ++i) {
            std::fill(update.begin(), update.end(), 0.0f);
            for (std::size_t k = 0; k < rank; ++k) {
                const float bik = b[i * rank + k];
                const float* row = a.data() + k * in;
                for (std::size_t j = 0; j < in; ++j)
                    update[j] += bik * row[j];
            }
            float* target = merged.data() + i * in;
            for (std::size_t j = 0; j < in; ++j)
                target[j] += update[j] * scaling;
        }
        merged_index[module + ".weight"] = storage->merged.size();
        storage->merged.push_back(std::move(merged));
    }

    std::vector<checkpoint_tensor> tensors;
    tensors.reserve(base->size());
    for (const tensor_view* view : base->tensors()) {
        checkpoint_tensor t;
        t.name = view->name();
        t.shape.assign(view->shape().begin(), view->shape().end());
        if (const auto m = merged_index.find(view->name()); m != merged_index.end()) {
            const std::vector<float>& values = storage->merged[m->second];
            t.type = dtype::f32;
            t.bytes = std::as_bytes(std::span<const float>(values));
        } else if (const auto h = given.find(view->name()); h != given.end()) {
            t.type = h->second->type();
            t.bytes = h->second->bytes();
        } else {
            t.type = view->type();
            t.bytes = view->bytes();
            t.blocks = view->blocks();
        }
        tensors.push_back(std::move(t));
    }
    return std::make_shared<const checkpoint>(checkpoint::from_tensors(
        message(base->path().string(), " with ", what), std::move(tensors), std::move(storage)));
}

ANVIL_INLINE std::shared_ptr<const checkpoint> open_weights(const std::filesystem::path& folder,
                                                            const load_options& options) {
    auto weights = std::make_shared<const checkpoint>(checkpoint::open(folder));
    if (options.adapter.empty()) return weights;
    return apply_lora_adapter(std::move(weights), options.adapter);
}

}  // namespace anvil::models
