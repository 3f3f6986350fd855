// anvil: the bridge to the public CoreML.framework (COREML.md §7), from plain C++ through the Objective-C
// runtime, on top of the system libraries' bridge (backend/ane/objc_runtime.hpp) and never the private
// AppleNeuralEngine.framework: this is the route an App Store app may ship. It compiles a package once
// (+[MLModel compileModelAtURL:error:]) and moves the temporary .mlmodelc to a permanent path keyed by the
// package's digest, because Core ML keys its Neural Engine specialisation cache by that path (COREML.md §4.3:
// a new path means a new device compile, minutes for large models); loads it with computeUnits =
// CPUAndNeuralEngine; and predicts with MLMultiArrays over the caller's memory, reading outputs through their
// strides (the Neural Engine pads rows, COREML.md §4.6) with getBytesWithHandler:, whose handler is an
// Objective-C block built by hand per Clang's block ABI. Every class and selector is probed at load.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "anvil/backend/ane/core_foundation.hpp"
#include "anvil/backend/ane/objc_runtime.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/half.hpp"
#include "anvil/core/shape.hpp"

namespace anvil::detail::coreml {

using ane::objc_id;
using ane::objc_object;
using ane::typed_selector;

// MLComputeUnits: CPUOnly 0, CPUAndGPU 1, All 2, CPUAndNeuralEngine 3 (macOS 13).
inline constexpr long compute_units_cpu_and_neural_engine = 3;
// MLMultiArrayDataType.
inline constexpr long multi_array_float16 = 0x10000 | 16;
inline constexpr long multi_array_float32 = 0x10000 | 32;
inline constexpr long multi_array_int32 = 0x20000 | 32;

struct coreml_classes {
    ane::class_handle model = nullptr;                // MLModel
    ane::class_handle configuration = nullptr;        // MLModelConfiguration
    ane::class_handle multi_array = nullptr;          // MLMultiArray
    ane::class_handle feature_value = nullptr;        // MLFeatureValue
    ane::class_handle dictionary_provider = nullptr;  // MLDictionaryFeatureProvider
    // macOS 14.4 (nullptr before): the per-op placement (COREML.md §4.8).
    ane::class_handle compute_plan = nullptr;          // MLComputePlan
    ane::class_handle neural_engine_device = nullptr;  // MLNeuralEngineComputeDevice
    ane::class_handle cpu_device = nullptr;            // MLCPUComputeDevice
    ane::class_handle gpu_device = nullptr;            // MLGPUComputeDevice
    ane::class_handle state = nullptr;                 // MLState (macOS 15; nullptr before)
};

struct coreml_messages {
    typed_selector<objc_id(objc_id, objc_id*)> compile_model;  // +[MLModel compileModelAtURL:error:]
    typed_selector<objc_id(objc_id, objc_id, objc_id*)>
        model_with_contents;                       // +[MLModel modelWithContentsOfURL:configuration:error:]
    typed_selector<objc_id()> make_new;            // +new
    typed_selector<objc_id()> alloc;               // +alloc
    typed_selector<void(long)> set_compute_units;  // -[MLModelConfiguration setComputeUnits:]
    typed_selector<objc_id(void*, objc_id, long, objc_id, objc_id, objc_id*)>
        init_with_data_pointer;  // -[MLMultiArray
                                 // initWithDataPointer:shape:dataType:strides:deallocator:error:]
    typed_selector<objc_id(objc_id)>
        feature_value_with_multi_array;  // +[MLFeatureValue featureValueWithMultiArray:]
    typed_selector<objc_id(objc_id, objc_id*)> init_with_dictionary;  // -[MLDictionaryFeatureProvider ...]
    typed_selector<objc_id(objc_id, objc_id*)> prediction;    // -[MLModel predictionFromFeatures:error:]
    typed_selector<objc_id(objc_id)> feature_value_for_name;  // -[<MLFeatureProvider> featureValueForName:]
    typed_selector<objc_id()> multi_array_value;              // -[MLFeatureValue multiArrayValue]
    typed_selector<objc_id()> shape;                          // -[MLMultiArray shape]
    typed_selector<objc_id()> strides;                        // -[MLMultiArray strides]
    typed_selector<long()> data_type;                         // -[MLMultiArray dataType]
    typed_selector<void(void*)> get_bytes_with_handler;       // -[MLMultiArray getBytesWithHandler:]
    typed_selector<void(objc_id, objc_id, void*)>
        load_compute_plan;  // +[MLComputePlan loadContentsOfURL:configuration:completionHandler:] (optional)
    typed_selector<objc_id()> new_state;              // -[MLModel newState] (macOS 15; optional)
    typed_selector<void(objc_id)> set_function_name;  // -[MLModelConfiguration setFunctionName:] (macOS 15)
    typed_selector<objc_id(objc_id, objc_id, objc_id*)>
        prediction_with_state;  // -[MLModel predictionFromFeatures:usingState:error:] (macOS 15; optional)
    typed_selector<void(objc_id, void*)>
        multi_array_for_state;  // -[MLState getMultiArrayForStateNamed:handler:] (macOS 15; optional)
    typed_selector<void(void*)>
        get_mutable_bytes_with_handler;  // -[MLMultiArray getMutableBytesWithHandler:]
};

// The Core ML loader: the system libraries and CoreML.framework (or, with ANVIL_ANE_SIM, the simulator,
// which implements these classes too). Opened once, never closed.
class coreml_runtime final : public ane::objc_bridge {
public:
    [[nodiscard]] static const coreml_runtime& get() {
        static const coreml_runtime instance{construct_tag{}};
        return instance;
    }

