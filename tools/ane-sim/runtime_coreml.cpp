// anvil's ANE simulator: the public CoreML.framework classes the Core ML backend uses (COREML.md §7), over
// the same MIL part as the private path. compileModelAtURL: reads and validates the package as Core ML does
// (runtime_coreml_package.cpp) and writes a temporary .mlmodelc holding each function as MIL text (model.mil,
// as a real one does) and the weights; modelWithContentsOfURL: parses that MIL with the simulator's parser
// and validator and prepares it, counting a Neural Engine specialisation the first time a path is loaded
// (Core ML's cache is keyed by the .mlmodelc's path, COREML.md §4.3); predictionFromFeatures: executes it
// with fp16 numerics and returns outputs whose rows are padded to 64 bytes, as the Neural Engine pads them
// (§4.6), so a caller that ignores strides reads garbage. Counters: coreml_compiles, coreml_loads,
// coreml_device_compiles, coreml_cache_hits, coreml_predictions.
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <anvil/core/sha256.hpp>

#include "runtime.hpp"
#include "runtime_coreml_package.hpp"

// Block literals' isa: a Mac's libsystem_blocks exports these (the Block ABI); the backend resolves the
// stack one with dlsym and puts its address in every block it builds.
extern "C" {
__attribute__((visibility("default"))) void* _NSConcreteStackBlock[32] = {};
__attribute__((visibility("default"))) void* _NSConcreteGlobalBlock[32] = {};
void* objc_autoreleasePoolPush();  // runtime_objc.cpp
void objc_autoreleasePoolPop(void* token);
}

