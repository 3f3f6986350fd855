// The optimizers, learning-rate schedules and gradient clipping (train/sgd.hpp, adamw.hpp, schedule.hpp,
// clip.hpp) against PyTorch 1.13 and Hugging Face transformers' schedule lambdas
// (tools/reference/train_optimizers.py wrote tests/data/train/optimizers/): every step's parameters, the
// final buffers, clip_grad_norm_'s totals and each schedule's learning rates; a state saved mid-run continues
// bit for bit; bad options, gradients and states are refused with messages that say what is wrong.
#include <doctest/doctest.h>
#include <anvil/core/host_tensor.hpp>
#include <anvil/core/json_parser.hpp>
#include <anvil/core/npy.hpp>
#include <anvil/train.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace test_train_optimizers {

namespace {

using anvil::host_tensor;
using anvil::train::parameter;

const std::filesystem::path folder = std::filesystem::path(ANVIL_TEST_DATA_DIR) / "train" / "optimizers";

// anvil mirrors torch's float32 operations one for one (fma where torch's AVX2 kernels fuse), so parameters
// and buffers mostly agree bit for bit. What may differ is the clipping total: torch sums squares in f32 over
// 8 lanes, anvil in double, an ulp or two apart, and the coefficient carries that into the clipped gradients.
// The tolerance is relative to the value's magnitude with a floor of 1 (values are O(1): N(0, 1) parameters,
// Adam's moments of N(0, 0.5) gradients), so near-zero values are held to 1e-6 absolute.
constexpr double tolerance = 1e-6;

bool close(double actual, double expected) {
    return std::abs(actual - expected) <= tolerance * std::max(1.0, std::abs(expected));
}

std::vector<float> read_f32(const std::string& file) {
    return anvil::npy::read(folder / file).values<float>();
}

anvil::dims dims_of(const anvil::json::value& shape) {
    std::vector<std::int64_t> extents;
    for (const auto& extent : shape.as_array())
        extents.push_back(extent.as_int());
    return anvil::dims(extents);
}

// A case of cases.json with its arrays: params [N], grads and expected [steps, N], state [buffers, N].
struct reference_case {
    const anvil::json::value* json = nullptr;
    std::string name;
    std::size_t size = 0;
    std::int64_t steps = 0;
    std::vector<float> params, grads, expected, state;

    [[nodiscard]] const anvil::json::value& at(std::string_view key) const { return json->at(key); }

    // Fresh tensors holding `flat` (a row of N floats) in the shapes and order of the case's parameters.
    [[nodiscard]] std::vector<host_tensor> tensors(std::span<const float> flat) const {
        std::vector<host_tensor> out;
        for (const auto& p : at("parameters").as_array()) {
            const auto shape = dims_of(p.at("shape"));
            const auto offset = static_cast<std::size_t>(p.at("offset").as_int());
            const auto count = static_cast<std::size_t>(shape.element_count());
            out.push_back(host_tensor::from(flat.subspan(offset, count), shape));
        }
        return out;
    }

    [[nodiscard]] std::vector<parameter> parameters(std::span<const float> flat) const {
        std::vector<parameter> out;
        const auto values = tensors(flat);
        const auto& described = at("parameters").as_array();
        for (std::size_t i = 0; i < values.size(); ++i)
            out.push_back(
                {described[i].at("name").as_string(), values[i], described[i].at("weight_decay").as_bool()});
        return out;
    }

    [[nodiscard]] std::vector<host_tensor> step_grads(std::int64_t step) const {
        return tensors(std::span<const float>(grads).subspan(static_cast<std::size_t>(step) * size, size));
    }

    [[nodiscard]] std::unique_ptr<anvil::train::optimizer> make_optimizer(std::span<const float> flat) const {
        const auto& o = at("options");
        if (at("optimizer").as_string() == "sgd") {
            const anvil::train::sgd_options options{
                o.at("momentum").as_double(), o.at("dampening").as_double(), o.at("weight_decay").as_double(),
                o.at("nesterov").as_bool()};
            return std::make_unique<anvil::train::sgd>(parameters(flat), options);
        }
        const anvil::train::adamw_options options{o.at("beta1").as_double(), o.at("beta2").as_double(),
                                                  o.at("eps").as_double(), o.at("weight_decay").as_double()};
        return std::make_unique<anvil::train::adamw>(parameters(flat), options);
    }

