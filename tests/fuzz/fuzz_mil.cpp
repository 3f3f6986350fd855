// Fuzz target for the ANE simulator's MIL front end (parser, validator, BLOBFILE resolution, execution): any
// text either compiles or throws sim_failure — never a crash, a hang or a sanitizer report. The input is the
// MIL text; when it names a weights file, "@model_path/weights/weight.bin" resolves to a small valid blob
// with two fp16 tensors (metadata at 64 and 192), so the fuzzer also reaches the blob checks. What compiles
// is evaluated once on zeroed, correctly strided surfaces.
#include "mil_program.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace {

std::vector<std::byte> make_blob() {
    std::vector<std::byte> blob(64 + 2 * 128, std::byte{0});
    auto put32 = [&](std::size_t at, std::uint32_t v) { std::memcpy(blob.data() + at, &v, 4); };
    auto put64 = [&](std::size_t at, std::uint64_t v) { std::memcpy(blob.data() + at, &v, 8); };
    put32(0, 2);  // two blobs
    put32(4, 2);  // storage version 2
    for (std::size_t meta : {std::size_t{64}, std::size_t{192}}) {
        put32(meta, 0xDEADBEEF);
        put32(meta + 4, 1);   // fp16
        put64(meta + 8, 32);  // 16 fp16 values
        put64(meta + 16, meta + 64);
    }
    return blob;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const std::vector<anvil_sim::weight_file> weights{
        {"@model_path/weights/weight.bin", 0, make_blob()}};
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    anvil_sim::rules options;
    options.max_dimension = 256;  // keeps what the fuzzer builds small enough to evaluate quickly
    try {
        auto program = anvil_sim::mil_program::compile(text, weights, options);
        std::vector<std::vector<std::byte>> storage;
        std::vector<anvil_sim::surface_view> inputs;
        std::vector<anvil_sim::surface_view> outputs;
        auto surfaces = [&](const std::vector<anvil_sim::io_tensor>& tensors,
                            std::vector<anvil_sim::surface_view>& views) {
            for (const auto& t : tensors) {
                const std::size_t element = t.type == anvil_sim::element_type::fp16 ? 2 : 4;
                const std::size_t row = (static_cast<std::size_t>(t.width) * element + 63) / 64 * 64;
                const std::size_t plane = row * static_cast<std::size_t>(t.height);
                storage.emplace_back(plane * static_cast<std::size_t>(t.channels) + 64, std::byte{0});
                views.push_back({storage.back().data(), storage.back().size(), row, plane});
            }
        };
        surfaces(program->inputs(), inputs);
        surfaces(program->outputs(), outputs);
        program->evaluate(inputs, outputs);
    } catch (const anvil_sim::sim_failure&) {
    }
    return 0;
}
