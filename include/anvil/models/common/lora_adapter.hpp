// anvil: PEFT's LoRA adapters, as `save_pretrained` writes them (adapter_config.json and
// adapter_model.safetensors), read in one place for both of their users: a recipe loading a base folder plus
// an adapter (load_options::adapter, through open_weights), and training resuming from one
// (train/fine_tune.hpp's --init-adapter). The module matching is PEFT's, so an adapter adapts exactly the
// modules `PeftModel.from_pretrained(base, adapter)` adapts, and anvil refuses by name what PEFT can store
// but anvil does not compute.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "anvil/compilation.hpp"
#include "anvil/core/shape.hpp"
#include "anvil/fwd.hpp"
#include "anvil/models/common/compiled_shapes.hpp"

namespace anvil::models {

// What adapter_config.json says, checked: peft_type LORA, none of the features anvil does not compute
// (use_dora, use_rslora, bias other than "none", fan_in_fan_out, lora_bias, rank_pattern, alpha_pattern,
// layers_to_transform, exclude_modules, layer_replication, target_parameters, trainable_token_indices, ...).
struct lora_config {
    std::int64_t rank = 0;                      // r
    double alpha = 8.0;                         // lora_alpha
    std::vector<std::string> target_list;       // target_modules as a list (PEFT: a name or a name suffix)
    std::optional<std::string> target_pattern;  // target_modules as one string (PEFT: re.fullmatch)
    std::vector<std::string> modules_to_save;   // as saved; SEQ_CLS adds sequence_classification_heads
    std::optional<std::string> task_type;

    // PEFT's scaling without rslora: lora_alpha / r.
    [[nodiscard]] double scaling() const { return alpha / static_cast<double>(rank); }

    // <folder>/adapter_config.json; messages start with `what` (the flag or the adapter's name): io_error
    // when the file is missing, unsupported_error naming a key whose value anvil does not compute,
    // format_error for a malformed file.
    [[nodiscard]] static lora_config read(const std::filesystem::path& folder, std::string_view what);
};

// The modules PEFT's PeftModelForSequenceClassification adds to modules_to_save, whatever the config says: a
// sequence classifier's head is saved and trained whole.
inline constexpr std::string_view sequence_classification_heads[] = {"classifier", "score"};

// The prefix PEFT's save_pretrained gives every tensor: "base_model.model." + the model's name.
inline constexpr std::string_view lora_saved_prefix = "base_model.model.";

// <folder>/adapter_model.safetensors (io_error naming it when it is missing).
[[nodiscard]] checkpoint open_lora_tensors(const std::filesystem::path& folder, std::string_view what);

// Every module name a tensor name implies: "a.b.weight" -> "a", "a.b".
[[nodiscard]] std::vector<std::string> modules_of(std::string_view tensor);

// The modules a LoRA config adapts and the modules it saves whole, chosen as PEFT's inject_adapter and
// _set_trainable choose them.
struct lora_modules {
    std::vector<std::string> adapted;  // sorted
    std::vector<std::string> saved;    // in the order of `modules`, none inside another
};

// `modules`: every module of the model, each after its parents; `linear`: those that are linear layers;
// `heads`: the modules_to_save entries. A target is matched by name or name suffix (a list) or re.fullmatch
// (a pattern), skipping modules inside modules_to_save. Errors name the target: "unknown LoRA target module
// 'x'", "LoRA target module m is not a Linear", "LoRA target module 'x' is in modules_to_save".
[[nodiscard]] lora_modules match_lora_modules(const lora_config& config, std::span<const std::string> modules,
                                              const std::set<std::string>& linear,
                                              std::span<const std::string> heads);

// The adapter's tensors by the model's names (the saved prefix dropped), each checked: `matrices` (lora_A
// [r, in] and lora_B [out, r] of every adapted module) must all be present, `heads` (the saved modules'
// tensors) may be; a tensor that is neither, has another shape or is not floating-point is an error naming
// it. Views point into `adapter`.
[[nodiscard]] std::map<std::string, const tensor_view*> lora_tensors(
    const checkpoint& adapter, const std::map<std::string, dims>& matrices,
    const std::map<std::string, dims>& heads, std::string_view what);

// `base` with the PEFT LoRA adapter in `folder` applied as PeftModel.from_pretrained(base, folder) computes:
// every adapted Linear's weight replaced by W + (lora_alpha / r) B A, computed once in f32 and stored as f32,
// and the saved modules' tensors (a classification head) replacing the base's. Every other tensor stays
// where the base's mapping holds it. A target the base lacks, a module that is not a linear layer, a shape
// that does not fit or a missing file is an error naming it.
[[nodiscard]] std::shared_ptr<const checkpoint> apply_lora_adapter(std::shared_ptr<const checkpoint> base,
                                                                   const std::filesystem::path& folder);

// The weights a recipe reads from a model folder (or file): checkpoint::open(folder), with options.adapter,
// when given, applied (apply_lora_adapter). Every recipe opens its folder through this, so each one takes
// an adapter the same way.
[[nodiscard]] std::shared_ptr<const checkpoint> open_weights(const std::filesystem::path& folder,
                                                             const load_options& options);

}  // namespace anvil::models

#if ANVIL_DEFINITIONS
#include "anvil/models/common/lora_adapter-inl.hpp"
#endif