    [[nodiscard]] const std::string& library() const noexcept { return library_; }
    // `_NSConcreteStackBlock`, the isa of a block literal on the stack.
    [[nodiscard]] const void* stack_block_class() const noexcept { return stack_block_; }

    coreml_classes classes;
    coreml_messages messages;

private:
    struct construct_tag {};

    explicit coreml_runtime(construct_tag)
        : objc_bridge(ane::system_runtime::get(), "Core ML bridge",
                      "CoreML.framework lacks a method anvil needs: macOS 13 or later is required") {
        load();
    }

    void load() {
#if !ANVIL_ANE_HAS_DLFCN
        throw unsupported_error("Core ML bridge: no dlopen on this platform");
#else
        const ane::system_runtime& system = ane::system_runtime::get();
        std::vector<std::string> missing;
        if (simulated_) {
            library_ = system.library();
            resolve(system.simulator_handle(), "_NSConcreteStackBlock", stack_block_, missing);
        } else {
#if defined(__APPLE__)
            library_ = "/System/Library/Frameworks/CoreML.framework/CoreML";
            open_library(library_.c_str(), "CoreML.framework", "Core ML bridge");
            resolve(RTLD_DEFAULT, "_NSConcreteStackBlock", stack_block_, missing);
#else
            throw unsupported_error(
                "Core ML bridge: Core ML needs macOS or iOS; set ANVIL_ANE_SIM=/path/to/libanvil-ane-sim.so "
                "to run device::coreml on the simulator");
#endif
        }
        auto& c = classes;
        c.model = find_class("MLModel", true, missing);
        c.configuration = find_class("MLModelConfiguration", true, missing);
        c.multi_array = find_class("MLMultiArray", true, missing);
        c.feature_value = find_class("MLFeatureValue", true, missing);
        c.dictionary_provider = find_class("MLDictionaryFeatureProvider", true, missing);
        auto& m = messages;
        find_message(m.compile_model, "compileModelAtURL:error:", c.model, true, true, missing);
        find_message(m.model_with_contents, "modelWithContentsOfURL:configuration:error:", c.model, true,
                     true, missing);
        find_message(m.make_new, "new", c.configuration, true, true, missing);
        find_message(m.alloc, "alloc", c.multi_array, true, true, missing);
        find_message(m.set_compute_units, "setComputeUnits:", c.configuration, false, true, missing);
        find_message(m.init_with_data_pointer,
                     "initWithDataPointer:shape:dataType:strides:deallocator:error:", c.multi_array, false,
                     true, missing);
        find_message(m.feature_value_with_multi_array, "featureValueWithMultiArray:", c.feature_value, true,
                     true, missing);
        find_message(m.init_with_dictionary, "initWithDictionary:error:", c.dictionary_provider, false, true,
                     missing);
        find_message(m.prediction, "predictionFromFeatures:error:", c.model, false, true, missing);
        find_message(m.feature_value_for_name, "featureValueForName:", c.dictionary_provider, false, true,
                     missing);
        find_message(m.multi_array_value, "multiArrayValue", c.feature_value, false, true, missing);
        find_message(m.shape, "shape", c.multi_array, false, true, missing);
        find_message(m.strides, "strides", c.multi_array, false, true, missing);
        find_message(m.data_type, "dataType", c.multi_array, false, true, missing);
        find_message(m.get_bytes_with_handler, "getBytesWithHandler:", c.multi_array, false, true, missing);
        c.compute_plan = find_class("MLComputePlan", false, missing);
        c.neural_engine_device = find_class("MLNeuralEngineComputeDevice", false, missing);
        c.cpu_device = find_class("MLCPUComputeDevice", false, missing);
        c.gpu_device = find_class("MLGPUComputeDevice", false, missing);
        find_message(m.load_compute_plan,
                     "loadContentsOfURL:configuration:completionHandler:", c.compute_plan, true, false,
                     missing);
        find_message(m.new_state, "newState", c.model, false, false, missing);
        find_message(m.set_function_name, "setFunctionName:", c.configuration, false, false, missing);
        c.state = find_class("MLState", false, missing);
        find_message(m.multi_array_for_state, "getMultiArrayForStateNamed:handler:", c.state, false, false,
                     missing);
        find_message(m.get_mutable_bytes_with_handler, "getMutableBytesWithHandler:", c.multi_array, false,
                     false, missing);
        find_message(m.prediction_with_state, "predictionFromFeatures:usingState:error:", c.model, false,
                     false, missing);
        if (!missing.empty()) throw_missing(library_, missing);
#endif
    }

