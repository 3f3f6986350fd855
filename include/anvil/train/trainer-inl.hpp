// anvil: the trainer's definitions (see trainer.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/backend/compile.hpp"
#include "anvil/core/error.hpp"
#include "anvil/expr/expr.hpp"
#include "anvil/graph/autodiff.hpp"
#include "anvil/train/clip.hpp"
#include "anvil/train/numpy_random.hpp"
#include "anvil/train/trainer.hpp"

namespace anvil::train {

ANVIL_INLINE tensor<float> dropout(training_graph& model, const tensor<float>& x, double probability) {
    if (!(probability >= 0.0 && probability < 1.0)) {
        throw error(anvil::detail::message("dropout: the probability must be at least 0 and below 1, got ",
                                           probability));
    }
    if (probability == 0.0) return x;
    dropout_input site{anvil::detail::message("anvil.dropout.", model.dropout.size()), x.shape(),
                       probability};
    const tensor<float> multiplier = model.model.input<float>(site.input, site.shape);
    model.dropout.push_back(std::move(site));
    return x * multiplier;
}

ANVIL_INLINE trainer::trainer(parameter_set& params, model_builder build, optimizer& opt,
                              lr_schedule schedule, trainer_options options)
    : params_(params),
      build_(std::move(build)),
      optimizer_(opt),
      schedule_(std::move(schedule)),
      options_(std::move(options)) {
    using anvil::detail::message;
    if (!build_) throw error("trainer: the model builder is empty");
    for (const parameter& p : optimizer_.parameters()) {
        if (!params_.contains(p.name)) {
            throw error(
                message("trainer: the optimizer's parameter '", p.name, "' is not in the parameter set"));
        }
    }
    const compile_options& c = options_.compile;
    const bool fp16 = c.target == device::ane || c.target == device::coreml || c.ane_numerics;
    scaling_ = options_.scaling;
    if (!scaling_ && options_.scale_loss_automatically && fp16) scaling_ = loss_scaling{};
    if (scaling_) {
        const loss_scaling& l = *scaling_;
        if (!(l.initial_scale > 0.0) || !(l.growth_factor >= 1.0) ||
            !(l.backoff_factor > 0.0 && l.backoff_factor < 1.0) || l.growth_interval < 1) {
            throw error(message("trainer: loss scaling needs initial_scale > 0 (got ", l.initial_scale,
                                "), growth_factor >= 1 (", l.growth_factor, "), backoff_factor in (0, 1) (",
                                l.backoff_factor, ") and growth_interval >= 1 (", l.growth_interval, ")"));
        }
        scale_ = l.initial_scale;
    }
}

ANVIL_INLINE void trainer::restore(const trainer_progress& saved) {
    if (saved.steps_tried < 0 || saved.clean_steps < 0 || !(saved.loss_scale > 0.0) ||
        !std::isfinite(saved.loss_scale)) {
        throw error(
            anvil::detail::message("trainer: a saved progress needs steps >= 0 and a finite loss scale > 0 "
                                   "(got ",
                                   saved.steps_tried, " steps, scale ", saved.loss_scale, ")"));
    }
    if (!scaling_ && saved.loss_scale != 1.0) {
        throw error(anvil::detail::message("trainer: the saved run scaled its loss by ", saved.loss_scale,
                                           " but this one does not scale it (another backend?)"));
    }
    steps_tried_ = saved.steps_tried;
    scale_ = saved.loss_scale;
    clean_steps_ = saved.clean_steps;
}

ANVIL_INLINE trainer::compiled_step& trainer::program_for(std::span<const named_tensor> batch,
                                                          bool with_gradients) {
    using anvil::detail::message;
    std::vector<io_info> shapes;
    std::string key = with_gradients ? "step" : "evaluate";
    for (const named_tensor& input : batch) {
        shapes.push_back({input.name, input.tensor.type(), input.tensor.shape()});
        key += message("|", input.name, ":", dtype_name(input.tensor.type()), input.tensor.shape());
    }
    if (const auto found = programs_.find(key); found != programs_.end()) return found->second;

    training_graph model = build_(shapes);
    if (!model.loss.valid() || model.loss.owner() != model.model.body()) {
        throw error("trainer: the model builder's loss is not a value of its graph");
    }
    std::vector<std::string> parameter_inputs;
    std::vector<value> wrt;
    std::vector<std::size_t> trained;
    const std::vector<parameter>& optimized = optimizer_.parameters();
    for (const value& p : model.model.parameters()) {
        const std::string& name = p.producer().name;
        if (!params_.contains(name)) {
            throw error(message("trainer: the model reads the parameter '", name,
                                "', which the parameter set lacks"));
        }
        parameter_inputs.push_back(name);
        for (std::size_t i = 0; i < optimized.size(); ++i) {
            if (optimized[i].name == name) {
                wrt.push_back(p);
                trained.push_back(i);
            }
        }
    }
    std::vector<value> outputs{model.loss};
    std::optional<dims> loss_scale_shape;
    if (with_gradients) {
        // With loss scaling the loss's cotangent is a program input, so a new scale recompiles nothing.
        std::vector<value> grads;
        if (scaling_) {
            const value seed =
                model.model.input(std::string(loss_scale_input), model.loss.type(), model.loss.shape());
            grads = gradients(model.loss, wrt, seed);
            loss_scale_shape = model.loss.shape();
        } else {
            grads = gradients(model.loss, wrt);
        }
        outputs.insert(outputs.end(), grads.begin(), grads.end());
    } else {
        trained.clear();
    }
    outputs.insert(outputs.end(), model.outputs.begin(), model.outputs.end());
    compiled_step compiled{compile(outputs, options_.compile),
                           std::move(parameter_inputs),
                           std::move(trained),
                           model.outputs.size(),
                           loss_scale_shape,
                           std::move(model.dropout)};
    ++compiled_;
    return programs_.emplace(std::move(key), std::move(compiled)).first->second;
}

ANVIL_INLINE std::vector<host_tensor> trainer::run(compiled_step& compiled,
                                                   std::span<const named_tensor> batch,
                                                   std::optional<std::int64_t> step) {
    std::vector<named_tensor> inputs(batch.begin(), batch.end());
    if (!compiled.dropout.empty()) {
        const std::uint64_t entropy[] = {options_.seed, static_cast<std::uint64_t>(step.value_or(0))};
        numpy_generator draws(entropy);
        for (const dropout_input& site : compiled.dropout) {
            host_tensor multiplier(dtype::f32, site.shape);
            const std::span<float> values = multiplier.values<float>();
            if (step) {
                const auto kept = static_cast<float>(1.0 / (1.0 - site.probability));
                for (float& v : values)
                    v = draws.next_double() >= site.probability ? kept : 0.0f;
            } else {
                std::fill(values.begin(), values.end(), 1.0f);
            }
            inputs.push_back({site.input, std::move(multiplier)});
        }
    }
    for (const std::string& name : compiled.parameter_inputs)
        inputs.push_back({name, params_.value_of(name)});
    if (compiled.loss_scale_shape) {
        const dims& shape = *compiled.loss_scale_shape;
        const std::vector<float> scale(static_cast<std::size_t>(shape.element_count()),
                                       static_cast<float>(scale_));
        inputs.push_back({std::string(loss_scale_input), host_tensor::from(scale, shape)});
    }
    return compiled.run.run(inputs);
}

ANVIL_INLINE step_result trainer::step(std::span<const named_tensor> batch) {
    compiled_step& compiled = program_for(batch, true);
    std::vector<host_tensor> results = run(compiled, batch, steps_tried_ + 1);
    const std::vector<parameter>& optimized = optimizer_.parameters();
    // Gradients in the optimizer's order, as f32 (a Neural Engine program gives fp16), taken over from the
    // program's outputs; only a parameter the model does not read gets zeros (allocating zeros for every
    // one first cost a BERT-base step 440 MB of fresh pages).
    std::vector<host_tensor> grads(optimized.size());
    std::vector<bool> computed(optimized.size(), false);
    for (std::size_t i = 0; i < compiled.trained.size(); ++i) {
        host_tensor& g = results[1 + i];
        grads[compiled.trained[i]] =
            g.type() == dtype::f32 ? std::move(g) : host_tensor::from(g.to_f32(), g.shape());
        computed[compiled.trained[i]] = true;
    }
    for (std::size_t i = 0; i < optimized.size(); ++i) {
        if (!computed[i]) grads[i] = host_tensor(dtype::f32, optimized[i].value.shape());
    }
    step_result result;
    result.step = ++steps_tried_;
    result.loss = static_cast<double>(results[0].to_f32()[0]);
    result.lr = schedule_.learning_rate(optimizer_.steps_taken());
    result.loss_scale = scale_;
    for (std::size_t i = 0; i < compiled.outputs; ++i)
        result.outputs.push_back(std::move(results[1 + compiled.trained.size() + i]));
    if (scaling_) {
        // Unscaled in fp32 (GradScaler.unscale_); an infinity or NaN skips the step and backs the scale off.
        bool finite = true;
        const auto inverse = static_cast<float>(1.0 / scale_);
        for (host_tensor& g : grads) {
            for (float& v : g.values<float>()) {
                v *= inverse;
                finite = finite && std::isfinite(v);
            }
        }
        if (!finite) {
            scale_ *= scaling_->backoff_factor;
            clean_steps_ = 0;
            result.skipped = true;
            result.grad_norm = static_cast<double>(global_grad_norm(grads));
            return result;
        }
        if (++clean_steps_ == scaling_->growth_interval) {
            scale_ *= scaling_->growth_factor;
            clean_steps_ = 0;
        }
    }
    result.grad_norm = options_.max_grad_norm
                           ? static_cast<double>(clip_grad_norm(grads, *options_.max_grad_norm))
                           : static_cast<double>(global_grad_norm(grads));
    optimizer_.step(grads, result.lr);
    return result;
}

ANVIL_INLINE step_result trainer::evaluate(std::span<const named_tensor> batch) {
    compiled_step& compiled = program_for(batch, false);
    std::vector<host_tensor> results = run(compiled, batch, std::nullopt);
    step_result result;
    result.step = steps_tried_;
    result.loss = static_cast<double>(results[0].to_f32()[0]);
    result.loss_scale = scale_;
    for (std::size_t i = 0; i < compiled.outputs; ++i)
        result.outputs.push_back(std::move(results[1 + i]));
    return result;
}

}  // namespace anvil::train
