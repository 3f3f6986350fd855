// Reverse-mode differentiation (graph/autodiff.hpp, the VJP table in graph/vjp-inl.hpp): every op case of
// tests/data/ops/cases.json — the cases the reference kernels are checked on — differentiated and compared
// with central finite differences of the same graph, all in float64 (the CPU's float64 program computes
// every op in double, so the differences are accurate to about 1e-9). The PyTorch comparison of the same
// cases is in the test below it. Then the API's contract: parameters, seeds, unreached values, and the
// errors for what has no gradient.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>
#include <anvil/graph/vjp.hpp>

#include "ane_simulator.hpp"
#include "model_test_support.hpp"
#include "op_cases.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

// A namespace of its own, so the test files can be compiled together (a unity build).
namespace test_autodiff {

namespace {

namespace fs = std::filesystem;
namespace json = anvil::json;
using anvil::dims;
using anvil::dtype;
using anvil::host_tensor;
using anvil::op;
using op_cases::ops_folder;

// A .npy array as a host tensor: floating arrays widened to f64 (the test's precision), others as they are.
host_tensor as_tensor(const anvil::npy::array& array) {
    const dims shape(array.shape);
    if (anvil::is_floating(array.type)) {
        const std::vector<float> values = array.to_f32();
        std::vector<double> wide(values.begin(), values.end());
        return host_tensor::from(wide, shape);
    }
    host_tensor t(array.type, shape);
    if (!array.data.empty()) std::memcpy(t.raw(), array.data.data(), array.data.size());
    return t;
}

// Whether a floating tensor holds only finite values (integers and booleans always do).
bool finite(const host_tensor& t) {
    if (!anvil::is_floating(t.type())) return true;
    if (t.type() == dtype::f64) {
        const auto v = t.values<double>();
        return std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); });
    }
    const std::vector<float> v = t.to_f32();
    return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
}

double sum_of_products(const host_tensor& a, const host_tensor& b) {
    const auto x = a.values<double>();
    const auto y = b.values<double>();
    double total = 0.0;
    for (std::size_t i = 0; i < x.size(); ++i)
        total += x[i] * y[i];
    return total;
}

// A case of tests/data/ops/vjp/cases.json (tools/fixtures/make_vjp_goldens.py): an op case of ops/cases.json,
// or one of its own (the "op" entry says so), with PyTorch's gradients in float64 for a float32 cotangent.
struct vjp_case {
    std::string name;
    op kind = op::add;
    anvil::attributes attrs;
    std::vector<fs::path> inputs;
    fs::path cotangent;
    std::vector<std::pair<std::size_t, fs::path>> grads;
    double atol = 0.0, rtol = 0.0;
};

std::vector<vjp_case> load_vjp_cases() {
    const fs::path folder = ops_folder() / "vjp";
    const json::value ops = json::parse_file(ops_folder() / "cases.json");
    std::map<std::string, const json::value*> by_name;
    for (const auto& c : ops.at("cases").as_array())
        by_name[c.at("name").as_string()] = &c;
    static const json::value document = json::parse_file(folder / "cases.json");
    std::vector<vjp_case> cases;
    for (const auto& c : document.at("cases").as_array()) {
        vjp_case v;
        v.name = c.at("name").as_string();
        const bool own = c.find("op") != nullptr;
        const json::value& source = own ? c : *by_name.at(v.name);
        const fs::path input_folder = own ? folder : ops_folder();
        v.kind = op_cases::op_from_name(source.at("op").as_string()).value();
        v.attrs = op_cases::parse_attributes(source.at("attrs"));
        for (const auto& file : source.at("inputs").as_array())
            v.inputs.push_back(input_folder / file.as_string());
        v.cotangent = folder / c.at("cotangent").as_string();
        for (const auto& [index, file] : c.at("grads").as_object())
            v.grads.emplace_back(static_cast<std::size_t>(std::stoul(index)), folder / file.as_string());
        v.atol = c.at("atol").as_double();
        v.rtol = c.at("rtol").as_double();
        cases.push_back(std::move(v));
    }
    return cases;
}

// One case's graph, its inputs (floating ones in `type`), the cotangent as an input named "cotangent", and
// the gradients of every floating input.
struct differentiated_case {
    anvil::graph graph;
    std::vector<anvil::named_tensor> inputs;
    std::vector<std::size_t> floating;  // which inputs get gradients
    anvil::value result;
    std::vector<anvil::value> grads;
};

