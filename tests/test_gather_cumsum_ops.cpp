// The ops ONNX's GatherElements, CumSum, ReduceMin and ReduceProd map onto, and reduce_sum / reduce_mean's
// fast kernel: on the CPU backend (the fast kernels and the reference kernels) against values computed here
// by plain loops — negative and out-of-range indices, exclusive and reverse sums, several axes with and
// without keep_dims, NaN — and on the simulated Neural Engine, where reduce_min runs (within fp16's
// tolerance) and gather_elements, cumsum and reduce_prod run on the host with their reason; the Core ML
// export writes gather_along_axis and cumsum and refuses reduce_prod, naming it.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

#include "ane_simulator.hpp"
#include "model_test_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

// A namespace of its own, so the test files can be compiled together (a unity build).
namespace test_gather_cumsum_ops {

namespace {

using anvil::dims;
using anvil::dtype;
using anvil::host_tensor;
using anvil::op;

constexpr float nan = std::numeric_limits<float>::quiet_NaN();

constexpr anvil::cpu_kernels cpu_modes[] = {anvil::cpu_kernels::optimized, anvil::cpu_kernels::reference};

std::vector<float> run_on_cpu(const anvil::value& output, const std::vector<anvil::named_tensor>& inputs,
                              anvil::cpu_kernels kernels) {
    anvil::compile_options options;
    options.kernels = kernels;
    options.threads = 2;
    return anvil::compile({output}, options).run(inputs).at(0).to_f32();
}

std::vector<float> pattern(std::size_t count, int seed) {
    std::vector<float> values(count);
    for (std::size_t i = 0; i < count; ++i)
        values[i] = static_cast<float>((static_cast<int>(i) * 37 + seed * 11) % 23 - 11) * 0.125f;
    return values;
}

// Exact equality, NaN matching NaN; sums within a float's rounding of a double-precision loop.
void check_close(const std::vector<float>& got, const std::vector<double>& want, double tolerance) {
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
        INFO("element ", i, ": got ", got[i], ", want ", want[i]);
        if (std::isnan(want[i]))
            CHECK(std::isnan(got[i]));
        else
            CHECK(std::fabs(static_cast<double>(got[i]) - want[i]) <= tolerance * (1.0 + std::fabs(want[i])));
    }
}

anvil::attributes along(std::int64_t axis) {
    anvil::attributes a;
    a.axis = axis;
    return a;
}

}  // namespace

TEST_CASE("gather_elements: picks along an axis, negative indices from the end, smaller extents elsewhere") {
    // data [3, 4, 5]; indices [2, 3, 4] along axis 1 (extents 2 <= 3 and 4 <= 5 off the axis).
    const dims data_shape{3, 4, 5}, index_shape{2, 3, 4};
    const std::vector<float> data = pattern(60, 1);
    std::vector<std::int64_t> ids(24);
    for (std::size_t i = 0; i < ids.size(); ++i)
        ids[i] = static_cast<std::int64_t>(i * 5 % 8) - 4;  // [-4, 4)
    for (const std::int64_t axis : {1, -2}) {
        anvil::graph g;
        const auto x = g.input("x", dtype::f32, data_shape);
        const auto index = g.input("i", dtype::i64, index_shape);
        const auto out = g.apply(op::gather_elements, {x, index}, along(axis));
        CHECK(out.shape() == index_shape);
        std::vector<double> want;
        for (std::int64_t i = 0; i < 2; ++i)
            for (std::int64_t j = 0; j < 3; ++j)
                for (std::int64_t k = 0; k < 4; ++k) {
                    std::int64_t at = ids[static_cast<std::size_t>((i * 3 + j) * 4 + k)];
                    if (at < 0) at += 4;
                    want.push_back(data[static_cast<std::size_t>((i * 4 + at) * 5 + k)]);
                }
        for (const auto mode : cpu_modes) {
            CAPTURE(static_cast<int>(mode));
            check_close(run_on_cpu(out,
                                   {{"x", host_tensor::from(data, data_shape)},
                                    {"i", host_tensor::from(ids, index_shape)}},
                                   mode),
                        want, 0.0);
        }
    }
    // The last axis, i32 indices, a row wide enough to be split among threads.
    anvil::graph g;
    const dims big{64, 300};
    const std::vector<float> values = pattern(64 * 300, 2);
    std::vector<std::int32_t> picks(64 * 200);
    for (std::size_t i = 0; i < picks.size(); ++i)
        picks[i] = static_cast<std::int32_t>(i * 13 % 600) - 300;
    const auto out =
        g.apply(op::gather_elements, {g.input("x", dtype::f32, big), g.input("i", dtype::i32, dims{64, 200})},
                along(-1));
    std::vector<double> want;
    for (std::size_t r = 0; r < 64; ++r)
        for (std::size_t c = 0; c < 200; ++c) {
            std::int32_t at = picks[r * 200 + c];
            if (at < 0) at += 300;
            want.push_back(values[r * 300 + static_cast<std::size_t>(at)]);
        }
    for (const auto mode : cpu_modes)
        check_close(
            run_on_cpu(
                out, {{"x", host_tensor::from(values, big)}, {"i", host_tensor::from(picks, dims{64, 200})}},
                mode),
            want, 0.0);
}