    std::string library_;
    const void* stack_block_ = nullptr;
};

// ---- blocks (https://clang.llvm.org/docs/Block-ABI-Apple.html) -----------------------------------------

inline constexpr int block_has_signature = 1 << 30;

struct block_descriptor {
    unsigned long reserved = 0;
    unsigned long size = 0;
    const char* signature = nullptr;
};

// A block literal on the stack whose captures are the POD `Capture`: `Block_copy` copies it bytewise, so it
// needs no copy or dispose helpers. It must outlive every call of the handler (the methods anvil passes one
// to call it before they return).
template <class Capture, class Invoke>
struct stack_block {
    const void* isa;
    int flags;
    int reserved;
    Invoke invoke;
    const block_descriptor* descriptor;
    Capture capture;
};

// What the getBytesWithHandler: handler copies out: `void (^)(const void* bytes, NSInteger size)`.
struct byte_copy {
    std::vector<std::byte>* out;
};

inline void copy_bytes_invoke(void* block, const void* bytes, long size) {
    auto* self = static_cast<stack_block<byte_copy, void (*)(void*, const void*, long)>*>(block);
    if (bytes == nullptr || size <= 0) return;
    const auto* first = static_cast<const std::byte*>(bytes);
    self->capture.out->assign(first, first + size);
}

// The bytes of a multiarray (its whole backing, strides included).
inline std::vector<std::byte> multi_array_bytes(objc_id array) {
    const coreml_runtime& rt = coreml_runtime::get();
    static const block_descriptor descriptor{
        0, sizeof(stack_block<byte_copy, void (*)(void*, const void*, long)>), "v24@?0r^v8q16"};
    std::vector<std::byte> out;
    stack_block<byte_copy, void (*)(void*, const void*, long)> block{
        rt.stack_block_class(), block_has_signature, 0, &copy_bytes_invoke, &descriptor, byte_copy{&out}};
    rt.send(array, rt.messages.get_bytes_with_handler, static_cast<void*>(&block));
    return out;
}

// ---- helpers ---------------------------------------------------------------------------------------------

// The NSError's description, or `fallback` when there is none.
inline std::string error_text(objc_id error, std::string_view fallback) {
    return error != nullptr ? ane::describe_error(error) : std::string(fallback);
}

inline objc_object number_array(std::span<const std::int64_t> values) {
    std::vector<objc_object> numbers;
    std::vector<objc_id> ids;
    for (const std::int64_t v : values) {
        numbers.push_back(ane::make_number(v));
        ids.push_back(numbers.back().get());
    }
    return ane::make_array(ids);
}

inline std::vector<std::int64_t> number_values(objc_id array, std::string_view what) {
    std::vector<std::int64_t> values;
    const std::size_t count = ane::array_count(array, what);
    for (std::size_t i = 0; i < count; ++i)
        values.push_back(ane::number_value(ane::array_at(array, i, what), what));
    return values;
}

// Moves a directory, across file systems too (the temporary .mlmodelc may live on another volume).
inline void move_directory(const std::filesystem::path& from, const std::filesystem::path& to) {
    std::error_code code;
    std::filesystem::create_directories(to.parent_path(), code);
    std::filesystem::remove_all(to, code);
    std::filesystem::rename(from, to, code);
    if (!code) return;
    std::filesystem::copy(from, to, std::filesystem::copy_options::recursive, code);
    if (code) {
        std::filesystem::remove_all(to, code);
        throw io_error(message("Core ML: cannot move the compiled model '", from.string(), "' to '",
                               to.string(), "': ", code.message()));
    }
    std::filesystem::remove_all(from, code);
}

// ---- state buffers (macOS 15) ----------------------------------------------------------------------------

// What the two handlers of with_state_buffer share: the request, and what went wrong inside them (an
// exception must not cross Core ML's frames, so it is kept and rethrown once the call returns).
struct state_access {
    const std::string* name;
    std::span<const std::int64_t> shape;
    const std::function<void(std::byte*, std::span<const std::int64_t>)>* access;
    std::exception_ptr failure;
    bool called = false;
};

struct state_capture {
    state_access* request;
};

// getMutableBytesWithHandler:'s handler, `void (^)(void* bytes, NSInteger size, NSArray<NSNumber*>*
// strides)`: the strides (in elements) must keep the innermost dimension contiguous and stay inside `size`
// bytes.
inline void state_bytes_invoke(void* block, void* bytes, long size, objc_id strides) {
    auto* self = static_cast<stack_block<state_capture, void (*)(void*, void*, long, objc_id)>*>(block);
    state_access& r = *self->capture.request;
    r.called = true;
    try {
        const std::vector<std::int64_t> s = number_values(strides, "the state buffer's strides");
        const std::string what = message("Core ML: state '", *r.name, "'");
        bool positive = s.size() == r.shape.size() && !s.empty() && s.back() == 1;
        std::size_t last = 0;  // the last element the shape and strides reach
        for (std::size_t d = 0; positive && d < s.size(); ++d) {
            positive = s[d] > 0;
            last += static_cast<std::size_t>(r.shape[d] - 1) * static_cast<std::size_t>(s[d]);
        }
        if (!positive) {
            throw anvil::error(message(what, ": its buffer's strides are not those of a ",
                                       extents_to_string(r.shape),
                                       " array with a contiguous innermost dimension"));
        }
        if (bytes == nullptr || size < 0 || static_cast<std::size_t>(size) < (last + 1) * 2) {
            throw anvil::error(message(what, ": its buffer has ", size,
                                       " bytes, fewer than its shape and strides need (", (last + 1) * 2,
                                       ")"));
        }
        (*r.access)(static_cast<std::byte*>(bytes), s);
    } catch (...) {
        r.failure = std::current_exception();
    }
}

// getMultiArrayForStateNamed:handler:'s handler, `void (^)(MLMultiArray* buffer)`: checks the view is the
// fp16 array of the shape asked for, then opens its bytes for writing.
inline void state_array_invoke(void* block, objc_id array) {
    auto* self = static_cast<stack_block<state_capture, void (*)(void*, objc_id)>*>(block);
    state_access& r = *self->capture.request;
    try {
        const coreml_runtime& rt = coreml_runtime::get();
        if (array == nullptr) throw anvil::error(message("Core ML: the model has no state '", *r.name, "'"));
        const std::vector<std::int64_t> shape = number_values(rt.send(array, rt.messages.shape), "shape");
        if (!std::equal(shape.begin(), shape.end(), r.shape.begin(), r.shape.end()) ||
            rt.send(array, rt.messages.data_type) != multi_array_float16) {
            throw anvil::error(message("Core ML: state '", *r.name, "' is ", extents_to_string(shape),
                                       ", not the fp16 ", extents_to_string(r.shape), " buffer expected"));
        }
        static const block_descriptor descriptor{
            0, sizeof(stack_block<state_capture, void (*)(void*, void*, long, objc_id)>), "v32@?0^v8q16@24"};
        stack_block<state_capture, void (*)(void*, void*, long, objc_id)> bytes_block{
            rt.stack_block_class(), block_has_signature, 0,
            &state_bytes_invoke,    &descriptor,         state_capture{&r}};
        rt.send(array, rt.messages.get_mutable_bytes_with_handler, static_cast<void*>(&bytes_block));
    } catch (...) {
        r.failure = std::current_exception();
    }
}

// Opens the fp16 buffer of state `name` in `state` (an MLState from coreml_model::new_state), of `shape`, for
// reading and writing in place: `access(bytes, strides)` (strides in elements, the innermost 1) runs inside
// Core ML's handlers, which are synchronous (the buffer may move between calls, so nothing keeps its
// address). Throws anvil::error when the state is missing, has another shape or layout, or `access` throws.
inline void with_state_buffer(const objc_object& state, const std::string& name,
                              std::span<const std::int64_t> shape,
                              const std::function<void(std::byte*, std::span<const std::int64_t>)>& access) {
    const coreml_runtime& rt = coreml_runtime::get();
    if (!rt.messages.multi_array_for_state.available || !rt.messages.get_mutable_bytes_with_handler.available)
        throw unsupported_error(
            "Core ML: reading or writing a state buffer needs macOS 15 / iOS 18 (MLState)");
    const ane::autorelease_pool pool;
    state_access request{&name, shape, &access, nullptr, false};
    static const block_descriptor descriptor{0, sizeof(stack_block<state_capture, void (*)(void*, objc_id)>),
                                             "v16@?0@8"};
    stack_block<state_capture, void (*)(void*, objc_id)> block{
        rt.stack_block_class(), block_has_signature, 0,
        &state_array_invoke,    &descriptor,         state_capture{&request}};
    const objc_object key = ane::make_string(name);
    rt.send(state.get(), rt.messages.multi_array_for_state, key.get(), static_cast<void*>(&block));
    if (request.failure) std::rethrow_exception(request.failure);
    if (!request.called) {
        throw anvil::error(message(
            "Core ML: -[MLState getMultiArrayForStateNamed:handler:] did not open state '", name, "'"));
    }
}

// ---- MLComputePlan -----------------------------------------------------------------------------------

// What the MLComputePlan handler hands over: `void (^)(MLComputePlan* plan, NSError* error)`. Core ML calls
// it on another thread, possibly after loadContentsOfURL: returns, so the capture points at a heap record the
// caller waits on (and leaks, should the wait time out, since the handler may still come).
struct plan_wait {
    std::mutex mutex;
    std::condition_variable ready;
    bool done = false;
    objc_id plan = nullptr;  // retained by the handler
    std::string error;
};

struct plan_capture {
    plan_wait* wait;
};

inline void plan_loaded_invoke(void* block, objc_id plan, objc_id error) {
    auto* self = static_cast<stack_block<plan_capture, void (*)(void*, objc_id, objc_id)>*>(block);
    plan_wait& wait = *self->capture.wait;
    const std::string why = plan == nullptr ? error_text(error, "no plan and no error given") : std::string();
    if (plan != nullptr) ane::system_runtime::get().objc.objc_retain(plan);
    const std::lock_guard lock(wait.mutex);
    wait.plan = plan;
    wait.error = why;
    wait.done = true;
    wait.ready.notify_all();
}

// Where Core ML's compute plan runs one op of an ML program.
struct op_device {
    std::string op;      // "ios16.linear"
    std::string output;  // its first result's name
    std::string device;  // "ane", "cpu", "gpu" or "unknown"
};

// The device of every op of a compiled model's `main` function, as +[MLComputePlan loadContentsOfURL:...]
// reports it for computeUnits = CPUAndNeuralEngine (COREML.md §4.8); consts, which have no device, are
// left out. nullopt where MLComputePlan is missing (before macOS 14.4). Throws anvil::error when the plan
// cannot be made or read.
inline std::optional<std::vector<op_device>> compute_plan(const std::filesystem::path& compiled) {
    const coreml_runtime& rt = coreml_runtime::get();
    // Looked up again on every call, as query_device does: a simulator told to drop the class is believed.
    if (!rt.messages.load_compute_plan.available || rt.objc.objc_getClass("MLComputePlan") == nullptr)
        return std::nullopt;
    const ane::autorelease_pool pool;
    const objc_object configuration =
        objc_object::adopt(rt.send(rt.classes.configuration, rt.messages.make_new));
    if (!configuration) throw anvil::error("Core ML: +[MLModelConfiguration new] returned nil");
    rt.send(configuration.get(), rt.messages.set_compute_units, compute_units_cpu_and_neural_engine);
    const objc_object url = ane::make_file_url(compiled.string(), true);
    static const block_descriptor descriptor{
        0, sizeof(stack_block<plan_capture, void (*)(void*, objc_id, objc_id)>), "v24@?0@8@16"};
    auto* wait = new plan_wait{};
    stack_block<plan_capture, void (*)(void*, objc_id, objc_id)> block{
        rt.stack_block_class(), block_has_signature, 0, &plan_loaded_invoke, &descriptor, plan_capture{wait}};
    rt.send(rt.classes.compute_plan, rt.messages.load_compute_plan, url.get(), configuration.get(),
            static_cast<void*>(&block));
    {
        std::unique_lock lock(wait->mutex);
        if (!wait->ready.wait_for(lock, std::chrono::minutes(5), [&] { return wait->done; })) {
            throw anvil::error(message("Core ML: MLComputePlan for '", compiled.string(),
                                       "' did not call its handler within 5 minutes"));
        }
    }
    const std::unique_ptr<plan_wait> owned(wait);
    if (wait->plan == nullptr)
        throw anvil::error(
            message("Core ML: MLComputePlan failed for '", compiled.string(), "': ", wait->error));
    const objc_object plan = objc_object::adopt(wait->plan);
    const auto get = [&](objc_id receiver, const char* selector) {
        return rt.send<objc_id>(receiver, rt.selector_named(selector));
    };
    const objc_id structure = get(plan.get(), "modelStructure");
    const objc_id program = structure != nullptr ? get(structure, "program") : nullptr;
    if (program == nullptr) throw anvil::error("Core ML: the compute plan's model is not an ML program");
    const objc_id function =
        ane::dictionary_lookup(get(program, "functions"), "main", "the program's functions");
    if (function == nullptr) throw anvil::error("Core ML: the compute plan has no function 'main'");
    const objc_id operations = get(get(function, "block"), "operations");
    const auto is_kind = [&](objc_id object, ane::class_handle cls) {
        return cls != nullptr &&
               rt.send<bool>(object, rt.selector_named("isKindOfClass:"), static_cast<void*>(cls));
    };
    std::vector<op_device> devices;
    const std::size_t count = ane::array_count(operations, "the block's operations");
    for (std::size_t i = 0; i < count; ++i) {
        const objc_id operation = ane::array_at(operations, i, "the block's operations");
        const objc_id usage = rt.send<objc_id>(
            plan.get(), rt.selector_named("computeDeviceUsageForMLProgramOperation:"), operation);
        if (usage == nullptr) continue;  // a const
        op_device entry;
        entry.op = ane::string_value(get(operation, "operatorName"), "operatorName");
        const objc_id outputs = get(operation, "outputs");
        if (outputs != nullptr && ane::array_count(outputs, "outputs") > 0)
            entry.output = ane::string_value(get(ane::array_at(outputs, 0, "outputs"), "name"), "name");
        const objc_id device = get(usage, "preferredComputeDevice");
        entry.device = is_kind(device, rt.classes.neural_engine_device) ? "ane"
                       : is_kind(device, rt.classes.cpu_device)         ? "cpu"
                       : is_kind(device, rt.classes.gpu_device)         ? "gpu"
                                                                        : "unknown";
        devices.push_back(std::move(entry));
    }
    return devices;
}

// A loaded Core ML model with fp16 [1, C, 1, W] inputs and outputs (what the lowering declares).
class coreml_model {
public:
    // Compiles the package at `package` into `compiled` (a permanent .mlmodelc path): Core ML's temporary
    // result is moved there. Throws anvil::error with Core ML's message.
    static void compile(const std::filesystem::path& package, const std::filesystem::path& compiled) {
        const coreml_runtime& rt = coreml_runtime::get();
        const ane::autorelease_pool pool;
        const objc_object url = ane::make_file_url(package.string(), true);
        objc_id error = nullptr;
        const objc_id temporary = rt.send(rt.classes.model, rt.messages.compile_model, url.get(), &error);
        if (temporary == nullptr) {
            throw error_type(message("Core ML: compileModelAtURL: failed for '", package.string(),
                                     "': ", error_text(error, "no error given")));
        }
        move_directory(ane::url_path(temporary, "the compiled model's URL"), compiled);
    }