    [[nodiscard]] anvil::train::lr_schedule schedule() const {
        const auto& s = at("schedule");
        return {s.at("kind").as_string(), s.at("base_lr").as_double(), s.at("warmup_steps").as_int(),
                s.at("training_steps").as_int()};
    }

    // Where clip_grad_norm_ ran before step `step`: its index among the clipped steps.
    [[nodiscard]] std::optional<std::size_t> clip_index(std::int64_t step) const {
        const auto& clip = at("clip");
        if (clip.is_null()) return std::nullopt;
        const auto& clipped = clip.at("steps").as_array();
        for (std::size_t i = 0; i < clipped.size(); ++i)
            if (clipped[i].as_int() == step) return i;
        return std::nullopt;
    }

    // One step as the reference took it: the schedule's lr, clipping where it clipped, then the update.
    // Returns clip_grad_norm's total (NaN where the step was not clipped).
    float take_step(anvil::train::optimizer& optimizer, std::int64_t step) const {
        auto step_grad = step_grads(step);
        float total = std::numeric_limits<float>::quiet_NaN();
        if (clip_index(step)) {
            total = anvil::train::clip_grad_norm(step_grad, at("clip").at("max_norm").as_double());
        }
        optimizer.step(step_grad, schedule().learning_rate(step));
        return total;
    }
};

const anvil::json::value& all_cases() {
    static const auto cases = anvil::json::parse_file(folder / "cases.json");
    return cases.at("cases");
}

reference_case load_json_case(const anvil::json::value& json) {
    reference_case c;
    c.json = &json;
    c.name = json.at("name").as_string();
    c.steps = json.at("steps").as_int();
    c.params = read_f32(c.name + ".params.npy");
    c.grads = read_f32(c.name + ".grads.npy");
    c.expected = read_f32(c.name + ".expected.npy");
    c.size = c.params.size();
    if (!json.at("buffers").as_array().empty()) c.state = read_f32(c.name + ".state.npy");
    return c;
}

reference_case load_case(std::string_view name) {
    for (const auto& json : all_cases().as_array())
        if (json.at("name").as_string() == name) return load_json_case(json);
    FAIL("no case named " << name);
    return {};
}

// The parameters concatenated in the case's order.
std::vector<float> flatten(const anvil::train::optimizer& optimizer) {
    std::vector<float> out;
    for (const auto& p : optimizer.parameters()) {
        const auto values = p.value.values<float>();
        out.insert(out.end(), values.begin(), values.end());
    }
    return out;
}

// The largest distance in units in the last place: what the report of agreement states.
std::int64_t ulps(float a, float b) {
    if (a == b) return 0;
    std::int32_t ia = 0, ib = 0;
    std::memcpy(&ia, &a, sizeof a);
    std::memcpy(&ib, &b, sizeof b);
    // Map the sign-magnitude bits onto a monotonic integer line.
    const auto line = [](std::int32_t i) -> std::int64_t {
        return i < 0 ? -static_cast<std::int64_t>(i & 0x7fffffff) : static_cast<std::int64_t>(i);
    };
    return std::abs(line(ia) - line(ib));
}

struct agreement {
    std::int64_t max_ulps = 0;
    double max_relative = 0.0;
    std::size_t mismatches = 0;

    void compare(std::span<const float> actual, std::span<const float> expected) {
        REQUIRE(actual.size() == expected.size());
        for (std::size_t i = 0; i < actual.size(); ++i) {
            max_ulps = std::max(max_ulps, ulps(actual[i], expected[i]));
            const double difference = std::abs(static_cast<double>(actual[i]) - expected[i]);
            max_relative = std::max(max_relative,
                                    difference / std::max(1.0, std::abs(static_cast<double>(expected[i]))));
            if (!close(actual[i], expected[i])) ++mismatches;
        }
    }
};

bool same_bits(std::span<const float> a, std::span<const float> b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size_bytes()) == 0);
}

host_tensor tensor_of(std::vector<float> values, anvil::dims shape) {
    return host_tensor::from(values, shape);
}

}  // namespace