host_tensor narrowed(const host_tensor& t, dtype type) {
    if (t.type() != dtype::f64 || type == dtype::f64) return t;
    const auto v = t.values<double>();
    std::vector<float> values(v.begin(), v.end());
    return host_tensor::from(values, t.shape());
}

differentiated_case build_case(const vjp_case& c, dtype type) {
    differentiated_case d;
    std::vector<anvil::value> operands;
    for (std::size_t index = 0; index < c.inputs.size(); ++index) {
        const host_tensor t = narrowed(as_tensor(anvil::npy::read(c.inputs[index])), type);
        const std::string name = "in" + std::to_string(index);
        operands.push_back(d.graph.input(name, t.type(), t.shape()));
        d.inputs.push_back({name, t});
        if (anvil::is_floating(t.type())) d.floating.push_back(index);
    }
    d.result = d.graph.apply(c.kind, operands, c.attrs);
    std::vector<anvil::value> wrt;
    for (const std::size_t i : d.floating)
        wrt.push_back(operands[i]);
    const anvil::value seed = d.graph.input("cotangent", d.result.type(), d.result.shape());
    d.grads = anvil::gradients(d.result, wrt, seed);
    return d;
}

host_tensor random_cotangent(const dims& shape, std::mt19937& rng) {
    std::normal_distribution<double> normal;
    std::vector<double> values(static_cast<std::size_t>(shape.element_count()));
    for (double& v : values)
        v = normal(rng);
    return host_tensor::from(values, shape);
}

// The fixture's float32 cotangent as a tensor of the result's type (exact: the fixture made it
// representable).
host_tensor cotangent_of(const vjp_case& c, dtype type) {
    const anvil::npy::array array = anvil::npy::read(c.cotangent);
    const std::vector<float> values = array.to_f32();
    const dims shape(array.shape);
    if (type == dtype::f64)
        return host_tensor::from(std::vector<double>(values.begin(), values.end()), shape);
    if (type == dtype::f32) return host_tensor::from(values, shape);
    host_tensor t(type, shape);
    for (std::size_t i = 0; i < values.size(); ++i) {
        if (type == dtype::f16) t.values<anvil::half>()[i] = anvil::half(values[i]);
        if (type == dtype::bf16) t.values<anvil::bfloat16>()[i] = anvil::bfloat16(values[i]);
    }
    return t;
}

}  // namespace

TEST_CASE("autodiff: every op's VJP matches PyTorch's autograd") {
    const std::vector<vjp_case> cases = load_vjp_cases();
    REQUIRE(cases.size() > 100);
    std::set<std::string> checked_ops;
    // float64 through the reference kernels (PyTorch's float64 gradients within 1e-9), and float32 through
    // the fast kernels on two threads, the path training takes (within float32's rounding of the longest
    // chains here: 2e-4 absolute plus 1e-3 relative).
    for (const dtype type : {dtype::f64, dtype::f32}) {
        for (const vjp_case& c : cases) {
            INFO("case ", c.name, " in ", anvil::dtype_name(type));
            differentiated_case d = build_case(c, type);
            std::vector<anvil::value> outputs(d.grads.begin(), d.grads.end());
            anvil::compile_options options;
            options.threads = 2;
            anvil::program backward = anvil::compile(outputs, options);
            std::vector<anvil::named_tensor> inputs = d.inputs;
            inputs.push_back({"cotangent", cotangent_of(c, d.result.type())});
            const std::vector<host_tensor> got = backward.run(inputs);
            REQUIRE(c.grads.size() <= d.floating.size());
            for (const auto& [index, file] : c.grads) {
                const std::size_t input_index = index;  // INFO captures it; clang 14 cannot capture a binding
                INFO("gradient of input ", input_index);
                const auto position =
                    std::find(d.floating.begin(), d.floating.end(), index) - d.floating.begin();
                REQUIRE(static_cast<std::size_t>(position) < d.floating.size());
                const host_tensor& grad = got[static_cast<std::size_t>(position)];
                const anvil::npy::array want_array = anvil::npy::read(file);
                REQUIRE(grad.shape() == dims(want_array.shape));
                const std::vector<double> want = want_array.values<double>();
                const std::vector<float> got32 = grad.to_f32();
                const double atol = type == dtype::f64 ? c.atol : 2e-4,
                             rtol = type == dtype::f64 ? c.rtol : 1e-3;
                std::size_t bad = 0;
                std::string first;
                for (std::size_t i = 0; i < want.size(); ++i) {
                    const double value = type == dtype::f64 ? grad.values<double>()[i] : got32[i];
                    if (!(std::fabs(value - want[i]) <= atol + rtol * std::fabs(want[i])) && bad++ == 0) {
                        first = "element " + std::to_string(i) + ": anvil " + std::to_string(value) +
                                ", torch " + std::to_string(want[i]);
                    }
                }
                CHECK_MESSAGE(bad == 0, bad, " of ", want.size(), " elements differ; first ", first);
            }
            checked_ops.insert(std::string(anvil::op_name(c.kind)));
        }
    }
    // Every op with a VJP row has a case.
    for (std::size_t i = 0; i < anvil::op_count; ++i) {
        const auto kind = static_cast<op>(i);
        if (anvil::detail::autodiff::vjp_of(kind).rule == nullptr) continue;
        CHECK_MESSAGE(checked_ops.count(std::string(anvil::op_name(kind))) == 1, anvil::op_name(kind),
                      " has a VJP row but no case checked it");
    }
}

