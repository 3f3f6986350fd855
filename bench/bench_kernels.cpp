// The CPU backend's fast kernels (backend/cpu/kernels/) against the reference kernels, measured in the same
// run on transformer shapes: BERT-base (seq 128, hidden 768, 12 heads of 64) and decode steps against a long
// KV cache. Prints the best time of each and the speed-up, on one thread and on all of them (or the count
// given as the first argument); exits non-zero if a fast result strays from the reference.
#include <anvil/backend/cpu/kernels/attention.hpp>
#include <anvil/backend/cpu/kernels/data_movement.hpp>
#include <anvil/backend/cpu/kernels/elementwise.hpp>
#include <anvil/backend/cpu/kernels/normalization.hpp>
#include <anvil/backend/cpu/reference/reference.hpp>
#include <anvil/core/thread_pool.hpp>
#include <anvil/graph/graph.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

using anvil::dims;
using anvil::op;
namespace cpu = anvil::detail::cpu;

using kernel_function = void (*)(const anvil::node&, std::span<const cpu::const_tensor_span>,
                                 cpu::tensor_span, anvil::thread_pool&, std::span<float>);

struct bench_case {
    std::string name;
    anvil::graph g;
    std::vector<anvil::value> leaves;
    std::vector<std::vector<float>> data;
    anvil::value result;
    kernel_function kernel = nullptr;
    double tolerance = 1e-5;  // absolute + relative

    anvil::value add(dims shape, float low = -2.0f, float high = 2.0f,
                     anvil::dtype type = anvil::dtype::f32) {
        static std::mt19937 engine(7);
        std::uniform_real_distribution<float> distribution(low, high);
        std::vector<float> values(static_cast<std::size_t>(shape.element_count()));
        for (auto& v : values)
            v = distribution(engine);
        leaves.push_back(g.input("x" + std::to_string(leaves.size()), type, shape));
        data.push_back(std::move(values));
        return leaves.back();
    }
};

// Best of several runs, each at least a few milliseconds long.
template <class Run>
double best_seconds(Run&& run) {
    run();  // warm caches and pools
    double best = std::numeric_limits<double>::infinity();
    for (int repeat = 0; repeat < 7; ++repeat) {
        int calls = 0;
        const auto start = std::chrono::steady_clock::now();
        std::chrono::duration<double> elapsed{};
        do {
            run();
            ++calls;
            elapsed = std::chrono::steady_clock::now() - start;
        } while (elapsed.count() < 0.005);
        best = std::min(best, elapsed.count() / calls);
    }
    return best;
}

bool measure(bench_case& c, std::size_t threads) {
    const anvil::node& n = c.g[c.result.id()];
    std::vector<cpu::const_tensor_span> spans;
    std::vector<dims> shapes;
    for (std::size_t i = 0; i < c.leaves.size(); ++i) {
        spans.push_back({c.data[i].data(), c.leaves[i].shape()});
        shapes.push_back(c.leaves[i].shape());
    }
    const auto count = static_cast<std::size_t>(n.result.shape.element_count());
    std::vector<float> want(count), got(count);
    std::size_t per_thread = 0;
    if (n.kind == op::attention) per_thread = cpu::attention_workspace(n, shapes);
    if (n.kind == op::fused_elementwise) per_thread = cpu::fused_elementwise_workspace(n, shapes);
    std::vector<float> workspace(per_thread * std::max<std::size_t>(threads, 1));

    const double reference = best_seconds([&] {
        cpu::evaluate_reference(n, spans, {want.data(), n.result.shape});
    });
    anvil::thread_pool one(1), all(threads);
    const double fast_one = best_seconds([&] {
        c.kernel(n, spans, {got.data(), n.result.shape}, one, workspace);
    });
    const double fast_all = best_seconds([&] {
        c.kernel(n, spans, {got.data(), n.result.shape}, all, workspace);
    });

    double worst = 0.0;
    for (std::size_t i = 0; i < count; ++i) {
        const double error = std::fabs(static_cast<double>(got[i]) - want[i]) / (1.0 + std::fabs(want[i]));
        if (!(error <= worst)) worst = error;  // NaN counts
    }
    const bool same = worst <= c.tolerance;
    std::printf("%-44s ref %9.3f ms   fast %8.3f ms (%5.1fx)   %zu threads %8.3f ms (%5.1fx)%s\n",
                c.name.c_str(), reference * 1e3, fast_one * 1e3, reference / fast_one, threads,
                fast_all * 1e3, reference / fast_all, same ? "" : "   MISMATCH");
    return same;
}

}  // namespace