TEST_CASE("gather_elements: an index out of range is an error naming it; shapes and types are checked") {
    anvil::graph g;
    const auto x = g.input("x", dtype::f32, dims{2, 3});
    const auto index = g.input("i", dtype::i64, dims{2, 2});
    const auto out = g.apply(op::gather_elements, {x, index}, along(1));
    for (const auto mode : cpu_modes) {
        for (const std::int64_t bad : {3, -4}) {
            const std::vector<std::int64_t> ids{0, 1, bad, 2};
            const std::string expected = "gather_elements: index " + std::to_string(bad) +
                                         " (element 2 of the indices [2, 2]) is out of range for axis 1 of "
                                         "the data [2, 3] (expected a whole number in [-3, 3))";
            CHECK_THROWS_WITH_AS((void)run_on_cpu(out,
                                                  {{"x", host_tensor::from(pattern(6, 0), dims{2, 3})},
                                                   {"i", host_tensor::from(ids, dims{2, 2})}},
                                                  mode),
                                 doctest::Contains(expected.c_str()), anvil::error);
        }
    }
    CHECK_THROWS_WITH_AS(
        (void)g.apply(op::gather_elements, {x, g.input("j", dtype::i64, dims{3, 1})}, along(1)),
        doctest::Contains("extents no larger off axis 1"), anvil::error);
    CHECK_THROWS_WITH_AS(
        (void)g.apply(op::gather_elements, {x, g.input("k", dtype::f32, dims{2, 1})}, along(1)),
        doctest::Contains("gather_elements: indices must be integers, got f32"), anvil::type_error);
}

TEST_CASE("cumsum: inclusive, exclusive, reverse and both, along every axis") {
    const dims shape{3, 4, 70};  // 70 inner elements: more than one block of running sums
    const std::vector<float> data = pattern(3 * 4 * 70, 3);
    const std::int64_t extents[] = {3, 4, 70};
    for (std::int64_t axis = 0; axis < 3; ++axis) {
        for (const bool exclusive : {false, true}) {
            for (const bool reverse : {false, true}) {
                CAPTURE(axis);
                CAPTURE(exclusive);
                CAPTURE(reverse);
                anvil::attributes a = along(axis - 3);  // negative axes too
                a.exclusive = exclusive;
                a.reverse = reverse;
                anvil::graph g;
                const auto out = g.apply(op::cumsum, {g.input("x", dtype::f32, shape)}, a);
                CHECK(out.shape() == shape);
                std::vector<double> want(data.size());
                const std::int64_t stride = axis == 0 ? 280 : axis == 1 ? 70 : 1;
                const std::int64_t extent = extents[axis];
                for (std::int64_t flat = 0; flat < 280 * 3; ++flat) {
                    const std::int64_t k = flat / stride % extent;
                    const std::int64_t start = flat - k * stride;
                    double sum = 0.0;
                    for (std::int64_t m = 0; m < extent; ++m) {
                        const bool counted =
                            reverse ? (exclusive ? m > k : m >= k) : (exclusive ? m < k : m <= k);
                        if (counted) sum += data[static_cast<std::size_t>(start + m * stride)];
                    }
                    want[static_cast<std::size_t>(flat)] = sum;
                }
                for (const auto mode : cpu_modes)
                    check_close(run_on_cpu(out, {{"x", host_tensor::from(data, shape)}}, mode), want, 1e-6);
            }
        }
    }
}

