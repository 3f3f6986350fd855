// The CPU backend's fast kernels (backend/cpu/kernels/) against the reference kernels (evaluate_reference):
// random operands on random shapes — odd sizes, size 1, empty — for every op, on 1 and 2 threads, through
// both the portable and (where the CPU has it) the AVX2 entry points; fused chains against step-by-step
// evaluation; the vector math against double-precision libm.
//
// Tolerances (|fast - reference| <= absolute + relative * |reference|, NaN only where the reference has NaN):
//   exact ops (relu, abs, neg, clamp, sqrt, rsqrt, floor, ceil, round, sign, sin, cos, cast, add, sub, mul,
//     div, pow, maximum, minimum, comparisons, logical ops, where, data movement): bit-identical;
//   transcendentals (exp, log, tanh, sigmoid, silu, gelu, gelu_tanh, quick_gelu, erf): 1e-6 + 2e-6 |ref|;
//   norms and softmax: 1e-5 + 1e-5 |ref| (the reference computes in double); attention 2e-5 + 2e-5 |ref|;
//   rotary 4e-6 + 1e-6 |ref|; chains with a transcendental step 1e-5 + 1e-5 |ref|.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>
#include <anvil/backend/cpu/executor.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

// A namespace of its own, so the test files can be compiled together (a unity build).
namespace test_cpu_kernels {

namespace {

using anvil::dims;
using anvil::dtype;
using anvil::op;
namespace cpu = anvil::detail::cpu;

using kernel_function = void (*)(const anvil::node&, std::span<const cpu::const_tensor_span>,
                                 cpu::tensor_span, anvil::thread_pool&, std::span<float>);

// clang-format off
kernel_function fast_kernel(op kind) {
    switch (anvil::info(kind).category) {
        case anvil::op_category::unary: return cpu::elementwise_unary;
        case anvil::op_category::binary: return cpu::elementwise_binary;
        case anvil::op_category::ternary: return cpu::elementwise_where;
        case anvil::op_category::fused: return cpu::fused_elementwise;
        default: break;
    }
    switch (kind) {
        case op::layer_norm: return cpu::layer_norm;
        case op::rms_norm: return cpu::rms_norm;
        case op::group_norm: return cpu::group_norm;
        case op::batch_norm: return cpu::batch_norm;
        case op::softmax: return cpu::softmax;
        case op::attention: return cpu::attention;
        case op::rotary: return cpu::rotary;
        case op::permute: return cpu::permute;
        case op::concat: return cpu::concat;
        case op::slice: return cpu::slice;
        case op::pad: return cpu::pad;
        case op::gather: return cpu::gather;
        case op::gather_elements: return cpu::gather_elements;
        case op::scatter_add: return cpu::scatter_add;
        case op::cumsum: return cpu::cumsum;
        default: return nullptr;
    }
}
// clang-format on

std::size_t workspace_per_thread(const anvil::node& n, std::span<const dims> shapes) {
    if (n.kind == op::attention) return cpu::attention_workspace(n, shapes);
    if (n.kind == op::fused_elementwise) return cpu::fused_elementwise_workspace(n, shapes);
    return 0;
}

struct tolerance {
    double absolute = 0.0;
    double relative = 0.0;
};
constexpr tolerance exact{};
constexpr tolerance transcendental{1e-6, 2e-6};
constexpr tolerance normalisation{1e-5, 1e-5};
constexpr tolerance attention_tolerance{2e-5, 2e-5};

// The worst excess over the tolerance (<= 0 when every element is within it), and where.
struct comparison {
    double worst = -1.0;
    std::size_t at = 0;
    float got = 0.0f, want = 0.0f;
};

comparison compare(const std::vector<float>& got, const std::vector<float>& want, tolerance tol) {
    comparison result;
    for (std::size_t i = 0; i < want.size(); ++i) {
        const double g = got[i], w = want[i];
        double excess;
        if (std::isnan(w) || std::isnan(g)) {
            excess = std::isnan(w) && std::isnan(g) ? -1.0 : 1e30;
        } else if (std::isinf(w) || std::isinf(g)) {
            excess = g == w ? -1.0 : 1e30;
        } else {
            excess = std::fabs(g - w) - (tol.absolute + tol.relative * std::fabs(w));
            if (tol.absolute == 0.0 && tol.relative == 0.0) {
                excess =
                    std::bit_cast<std::uint32_t>(got[i]) == std::bit_cast<std::uint32_t>(want[i]) || g == w
                        ? -1.0
                        : 1.0;
            }
        }
        if (excess > result.worst) result = {excess, i, got[i], want[i]};
    }
    return result;
}

std::mt19937& random_engine() {
    static std::mt19937 engine(20240611);
    return engine;
}

std::vector<float> uniform(std::size_t count, float low, float high) {
    std::uniform_real_distribution<float> distribution(low, high);
    std::vector<float> values(count);
    for (auto& v : values)
        v = distribution(random_engine());
    return values;
}

std::size_t count_of(const dims& shape) {
    return static_cast<std::size_t>(shape.element_count());
}

// A graph whose leaves are inputs with the given data, and one node on them.
struct fixture {
    anvil::graph g;
    std::vector<anvil::value> leaves;
    std::vector<std::vector<float>> data;

