// Compiled with -Wshadow -Wconversion -Wsign-conversion -Werror: the headers must stay quiet for users who
// enable them. Inline functions are checked by parsing; templates need the instantiations below.
#include <anvil/anvil.hpp>

#include <atomic>
#include <filesystem>
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
}

}  // namespace