    // Loads a compiled model with computeUnits = CPUAndNeuralEngine.
    // `function`: one function of a multi-function model (macOS 15); empty: its default function.
    static coreml_model load(const std::filesystem::path& compiled, const std::string& function = {}) {
        const coreml_runtime& rt = coreml_runtime::get();
        const ane::autorelease_pool pool;
        const objc_object configuration =
            objc_object::adopt(rt.send(rt.classes.configuration, rt.messages.make_new));
        if (!configuration) throw error("Core ML: +[MLModelConfiguration new] returned nil");
        rt.send(configuration.get(), rt.messages.set_compute_units, compute_units_cpu_and_neural_engine);
        if (!function.empty()) {
            if (!rt.messages.set_function_name.available) {
                throw unsupported_error(message("Core ML: loading the function ", function,
                                                " of a multi-function model needs macOS 15 / iOS 18"));
            }
            const objc_object name = ane::make_string(function);
            rt.send(configuration.get(), rt.messages.set_function_name, name.get());
        }
        const objc_object url = ane::make_file_url(compiled.string(), true);
        objc_id error = nullptr;
        const objc_id model = rt.send(rt.classes.model, rt.messages.model_with_contents, url.get(),
                                      configuration.get(), &error);
        if (model == nullptr) {
            throw error_type(message("Core ML: cannot load '", compiled.string(),
                                     "': ", error_text(error, "no error given")));
        }
        coreml_model made;
        made.model_ = objc_object::retain(model);
        return made;
    }

