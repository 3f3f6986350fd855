// anvil: how a recipe turns its graph into programs. Graphs have static shapes, so a recipe compiles one
// program per input shape it meets (a batch size and a padded length, an image size) and keeps it: a batch of
// texts padded to one length computes in one call, and a second batch of the same shape compiles nothing.
// Weights enter each graph as constants that point into the mapped checkpoint, so a second shape copies no
// weights.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "anvil/backend/compile.hpp"
#include "anvil/graph/graph.hpp"

namespace anvil::models {

// How a recipe runs: the options every program it compiles gets. The device defaults to automatic — the
// Neural Engine where one is present, else the CPU.
struct load_options {
    compile_options compile = [] {
        compile_options options;
        options.target = device::automatic;
        return options;
    }();
    // A PEFT LoRA adapter folder (adapter_config.json, adapter_model.safetensors) to apply to the model's
    // weights, as PeftModel.from_pretrained(base, adapter) does (models/common/lora_adapter.hpp); empty:
    // none.
    std::filesystem::path adapter;
};

// `options` with compile.model_source naming `source` (the folder or file a recipe loads), unless the caller
// named one: the program cache's manifests say which model each compiled program came from.
inline load_options with_model_source(load_options options, const std::filesystem::path& source) {
    if (options.compile.model_source.empty()) {
        std::error_code code;
        const std::filesystem::path absolute = std::filesystem::absolute(source, code);
        options.compile.model_source = (code ? source : absolute).lexically_normal().string();
    }
    return options;
}

class compiled_shapes {
public:
    // Builds, in a fresh graph, the outputs for one shape key (e.g. {batch, sequence}).
    using builder = std::function<std::vector<value>(graph&, std::span<const std::int64_t> key)>;

    compiled_shapes(compile_options options, builder build)
        : options_(std::move(options)), build_(std::move(build)) {}

    // The program for `key`, compiled on first use.
    [[nodiscard]] program& at(const std::vector<std::int64_t>& key) {
        const std::lock_guard lock(mutex_);
        auto found = programs_.find(key);
        if (found != programs_.end()) return found->second;
        graph g;
        const std::vector<value> outputs = build_(g, key);
        return programs_.emplace(key, compile(std::span<const value>(outputs), options_)).first->second;
    }

    // How many programs have been compiled (one per distinct key).
    [[nodiscard]] std::size_t count() const {
        const std::lock_guard lock(mutex_);
        return programs_.size();
    }

    [[nodiscard]] const compile_options& options() const noexcept { return options_; }

    // The outputs for `key` built in `g` and not compiled: what `anvil export` writes as a Core ML package,
    // so the package computes exactly what the recipe runs.
    [[nodiscard]] std::vector<value> build(graph& g, std::span<const std::int64_t> key) const {
        return build_(g, key);
    }

private:
    compile_options options_;
    builder build_;
    std::map<std::vector<std::int64_t>, program> programs_;
    mutable std::mutex mutex_;
};

}  // namespace anvil::models