TEST_CASE("train optimizers: SGD and AdamW follow torch.optim step for step") {
    for (const auto& json : all_cases().as_array()) {
        const auto c = load_json_case(json);
        INFO("case " << c.name);
        auto optimizer = c.make_optimizer(c.params);
        CHECK(optimizer->name() == c.at("optimizer").as_string());
        agreement params, totals;
        for (std::int64_t step = 0; step < c.steps; ++step) {
            INFO("step " << step);
            const auto& lr = c.at("lrs").as_array()[static_cast<std::size_t>(step)];
            CHECK(c.schedule().learning_rate(step) == doctest::Approx(lr.as_double()).epsilon(1e-15));
            const float total = c.take_step(*optimizer, step);
            if (const auto clipped = c.clip_index(step)) {
                const auto expected_total =
                    static_cast<float>(c.at("clip").at("totals").as_array()[*clipped].as_double());
                totals.compare(std::span<const float>(&total, 1), std::span<const float>(&expected_total, 1));
            }
            const auto expected =
                std::span<const float>(c.expected).subspan(static_cast<std::size_t>(step) * c.size, c.size);
            params.compare(flatten(*optimizer), expected);
        }
        CHECK(optimizer->steps_taken() == c.steps);
        agreement buffers;
        const auto state = optimizer->state();
        const auto& buffer_names = c.at("buffers").as_array();
        REQUIRE(state.tensors.size() == buffer_names.size() * optimizer->parameters().size());
        for (std::size_t b = 0; b < buffer_names.size(); ++b) {
            std::vector<float> flat;
            for (const auto& p : optimizer->parameters()) {
                const auto wanted = buffer_names[b].as_string() + "." + p.name;
                const auto found = std::find_if(state.tensors.begin(), state.tensors.end(),
                                                [&](const auto& t) { return t.name == wanted; });
                REQUIRE_MESSAGE(found != state.tensors.end(), "no state tensor " << wanted);
                const auto values = found->tensor.values<float>();
                flat.insert(flat.end(), values.begin(), values.end());
            }
            buffers.compare(flat, std::span<const float>(c.state).subspan(b * c.size, c.size));
        }
        MESSAGE(c.name << ": parameters within " << params.max_ulps << " ulp (relative "
                       << params.max_relative << "), buffers " << buffers.max_ulps << " ulp ("
                       << buffers.max_relative << "), clip totals " << totals.max_ulps << " ulp");
        CHECK(params.mismatches == 0);
        CHECK(buffers.mismatches == 0);
        CHECK(totals.mismatches == 0);
    }
}

TEST_CASE("train optimizers: AdamW's vectorised update gives the scalar loop's bits") {
    // The kernel adamw_update runs (AVX2 with FMA where the CPU has them) against the plain loop compiled for
    // the baseline, on values that reach every path: zero and tiny gradients, large moments, signs.
    constexpr std::size_t count = 1003;  // not a multiple of any vector width
    std::vector<float> param(count), grad(count), m(count), v(count);
    for (std::size_t i = 0; i < count; ++i) {
        const auto x = static_cast<float>(i);
        param[i] = std::sin(x) * 3.0f;
        grad[i] = i % 17 == 0 ? 0.0f : std::cos(x * 1.7f) * (i % 5 == 0 ? 1e-6f : 2.0f);
        m[i] = std::sin(x * 0.3f) * 0.1f;
        v[i] = std::fabs(std::cos(x * 0.9f)) * (i % 7 == 0 ? 1e-12f : 0.05f);
    }
    const anvil::detail::adamw_kernel::scalars k{0.999f, 0.9f, 0.1f, 0.999f, 0.001f, 0.3f, 1e-8f, -0.01f};
    std::vector<float> p1 = param, m1 = m, v1 = v, p2 = param, m2 = m, v2 = v;
    anvil::detail::adamw_kernel::run(p1.data(), grad.data(), m1.data(), v1.data(), count, k);
    anvil::detail::adamw_kernel::run_portable(p2.data(), grad.data(), m2.data(), v2.data(), count, k);
    CHECK(same_bits(p1, p2));
    CHECK(same_bits(m1, m2));
    CHECK(same_bits(v1, v2));
    CHECK_FALSE(same_bits(p1, param));  // the update moved the parameters
}