int main(int argc, char** argv) {
    const std::size_t threads =
        argc > 1 ? std::strtoull(argv[1], nullptr, 10) : anvil::default_thread_count();
    std::printf("vector path: %s; 'ref' is the plain reference kernel, single-threaded\n",
                cpu::use_avx2_kernels() ? "AVX2+FMA" : "portable");
    std::vector<bench_case> cases;
    const auto add_case = [&](std::string name, kernel_function kernel, double tolerance, auto&& build) {
        bench_case& c = cases.emplace_back();
        c.name = std::move(name);
        c.kernel = kernel;
        c.tolerance = tolerance;
        build(c);
    };
    add_case("gelu [128, 3072]", cpu::elementwise_unary, 1e-6, [](bench_case& c) {
        c.result = c.g.apply(op::gelu, {c.add(dims{128, 3072})});
    });
    add_case("add bias [128, 768] + [768]", cpu::elementwise_binary, 0.0, [](bench_case& c) {
        c.result = c.g.apply(op::add, {c.add(dims{128, 768}), c.add(dims{768})});
    });
    add_case("fused gelu(x + bias) * y [128, 3072]", cpu::fused_elementwise, 1e-6, [](bench_case& c) {
        anvil::attributes attrs;
        attrs.steps = {{op::add, {0, 1, 0}, 0.0f, 0.0f},
                       {op::gelu, {3, 0, 0}, 0.0f, 0.0f},
                       {op::mul, {4, 2, 0}, 0.0f, 0.0f}};
        c.result = c.g.apply(op::fused_elementwise,
                             {c.add(dims{128, 3072}), c.add(dims{3072}), c.add(dims{128, 3072})}, attrs);
    });
    add_case("layer_norm [128, 768]", cpu::layer_norm, 1e-5, [](bench_case& c) {
        anvil::attributes attrs;
        attrs.epsilon = 1e-12f;
        c.result =
            c.g.apply(op::layer_norm, {c.add(dims{128, 768}), c.add(dims{768}), c.add(dims{768})}, attrs);
    });
    add_case("rms_norm [8, 4096]", cpu::rms_norm, 1e-5, [](bench_case& c) {
        anvil::attributes attrs;
        attrs.epsilon = 1e-6f;
        c.result = c.g.apply(op::rms_norm, {c.add(dims{8, 4096}), c.add(dims{4096})}, attrs);
    });
    add_case("softmax [12, 128, 128] + mask [1, 1, 128]", cpu::softmax, 1e-5, [](bench_case& c) {
        anvil::attributes attrs;
        attrs.axis = -1;
        c.result =
            c.g.apply(op::softmax, {c.add(dims{12, 128, 128}, -8.0f, 8.0f), c.add(dims{1, 1, 128})}, attrs);
    });
    add_case("attention BERT [1, 12, 128, 64] + mask", cpu::attention, 2e-5, [](bench_case& c) {
        c.result =
            c.g.apply(op::attention, {c.add(dims{1, 12, 128, 64}), c.add(dims{1, 12, 128, 64}),
                                      c.add(dims{1, 12, 128, 64}), c.add(dims{1, 1, 1, 128}, -1.0f, 0.0f)});
    });
    add_case("attention causal prefill [1, 12, 512, 64]", cpu::attention, 2e-5, [](bench_case& c) {
        anvil::attributes attrs;
        attrs.causal = true;
        c.result = c.g.apply(
            op::attention,
            {c.add(dims{1, 12, 512, 64}), c.add(dims{1, 12, 512, 64}), c.add(dims{1, 12, 512, 64})}, attrs);
    });
    add_case("attention decode Sq=1 Sk=4096 [1, 12, 1, 64]", cpu::attention, 2e-5, [](bench_case& c) {
        c.result = c.g.apply(op::attention, {c.add(dims{1, 12, 1, 64}), c.add(dims{1, 12, 4096, 64}),
                                             c.add(dims{1, 12, 4096, 64})});
    });
    add_case("attention decode Sq=8 Sk=4096 causal", cpu::attention, 2e-5, [](bench_case& c) {
        anvil::attributes attrs;
        attrs.causal = true;
        c.result = c.g.apply(
            op::attention,
            {c.add(dims{1, 12, 8, 64}), c.add(dims{1, 12, 4096, 64}), c.add(dims{1, 12, 4096, 64})}, attrs);
    });
    add_case("attention GQA decode H=32 Hkv=8 D=128 Sk=4096", cpu::attention, 2e-5, [](bench_case& c) {
        c.result = c.g.apply(op::attention, {c.add(dims{1, 32, 1, 128}), c.add(dims{1, 8, 4096, 128}),
                                             c.add(dims{1, 8, 4096, 128})});
    });
    add_case("rotary [1, 32, 128, 128]", cpu::rotary, 1e-6, [](bench_case& c) {
        c.result =
            c.g.apply(op::rotary, {c.add(dims{1, 32, 128, 128}), c.add(dims{128, 64}), c.add(dims{128, 64})});
    });
    add_case("permute heads [1, 128, 12, 64] -> [1, 12, 128, 64]", cpu::permute, 0.0, [](bench_case& c) {
        anvil::attributes attrs;
        attrs.axes = {0, 2, 1, 3};
        c.result = c.g.apply(op::permute, {c.add(dims{1, 128, 12, 64})}, attrs);
    });
    add_case("permute transpose [768, 3072]", cpu::permute, 0.0, [](bench_case& c) {
        anvil::attributes attrs;
        attrs.axes = {1, 0};
        c.result = c.g.apply(op::permute, {c.add(dims{768, 3072})}, attrs);
    });
    add_case("concat kv cache [1, 12, 4095 + 1, 64]", cpu::concat, 0.0, [](bench_case& c) {
        anvil::attributes attrs;
        attrs.axis = 2;
        c.result = c.g.apply(op::concat, {c.add(dims{1, 12, 4095, 64}), c.add(dims{1, 12, 1, 64})}, attrs);
    });
    add_case("gather embeddings [8192, 768] x 128", cpu::gather, 0.0, [](bench_case& c) {
        const auto table = c.add(dims{8192, 768});
        const auto indices = c.add(dims{128}, 0.0f, 0.0f, anvil::dtype::i64);
        for (std::size_t i = 0; i < 128; ++i)
            c.data.back()[i] = static_cast<float>(i * 61 % 8192);
        c.result = c.g.apply(op::gather, {table, indices});
    });

    bool all_same = true;
    for (auto& c : cases)
        all_same &= measure(c, threads);
    return all_same ? 0 : 1;
}
