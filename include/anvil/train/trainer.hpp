// anvil: the training loop as a library: a model built as a graph per batch shape (model_builder), its
// trainable tensors (parameter_set), an optimizer and a learning-rate schedule. Each step runs the loss and
// the gradients of every trainable tensor as one program, clips them by global norm when asked, and updates
// the fp32 master weights on the host. Trainable tensors are program inputs, so a program is compiled once
// per batch shape and never again as the weights change (on the Neural Engine, where compiling costs
// seconds, this is what makes training possible).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "anvil/backend/program.hpp"
#include "anvil/compilation.hpp"
#include "anvil/expr/tensor.hpp"
#include "anvil/graph/graph.hpp"
#include "anvil/train/layers.hpp"
#include "anvil/train/optimizer.hpp"
#include "anvil/train/schedule.hpp"

namespace anvil::train {

// The program input that carries the loss scale (the loss's cotangent) when loss scaling is on.
inline constexpr std::string_view loss_scale_input = "anvil.loss_scale";

// A dropout site of a training graph: the program input `input`, of x's shape, that multiplies x. The
// trainer fills it each step with 0 where an element is dropped and 1 / (1 - probability) where it is kept,
// and with 1 when evaluating.
struct dropout_input {
    std::string input;
    dims shape;
    double probability = 0.0;
};

// A model built for one batch: its graph (trainable tensors as graph::parameter inputs named as in the
// parameter_set), the scalar loss, values to return with each step (logits, for accuracy), and its dropout
// sites in the order the forward applies them.
struct training_graph {
    graph model;
    value loss;
    std::vector<value> outputs = {};
    std::vector<dropout_input> dropout = {};
};

// nn.Dropout(probability) in train mode on x, a value of model.model: declares the site's input
// ("anvil.dropout.<n>", n counting the graph's sites from 0) and returns x times it. A probability of 0 is x
// itself; one outside [0, 1) is an anvil::error.
[[nodiscard]] tensor<float> dropout(training_graph& model, const tensor<float>& x, double probability);

// Builds the model for a batch whose inputs have these names, types and shapes. Called once per distinct
// batch shape (a short last batch, a text batch padded to its longest example).
using model_builder = std::function<training_graph(std::span<const io_info> batch)>;

// Dynamic loss scaling, as torch.cuda.amp.GradScaler: fp16 gradients (the Neural Engine's) underflow to zero
// when small; the loss's cotangent is `scale` instead of 1, the gradients are divided by it on the host in
// fp32, and a step whose gradients hold an infinity or NaN is skipped (no update, the schedule does not
// advance) and halves the scale; `growth_interval` clean steps in a row double it. GradScaler starts at 2^16,
// which suits a GPU, where the loss and its cotangent stay fp32 until divided by the batch; on the Neural
// Engine the cotangent itself is an fp16 value (largest 65504), so 2^16 overflowed every first step on the
// simulator, and 2^15 still skipped the first step of a LoRA fine-tuning whose gradients exceed 2
// (tests/cli/test_train_command.py). 2^12 lets gradients up to 16 through and still lifts one of 1.5e-8 to
// fp16's smallest normal number (the Neural Engine flushes subnormals); growth finds larger scales that fit.
struct loss_scaling {
    double initial_scale = 4096.0;
    double growth_factor = 2.0;
    double backoff_factor = 0.5;
    std::int64_t growth_interval = 2000;
};

struct trainer_options {
    compile_options compile = {};
    // Clip the gradients to this global L2 norm (clip_grad_norm) before each update; none when unset.
    std::optional<double> max_grad_norm = std::nullopt;
    // Loss scaling; by default on where gradients are computed in fp16 (compile.target the Neural Engine or
    // Core ML, or compile.ane_numerics), off on the CPU in fp32. Set it to force it either way.
    std::optional<loss_scaling> scaling = std::nullopt;
    bool scale_loss_automatically = true;  // false: scaling only when `scaling` is set
    // The dropout masks of step s (from 1, skipped steps counted) come from
    // numpy.random.default_rng([seed, s]): for each site in the graph's order, random(shape) >= probability
    // keeps an element. So a resumed run draws what the uninterrupted one drew, and a Python script can
    // reproduce every mask.
    std::uint64_t seed = 0;
};

struct step_result {
    std::int64_t step = 0;    // from 1: the steps tried, skipped ones included
    double loss = 0.0;        // the batch's loss, with the weights before the update
    double lr = 0.0;          // the learning rate the update used
    double grad_norm = 0.0;   // the global L2 norm of the (unscaled) gradients before clipping
    bool skipped = false;     // loss scaling found an infinity or NaN: no update
    double loss_scale = 1.0;  // the scale this step's gradients were computed with (1 without scaling)
    std::vector<host_tensor> outputs;
};

// Where a trainer stands besides its optimizer's state and the weights: what a checkpoint saves so that a
// resumed run continues exactly.
struct trainer_progress {
    std::int64_t steps_tried = 0;  // steps run, skipped ones included
    double loss_scale = 1.0;       // the scale the next step uses (1 without scaling)
    std::int64_t clean_steps = 0;  // finite steps since the scale last changed
};

class trainer {
public:
    // `params` holds every trainable tensor; the optimizer updates the ones it was given (its parameters
    // share their elements with the set's), the others are fed unchanged (frozen). Both must outlive the
    // trainer.
    trainer(parameter_set& params, model_builder build, optimizer& opt, lr_schedule schedule,
            trainer_options options = {});

