// Fuzz target for the ANE simulator's Core ML package reader (runtime_coreml_package.cpp: its protobuf wire
// decoder, the Model / MIL Program messages, the validator's rules) and the MIL part behind it: any bytes as
// model.mlmodel either read and compile as a Core ML program or throw sim_failure — never a crash, a hang or
// a sanitizer report. Blob references are not resolved (no model directory); each function printed as MIL
// text is compiled in Core ML mode with the example's weight file name mapped to a small valid blob.
#include "mil_program.hpp"
#include "runtime_coreml_package.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace {

std::vector<std::byte> make_blob() {
    std::vector<std::byte> blob(64 + 128, std::byte{0});
    auto put32 = [&](std::size_t at, std::uint32_t v) { std::memcpy(blob.data() + at, &v, 4); };
    auto put64 = [&](std::size_t at, std::uint64_t v) { std::memcpy(blob.data() + at, &v, 8); };
    put32(0, 1);  // one blob
    put32(4, 2);  // storage version 2
    put32(64, 0xDEADBEEF);
    put32(68, 1);   // fp16
    put64(72, 32);  // 16 fp16 values
    put64(80, 128);
    return blob;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const std::vector<anvil_sim::weight_file> weights{
        {"@model_path/weights/weight.bin", 0, make_blob()}};
    const std::string bytes(reinterpret_cast<const char*>(data), size);
    anvil_sim::rules options;
    options.coreml_program = true;
    options.max_dimension = 256;
    try {
        const anvil_sim::coreml::package package = anvil_sim::coreml::read_model(bytes, {});
        for (const auto& function : package.functions)
            (void)anvil_sim::mil_program::compile(function.mil, weights, options);
    } catch (const anvil_sim::sim_failure&) {
    }
    return 0;
}
