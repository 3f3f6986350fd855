// The typed expression front end: the nodes, attributes, types and shapes each op appends, its static result
// types, and the runtime checks of extents known only when the graph is built. The expected dumps are written
// by hand from the ops' definitions; the compile-time checks have their must-fail twins in
// tests/compile_fail/.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

// A namespace of its own, so the test files can be compiled together (a unity build).
namespace test_expr {

using anvil::dims;
using anvil::dtype;
using anvil::dyn;
using anvil::op;
using anvil::shape;
using anvil::tensor;

namespace {

template <class Tensor, class Expected>
constexpr bool has_type = std::is_same_v<std::remove_cvref_t<Tensor>, Expected>;

anvil::host_tensor f32_data(std::vector<float> values, dims extents) {
    return anvil::host_tensor::from(values, extents);
}

std::string dump_of(const anvil::graph& g) {
    return anvil::dump(g);
}

}  // namespace

TEST_CASE("expr: elementwise ops broadcast static shapes and take scalar operands") {
    anvil::graph g;
    const auto x = g.input<float>("x", shape<2, 3>{});
    const auto bias = g.input<float>("bias", shape<3>{});
    const auto sum = x + bias;
    const auto scaled = sum * 0.5f;
    const auto flipped = 2.0f - scaled;
    const auto activated = anvil::gelu(flipped, anvil::gelu_approximation::tanh);
    const auto clamped = anvil::clamp(activated, -1.0, 6.0);
    static_assert(has_type<decltype(sum), tensor<float, shape<2, 3>>>);
    static_assert(has_type<decltype(flipped), tensor<float, shape<2, 3>>>);
    static_assert(has_type<decltype(clamped), tensor<float, shape<2, 3>>>);
    // The scalar constants are rank 0 and take x's type; `2 - y` keeps the scalar on the left.
    CHECK(dump_of(g) ==
          "%0 = input \"x\" : f32 [2, 3]\n"
          "%1 = input \"bias\" : f32 [3]\n"
          "%2 = add(%0, %1) : f32 [2, 3]\n"
          "%3 = constant : f32 []\n"
          "%4 = mul(%2, %3) : f32 [2, 3]\n"
          "%5 = constant : f32 []\n"
          "%6 = sub(%5, %4) : f32 [2, 3]\n"
          "%7 = gelu_tanh(%6) : f32 [2, 3]\n"
          "%8 = clamp(%7) {min=-1 max=6} : f32 [2, 3]\n");
    CHECK(g[3].data.values<float>()[0] == 0.5f);
    CHECK(g[5].data.values<float>()[0] == 2.0f);
    CHECK(clamped.shape() == dims{2, 3});
    CHECK(clamped.type() == dtype::f32);
    CHECK(clamped.value().id() == 8);
}

TEST_CASE("expr: static broadcasting follows numpy, dyn extents included") {
    anvil::graph g;
    const auto a = g.input<float>("a", shape<8, 1, 6, 1>{});
    const auto b = g.input<float>("b", shape<7, 1, 5>{});
    const auto c = a * b;  // numpy.broadcast_shapes((8, 1, 6, 1), (7, 1, 5)) == (8, 7, 6, 5)
    static_assert(has_type<decltype(c), tensor<float, shape<8, 7, 6, 5>>>);
    CHECK(c.shape() == dims{8, 7, 6, 5});

    const auto rows = g.input<float, shape<dyn, 1>>("rows", dims{4, 1});
    const auto columns = g.input<float>("columns", shape<1, 768>{});
    const auto outer = rows + columns;
    static_assert(has_type<decltype(outer), tensor<float, shape<dyn, 768>>>);
    CHECK(outer.shape() == dims{4, 768});

    const auto condition = g.input<bool>("condition", shape<4, 1>{});
    const auto chosen = anvil::where(condition, outer, 0.0f + outer);
    static_assert(has_type<decltype(chosen), tensor<float, shape<4, 768>>>);
    CHECK(g[chosen.value().id()].kind == op::where);
}

TEST_CASE("expr: scalar constants take the tensor's element type") {
    anvil::graph g;
    const auto h = g.input<anvil::f16>("h", shape<4>{});
    const auto halved = h / 2;
    CHECK(g[halved.value().id() - 1].result.type == dtype::f16);
    CHECK(static_cast<float>(g[halved.value().id() - 1].data.values<anvil::half>()[0]) == 2.0f);
    const auto ids = g.input<std::int64_t>("ids", shape<4>{});
    const auto shifted = ids + 1;
    CHECK(shifted.type() == dtype::i64);
    CHECK(g[shifted.value().id() - 1].data.values<std::int64_t>()[0] == 1);
    const auto squared = anvil::pow(h, 2) + anvil::maximum(h, 0) + anvil::minimum(6, h);
    static_assert(has_type<decltype(squared), tensor<anvil::f16, shape<4>>>);
}

TEST_CASE("expr: shapes known only at run time use any_shape") {
    anvil::graph g;
    const std::int64_t hidden = 12;  // as read from a config
    const tensor<float> x = g.input<float>("x", dims{2, 5, hidden});
    const tensor<float> w =
        g.constant<float>(f32_data(std::vector<float>(4 * hidden, 0.0f), dims{4, hidden}), "w");
    const auto y = anvil::linear(x, w);
    static_assert(has_type<decltype(y), tensor<float>>);
    CHECK(y.shape() == dims{2, 5, 4});
    const auto heads = anvil::reshape(y, {2, 5, 2, -1});
    CHECK(heads.shape() == dims{2, 5, 2, 2});
    CHECK(g[heads.value().id()].attrs.sizes == std::vector<std::int64_t>{2, 5, 2, 2});  // -1 resolved
    const auto moved = anvil::permute(heads, {0, -2, 1, 3});
    CHECK(moved.shape() == dims{2, 2, 5, 2});
    CHECK(g[moved.value().id()].attrs.axes == std::vector<std::int64_t>{0, 2, 1, 3});  // made non-negative
    // A static tensor converts to any_shape implicitly, and back with a runtime check.
    const auto s = g.input<float>("s", shape<2, 3>{});
    const tensor<float> any = s;
    const tensor<float, shape<2, dyn>> partly = s;
    const auto back = tensor<float, shape<2, 3>>(any);
    CHECK(back.value().id() == s.value().id());
    CHECK(partly.shape() == dims{2, 3});
}

TEST_CASE("expr: matmul, linear and conv2d compute static result shapes") {
    anvil::graph g;
    const auto a = g.input<float>("a", shape<4, 2, 3>{});
    const auto b = g.input<float>("b", shape<3, 5>{});
    const auto product = anvil::matmul(a, b);
    static_assert(has_type<decltype(product), tensor<float, shape<4, 2, 5>>>);
    const auto bt = g.input<float>("bt", shape<5, 3>{});
    const auto product_t = anvil::matmul<anvil::matmul_options{.transpose_b = true}>(a, bt);
    static_assert(has_type<decltype(product_t), tensor<float, shape<4, 2, 5>>>);
    // Runtime options: M (2 or 3) and N (5 or 3) depend on them, so they are dyn.
    const auto product_r = anvil::matmul(a, bt, {.transpose_b = true});
    static_assert(has_type<decltype(product_r), tensor<float, shape<4, dyn, dyn>>>);
    CHECK(product_r.shape() == dims{4, 2, 5});

    const auto weight = g.input<anvil::f16>("weight", shape<7, 3>{});
    const auto projected = anvil::linear(a, weight, g.input<anvil::f16>("bias", shape<7>{}));
    static_assert(has_type<decltype(projected), tensor<float, shape<4, 2, 7>>>);

    const auto image = g.input<float>("image", shape<1, 4, 8, 8>{});
    const auto kernel = g.input<float>("kernel", shape<6, 2, 3, 3>{});
    // (8 + 2 * 1 - 3) / 2 + 1 = 4 rows and columns.
    const auto conv =
        anvil::conv2d<anvil::conv2d_options{.stride = 2, .padding = 1, .groups = 2}>(image, kernel);
    static_assert(has_type<decltype(conv), tensor<float, shape<1, 6, 4, 4>>>);
    // Asymmetric padding at run time: rows (8 + 1 + 0 - 3) / 1 + 1 = 7, columns (8 + 0 + 2 - 3) + 1 = 8.
    const auto conv_r = anvil::conv2d(image, kernel, {.padding = {1, 0, 0, 2}, .groups = 2});
    static_assert(has_type<decltype(conv_r), tensor<float, shape<1, 6, dyn, dyn>>>);
    const std::string text = dump_of(g);
    CHECK(text.substr(text.find("%11 = conv2d")) ==
          "%11 = conv2d(%9, %10) {kernel=[3, 3] stride=[2, 2] padding=[1, 1, 1, 1] groups=2} : f32 [1, 6, 4, "
          "4]\n"
          "%12 = conv2d(%9, %10) {kernel=[3, 3] padding=[1, 0, 0, 2] groups=2} : f32 [1, 6, 7, 8]\n");
    CHECK(g[product_t.value().id()].attrs.transpose_b);
    CHECK(g[projected.value().id()].inputs.size() == 3);
}

TEST_CASE("expr: optional operands are tensors, std::optional or std::nullopt") {
    anvil::graph g;
    const auto x = g.input<float>("x", shape<2, 4>{});
    const auto w = g.input<float>("w", shape<3, 4>{});
    std::optional<tensor<float>> bias;
    CHECK(g[anvil::linear(x, w, bias).value().id()].inputs.size() == 2);
    bias = tensor<float>(g.input<float>("b", shape<3>{}));
    CHECK(g[anvil::linear(x, w, bias).value().id()].inputs.size() == 3);

    const auto gamma = g.input<float>("gamma", shape<4>{});
    const auto normed = anvil::layer_norm(x, gamma, std::nullopt, 1e-6);
    CHECK(g[normed.value().id()].inputs.size() == 2);
    CHECK(g[normed.value().id()].attrs.epsilon == 1e-6f);
    CHECK_THROWS_WITH_AS(static_cast<void>(anvil::layer_norm(x, std::nullopt, gamma)),
                         "layer_norm: the bias is given without the weight, which comes before it (pass the "
                         "weight as well)",
                         anvil::error);
    const auto rms = anvil::rms_norm(x, gamma);
    CHECK(g[rms.value().id()].attrs.epsilon == 1e-6f);
}

TEST_CASE("expr: norms, softmax, attention and rotary") {
    anvil::graph g;
    const auto x = g.input<float>("x", shape<2, 3, 4>{});
    const auto gamma = g.input<float>("gamma", shape<4>{});
    const auto channels = g.input<float>("channels", shape<3>{});
    static_cast<void>(anvil::layer_norm(x, gamma, gamma));
    static_cast<void>(anvil::group_norm(x, 3, channels, channels));
    static_cast<void>(anvil::batch_norm(x, channels, channels, 1e-3));
    static_cast<void>(anvil::softmax(x, 1, g.input<float>("mask", shape<3, 1>{})));
    const auto q = g.input<float>("q", shape<1, 4, 5, 8>{});
    const auto k = g.input<float>("k", shape<1, 2, 7, 8>{});
    const auto v = g.input<float>("v", shape<1, 2, 7, 6>{});
    const auto attended = anvil::attention(q, k, v, {.causal = true, .scale = 0.25});
    static_assert(has_type<decltype(attended), tensor<float, shape<1, 4, 5, 6>>>);
    const auto table = g.input<float>("table", shape<5, 2>{});
    const auto rotated = anvil::rotary(q, table, table, anvil::rotary_form::interleaved);
    static_assert(has_type<decltype(rotated), tensor<float, shape<1, 4, 5, 8>>>);
    CHECK(dump_of(g) ==
          "%0 = input \"x\" : f32 [2, 3, 4]\n"
          "%1 = input \"gamma\" : f32 [4]\n"
          "%2 = input \"channels\" : f32 [3]\n"
          "%3 = layer_norm(%0, %1, %1) {epsilon=1e-05} : f32 [2, 3, 4]\n"
          "%4 = group_norm(%0, %2, %2) {groups=3 epsilon=1e-05} : f32 [2, 3, 4]\n"
          "%5 = batch_norm(%0, %2, %2) {epsilon=0.001} : f32 [2, 3, 4]\n"
          "%6 = input \"mask\" : f32 [3, 1]\n"
          "%7 = softmax(%0, %6) {axis=1} : f32 [2, 3, 4]\n"
          "%8 = input \"q\" : f32 [1, 4, 5, 8]\n"
          "%9 = input \"k\" : f32 [1, 2, 7, 8]\n"
          "%10 = input \"v\" : f32 [1, 2, 7, 6]\n"
          "%11 = attention(%8, %9, %10) {scale=0.25 causal} : f32 [1, 4, 5, 6]\n"
          "%12 = input \"table\" : f32 [5, 2]\n"
          "%13 = rotary(%8, %12, %12) {interleaved} : f32 [1, 4, 5, 8]\n");
}

TEST_CASE("expr: reductions with static and runtime axes") {
    anvil::graph g;
    const auto x = g.input<float>("x", shape<2, 3, 4>{});
    const auto last = anvil::sum<-1>(x);
    static_assert(has_type<decltype(last), tensor<float, shape<2, 3>>>);
    const auto kept = anvil::mean<0, -1>(x, anvil::keep_dims);
    static_assert(has_type<decltype(kept), tensor<float, shape<1, 3, 1>>>);
    const auto everything = anvil::max(x);
    static_assert(has_type<decltype(everything), tensor<float, shape<>>>);
    const auto runtime = anvil::sum(x, {-2}, true);
    static_assert(has_type<decltype(runtime), tensor<float>>);
    const auto best = anvil::argmax(x);
    static_assert(has_type<decltype(best), tensor<std::int64_t, shape<2, 3>>>);
    const auto best_kept = anvil::argmax(x, 1, true);
    static_assert(has_type<decltype(best_kept), tensor<std::int64_t>>);
    CHECK(dump_of(g) ==
          "%0 = input \"x\" : f32 [2, 3, 4]\n"
          "%1 = reduce_sum(%0) {axes=[2]} : f32 [2, 3]\n"
          "%2 = reduce_mean(%0) {axes=[0, 2] keep_dims} : f32 [1, 3, 1]\n"
          "%3 = reduce_max(%0) {axes=[0, 1, 2]} : f32 []\n"
          "%4 = reduce_sum(%0) {axes=[1] keep_dims} : f32 [2, 1, 4]\n"
          "%5 = argmax(%0) {axes=[2] axis=2} : i64 [2, 3]\n"
          "%6 = argmax(%0) {axes=[1] axis=1 keep_dims} : i64 [2, 1, 4]\n");
}

TEST_CASE("expr: pooling, global pooling as reductions, upsampling") {
    anvil::graph g;
    const auto x = g.input<float>("x", shape<1, 2, 7, 7>{});
    const auto pooled = anvil::max_pool2d<anvil::pool_options{.kernel = 2, .ceil_mode = true}>(x);
    static_assert(has_type<decltype(pooled), tensor<float, shape<1, 2, 4, 4>>>);  // ceil((7 - 2) / 2) + 1
    const auto averaged =
        anvil::avg_pool2d(x, {.kernel = 3, .stride = 2, .padding = 1, .count_include_pad = false});
    static_assert(has_type<decltype(averaged), tensor<float, shape<1, 2, dyn, dyn>>>);
    const auto global = anvil::global_avg_pool2d(x);
    static_assert(has_type<decltype(global), tensor<float, shape<1, 2, 1, 1>>>);
    static_cast<void>(anvil::global_max_pool2d(x));
    const auto big = anvil::upsample_nearest<anvil::size2d{14, 21}>(x);
    static_assert(has_type<decltype(big), tensor<float, shape<1, 2, 14, 21>>>);
    static_cast<void>(anvil::upsample_bilinear(x, {9, 9}, true));
    CHECK(dump_of(g) ==
          "%0 = input \"x\" : f32 [1, 2, 7, 7]\n"
          "%1 = max_pool2d(%0) {kernel=[2, 2] stride=[2, 2] ceil_mode} : f32 [1, 2, 4, 4]\n"
          "%2 = avg_pool2d(%0) {kernel=[3, 3] stride=[2, 2] padding=[1, 1, 1, 1] exclude_pad} : f32 [1, 2, "
          "4, 4]\n"
          "%3 = reduce_mean(%0) {axes=[2, 3] keep_dims} : f32 [1, 2, 1, 1]\n"
          "%4 = reduce_max(%0) {axes=[2, 3] keep_dims} : f32 [1, 2, 1, 1]\n"
          "%5 = upsample_nearest(%0) {sizes=[14, 21]} : f32 [1, 2, 14, 21]\n"
          "%6 = upsample_bilinear(%0) {sizes=[9, 9] align_corners} : f32 [1, 2, 9, 9]\n");
}

TEST_CASE("expr: split lowers to one slice per piece") {
    anvil::graph g;
    const auto qkv = g.input<float>("qkv", shape<2, 9>{});
    const auto pieces = anvil::split(qkv, {2, 3, 4}, -1);
    REQUIRE(pieces.size() == 3);
    CHECK(pieces[2].shape() == dims{2, 4});
    const auto thirds = anvil::split(qkv, 3, 1);
    REQUIRE(thirds.size() == 3);
    CHECK(dump_of(g) ==
          "%0 = input \"qkv\" : f32 [2, 9]\n"
          "%1 = slice(%0) {begin=[0, 0] end=[2, 2] step=[1, 1]} : f32 [2, 2]\n"
          "%2 = slice(%0) {begin=[0, 2] end=[2, 5] step=[1, 1]} : f32 [2, 3]\n"
          "%3 = slice(%0) {begin=[0, 5] end=[2, 9] step=[1, 1]} : f32 [2, 4]\n"
          "%4 = slice(%0) {begin=[0, 0] end=[2, 3] step=[1, 1]} : f32 [2, 3]\n"
          "%5 = slice(%0) {begin=[0, 3] end=[2, 6] step=[1, 1]} : f32 [2, 3]\n"
          "%6 = slice(%0) {begin=[0, 6] end=[2, 9] step=[1, 1]} : f32 [2, 3]\n");
    CHECK_THROWS_WITH_AS(static_cast<void>(anvil::split(qkv, {4, 4}, 1)),
                         "split: sizes [4, 4] add up to 8, but axis 1 of [2, 9] has 9", anvil::shape_error);
    CHECK_THROWS_WITH_AS(static_cast<void>(anvil::split(qkv, 2, 1)),
                         "split: axis 1 of [2, 9] (9) does not split into 2 equal pieces",
                         anvil::shape_error);
}

TEST_CASE("expr: data movement builds canonical attributes") {
    anvil::graph g;
    const auto x = g.input<float>("x", shape<2, 3, 4>{});
    const auto flat = anvil::reshape<shape<dyn, 4>>(x);
    static_assert(has_type<decltype(flat), tensor<float, shape<6, 4>>>);  // 24 / 4, resolved statically
    const auto swapped = anvil::transpose<0, -1>(x);
    static_assert(has_type<decltype(swapped), tensor<float, shape<4, 3, 2>>>);
    const auto joined = anvil::concat<1>(x, g.input<float>("y", shape<2, 5, 4>{}));
    static_assert(has_type<decltype(joined), tensor<float, shape<2, 8, 4>>>);
    const auto tail = anvil::slice(x, -1, 1, anvil::end_of_axis, 2);
    static_assert(has_type<decltype(tail), tensor<float, shape<dyn, dyn, dyn>>>);
    const auto padded = anvil::pad(x, {0, 1, 0}, {0, 0, 2}, -1.0);
    const auto table = g.input<float>("table", shape<10, 8>{});
    const auto ids = g.input<std::int32_t>("ids", shape<2, 5>{});
    const auto embedded = anvil::embedding(table, ids);
    static_assert(has_type<decltype(embedded), tensor<float, shape<2, 5, 8>>>);
    CHECK(dump_of(g) ==
          "%0 = input \"x\" : f32 [2, 3, 4]\n"
          "%1 = reshape(%0) {sizes=[6, 4]} : f32 [6, 4]\n"
          "%2 = permute(%0) {axes=[2, 1, 0]} : f32 [4, 3, 2]\n"
          "%3 = input \"y\" : f32 [2, 5, 4]\n"
          "%4 = concat(%0, %3) {axis=1} : f32 [2, 8, 4]\n"
          "%5 = slice(%0) {begin=[0, 0, 1] end=[2, 3, 4] step=[1, 1, 2]} : f32 [2, 3, 2]\n"
          "%6 = pad(%0) {begin=[0, 1, 0] end=[0, 0, 2] value=-1} : f32 [2, 4, 6]\n"
          "%7 = input \"table\" : f32 [10, 8]\n"
          "%8 = input \"ids\" : i32 [2, 5]\n"
          "%9 = gather(%7, %8) : f32 [2, 5, 8]\n");
    CHECK(padded.shape() == dims{2, 4, 6});
}

TEST_CASE("expr: cast and dequantisation give the target element type") {
    anvil::graph g;
    const auto x = g.input<float>("x", shape<2, 2>{});
    const auto h = anvil::cast<anvil::bf16>(x);
    static_assert(has_type<decltype(h), tensor<anvil::bf16, shape<2, 2>>>);
    CHECK(h.type() == dtype::bf16);
    const auto q = g.input<std::int8_t>("q", shape<4, 3>{});
    const auto scale = g.input<anvil::f16>("scale", shape<4>{});
    const auto weights = anvil::dequantize_int8(q, scale, scale, 0);
    static_assert(has_type<decltype(weights), tensor<anvil::f16, shape<4, 3>>>);
    const auto indices = g.input<std::uint8_t>("indices", shape<4, 3>{});
    const auto palette = anvil::dequantize_lut(indices, g.input<float>("lut", shape<4, 16>{}));
    static_assert(has_type<decltype(palette), tensor<float, shape<4, 3>>>);
    CHECK(g[weights.value().id()].inputs.size() == 3);
    CHECK(palette.shape() == dims{4, 3});
}

TEST_CASE("expr: dyn extents are checked when the graph is built, naming the op and the shapes") {
    anvil::graph g;
    const auto x = g.input<float, shape<dyn, 3>>("x", dims{5, 3});
    const auto y = g.input<float>("y", shape<4, 3>{});
    CHECK_THROWS_WITH_AS(static_cast<void>(x + y),
                         doctest::Contains("add: shapes [5, 3] and [4, 3] do not broadcast"),
                         anvil::shape_error);
    const auto a = g.input<float, shape<2, dyn>>("a", dims{2, 6});
    CHECK_THROWS_WITH_AS(static_cast<void>(anvil::matmul(a, g.input<float>("b", shape<5, 2>{}))),
                         "matmul: inner extents differ: [2, 6] and [5, 2] (6 vs 5)", anvil::shape_error);
    CHECK_THROWS_WITH_AS(static_cast<void>(anvil::linear(a, g.input<float>("w", shape<3, 5>{}))),
                         "linear: input [2, 6] and weight [3, 5] do not fit: expected input [..., 5]",
                         anvil::shape_error);
    CHECK_THROWS_WITH_AS(static_cast<void>(anvil::concat<0>(a, g.input<float>("c", shape<1, 4>{}))),
                         "concat: shapes [2, 6] and [1, 4] differ outside axis 0", anvil::shape_error);
    CHECK_THROWS_WITH_AS(static_cast<void>(anvil::reshape<shape<dyn, 5>>(a)),
                         "reshape: cannot reshape [2, 6] (12 elements) with -1 in [-1, 5]",
                         anvil::shape_error);
    CHECK_THROWS_WITH_AS(static_cast<void>(anvil::transpose(a, 0, 2)),
                         "transpose: axis 2 is out of range for shape [2, 6] (rank 2)", anvil::shape_error);
}

TEST_CASE("expr: typed handles check element types and static shapes at run time") {
    anvil::graph g;
    const anvil::value raw = g.input("raw", dtype::f16, dims{2, 3});
    CHECK_THROWS_WITH_AS(tensor<float>{raw}, "tensor<f32>: input \"raw\" %0 holds f16 elements, not f32",
                         anvil::type_error);
    CHECK_THROWS_WITH_AS(
        (tensor<anvil::f16, shape<3, dyn>>{raw}),
        "tensor<f16, [3, ?]>: input \"raw\" %0 has shape [2, 3], which does not match [3, ?]",
        anvil::shape_error);
    CHECK(tensor<anvil::f16, shape<2, dyn>>{raw}.shape() == dims{2, 3});
    CHECK_THROWS_WITH_AS(static_cast<void>(g.input<float, shape<2, dyn>>("bad", dims{3, 3})),
                         "graph::input \"bad\": shape [3, 3] does not match the static shape [2, ?]",
                         anvil::shape_error);
    CHECK(g.size() == 1);  // the refused input was not added
    CHECK_THROWS_WITH_AS(static_cast<void>(g.constant<anvil::f16>(f32_data({1, 2}, dims{2}), "w")),
                         "graph::constant<f16> \"w\": the data holds f32 elements, not f16",
                         anvil::type_error);
    CHECK_THROWS_WITH_AS(static_cast<void>(g.constant<float>(f32_data({1, 2}, dims{2}), shape<3>{}, "w")),
                         "graph::constant \"w\": shape [2] does not match the static shape [3]",
                         anvil::shape_error);
    const auto w = g.constant<float>(f32_data({1, 2}, dims{2}), shape<2>{}, "w");
    CHECK(g[w.value().id()].name == "w");
    // Tensors pass where values are expected.
    const std::vector<anvil::value> outputs{w, anvil::relu(w)};
    CHECK(outputs[1].producer().kind == op::relu);
    const tensor<float> empty;
    CHECK_THROWS_WITH_AS(static_cast<void>(anvil::relu(empty)),
                         "relu: every operand is an empty tensor (default-constructed, never assigned)",
                         anvil::error);
}

}  // namespace test_expr