    // One optimizer step on this batch (the inputs the builder's graph declares, by name).
    step_result step(std::span<const named_tensor> batch);
    step_result step(std::initializer_list<named_tensor> batch) {
        return step(std::span<const named_tensor>(batch.begin(), batch.size()));
    }
    // The loss and outputs on a batch, without gradients or an update.
    step_result evaluate(std::span<const named_tensor> batch);

    // How many programs were compiled (one per batch shape for steps, one for evaluation).
    [[nodiscard]] std::size_t programs_compiled() const noexcept { return compiled_; }
    [[nodiscard]] const lr_schedule& schedule() const noexcept { return schedule_; }
    // The loss scale the next step uses (1 without scaling).
    [[nodiscard]] double loss_scale() const noexcept { return scale_; }
    [[nodiscard]] trainer_progress progress() const noexcept { return {steps_tried_, scale_, clean_steps_}; }
    // Continues from a saved progress (with the optimizer's state and the weights restored by the caller).
    void restore(const trainer_progress& saved);

private:
    struct compiled_step {
        program run;
        std::vector<std::string> parameter_inputs;  // every parameter the graph reads, fed from the set
        std::vector<std::size_t> trained;           // optimizer parameter index of each gradient output
        std::size_t outputs = 0;
        std::optional<dims> loss_scale_shape;  // the shape of its loss scale input (the loss's), when scaled
        std::vector<dropout_input> dropout;
    };

    compiled_step& program_for(std::span<const named_tensor> batch, bool with_gradients);
    // The program on the batch, its parameters, loss scale and dropout masks: those of step `step`, or none
    // (all ones) when evaluating.
    std::vector<host_tensor> run(compiled_step& compiled, std::span<const named_tensor> batch,
                                 std::optional<std::int64_t> step);

    parameter_set& params_;
    model_builder build_;
    optimizer& optimizer_;
    lr_schedule schedule_;
    trainer_options options_;
    std::map<std::string, compiled_step> programs_;
    std::size_t compiled_ = 0;
    std::optional<loss_scaling> scaling_;
    double scale_ = 1.0;
    std::int64_t clean_steps_ = 0;
    std::int64_t steps_tried_ = 0;
};

}  // namespace anvil::train

#if ANVIL_DEFINITIONS
#include "anvil/train/trainer-inl.hpp"
#endif
