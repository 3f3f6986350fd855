// anvil: fine-tuning a Hugging Face classifier from its folder — what `anvil train` runs, as a library. The
// model is the inference recipe itself (text_encoder.hpp's BERT, RoBERTa, XLM-R, MPNet and DistilBERT with
// their *ForSequenceClassification heads; vit.hpp's ViT and DeiT; resnet.hpp's train-mode forward of Hugging
// Face's ResNetForImageClassification and of timm / torchvision ResNets), built through a weight_loader whose
// substitute (models/common/weights.hpp) turns the trainable tensors into graph::parameter inputs and adds
// LoRA's low-rank update to the adapted linear layers; no recipe has a second, trainable copy. The rules are
// those of transformers' Trainer and PEFT, as tools/reference/train_reference.py writes them out in float64:
//
//   data       TRAIN.jsonl, one example a line: {"ids": [...], "type_ids": [...], "label": k},
//              {"text": ..., "text_pair": ..., "label": k} (the folder's tokenizer), {"pixels": "x.npy",
//              "label": k} (float32 [C, H, W]; a ResNet takes any H and W, one size for the whole file) or
//              {"image": "x.png", "label": k} (the folder's preprocessing); paths relative to the jsonl file.
//              num_labels 1 (or problem_type "regression"): float labels and MSE; problem_type
//              "multi_label_classification": a label is a list of num_labels numbers in [0, 1] (multi-hot,
//              soft values allowed) and the loss BCEWithLogitsLoss over every element; otherwise mean
//              cross-entropy.
//   order      epoch e visits numpy.random.default_rng(seed + e).permutation(n) (consecutive lines with
//              shuffle off), cut into batches; the last batch of an epoch may be short.
//   batches    text padded to the batch's longest example with the attention mask (DataCollatorWithPadding).
//   trained    full: every tensor the model reads that no freeze regex finds (std::regex_search); LoRA: the
//              lora_A / lora_B matrices and the head (PEFT's modules_to_save), less the freeze matches.
//   decay      every trained tensor except biases and norm weights (Trainer.get_decay_parameter_names;
//              BatchNorm weights decay, as it finds only LayerNorms and names with "norm" as a word).
//   BatchNorm  train mode (nn.BatchNorm2d.train()): the batch's mean and biased variance in the forward;
//              after each step running_mean and running_var move by momentum 0.1 towards the batch mean and
//              unbiased variance (m / (m - 1) times the biased one, m = N H W) and num_batches_tracked
//              counts the step, each unless a freeze regex finds its name. ResNets train fully (no LoRA).
//              Evaluation runs them in eval mode (model.eval()) on the running statistics as they stand.
//   outputs    full: model.safetensors with exactly the input's names, shapes and dtypes (the BatchNorm
//              statistics updated), config.json and the tokenizer / preprocessor files; LoRA:
//              adapter_config.json and adapter_model.safetensors as PEFT's save_pretrained writes them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "anvil/compilation.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/train/schedule.hpp"
#include "anvil/train/trainer.hpp"