TEST_CASE("reduce_sum and reduce_mean: the fast kernel over adjacent axes equals the reference bit for bit") {
    // [2, 3, 5, 70]: 70 inner elements (more than one block of sums), and every run of adjacent axes, which
    // the fast kernel takes, plus two that are not adjacent, which stay with the reference kernel.
    const dims shape{2, 3, 5, 70};
    const std::vector<float> data = pattern(2 * 3 * 5 * 70, 5);
    const std::vector<std::vector<std::int64_t>> axis_sets = {
        {0}, {1}, {2}, {3}, {0, 1}, {1, 2}, {2, 3}, {0, 1, 2}, {1, 2, 3}, {}, {0, 2}, {1, 3}};
    for (const op kind : {op::reduce_sum, op::reduce_mean}) {
        for (const auto& axes : axis_sets) {
            CAPTURE(anvil::op_name(kind));
            CAPTURE(axes);
            anvil::attributes a;
            a.axes = axes;
            anvil::graph g;
            const auto out = g.apply(kind, {g.input("x", dtype::f32, shape)}, a);
            // A double-precision loop over every input element, its output found by dropping the reduced
            // axes.
            const std::vector<std::int64_t> all = axes.empty() ? std::vector<std::int64_t>{0, 1, 2, 3} : axes;
            std::vector<double> want(static_cast<std::size_t>(out.shape().element_count()), 0.0);
            std::int64_t count = 1;
            for (const std::int64_t axis : all)
                count *= shape[static_cast<std::size_t>(axis)];
            for (std::int64_t flat = 0; flat < 2100; ++flat) {
                std::int64_t rest = flat, o = 0, stride = 1;
                for (std::int64_t axis = 3; axis >= 0; --axis) {
                    const std::int64_t extent = shape[static_cast<std::size_t>(axis)];
                    const std::int64_t index = rest % extent;
                    rest /= extent;
                    if (std::find(all.begin(), all.end(), axis) != all.end()) continue;
                    o += index * stride;
                    stride *= extent;
                }
                want[static_cast<std::size_t>(o)] += data[static_cast<std::size_t>(flat)];
            }
            if (kind == op::reduce_mean) {
                for (double& w : want)
                    w /= static_cast<double>(count);
            }
            const std::vector<anvil::named_tensor> inputs{{"x", host_tensor::from(data, shape)}};
            const std::vector<float> fast = run_on_cpu(out, inputs, anvil::cpu_kernels::optimized);
            check_close(fast, want, 1e-6);
            CHECK(fast == run_on_cpu(out, inputs, anvil::cpu_kernels::reference));
        }
    }
    // The mean over an empty axis is NaN (0 / 0), the sum 0, in both kernels.
    anvil::attributes middle;
    middle.axes = {1};
    anvil::graph g;
    const auto empty = g.input("e", dtype::f32, dims{2, 0, 3});
    const auto sum = g.apply(op::reduce_sum, {empty}, middle);
    const auto mean = g.apply(op::reduce_mean, {empty}, middle);
    for (const auto mode : cpu_modes) {
        const std::vector<anvil::named_tensor> inputs{{"e", host_tensor(dtype::f32, dims{2, 0, 3})}};
        check_close(run_on_cpu(sum, inputs, mode), std::vector<double>(6, 0.0), 0.0);
        check_close(run_on_cpu(mean, inputs, mode), std::vector<double>(6, std::nan("")), 0.0);
    }
}

