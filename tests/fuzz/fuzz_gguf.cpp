// libFuzzer target: gguf_file::parse on arbitrary bytes. Only anvil::error may escape the parser; for a file
// it accepts, every tensor's bytes must lie inside the buffer, match its type's size, and dequantise; every
// array element must read back; a tokenizer read from its tokenizer.ggml.* keys must encode and decode.
#include <anvil/io/gguf.hpp>
#include <anvil/io/gguf_tokenizer.hpp>
#include <anvil/io/tokenizer.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
    try {
        const auto file = anvil::gguf_file::parse(bytes, "fuzz.gguf");
        for (const auto& tensor : file.tensors()) {
            const std::byte* begin = tensor.bytes.data();
            if (!tensor.bytes.empty() &&
                (begin < bytes.data() || begin + tensor.bytes.size() > bytes.data() + size))
                __builtin_trap();
            const anvil::ggml_type_layout layout = tensor.layout();
            if (tensor.bytes.size() != tensor.element_count / layout.block * layout.bytes) __builtin_trap();
            if (file.find_tensor(tensor.name) != &tensor) __builtin_trap();
            if (layout.dequantizes && tensor.element_count <= 65536) static_cast<void>(tensor.to_f32());
        }
        for (const auto& [key, value] : file.metadata()) {
            static_cast<void>(value.describe());
            for (std::size_t i = 0; i < value.size() && i < 4096; ++i) {
                static_cast<void>(value.integer_at(i));
                static_cast<void>(value.number_at(i));
            }
            for (const std::string_view s : value.strings())
                if (!s.empty() &&
                    (reinterpret_cast<const std::byte*>(s.data()) < bytes.data() ||
                     reinterpret_cast<const std::byte*>(s.data()) + s.size() > bytes.data() + size))
                    __builtin_trap();
        }
        try {
            static_cast<void>(file.tensor("token_embd.weight"));
        } catch (const anvil::format_error&) {
        }
        // The tokenizer the metadata describes, built and run: a vocabulary anvil accepts must tokenize.
        if (const auto vocabulary = anvil::read_gguf_vocabulary(file)) {
            const auto tok = anvil::tokenizer::from_json(vocabulary->tokenizer_json, "fuzz.gguf");
            const auto ids = tok.encode("The river runs past the old mill. 123 caf\xc3\xa9").ids;
            static_cast<void>(tok.decode(ids));
        }
    } catch (const anvil::error&) {
    }
    return 0;
}