    // An fp16 [1, C, 1, W] surface-shaped array with padded rows, or (`shape` given) a packed row-major
    // array of that shape and `data_type` (an exported model's logical I/O).
    struct input {
        std::string name;
        std::int64_t channels = 0, width = 0;
        std::size_t channel_stride = 0;  // bytes
        std::byte* data = nullptr;       // channels * channel_stride bytes, fp16
        std::vector<std::int64_t> shape = {};
        long data_type = multi_array_float16;
    };
    struct output {
        std::string name;
        std::int64_t channels = 0, width = 0;
        std::size_t channel_stride = 0;  // bytes, of `data`
        std::byte* data = nullptr;       // written: channels * channel_stride bytes, fp16
        std::vector<std::int64_t> shape = {};
        long data_type = multi_array_float16;
    };

    // Whether this Core ML has MLState (macOS 15): states, their buffers, stateful predictions. The class is
    // looked up again on every call, as compute_plan does: a simulator told to drop it is believed.
    [[nodiscard]] static bool supports_states() {
        const coreml_runtime& rt = coreml_runtime::get();
        return rt.messages.new_state.available && rt.messages.prediction_with_state.available &&
               rt.messages.multi_array_for_state.available &&
               rt.messages.get_mutable_bytes_with_handler.available &&
               rt.objc.objc_getClass("MLState") != nullptr;
    }

