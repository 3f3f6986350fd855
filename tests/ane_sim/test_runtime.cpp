// The ANE simulator's runtime half (libobjc, CoreFoundation, IOSurface, the _ANE* classes), driven only
// through dlopen + dlsym and IMPs cast to exact prototypes, the way the backend drives the real frameworks.
#include <dlfcn.h>
#include <unistd.h>

#include <doctest/doctest.h>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#ifndef ANVIL_ANE_SIM_PATH
#error "ANVIL_ANE_SIM_PATH must name libanvil-ane-sim.so"
#endif

namespace test_runtime {

using id = void*;
using sel = void*;

constexpr std::uint32_t utf8 = 0x08000100;
constexpr long code_program_inference = 0x1d;
constexpr long code_too_many_programs = 0x50004;
constexpr long code_compile_budget = 3;
constexpr long code_transient_load = 4;
constexpr long code_bad_call = 5;

void* library() {
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
id get_class(const char* name) {
    return symbol<id(const char*)>("objc_getClass")(name);
}
sel selector(const char* name) {
    return symbol<sel(const char*)>("sel_registerName")(name);
}
id class_of(id value) {
    return symbol<id(id)>("object_getClass")(value);
}
bool responds(id cls, const char* name) {
    return symbol<bool(id, sel)>("class_respondsToSelector")(cls, selector(name));
}
template <class Result, class... Args>
Result send(id receiver, const char* name, Args... args) {
    sel cmd = selector(name);
    void* imp = symbol<void*(id, sel)>("class_getMethodImplementation")(class_of(receiver), cmd);
    return reinterpret_cast<Result (*)(id, sel, Args...)>(imp)(receiver, cmd, args...);
}
id retain(id value) {
    return symbol<id(id)>("objc_retain")(value);
}
void release(id value) {
    symbol<void(id)>("objc_release")(value);
}
id autorelease(id value) {
    return symbol<id(id)>("objc_autorelease")(value);
}
void* pool_push() {
    return symbol<void*()>("objc_autoreleasePoolPush")();
}
void pool_pop(void* token) {
    symbol<void(void*)>("objc_autoreleasePoolPop")(token);
}

// CoreFoundation
long retain_count(id value) {
    return symbol<long(const void*)>("CFGetRetainCount")(value);
}
void cf_release(id value) {
    symbol<void(const void*)>("CFRelease")(value);
}
unsigned long type_id(id value) {
    return symbol<unsigned long(const void*)>("CFGetTypeID")(value);
}
id cf_string(const char* text) {
    return symbol<id(const void*, const char*, std::uint32_t)>("CFStringCreateWithCString")(nullptr, text,
                                                                                            utf8);
}
std::string text_of(id string) {
    char buffer[4096];
    bool ok = symbol<unsigned char(const void*, char*, long, std::uint32_t)>("CFStringGetCString")(
                  string, buffer, sizeof buffer, utf8) != 0;
    return ok ? std::string(buffer) : std::string("<not a string>");
}
id cf_data(const std::string& bytes) {
    return symbol<id(const void*, const std::uint8_t*, long)>("CFDataCreate")(
        nullptr, reinterpret_cast<const std::uint8_t*>(bytes.data()), static_cast<long>(bytes.size()));
}
id cf_number(long long value) {
    return symbol<id(const void*, long, const void*)>("CFNumberCreate")(nullptr, 11, &value);
}
long long number_value(id number) {
    long long value = -999;
    symbol<unsigned char(const void*, long, void*)>("CFNumberGetValue")(number, 11, &value);
    return value;
}
// Owned dictionary; the caller's references to keys and values stay the caller's.
id cf_dictionary(std::vector<std::pair<id, id>> entries) {
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
id cf_array(std::vector<id> items) {
    std::vector<const void*> values(items.begin(), items.end());
    return symbol<id(const void*, const void**, long, const void*)>("CFArrayCreate")(
        nullptr, values.data(), static_cast<long>(values.size()), dlsym(library(), "kCFTypeArrayCallBacks"));
}
id dictionary_get(id dictionary, const char* key) {
    id key_string = cf_string(key);
    id found = symbol<id(const void*, const void*)>("CFDictionaryGetValue")(dictionary, key_string);
    cf_release(key_string);
    return found;
}
long array_count(id array) {
    return symbol<long(const void*)>("CFArrayGetCount")(array);
}
id array_at(id array, long i) {
    return symbol<id(const void*, long)>("CFArrayGetValueAtIndex")(array, i);
}

// Diagnostics
long counter(const char* name) {
    return symbol<long(const char*)>("anvil_ane_sim_counter")(name);
}
std::string violations() {
    return symbol<const char*()>("anvil_ane_sim_violations")();
}
std::string live_objects() {
    return symbol<const char*()>("anvil_ane_sim_live_objects")();
}
void reset() {
    symbol<void()>("anvil_ane_sim_reset")();
}
int set_option(const char* name, const char* value) {
    return symbol<int(const char*, const char*)>("anvil_ane_sim_set_option")(name, value);
}

// IOSurface: a flat byte buffer as most code makes one (RUNTIME.md §3), or a strided one.
id make_surface(long width, long height, long bytes_per_element, long bytes_per_row, long alloc_size) {
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
id flat_surface(long bytes) {
    return make_surface(bytes, 1, 1, bytes, bytes);
}
int lock(id surface, std::uint32_t options) {
    return symbol<int(id, std::uint32_t, std::uint32_t*)>("IOSurfaceLock")(surface, options, nullptr);
}
int unlock(id surface, std::uint32_t options) {
    return symbol<int(id, std::uint32_t, std::uint32_t*)>("IOSurfaceUnlock")(surface, options, nullptr);
}
std::uint16_t* surface_halves(id surface) {
    return static_cast<std::uint16_t*>(symbol<void*(id)>("IOSurfaceGetBaseAddress")(surface));
}

// fp16 bit patterns of small integers (|v| < 2048), written out independently of the simulator.
std::uint16_t half_of(int v) {
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
error_info read_error(id error) {
    error_info info;
    if (error == nullptr) return info;
    info.code = symbol<long(const void*)>("CFErrorGetCode")(error);
    info.domain = text_of(symbol<id(const void*)>("CFErrorGetDomain")(error));
    id description = symbol<id(const void*)>("CFErrorCopyDescription")(error);
    info.description = text_of(description);
    cf_release(description);
    return info;
}

const char* relu_mil = R"(program(1.3)
[buildInfo = dict<string, string>({{"coremlc-component-MIL", "3510.2.1"}, {"coremlc-version", "3505.4.1"}, {"coremltools-component-milinternal", ""}, {"coremltools-version", "9.0"}})]
{
    func main<ios18>(tensor<fp16, [1, 64, 1, 32]> x) {
        tensor<fp16, [1, 64, 1, 32]> y = relu(x = x)[name = string("y")];
    } -> (y);
}
)";

const char* sub_mil = R"(program(1.3)
[buildInfo = dict<string, string>({{"coremlc-component-MIL", "3510.2.1"}, {"coremlc-version", "3505.4.1"}, {"coremltools-component-milinternal", ""}, {"coremltools-version", "9.0"}})]
{
    func main<ios18>(tensor<fp16, [1, 64, 1, 32]> b, tensor<fp16, [1, 64, 1, 32]> a) {
        tensor<fp16, [1, 64, 1, 32]> y = sub(x = a, y = b)[name = string("y")];
    } -> (y);
}
)";

constexpr long surface_bytes = 49152;  // the default minimum; [1, 64, 1, 32] fp16 needs 4096

std::string temporary_directory() {
    void* pool = pool_push();
    std::string directory = text_of(symbol<id()>("NSTemporaryDirectory")());
    pool_pop(pool);
    return directory;
}

// A model from MIL text and weight files (key -> bytes); retained (the caller releases), inside the caller's
// pool.
id make_model(const std::string& mil, const std::vector<std::pair<std::string, std::string>>& weights = {}) {
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

std::string hex_of(id model) {
    return text_of(send<id>(model, "hexStringIdentifier"));
}

void populate_temporary_directory(id model, const std::string& mil,
                                  const std::vector<std::pair<std::string, std::string>>& weights = {}) {
    std::filesystem::path directory = temporary_directory() + hex_of(model);
    std::filesystem::create_directories(directory / "weights");
    std::ofstream(directory / "model.mil", std::ios::binary) << mil;
    for (auto& [key, bytes] : weights)
        std::ofstream(directory / key.substr(std::string("@model_path/").size()), std::ios::binary) << bytes;
}

void remove_temporary_directory(id model) {
    std::filesystem::remove_all(temporary_directory() + hex_of(model));
}

bool compile(id model, id* error) {
    id options = cf_dictionary({});
    bool ok = send<bool>(model, "compileWithQoS:options:error:", 21u, options, error);
    cf_release(options);
    return ok;
}
bool load(id model, id* error) {
    id options = cf_dictionary({});
    bool ok = send<bool>(model, "loadWithQoS:options:error:", 21u, options, error);
    cf_release(options);
    return ok;
}
bool unload(id model, id* error) {
    return send<bool>(model, "unloadWithQoS:error:", 21u, error);
}

// A request binding `inputs` to symbols 0.. and `outputs` to symbols 0..; retained.
id make_request(const std::vector<id>& inputs, const std::vector<id>& outputs) {
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

bool evaluate(id model, id request, id* error) {
    id options = cf_dictionary({});
    bool ok = send<bool>(model, "evaluateWithQoS:options:request:error:", 21u, options, request, error);
    cf_release(options);
    return ok;
}

// Compiles and loads `mil` (no weights); returns the retained model.
id compiled_and_loaded(const std::string& mil) {
    id model = make_model(mil);
    populate_temporary_directory(model, mil);
    id error = nullptr;
    REQUIRE(compile(model, &error));
    REQUIRE(load(model, &error));
    return model;
}

TEST_CASE("ane sim runtime: autorelease pools and retain counts") {
    reset();
    long baseline = counter("live_objects");
    id string = cf_string("kept");
    CHECK(retain_count(string) == 1);
    CHECK(retain(string) == string);
    CHECK(retain_count(string) == 2);
    void* outer = pool_push();
    void* inner = pool_push();
    autorelease(string);
    CHECK(retain_count(string) == 2);
    pool_pop(outer);  // popping the outer pool drains the inner one too
    CHECK(retain_count(string) == 1);
    CHECK(counter("live_objects") == baseline + 1);
    cf_release(string);
    CHECK(counter("live_objects") == baseline);
    pool_pop(inner);  // already drained
    CHECK(violations().find("objc_autoreleasePoolPop") != std::string::npos);
    CHECK(counter("violations") == 1);
}

TEST_CASE("ane sim runtime: a double release is reported, not a crash") {
    reset();
    id data = cf_data("abc");
    cf_release(data);
    cf_release(data);
    release(data);
    CHECK(counter("violations") == 2);
    CHECK(violations().find("double release") != std::string::npos);
    CHECK(violations().find("NSData") != std::string::npos);
}

TEST_CASE("ane sim runtime: leaks show in live_objects; autorelease with no pool is a leak") {
    reset();
    CHECK(live_objects().find("NSNumber") == std::string::npos);
    id number = cf_number(7);
    CHECK(live_objects().find("NSNumber 1\n") != std::string::npos);
    autorelease(number);
    CHECK(violations().find("no autorelease pool") != std::string::npos);
    CHECK(retain_count(number) == 1);
    cf_release(number);
    CHECK(live_objects().find("NSNumber") == std::string::npos);
}

TEST_CASE("ane sim runtime: CF strings, numbers, data, arrays and dictionaries round-trip") {
    reset();
    long baseline = counter("live_objects");
    id accented = cf_string("h\xc3\xa9llo");
    CHECK(symbol<long(const void*)>("CFStringGetLength")(accented) == 5);  // UTF-16 units
    CHECK(text_of(accented) == "h\xc3\xa9llo");
    CHECK(type_id(accented) == symbol<unsigned long()>("CFStringGetTypeID")());

    double real = 2.5;
    id two_and_a_half = symbol<id(const void*, long, const void*)>("CFNumberCreate")(nullptr, 13, &real);
    long long truncated = 0;
    CHECK(symbol<unsigned char(const void*, long, void*)>("CFNumberGetValue")(two_and_a_half, 11,
                                                                              &truncated) == 0);
    std::int32_t small = -5;
    id minus_five = symbol<id(const void*, long, const void*)>("CFNumberCreate")(nullptr, 3, &small);
    CHECK(number_value(minus_five) == -5);
    CHECK(type_id(minus_five) == symbol<unsigned long()>("CFNumberGetTypeID")());

    id key = cf_string("Width");
    id dictionary = cf_dictionary({{key, minus_five}, {accented, two_and_a_half}});
    CHECK(symbol<long(const void*)>("CFDictionaryGetCount")(dictionary) == 2);
    CHECK(dictionary_get(dictionary, "Width") == minus_five);  // another string with the same text
    CHECK(dictionary_get(dictionary, "Height") == nullptr);
    CHECK(retain_count(minus_five) == 2);

    id array = cf_array({key, minus_five});
    CHECK(array_count(array) == 2);
    CHECK(array_at(array, 1) == minus_five);

    id data = cf_data(std::string("\x01\x00\x02", 3));
    CHECK(symbol<long(const void*)>("CFDataGetLength")(data) == 3);
    CHECK(symbol<const std::uint8_t*(const void*)>("CFDataGetBytePtr")(data)[2] == 2);

    id truth = data_symbol<id>("kCFBooleanTrue");
    CHECK(symbol<unsigned char(const void*)>("CFBooleanGetValue")(truth) == 1);
    CHECK(symbol<unsigned char(const void*)>("CFBooleanGetValue")(data_symbol<id>("kCFBooleanFalse")) == 0);

    id path = cf_string("/tmp/some/dir/");
    id url = symbol<id(const void*, const void*, long, unsigned char)>("CFURLCreateWithFileSystemPath")(
        nullptr, path, 0, 1);
    id back = symbol<id(const void*, long)>("CFURLCopyFileSystemPath")(url, 0);
    CHECK(text_of(back) == "/tmp/some/dir");

    for (id o : {accented, two_and_a_half, minus_five, key, dictionary, array, data, path, url, back})
        cf_release(o);
    CHECK(counter("live_objects") == baseline);
    CHECK(violations().empty());
}

TEST_CASE("ane sim runtime: IOSurface rows must be a multiple of 64 bytes; locks are tracked") {
    reset();
    CHECK(make_surface(50, 4, 2, 100, 400) == nullptr);
    CHECK(violations().find("not a multiple of 64") != std::string::npos);
    CHECK(make_surface(50, 4, 2, 128, 256) == nullptr);  // alloc below height * bytes per row
    reset();
    id surface = make_surface(50, 4, 2, 128, 512);
    REQUIRE(surface != nullptr);
    CHECK(symbol<std::size_t(id)>("IOSurfaceGetBytesPerRow")(surface) == 128);
    CHECK(symbol<std::size_t(id)>("IOSurfaceGetAllocSize")(surface) == 512);
    CHECK(reinterpret_cast<std::uintptr_t>(surface_halves(surface)) % 64 == 0);
    CHECK(lock(surface, 0) == 0);
    surface_halves(surface)[0] = 1;
    CHECK(unlock(surface, 0) == 0);
    CHECK(unlock(surface, 0) != 0);  // not locked
    CHECK(lock(surface, 1) == 0);
    surface_halves(surface)[1] = 1;  // a write under a read-only lock
    CHECK(unlock(surface, 1) == 0);
    CHECK(violations().find("not locked") != std::string::npos);
    CHECK(violations().find("read-only") != std::string::npos);
    cf_release(surface);
}

TEST_CASE("ane sim runtime: unknown classes and selectors; device info") {
    reset();
    CHECK(get_class("_ANENoSuchClass") == nullptr);
    id model_class = get_class("_ANEInMemoryModel");
    REQUIRE(model_class != nullptr);
    CHECK(responds(model_class, "compileWithQoS:options:error:"));
    CHECK_FALSE(responds(model_class, "purgeCompiledModel"));
    CHECK(responds(class_of(model_class), "inMemoryModelWithDescriptor:"));
    CHECK(send<long>(model_class, "purgeCompiledModel") == 0);  // the trap returns 0 and records the call
    CHECK(violations().find("_ANEInMemoryModel") != std::string::npos);
    CHECK(violations().find("purgeCompiledModel") != std::string::npos);

    id device = get_class("_ANEDeviceInfo");
    void* pool = pool_push();
    CHECK(text_of(send<id>(device, "aneArchitectureType")) == "h16g");
    pool_pop(pool);
    CHECK(send<bool>(device, "hasANE"));
    CHECK(send<unsigned int>(device, "numANECores") == 16);
}

TEST_CASE("ane sim runtime: compile, load, evaluate and unload a relu program") {
    reset();
    long baseline = counter("live_objects");
    void* pool = pool_push();
    id model = compiled_and_loaded(relu_mil);
    CHECK(counter("compiles") == 1);
    CHECK(counter("loads") == 1);
    CHECK(counter("live_programs") == 1);

    // modelAttributes as RUNTIME.md §3 describes: [1, 64, 1, 32] fp16 has RowStride round_up(64, 64) = 64.
    id attributes = send<id>(send<id>(model, "model"), "modelAttributes");
    id status = array_at(dictionary_get(attributes, "NetworkStatusList"), 0);
    id input = array_at(dictionary_get(status, "LiveInputList"), 0);
    CHECK(number_value(dictionary_get(input, "Channels")) == 64);
    CHECK(number_value(dictionary_get(input, "Width")) == 32);
    CHECK(number_value(dictionary_get(input, "Height")) == 1);
    CHECK(number_value(dictionary_get(input, "RowStride")) == 64);
    CHECK(number_value(dictionary_get(input, "PlaneStride")) == 64);
    CHECK(text_of(dictionary_get(input, "Type")) == "Float16");
    CHECK(text_of(dictionary_get(input, "Name")) == "x");
    id description = dictionary_get(attributes, "ANEFModelDescription");
    CHECK(text_of(array_at(dictionary_get(description, "kANEFModelOutputSymbolsArrayKey"), 0)) == "y");

    id in = flat_surface(surface_bytes);
    id out = flat_surface(surface_bytes);
    REQUIRE(lock(in, 0) == 0);
    for (int i = 0; i < 64 * 32; ++i)
        surface_halves(in)[i] = half_of(i % 7 - 3);
    REQUIRE(unlock(in, 0) == 0);
    id request = make_request({in}, {out});
    id error = nullptr;
    REQUIRE(evaluate(model, request, &error));
    REQUIRE(lock(out, 1) == 0);
    for (int i = 0; i < 64 * 32; ++i)
        REQUIRE(surface_halves(out)[i] == half_of(i % 7 - 3 > 0 ? i % 7 - 3 : 0));
    REQUIRE(unlock(out, 1) == 0);
    CHECK(counter("evaluations") == 1);
    CHECK(counter("bytes_in") == 4096);
    CHECK(counter("bytes_out") == 4096);
    CHECK(counter("bytes_changed_in") == 4096);  // the first evaluation moves everything

    lock(in, 0);
    surface_halves(in)[5] = half_of(1025);  // was 2 (5 % 7 - 3): 0x4000 -> 0x6401, both bytes differ
    unlock(in, 0);
    REQUIRE(evaluate(model, request, &error));
    CHECK(counter("bytes_changed_in") == 4096 + 2);

    REQUIRE(unload(model, &error));
    CHECK(counter("live_programs") == 0);
    CHECK_FALSE(evaluate(model, request, &error));
    error_info info = read_error(error);
    CHECK(info.code == code_program_inference);
    CHECK(info.domain == "com.apple.appleneuralengine");
    CHECK(info.description.rfind("ANEProgramProcessRequestDirect() Failed with status=0x1d", 0) == 0);
    CHECK(info.description.find("unloaded") != std::string::npos);

    remove_temporary_directory(model);
    pool_pop(pool);
    for (id o : {model, request})
        release(o);
    for (id o : {in, out})
        cf_release(o);
    CHECK(counter("live_objects") == baseline);
    CHECK(violations().empty());
}

TEST_CASE("ane sim runtime: inputs bind to symbols in alphabetical order of their MIL names") {
    reset();
    void* pool = pool_push();
    id model = compiled_and_loaded(sub_mil);  // declares (b, a): symbol 0 is a, symbol 1 is b
    id description =
        dictionary_get(send<id>(send<id>(model, "model"), "modelAttributes"), "ANEFModelDescription");
    id names = dictionary_get(description, "kANEFModelInputSymbolsArrayKey");
    REQUIRE(array_count(names) == 2);
    CHECK(text_of(array_at(names, 0)) == "a");
    CHECK(text_of(array_at(names, 1)) == "b");
    id a = flat_surface(surface_bytes);
    id b = flat_surface(surface_bytes);
    id y = flat_surface(surface_bytes);
    lock(a, 0);
    lock(b, 0);
    for (int i = 0; i < 64 * 32; ++i) {
        surface_halves(a)[i] = half_of(10);
        surface_halves(b)[i] = half_of(3);
    }
    unlock(a, 0);
    unlock(b, 0);
    id request = make_request({a, b}, {y});
    id error = nullptr;
    REQUIRE(evaluate(model, request, &error));
    CHECK(surface_halves(y)[0] == half_of(7));
    CHECK(surface_halves(y)[64 * 32 - 1] == half_of(7));
    unload(model, &error);
    remove_temporary_directory(model);
    pool_pop(pool);
    for (id o : {model, request})
        release(o);
    for (id o : {a, b, y})
        cf_release(o);
    CHECK(violations().empty());
}

TEST_CASE("ane sim runtime: MIL as NSString and nil weights are rejected") {
    reset();
    void* pool = pool_push();
    id text = cf_string(relu_mil);
    id weights = cf_dictionary({});
    id descriptor_class = get_class("_ANEInMemoryModelDescriptor");
    CHECK(send<id>(descriptor_class, "modelWithMILText:weights:optionsPlist:", text, weights,
                   static_cast<id>(nullptr)) == nullptr);
    CHECK(violations().find("NSData") != std::string::npos);
    reset();
    id data = cf_data(relu_mil);
    CHECK(send<id>(descriptor_class, "modelWithMILText:weights:optionsPlist:", data, static_cast<id>(nullptr),
                   static_cast<id>(nullptr)) == nullptr);
    CHECK(violations().find("weights") != std::string::npos);
    pool_pop(pool);
    for (id o : {text, weights, data})
        cf_release(o);
}

TEST_CASE("ane sim runtime: compile needs the temporary directory populated") {
    reset();
    void* pool = pool_push();
    const std::string weight_key = "@model_path/weights/w.bin";
    id model = make_model(relu_mil, {{weight_key, std::string(128, '\x01')}});
    id error = nullptr;
    CHECK_FALSE(compile(model, &error));
    error_info info = read_error(error);
    CHECK(info.code == code_bad_call);
    CHECK(info.description.rfind("ANECCompile() FAILED: ", 0) == 0);
    CHECK(info.description.find("model.mil") != std::string::npos);

    populate_temporary_directory(model, relu_mil);  // model.mil only
    CHECK_FALSE(compile(model, &error));
    CHECK(read_error(error).description.find("weights/w.bin") != std::string::npos);
    populate_temporary_directory(model, relu_mil,
                                 {{weight_key, std::string(128, '\x02')}});  // different bytes
    CHECK_FALSE(compile(model, &error));
    CHECK(read_error(error).description.find("differs") != std::string::npos);
    CHECK(counter("compiles") == 0);

    populate_temporary_directory(model, relu_mil, {{weight_key, std::string(128, '\x01')}});
    CHECK(compile(model, &error));
    remove_temporary_directory(model);
    pool_pop(pool);
    release(model);
}

TEST_CASE("ane sim runtime: evaluate before load fails; surfaces are checked") {
    reset();
    void* pool = pool_push();
    id model = make_model(relu_mil);
    populate_temporary_directory(model, relu_mil);
    id error = nullptr;
    REQUIRE(compile(model, &error));
    id in = flat_surface(surface_bytes);
    id out = flat_surface(surface_bytes);
    id request = make_request({in}, {out});
    CHECK_FALSE(evaluate(model, request, &error));
    CHECK(read_error(error).code == code_program_inference);
    CHECK(read_error(error).description.find("not loaded") != std::string::npos);
    REQUIRE(load(model, &error));
    CHECK(evaluate(model, request, &error));

    lock(in, 0);
    CHECK_FALSE(evaluate(model, request, &error));
    CHECK(read_error(error).description.find("locked") != std::string::npos);
    unlock(in, 0);

    // A strided [1, 64, 1, 32] surface of 4096 bytes is laid out right but below the 49152-byte minimum.
    id small_in = make_surface(32, 64, 2, 64, 4096);
    id small_out = make_surface(32, 64, 2, 64, 4096);
    id small_request = make_request({small_in}, {small_out});
    CHECK_FALSE(evaluate(model, small_request, &error));
    CHECK(read_error(error).description.find("minimum of 49152") != std::string::npos);
    REQUIRE(set_option("min_surface_bytes", "4096") == 0);
    CHECK(evaluate(model, small_request, &error));
    REQUIRE(set_option("min_surface_bytes", "49152") == 0);

    // Rows 128 bytes apart where the program reads them 64 apart.
    id wide = make_surface(32, 64, 2, 128, surface_bytes);
    id wide_request = make_request({wide}, {out});
    CHECK_FALSE(evaluate(model, wide_request, &error));
    CHECK(read_error(error).description.find("RowStride") != std::string::npos);

    unload(model, &error);
    remove_temporary_directory(model);
    pool_pop(pool);
    for (id o : {model, request, small_request, wide_request})
        release(o);
    for (id o : {in, out, small_in, small_out, wide})
        cf_release(o);
}

TEST_CASE("ane sim runtime: the compile budget and the live program limit") {
    reset();
    void* pool = pool_push();
    id model = make_model(relu_mil);
    populate_temporary_directory(model, relu_mil);
    id error = nullptr;
    REQUIRE(set_option("compile_budget", "0") == 0);
    CHECK_FALSE(compile(model, &error));
    CHECK(read_error(error).code == code_compile_budget);
    REQUIRE(set_option("compile_budget", "100000") == 0);
    REQUIRE(compile(model, &error));
    REQUIRE(load(model, &error));

    REQUIRE(set_option("max_live_programs", "1") == 0);
    id other = make_model(sub_mil);
    populate_temporary_directory(other, sub_mil);
    CHECK_FALSE(compile(other, &error));
    CHECK(read_error(error).code == code_too_many_programs);
    CHECK(read_error(error).description.rfind("0x50004", 0) == 0);
    REQUIRE(unload(model, &error));
    CHECK(compile(other, &error));
    REQUIRE(set_option("max_live_programs", "15") == 0);
    REQUIRE(set_option("compile_budget", "119") == 0);

    remove_temporary_directory(model);
    remove_temporary_directory(other);
    pool_pop(pool);
    release(model);
    release(other);
    CHECK(violations().empty());
}

TEST_CASE("ane sim runtime: an injected load failure succeeds on retry") {
    reset();
    REQUIRE(set_option("compile_budget", "100000") == 0);
    void* pool = pool_push();
    id model = make_model(relu_mil);
    populate_temporary_directory(model, relu_mil);
    id error = nullptr;
    REQUIRE(compile(model, &error));
    REQUIRE(set_option("inject_load_failures", "1") == 0);
    CHECK_FALSE(load(model, &error));
    CHECK(read_error(error).code == code_transient_load);
    CHECK(load(model, &error));
    CHECK(counter("loads") == 1);
    unload(model, &error);
    remove_temporary_directory(model);
    pool_pop(pool);
    release(model);
}

TEST_CASE("ane sim runtime: compiled artefacts at the model URL let a new model load without a compile") {
    reset();
    REQUIRE(set_option("compile_budget", "100000") == 0);
    std::string cache = temporary_directory() + "anvil_ane_sim_cache_" + std::to_string(getpid());
    void* pool = pool_push();
    id path = cf_string(cache.c_str());
    id url = symbol<id(const void*, const void*, long, unsigned char)>("CFURLCreateWithFileSystemPath")(
        nullptr, path, 0, 1);
    id first = make_model(relu_mil);
    send<void>(first, "setModelURL:", url);
    CHECK_FALSE(send<bool>(first, "compiledModelExists"));
    populate_temporary_directory(first, relu_mil);
    id error = nullptr;
    REQUIRE(compile(first, &error));
    CHECK(send<bool>(first, "compiledModelExists"));
    remove_temporary_directory(first);
    release(first);

    reset();
    id second = make_model(relu_mil);
    send<void>(second, "setModelURL:", url);
    CHECK(send<bool>(second, "compiledModelExists"));
    CHECK(load(second, &error));
    CHECK(counter("compiles") == 0);
    CHECK(counter("compile_cache_hits") == 1);

    id stranger = make_model(sub_mil);  // another program: the artefacts are not its own
    send<void>(stranger, "setModelURL:", url);
    CHECK_FALSE(send<bool>(stranger, "compiledModelExists"));
    CHECK_FALSE(load(stranger, &error));
    CHECK(read_error(error).description.find("not compiled") != std::string::npos);

    release(second);  // still loaded; the pool holds the last reference
    CHECK(counter("live_programs") == 1);
    pool_pop(pool);
    CHECK(violations().find("released while loaded") != std::string::npos);
    CHECK(counter("live_programs") == 0);
    release(stranger);
    for (id o : {path, url})
        cf_release(o);
    std::filesystem::remove_all(cache);
    REQUIRE(set_option("compile_budget", "119") == 0);
}

TEST_CASE("ane sim runtime: options are parsed and unknown ones refused") {
    CHECK(set_option("equal_surface_sizes", "0") == 0);
    CHECK(set_option("equal_surface_sizes", "1") == 0);
    CHECK(set_option("gelu", "error") == 0);
    CHECK(set_option("gelu", "warn") == 0);
    CHECK(set_option("conv_bias", "warn") == -1);
    CHECK(set_option("compile_budget", "-1") == -1);
    CHECK(set_option("compile_budget", "12x") == -1);
    CHECK(set_option("no_such_option", "1") == -1);
    CHECK(set_option("architecture", "h15g") == 0);
    void* pool = pool_push();
    CHECK(text_of(send<id>(get_class("_ANEDeviceInfo"), "aneArchitectureType")) == "h15g");
    pool_pop(pool);
    CHECK(set_option("architecture", "h16g") == 0);
    CHECK(counter("no_such_counter") == -1);
}

}  // namespace test_runtime