TEST_CASE("train optimizers: a state saved mid-run continues bit for bit") {
    for (const std::string_view name : {"sgd_momentum", "sgd_nesterov", "adamw_groups", "adamw_decay"}) {
        INFO("case " << name);
        const auto c = load_case(name);
        auto straight = c.make_optimizer(c.params);
        for (std::int64_t step = 0; step < c.steps; ++step)
            static_cast<void>(c.take_step(*straight, step));

        constexpr std::int64_t saved_at = 2;
        auto first = c.make_optimizer(c.params);
        for (std::int64_t step = 0; step < saved_at; ++step)
            static_cast<void>(c.take_step(*first, step));
        const auto saved = first->state();
        const auto saved_weights = flatten(*first);
        CHECK(saved.step == saved_at);
        // The saved state is a copy: later steps of `first` leave it alone.
        const auto snapshot = saved.tensors.front().tensor.to_f32();
        static_cast<void>(c.take_step(*first, saved_at));
        CHECK(same_bits(saved.tensors.front().tensor.to_f32(), snapshot));

        // A new run from the checkpoint: the weights as saved, a fresh optimizer, the state loaded.
        auto resumed = c.make_optimizer(saved_weights);
        resumed->load_state(saved);
        CHECK(resumed->steps_taken() == saved_at);
        for (std::int64_t step = saved_at; step < c.steps; ++step)
            static_cast<void>(c.take_step(*resumed, step));
        CHECK(same_bits(flatten(*resumed), flatten(*straight)));
        const auto a = resumed->state(), b = straight->state();
        REQUIRE(a.tensors.size() == b.tensors.size());
        for (std::size_t i = 0; i < a.tensors.size(); ++i) {
            CHECK(a.tensors[i].name == b.tensors[i].name);
            CHECK(same_bits(a.tensors[i].tensor.to_f32(), b.tensors[i].tensor.to_f32()));
        }
    }
}

TEST_CASE("train optimizers: the state is plain named data, empty before the first step") {
    const std::vector<parameter> params{{"w", tensor_of({1, 2, 3, 4}, anvil::dims{2, 2}), true},
                                        {"b", tensor_of({0.5f}, anvil::dims{1}), false}};
    anvil::train::adamw adamw(params);
    auto state = adamw.state();
    CHECK(state.name == "adamw");
    CHECK(state.step == 0);
    CHECK(state.tensors.empty());
    adamw.step(
        std::vector<host_tensor>{tensor_of({1, 1, 1, 1}, anvil::dims{2, 2}), tensor_of({1}, anvil::dims{1})},
        0.0);
    state = adamw.state();
    CHECK(state.step == 1);
    std::vector<std::string> names;
    for (const auto& t : state.tensors)
        names.push_back(t.name);
    CHECK(names == std::vector<std::string>{"exp_avg.w", "exp_avg_sq.w", "exp_avg.b", "exp_avg_sq.b"});
    // A warmup step at lr 0 moves the moments but not the weights.
    CHECK(params[0].value.to_f32() == std::vector<float>{1, 2, 3, 4});
    CHECK(state.tensors[0].tensor.to_f32() == std::vector<float>(4, 0.1f));
    // The parameters are the caller's tensors: the optimizer updates them in place.
    adamw.step(
        std::vector<host_tensor>{tensor_of({1, 1, 1, 1}, anvil::dims{2, 2}), tensor_of({1}, anvil::dims{1})},
        0.1);
    CHECK(params[0].value.values<float>()[0] < 1.0f);

    anvil::train::sgd plain({{"w", tensor_of({1}, anvil::dims{1})}}, {});
    plain.step(std::vector<host_tensor>{tensor_of({1}, anvil::dims{1})}, 0.5);
    CHECK(plain.state().tensors.empty());  // no momentum, no buffer
    CHECK(plain.parameters()[0].value.to_f32() == std::vector<float>{0.5f});
}