namespace anvil_sim {

namespace {

constexpr unsigned long configuration_type_id = 0x4d4c01;
constexpr unsigned long model_type_id = 0x4d4c02;
constexpr unsigned long multi_array_type_id = 0x4d4c03;
constexpr unsigned long feature_value_type_id = 0x4d4c04;
constexpr unsigned long provider_type_id = 0x4d4c05;
constexpr unsigned long compute_plan_type_id = 0x4d4c06;
constexpr unsigned long structure_type_id = 0x4d4c07;
constexpr unsigned long device_usage_type_id = 0x4d4c08;
constexpr unsigned long compute_device_type_id = 0x4d4c09;
constexpr unsigned long state_type_id = 0x4d4c0a;

constexpr long array_float16 = 65552;
constexpr long array_float32 = 65568;
constexpr long array_int32 = 131104;

struct configuration_object : object {
    static constexpr const char* class_name = "MLModelConfiguration";
    long compute_units = 2;     // MLComputeUnitsAll, Core ML's default
    std::string function_name;  // macOS 15: the function of a multi-function model; empty: the default
};

struct function_model {
    coreml::function_program function;
    std::unique_ptr<mil_program> program;
};

struct model_object : object {
    static constexpr const char* class_name = "MLModel";
    std::string path;
    long compute_units = 2;
    function_model loaded;
};

// An MLState: one zero-filled fp16 buffer per state the model's program declares (Apple's newState: "The
// allocated state buffers are initialized to zeros"), for predictions of a model loaded from the same
// compiled model whose function declares the same states: the functions of one multi-function model share
// it (Anemll's chat scripts make one state from the `infer` function and pass it to `prefill` too);
// any other model is refused.
struct state_object : object {
    static constexpr const char* class_name = "MLState";
    std::string path;  // the .mlmodelc of the model that made it
    std::vector<io_tensor> states;
    std::vector<std::vector<std::uint16_t>> buffers;
};

struct multi_array_object : object {
    static constexpr const char* class_name = "MLMultiArray";
    bool initialized = false;
    std::vector<std::int64_t> shape, strides;
    long data_type = 0;
    std::byte* data = nullptr;     // the caller's memory, or owned.data()
    std::vector<std::byte> owned;  // outputs the simulator made
};

struct feature_value_object : object {
    static constexpr const char* class_name = "MLFeatureValue";
    ~feature_value_object() { release_object(array, "MLFeatureValue dealloc"); }
    multi_array_object* array = nullptr;
};

struct provider_object : object {
    static constexpr const char* class_name = "MLDictionaryFeatureProvider";
    ~provider_object() { release_object(dictionary, "MLDictionaryFeatureProvider dealloc"); }
    bool initialized = false;
    dictionary_object* dictionary = nullptr;
};

void set_coreml_error(void** error_out, long code, std::string description) {
    if (error_out == nullptr) return;
    auto* error = make_object<error_object>(make_string("com.apple.CoreML"), code, std::move(description));
    *error_out = autorelease_object(error, "NSError");
}

std::size_t element_size(long data_type) {
    switch (data_type) {
        case array_float16:
            return 2;
        case array_float32:
        case array_int32:
            return 4;
        default:
            return 0;
    }
}

long array_type_of(element_type type) {
    return type == element_type::fp16   ? array_float16
           : type == element_type::fp32 ? array_float32
                                        : array_int32;
}

std::string array_type_name(long type) {
    return type == array_float16 ? "FLOAT16" : type == array_float32 ? "FLOAT32" : "INT32";
}

// The array's elements in row-major order, read through its strides.
std::vector<std::byte> packed_copy(const multi_array_object& array) {
    const std::size_t size = element_size(array.data_type);
    std::int64_t count = 1;
    for (const std::int64_t d : array.shape)
        count *= d;
    std::vector<std::byte> out(static_cast<std::size_t>(count) * size);
    std::vector<std::int64_t> index(array.shape.size(), 0);
    for (std::int64_t i = 0; i < count; ++i) {
        std::int64_t from = 0;
        for (std::size_t d = 0; d < index.size(); ++d)
            from += index[d] * array.strides[d];
        std::memcpy(out.data() + static_cast<std::size_t>(i) * size,
                    array.data + static_cast<std::size_t>(from) * size, size);
        for (std::size_t d = index.size(); d-- > 0;) {
            if (++index[d] < array.shape[d]) break;
            index[d] = 0;
        }
    }
    return out;
}

std::string read_bytes(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw sim_failure(coreml::error_codes::io, "cannot read '" + path.string() + "'");
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::atomic<long> compiled_count{0};

// ---- MLModel

// +[MLModel compileModelAtURL:error:]: validates the package, writes <tmp>/anvil-sim-coreml-<pid>-<n>/
// <stem>.mlmodelc and returns its URL (autoreleased). Core ML leaves the result in a temporary place that the
// caller must move (COREML.md §4.3).
id model_compile(id, sel, id url, void** error) {
    lock_guard lock(sim().mutex);
    auto* typed = as<url_object>(url);
    if (typed == nullptr) {
        record_violation("+[MLModel compileModelAtURL:error:] was given " + describe(url) +
                         ", expected an NSURL");
        set_coreml_error(error, coreml::error_codes::generic, "compileModelAtURL: the URL is not an NSURL");
        return nullptr;
    }
    const std::filesystem::path package_path(typed->path);
    try {
        const coreml::package package = coreml::read_package(package_path);
        const std::filesystem::path out =
            std::filesystem::path(temporary_directory()) /
            ("anvil-sim-coreml-" + std::to_string(::getpid()) + "-" + std::to_string(++compiled_count)) /
            (package_path.stem().string() + ".mlmodelc");
        std::error_code code;
        std::filesystem::create_directories(out / "weights", code);
        if (code) throw sim_failure(coreml::error_codes::io, "cannot create '" + out.string() + "'");
        // coremldata.bin: here the model's own protobuf (a real one embeds its description in a private
        // container); model.mil: the default function's text, as a real .mlmodelc holds it.
        const std::filesystem::path model_file = package.model_directory / "model.mlmodel";
        std::filesystem::copy_file(model_file, out / "coremldata.bin", code);
        for (const auto& name : package.weight_files)
            if (!code)
                std::filesystem::copy_file(package.model_directory / "weights" / name, out / "weights" / name,
                                           code);
        if (code)
            throw sim_failure(coreml::error_codes::io,
                              "cannot write '" + out.string() + "': " + code.message());
        for (const auto& function : package.functions) {
            std::ofstream mil(
                out / (function.name == package.default_function ? "model.mil" : function.name + ".mil"));
            mil << function.mil;
        }
        add_counter("coreml_compiles", 1);
        return autorelease_object(make_object<url_object>(out.string(), true), "compileModelAtURL:");
    } catch (const sim_failure& failure) {
        set_coreml_error(error, failure.code, std::string("compileModelAtURL: ") + failure.what());
    } catch (const std::exception& failure) {
        set_coreml_error(error, coreml::error_codes::generic,
                         std::string("compileModelAtURL: ") + failure.what());
    }
    return nullptr;
}

// Whether Core ML has specialised this .mlmodelc path for the device before (its cache is keyed by the path,
// and persists across processes): a marker per path digest under the temporary directory.
bool specialised_before(const std::string& path, const std::string& program_text) {
    const std::string key = anvil::detail::sha256().update(path).finish_hex();
    const std::string digest = anvil::detail::sha256().update(program_text).finish_hex();
    const std::filesystem::path marker =
        std::filesystem::path(temporary_directory()) / "anvil-sim-e5-cache" / key;
    std::error_code code;
    if (std::filesystem::is_regular_file(marker, code)) {
        std::ifstream in(marker);
        std::string stored;
        in >> stored;
        if (stored == digest) return true;
    }
    std::filesystem::create_directories(marker.parent_path(), code);
    std::ofstream(marker) << digest;
    return false;
}

// A compiled model's default function, parsed and validated as a Core ML program: ops the Neural Engine's
// rules refuse are placed on the CPU (its compute plan) instead of failing. Throws sim_failure.
function_model read_compiled(const std::filesystem::path& dir, const std::string& function_name) {
    if (dir.extension() != ".mlmodelc" || !std::filesystem::is_regular_file(dir / "coremldata.bin"))
        throw sim_failure(
            coreml::error_codes::io,
            "'" + dir.string() + "' is not a compiled model (.mlmodelc); compile the package first");
    const coreml::package package = coreml::read_model(read_bytes(dir / "coremldata.bin"), dir);
    const std::string& wanted = function_name.empty() ? package.default_function : function_name;
    const auto found = std::find_if(package.functions.begin(), package.functions.end(),
                                    [&](const auto& f) { return f.name == wanted; });
    if (found == package.functions.end()) {
        std::string names;
        for (const auto& f : package.functions)
            names += (names.empty() ? "" : ", ") + f.name;
        throw sim_failure(coreml::error_codes::invalid_model,
                          "the model has no function '" + wanted + "' (it has " + names + ")");
    }
    std::vector<weight_file> weights;
    for (const auto& name : package.weight_files) {
        const std::string bytes = read_bytes(dir / "weights" / name);
        weight_file w;
        w.key = "@model_path/weights/" + name;
        w.data.resize(bytes.size());
        std::memcpy(w.data.data(), bytes.data(), bytes.size());
        weights.push_back(std::move(w));
    }
    std::sort(weights.begin(), weights.end(),
              [](const weight_file& a, const weight_file& b) { return a.key < b.key; });
    rules options = sim().options;
    options.coreml_program = true;
    function_model loaded;
    loaded.function = *found;
    loaded.program = mil_program::compile(found->mil, weights, options);
    return loaded;
}

// +[MLModel modelWithContentsOfURL:configuration:error:]
id model_load(id, sel, id url, id configuration, void** error) {
    lock_guard lock(sim().mutex);
    auto* typed = as<url_object>(url);
    auto* config = configuration != nullptr ? as<configuration_object>(configuration) : nullptr;
    if (typed == nullptr || (configuration != nullptr && config == nullptr)) {
        record_violation("+[MLModel modelWithContentsOfURL:configuration:error:] was given " + describe(url) +
                         " and " + describe(configuration));
        set_coreml_error(error, coreml::error_codes::generic, "modelWithContentsOfURL: bad arguments");
        return nullptr;
    }
    const std::filesystem::path dir(typed->path);
    try {
        if (sim().options.coreml_fail_loads > 0) {
            --sim().options.coreml_fail_loads;
            throw sim_failure(
                coreml::error_codes::generic,
                "the model could not be loaded for the requested compute units (injected by the "
                "simulator: coreml_fail_loads)");
        }
        auto* model = make_object<model_object>();
        model->path = dir.string();
        model->compute_units = config != nullptr ? config->compute_units : 2;
        try {
            model->loaded = read_compiled(dir, config != nullptr ? config->function_name : std::string());
        } catch (...) {
            release_object(model, "modelWithContentsOfURL:");
            throw;
        }
        const std::string& program_text = model->loaded.function.mil;
        add_counter("coreml_loads", 1);
        add_counter(
            specialised_before(dir.string(), program_text) ? "coreml_cache_hits" : "coreml_device_compiles",
            1);
        return autorelease_object(model, "modelWithContentsOfURL:");
    } catch (const sim_failure& failure) {
        set_coreml_error(error, failure.code, std::string("modelWithContentsOfURL: ") + failure.what());
    } catch (const std::exception& failure) {
        set_coreml_error(error, coreml::error_codes::generic,
                         std::string("modelWithContentsOfURL: ") + failure.what());
    }
    return nullptr;
}

// -[MLModel newState] (macOS 15): +1, as its name says (ARC's `new` family).
id model_new_state(id self, sel) {
    lock_guard lock(sim().mutex);
    auto* model = receiver<model_object>(self, "newState");
    if (model == nullptr) return nullptr;
    auto* state = make_object<state_object>();
    state->path = model->path;
    state->states = model->loaded.program->states();
    for (const io_tensor& t : state->states) {
        std::size_t count = 1;
        for (const std::int64_t d : t.shape)
            count *= static_cast<std::size_t>(d);
        state->buffers.emplace_back(count, std::uint16_t{0});
    }
    add_counter("coreml_states", 1);
    return state;
}

id predict(model_object* model, id features, state_object* state, void** error);

// -[MLModel predictionFromFeatures:error:]
id model_predict(id self, sel, id features, void** error) {
    lock_guard lock(sim().mutex);
    auto* model = receiver<model_object>(self, "predictionFromFeatures:error:");
    if (model == nullptr) return nullptr;
    if (!model->loaded.program->states().empty()) {
        set_coreml_error(error, coreml::error_codes::generic,
                         "predictionFromFeatures: the model has states; use "
                         "predictionFromFeatures:usingState:error: with a state from newState");
        return nullptr;
    }
    return predict(model, features, nullptr, error);
}

// -[MLModel predictionFromFeatures:usingState:error:] (macOS 15): the state's buffers are read and written
// in place. Apple: predictions that use one state must be serialised (the simulator's lock does that).
id model_predict_with_state(id self, sel, id features, id state_id, void** error) {
    lock_guard lock(sim().mutex);
    auto* model = receiver<model_object>(self, "predictionFromFeatures:usingState:error:");
    if (model == nullptr) return nullptr;
    auto* state = as<state_object>(state_id);
    if (state == nullptr) {
        record_violation("-[MLModel predictionFromFeatures:usingState:error:]: the state is " +
                         describe(state_id) + ", expected an MLState");
        set_coreml_error(error, coreml::error_codes::generic, "predictionFromFeatures:usingState: no state");
        return nullptr;
    }
    const auto& declared = model->loaded.program->states();
    const bool same_states =
        declared.size() == state->states.size() &&
        std::equal(declared.begin(), declared.end(), state->states.begin(),
                   [](const auto& a, const auto& b) { return a.name == b.name && a.shape == b.shape; });
    if (state->path != model->path || !same_states) {
        set_coreml_error(error, coreml::error_codes::generic,
                         "predictionFromFeatures:usingState: the state was made by another model's newState");
        return nullptr;
    }
    return predict(model, features, state, error);
}

id predict(model_object* model, id features, state_object* state, void** error) {
    auto* provider = as<provider_object>(features);
    if (provider == nullptr || !provider->initialized) {
        record_violation("-[MLModel predictionFromFeatures:error:]: the features are " + describe(features) +
                         ", expected an initialised MLDictionaryFeatureProvider");
        set_coreml_error(error, coreml::error_codes::feature_type,
                         "predictionFromFeatures: no feature provider");
        return nullptr;
    }
    const mil_program& program = *model->loaded.program;
    const auto& described = model->loaded.function;
    // Inputs, in the program's symbol order: each copied into a packed buffer (the MLMultiArray may have any
    // strides; Core ML copies too when they do not suit the device).
    std::vector<std::vector<std::byte>> packed;
    std::vector<surface_view> input_views;
    for (const io_tensor& in : program.inputs()) {
        object* value = dictionary_lookup(*provider->dictionary, in.name);
        auto* feature = value != nullptr ? as<feature_value_object>(value) : nullptr;
        const auto it = std::find_if(described.inputs.begin(), described.inputs.end(),
                                     [&](const coreml::feature& f) { return f.name == in.name; });
        if (feature == nullptr || feature->array == nullptr) {
            set_coreml_error(
                error, coreml::error_codes::feature_type,
                "predictionFromFeatures: the input '" + in.name + "' is missing (or not an MLMultiArray)");
            return nullptr;
        }
        const multi_array_object& array = *feature->array;
        const long type = array_type_of(in.type);
        if (array.shape != in.shape || it == described.inputs.end() || array.data_type != it->array_type ||
            array.data_type != type) {
            set_coreml_error(error, coreml::error_codes::feature_type,
                             "predictionFromFeatures: the input '" + in.name + "' is not the " +
                                 array_type_name(type) + " " + shape_text(in.shape) +
                                 " MultiArray the model describes");
            return nullptr;
        }
        packed.push_back(packed_copy(array));
        add_counter("coreml_input_bytes", static_cast<long>(packed.back().size()));
        surface_view view;
        view.base = packed.back().data();
        view.alloc_size = packed.back().size();
        view.row_stride = static_cast<std::size_t>(in.width) * element_size(type);
        view.plane_stride = view.row_stride * static_cast<std::size_t>(in.height);
        input_views.push_back(view);
    }
    // Outputs: rows padded to 64 bytes, as the Neural Engine lays them out.
    std::vector<multi_array_object*> arrays;
    std::vector<surface_view> output_views;
    for (const io_tensor& out : program.outputs()) {
        auto* array = make_object<multi_array_object>();
        const long type = array_type_of(out.type);
        const auto size = static_cast<std::int64_t>(element_size(type));
        const std::int64_t row = (out.width * size + 63) / 64 * 64 / size;
        array->initialized = true;
        array->data_type = type;
        array->shape = out.shape;
        array->strides.assign(out.shape.size(), 1);
        std::int64_t stride = row;
        for (std::size_t d = out.shape.size() - 1; d-- > 0;) {
            array->strides[d] = stride;
            stride *= out.shape[d];
        }
        array->owned.assign(static_cast<std::size_t>(out.channels * out.height * row * size),
                            std::byte{0xFF});
        array->data = array->owned.data();
        surface_view view;
        view.base = array->data;
        view.alloc_size = array->owned.size();
        view.row_stride = static_cast<std::size_t>(row * size);
        view.plane_stride = view.row_stride * static_cast<std::size_t>(out.height);
        output_views.push_back(view);
        arrays.push_back(array);
    }
    try {
        model->loaded.program->evaluate(
            input_views, output_views,
            state != nullptr ? std::span(state->buffers) : std::span<std::vector<std::uint16_t>>());
    } catch (const std::exception& failure) {
        for (auto* a : arrays)
            release_object(a, "predictionFromFeatures:");
        set_coreml_error(error, coreml::error_codes::generic,
                         std::string("predictionFromFeatures: ") + failure.what());
        return nullptr;
    }
    auto* result = make_object<provider_object>();
    result->initialized = true;
    std::vector<std::pair<std::string, object*>> entries;
    for (std::size_t i = 0; i < arrays.size(); ++i) {
        auto* value = make_object<feature_value_object>();
        value->array = arrays[i];  // takes the +1
        entries.emplace_back(program.outputs()[i].name, value);
    }
    result->dictionary = make_dictionary(std::move(entries));
    add_counter("coreml_predictions", 1);
    return autorelease_object(result, "predictionFromFeatures:");
}

// ---- MLModelConfiguration

id configuration_new(id, sel) {
    lock_guard lock(sim().mutex);
    return make_object<configuration_object>();
}

void configuration_set_compute_units(id self, sel, long units) {
    lock_guard lock(sim().mutex);
    auto* config = receiver<configuration_object>(self, "setComputeUnits:");
    if (config == nullptr) return;
    if (units < 0 || units > 3)
        record_violation("-[MLModelConfiguration setComputeUnits:] " + std::to_string(units) +
                         " is not an MLComputeUnits value");
    config->compute_units = units;
}

// -[MLModelConfiguration setFunctionName:] (macOS 15).
void configuration_set_function_name(id self, sel, id name) {
    lock_guard lock(sim().mutex);
    auto* config = receiver<configuration_object>(self, "setFunctionName:");
    if (config == nullptr) return;
    auto* text = name != nullptr ? as<string_object>(name) : nullptr;
    if (name != nullptr && text == nullptr) {
        record_violation("-[MLModelConfiguration setFunctionName:] was given " + describe(name) +
                         ", expected an NSString");
        return;
    }
    config->function_name = text != nullptr ? text->text : std::string();
}

long configuration_compute_units(id self, sel) {
    lock_guard lock(sim().mutex);
    auto* config = receiver<configuration_object>(self, "computeUnits");
    return config != nullptr ? config->compute_units : 0;
}

// ---- MLMultiArray

id multi_array_alloc(id, sel) {
    lock_guard lock(sim().mutex);
    return make_object<multi_array_object>();
}

std::vector<std::int64_t> numbers_of(id array, const std::string& what, std::string& problem) {
    std::vector<std::int64_t> values;
    auto* typed = as<array_object>(array);
    if (typed == nullptr) {
        problem = what + " is " + describe(array) + ", expected an NSArray of NSNumbers";
        return values;
    }
    for (object* element : typed->elements) {
        auto* number = as<number_object>(element);
        if (number == nullptr) {
            problem = what + " holds " + describe(element);
            return {};
        }
        values.push_back(number->integer_value);
    }
    return values;
}

// -[MLMultiArray initWithDataPointer:shape:dataType:strides:deallocator:error:]: wraps the caller's memory
// (no copy); releases self and returns nil when the arguments do not describe an array.
id multi_array_init(id self, sel, void* data, id shape, long data_type, id strides, id deallocator,
                    void** error) {
    lock_guard lock(sim().mutex);
    auto* array =
        receiver<multi_array_object>(self, "initWithDataPointer:shape:dataType:strides:deallocator:error:");
    if (array == nullptr) return nullptr;
    std::string problem;
    array->shape = numbers_of(shape, "shape", problem);
    if (problem.empty()) array->strides = numbers_of(strides, "strides", problem);
    if (problem.empty() && array->shape.size() != array->strides.size())
        problem = "shape and strides differ in rank";
    if (problem.empty() && element_size(data_type) == 0)
        problem = "dataType " + std::to_string(data_type) + " is not simulated";
    if (problem.empty() && data == nullptr) problem = "the data pointer is NULL";
    if (problem.empty() && deallocator != nullptr) problem = "the simulator takes no deallocator block";
    for (std::size_t i = 0; problem.empty() && i < array->shape.size(); ++i)
        if (array->shape[i] <= 0 || array->strides[i] <= 0) problem = "non-positive extents or strides";
    if (!problem.empty()) {
        set_coreml_error(error, coreml::error_codes::generic, "initWithDataPointer: " + problem);
        release_object(array, "initWithDataPointer:");
        return nullptr;
    }
    array->data = static_cast<std::byte*>(data);
    array->data_type = data_type;
    array->initialized = true;
    return array;
}

id numbers_array(const std::vector<std::int64_t>& values) {
    std::vector<object*> items;
    for (const std::int64_t v : values)
        items.push_back(make_integer(v));
    return autorelease_object(make_array(std::move(items)), "MLMultiArray");
}

id multi_array_shape(id self, sel) {
    lock_guard lock(sim().mutex);
    auto* array = receiver<multi_array_object>(self, "shape");
    return array != nullptr ? numbers_array(array->shape) : nullptr;
}

id multi_array_strides(id self, sel) {
    lock_guard lock(sim().mutex);
    auto* array = receiver<multi_array_object>(self, "strides");
    return array != nullptr ? numbers_array(array->strides) : nullptr;
}

long multi_array_data_type(id self, sel) {
    lock_guard lock(sim().mutex);
    auto* array = receiver<multi_array_object>(self, "dataType");
    return array != nullptr ? array->data_type : 0;
}

// The block layout of the Block ABI.
struct block_header {
    void* isa;
    int flags;
    int reserved;
    void (*invoke)(void*, const void*, long);
    const struct block_descriptor_header {
        unsigned long reserved;
        unsigned long size;
        const char* signature;
    } * descriptor;
};

// The same layout with the invoke function of another handler type (checked by is_block_of's signature).
template <class Invoke>
struct typed_block {
    void* isa;
    int flags;
    int reserved;
    Invoke invoke;
    const block_header::block_descriptor_header* descriptor;
};

// Whether `block` is a block literal (stack or global) whose descriptor carries `signature`; a violation
// naming `method` and `type` when it is not. Under sim().mutex.
bool is_block_of(void* block, const char* signature, const std::string& method, const char* type) {
    auto* header = static_cast<block_header*>(block);
    const bool stack = header != nullptr && header->isa == static_cast<void*>(_NSConcreteStackBlock);
    const bool global = header != nullptr && header->isa == static_cast<void*>(_NSConcreteGlobalBlock);
    if (!stack && !global) {
        record_violation(method +
                         ": the handler is not a block (its isa is neither _NSConcreteStackBlock nor "
                         "_NSConcreteGlobalBlock)");
        return false;
    }
    if ((header->flags & (1 << 30)) == 0 || header->descriptor == nullptr ||
        header->descriptor->signature == nullptr ||
        std::strcmp(header->descriptor->signature, signature) != 0 ||
        header->descriptor->size < sizeof(block_header)) {
        record_violation(method + ": the block's descriptor does not carry the signature of " + type +
                         ", \"" + signature + "\"");
        return false;
    }
    return true;
}

// The bytes an array's shape and strides reach.
std::size_t reach_bytes(const multi_array_object& array) {
    std::int64_t last = 0;
    for (std::size_t i = 0; i < array.shape.size(); ++i)
        last += (array.shape[i] - 1) * array.strides[i];
    return static_cast<std::size_t>(last + 1) * element_size(array.data_type);
}

// The array whose backing store a bytes handler is about to get (getBytesWithHandler:,
// getMutableBytesWithHandler:), or nullptr after a violation: not an array, not a block of `signature`, or a
// state's array used after its handler returned. Under sim().mutex.
multi_array_object* array_lending_bytes(id self, void* block, const char* selector, const char* signature,
                                        const char* type) {
    auto* array = receiver<multi_array_object>(self, selector);
    if (array == nullptr) return nullptr;
    const std::string method = std::string("-[MLMultiArray ") + selector + "]";
    if (!is_block_of(block, signature, method, type)) return nullptr;
    if (array->data == nullptr) {
        record_violation(method + ": a state's array used after its handler returned");
        return nullptr;
    }
    return array;
}

// -[MLMultiArray getBytesWithHandler:]: calls the block once with the whole backing store (strides apply).
void multi_array_get_bytes(id self, sel, void* block) {
    std::byte* data = nullptr;
    std::size_t size = 0;
    {
        lock_guard lock(sim().mutex);
        auto* array = array_lending_bytes(self, block, "getBytesWithHandler:", "v24@?0r^v8q16",
                                          "void (^)(const void *, NSInteger)");
        if (array == nullptr) return;
        data = array->data;
        size = reach_bytes(*array);
    }
    static_cast<block_header*>(block)->invoke(block, data, static_cast<long>(size));
}

// -[MLMultiArray getMutableBytesWithHandler:] (macOS 12.3): calls the block once with the backing store, its
// size and its strides; what the block writes stays (a state's buffer is written so).
void multi_array_get_mutable_bytes(id self, sel, void* block) {
    std::byte* data = nullptr;
    std::size_t size = 0;
    id strides = nullptr;
    {
        lock_guard lock(sim().mutex);
        auto* array = array_lending_bytes(self, block, "getMutableBytesWithHandler:", "v32@?0^v8q16@24",
                                          "void (^)(void *, NSInteger, NSArray<NSNumber *> *)");
        if (array == nullptr) return;
        data = array->data;
        size = reach_bytes(*array);
        strides = numbers_array(array->strides);
    }
    auto* typed = static_cast<typed_block<void (*)(void*, void*, long, id)>*>(block);
    typed->invoke(block, data, static_cast<long>(size), strides);
}

// ---- MLState

// -[MLState getMultiArrayForStateNamed:handler:] (macOS 15): calls the block, synchronously, with an
// MLMultiArray over the named state's buffer (fp16, its declared shape, packed strides), valid only until the
// block returns (Apple: "one shall not access the state buffer outside of the closure"); nil for a name the
// model has no state of.
void state_multi_array(id self, sel, id name, void* block) {
    multi_array_object* array = nullptr;
    state_object* lender = nullptr;
    {
        lock_guard lock(sim().mutex);
        auto* state = receiver<state_object>(self, "getMultiArrayForStateNamed:handler:");
        if (state == nullptr) return;
        if (!is_block_of(block, "v16@?0@8", "-[MLState getMultiArrayForStateNamed:handler:]",
                         "void (^)(MLMultiArray *)"))
            return;
        auto* key = as<string_object>(name);
        if (key == nullptr) {
            record_violation("-[MLState getMultiArrayForStateNamed:handler:]: the name is " + describe(name) +
                             ", expected an NSString");
            return;
        }
        for (std::size_t i = 0; i < state->states.size(); ++i) {
            if (state->states[i].name != key->text) continue;
            array = make_object<multi_array_object>();
            array->initialized = true;
            array->data_type = array_float16;
            array->shape = state->states[i].shape;
            array->strides.assign(array->shape.size(), 1);
            for (std::size_t d = array->shape.size(); d-- > 1;)
                array->strides[d - 1] = array->strides[d] * array->shape[d];
            array->data = reinterpret_cast<std::byte*>(state->buffers[i].data());
            lender = static_cast<state_object*>(retain_object(state, "getMultiArrayForStateNamed:handler:"));
            add_counter("coreml_state_accesses", 1);
            break;
        }
    }
    static_cast<typed_block<void (*)(void*, id)>*>(block)->invoke(block, array);
    if (array == nullptr) return;
    lock_guard lock(sim().mutex);
    array->data =
        nullptr;  // lent for the block only: a later use is a violation, not a write to freed memory
    release_object(array, "getMultiArrayForStateNamed:handler:");
    release_object(lender, "getMultiArrayForStateNamed:handler:");  // the buffer's owner, kept while lent
}

// ---- MLFeatureValue

id feature_value_with_array(id, sel, id array) {
    lock_guard lock(sim().mutex);
    auto* typed = as<multi_array_object>(array);
    if (typed == nullptr || !typed->initialized) {
        record_violation("+[MLFeatureValue featureValueWithMultiArray:] was given " + describe(array));
        return nullptr;
    }
    auto* value = make_object<feature_value_object>();
    value->array = static_cast<multi_array_object*>(retain_object(typed, "featureValueWithMultiArray:"));
    return autorelease_object(value, "featureValueWithMultiArray:");
}

id feature_value_multi_array(id self, sel) {
    lock_guard lock(sim().mutex);
    auto* value = receiver<feature_value_object>(self, "multiArrayValue");
    return value != nullptr ? value->array : nullptr;
}

// ---- MLDictionaryFeatureProvider

id provider_alloc(id, sel) {
    lock_guard lock(sim().mutex);
    return make_object<provider_object>();
}

id provider_init(id self, sel, id dictionary, void** error) {
    lock_guard lock(sim().mutex);
    auto* provider = receiver<provider_object>(self, "initWithDictionary:error:");
    if (provider == nullptr) return nullptr;
    auto* typed = as<dictionary_object>(dictionary);
    std::string problem = typed == nullptr ? "the dictionary is " + describe(dictionary) : "";
    for (std::size_t i = 0; typed != nullptr && problem.empty() && i < typed->keys.size(); ++i) {
        if (as<string_object>(typed->keys[i]) == nullptr) problem = "a key is not an NSString";
        if (as<feature_value_object>(typed->values[i]) == nullptr)
            problem = "a value is not an MLFeatureValue";
    }
    if (!problem.empty()) {
        set_coreml_error(error, coreml::error_codes::feature_type, "initWithDictionary: " + problem);
        release_object(provider, "initWithDictionary:");
        return nullptr;
    }
    provider->dictionary = static_cast<dictionary_object*>(retain_object(typed, "initWithDictionary:"));
    provider->initialized = true;
    return provider;
}

id provider_feature_value(id self, sel, id name) {
    lock_guard lock(sim().mutex);
    auto* provider = receiver<provider_object>(self, "featureValueForName:");
    auto* key = as<string_object>(name);
    if (provider == nullptr || key == nullptr || !provider->initialized) return nullptr;
    return dictionary_lookup(*provider->dictionary, key->text);
}

// ---- MLComputePlan (COREML.md §4.8)
//
// +[MLComputePlan loadContentsOfURL:configuration:completionHandler:] reads the .mlmodelc as a load does and
// calls the handler on another thread, as Core ML does (the caller must wait for it); the plan's model
// structure is program -> functions["main"] -> block -> operations, each operation with its operatorName
// ("ios16.linear"), outputs and (empty) nested blocks. computeDeviceUsageForMLProgramOperation: gives the
// device the Neural Engine's rules leave each op on (nil for consts): the Neural Engine unless a rule refuses
// it, or the CPU for everything when the configuration asks for CPUOnly.

struct compute_device_object : object {
    static constexpr const char* class_name = "MLComputeDevice";
};
struct neural_engine_device_object : compute_device_object {
    static constexpr const char* class_name = "MLNeuralEngineComputeDevice";
};
struct cpu_device_object : compute_device_object {
    static constexpr const char* class_name = "MLCPUComputeDevice";
};

// One node of the model structure; `children` are released with it.
struct structure_object : object {  // a base only: each node is one of the classes below
    ~structure_object() {
        for (object* child : owned)
            release_object(child, "MLModelStructure dealloc");
    }
    std::vector<object*> owned;
    object* single = nullptr;  // program (MLModelStructure), block (function)
    object* list = nullptr;    // NSDictionary of functions (program), NSArray of operations (block)
    // operations
    std::string text;            // operatorName, or a named value's name
    object* outputs = nullptr;   // NSArray of named values
    object* blocks = nullptr;    // NSArray of nested blocks (empty)
    const void* plan = nullptr;  // the plan whose structure holds this operation
    int placement = -1;          // index into the plan's placement, -1 for consts
};
struct model_structure_object : structure_object {
    static constexpr const char* class_name = "MLModelStructure";
};
struct program_structure_object : structure_object {
    static constexpr const char* class_name = "MLModelStructureProgram";
};
struct function_structure_object : structure_object {
    static constexpr const char* class_name = "MLModelStructureProgramFunction";
};
struct block_structure_object : structure_object {
    static constexpr const char* class_name = "MLModelStructureProgramBlock";
};
struct operation_structure_object : structure_object {
    static constexpr const char* class_name = "MLModelStructureProgramOperation";
};
struct named_value_object : structure_object {
    static constexpr const char* class_name = "MLModelStructureProgramNamedValueType";
};

struct device_usage_object : object {
    static constexpr const char* class_name = "MLComputePlanDeviceUsage";
    ~device_usage_object() {
        release_object(preferred, "MLComputePlanDeviceUsage dealloc");
        release_object(supported, "MLComputePlanDeviceUsage dealloc");
    }
    object* preferred = nullptr;
    object* supported = nullptr;
};

struct compute_plan_object : object {
    static constexpr const char* class_name = "MLComputePlan";
    ~compute_plan_object() { release_object(structure, "MLComputePlan dealloc"); }
    object* structure = nullptr;
    std::vector<op_placement> placement;
    bool cpu_only = false;
};

template <class T>
T* own(structure_object* parent, T* child) {
    parent->owned.push_back(child);
    return child;
}

// The structure of the loaded function: consts and ops in program order.
model_structure_object* make_structure(const compute_plan_object* plan, const mil_program& program,
                                       const std::string& opset) {
    const std::string dialect = opset == "CoreML8" ? "ios18" : opset == "CoreML7" ? "ios17" : "ios16";
    auto* model = make_object<model_structure_object>();
    auto* prog = own(model, make_object<program_structure_object>());
    model->single = prog;
    auto* function = make_object<function_structure_object>();
    auto* block = own(function, make_object<block_structure_object>());
    function->single = block;
    std::vector<object*> operations;
    const auto& placement = program.placement();
    for (const op_statement& statement : program.statements()) {
        auto* op = make_object<operation_structure_object>();
        op->text = dialect + "." + statement.op;
        op->plan = plan;
        for (std::size_t i = 0; i < placement.size(); ++i)
            if (placement[i].line == statement.line && placement[i].op == statement.op)
                op->placement = static_cast<int>(i);
        std::vector<object*> outputs;
        if (!statement.output.empty()) {
            auto* value = make_object<named_value_object>();
            value->text = statement.output;
            outputs.push_back(value);
        }
        op->outputs = own(op, make_array(std::move(outputs)));
        op->blocks = own(op, make_array({}));
        operations.push_back(op);
    }
    block->list = own(block, make_array(std::move(operations)));
    prog->list = own(prog, make_dictionary({{"main", function}}));
    return model;
}

struct plan_handler_block {
    void* isa;
    int flags;
    int reserved;
    void (*invoke)(void*, id, id);
    const block_header::block_descriptor_header* descriptor;
};

// +[MLComputePlan loadContentsOfURL:configuration:completionHandler:]
void plan_load(id, sel, id url, id configuration, void* handler) {
    std::vector<std::byte> copied;  // Block_copy: a stack block with POD captures is copied bytewise
    id plan_or_nil = nullptr;
    id error = nullptr;
    {
        lock_guard lock(sim().mutex);
        auto* header = static_cast<plan_handler_block*>(handler);
        const bool block = header != nullptr && (header->isa == static_cast<void*>(_NSConcreteStackBlock) ||
                                                 header->isa == static_cast<void*>(_NSConcreteGlobalBlock));
        if (!block || (header->flags & (1 << 30)) == 0 || header->descriptor == nullptr ||
            header->descriptor->signature == nullptr ||
            std::strcmp(header->descriptor->signature, "v24@?0@8@16") != 0 ||
            header->descriptor->size < sizeof(plan_handler_block)) {
            record_violation(
                "+[MLComputePlan loadContentsOfURL:configuration:completionHandler:]: the handler is not a "
                "block of void (^)(MLComputePlan *, NSError *) with its signature \"v24@?0@8@16\"");
            return;
        }
        copied.resize(header->descriptor->size);
        std::memcpy(copied.data(), handler, copied.size());
        auto* typed = as<url_object>(url);
        auto* config = configuration != nullptr ? as<configuration_object>(configuration) : nullptr;
        if (typed == nullptr || (configuration != nullptr && config == nullptr)) {
            record_violation("+[MLComputePlan loadContentsOfURL:...] was given " + describe(url) + " and " +
                             describe(configuration));
            return;
        }
        try {
            function_model loaded =
                read_compiled(typed->path, config != nullptr ? config->function_name : std::string());
            auto* plan = make_object<compute_plan_object>();
            plan->placement = loaded.program->placement();
            plan->cpu_only = config != nullptr && config->compute_units == 0;
            plan->structure = make_structure(plan, *loaded.program, loaded.function.opset);
            plan_or_nil = plan;
            add_counter("coreml_compute_plans", 1);
        } catch (const std::exception& failure) {
            error = make_object<error_object>(make_string("com.apple.CoreML"), coreml::error_codes::generic,
                                              std::string("MLComputePlan: ") + failure.what());
        }
    }
    ++pending_handlers();
    std::thread([copied = std::move(copied), plan_or_nil, error]() mutable {
        void* pool = objc_autoreleasePoolPush();
        auto* block = reinterpret_cast<plan_handler_block*>(copied.data());
        block->invoke(block, plan_or_nil, error);
        {
            lock_guard lock(sim().mutex);
            release_object(plan_or_nil, "MLComputePlan handler");
            release_object(error, "MLComputePlan handler");
        }
        objc_autoreleasePoolPop(pool);
        --pending_handlers();
    }).detach();
}

id plan_model_structure(id self, sel) {
    lock_guard lock(sim().mutex);
    auto* plan = receiver<compute_plan_object>(self, "modelStructure");
    return plan != nullptr ? plan->structure : nullptr;
}

template <class T>
id structure_single(id self, sel) {
    lock_guard lock(sim().mutex);
    auto* node = receiver<T>(self, "program/block");
    return node != nullptr ? node->single : nullptr;
}
template <class T>
id structure_list(id self, sel) {
    lock_guard lock(sim().mutex);
    auto* node = receiver<T>(self, "functions/operations");
    return node != nullptr ? node->list : nullptr;
}
id operation_name(id self, sel) {
    lock_guard lock(sim().mutex);
    auto* op = receiver<operation_structure_object>(self, "operatorName");
    return op != nullptr ? autorelease_object(make_string(op->text), "operatorName") : nullptr;
}
id operation_outputs(id self, sel) {
    lock_guard lock(sim().mutex);
    auto* op = receiver<operation_structure_object>(self, "outputs");
    return op != nullptr ? op->outputs : nullptr;
}
id operation_blocks(id self, sel) {
    lock_guard lock(sim().mutex);
    auto* op = receiver<operation_structure_object>(self, "blocks");
    return op != nullptr ? op->blocks : nullptr;
}
id named_value_name(id self, sel) {
    lock_guard lock(sim().mutex);
    auto* value = receiver<named_value_object>(self, "name");
    return value != nullptr ? autorelease_object(make_string(value->text), "name") : nullptr;
}

// -[MLComputePlan computeDeviceUsageForMLProgramOperation:]: nil for consts, else the op's device.
id plan_device_usage(id self, sel, id operation) {
    lock_guard lock(sim().mutex);
    auto* plan = receiver<compute_plan_object>(self, "computeDeviceUsageForMLProgramOperation:");
    auto* op = as<operation_structure_object>(operation);
    if (plan == nullptr) return nullptr;
    if (op == nullptr || op->plan != plan) {
        record_violation("-[MLComputePlan computeDeviceUsageForMLProgramOperation:] was given " +
                         describe(operation) + ", not an operation of this plan's model structure");
        return nullptr;
    }
    if (op->placement < 0) return nullptr;
    const bool ane =
        !plan->cpu_only && plan->placement[static_cast<std::size_t>(op->placement)].device == "ane";
    auto* usage = make_object<device_usage_object>();
    if (ane) {
        usage->preferred = make_object<neural_engine_device_object>();
        usage->supported =
            make_array({retain_object(usage->preferred, "device usage"), make_object<cpu_device_object>()});
    } else {
        usage->preferred = make_object<cpu_device_object>();
        usage->supported = make_array({retain_object(usage->preferred, "device usage")});
    }
    return autorelease_object(usage, "computeDeviceUsageForMLProgramOperation:");
}

id usage_preferred(id self, sel) {
    lock_guard lock(sim().mutex);
    auto* usage = receiver<device_usage_object>(self, "preferredComputeDevice");
    return usage != nullptr ? usage->preferred : nullptr;
}
id usage_supported(id self, sel) {
    lock_guard lock(sim().mutex);
    auto* usage = receiver<device_usage_object>(self, "supportedComputeDevices");
    return usage != nullptr ? usage->supported : nullptr;
}

}  // namespace

void define_coreml_classes() {
    class_record* configuration = define_class(configuration_object::class_name, configuration_type_id,
                                               &destroy_as<configuration_object>);
    add_class_method(configuration, "new", as_imp(&configuration_new));
    add_method(configuration, "setComputeUnits:", as_imp(&configuration_set_compute_units));
    add_method(configuration, "computeUnits", as_imp(&configuration_compute_units));
    add_method(configuration, "setFunctionName:", as_imp(&configuration_set_function_name));

    class_record* model = define_class(model_object::class_name, model_type_id, &destroy_as<model_object>);
    add_class_method(model, "compileModelAtURL:error:", as_imp(&model_compile));
    add_class_method(model, "modelWithContentsOfURL:configuration:error:", as_imp(&model_load));
    add_method(model, "predictionFromFeatures:error:", as_imp(&model_predict));
    add_method(model, "predictionFromFeatures:usingState:error:", as_imp(&model_predict_with_state));
    add_method(model, "newState", as_imp(&model_new_state));
    class_record* state = define_class(state_object::class_name, state_type_id, &destroy_as<state_object>);
    add_method(state, "getMultiArrayForStateNamed:handler:", as_imp(&state_multi_array));

    class_record* array =
        define_class(multi_array_object::class_name, multi_array_type_id, &destroy_as<multi_array_object>);
    add_class_method(array, "alloc", as_imp(&multi_array_alloc));
    add_method(array,
               "initWithDataPointer:shape:dataType:strides:deallocator:error:", as_imp(&multi_array_init));
    add_method(array, "shape", as_imp(&multi_array_shape));
    add_method(array, "strides", as_imp(&multi_array_strides));
    add_method(array, "dataType", as_imp(&multi_array_data_type));
    add_method(array, "getBytesWithHandler:", as_imp(&multi_array_get_bytes));
    add_method(array, "getMutableBytesWithHandler:", as_imp(&multi_array_get_mutable_bytes));

    class_record* value = define_class(feature_value_object::class_name, feature_value_type_id,
                                       &destroy_as<feature_value_object>);
    add_class_method(value, "featureValueWithMultiArray:", as_imp(&feature_value_with_array));
    add_method(value, "multiArrayValue", as_imp(&feature_value_multi_array));

    class_record* provider =
        define_class(provider_object::class_name, provider_type_id, &destroy_as<provider_object>);
    add_class_method(provider, "alloc", as_imp(&provider_alloc));
    add_method(provider, "initWithDictionary:error:", as_imp(&provider_init));
    add_method(provider, "featureValueForName:", as_imp(&provider_feature_value));

    class_record* plan =
        define_class(compute_plan_object::class_name, compute_plan_type_id, &destroy_as<compute_plan_object>);
    add_class_method(plan, "loadContentsOfURL:configuration:completionHandler:", as_imp(&plan_load));
    add_method(plan, "modelStructure", as_imp(&plan_model_structure));
    add_method(plan, "computeDeviceUsageForMLProgramOperation:", as_imp(&plan_device_usage));
    const auto structure_class = [](const char* name, void (*destroy)(object*)) {
        return define_class(name, structure_type_id, destroy);
    };
    class_record* model_structure =
        structure_class(model_structure_object::class_name, &destroy_as<model_structure_object>);
    add_method(model_structure, "program", as_imp(&structure_single<model_structure_object>));
    class_record* program_structure =
        structure_class(program_structure_object::class_name, &destroy_as<program_structure_object>);
    add_method(program_structure, "functions", as_imp(&structure_list<program_structure_object>));
    class_record* function_structure =
        structure_class(function_structure_object::class_name, &destroy_as<function_structure_object>);
    add_method(function_structure, "block", as_imp(&structure_single<function_structure_object>));
    class_record* block_structure =
        structure_class(block_structure_object::class_name, &destroy_as<block_structure_object>);
    add_method(block_structure, "operations", as_imp(&structure_list<block_structure_object>));
    class_record* operation_structure =
        structure_class(operation_structure_object::class_name, &destroy_as<operation_structure_object>);
    add_method(operation_structure, "operatorName", as_imp(&operation_name));
    add_method(operation_structure, "outputs", as_imp(&operation_outputs));
    add_method(operation_structure, "blocks", as_imp(&operation_blocks));
    class_record* named_value =
        structure_class(named_value_object::class_name, &destroy_as<named_value_object>);
    add_method(named_value, "name", as_imp(&named_value_name));

    class_record* usage =
        define_class(device_usage_object::class_name, device_usage_type_id, &destroy_as<device_usage_object>);
    add_method(usage, "preferredComputeDevice", as_imp(&usage_preferred));
    add_method(usage, "supportedComputeDevices", as_imp(&usage_supported));
    class_record* device = define_class(compute_device_object::class_name, compute_device_type_id,
                                        &destroy_as<compute_device_object>);
    class_record* neural_engine =
        define_class(neural_engine_device_object::class_name, compute_device_type_id,
                     &destroy_as<neural_engine_device_object>);
    neural_engine->superclass = device;
    class_record* cpu =
        define_class(cpu_device_object::class_name, compute_device_type_id, &destroy_as<cpu_device_object>);
    cpu->superclass = device;
}

}  // namespace anvil_sim
