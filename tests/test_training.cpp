// Training as a library (train/): the losses against their formulas computed here in double, with their
// gradients in closed form (softmax - one-hot, 2 (p - t), sigmoid(x) - z); the trainer's update against the
// gradient worked out by hand; one program per batch shape however many steps run; clipping; the GroupNorm
// built from primitives against the group_norm op; and training on the simulated Neural Engine compiling its
// programs once.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>
#include <anvil/train.hpp>

#include "ane_simulator.hpp"
#include "model_test_support.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

// A namespace of its own, so the test files can be compiled together (a unity build).
namespace test_training {

namespace {

using anvil::dims;
using anvil::dtype;
using anvil::host_tensor;
using anvil::op;

std::vector<double> run_f64(std::span<const anvil::value> outputs,
                            const std::vector<anvil::named_tensor>& inputs, std::size_t which) {
    anvil::program p = anvil::compile(outputs, {});
    const auto results = p.run(inputs);
    const auto v = results.at(which).values<double>();
    return {v.begin(), v.end()};
}

double sigmoid(double x) {
    return 1.0 / (1.0 + std::exp(-x));
}

}  // namespace

TEST_CASE("train: cross-entropy with an ignore index, and its gradient softmax - one-hot") {
    const std::vector<double> logits{1.0, 2.0, 0.5, -1.0, 3.0, 0.25, 0.0, 0.0, 9.0, 700.0, 2.0, -3.0};
    const std::vector<std::int64_t> labels{2, 0, -100, 1};
    anvil::graph g;
    const auto x = g.parameter("logits", dtype::f64, dims{4, 3});
    const auto y = g.input("labels", dtype::i64, dims{4});
    const auto loss = anvil::train::cross_entropy(x, y);
    const auto grads = anvil::gradients(loss, {x});
    const std::vector<anvil::named_tensor> inputs{{"labels", host_tensor::from(labels, dims{4})},
                                                  {"logits", host_tensor::from(logits, dims{4, 3})}};
    const std::vector<anvil::value> outputs{loss, grads[0]};
    // By hand: the mean over the three counted rows of logsumexp - the label's logit (row 3's 700 would
    // overflow exp without the shift by the row maximum).
    double expected = 0.0;
    std::vector<double> expected_grad(12, 0.0);
    for (std::size_t r = 0; r < 4; ++r) {
        if (labels[r] == -100) continue;
        double top = -std::numeric_limits<double>::infinity();
        for (std::size_t c = 0; c < 3; ++c)
            top = std::max(top, logits[r * 3 + c]);
        double sum = 0.0;
        for (std::size_t c = 0; c < 3; ++c)
            sum += std::exp(logits[r * 3 + c] - top);
        expected += top + std::log(sum) - logits[r * 3 + static_cast<std::size_t>(labels[r])];
        for (std::size_t c = 0; c < 3; ++c) {
            const double p = std::exp(logits[r * 3 + c] - top) / sum;
            expected_grad[r * 3 + c] = (p - (static_cast<std::int64_t>(c) == labels[r] ? 1.0 : 0.0)) / 3.0;
        }
    }
    expected /= 3.0;
    CHECK(run_f64(outputs, inputs, 0)[0] == doctest::Approx(expected).epsilon(1e-14));
    const std::vector<double> got = run_f64(outputs, inputs, 1);
    for (std::size_t i = 0; i < 12; ++i) {
        INFO("element ", i);
        CHECK(got[i] == doctest::Approx(expected_grad[i]).epsilon(1e-12).scale(1.0));
    }
    // Every label ignored: 0 / 0, as PyTorch.
    const std::vector<std::int64_t> none{-100, -100, -100, -100};
    const std::vector<anvil::named_tensor> ignored{{"labels", host_tensor::from(none, dims{4})},
                                                   {"logits", host_tensor::from(logits, dims{4, 3})}};
    CHECK(std::isnan(run_f64(outputs, ignored, 0)[0]));
    // Wrong operands are named.
    CHECK_THROWS_WITH_AS((void)anvil::train::cross_entropy(y, y),
                         "cross_entropy: the logits must be floating point [N, C], got [4] i64",
                         anvil::shape_error);
    CHECK_THROWS_WITH_AS((void)anvil::train::cross_entropy(x, g.input("f", dtype::f64, dims{4})),
                         "cross_entropy: the labels must be integers [4], got [4] f64", anvil::shape_error);
}

TEST_CASE("train: MSE and binary cross-entropy with logits, with their gradients") {
    const std::vector<double> x{0.0, -2.5, 3.0, 40.0, -40.0, 0.75};
    const std::vector<double> t{1.0, 0.0, 0.5, 1.0, 0.0, 0.25};
    anvil::graph g;
    const auto p = g.parameter("p", dtype::f64, dims{2, 3});
    const auto target = g.input("t", dtype::f64, dims{2, 3});
    const auto mse = anvil::train::mse_loss(p, target);
    const auto bce = anvil::train::binary_cross_entropy_with_logits(p, target);
    const auto mse_grad = anvil::gradients(mse, {p})[0];
    const auto bce_grad = anvil::gradients(bce, {p})[0];
    const std::vector<anvil::value> outputs{mse, bce, mse_grad, bce_grad};
    const std::vector<anvil::named_tensor> inputs{{"p", host_tensor::from(x, dims{2, 3})},
                                                  {"t", host_tensor::from(t, dims{2, 3})}};
    double want_mse = 0.0, want_bce = 0.0;
    for (std::size_t i = 0; i < 6; ++i) {
        want_mse += (x[i] - t[i]) * (x[i] - t[i]) / 6.0;
        // -(z log s(x) + (1 - z) log(1 - s(x))), with log s(x) = -log1p(exp(-x)) to stay finite at |x| = 40.
        const double log_s = -std::log1p(std::exp(-x[i])), log_not_s = -std::log1p(std::exp(x[i]));
        want_bce += -(t[i] * log_s + (1 - t[i]) * log_not_s) / 6.0;
    }
    CHECK(run_f64(outputs, inputs, 0)[0] == doctest::Approx(want_mse).epsilon(1e-14));
    CHECK(run_f64(outputs, inputs, 1)[0] == doctest::Approx(want_bce).epsilon(1e-13));
    const auto dm = run_f64(outputs, inputs, 2);
    const auto db = run_f64(outputs, inputs, 3);
    for (std::size_t i = 0; i < 6; ++i) {
        INFO("element ", i);
        CHECK(dm[i] == doctest::Approx(2 * (x[i] - t[i]) / 6.0).epsilon(1e-14));
        // Exactly sigmoid(x) - z at x = 0 too (maximum's tie rule).
        CHECK(db[i] == doctest::Approx((sigmoid(x[i]) - t[i]) / 6.0).epsilon(1e-12).scale(1e-3));
    }
    CHECK_THROWS_WITH_AS(
        (void)anvil::train::mse_loss(p, g.input("short", dtype::f64, dims{3})),
        "mse_loss: the prediction [2, 3] f64 and the target [3] f64 must have one shape and type",
        anvil::shape_error);
}

TEST_CASE("train: one SGD step at lr 1 moves every weight by minus its gradient, worked out by hand") {
    // y = x W^T + b for x [3, 2], W [2, 2], b [2]; L = mean((y - t)^2) over 6 elements:
    // dL/dW = 2/6 sum_i (y_i - t_i) x_i^T, dL/db = 2/6 sum_i (y_i - t_i).
    anvil::train::parameter_set params;
    params.declare("w", host_tensor::from(std::vector<float>{0.5f, -1.0f, 0.25f, 2.0f}, dims{2, 2}));
    params.declare("b", host_tensor::from(std::vector<float>{0.125f, -0.5f}, dims{2}), false);
    const std::vector<float> xv{1, 2, -1, 0.5f, 3, -2}, tv{1, 0, 0.5f, -1, 2, 2};
    auto build = [&](std::span<const anvil::io_info> batch) {
        anvil::graph g;
        const auto x = g.input("x", dtype::f32, batch[0].shape);
        const auto t = g.input("t", dtype::f32, batch[1].shape);
        const auto y = g.apply(op::linear, {x, params.in(g, "w"), params.in(g, "b")});
        return anvil::train::training_graph{g, anvil::train::mse_loss(y, t), {y}};
    };
    anvil::train::sgd optimizer(params.parameters(), {});
    anvil::train::trainer trainer(params, build, optimizer, anvil::train::lr_schedule("constant", 1.0, 0, 1));
    const std::vector<float> w0 = params.value_of("w").to_f32(), b0 = params.value_of("b").to_f32();
    const auto result =
        trainer.step({{"x", host_tensor::from(xv, dims{3, 2})}, {"t", host_tensor::from(tv, dims{3, 2})}});
    double dw[4] = {}, db[2] = {}, loss = 0.0;
    for (std::size_t i = 0; i < 3; ++i) {
        for (std::size_t o = 0; o < 2; ++o) {
            const double y = w0[o * 2] * xv[i * 2] + w0[o * 2 + 1] * xv[i * 2 + 1] + b0[o];
            const double r = y - tv[i * 2 + o];
            loss += r * r / 6.0;
            db[o] += 2.0 * r / 6.0;
            for (std::size_t k = 0; k < 2; ++k)
                dw[o * 2 + k] += 2.0 * r * xv[i * 2 + k] / 6.0;
        }
    }
    CHECK(result.step == 1);
    CHECK(result.lr == 1.0);
    CHECK(result.loss == doctest::Approx(loss).epsilon(1e-6));
    CHECK(result.grad_norm == doctest::Approx(std::sqrt(dw[0] * dw[0] + dw[1] * dw[1] + dw[2] * dw[2] +
                                                        dw[3] * dw[3] + db[0] * db[0] + db[1] * db[1]))
                                  .epsilon(1e-6));
    const std::vector<float> w1 = params.value_of("w").to_f32(), b1 = params.value_of("b").to_f32();
    for (std::size_t i = 0; i < 4; ++i)
        CHECK(w1[i] == doctest::Approx(w0[i] - dw[i]).epsilon(1e-6));
    for (std::size_t i = 0; i < 2; ++i)
        CHECK(b1[i] == doctest::Approx(b0[i] - db[i]).epsilon(1e-6));
}

TEST_CASE("train: one program per batch shape, clipping, and a loss that falls on a repeated batch") {
    anvil::train::parameter_set params(3);
    auto build = [&](std::span<const anvil::io_info> batch) {
        anvil::graph g;
        const auto x = g.input("x", dtype::f32, batch[0].shape);
        const auto labels = g.input("labels", dtype::i64, batch[1].shape);
        const auto h = g.apply(op::relu, {anvil::train::linear(g, params, "hidden", x, 8)});
        return anvil::train::training_graph{
            g, anvil::train::cross_entropy(anvil::train::linear(g, params, "out", h, 3), labels)};
    };
    const auto declare = [&] {
        (void)build(
            std::vector<anvil::io_info>{{"x", dtype::f32, dims{1, 4}}, {"labels", dtype::i64, dims{1}}});
    };
    declare();
    REQUIRE(params.parameters().size() == 4);
    CHECK_FALSE(params.parameters()[1].weight_decay);  // hidden.bias
    anvil::train::adamw optimizer(params.parameters(),
                                  {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.0});
    anvil::train::trainer_options options;
    options.max_grad_norm = 0.5;
    anvil::train::trainer trainer(params, build, optimizer, anvil::train::lr_schedule("linear", 0.05, 2, 40),
                                  options);
    const std::vector<float> x4{1, 0, -1, 2, 0.5f, 0.5f, -2, 1, 3, -1, 0, 0, 1, 1, 1, 1};
    const std::vector<std::int64_t> y4{0, 1, 2, 1};
    const std::vector<anvil::named_tensor> four{{"x", host_tensor::from(x4, dims{4, 4})},
                                                {"labels", host_tensor::from(y4, dims{4})}};
    const std::vector<anvil::named_tensor> three{
        {"x", host_tensor::from(std::vector<float>(x4.begin(), x4.begin() + 12), dims{3, 4})},
        {"labels", host_tensor::from(std::vector<std::int64_t>(y4.begin(), y4.begin() + 3), dims{3})}};
    double first = 0.0, last = 0.0;
    for (int s = 0; s < 30; ++s) {
        const auto r = trainer.step(s % 3 == 2 ? three : four);
        if (s == 0) {
            first = r.loss;
            CHECK(r.lr == 0.0);  // step 0 of the warmup: lr 0, and it still counts
        }
        if (s == 1) CHECK(r.lr == doctest::Approx(0.025));
        if (s % 3 != 2) last = r.loss;
        CHECK(r.grad_norm > 0.0);
    }
    CHECK(last < 0.5 * first);
    CHECK(trainer.programs_compiled() == 2);
    (void)trainer.evaluate(four);
    (void)trainer.evaluate(four);
    CHECK(trainer.programs_compiled() == 3);
}

TEST_CASE("train: dropout masks are numpy's default_rng([seed, step]) draws, and ones when evaluating") {
    // /usr/bin/python3 -c "import numpy as np; print((np.random.default_rng([5, s]).random((2, 5)) >= 0.25)
    //     .astype(int).tolist())" for s = 1, 2, 3: the elements kept at steps 1 to 3 of a run seeded 5.
    const std::vector<std::vector<int>> kept = {
        {1, 1, 1, 1, 1, 1, 0, 0, 1, 1}, {0, 1, 1, 1, 0, 1, 0, 0, 1, 0}, {1, 0, 1, 1, 0, 0, 1, 1, 0, 0}};
    anvil::train::parameter_set params(4);
    std::size_t sites = 0;
    auto build = [&](std::span<const anvil::io_info> batch) {
        anvil::train::training_graph model;
        anvil::graph& g = model.model;
        const anvil::tensor<float> x = g.input<float>("x", batch[0].shape);
        const anvil::tensor<float> dropped = anvil::train::dropout(model, x, 0.25);
        CHECK(anvil::train::dropout(model, x, 0.0).value().id() == x.value().id());  // p = 0: no site
        sites = model.dropout.size();
        const anvil::value y = anvil::train::linear(g, params, "out", dropped.value(), 1);
        model.loss = anvil::train::mse_loss(y, g.input("labels", dtype::f32, batch[1].shape));
        model.outputs = {dropped.value()};
        return model;
    };
    (void)build(
        std::vector<anvil::io_info>{{"x", dtype::f32, dims{2, 5}}, {"labels", dtype::f32, dims{2, 1}}});
    anvil::train::sgd optimizer(params.parameters(), {});
    anvil::train::trainer_options options;
    options.seed = 5;
    anvil::train::trainer trainer(params, build, optimizer, anvil::train::lr_schedule("constant", 0.1, 0, 3),
                                  options);
    const std::vector<anvil::named_tensor> batch{
        {"x", host_tensor::from(std::vector<float>(10, 2.0f), dims{2, 5})},
        {"labels", host_tensor::from(std::vector<float>{1.0f, -1.0f}, dims{2, 1})}};
    for (std::size_t s = 0; s < kept.size(); ++s) {
        CAPTURE(s);
        const std::vector<float> dropped = trainer.step(batch).outputs.at(0).to_f32();
        REQUIRE(dropped.size() == 10);
        for (std::size_t i = 0; i < dropped.size(); ++i)
            CHECK(dropped[i] == (kept[s][i] != 0 ? 2.0f * static_cast<float>(1.0 / 0.75) : 0.0f));
    }
    CHECK(sites == 1);
    const std::vector<float> evaluated = trainer.evaluate(batch).outputs.at(0).to_f32();
    CHECK(evaluated == std::vector<float>(10, 2.0f));

    anvil::train::training_graph model;
    const anvil::tensor<float> x = model.model.input<float>("x", dims{2});
    CHECK_THROWS_WITH_AS(static_cast<void>(anvil::train::dropout(model, x, 1.0)),
                         doctest::Contains("at least 0 and below 1, got 1"), anvil::error);
}

TEST_CASE("train: the GroupNorm built from primitives equals the group_norm op, gradients included") {
    anvil::train::parameter_set params;
    anvil::graph g;
    const auto x = g.input("x", dtype::f32, dims{2, 8, 3, 3});
    const auto built = anvil::train::group_norm(g, params, "gn", x, 4, 1e-5f);
    anvil::attributes attrs;
    attrs.groups = 4;
    attrs.epsilon = 1e-5f;
    const auto fused =
        g.apply(op::group_norm, {x, params.in(g, "gn.weight"), params.in(g, "gn.bias")}, attrs);
    const auto seed = g.input("seed", dtype::f32, dims{2, 8, 3, 3});
    const auto grad_built = anvil::gradients(built, {x}, seed)[0];
    const auto grad_fused = anvil::gradients(fused, {x}, seed)[0];
    std::vector<float> xv(144), sv(144);
    for (std::size_t i = 0; i < 144; ++i) {
        xv[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f + 0.1f * static_cast<float>(i % 7);
        sv[i] = std::cos(0.11f * static_cast<float>(i * i % 17));
    }
    anvil::program p = anvil::compile(std::vector<anvil::value>{built, fused, grad_built, grad_fused}, {});
    const auto out = p.run({{"gn.bias", params.value_of("gn.bias")},
                            {"gn.weight", params.value_of("gn.weight")},
                            {"seed", host_tensor::from(sv, dims{2, 8, 3, 3})},
                            {"x", host_tensor::from(xv, dims{2, 8, 3, 3})}});
    CHECK(anvil_test::max_difference(out[0], out[1]) < 1e-5);
    CHECK(anvil_test::max_difference(out[2], out[3]) < 1e-5);
}

TEST_CASE("train: dynamic loss scaling keeps fp16 gradients from underflowing, and backs off on overflow") {
    // loss = sum(w * x) * 1e-3 * 1e-3 computed in fp16 (ane_numerics: every op rounded to fp16, as on the
    // Neural Engine): d loss / d w = 1e-6 x, about 1e-8, below fp16's smallest subnormal (6e-8).
    auto make = [](anvil::train::parameter_set& params) {
        params.declare("w", host_tensor::from(std::vector<float>{1, 1, 1, 1}, dims{4}));
        return [&params](std::span<const anvil::io_info> batch) {
            anvil::graph g;
            const auto x = g.input("x", dtype::f32, batch[0].shape);
            const auto product = g.apply(op::reduce_sum, {g.apply(op::mul, {params.in(g, "w"), x})});
            const auto loss = g.apply(op::mul, {g.apply(op::mul, {product, g.scalar(1e-3)}), g.scalar(1e-3)});
            return anvil::train::training_graph{g, loss};
        };
    };
    const std::vector<float> xv{0.01f, 0.02f, -0.03f, 0.04f};
    const std::vector<anvil::named_tensor> batch{{"x", host_tensor::from(xv, dims{4})}};
    anvil::train::trainer_options fp16;
    fp16.compile.ane_numerics = true;

    SUBCASE("without scaling the gradients underflow to zero; with it they are right") {
        anvil::train::parameter_set plain_params, scaled_params;
        auto plain_model = make(plain_params);
        auto scaled_model = make(scaled_params);
        anvil::train::sgd plain_sgd(plain_params.parameters(), {});
        anvil::train::sgd scaled_sgd(scaled_params.parameters(), {});
        anvil::train::trainer_options off = fp16;
        off.scale_loss_automatically = false;
        anvil::train::trainer plain(plain_params, plain_model, plain_sgd,
                                    anvil::train::lr_schedule("constant", 1e6, 0, 1), off);
        anvil::train::trainer scaled(scaled_params, scaled_model, scaled_sgd,
                                     anvil::train::lr_schedule("constant", 1e6, 0, 1), fp16);
        CHECK(scaled.loss_scale() == 4096.0);  // the default on fp16 backends
        const auto a = plain.step(batch);
        CHECK(a.grad_norm == 0.0);
        CHECK(a.loss_scale == 1.0);
        // These gradients (1e-8) need more than the default: 2^12 x 1e-8 is still below fp16's smallest
        // normal. 2^15 lifts them, and fits fp16 with the cotangent (GradScaler's 2^16 would not: 65504 is
        // fp16's largest finite value), so the first step already updates.
        anvil::train::trainer_options high = fp16;
        high.scaling = anvil::train::loss_scaling{};
        high.scaling->initial_scale = 32768.0;
        anvil::train::trainer lifted(scaled_params, scaled_model, scaled_sgd,
                                     anvil::train::lr_schedule("constant", 1e6, 0, 1), high);
        const auto b = lifted.step(batch);
        CHECK_FALSE(b.skipped);
        CHECK(b.loss_scale == 32768.0);
        // lr 1e6 times the gradient 1e-6 x: w moves by -x.
        const std::vector<float> w = scaled_params.value_of("w").to_f32();
        for (std::size_t i = 0; i < 4; ++i)
            CHECK(w[i] == doctest::Approx(1.0f - xv[i]).epsilon(5e-3));
        CHECK(plain_params.value_of("w").to_f32() == std::vector<float>{1, 1, 1, 1});
    }
    SUBCASE("skipped steps halve the scale; clean steps grow it back") {
        anvil::train::parameter_set params;
        auto model = make(params);
        anvil::train::sgd sgd(params.parameters(), {});
        anvil::train::trainer_options options = fp16;
        options.scaling = anvil::train::loss_scaling{
            .initial_scale = 1048576.0, .growth_factor = 2.0, .backoff_factor = 0.5, .growth_interval = 3};
        anvil::train::trainer trainer(params, model, sgd, anvil::train::lr_schedule("linear", 1.0, 2, 10),
                                      options);
        std::vector<double> scales;
        std::vector<bool> skipped;
        std::vector<double> lrs;
        for (int s = 0; s < 10; ++s) {
            const auto r = trainer.step(batch);
            scales.push_back(r.loss_scale);
            skipped.push_back(r.skipped);
            lrs.push_back(r.lr);
        }
        // 2^20 .. 2^16 overflow (5 skips), 2^15 runs three clean steps, grows to 2^16, which overflows again.
        CHECK(scales ==
              std::vector<double>{1048576, 524288, 262144, 131072, 65536, 32768, 32768, 32768, 65536, 32768});
        CHECK(skipped == std::vector<bool>{true, true, true, true, true, false, false, false, true, false});
        CHECK(sgd.steps_taken() == 4);
        // A skipped step does not advance the schedule: the first update uses step 0's lr (0, warmup).
        CHECK(lrs[5] == 0.0);
        CHECK(lrs[6] == 0.5);
        CHECK(lrs[9] == doctest::Approx(1.0 * 7 / 8));
    }
    anvil::train::parameter_set params;
    auto model = make(params);
    anvil::train::sgd sgd(params.parameters(), {});
    anvil::train::trainer_options bad = fp16;
    bad.scaling = anvil::train::loss_scaling{
        .initial_scale = 1.0, .growth_factor = 2.0, .backoff_factor = 1.5, .growth_interval = 10};
    CHECK_THROWS_WITH_AS(
        anvil::train::trainer(params, model, sgd, anvil::train::lr_schedule("constant", 1.0, 0, 1), bad),
        doctest::Contains("backoff_factor in (0, 1) (1.5)"), anvil::error);
}

TEST_CASE("train: steps on the Neural Engine simulator compile each program once") {
    anvil_test::ane_target ane;
    if (!anvil_test::use_ane_simulator(ane)) return;
    anvil::train::parameter_set params(5);
    auto build = [&](std::span<const anvil::io_info> batch) {
        anvil::graph g;
        const auto x = g.input("x", dtype::f32, batch[0].shape);
        const auto labels = g.input("labels", dtype::i64, batch[1].shape);
        const auto h = g.apply(op::gelu, {anvil::train::linear(g, params, "hidden", x, 16)});
        return anvil::train::training_graph{
            g, anvil::train::cross_entropy(anvil::train::linear(g, params, "out", h, 4), labels)};
    };
    (void)build(std::vector<anvil::io_info>{{"x", dtype::f32, dims{1, 8}}, {"labels", dtype::i64, dims{1}}});
    anvil::train::sgd_options momentum;
    momentum.momentum = 0.9;
    anvil::train::sgd optimizer(params.parameters(), momentum);
    anvil::train::trainer_options options;
    options.compile = ane.options;
    options.compile.placement_log = std::make_shared<anvil::placement_journal>();
    anvil::train::trainer trainer(params, build, optimizer, anvil::train::lr_schedule("constant", 0.1, 0, 1),
                                  options);
    std::vector<float> xv(64);
    for (std::size_t i = 0; i < xv.size(); ++i)
        xv[i] = std::sin(static_cast<float>(i));
    const std::vector<std::int64_t> labels{0, 1, 2, 3, 3, 2, 1, 0};
    const std::vector<anvil::named_tensor> batch{{"x", host_tensor::from(xv, dims{8, 8})},
                                                 {"labels", host_tensor::from(labels, dims{8})}};
    const double first = trainer.step(batch).loss;
    const long compiles = anvil_test::sim().counter("compiles");
    double last = first;
    for (int s = 0; s < 20; ++s)
        last = trainer.step(batch).loss;
    CHECK(anvil_test::sim().counter("compiles") == compiles);
    CHECK(trainer.programs_compiled() == 1);
    CHECK(last < 0.5 * first);
    // Where the step ran: on an M4-class chip the linear layers' forward and backward (products of two
    // activations: matmul) on the Neural Engine, only the labels' integer work on the CPU; an M1 has no such
    // matmul, and then the step runs on the CPU. Fault-injecting runs only check the numbers above.
    const std::string chip = anvil_test::option_from_environment("architecture", "h16g");
    if (!anvil_test::simulator_injects_faults()) {
        std::size_t on_ane = 0;
        for (const anvil::placement_report& report : options.compile.placement_log->reports()) {
            for (const anvil::placement_segment& segment : report.segments) {
                CAPTURE(segment.ops);
                CAPTURE(segment.reason);
                if (segment.device != "ane") continue;
                ++on_ane;
                CHECK((segment.ops.find("matmul") != std::string::npos ||
                       segment.ops.find("linear") != std::string::npos));
            }
        }
        if (chip.rfind("h13", 0) == 0 || chip.rfind("h14", 0) == 0) {
            CHECK(on_ane == 0);
        } else {
            CHECK(on_ane == 2);
        }
    }
}

}  // namespace test_training