    // A new MLState for this model (macOS 15): its state buffers (a stateful package's KV caches), zeros
    // at first, read and written in place by each predict given it. Throws unsupported_error before macOS 15.
    [[nodiscard]] objc_object new_state() const {
        const coreml_runtime& rt = coreml_runtime::get();
        if (!rt.messages.new_state.available || !rt.messages.prediction_with_state.available) {
            throw unsupported_error(
                "Core ML: this model has states (MLState), which need macOS 15 / iOS 18; this Core ML lacks "
                "-[MLModel newState]");
        }
        objc_object state = objc_object::adopt(rt.send(model_.get(), rt.messages.new_state));  // +1: `new`
        if (!state) throw error_type("Core ML: -[MLModel newState] returned nil");
        return state;
    }

    // One prediction: inputs are MLMultiArrays over the callers' buffers; each output is read through its
    // own strides into the buffer given for it. With `state` (from new_state), a stateful prediction.
    void predict(std::span<const input> inputs, std::span<const output> outputs,
                 const objc_object* state = nullptr) const {
        const coreml_runtime& rt = coreml_runtime::get();
        const ane::autorelease_pool pool;
        std::vector<objc_object> keys, values, arrays;
        std::vector<std::pair<objc_id, objc_id>> pairs;
        for (const input& in : inputs) {
            const std::int64_t row = static_cast<std::int64_t>(in.channel_stride / 2);
            std::vector<std::int64_t> shape{1, in.channels, 1, in.width};
            std::vector<std::int64_t> strides{in.channels * row, row, row, 1};
            if (!in.shape.empty()) {
                shape = in.shape;
                strides = packed_strides(in.shape);
            }
            const objc_object shape_array = number_array(shape);
            const objc_object stride_array = number_array(strides);
            objc_id error = nullptr;
            const objc_id allocated = rt.send(rt.classes.multi_array, rt.messages.alloc);
            const objc_id array = rt.send(allocated, rt.messages.init_with_data_pointer,
                                          static_cast<void*>(in.data), shape_array.get(), in.data_type,
                                          stride_array.get(), static_cast<objc_id>(nullptr), &error);
            if (array == nullptr) {
                throw error_type(message("Core ML: input '", in.name, "': cannot make its MLMultiArray: ",
                                         error_text(error, "no error given")));
            }
            arrays.push_back(objc_object::adopt(array));
            keys.push_back(ane::make_string(in.name));
            values.push_back(objc_object::retain(
                rt.send(rt.classes.feature_value, rt.messages.feature_value_with_multi_array, array)));
            pairs.emplace_back(keys.back().get(), values.back().get());
        }
        const objc_object dictionary = ane::make_dictionary(pairs);
        objc_id error = nullptr;
        const objc_id allocated = rt.send(rt.classes.dictionary_provider, rt.messages.alloc);
        const objc_object provider = objc_object::adopt(
            rt.send(allocated, rt.messages.init_with_dictionary, dictionary.get(), &error));
        if (!provider) {
            throw error_type(
                message("Core ML: cannot make the input features: ", error_text(error, "no error given")));
        }
        error = nullptr;
        const objc_id result = state != nullptr
                                   ? rt.send(model_.get(), rt.messages.prediction_with_state, provider.get(),
                                             state->get(), &error)
                                   : rt.send(model_.get(), rt.messages.prediction, provider.get(), &error);
        if (result == nullptr) {
            throw error_type(
                message("Core ML: predictionFromFeatures: failed: ", error_text(error, "no error given")));
        }
        for (const output& out : outputs)
            read_output(result, out);
    }