TEST_CASE("reduce_min and reduce_prod: several axes, with and without keep_dims; NaN as reduce_max") {
    const dims shape{3, 4, 5};
    std::vector<float> data = pattern(60, 4);
    for (auto& v : data)
        v = 1.0f + v * 0.25f;  // near 1, so products stay ordinary numbers
    data[27] = nan;            // [1, 1, 2]
    for (const op kind : {op::reduce_min, op::reduce_prod, op::reduce_max}) {
        for (const bool keep : {false, true}) {
            CAPTURE(anvil::op_name(kind));
            CAPTURE(keep);
            anvil::attributes a;
            a.axes = {-1, 0};
            a.keep_dims = keep;
            anvil::graph g;
            const auto out = g.apply(kind, {g.input("x", dtype::f32, shape)}, a);
            CHECK(out.shape() == (keep ? dims{1, 4, 1} : dims{4}));
            std::vector<double> want;
            for (std::size_t j = 0; j < 4; ++j) {
                double result = kind == op::reduce_prod ? 1.0 : kind == op::reduce_min ? INFINITY : -INFINITY;
                for (std::size_t i = 0; i < 3; ++i)
                    for (std::size_t k = 0; k < 5; ++k) {
                        const double v = data[(i * 4 + j) * 5 + k];
                        if (kind == op::reduce_prod)
                            result *= v;
                        else if (std::isnan(v) || std::isnan(result))
                            result = std::numeric_limits<double>::quiet_NaN();
                        else
                            result = kind == op::reduce_min ? std::min(result, v) : std::max(result, v);
                    }
                want.push_back(result);
            }
            CHECK(std::isnan(want[1]));  // the NaN's column, for every kind
            for (const auto mode : cpu_modes)
                check_close(run_on_cpu(out, {{"x", host_tensor::from(data, shape)}}, mode), want, 1e-6);
        }
    }
    // Every axis (axes left empty); the product of an empty axis is 1, while reduce_min refuses one.
    anvil::graph g;
    const auto all = g.apply(op::reduce_min, {g.input("x", dtype::f32, dims{2, 3})});
    CHECK(all.shape() == dims{});
    CHECK(run_on_cpu(all, {{"x", host_tensor::from(std::vector<float>{3, -2, 5, 7, -9, 1}, dims{2, 3})}},
                     anvil::cpu_kernels::optimized)[0] == -9.0f);
    anvil::attributes middle;
    middle.axes = {1};
    anvil::graph g2;
    const auto empty = g2.input("e", dtype::f32, dims{2, 0, 3});
    const auto ones = g2.apply(op::reduce_prod, {empty}, middle);
    for (const auto mode : cpu_modes)
        check_close(run_on_cpu(ones, {{"e", host_tensor(dtype::f32, dims{2, 0, 3})}}, mode),
                    std::vector<double>(6, 1.0), 0.0);
    CHECK_THROWS_WITH_AS((void)g2.apply(op::reduce_min, {empty}, middle),
                         doctest::Contains("cannot reduce the empty axis 1"), anvil::error);
}

