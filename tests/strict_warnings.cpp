// Compiled with -Wshadow -Wconversion -Wsign-conversion -Werror: the headers must stay quiet for users who
// enable them. Inline functions are checked by parsing; templates need the instantiations below.
#include <anvil/anvil.hpp>

#include <atomic>
#include <filesystem>
#include <memory>
#include <vector>

namespace {

[[maybe_unused]] void instantiate_templates(const std::filesystem::path& folder) {
    const std::vector<std::int64_t> shape{2, 3};
    const std::vector<float> f32(6, 1.0f);
    const std::vector<anvil::half> f16(6, anvil::half(1.0f));
    const std::vector<anvil::bfloat16> bf16(6, anvil::bfloat16(1.0f));
    const std::vector<std::int64_t> i64(6, 1);
    const std::vector<std::int32_t> i32(6, 1);

    anvil::npy::write(folder / "a.npy", shape, std::span<const float>(f32));
    anvil::npy::write(folder / "b.npy", shape, std::span<const anvil::half>(f16));
    anvil::npy::write(folder / "c.npy", shape, std::span<const std::int64_t>(i64));
    anvil::npy::write(folder / "d.npy", shape, std::span<const std::int32_t>(i32));
    const auto array = anvil::npy::read(folder / "a.npy");
    [[maybe_unused]] const auto values = array.values<float>();

    anvil::safetensors_writer writer;
    writer.add<float>("f32", {2, 3}, f32);
    writer.add<anvil::half>("f16", {2, 3}, f16);
    writer.add<anvil::bfloat16>("bf16", {2, 3}, bf16);
    writer.add<std::int64_t>("i64", {2, 3}, i64);
    writer.write(folder / "w.safetensors");
    const auto weights = anvil::checkpoint::open(folder / "w.safetensors");
    [[maybe_unused]] const auto typed = weights.tensor("f32").data<float>();
    [[maybe_unused]] const auto halves = weights.tensor("f16").data<anvil::half>();

    std::atomic<std::size_t> sum{0};
    anvil::thread_pool::global().parallel_for(
        0, 100, 7, [&](std::size_t begin, std::size_t end) { sum += end - begin; });
    anvil::thread_pool::global().parallel_for(
        0, 100, [&](std::size_t begin, std::size_t end) { sum += end - begin; });

    using a = anvil::shape<1, 64, 1, 32>;
    using b = anvil::shape<1, 1, 1, 32>;
    [[maybe_unused]] const anvil::dims broadcast = anvil::broadcast_t<a, b>{};
    [[maybe_unused]] const auto text = anvil::dims{2, 3}.to_string();

    anvil::json::object object;
    object["n"] = anvil::json::value(std::int64_t{3});
    object["x"] = anvil::json::value(0.5);
    [[maybe_unused]] const auto dumped = anvil::json::dump(anvil::json::value(std::move(object)));

    // The front end, every backend kernel (compile prepares one of each kind) and the model blocks.
    anvil::graph g;
    auto x = g.input<float>("x", anvil::shape<2, 3, 8, 8>{});
    auto w = g.constant<float>(anvil::host_tensor(anvil::dtype::f32, anvil::dims{4, 3, 3, 3}),
                               anvil::shape<4, 3, 3, 3>{});
    auto y = anvil::relu(anvil::conv2d(x, w)) * 0.5f + 1.0f;
    auto pooled = anvil::global_avg_pool2d(anvil::max_pool2d(y, anvil::pool_options{.kernel = 2}));
    auto flat = anvil::reshape(pooled, std::vector<std::int64_t>{2, 4});
    auto s = anvil::softmax(anvil::layer_norm(anvil::gelu(flat), 1e-5));
    auto q = g.input<float>("q", anvil::shape<1, 2, 5, 8>{});
    auto attended = anvil::attention(q, q, q, anvil::attention_options{.causal = true});
    auto i = anvil::argmax(anvil::sum(attended, {3}, false), 2, false);
    auto program = anvil::compile({s, i});
    [[maybe_unused]] const auto outputs =
        program.run({{"x", anvil::host_tensor(anvil::dtype::f32, anvil::dims{2, 3, 8, 8})},
                     {"q", anvil::host_tensor(anvil::dtype::f32, anvil::dims{1, 2, 5, 8})}});
    auto weights_file =
        std::make_shared<const anvil::checkpoint>(anvil::checkpoint::open(folder / "w.safetensors"));
    anvil::models::weight_loader loader(g, weights_file);
    [[maybe_unused]] const auto layer = anvil::models::load_linear(loader, "f32", 2, 3, false);
}

}  // namespace