TEST_CASE("train optimizers: bad options are refused as torch.optim refuses them") {
    using anvil::train::adamw_options;
    using anvil::train::sgd_options;
    const std::vector<parameter> params{{"w", tensor_of({1}, anvil::dims{1})}};
    const auto sgd = [&](const sgd_options& o) { anvil::train::sgd s(params, o); };
    const auto adamw = [&](const adamw_options& o) { anvil::train::adamw a(params, o); };
    CHECK_THROWS_WITH_AS(sgd({.momentum = -0.5}), "sgd: invalid momentum -0.5 (it must be >= 0)",
                         anvil::error);
    CHECK_THROWS_WITH_AS(sgd({.weight_decay = -1}), "sgd: invalid weight_decay -1 (it must be >= 0)",
                         anvil::error);
    CHECK_THROWS_WITH_AS(
        sgd({.nesterov = true}),
        "sgd: Nesterov momentum requires a momentum and zero dampening (momentum 0, dampening 0)",
        anvil::error);
    CHECK_THROWS_WITH_AS(
        sgd({.momentum = 0.9, .dampening = 0.1, .nesterov = true}),
        "sgd: Nesterov momentum requires a momentum and zero dampening (momentum 0.9, dampening 0.1)",
        anvil::error);
    CHECK_NOTHROW(sgd({.momentum = 0.9, .nesterov = true}));
    CHECK_THROWS_WITH_AS(adamw({.beta1 = 1.0}), "adamw: invalid beta1 1 (it must be in [0, 1))",
                         anvil::error);
    CHECK_THROWS_WITH_AS(adamw({.beta2 = -0.1}), "adamw: invalid beta2 -0.1 (it must be in [0, 1))",
                         anvil::error);
    CHECK_THROWS_WITH_AS(adamw({.eps = -1e-8}), "adamw: invalid eps -1e-08 (it must be >= 0)", anvil::error);
    CHECK_THROWS_WITH_AS(adamw({.weight_decay = std::nan("")}),
                         "adamw: invalid weight_decay nan (it must be >= 0)", anvil::error);

    anvil::train::sgd s(params, {});
    const std::vector<host_tensor> grads{tensor_of({1}, anvil::dims{1})};
    CHECK_THROWS_WITH_AS(s.step(grads, -0.1), "sgd: invalid learning rate -0.1 (it must be >= 0)",
                         anvil::error);

    CHECK_THROWS_WITH_AS(anvil::train::adamw({{"w", host_tensor(anvil::dtype::f16, anvil::dims{2})}}),
                         "adamw: parameter 'w' holds f16; the optimizer updates f32 master weights",
                         anvil::type_error);
    CHECK_THROWS_WITH_AS(anvil::train::adamw({params[0], params[0]}), "adamw: parameter 'w' is given twice",
                         anvil::error);
    CHECK_THROWS_WITH_AS(anvil::train::adamw({{"", tensor_of({1}, anvil::dims{1})}}),
                         "adamw: a parameter has an empty name", anvil::error);
}

TEST_CASE(
    "train optimizers: gradients that do not fit are refused, naming the parameter, before any update") {
    const std::vector<parameter> params{{"dense.weight", tensor_of({1, 2, 3, 4}, anvil::dims{2, 2})},
                                        {"dense.bias", tensor_of({1, 2}, anvil::dims{2}), false}};
    anvil::train::adamw adamw(params);
    const auto weight_grad = tensor_of({1, 1, 1, 1}, anvil::dims{2, 2});
    CHECK_THROWS_WITH_AS(adamw.step(std::vector<host_tensor>{weight_grad}, 0.1),
                         "adamw: step got 1 gradients for 2 parameters", anvil::error);
    CHECK_THROWS_WITH_AS(
        adamw.step(std::vector<host_tensor>{weight_grad, tensor_of({1, 1, 1}, anvil::dims{3})}, 0.1),
        "adamw: the gradient of 'dense.bias' has shape [3], the parameter [2]", anvil::shape_error);
    CHECK_THROWS_WITH_AS(
        adamw.step(std::vector<host_tensor>{weight_grad, host_tensor(anvil::dtype::f16, anvil::dims{2})},
                   0.1),
        "adamw: the gradient of 'dense.bias' holds f16, not f32", anvil::type_error);
    CHECK(adamw.steps_taken() == 0);
    CHECK(params[0].value.to_f32() == std::vector<float>{1, 2, 3, 4});

    // The functional cores check their spans too.
    std::vector<float> p(3), g(2), m(3), v(3);
    CHECK_THROWS_WITH_AS(anvil::train::adamw_update(p, g, m, v, 1, 0.1, {}),
                         "adamw_update: 3 parameters, 2 gradients, 3 and 3 moments", anvil::shape_error);
    CHECK_THROWS_WITH_AS(anvil::train::adamw_update(p, p, m, v, 0, 0.1, {}),
                         "adamw_update: step 0 (steps count from 1)", anvil::error);
    CHECK_THROWS_WITH_AS(anvil::train::sgd_update(p, g, {}, true, 0.1, {}),
                         "sgd_update: 3 parameters, 2 gradients and 0 momentum values", anvil::shape_error);
}