namespace {

// Where each segment of a program ran, and why a CPU segment did: what a failure on the simulator needs.
std::string placement_summary(const anvil::program& p) {
    std::string text;
    for (const anvil::placement_segment& segment : p.placement().segments) {
        text += "[" + segment.device + ": " + segment.ops;
        if (!segment.reason.empty()) text += " (" + segment.reason + ")";
        text += "] ";
    }
    return text;
}

// Which third of the op table a case's op is in: the simulator's cases run as three test cases, each in a
// process of its own, because a process may compile only ~119 Neural Engine programs.
int third_of(op kind) {
    const auto index = static_cast<std::size_t>(kind);
    return index < static_cast<std::size_t>(op::matmul)       ? 0
           : index < static_cast<std::size_t>(op::reduce_sum) ? 1
                                                              : 2;
}

// The cases of one third on the simulated Neural Engine (f32 in, fp16 inside): every gradient within fp16's
// reach of PyTorch's: 1e-2 of the largest gradient of that input, plus 2e-2 relative, plus 1e-3 (fp16's
// resolution at the cotangents' scale, which are N(0, 1)), and the same shape.
void check_on_simulator(int third) {
    anvil_test::ane_target ane;
    if (!anvil_test::use_ane_simulator(ane)) return;
    // As on a chip whose record says it loads programs with no conv or matmul: the elementwise ops' backward
    // graphs then reach the Neural Engine instead of staying on the CPU as unanchored segments.
    ane.options.ane_lowering["anchorless"] = "native";
    anvil_test::sim().option("anchor", "allow");
    const long compiles_before = anvil_test::sim().counter("compiles");
    std::size_t checked = 0;
    for (const vjp_case& c : load_vjp_cases()) {
        if (third_of(c.kind) != third) continue;
        INFO("case ", c.name, " on the ANE simulator");
        differentiated_case d = build_case(c, dtype::f32);
        // A softmax row holding -infinity is NaN on the Neural Engine (CONSTRAINTS.md: masks must be finite
        // there); the cases whose masks hold -infinity are checked on the CPU only.
        if ((c.kind == op::softmax || c.kind == op::attention) &&
            !std::all_of(d.inputs.begin(), d.inputs.end(), [](const auto& n) { return finite(n.tensor); })) {
            MESSAGE("case ", c.name,
                    ": its inputs hold an infinity, which the Neural Engine's softmax cannot take");
            continue;
        }
        anvil::program backward = anvil::compile(d.grads, ane.options);
        std::vector<anvil::named_tensor> inputs = d.inputs;
        inputs.push_back({"cotangent", cotangent_of(c, d.result.type())});
        const std::vector<host_tensor> got = backward.run(inputs);
        for (const auto& [index, file] : c.grads) {
            const std::size_t input_index = index;  // INFO captures it; clang 14 cannot capture a binding
            INFO("gradient of input ", input_index);
            const auto position = std::find(d.floating.begin(), d.floating.end(), index) - d.floating.begin();
            const std::vector<float> values = got[static_cast<std::size_t>(position)].to_f32();
            const std::vector<double> want = anvil::npy::read(file).values<double>();
            REQUIRE(values.size() == want.size());
            double largest = 0.0;
            for (const double w : want)
                largest = std::max(largest, std::fabs(w));
            std::size_t bad = 0;
            std::string first;
            for (std::size_t i = 0; i < want.size(); ++i) {
                if (!(std::fabs(values[i] - want[i]) <= 1e-3 + 1e-2 * largest + 2e-2 * std::fabs(want[i])) &&
                    bad++ == 0) {
                    first = "element " + std::to_string(i) + ": anvil " + std::to_string(values[i]) +
                            ", torch " + std::to_string(want[i]);
                }
            }
            CHECK_MESSAGE(bad == 0, bad, " of ", want.size(), " elements differ; first ", first,
                          "; placement: ", placement_summary(backward));
        }
        ++checked;
    }
    CHECK(checked > 30);
    const long compiled = anvil_test::sim().counter("compiles") - compiles_before;
    MESSAGE(compiled, " programs compiled on the simulator");
    CHECK(compiled > static_cast<long>(checked) / 2);
    anvil_test::sim().option("anchor", "error");
}

}  // namespace

