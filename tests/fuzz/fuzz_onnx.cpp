// libFuzzer target: onnx_model::parse on arbitrary bytes. Only anvil::error may escape the parser; for a
// model it accepts, every tensor's raw bytes must lie inside the input and hold its element count, and every
// tensor (initializers, attributes, subgraphs' too) must convert to host bytes.
#include <anvil/io/onnx.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace {

void check_tensor(const anvil::onnx_tensor& t, std::span<const std::byte> input) {
    if (!t.raw.empty() &&
        (t.raw.data() < input.data() || t.raw.data() + t.raw.size() > input.data() + input.size()))
        __builtin_trap();
    if (t.element_count() <= 65536 && anvil::onnx_type_size(t.data_type) != 0) {
        const std::vector<std::byte> bytes = t.to_bytes();
        if (bytes.size() != t.element_count() * anvil::onnx_type_size(t.data_type)) __builtin_trap();
    }
}

void check_graph(const anvil::onnx_graph& g, std::span<const std::byte> input) {
    for (const anvil::onnx_tensor& t : g.initializers)
        check_tensor(t, input);
    for (const anvil::onnx_node& n : g.nodes) {
        for (const anvil::onnx_attribute& a : n.attributes) {
            static_cast<void>(a.type_name());
            for (const anvil::onnx_tensor& t : a.tensors)
                check_tensor(t, input);
            for (const auto& sub : a.graphs)
                check_graph(*sub, input);
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
    try {
        const anvil::onnx_model model = anvil::onnx_model::parse(bytes, "fuzz.onnx");
        static_cast<void>(model.initializer_bytes());
        static_cast<void>(model.opset());
        check_graph(model.graph(), bytes);
    } catch (const anvil::error&) {
    }
    return 0;
}