TEST_CASE("train optimizers: a saved state that does not fit is refused whole") {
    const auto c = load_case("adamw_groups");
    auto optimizer = c.make_optimizer(c.params);
    static_cast<void>(c.take_step(*optimizer, 0));
    const auto good = optimizer->state();

    auto other = c.make_optimizer(c.params);
    auto wrong_kind = good;
    wrong_kind.name = "sgd";
    CHECK_THROWS_WITH_AS(other->load_state(wrong_kind), "adamw: cannot load the state of optimizer 'sgd'",
                         anvil::error);
    auto negative = good;
    negative.step = -1;
    CHECK_THROWS_WITH_AS(other->load_state(negative), "adamw: the saved state has a negative step count (-1)",
                         anvil::error);
    auto missing = good;
    missing.tensors.pop_back();
    CHECK_THROWS_WITH_AS(other->load_state(missing), "adamw: the saved state lacks 'exp_avg_sq.head.weight'",
                         anvil::error);
    auto unknown = good;
    unknown.tensors.back().name = "exp_avg_sq.lm_head.weight";
    CHECK_THROWS_WITH_AS(
        other->load_state(unknown),
        "adamw: the saved state has 'exp_avg_sq.lm_head.weight', which names no buffer of these "
        "parameters",
        anvil::error);
    auto twice = good;
    twice.tensors.back() = twice.tensors.front();
    CHECK_THROWS_WITH_AS(other->load_state(twice), "adamw: the saved state has 'exp_avg.dense.weight' twice",
                         anvil::error);
    auto reshaped = good;
    reshaped.tensors.front().tensor = reshaped.tensors.front().tensor.reshaped(anvil::dims{35});
    CHECK_THROWS_WITH_AS(other->load_state(reshaped),
                         "adamw: saved tensor 'exp_avg.dense.weight' is f32 [35], expected f32 [7, 5]",
                         anvil::shape_error);
    auto early = good;
    early.step = 0;
    CHECK_THROWS_WITH_AS(
        other->load_state(early),
        "adamw: the saved state has 'exp_avg.dense.weight', which a state before the first step "
        "cannot have",
        anvil::error);
    // Nothing was loaded by the refusals; the good state loads.
    CHECK(other->steps_taken() == 0);
    other->load_state(good);
    CHECK(other->steps_taken() == 1);
}

TEST_CASE("train schedules: transformers' lambdas under LambdaLR, by name") {
    const auto schedules = anvil::json::parse_file(folder / "schedules.json");
    for (const auto& s : schedules.at("schedules").as_array()) {
        const anvil::train::lr_schedule schedule(s.at("kind").as_string(), s.at("base_lr").as_double(),
                                                 s.at("warmup_steps").as_int(),
                                                 s.at("training_steps").as_int());
        const auto& lrs = s.at("lrs").as_array();
        for (std::size_t step = 0; step < lrs.size(); ++step) {
            INFO(s.at("kind").as_string() << " warmup " << s.at("warmup_steps").as_int() << " training "
                                          << s.at("training_steps").as_int() << " step " << step);
            // Python's arithmetic in double and the same libm cos: equal, or an ulp apart on another libm.
            CHECK(schedule.learning_rate(static_cast<std::int64_t>(step)) ==
                  doctest::Approx(lrs[step].as_double()).epsilon(1e-15));
        }
    }
}