namespace anvil::train {

// Everything `anvil train` takes; the defaults are the Trainer's.
struct fine_tune_options {
    std::filesystem::path model;         // a Hub folder: config.json + model.safetensors (+ tokenizer files)
    std::filesystem::path data;          // TRAIN.jsonl
    std::optional<std::int64_t> steps;   // optimizer steps; else epochs
    std::optional<std::int64_t> epochs;  // 3 when neither is given
    std::int64_t batch_size = 8;
    double lr = 5e-5;
    std::string optimizer = "adamw";  // "adamw" or "sgd"
    double momentum = 0.0;            // SGD
    bool nesterov = false;            // SGD
    double weight_decay = 0.0;
    double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // AdamW
    schedule_kind schedule = schedule_kind::linear;
    std::int64_t warmup_steps = 0;
    std::optional<double> max_grad_norm;  // no clipping when unset
    bool shuffle = true;
    std::uint64_t seed = 42;
    std::vector<std::string> freeze;  // regexes searched in each tensor name
    // LoRA: a rank turns it on (or init_adapter); alpha 8 by default; targets default to PEFT's for BERT and
    // RoBERTa / XLM-R (query, value) and are needed otherwise.
    std::optional<std::int64_t> lora_rank;
    std::optional<double> lora_alpha;
    std::optional<std::vector<std::string>> lora_targets;
    std::filesystem::path init_adapter;  // a PEFT LoRA adapter folder to start from (its head included)
    bool truncate = false;  // keep the first positions of a longer example instead of refusing it
    compile_options compile = {};
};

// The loss and accuracy (classification) or mean squared error (regression) on an evaluation set.
struct evaluation {
    std::size_t examples = 0;
    double loss = 0.0;  // the mean over the examples
    // Classification: the share of examples whose top logit is the label; multi-label: whose every class is
    // predicted right (logit above 0 exactly where the label is above 1/2).
    std::optional<double> accuracy;
    std::optional<double> mean_squared_error;  // regression
};

// The fine-tuning of one folder: load() reads and checks the model, the data and the options (every bad input
// is an anvil::error naming it, before any step); step() trains on the next batch; save() writes the output
// folder.
class fine_tuning {
public:
    [[nodiscard]] static fine_tuning load(const fine_tune_options& options);

    fine_tuning(fine_tuning&&) noexcept;
    fine_tuning& operator=(fine_tuning&&) noexcept;
    ~fine_tuning();

    // The number of steps the run takes (steps, or epochs x batches per epoch).
    [[nodiscard]] std::int64_t total_steps() const noexcept;
    [[nodiscard]] std::int64_t steps_done() const noexcept;
    // One optimizer step on the next batch.
    step_result step();
    // Whether the last step finished an epoch, and how many epochs are finished.
    [[nodiscard]] bool at_epoch_end() const noexcept;
    [[nodiscard]] std::int64_t epochs_done() const noexcept;
    // Writes the output folder (created if needed): the fine-tuned Hub folder, or the PEFT adapter.
    void save(const std::filesystem::path& out) const;

    // A checkpoint: save()'s folder plus what a resumed run needs — the fp32 master weights
    // (master_weights.safetensors), the optimizer's state (optimizer.safetensors) and where the run stands
    // with the options that shape it (trainer_state.json).
    void save_checkpoint(const std::filesystem::path& folder) const;
    // Continues from a checkpoint of the same run (same model, data and options: checked, naming the first
    // difference) exactly as if it had never stopped.
    void resume(const std::filesystem::path& folder);

    // The loss and accuracy (or MSE) on the examples of a jsonl file of the training data's format, with the
    // current weights (and a ResNet's current running statistics, BatchNorm in eval mode), in batches of the
    // training batch size in file order; one program per evaluation batch shape, compiled on first use.
    [[nodiscard]] evaluation evaluate(const std::filesystem::path& data);

    // The trained tensors' names (as the model's checkpoint names them; LoRA's as the model's modules plus
    // ".lora_A.weight" / ".lora_B.weight") and their current fp32 values.
    [[nodiscard]] const std::vector<parameter>& trained() const noexcept;
    [[nodiscard]] std::size_t programs_compiled() const noexcept;
    [[nodiscard]] std::size_t examples() const noexcept;

private:
    struct state;
    explicit fine_tuning(std::unique_ptr<state> s);
    std::unique_ptr<state> state_;
};

// load, every step (on_step after each), save to `out`.
void fine_tune(const fine_tune_options& options, const std::filesystem::path& out,
               const std::function<void(const step_result&, std::int64_t total_steps)>& on_step = {});

}  // namespace anvil::train

namespace anvil::detail::fine_tuning {

// Hugging Face Trainer's decay rule for one parameter name (get_decay_parameter_names): false for biases and
// norm weights — a lower-cased name matching "bias", "layernorm", "rmsnorm", "(^|.)norm($|.)" or
// "_norm($|.)".
[[nodiscard]] bool hf_decays(std::string_view name);

}  // namespace anvil::detail::fine_tuning

#if ANVIL_DEFINITIONS
#include "anvil/train/fine_tune-inl.hpp"
#endif
