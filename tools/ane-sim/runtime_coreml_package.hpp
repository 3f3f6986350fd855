// anvil's ANE simulator: Core ML packages as Core ML reads them, written from COREML.md (not from anvil's
// writer, which it checks). A protobuf wire decoder of its own; the Model / ModelDescription / MIL Program
// messages by their field numbers (COREML.md §2); the validator's rules (§2.2 "Validator rules", §3 spec and
// opset pairing, §1.2 the manifest, §1.4-1.5 blob references); and each function printed as MIL text, which
// is what a compiled .mlmodelc holds (§1.6) and what the simulator's MIL part then parses and executes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace anvil_sim::coreml {

// Core ML error codes (MLModelError): what compile and load failures report, in domain com.apple.CoreML.
namespace error_codes {
inline constexpr long generic = 0;
inline constexpr long feature_type = 1;
inline constexpr long io = 3;
inline constexpr long custom = 4;
inline constexpr long invalid_model = 5;  // "MLModelErrorModelDecryption..." on a Mac; here: malformed
}  // namespace error_codes

// A MultiArray input, output or state as the model describes it.
struct feature {
    std::string name;
    std::vector<std::int64_t> shape;
    long array_type = 0;  // ArrayDataType: 65552 FLOAT16, 65568 FLOAT32, 131104 INT32
};

struct function_program {
    std::string name;
    std::string opset;  // "CoreML6"
    std::string mil;    // the function as MIL text, named `main`
    std::vector<feature> inputs, outputs, states;
};

struct package {
    int specification_version = 0;
    std::vector<function_program> functions;
    std::string default_function;
    std::filesystem::path model_directory;  // the directory of model.mlmodel (@model_path)
    std::vector<std::string> weight_files;  // names under weights/ the program references
};

// Reads and validates `directory` (an .mlpackage). Throws sim_failure (codes from error_codes) naming what
// Core ML would refuse.
[[nodiscard]] package read_package(const std::filesystem::path& directory);

// Decodes and validates a bare model.mlmodel (for the fuzzer and the unit tests); `model_directory` resolves
// blob references, or is empty to skip that check.
[[nodiscard]] package read_model(const std::string& bytes, const std::filesystem::path& model_directory);

}  // namespace anvil_sim::coreml
