// libFuzzer target: safetensors_file::parse on arbitrary bytes. Only anvil::error may escape the parser; for
// a file it accepts, every view must lie inside the buffer and every conversion must succeed.
#include <anvil/io/safetensors.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
    try {
        const auto file = anvil::safetensors_file::parse(bytes, "fuzz.safetensors");
        std::uint64_t covered = 0;
        for (const auto& tensor : file.tensors()) {
            const std::byte* begin = tensor.bytes().data();
            if (!tensor.bytes().empty() &&
                (begin < bytes.data() || begin + tensor.byte_size() > bytes.data() + size)) {
                __builtin_trap();
            }
            covered += tensor.byte_size();
            if (file.find(tensor.name()) != &tensor) __builtin_trap();
            // Conversions read every byte of the view: ASan reports any read outside the input.
            if (tensor.element_count() <= 4096) {
                static_cast<void>(tensor.to_f32());
                static_cast<void>(tensor.to_f16());
            }
        }
        if (covered != file.data_size() || file.file_size() != size) __builtin_trap();
        // The "did you mean" search runs over hostile names.
        try {
            static_cast<void>(file.tensor("model.layers.0.weight"));
        } catch (const anvil::format_error&) {
        }
    } catch (const anvil::error&) {
    }
    return 0;
}