TEST_CASE("autodiff: VJPs of the elementwise ops on the Neural Engine simulator match PyTorch (fp16)") {
    check_on_simulator(0);
}

TEST_CASE(
    "autodiff: VJPs of products and pooling and norms on the Neural Engine simulator match PyTorch (fp16)") {
    check_on_simulator(1);
}

TEST_CASE(
    "autodiff: VJPs of reductions and data movement and attention on the Neural Engine simulator (fp16)") {
    check_on_simulator(2);
}

TEST_CASE("autodiff: every op's VJP matches central finite differences (float64)") {
    std::mt19937 rng(20261207);
    std::size_t cases_checked = 0;
    for (const vjp_case& c : load_vjp_cases()) {
        // Finite differences mean nothing at a tie (maximum, amax) or across a rounding cast.
        if (c.name.find("ties") != std::string::npos || c.kind == op::cast) continue;
        INFO("case ", c.name);
        differentiated_case d = build_case(c, dtype::f64);
        if (!std::all_of(d.inputs.begin(), d.inputs.end(), [](const auto& n) { return finite(n.tensor); }))
            continue;
        std::vector<anvil::value> outputs{d.result};
        outputs.insert(outputs.end(), d.grads.begin(), d.grads.end());
        anvil::program backward = anvil::compile(outputs, {});
        anvil::program forward = anvil::compile(std::vector<anvil::value>{d.result}, {});

        const host_tensor cotangent = random_cotangent(d.result.shape(), rng);
        std::vector<anvil::named_tensor> inputs = d.inputs;
        inputs.push_back({"cotangent", cotangent});
        const std::vector<host_tensor> got = backward.run(inputs);
        REQUIRE(got.size() == 1 + d.floating.size());
        for (std::size_t g = 0; g < d.floating.size(); ++g) {
            const std::size_t which = d.floating[g];
            INFO("gradient of input ", which);
            const auto analytic = got[1 + g].values<double>();
            // Central differences of L(x) = sum(result(x) * cotangent), one element at a time.
            const host_tensor& x = d.inputs[which].tensor;
            const std::vector<double> original(x.values<double>().begin(), x.values<double>().end());
            std::size_t bad = 0;
            std::string first;
            for (std::size_t i = 0; i < original.size(); ++i) {
                const double h = 1e-6 * std::max(1.0, std::fabs(original[i]));
                auto loss_at = [&](double value) {
                    host_tensor moved = host_tensor::from(original, x.shape());
                    moved.values<double>()[i] = value;
                    std::vector<anvil::named_tensor> shifted = inputs;
                    shifted[which].tensor = moved;
                    return sum_of_products(forward.run(shifted)[0], cotangent);
                };
                const double numeric = (loss_at(original[i] + h) - loss_at(original[i] - h)) / (2 * h);
                if (std::fabs(numeric - analytic[i]) > 1e-6 * (1.0 + std::fabs(numeric)) && bad++ == 0) {
                    first = "element " + std::to_string(i) + ": autodiff " + std::to_string(analytic[i]) +
                            ", finite differences " + std::to_string(numeric);
                }
            }
            CHECK_MESSAGE(bad == 0, bad, " of ", original.size(), " elements differ; first ", first);
        }
        ++cases_checked;
    }
    CHECK(cases_checked > 90);
}