    [[nodiscard]] objc_id get() const noexcept { return model_.get(); }

private:
    using error_type = anvil::error;

    static std::vector<std::int64_t> packed_strides(const std::vector<std::int64_t>& shape) {
        std::vector<std::int64_t> strides(shape.size(), 1);
        for (std::size_t d = shape.size(); d-- > 1;)
            strides[d - 1] = strides[d] * shape[d];
        return strides;
    }

    static std::size_t element_bytes(long type) { return type == multi_array_float16 ? 2 : 4; }

    // A logical output: its elements in row-major order into out.data, through the array's strides, as
    // out.data_type (fp32 arrays narrowed to fp16 where fp16 is asked for).
    static void read_logical(objc_id array, const output& out) {
        const coreml_runtime& rt = coreml_runtime::get();
        const std::vector<std::int64_t> shape = number_values(rt.send(array, rt.messages.shape), "shape");
        const std::vector<std::int64_t> strides =
            number_values(rt.send(array, rt.messages.strides), "strides");
        const long type = rt.send(array, rt.messages.data_type);
        const bool convertible =
            type == out.data_type || (type == multi_array_float32 && out.data_type == multi_array_float16);
        if (shape != out.shape || strides.size() != shape.size() || !convertible) {
            throw error_type(
                message("Core ML: output '", out.name, "' is not the array the model describes"));
        }
        const std::vector<std::byte> bytes = multi_array_bytes(array);
        const std::size_t size = element_bytes(type);
        std::int64_t count = 1;
        for (const std::int64_t d : shape)
            count *= d;
        std::vector<std::int64_t> index(shape.size(), 0);
        for (std::int64_t i = 0; i < count; ++i) {
            std::int64_t at = 0;
            for (std::size_t d = 0; d < shape.size(); ++d)
                at += index[d] * strides[d];
            const std::size_t from = static_cast<std::size_t>(at) * size;
            if (at < 0 || from + size > bytes.size()) {
                throw error_type(message("Core ML: output '", out.name, "' has ", bytes.size(),
                                         " bytes, fewer than its shape and strides need"));
            }
            std::byte* to = out.data + static_cast<std::size_t>(i) * element_bytes(out.data_type);
            if (type == out.data_type) {
                std::memcpy(to, bytes.data() + from, size);
            } else {
                float f = 0.0f;
                std::memcpy(&f, bytes.data() + from, 4);
                const std::uint16_t h = half(f).bits;
                std::memcpy(to, &h, 2);
            }
            for (std::size_t d = shape.size(); d-- > 0;) {
                if (++index[d] < shape[d]) break;
                index[d] = 0;
            }
        }
    }

