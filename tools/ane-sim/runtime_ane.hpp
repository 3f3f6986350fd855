// anvil's ANE simulator: what the AppleNeuralEngine.framework files share. runtime_ane.cpp holds the `_ANE*`
// classes and their selectors; runtime_ane_staging.cpp the model directory (staged MIL and weights, compiled
// artefacts); runtime_ane_io.cpp the I/O symbols (modelAttributes, binding and checking surfaces);
// runtime_ane_device.cpp the rules the device applies at load and evaluate, and the per-op counters.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "citations.hpp"
#include "runtime.hpp"

namespace anvil_sim {

struct descriptor_object : object {
    static constexpr const char* class_name = "_ANEInMemoryModelDescriptor";
    std::string mil_text;
    std::vector<weight_file> weights;  // sorted by key
};

struct in_memory_model_object : object {
    static constexpr const char* class_name = "_ANEInMemoryModel";
    ~in_memory_model_object();
    descriptor_object* descriptor = nullptr;
    std::string hex_identifier;
    url_object* model_url = nullptr;
    std::unique_ptr<mil_program> program;
    bool loaded = false;
    bool was_unloaded = false;
    bool evaluated = false;  // once: hang_eval_op hangs the first evaluation only
};

struct surface_wrapper_object : object {
    static constexpr const char* class_name = "_ANEIOSurfaceObject";
    ~surface_wrapper_object() { release_object(surface, "_ANEIOSurfaceObject dealloc"); }
    surface_object* surface = nullptr;
};

// The framework's messages start with the failing function (RUNTIME.md §2 "Errors").
inline constexpr const char* compile_prefix = "ANECCompile() FAILED: ";
inline constexpr const char* load_prefix = "ANEProgramLoad() Failed: ";
inline constexpr const char* evaluate_prefix =
    "ANEProgramProcessRequestDirect() Failed with status=0x1d : Program Inference error: ";

// ---- the model directory (runtime_ane_staging.cpp)

// Two independent 64-bit hashes of the MIL text, and of the weights unless the simulator option identity is
// `text` (the default: RUNTIME.md §0b #21 reports identifiers from the text alone). Identical inputs give an
// identical directory (RUNTIME.md §2).
std::string hex_identifier_of(const descriptor_object& descriptor);
// Where compile reads model.mil and weights/ and writes net.plist and data: the model URL's directory after
// setModelURL:, NSTemporaryDirectory()/<hexStringIdentifier>/ otherwise (RUNTIME.md §0 #2, §2 step 4).
std::string model_directory(const in_memory_model_object& model);
// Checks that the caller staged model.mil and weights/<file> there; "" or the message (with its citation).
std::string check_staged_files(const in_memory_model_object& model);
bool write_artefacts(const in_memory_model_object& model);
// Whether the model URL holds this model's compiled artefacts (compiledModelExists).
bool artefacts_exist(const in_memory_model_object& model);

// ---- I/O symbols (runtime_ane_io.cpp)

std::size_t row_stride_of(const io_tensor& tensor);
// Height * RowStride, plus the simulator option plane_stride_pad (RUNTIME.md §0 #8).
std::size_t plane_stride_of(const io_tensor& tensor);
// -[_ANEModel modelAttributes] of a compiled program (RUNTIME.md §3 "the rigorous method", §0 #1, #8).
object* model_attributes_of(const mil_program& program);
// Binds the request's surfaces to symbols; "" or what is wrong.
std::string bind_surfaces(const array_object& wrappers, const array_object& indices,
                          const std::vector<io_tensor>& symbols, const char* kind,
                          std::vector<surface_object*>& bound);
// The layout checks of CONSTRAINTS.md "I/O surfaces" for one direction; "" or what is wrong.
std::string check_surfaces(const std::vector<surface_object*>& bound, const std::vector<io_tensor>& symbols,
                           const char* kind, std::vector<surface_view>& views);
// The bytes of the tensor inside a surface (padding excluded), channel by channel.
std::vector<std::byte> gather_data(const surface_view& view, const io_tensor& symbol);

// ---- the device (runtime_ane_device.cpp)

// What fails a load of the program under the current options (no anchor op, fail_load_op); "" when none.
std::string load_problem(const mil_program& program);
// What fails an evaluate (I/O widths, the M5 profile's transcendentals, fail_eval_op); "" when none.
std::string evaluate_problem(const mil_program& program);
// Adds the program's statements to the op:<type> counters.
void count_ops(const mil_program& program);

}  // namespace anvil_sim