TEST_CASE("autodiff: parameters, scalar losses, unreached values and accumulation") {
    anvil::graph g;
    const anvil::value w = g.parameter("w", dtype::f64, dims{3});
    const anvil::value unused = g.parameter("unused", dtype::f64, dims{2, 2});
    const anvil::value x = g.input("x", dtype::f64, dims{3});
    REQUIRE(g.parameters().size() == 2);
    CHECK(g.parameters()[0].id() == w.id());
    // L = sum(w * x) + sum(w * w): dL/dw = x + 2w (w is used twice: the contributions add up).
    anvil::attributes all;
    const anvil::value loss = g.apply(op::add, {g.apply(op::reduce_sum, {g.apply(op::mul, {w, x})}, all),
                                                g.apply(op::reduce_sum, {g.apply(op::mul, {w, w})}, all)});
    const std::vector<anvil::value> grads = anvil::gradients(loss, g.parameters());
    anvil::program p = anvil::compile(grads, {});
    const std::vector<double> wv{1.5, -2.0, 0.25}, xv{4.0, 5.0, -6.0};
    const auto out = p.run({{"w", host_tensor::from(wv, dims{3})},
                            {"unused", host_tensor(dtype::f64, dims{2, 2})},
                            {"x", host_tensor::from(xv, dims{3})}});
    const auto dw = out[0].values<double>();
    for (std::size_t i = 0; i < 3; ++i)
        CHECK(dw[i] == xv[i] + 2 * wv[i]);
    const auto du = out[1].values<double>();
    CHECK(out[1].shape() == dims{2, 2});
    CHECK(std::all_of(du.begin(), du.end(), [](double v) { return v == 0.0; }));
}

TEST_CASE("autodiff: what has no gradient is refused by name") {
    anvil::graph g;
    const anvil::value x = g.parameter("x", dtype::f32, dims{2, 3});
    CHECK_THROWS_WITH_AS(g.parameter("ids", dtype::i64, dims{2}),
                         "graph::parameter: 'ids' is i64; a trainable tensor must be floating point",
                         anvil::type_error);
    // A loss of more than one element needs a seed.
    CHECK_THROWS_WITH_AS(
        (void)anvil::gradients(x, {x}),
        doctest::Contains("holds more than one element; reduce it to a scalar or give the seed"),
        anvil::shape_error);
    // Integer values have no gradient.
    const anvil::value ids = g.input("ids", dtype::i64, dims{2});
    anvil::attributes all;
    const anvil::value loss = g.apply(op::reduce_sum, {x}, all);
    CHECK_THROWS_WITH_AS((void)anvil::gradients(loss, {ids}),
                         doctest::Contains("is i64; only floating-point values have gradients"),
                         anvil::type_error);
    // Quantised weights: the op is named.
    host_tensor q(dtype::i8, dims{3, 2});
    const anvil::value scales = g.parameter("scale", dtype::f32, dims{3});
    anvil::attributes axis0;
    const anvil::value w = g.apply(op::dequantize_int8, {g.constant(q, "q"), scales}, axis0);
    const anvil::value y = g.apply(op::reduce_sum, {g.apply(op::matmul, {x, w})}, all);
    CHECK_THROWS_WITH_AS(
        (void)anvil::gradients(y, {scales}),
        doctest::Contains("gradients: node 6 (dequantize_int8 of 'q', f32 [3, 2]) has no gradient"),
        anvil::error);
    CHECK_THROWS_WITH_AS((void)anvil::gradients(y, {scales}),
                         doctest::Contains("has no gradient: its weights are quantised"), anvil::error);
    // The gradient through a comparison is none, as in PyTorch: where(x > 0, x, 0) still differentiates.
    const anvil::value positive = g.apply(op::greater, {x, g.scalar(0.0)});
    const anvil::value relu_like =
        g.apply(op::reduce_sum, {g.apply(op::where, {positive, x, g.scalar(0.0)})}, all);
    CHECK_NOTHROW((void)anvil::gradients(relu_like, {x}));
}

}  // namespace test_autodiff
