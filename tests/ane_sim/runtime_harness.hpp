// Helpers for the ANE simulator's runtime tests: the simulator is opened with dlopen and driven through dlsym
// and IMPs cast to exact prototypes, the way the backend drives the real frameworks.
#pragma once

#include <dlfcn.h>

#include <doctest/doctest.h>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#ifndef ANVIL_ANE_SIM_PATH
#error "ANVIL_ANE_SIM_PATH must name libanvil-ane-sim.so"
#endif

namespace ane_sim_runtime {

using id = void*;
using sel = void*;

inline constexpr std::uint32_t utf8 = 0x08000100;
inline constexpr long code_program_inference = 0x1d;
inline constexpr long code_too_many_programs = 0x50004;
inline constexpr long code_compile_budget = 3;
inline constexpr long code_transient_load = 4;
inline constexpr long code_bad_call = 5;
inline constexpr long code_load_refused = 6;

inline void* library() {
    static void* handle = [] {
        void* opened = dlopen(ANVIL_ANE_SIM_PATH, RTLD_NOW | RTLD_LOCAL);
        if (opened == nullptr) throw std::runtime_error(std::string("dlopen failed: ") + dlerror());
        return opened;
    }();
    return handle;
}

template <class Signature>
Signature* symbol(const char* name) {
    void* found = dlsym(library(), name);
    if (found == nullptr) throw std::runtime_error(std::string("missing symbol ") + name);
    return reinterpret_cast<Signature*>(found);
}

template <class T>
T data_symbol(const char* name) {
    return *static_cast<T*>(dlsym(library(), name));
}

// libobjc
inline id get_class(const char* name) {
    return symbol<id(const char*)>("objc_getClass")(name);
}
inline sel selector(const char* name) {
    return symbol<sel(const char*)>("sel_registerName")(name);
}
inline id class_of(id value) {
    return symbol<id(id)>("object_getClass")(value);
}
inline bool responds(id cls, const char* name) {
    return symbol<bool(id, sel)>("class_respondsToSelector")(cls, selector(name));
}
template <class Result, class... Args>
Result send(id receiver, const char* name, Args... args) {
    sel cmd = selector(name);
    void* imp = symbol<void*(id, sel)>("class_getMethodImplementation")(class_of(receiver), cmd);
    return reinterpret_cast<Result (*)(id, sel, Args...)>(imp)(receiver, cmd, args...);
}
inline id retain(id value) {
    return symbol<id(id)>("objc_retain")(value);
}
inline void release(id value) {
    symbol<void(id)>("objc_release")(value);
}
inline id autorelease(id value) {
    return symbol<id(id)>("objc_autorelease")(value);
}
inline void* pool_push() {
    return symbol<void*()>("objc_autoreleasePoolPush")();
}
inline void pool_pop(void* token) {
    symbol<void(void*)>("objc_autoreleasePoolPop")(token);
}

// CoreFoundation
inline long retain_count(id value) {
    return symbol<long(const void*)>("CFGetRetainCount")(value);
}
inline void cf_release(id value) {
    symbol<void(const void*)>("CFRelease")(value);
}
inline unsigned long type_id(id value) {
    return symbol<unsigned long(const void*)>("CFGetTypeID")(value);
}
inline id cf_string(const char* text) {
    return symbol<id(const void*, const char*, std::uint32_t)>("CFStringCreateWithCString")(nullptr, text,
                                                                                            utf8);
}
inline std::string text_of(id string) {
    char buffer[4096];
    bool ok = symbol<unsigned char(const void*, char*, long, std::uint32_t)>("CFStringGetCString")(
                  string, buffer, sizeof buffer, utf8) != 0;
    return ok ? std::string(buffer) : std::string("<not a string>");
}
inline id cf_data(const std::string& bytes) {
    return symbol<id(const void*, const std::uint8_t*, long)>("CFDataCreate")(
        nullptr, reinterpret_cast<const std::uint8_t*>(bytes.data()), static_cast<long>(bytes.size()));
}
inline id cf_number(long long value) {
    return symbol<id(const void*, long, const void*)>("CFNumberCreate")(nullptr, 11, &value);
}
inline long long number_value(id number) {
    long long value = -999;
    symbol<unsigned char(const void*, long, void*)>("CFNumberGetValue")(number, 11, &value);
    return value;
}
// Owned dictionary; the caller's references to keys and values stay the caller's.
inline id cf_dictionary(std::vector<std::pair<id, id>> entries) {
    std::vector<const void*> keys;
    std::vector<const void*> values;
    for (auto& [key, value] : entries) {
        keys.push_back(key);
        values.push_back(value);
    }
    return symbol<id(const void*, const void**, const void**, long, const void*, const void*)>(
        "CFDictionaryCreate")(nullptr, keys.data(), values.data(), static_cast<long>(keys.size()),
                              dlsym(library(), "kCFTypeDictionaryKeyCallBacks"),
                              dlsym(library(), "kCFTypeDictionaryValueCallBacks"));
}
inline id cf_array(std::vector<id> items) {
    std::vector<const void*> values(items.begin(), items.end());
    return symbol<id(const void*, const void**, long, const void*)>("CFArrayCreate")(
        nullptr, values.data(), static_cast<long>(values.size()), dlsym(library(), "kCFTypeArrayCallBacks"));
}
inline id dictionary_get(id dictionary, const char* key) {
    id key_string = cf_string(key);
    id found = symbol<id(const void*, const void*)>("CFDictionaryGetValue")(dictionary, key_string);
    cf_release(key_string);
    return found;
}
inline long array_count(id array) {
    return symbol<long(const void*)>("CFArrayGetCount")(array);
}
inline id array_at(id array, long i) {
    return symbol<id(const void*, long)>("CFArrayGetValueAtIndex")(array, i);
}

// Diagnostics
inline long counter(const char* name) {
    return symbol<long(const char*)>("anvil_ane_sim_counter")(name);
}
inline std::string violations() {
    return symbol<const char*()>("anvil_ane_sim_violations")();
}
inline std::string live_objects() {
    return symbol<const char*()>("anvil_ane_sim_live_objects")();
}
inline void reset() {
    symbol<void()>("anvil_ane_sim_reset")();
}
inline int set_option(const char* name, const char* value) {
    return symbol<int(const char*, const char*)>("anvil_ane_sim_set_option")(name, value);
}

// IOSurface: a flat byte buffer as most code makes one (RUNTIME.md §3), or a strided one.
inline id make_surface(long width, long height, long bytes_per_element, long bytes_per_row, long alloc_size) {
    id keys[] = {data_symbol<id>("kIOSurfaceWidth"),           data_symbol<id>("kIOSurfaceHeight"),
                 data_symbol<id>("kIOSurfaceBytesPerElement"), data_symbol<id>("kIOSurfaceBytesPerRow"),
                 data_symbol<id>("kIOSurfaceAllocSize"),       data_symbol<id>("kIOSurfacePixelFormat")};
    long values[] = {width, height, bytes_per_element, bytes_per_row, alloc_size, 0};
    std::vector<std::pair<id, id>> entries;
    for (int i = 0; i < 6; ++i)
        entries.emplace_back(keys[i], cf_number(values[i]));
    id properties = cf_dictionary(entries);
    for (auto& entry : entries)
        cf_release(entry.second);
    id surface = symbol<id(const void*)>("IOSurfaceCreate")(properties);
    cf_release(properties);
    return surface;
}
inline id flat_surface(long bytes) {
    return make_surface(bytes, 1, 1, bytes, bytes);
}
inline int lock(id surface, std::uint32_t options) {
    return symbol<int(id, std::uint32_t, std::uint32_t*)>("IOSurfaceLock")(surface, options, nullptr);
}
inline int unlock(id surface, std::uint32_t options) {
    return symbol<int(id, std::uint32_t, std::uint32_t*)>("IOSurfaceUnlock")(surface, options, nullptr);
}
inline std::uint16_t* surface_halves(id surface) {
    return static_cast<std::uint16_t*>(symbol<void*(id)>("IOSurfaceGetBaseAddress")(surface));
}

// fp16 bit patterns of small integers (|v| < 2048), written out independently of the simulator.
inline std::uint16_t half_of(int v) {
    if (v == 0) return 0;
    std::uint16_t sign = v < 0 ? 0x8000 : 0;
    unsigned magnitude = static_cast<unsigned>(v < 0 ? -v : v);
    int exponent = 0;
    while ((magnitude >> (exponent + 1)) != 0)
        ++exponent;
    unsigned mantissa = (magnitude << (10 - exponent)) & 0x3ff;
    return static_cast<std::uint16_t>(sign | ((exponent + 15) << 10) | mantissa);
}

struct error_info {
    long code = 0;
    std::string domain;
    std::string description;
};
inline error_info read_error(id error) {
    error_info info;
    if (error == nullptr) return info;
    info.code = symbol<long(const void*)>("CFErrorGetCode")(error);
    info.domain = text_of(symbol<id(const void*)>("CFErrorGetDomain")(error));
    id description = symbol<id(const void*)>("CFErrorCopyDescription")(error);
    info.description = text_of(description);
    cf_release(description);
    return info;
}

// program(1.3) text for main<ios18>(`params`) returning `results`; the first statement of `body` is on
// line 5.
inline std::string program_text(const std::string& params, const std::string& body,
                                const std::string& results) {
    const std::string head =
        "program(1.3)\n"
        "[buildInfo = dict<string, string>({{\"coremlc-component-MIL\", \"3510.2.1\"}})]\n"
        "{\n";
    return head + "    func main<ios18>(" + params + ") {\n" + body + "    } -> (" + results + ");\n}\n";
}

// Two statements: `output` = a depthwise 1x1 conv of `input` [1, C, 1, W] with weights 1 (the identity),
// the anchor op every program needs on the device (CONSTRAINTS.md: no conv/matmul/linear fails to load).
inline std::string identity_conv(const std::string& input, const std::string& output, int channels = 64,
                                 int width = 32) {
    std::string ones;
    for (int c = 0; c < channels; ++c)
        ones += c == 0 ? "1.0" : ", 1.0";
    const std::string weight_type = "tensor<fp16, [" + std::to_string(channels) + ", 1, 1, 1]>";
    const std::string type =
        "tensor<fp16, [1, " + std::to_string(channels) + ", 1, " + std::to_string(width) + "]>";
    return "        " + weight_type + " w_" + output + " = const()[name = string(\"w_" + output +
           "\"), val = " + weight_type + "([" + ones + "])];\n" + "        " + type + " " + output +
           " = conv(x = " + input + ", weight = w_" + output + ", groups = int32(" +
           std::to_string(channels) + "))[name = string(\"" + output + "\")];\n";
}

// y = relu(x) on [1, 64, 1, 32], anchored: the conv is on line 6, the relu on line 7.
inline const std::string relu_mil = program_text(
    "tensor<fp16, [1, 64, 1, 32]> x",
    identity_conv("x", "c") + "        tensor<fp16, [1, 64, 1, 32]> y = relu(x = c)[name = string(\"y\")];\n",
    "y");

// y = a - b, declared (b, a): symbol 0 is a, symbol 1 is b.
inline const std::string sub_mil =
    program_text("tensor<fp16, [1, 64, 1, 32]> b, tensor<fp16, [1, 64, 1, 32]> a",
                 identity_conv("a", "c") +
                     "        tensor<fp16, [1, 64, 1, 32]> y = sub(x = c, y = b)[name = string(\"y\")];\n",
                 "y");

inline constexpr long surface_bytes = 49152;  // the default minimum; [1, 64, 1, 32] fp16 needs 4096

inline std::string temporary_directory() {
    void* pool = pool_push();
    std::string directory = text_of(symbol<id()>("NSTemporaryDirectory")());
    pool_pop(pool);
    return directory;
}

// A model from MIL text and weight files (key -> bytes); retained (the caller releases), inside the caller's
// pool.
inline id make_model(const std::string& mil,
                     const std::vector<std::pair<std::string, std::string>>& weights = {}) {
    std::vector<std::pair<id, id>> entries;
    std::vector<id> owned;
    for (auto& [key, bytes] : weights) {
        id offset_key = cf_string("offset");
        id data_key = cf_string("data");
        id zero = cf_number(0);
        id data = cf_data(bytes);
        id entry = cf_dictionary({{offset_key, zero}, {data_key, data}});
        id key_string = cf_string(key.c_str());
        entries.emplace_back(key_string, entry);
        owned.insert(owned.end(), {offset_key, data_key, zero, data, entry, key_string});
    }
    id weights_dictionary = cf_dictionary(entries);
    id text = cf_data(mil);
    id descriptor =
        send<id>(get_class("_ANEInMemoryModelDescriptor"), "modelWithMILText:weights:optionsPlist:", text,
                 weights_dictionary, static_cast<id>(nullptr));
    id model = retain(send<id>(get_class("_ANEInMemoryModel"), "inMemoryModelWithDescriptor:", descriptor));
    for (id o : owned)
        cf_release(o);
    cf_release(weights_dictionary);
    cf_release(text);
    return model;
}

inline std::string hex_of(id model) {
    return text_of(send<id>(model, "hexStringIdentifier"));
}

// Writes model.mil and weights/<file> into `directory`, as the caller must before compile.
inline void stage_files(const std::filesystem::path& directory, const std::string& mil,
                        const std::vector<std::pair<std::string, std::string>>& weights = {}) {
    std::filesystem::create_directories(directory / "weights");
    std::ofstream(directory / "model.mil", std::ios::binary) << mil;
    for (auto& [key, bytes] : weights)
        std::ofstream(directory / key.substr(std::string("@model_path/").size()), std::ios::binary) << bytes;
}

inline void populate_temporary_directory(
    id model, const std::string& mil, const std::vector<std::pair<std::string, std::string>>& weights = {}) {
    stage_files(temporary_directory() + hex_of(model), mil, weights);
}
inline void remove_temporary_directory(id model) {
    std::filesystem::remove_all(temporary_directory() + hex_of(model));
}

inline bool compile(id model, id* error) {
    id options = cf_dictionary({});
    bool ok = send<bool>(model, "compileWithQoS:options:error:", 21u, options, error);
    cf_release(options);
    return ok;
}
inline bool load(id model, id* error) {
    id options = cf_dictionary({});
    bool ok = send<bool>(model, "loadWithQoS:options:error:", 21u, options, error);
    cf_release(options);
    return ok;
}
inline bool unload(id model, id* error) {
    return send<bool>(model, "unloadWithQoS:error:", 21u, error);
}

// A request binding `inputs` to symbols 0.. and `outputs` to symbols 0..; retained.
inline id make_request(const std::vector<id>& inputs, const std::vector<id>& outputs) {
    auto wrap = [](const std::vector<id>& surfaces, id& objects, id& indices) {
        std::vector<id> wrappers;
        std::vector<id> numbers;
        for (std::size_t i = 0; i < surfaces.size(); ++i) {
            wrappers.push_back(
                send<id>(get_class("_ANEIOSurfaceObject"), "objectWithIOSurface:", surfaces[i]));
            numbers.push_back(cf_number(static_cast<long long>(i)));
        }
        objects = cf_array(wrappers);
        indices = cf_array(numbers);
        for (id number : numbers)
            cf_release(number);
    };
    id in_objects = nullptr;
    id in_indices = nullptr;
    id out_objects = nullptr;
    id out_indices = nullptr;
    wrap(inputs, in_objects, in_indices);
    wrap(outputs, out_objects, out_indices);
    id procedure = cf_number(0);
    id request = retain(send<id>(
        get_class("_ANERequest"),
        "requestWithInputs:inputIndices:outputs:outputIndices:weightsBuffer:perfStats:procedureIndex:",
        in_objects, in_indices, out_objects, out_indices, static_cast<id>(nullptr), static_cast<id>(nullptr),
        procedure));
    for (id o : {in_objects, in_indices, out_objects, out_indices, procedure})
        cf_release(o);
    return request;
}

inline bool evaluate(id model, id request, id* error) {
    id options = cf_dictionary({});
    bool ok = send<bool>(model, "evaluateWithQoS:options:request:error:", 21u, options, request, error);
    cf_release(options);
    return ok;
}

// Compiles and loads `mil` (no weights); returns the retained model.
inline id compiled_and_loaded(const std::string& mil) {
    id model = make_model(mil);
    populate_temporary_directory(model, mil);
    id error = nullptr;
    REQUIRE(compile(model, &error));
    REQUIRE(load(model, &error));
    return model;
}

// An NSURL for a directory path (owned).
inline id directory_url(const std::string& path) {
    id text = cf_string(path.c_str());
    id url = symbol<id(const void*, const void*, long, unsigned char)>("CFURLCreateWithFileSystemPath")(
        nullptr, text, 0, 1);
    cf_release(text);
    return url;
}

// Sets a simulator option for one scope and restores `restore` (its default) when the scope ends, so later
// tests see defaults.
class scoped_option {
public:
    scoped_option(const char* name, const char* value, const char* restore) : name_(name), restore_(restore) {
        REQUIRE(set_option(name, value) == 0);
    }
    ~scoped_option() { set_option(name_, restore_); }
    scoped_option(const scoped_option&) = delete;
    scoped_option& operator=(const scoped_option&) = delete;

private:
    const char* name_;
    const char* restore_;
};

// Whether `text` ends with the citation " [CONSTRAINTS.md:<line>]".
inline bool cites(const std::string& text, int line) {
    const std::string citation = " [CONSTRAINTS.md:" + std::to_string(line) + "]";
    return text.size() >= citation.size() &&
           text.compare(text.size() - citation.size(), citation.size(), citation) == 0;
}

}  // namespace ane_sim_runtime