TEST_CASE("train schedules: warmup boundaries, decay to zero and the names the command line takes") {
    using anvil::train::lr_schedule;
    using anvil::train::schedule_kind;
    const lr_schedule constant("constant", 0.1, 4, 0);
    CHECK(constant.multiplier(0) == 0.0);  // step 0 of a warmup trains at lr 0
    CHECK(constant.multiplier(3) == 0.75);
    CHECK(constant.multiplier(4) == 1.0);
    CHECK(constant.learning_rate(100) == 0.1);
    CHECK(lr_schedule(schedule_kind::constant, 0.1, 0, 0).multiplier(0) == 1.0);

    const lr_schedule linear("linear", 1.0, 2, 6);
    CHECK(linear.multiplier(1) == 0.5);
    CHECK(linear.multiplier(2) == 1.0);
    CHECK(linear.multiplier(4) == 0.5);
    CHECK(linear.multiplier(6) == 0.0);
    CHECK(linear.multiplier(9) == 0.0);

    const lr_schedule cosine("cosine", 1.0, 2, 6);
    CHECK(cosine.multiplier(2) == 1.0);
    CHECK(cosine.multiplier(4) == doctest::Approx(0.5).epsilon(1e-15));
    CHECK(cosine.multiplier(6) == 0.0);
    CHECK(cosine.multiplier(7) > 0.0);  // HF's cosine rises again past training_steps

    CHECK(anvil::train::parse_schedule_kind("cosine") == schedule_kind::cosine);
    CHECK(anvil::train::schedule_name(schedule_kind::linear) == "linear");
    CHECK_THROWS_WITH_AS(static_cast<void>(anvil::train::parse_schedule_kind("step")),
                         "unknown learning-rate schedule 'step' (valid: constant, linear, cosine)",
                         anvil::error);
    CHECK_THROWS_WITH_AS(lr_schedule("linear", -1.0, 0, 10),
                         "linear schedule: invalid learning rate -1 (it must be >= 0)", anvil::error);
    CHECK_THROWS_WITH_AS(lr_schedule("cosine", 1.0, -2, 10),
                         "cosine schedule: warmup steps (-2) and training steps (10) must be >= 0",
                         anvil::error);
    CHECK_THROWS_WITH_AS(static_cast<void>(linear.multiplier(-1)),
                         "linear schedule: step -1 (steps count from 0)", anvil::error);
}

TEST_CASE("train clipping: clip_grad_norm_ scales by max_norm / (total + 1e-6), at most 1") {
    std::vector<host_tensor> grads{tensor_of({3, 0}, anvil::dims{2}), tensor_of({4}, anvil::dims{1})};
    CHECK(anvil::train::global_grad_norm(grads) == 5.0f);
    CHECK(anvil::train::clip_grad_norm(grads, 10.0) == 5.0f);  // under max_norm: unchanged
    CHECK(grads[0].to_f32() == std::vector<float>{3, 0});
    CHECK(anvil::train::clip_grad_norm(grads, 1.0) == 5.0f);
    const float coefficient = (1.0f / (5.0f + 1e-6f)) * 1.0f;
    CHECK(grads[0].to_f32() == std::vector<float>{3 * coefficient, 0});
    CHECK(grads[1].to_f32() == std::vector<float>{4 * coefficient});

    std::vector<host_tensor> none;
    CHECK(anvil::train::clip_grad_norm(none, 1.0) == 0.0f);

    CHECK_THROWS_WITH_AS(static_cast<void>(anvil::train::clip_grad_norm(grads, -1.0)),
                         "clip_grad_norm: invalid max_norm -1 (it must be >= 0)", anvil::error);
    std::vector<host_tensor> half{host_tensor(anvil::dtype::f16, anvil::dims{2})};
    CHECK_THROWS_WITH_AS(static_cast<void>(anvil::train::clip_grad_norm(half, 1.0)),
                         "clip_grad_norm: gradient 0 holds f16, not f32", anvil::type_error);
}

TEST_CASE(
    "train clipping: a non-finite total scales the gradients as torch does with error_if_nonfinite off") {
    const float inf = std::numeric_limits<float>::infinity();
    // torch 1.13: clip_grad_norm_ returns inf; [inf, 1, -2] becomes [nan, 0, -0] and [3] becomes [0].
    std::vector<host_tensor> grads{tensor_of({inf, 1, -2}, anvil::dims{3}), tensor_of({3}, anvil::dims{1})};
    CHECK(anvil::train::clip_grad_norm(grads, 1.0) == inf);
    const auto first = grads[0].to_f32();
    CHECK(std::isnan(first[0]));
    CHECK(first[1] == 0.0f);
    CHECK((first[2] == 0.0f && std::signbit(first[2])));
    CHECK(grads[1].to_f32() == std::vector<float>{0});

    // A NaN anywhere makes every gradient NaN.
    grads = {tensor_of({std::nanf(""), 1, -2}, anvil::dims{3}), tensor_of({3}, anvil::dims{1})};
    CHECK(std::isnan(anvil::train::clip_grad_norm(grads, 1.0)));
    for (const auto& grad : grads)
        for (const float x : grad.to_f32())
            CHECK(std::isnan(x));
}

}  // namespace test_train_optimizers
