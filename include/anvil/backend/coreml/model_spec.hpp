// anvil: the Core ML writer of a lowered MIL program — `CoreML.Specification.Model` with an `mlProgram`
// (COREML.md §2), encoded by anvil's own protobuf writer. It reads the same in-memory function
// (backend/ane/mil_program.hpp) that mil_text.hpp prints for the private path, so the two routes run one
// lowering. The spec version follows the dialect: ios16 programs are spec 7 / opset "CoreML6" (FLOAT16 I/O,
// macOS 13), ios18 programs spec 9 / "CoreML8" (states, several functions; macOS 15), and the two are never
// mixed (Core ML derives the spec a program needs from its opset, COREML.md §3).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/backend/ane/mil_program.hpp"
#include "anvil/compilation.hpp"

namespace anvil::detail::coreml {

// MultiArray element types (FeatureTypes.proto ArrayDataType; the same numbers as MLMultiArrayDataType).
enum class array_dtype : std::uint32_t {
    float16 = 0x10000u | 16u,
    float32 = 0x10000u | 32u,
    float64 = 0x10000u | 64u,
    int32 = 0x20000u | 32u,
};

// A model input, output or state as Core ML describes it to the app (the names Xcode shows).
struct feature_description {
    std::string name;
    std::string short_description;
    std::vector<std::int64_t> shape;
    array_dtype dtype = array_dtype::float16;
};

// Model.proto Metadata: what Xcode's model page shows.
struct model_metadata {
    std::string short_description;
    std::string version;
    std::string author;
    std::string license;
    std::vector<std::pair<std::string, std::string>> user_defined;  // written sorted by key
};

// One function of the program: the MIL function, the values it returns (in this order) and how the model
// describes its interface. Inputs and outputs left empty are described from the function itself.
struct function_spec {
    std::string name = "main";
    const ane::mil_function* function = nullptr;
    std::vector<ane::mil_ref> outputs;
    std::vector<feature_description> inputs, output_features;
};

struct model_spec {
    std::vector<function_spec> functions;  // one: a plain model; several: a multi-function model (spec 9)
    std::string default_function;          // several functions: the one loaded without a functionName
    model_metadata metadata;
};

// Spec version and opset of a dialect (COREML.md §3).
[[nodiscard]] int specification_version(ane::mil_dialect dialect) noexcept;
[[nodiscard]] std::string_view opset_name(ane::mil_dialect dialect) noexcept;

// The FeatureDescriptions a function's own inputs and outputs give: fp16 arrays of their shapes.
[[nodiscard]] std::vector<feature_description> describe_inputs(const ane::mil_function& function);
// Its states (MLState buffers; fp16).
[[nodiscard]] std::vector<feature_description> describe_states(const ane::mil_function& function);
[[nodiscard]] std::vector<feature_description> describe_outputs(const ane::mil_function& function,
                                                                std::span<const ane::mil_ref> outputs);

// `model.mlmodel`'s bytes. Throws anvil::error naming what Core ML's validator would refuse: a name that
// is not an identifier, a description that disagrees with the function, functions of different dialects.
[[nodiscard]] std::vector<std::byte> encode_model(const model_spec& spec);

}  // namespace anvil::detail::coreml

#if ANVIL_DEFINITIONS
#include "anvil/backend/coreml/model_spec-inl.hpp"
#endif