TEST_CASE(
    "gather_cumsum ops: reduce_min runs on the simulated Neural Engine; the rest (and scatter_add) on the "
    "host, "
    "with why") {
    using anvil_test::sim;
    REQUIRE(anvil_test::ane_simulator_available());
    sim().reset();
    anvil::graph g;
    const dims shape{4, 64};
    const auto x = g.input("x", dtype::f32, shape);
    std::vector<float> w(64 * 64, 0.0f);
    for (std::size_t i = 0; i < 64; ++i)
        w[i * 64 + i] = 1.0f;
    const auto h = g.apply(op::linear, {x, g.constant(host_tensor::from(w, dims{64, 64}))});
    anvil::attributes last;
    last.axes = {1};
    last.keep_dims = true;
    anvil::attributes scan = along(1);
    scan.exclusive = true;
    anvil::attributes rows_of_16;  // an embedding-shaped gradient: h's rows added into a [16, 64] table
    rows_of_16.sizes = {16, 64};
    std::vector<std::int32_t> ids(4 * 8);
    for (std::size_t i = 0; i < ids.size(); ++i)
        ids[i] = static_cast<std::int32_t>(i * 9 % 128) - 64;
    const std::vector<anvil::value> outputs{
        g.apply(op::reduce_min, {h}, last), g.apply(op::reduce_prod, {h}, last),
        g.apply(op::cumsum, {h}, scan),
        g.apply(op::gather_elements, {h, g.input("i", dtype::i32, dims{4, 8})}, along(1)),
        g.apply(op::scatter_add, {h, g.input("rows", dtype::i32, dims{4})}, rows_of_16)};
    std::vector<float> xs = pattern(256, 5);
    for (auto& v : xs)
        v = 1.0f + v * 0.05f;
    const std::vector<anvil::named_tensor> inputs{
        {"x", host_tensor::from(xs, shape)},
        {"i", host_tensor::from(ids, dims{4, 8})},
        {"rows", host_tensor::from(std::vector<std::int32_t>{5, 0, 5, 15}, dims{4})}};
    const auto want = anvil::compile(std::span<const anvil::value>(outputs)).run(inputs);
    anvil_test::temporary_folder cache;
    anvil::compile_options options;
    options.target = anvil::device::ane;
    options.cache_dir = cache.path.string();
    {
        anvil::program ane = anvil::compile(std::span<const anvil::value>(outputs), options);
        const auto got = ane.run(inputs);
        REQUIRE(got.size() == want.size());
        for (std::size_t i = 0; i < got.size(); ++i) {
            INFO("output ", i);
            // fp16 from the linear onwards: 2e-3 of the magnitude (the sum of 64 values near 1, the product).
            const double scale = i == 2   ? 64.0
                                 : i == 1 ? std::fabs(want[i].to_f32()[0]) + 1.0
                                 : i == 4 ? 2.0
                                          : 1.0;
            CHECK(anvil_test::max_difference(got[i], want[i]) <= 2e-3 * scale);
        }
        const anvil::placement_report placement = ane.placement();
        const auto host_reason = [&](std::string_view what) {
            for (const std::string& line : placement.host_nodes)
                if (line.find(what) != std::string::npos) return true;
            return false;
        };
        CHECK(host_reason("reduce_prod is not among the MIL ops the Neural Engine is known to run"));
        CHECK(host_reason("cumsum is a MIL op (mil_ops.json), but nothing shows the Neural Engine runs it"));
        CHECK(host_reason("gather_elements reads integer indices"));
        CHECK(host_reason("scatter_add reads integer indices"));
        for (const std::string& line : placement.host_nodes)
            CHECK(line.find("(reduce_min") == std::string::npos);
    }
    CHECK(sim().counter("op:reduce_min") >= 1);
    CHECK(sim().violations() == "");
    CHECK(sim().counter("live_programs") == 0);

    // Core ML: gather_along_axis (negative indices wrapped first) and cumsum; reduce_prod has no form there.
    anvil_test::temporary_folder where("anvil-export");
    const anvil::value exported[] = {outputs[0], outputs[2], outputs[3]};
    anvil::mlpackage_options export_options;
    export_options.output_names = {"smallest", "sums", "picked"};
    CHECK_NOTHROW((void)anvil::export_mlpackage(exported, where.path / "m.mlpackage", export_options));
    CHECK_THROWS_WITH_AS(anvil::export_mlpackage(std::span(&outputs[1], 1), where.path / "p.mlpackage"),
                         doctest::Contains("reduce_prod is not among the MIL ops"), anvil::unsupported_error);
    CHECK_THROWS_WITH_AS(anvil::export_mlpackage(std::span(&outputs[4], 1), where.path / "s.mlpackage"),
                         doctest::Contains("scatter_add reads integer indices"), anvil::unsupported_error);
}

}  // namespace test_gather_cumsum_ops