    static void read_output(objc_id result, const output& out) {
        const coreml_runtime& rt = coreml_runtime::get();
        const objc_object name = ane::make_string(out.name);
        const objc_id value = rt.send(result, rt.messages.feature_value_for_name, name.get());
        const objc_id array = value != nullptr ? rt.send(value, rt.messages.multi_array_value) : nullptr;
        if (array == nullptr)
            throw error_type(message("Core ML: the prediction has no output '", out.name, "'"));
        if (!out.shape.empty()) return read_logical(array, out);
        const std::vector<std::int64_t> shape = number_values(rt.send(array, rt.messages.shape), "shape");
        const std::vector<std::int64_t> strides =
            number_values(rt.send(array, rt.messages.strides), "strides");
        const long type = rt.send(array, rt.messages.data_type);
        const std::vector<std::int64_t> expected{1, out.channels, 1, out.width};
        if (shape != expected || strides.size() != 4 ||
            (type != multi_array_float16 && type != multi_array_float32)) {
            throw error_type(message("Core ML: output '", out.name, "' is not the fp16 [1, ", out.channels,
                                     ", 1, ", out.width, "] array the program declares"));
        }
        const std::size_t element = type == multi_array_float16 ? 2 : 4;
        const std::vector<std::byte> bytes = multi_array_bytes(array);
        // Row c starts at c * strides[1] elements; the last row needs `width` elements.
        const auto channel_stride = static_cast<std::size_t>(strides[1]);
        const auto step = static_cast<std::size_t>(strides[3]);
        const std::size_t needed = ((static_cast<std::size_t>(out.channels) - 1) * channel_stride +
                                    (static_cast<std::size_t>(out.width) - 1) * step + 1) *
                                   element;
        if (strides[1] <= 0 || strides[3] <= 0 || bytes.size() < needed) {
            throw error_type(message("Core ML: output '", out.name, "' has ", bytes.size(),
                                     " bytes, fewer than its shape and strides need (", needed, ")"));
        }
        for (std::int64_t c = 0; c < out.channels; ++c) {
            std::byte* row = out.data + static_cast<std::size_t>(c) * out.channel_stride;
            for (std::int64_t w = 0; w < out.width; ++w) {
                const std::size_t at =
                    (static_cast<std::size_t>(c) * channel_stride + static_cast<std::size_t>(w) * step) *
                    element;
                if (element == 2) {
                    std::memcpy(row + 2 * w, bytes.data() + at, 2);
                } else {
                    float f = 0.0f;
                    std::memcpy(&f, bytes.data() + at, 4);
                    const std::uint16_t h = half(f).bits;
                    std::memcpy(row + 2 * w, &h, 2);
                }
            }
        }
    }

    objc_object model_;
};

}  // namespace anvil::detail::coreml