    anvil::value add(dims shape, std::vector<float> values, dtype type = dtype::f32) {
        values.reserve(values.size() + 1);  // never a null data pointer, even when empty
        leaves.push_back(g.input("x" + std::to_string(leaves.size()), type, shape));
        data.push_back(std::move(values));
        return leaves.back();
    }
    anvil::value add_uniform(dims shape, float low = -3.0f, float high = 3.0f) {
        return add(shape, uniform(count_of(shape), low, high));
    }
};

std::vector<cpu::const_tensor_span> spans_of(const fixture& f, const anvil::node& n) {
    std::vector<cpu::const_tensor_span> spans;
    for (const anvil::value_id id : n.inputs) {
        std::size_t leaf = 0;
        while (f.leaves[leaf].id() != id)
            ++leaf;
        spans.push_back({f.data[leaf].data(), f.g[id].result.shape});
    }
    return spans;
}

// An output of `count` elements whose data pointer is never null (UBSan rejects offsets from null).
std::vector<float> output_of(std::size_t count, float fill) {
    std::vector<float> out(count + 1, fill);
    out.pop_back();
    return out;
}

std::vector<float> run_reference(const fixture& f, const anvil::node& n) {
    const auto spans = spans_of(f, n);
    std::vector<float> out = output_of(count_of(n.result.shape), std::numeric_limits<float>::quiet_NaN());
    cpu::evaluate_reference(n, spans, {out.data(), n.result.shape});
    return out;
}

std::vector<float> run_fast(const fixture& f, const anvil::node& n, anvil::thread_pool& pool) {
    const auto spans = spans_of(f, n);
    std::vector<dims> shapes;
    for (const auto& s : spans)
        shapes.push_back(s.shape);
    std::vector<float> workspace(workspace_per_thread(n, shapes) * pool.size());
    // A sentinel that no kernel writes: an element left unwritten fails the comparison.
    std::vector<float> out = output_of(count_of(n.result.shape), -1234.5f);
    fast_kernel(n.kind)(n, spans, {out.data(), n.result.shape}, pool, workspace);
    return out;
}

// Every fast path (1 and 2 threads; portable and AVX2 code) against the reference for node `result`.
void expect_parity(const fixture& f, const anvil::value& result, tolerance tol) {
    const anvil::node& n = f.g[result.id()];
    const std::vector<float> want = run_reference(f, n);
    for (const std::size_t threads : {1, 2}) {
        anvil::thread_pool pool(threads);
        for (const bool portable : {true, false}) {
            cpu::force_portable_kernels = portable;
            const std::vector<float> got = run_fast(f, n, pool);
            cpu::force_portable_kernels = false;
            const comparison c = compare(got, want, tol);
            const std::string path = portable ? "portable" : "fastest";
            INFO(anvil::op_name(n.kind), " on ", n.result.shape, ", ", threads, " threads, ", path,
                 " path: element ", c.at, " is ", c.got, ", expected ", c.want);
            CHECK(c.worst <= 0.0);
        }
    }
}

// Inputs with the awkward values mixed in: zeros of both signs, infinities, NaN, huge and tiny magnitudes.
std::vector<float> with_specials(std::vector<float> values) {
    const float specials[] = {0.0f,
                              -0.0f,
                              std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::quiet_NaN(),
                              100.0f,
                              -100.0f,
                              1e-40f,
                              -3e-39f,
                              88.7f,
                              -87.5f,
                              20.0f,
                              -20.0f};
    for (std::size_t i = 0; i < values.size() && i < std::size(specials); ++i)
        values[i * 3 % values.size()] = specials[i];
    return values;
}

const std::vector<dims>& elementwise_shapes() {
    static const std::vector<dims> shapes{dims{},        dims{0},        dims{1},    dims{7},     dims{3, 5},
                                          dims{2, 0, 3}, dims{2, 3, 37}, dims{1031}, dims{5, 300}};
    return shapes;
}

TEST_CASE("cpu kernels: unary ops match the reference on every shape, with special values") {
    const op ops[] = {op::relu,  op::gelu, op::gelu_tanh, op::quick_gelu, op::silu, op::sigmoid, op::tanh,
                      op::exp,   op::log,  op::sqrt,      op::rsqrt,      op::abs,  op::neg,     op::erf,
                      op::floor, op::ceil, op::round,     op::sign,       op::sin,  op::cos,     op::clamp};
    for (const op kind : ops) {
        const bool is_exact = kind == op::relu || kind == op::sqrt || kind == op::rsqrt || kind == op::abs ||
                              kind == op::neg || kind == op::clamp || kind == op::floor || kind == op::ceil ||
                              kind == op::round || kind == op::sign || kind == op::sin || kind == op::cos;
        for (const dims& shape : elementwise_shapes()) {
            fixture f;
            const auto x = f.add(shape, with_specials(uniform(count_of(shape), -6.0f, 6.0f)));
            anvil::attributes attrs;
            attrs.min = -0.5f;
            attrs.max = shape.rank() == 1 ? -1.0f : 2.0f;  // min > max too: torch gives max
            expect_parity(f, f.g.apply(kind, {x}, attrs), is_exact ? exact : transcendental);
        }
    }
}

TEST_CASE("cpu kernels: cast rounds like the reference for every target type") {
    for (const dtype to :
         {dtype::f32, dtype::f16, dtype::bf16, dtype::i32, dtype::i8, dtype::u8, dtype::boolean}) {
        fixture f;
        const auto x = f.add(dims{5, 41}, with_specials(uniform(205, -300.0f, 300.0f)));
        anvil::attributes attrs;
        attrs.to = to;
        expect_parity(f, f.g.apply(op::cast, {x}, attrs), exact);
    }
}

// Pairs of shapes that broadcast: same shapes, scalars, a bias along the leading axes, size-1 axes inside,
// both operands broadcast, empty.
const std::vector<std::pair<dims, dims>>& broadcast_pairs() {
    static const std::vector<std::pair<dims, dims>> pairs{
        {dims{7, 33}, dims{7, 33}}, {dims{}, dims{4, 5}},
        {dims{300, 9}, dims{}},     {dims{37, 300}, dims{300}},
        {dims{3, 1}, dims{3, 301}}, {dims{2, 1, 4}, dims{3, 1}},
        {dims{1, 5}, dims{6, 1}},   {dims{2, 1, 3, 1}, dims{1, 4, 1, 70}},
        {dims{1}, dims{0}},         {dims{0, 3}, dims{3}},
        {dims{1, 1}, dims{1}},      {dims{2, 3, 1}, dims{2, 3, 1}}};
    return pairs;
}

TEST_CASE("cpu kernels: binary ops broadcast like the reference") {
    const op ops[] = {op::add,     op::sub,   op::mul,  op::div,        op::pow,     op::maximum,
                      op::minimum, op::equal, op::less, op::less_equal, op::greater, op::greater_equal};
    for (const op kind : ops) {
        for (const auto& [a_shape, b_shape] : broadcast_pairs()) {
            fixture f;
            const bool power = kind == op::pow;
            const auto a =
                f.add(a_shape, with_specials(uniform(count_of(a_shape), power ? 0.0f : -5.0f, 5.0f)));
            auto b_values = uniform(count_of(b_shape), -3.0f, 3.0f);
            if (!power) b_values = with_specials(b_values);
            const auto b = f.add(b_shape, b_values);
            expect_parity(f, f.g.apply(kind, {a, b}), exact);
            expect_parity(f, f.g.apply(kind, {b, a}), exact);
        }
    }
}

TEST_CASE("cpu kernels: logical ops on bool operands broadcast like the reference") {
    for (const auto& [a_shape, b_shape] : broadcast_pairs()) {
        fixture f;
        const auto bits = [](std::size_t count, std::uint32_t salt) {
            std::vector<float> values(count);
            for (std::size_t i = 0; i < count; ++i)
                values[i] = (i * 7 + salt) % 3 == 0 ? 0.0f : 1.0f;
            return values;
        };
        const auto a = f.add(a_shape, bits(count_of(a_shape), 1), dtype::boolean);
        const auto b = f.add(b_shape, bits(count_of(b_shape), 2), dtype::boolean);
        for (const op kind : {op::logical_and, op::logical_or, op::logical_xor}) {
            expect_parity(f, f.g.apply(kind, {a, b}), exact);
            expect_parity(f, f.g.apply(kind, {b, a}), exact);
        }
        expect_parity(f, f.g.apply(op::logical_not, {a}), exact);
    }
}

TEST_CASE("cpu kernels: where broadcasts its three operands like the reference") {
    const dims shapes[][3] = {{dims{4, 9}, dims{4, 9}, dims{4, 9}},
                              {dims{9}, dims{4, 9}, dims{}},
                              {dims{4, 1}, dims{1, 9}, dims{4, 9}},
                              {dims{2, 1, 300}, dims{3, 1}, dims{1}},
                              {dims{0}, dims{1}, dims{1}}};
    for (const auto& shape : shapes) {
        fixture f;
        std::vector<float> condition(count_of(shape[0]));
        for (std::size_t i = 0; i < condition.size(); ++i) {
            condition[i] = i % 3 == 0 ? 0.0f : i % 7 == 0 ? std::numeric_limits<float>::quiet_NaN() : -0.5f;
        }
        const auto c = f.add(shape[0], condition);
        const auto a = f.add_uniform(shape[1]);
        const auto b = f.add_uniform(shape[2]);
        expect_parity(f, f.g.apply(op::where, {c, a, b}), exact);
    }
}

TEST_CASE("cpu kernels: the vector math is within 2 ulp of double-precision libm") {
    // A sweep over every exponent with a few mantissas each, through the fused kernel of single steps.
    std::vector<float> inputs;
    for (std::uint32_t bits = 0; bits < 0xff800000u; bits += 0x7ffffu) {
        inputs.push_back(std::bit_cast<float>(bits));
        inputs.push_back(-std::bit_cast<float>(bits));
    }
    const auto ulp_error = [](float got, double want) {
        if (std::isnan(want)) return std::isnan(got) ? 0.0 : 1e30;
        const auto rounded = static_cast<float>(want);
        if (std::isinf(rounded)) return got == rounded ? 0.0 : 1e30;
        const double ulp =
            std::max(std::fabs(static_cast<double>(std::nextafter(rounded, INFINITY)) - rounded),
                     static_cast<double>(std::numeric_limits<float>::min()));
        return std::fabs(got - want) / ulp;
    };
    const std::pair<op, double (*)(double)> functions[] = {
        {op::exp, [](double x) { return std::exp(x); }},
        {op::log, [](double x) { return std::log(x); }},
        {op::tanh, [](double x) { return std::tanh(x); }},
        {op::sigmoid, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }},
        {op::erf, [](double x) { return std::erf(x); }},
    };
    anvil::thread_pool pool(1);
    for (const bool portable : {true, false}) {
        cpu::force_portable_kernels = portable;
        for (const auto& function : functions) {
            const op kind = function.first;
            std::vector<float> out(inputs.size());
            const anvil::fused_step step{kind, {0, 0, 0}, 0.0f, 0.0f};
            const cpu::const_tensor_span in{inputs.data(), dims{inputs.size()}};
            cpu::elementwise::evaluate_chain(std::span(&step, 1), std::span(&in, 1),
                                             {out.data(), dims{out.size()}}, pool, {});
            double worst = 0.0;
            float worst_at = 0.0f;
            for (std::size_t i = 0; i < inputs.size(); ++i) {
                const double error = ulp_error(out[i], function.second(inputs[i]));
                if (error > worst) worst = error, worst_at = inputs[i];
            }
            const std::string path = portable ? "portable" : "fastest";
            INFO(anvil::op_name(kind), " (", path, "): ", worst, " ulp at ", worst_at);
            CHECK(worst <= 2.0);
        }
        cpu::force_portable_kernels = false;
    }
}

// The ops a fused chain may hold, and whether they are computed exactly as the reference does. floor, ceil,
// round, sign, sin and cos are left out: after a transcendental step a 1-ulp difference can cross an integer
// (or zero) and step the result by 1, or, on a large value, move sin and cos past the chains' tolerance; the
// unary test checks them on their own.
struct chain_op {
    op kind;
    bool exact;
};
constexpr chain_op chain_ops[] = {
    {op::relu, true},    {op::gelu, false},    {op::gelu_tanh, false}, {op::quick_gelu, false},
    {op::silu, false},   {op::sigmoid, false}, {op::tanh, false},      {op::exp, false},
    {op::log, false},    {op::sqrt, true},     {op::rsqrt, true},      {op::abs, true},
    {op::neg, true},     {op::erf, false},     {op::clamp, true},      {op::add, true},
    {op::sub, true},     {op::mul, true},      {op::div, true},        {op::pow, true},
    {op::maximum, true}, {op::minimum, true},  {op::where, true}};

// A shape that broadcasts to `full`: some leading axes dropped, some axes set to 1.
dims broadcastable(const dims& full, std::mt19937& engine) {
    std::vector<std::int64_t> extents(full.begin(), full.end());
    const std::size_t drop = engine() % (extents.size() + 1);
    extents.erase(extents.begin(), extents.begin() + static_cast<std::ptrdiff_t>(drop));
    for (auto& e : extents) {
        if (engine() % 3 == 0) e = 1;
    }
    return dims(extents);
}

// Evaluates the chain as separate nodes, one reference kernel per step, and the fused node with the fast
// kernel; the two must agree (bit for bit when every step is exact).
void expect_chain_matches_steps(fixture& f, const std::vector<anvil::value>& inputs,
                                const std::vector<anvil::fused_step>& steps) {
    anvil::attributes attrs;
    attrs.steps = steps;
    const anvil::value fused = f.g.apply(op::fused_elementwise, std::span<const anvil::value>(inputs), attrs);
    std::vector<anvil::value> values = inputs;
    std::vector<std::vector<float>> results;
    bool exact_chain = true;
    for (const auto& step : steps) {
        const int arity = anvil::info(step.kind).category == anvil::op_category::unary    ? 1
                          : anvil::info(step.kind).category == anvil::op_category::binary ? 2
                                                                                          : 3;
        std::vector<anvil::value> operands;
        for (int k = 0; k < arity; ++k)
            operands.push_back(values[step.operands[static_cast<std::size_t>(k)]]);
        anvil::attributes step_attrs;
        step_attrs.min = step.alpha;
        step_attrs.max = step.beta;
        const anvil::value v = f.g.apply(step.kind, std::span<const anvil::value>(operands), step_attrs);
        const anvil::node& n = f.g[v.id()];
        std::vector<cpu::const_tensor_span> spans;
        for (const auto& operand : operands) {
            const auto at = std::find_if(values.begin(), values.end(),
                                         [&](const anvil::value& x) { return x.id() == operand.id(); });
            const auto index = static_cast<std::size_t>(at - values.begin());
            const auto& data = index < inputs.size() ? f.data[index] : results[index - inputs.size()];
            spans.push_back({data.data(), operand.shape()});
        }
        results.emplace_back(count_of(n.result.shape));
        cpu::evaluate_reference(n, spans, {results.back().data(), n.result.shape});
        values.push_back(v);
        for (const auto& c : chain_ops) {
            if (c.kind == step.kind) exact_chain = exact_chain && c.exact;
        }
    }
    // The last step's result broadcast to the fused node's shape (a chain may end on a narrower value).
    const anvil::node& fused_node = f.g[fused.id()];
    std::vector<float> want(count_of(fused_node.result.shape));
    const cpu::const_tensor_span last{results.back().data(), values.back().shape()};
    cpu::reference::for_each_broadcast<1>({last}, fused_node.result.shape,
                                          [&](std::int64_t o, const std::array<std::int64_t, 1>& at) {
                                              want[static_cast<std::size_t>(o)] = last.data[at[0]];
                                          });
    for (const std::size_t threads : {1, 2}) {
        anvil::thread_pool pool(threads);
        for (const bool portable : {true, false}) {
            cpu::force_portable_kernels = portable;
            const std::vector<float> got = run_fast(f, fused_node, pool);
            cpu::force_portable_kernels = false;
            const comparison c = compare(got, want, exact_chain ? exact : tolerance{1e-5, 1e-5});
            INFO("chain of ", steps.size(), " steps on ", fused_node.result.shape, ", ", threads,
                 " threads: element ", c.at, " is ", c.got, ", expected ", c.want);
            CHECK(c.worst <= 0.0);
        }
    }
    expect_parity(f, fused, exact_chain ? exact : tolerance{1e-5, 1e-5});
}

TEST_CASE("cpu kernels: random fused chains match step-by-step evaluation") {
    auto& engine = random_engine();
    const dims outputs[] = {dims{3, 1, 5, 37}, dims{700},     dims{2, 300},
                            dims{1},           dims{4, 0, 3}, dims{9, 1, 65}};
    for (int trial = 0; trial < 60; ++trial) {
        const dims& full = outputs[static_cast<std::size_t>(trial) % std::size(outputs)];
        fixture f;
        std::vector<anvil::value> inputs;
        const std::size_t input_count = 1 + engine() % 4;
        inputs.push_back(f.add_uniform(full, -2.0f, 2.0f));  // one input gives the output its shape
        while (inputs.size() < input_count)
            inputs.push_back(f.add_uniform(broadcastable(full, engine), -2.0f, 2.0f));
        std::vector<anvil::fused_step> steps;
        const std::size_t step_count = 1 + engine() % 7;
        for (std::size_t s = 0; s < step_count; ++s) {
            const chain_op& c = chain_ops[engine() % std::size(chain_ops)];
            anvil::fused_step step;
            step.kind = c.kind;
            for (auto& operand : step.operands) {
                operand = static_cast<std::uint16_t>(engine() % (input_count + s));
            }
            if (s + 1 == step_count)
                step.operands[0] =
                    static_cast<std::uint16_t>(input_count + s - 1 < input_count ? 0 : input_count + s - 1);
            step.alpha = -0.25f;
            step.beta = 0.75f;
            steps.push_back(step);
        }
        expect_chain_matches_steps(f, inputs, steps);
    }
}

TEST_CASE("cpu kernels: fused chains with clamp, where, reused and dead values, broadcast inputs") {
    using step = anvil::fused_step;
    fixture f;
    const auto x = f.add_uniform(dims{5, 301});
    const auto bias = f.add_uniform(dims{301});
    const auto column = f.add_uniform(dims{5, 1});
    const auto scalar = f.add(dims{}, {0.5f});
    // t = x + bias; u = clamp(t); v = where(column, u, t * scalar); dead = exp(x); out = max(v, u) - x
    const std::vector<step> steps{{op::add, {0, 1, 0}, 0.0f, 0.0f}, {op::clamp, {4, 0, 0}, -1.0f, 1.5f},
                                  {op::mul, {4, 3, 0}, 0.0f, 0.0f}, {op::where, {2, 5, 6}, 0.0f, 0.0f},
                                  {op::exp, {0, 0, 0}, 0.0f, 0.0f}, {op::maximum, {7, 5, 0}, 0.0f, 0.0f},
                                  {op::sub, {9, 0, 0}, 0.0f, 0.0f}};
    expect_chain_matches_steps(f, {x, bias, column, scalar}, steps);
}

TEST_CASE("cpu kernels: a fused chain with more live tiles than the stack holds uses the workspace") {
    fixture f;
    std::vector<anvil::value> inputs;
    for (int i = 0; i < 12; ++i)
        inputs.push_back(f.add_uniform(i == 0 ? dims{3, 400} : dims{400}));
    std::vector<anvil::fused_step> steps;
    for (std::uint16_t i = 0; i < 12; ++i)
        steps.push_back({op::tanh, {i, 0, 0}, 0.0f, 0.0f});
    for (std::uint16_t i = 0; i < 11; ++i) {
        steps.push_back(
            {op::add,
             {static_cast<std::uint16_t>(i == 0 ? 12 : 23 + i), static_cast<std::uint16_t>(13 + i), 0},
             0.0f,
             0.0f});
    }
    anvil::attributes attrs;
    attrs.steps = steps;
    const auto fused = f.g.apply(op::fused_elementwise, std::span<const anvil::value>(inputs), attrs);
    const anvil::node n = f.g[fused.id()];  // a copy: the graph grows below
    std::vector<dims> shapes;
    for (const auto& input : inputs)
        shapes.push_back(input.shape());
    CHECK(cpu::fused_elementwise_workspace(n, shapes) > 8 * 256);
    expect_chain_matches_steps(f, inputs, steps);
    // Without the workspace the kernel says what it needs.
    const auto spans = spans_of(f, n);
    std::vector<float> out(count_of(n.result.shape));
    anvil::thread_pool pool(1);
    CHECK_THROWS_WITH_AS(cpu::fused_elementwise(n, spans, {out.data(), n.result.shape}, pool, {}),
                         doctest::Contains("fused_elementwise: the workspace holds 0 floats"), anvil::error);
}

TEST_CASE("cpu kernels: layer_norm and rms_norm match the reference, with and without weight and bias") {
    const dims shapes[] = {dims{1, 1}, dims{4, 7}, dims{2, 3, 64}, dims{3, 1000},
                           dims{0, 5}, dims{5, 0}, dims{9}};
    for (const dims& shape : shapes) {
        const std::int64_t features = shape[shape.rank() - 1];
        for (const int operands : {1, 2, 3}) {
            for (const op kind : {op::layer_norm, op::rms_norm}) {
                if (kind == op::rms_norm && operands == 3) continue;
                fixture f;
                // A mean far from zero against the spread: x - mean must not lose the spread.
                auto values = uniform(count_of(shape), 99.0f, 101.0f);
                if (operands == 2) values = uniform(count_of(shape), -4.0f, 4.0f);
                std::vector<anvil::value> inputs{f.add(shape, values)};
                if (operands >= 2) inputs.push_back(f.add_uniform(dims{features}, 0.5f, 2.0f));
                if (operands >= 3) inputs.push_back(f.add_uniform(dims{features}));
                anvil::attributes attrs;
                attrs.epsilon = 1e-5f;
                expect_parity(f, f.g.apply(kind, std::span<const anvil::value>(inputs), attrs),
                              normalisation);
            }
        }
    }
}

TEST_CASE("cpu kernels: group_norm and batch_norm match the reference") {
    const std::pair<dims, std::int64_t> group_cases[] = {{dims{2, 6, 5, 3}, 3},
                                                         {dims{1, 4}, 2},
                                                         {dims{3, 8, 17}, 8},
                                                         {dims{1, 32, 40}, 1},
                                                         {dims{0, 4, 3}, 2}};
    for (const auto& [shape, groups] : group_cases) {
        for (const int operands : {1, 3}) {
            fixture f;
            std::vector<anvil::value> inputs{f.add_uniform(shape, -2.0f, 5.0f)};
            if (operands == 3) {
                inputs.push_back(f.add_uniform(dims{shape[1]}, 0.5f, 2.0f));
                inputs.push_back(f.add_uniform(dims{shape[1]}));
            }
            anvil::attributes attrs;
            attrs.groups = groups;
            attrs.epsilon = 1e-5f;
            expect_parity(f, f.g.apply(op::group_norm, std::span<const anvil::value>(inputs), attrs),
                          normalisation);
        }
    }
    for (const dims& shape : {dims{2, 3, 4, 5}, dims{4, 3}, dims{1, 7, 33}, dims{0, 3, 2}}) {
        for (const int operands : {3, 4, 5}) {
            fixture f;
            std::vector<anvil::value> inputs{f.add_uniform(shape), f.add_uniform(dims{shape[1]}),
                                             f.add_uniform(dims{shape[1]}, 0.1f, 3.0f)};
            if (operands >= 4) inputs.push_back(f.add_uniform(dims{shape[1]}));
            if (operands >= 5) inputs.push_back(f.add_uniform(dims{shape[1]}));
            anvil::attributes attrs;
            attrs.epsilon = 1e-3f;
            expect_parity(f, f.g.apply(op::batch_norm, std::span<const anvil::value>(inputs), attrs),
                          normalisation);
        }
    }
}

TEST_CASE("cpu kernels: softmax over any axis with a broadcast mask matches the reference") {
    const float masked = -std::numeric_limits<float>::infinity();
    struct softmax_case {
        dims shape;
        std::int64_t axis;
        std::optional<dims> mask;
    };
    const softmax_case cases[] = {{dims{3, 7}, -1, std::nullopt},
                                  {dims{2, 3, 5, 5}, 3, dims{5}},
                                  {dims{2, 3, 5, 1037}, -1, dims{2, 1, 1, 1037}},
                                  {dims{2, 3, 4, 4}, 3, dims{2, 3, 4, 4}},
                                  {dims{2, 3, 4, 4}, 3, dims{2, 1, 4, 1}},
                                  {dims{4, 9, 3}, 1, std::nullopt},
                                  {dims{4, 9, 11}, 1, dims{9, 1}},
                                  {dims{5, 2, 19}, 0, dims{5, 1, 19}},
                                  {dims{1}, 0, std::nullopt},
                                  {dims{0, 4}, 1, std::nullopt},
                                  {dims{3, 0, 2}, 1, std::nullopt}};
    for (const auto& c : cases) {
        fixture f;
        std::vector<anvil::value> inputs{f.add_uniform(c.shape, -5.0f, 5.0f)};
        if (c.mask) {
            // Some positions masked, and (where the mask spans the axis) one line masked entirely.
            auto values = uniform(count_of(*c.mask), -2.0f, 0.0f);
            for (std::size_t i = 0; i < values.size(); i += 3)
                values[i] = masked;
            for (std::size_t i = 0; i < values.size() && i < 5; ++i)
                values[i] = masked;
            inputs.push_back(f.add(*c.mask, values));
        }
        anvil::attributes attrs;
        attrs.axis = c.axis;
        expect_parity(f, f.g.apply(op::softmax, std::span<const anvil::value>(inputs), attrs), normalisation);
    }
}

struct attention_case {
    std::int64_t batch, heads, kv_heads, queries, keys, depth, value_depth;
    bool causal;
    float scale;
    int mask;  // 0: none, 1: [Sk], 2: [B, 1, Sq, Sk], 3: [B, H, Sq, Sk], 4: [B, 1, 1, Sk]
};

TEST_CASE("cpu kernels: attention matches the reference (GQA, causal, masks, decode, odd sizes)") {
    const attention_case cases[] = {
        {1, 2, 2, 5, 7, 8, 8, false, 0.0f, 0},     {2, 4, 2, 3, 3, 16, 12, true, 0.0f, 0},
        {1, 3, 1, 1, 37, 64, 64, false, 0.0f, 1},  {1, 2, 2, 70, 70, 33, 17, true, 0.0f, 0},
        {1, 2, 1, 67, 130, 20, 9, false, 0.3f, 3}, {2, 2, 2, 9, 5, 4, 4, true, 0.0f, 2},
        {1, 8, 2, 2, 200, 16, 16, true, 0.0f, 4},  {1, 1, 1, 6, 0, 8, 8, false, 0.0f, 0},
        {1, 1, 1, 0, 5, 8, 8, true, 0.0f, 0},      {1, 2, 2, 4, 4, 0, 3, false, 0.0f, 0},
        {1, 2, 1, 130, 65, 7, 70, true, 0.0f, 2},  {1, 4, 4, 1, 1, 5, 5, true, 0.0f, 0}};
    for (const auto& c : cases) {
        fixture f;
        std::vector<anvil::value> inputs{f.add_uniform(dims{c.batch, c.heads, c.queries, c.depth}),
                                         f.add_uniform(dims{c.batch, c.kv_heads, c.keys, c.depth}),
                                         f.add_uniform(dims{c.batch, c.kv_heads, c.keys, c.value_depth})};
        const dims mask_shapes[] = {dims{}, dims{c.keys}, dims{c.batch, 1, c.queries, c.keys},
                                    dims{c.batch, c.heads, c.queries, c.keys}, dims{c.batch, 1, 1, c.keys}};
        if (c.mask != 0) {
            const dims& shape = mask_shapes[c.mask];
            auto values = uniform(count_of(shape), -1.0f, 1.0f);
            for (std::size_t i = 0; i < values.size(); i += 4)
                values[i] = -std::numeric_limits<float>::infinity();
            // A query row that sees no key at all gives zeros.
            if (c.mask >= 2) {
                for (std::int64_t j = 0; j < c.keys; ++j)
                    values[static_cast<std::size_t>(j)] = -std::numeric_limits<float>::infinity();
            }
            inputs.push_back(f.add(shape, values));
        }
        anvil::attributes attrs;
        attrs.causal = c.causal;
        attrs.scale = c.scale;
        expect_parity(f, f.g.apply(op::attention, std::span<const anvil::value>(inputs), attrs),
                      attention_tolerance);
    }
}

TEST_CASE("cpu kernels: attention asks for its workspace") {
    fixture f;
    const auto q = f.add_uniform(dims{1, 2, 3, 8});
    const auto k = f.add_uniform(dims{1, 2, 3, 8});
    const auto result = f.g.apply(op::attention, {q, k, k});
    const anvil::node& n = f.g[result.id()];
    const auto spans = spans_of(f, n);
    std::vector<float> out(count_of(n.result.shape));
    anvil::thread_pool pool(2);
    CHECK_THROWS_WITH_AS(cpu::attention(n, spans, {out.data(), n.result.shape}, pool, {}),
                         doctest::Contains("attention: the workspace holds 0 floats"), anvil::error);
}

TEST_CASE("cpu kernels: rotary matches the reference in both layouts, partial and full") {
    const std::pair<dims, std::int64_t> cases[] = {{dims{2, 3, 5, 16}, 8}, {dims{1, 7, 64}, 32},
                                                   {dims{4, 10}, 3},       {dims{2, 1, 6, 38}, 13},
                                                   {dims{0, 4, 8}, 4},     {dims{3, 9}, 0}};
    for (const auto& [shape, half] : cases) {
        for (const bool interleaved : {false, true}) {
            fixture f;
            const std::int64_t positions = shape[shape.rank() - 2];
            const auto x = f.add_uniform(shape);
            const auto cos = f.add_uniform(dims{positions, half}, -1.0f, 1.0f);
            const auto sin = f.add_uniform(dims{positions, half}, -1.0f, 1.0f);
            anvil::attributes attrs;
            attrs.interleaved = interleaved;
            // x1 c - x2 s with or without a fused multiply-add: a few ulp of the products (measured 9.5e-7).
            expect_parity(f, f.g.apply(op::rotary, {x, cos, sin}, attrs), tolerance{4e-6, 1e-6});
        }
    }
}

TEST_CASE("cpu kernels: permute matches the reference for every order of rank 3 and 4") {
    for (const dims& shape :
         {dims{3, 5, 7}, dims{2, 1, 40, 33}, dims{3, 4, 5, 6}, dims{1, 67, 1, 45}, dims{2, 0, 3}}) {
        std::vector<std::int64_t> order(shape.rank());
        for (std::size_t i = 0; i < order.size(); ++i)
            order[i] = static_cast<std::int64_t>(i);
        do {
            fixture f;
            const auto x = f.add_uniform(shape);
            anvil::attributes attrs;
            attrs.axes = order;
            expect_parity(f, f.g.apply(op::permute, {x}, attrs), exact);
        } while (std::next_permutation(order.begin(), order.end()));
    }
    fixture f;  // a large transpose: several 32 x 32 tiles, ragged edges
    const auto x = f.add_uniform(dims{131, 77});
    anvil::attributes attrs;
    attrs.axes = {1, 0};
    expect_parity(f, f.g.apply(op::permute, {x}, attrs), exact);
}

TEST_CASE("cpu kernels: concat, slice and pad match the reference") {
    for (const std::int64_t axis : {0, 1, 2, -1}) {
        fixture f;
        std::vector<anvil::value> inputs;
        for (const std::int64_t extent : {3, 0, 1, 5}) {
            std::vector<std::int64_t> shape{2, 4, 3};
            shape[static_cast<std::size_t>(axis < 0 ? 2 : axis)] = extent;
            inputs.push_back(f.add_uniform(dims(shape)));
        }
        anvil::attributes attrs;
        attrs.axis = axis;
        expect_parity(f, f.g.apply(op::concat, std::span<const anvil::value>(inputs), attrs), exact);
    }
    struct slice_case {
        dims shape;
        std::vector<std::int64_t> begin, end, step;
    };
    const slice_case slices[] = {{dims{5, 7, 9}, {1, 0, 2}, {4, 7, 9}, {1, 1, 1}},
                                 {dims{5, 7, 9}, {0, -3, 1}, {5, 100, -1}, {2, 1, 3}},
                                 {dims{10, 301}, {2, 0}, {9, 301}, {3, 1}},
                                 {dims{4, 6}, {3, 2}, {1, 2}, {1, 1}},
                                 {dims{1, 1, 8}, {0, 0, 7}, {1, 1, 8}, {1, 1, 1}}};
    for (const auto& c : slices) {
        fixture f;
        const auto x = f.add_uniform(c.shape);
        anvil::attributes attrs;
        attrs.begin = c.begin;
        attrs.end = c.end;
        attrs.step = c.step;
        expect_parity(f, f.g.apply(op::slice, {x}, attrs), exact);
    }
    struct pad_case {
        dims shape;
        std::vector<std::int64_t> before, after;
    };
    const pad_case pads[] = {{dims{3, 4}, {1, 2}, {0, 3}},
                             {dims{2, 3, 4, 5}, {0, 1, 0, 0}, {0, 2, 0, 0}},
                             {dims{2, 3, 4}, {0, 0, 0}, {0, 0, 0}},
                             {dims{0, 3}, {1, 1}, {2, 0}},
                             {dims{5}, {3}, {4}},
                             {dims{2, 3, 4}, {1, 0, 0}, {0, 0, 1}}};
    for (const auto& c : pads) {
        fixture f;
        const auto x = f.add_uniform(c.shape);
        anvil::attributes attrs;
        attrs.begin = c.before;
        attrs.end = c.after;
        attrs.value = -7.5f;
        expect_parity(f, f.g.apply(op::pad, {x}, attrs), exact);
    }
}

TEST_CASE("cpu kernels: gather matches the reference and names an index out of range") {
    const std::tuple<dims, std::int64_t, dims> cases[] = {
        {dims{10, 6}, 0, dims{4}},    {dims{10, 6}, 0, dims{2, 3}}, {dims{3, 7, 5}, 1, dims{}},
        {dims{3, 7, 5}, -1, dims{6}}, {dims{5, 4}, 0, dims{0}},     {dims{300, 129}, 0, dims{40}}};
    for (const auto& [table_shape, axis, index_shape] : cases) {
        fixture f;
        const auto table = f.add_uniform(table_shape);
        const std::int64_t extent = table_shape[static_cast<std::size_t>(
            axis < 0 ? axis + static_cast<std::int64_t>(table_shape.rank()) : axis)];
        std::vector<float> indices(count_of(index_shape));
        for (std::size_t i = 0; i < indices.size(); ++i)
            indices[i] = static_cast<float>((i * 7 + 3) % static_cast<std::size_t>(extent));
        const auto index = f.add(index_shape, indices, dtype::i64);
        anvil::attributes attrs;
        attrs.axis = axis;
        expect_parity(f, f.g.apply(op::gather, {table, index}, attrs), exact);
    }
    fixture f;
    const auto table = f.add_uniform(dims{5, 4});
    const auto index = f.add(dims{3}, {1.0f, 5.0f, 0.0f}, dtype::i64);
    const auto result = f.g.apply(op::gather, {table, index});
    const anvil::node& n = f.g[result.id()];
    const auto spans = spans_of(f, n);
    std::vector<float> out(count_of(n.result.shape));
    anvil::thread_pool pool(2);
    CHECK_THROWS_WITH_AS(
        cpu::gather(n, spans, {out.data(), n.result.shape}, pool, {}),
        doctest::Contains("gather: index 5 (element 1 of the indices [3]) is out of range for axis 0"),
        anvil::error);
}

TEST_CASE("cpu kernels: scatter_add matches the reference bit for bit and names an index out of range") {
    // Indices repeat (rows that meet are summed in index order), the table has rows no index names (zeros),
    // and the last cases are split across threads by columns (600 = three column blocks) and outer slices.
    const std::tuple<dims, std::int64_t, dims> cases[] = {
        {dims{10, 6}, 0, dims{4}},       {dims{10, 6}, 0, dims{2, 3}},  {dims{3, 7, 5}, 1, dims{}},
        {dims{3, 7, 5}, -1, dims{6}},    {dims{5, 4}, 0, dims{0}},      {dims{30, 600}, 0, dims{8, 64}},
        {dims{4, 50, 300}, 1, dims{90}}, {dims{1000, 1}, 0, dims{2000}}};
    for (const auto& [table_shape, axis, index_shape] : cases) {
        fixture f;
        const auto rank = static_cast<std::int64_t>(table_shape.rank());
        const auto axis_index = static_cast<std::size_t>(axis < 0 ? axis + rank : axis);
        const std::int64_t extent = table_shape[axis_index];
        std::vector<float> indices(count_of(index_shape));
        for (std::size_t i = 0; i < indices.size(); ++i)
            indices[i] = static_cast<float>((i * 7 + 3) %
                                            static_cast<std::size_t>(std::max<std::int64_t>(1, extent / 2)));
        std::vector<std::int64_t> update_extents(table_shape.begin(), table_shape.begin() + axis_index);
        update_extents.insert(update_extents.end(), index_shape.begin(), index_shape.end());
        update_extents.insert(update_extents.end(), table_shape.begin() + axis_index + 1, table_shape.end());
        const auto updates = f.add_uniform(dims(update_extents));
        const auto index = f.add(index_shape, indices, dtype::i64);
        anvil::attributes attrs;
        attrs.axis = axis;
        attrs.sizes.assign(table_shape.begin(), table_shape.end());
        expect_parity(f, f.g.apply(op::scatter_add, {updates, index}, attrs), exact);
    }
    fixture f;
    const auto updates = f.add_uniform(dims{3, 4});
    const auto index = f.add(dims{3}, {1.0f, 5.0f, 0.0f}, dtype::i64);
    anvil::attributes attrs;
    attrs.sizes = {5, 4};
    const auto result = f.g.apply(op::scatter_add, {updates, index}, attrs);
    const anvil::node& n = f.g[result.id()];
    const auto spans = spans_of(f, n);
    std::vector<float> out(count_of(n.result.shape), 1.0f);
    anvil::thread_pool pool(2);
    CHECK_THROWS_WITH_AS(
        cpu::scatter_add(n, spans, {out.data(), n.result.shape}, pool, {}),
        doctest::Contains("scatter_add: index 5 (element 1 of the indices [3]) is out of range for axis 0 of "
                          "the table [5, 4]"),
        anvil::error);
    // Updates not laid out as gathering the indices from the table would give: refused when the graph is
    // built.
    CHECK_THROWS_WITH_AS(
        (void)f.g.apply(op::scatter_add, {f.add_uniform(dims{2, 4}), index}, attrs),
        doctest::Contains("the updates [2, 4] must be laid out as gathering [3] from the table "
                          "[5, 4] along axis 0 would give"),
        anvil::shape_error);
}

TEST_CASE("cpu kernels: shapes large enough to be split across threads match the reference") {
    // Each is several of the kernels' hand-outs (32K elements for elementwise ops and norms, 64K for copies).
    {
        fixture f;
        expect_parity(f, f.g.apply(op::gelu, {f.add_uniform(dims{300, 257})}), transcendental);
    }
    {
        fixture f;
        expect_parity(f, f.g.apply(op::add, {f.add_uniform(dims{70, 1001}), f.add_uniform(dims{1001})}),
                      exact);
    }
    {
        fixture f;
        anvil::attributes attrs;
        attrs.epsilon = 1e-5f;
        expect_parity(
            f, f.g.apply(op::layer_norm, {f.add_uniform(dims{100, 700}), f.add_uniform(dims{700})}, attrs),
            normalisation);
        attrs.axis = 0;
        expect_parity(f, f.g.apply(op::softmax, {f.add_uniform(dims{40, 2001})}, attrs), normalisation);
    }
    {
        fixture f;
        anvil::attributes attrs;
        attrs.axes = {1, 0};
        expect_parity(f, f.g.apply(op::permute, {f.add_uniform(dims{300, 301})}, attrs), exact);
        attrs.axis = 1;
        expect_parity(
            f, f.g.apply(op::concat, {f.add_uniform(dims{200, 301}), f.add_uniform(dims{200, 400})}, attrs),
            exact);
    }
}

}  // namespace

}  // namespace test_cpu_kernels
