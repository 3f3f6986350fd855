// The ANE simulator's runtime half (libobjc, CoreFoundation, IOSurface, the _ANE* classes), driven only
// through dlopen + dlsym and IMPs cast to exact prototypes, the way the backend drives the real frameworks.
#include <unistd.h>

#include <doctest/doctest.h>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime_harness.hpp"

namespace test_runtime {

using namespace ane_sim_runtime;

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
    // The statements of what compiled, by op type.
    CHECK(counter("op:conv") == 1);
    CHECK(counter("op:relu") == 1);
    CHECK(counter("op:const") == 1);
    CHECK(counter("op:matmul") == 0);
    CHECK(counter("op:no_such_op") == 0);

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
    CHECK(text_of(dictionary_get(input, "Symbol")) == "x");
    // RUNTIME.md §0 #8: one batch, one depth slice, no interleave; the strides span the whole tensor.
    CHECK(number_value(dictionary_get(input, "Interleave")) == 1);
    CHECK(number_value(dictionary_get(input, "Batches")) == 1);
    CHECK(number_value(dictionary_get(input, "Depth")) == 1);
    CHECK(number_value(dictionary_get(input, "PlaneCount")) == 64);
    CHECK(number_value(dictionary_get(input, "DepthStride")) == 64 * 64);
    CHECK(number_value(dictionary_get(input, "BatchStride")) == 64 * 64);
    // RUNTIME.md §0 #1: outputs carry "@output", inputs are plain.
    id output = array_at(dictionary_get(status, "LiveOutputList"), 0);
    CHECK(text_of(dictionary_get(output, "Name")) == "y@output");
    CHECK(text_of(dictionary_get(output, "Symbol")) == "y@output");
    id description = dictionary_get(attributes, "ANEFModelDescription");
    CHECK(text_of(array_at(dictionary_get(description, "kANEFModelOutputSymbolsArrayKey"), 0)) == "y@output");
    CHECK(text_of(array_at(dictionary_get(description, "kANEFModelInputSymbolsArrayKey"), 0)) == "x");

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
    id text = cf_string(relu_mil.c_str());
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
    CHECK(info.description.find("temporary directory lacks") != std::string::npos);
    CHECK(info.description.find("model.mil") != std::string::npos);
    CHECK(cites(info.description, 19));

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

TEST_CASE("ane sim runtime: injected load failures fail the next N loads in a row, of any model") {
    reset();
    scoped_option budget("compile_budget", "100000", "119");
    void* pool = pool_push();
    id model = make_model(relu_mil);
    id other = make_model(sub_mil);
    populate_temporary_directory(model, relu_mil);
    populate_temporary_directory(other, sub_mil);
    id error = nullptr;
    REQUIRE(compile(model, &error));
    REQUIRE(compile(other, &error));
    REQUIRE(set_option("inject_load_failures", "3") == 0);
    for (id which : {model, other, model}) {  // the device is busy for everyone (RUNTIME.md §0 #13)
        CHECK_FALSE(load(which, &error));
        error_info info = read_error(error);
        CHECK(info.code == code_transient_load);
        CHECK(info.description.rfind("ANEProgramLoad() Failed: transient failure", 0) == 0);
        CHECK(info.description.find("inject_load_failures") != std::string::npos);
        CHECK(cites(info.description, 80));
    }
    CHECK(load(model, &error));
    CHECK(load(other, &error));
    CHECK(counter("loads") == 2);
    unload(model, &error);
    unload(other, &error);
    remove_temporary_directory(model);
    remove_temporary_directory(other);
    pool_pop(pool);
    release(model);
    release(other);
    CHECK(violations().empty());
}

TEST_CASE("ane sim runtime: after setModelURL: compile reads the staged files from the model-URL directory") {
    reset();
    scoped_option budget("compile_budget", "100000", "119");
    const std::string cache = temporary_directory() + "anvil_ane_sim_staging_" + std::to_string(getpid());
    std::filesystem::remove_all(cache);
    const std::string weight_key = "@model_path/weights/w.bin";
    const std::string weight(128, '\x01');
    // relu_mil with a weight file: a text of its own, since a text's compiled identity would otherwise be
    // that of relu_mil compiled without one (RUNTIME.md §0b #21).
    const std::string mil = relu_mil + "// staged with a weight file\n";
    void* pool = pool_push();
    id url = directory_url(cache);
    id model = make_model(mil, {{weight_key, weight}});
    send<void>(model, "setModelURL:", url);
    // Staged where a model without a URL would need them: not where this one reads.
    populate_temporary_directory(model, mil, {{weight_key, weight}});
    id error = nullptr;
    CHECK_FALSE(compile(model, &error));
    error_info info = read_error(error);
    CHECK(info.code == code_bad_call);
    CHECK(info.description.rfind("ANECCompile() FAILED: the model-URL directory lacks " + cache, 0) == 0);
    CHECK(info.description.find("model.mil") != std::string::npos);
    CHECK(cites(info.description, 72));
    remove_temporary_directory(model);

    stage_files(cache, mil);  // model.mil only
    CHECK_FALSE(compile(model, &error));
    info = read_error(error);
    CHECK(info.description.find("weights/w.bin") != std::string::npos);
    CHECK(cites(info.description, 72));
    stage_files(cache, mil + "\n", {{weight_key, weight}});  // not the descriptor's text
    CHECK_FALSE(compile(model, &error));
    CHECK(read_error(error).description.find("model.mil differs from the MIL text") != std::string::npos);
    stage_files(cache, mil, {{weight_key, std::string(128, '\x02')}});
    CHECK_FALSE(compile(model, &error));
    CHECK(read_error(error).description.find("differs from the data of weights entry") != std::string::npos);
    CHECK(counter("compiles") == 0);

    stage_files(cache, mil, {{weight_key, weight}});
    CHECK(compile(model, &error));
    CHECK(send<bool>(model, "compiledModelExists"));
    CHECK(std::filesystem::exists(std::filesystem::path(cache) / "net.plist"));
    CHECK_FALSE(std::filesystem::exists(temporary_directory() + hex_of(model)));  // nothing written there
    pool_pop(pool);
    release(model);
    cf_release(url);
    std::filesystem::remove_all(cache);
    CHECK(violations().empty());
}

TEST_CASE("ane sim runtime: compiled artefacts at the model URL let a new model load without a compile") {
    reset();
    scoped_option budget("compile_budget", "100000", "119");
    std::string cache = temporary_directory() + "anvil_ane_sim_cache_" + std::to_string(getpid());
    void* pool = pool_push();
    id url = directory_url(cache);
    id first = make_model(relu_mil);
    send<void>(first, "setModelURL:", url);
    CHECK_FALSE(send<bool>(first, "compiledModelExists"));
    stage_files(cache, relu_mil);
    id error = nullptr;
    REQUIRE(compile(first, &error));
    CHECK(send<bool>(first, "compiledModelExists"));
    release(first);

    reset();
    id second = make_model(relu_mil);
    send<void>(second, "setModelURL:", url);
    CHECK(send<bool>(second, "compiledModelExists"));
    CHECK(load(second, &error));
    CHECK(counter("compiles") == 0);
    CHECK(counter("compile_cache_hits") == 1);
    CHECK(counter("op:conv") == 1);  // a load from a cached compile counts its ops too
    CHECK(counter("op:relu") == 1);

    id stranger = make_model(sub_mil);  // another program: the artefacts are not its own
    send<void>(stranger, "setModelURL:", url);
    CHECK_FALSE(send<bool>(stranger, "compiledModelExists"));
    CHECK_FALSE(load(stranger, &error));
    CHECK(read_error(error).description.find("not compiled") != std::string::npos);
    CHECK(cites(read_error(error).description, 20));

    release(second);  // still loaded; the pool holds the last reference
    CHECK(counter("live_programs") == 1);
    pool_pop(pool);
    CHECK(violations().find("released while loaded") != std::string::npos);
    CHECK(counter("live_programs") == 0);
    release(stranger);
    cf_release(url);
    std::filesystem::remove_all(cache);
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
    for (const char* chip : {"h13", "h14", "h15", "h16", "h17", "h17g"})
        CHECK(set_option("architecture", chip) == 0);
    CHECK(set_option("architecture", "H16") == -1);
    CHECK(set_option("architecture", "") == -1);
    CHECK(set_option("architecture", "h16g") == 0);
    CHECK(counter("no_such_counter") == -1);

    // The options of the second audit: every accepted value, then a wrong one, then the default again.
    struct spelling {
        const char* name;
        std::vector<const char*> good;
        std::vector<const char*> bad;
        const char* fallback;
    };
    const std::vector<spelling> spellings = {
        {"live_names", {"omit", "present"}, {"absent", "1"}, "present"},
        {"plane_stride_pad", {"64", "4096", "0"}, {"32", "-64", "x"}, "0"},
        {"io_width", {"allow", "error"}, {"warn", "on"}, "error"},
        {"pooling", {"allow", "error"}, {"warn"}, "error"},
        {"anchor", {"allow", "error"}, {"warn"}, "error"},
        {"transcendentals", {"error", "allow"}, {"warn"}, "allow"},
        {"profile", {"m5-macos26", "default"}, {"m5", ""}, "default"},
        {"device_info", {"absent", "present"}, {"0", "omit"}, "present"},
        {"fail_compile_op", {"softmax", "conv", ""}, {"no_such_op", "Softmax"}, ""},
        {"fail_load_op", {"matmul", ""}, {"frobnicate"}, ""},
        {"fail_eval_op", {"exp", ""}, {"frobnicate"}, ""},
        {"inject_load_failures", {"2", "0"}, {"-1"}, "0"},
    };
    for (const spelling& option : spellings) {
        INFO(option.name);
        for (const char* value : option.good)
            CHECK(set_option(option.name, value) == 0);
        for (const char* value : option.bad)
            CHECK(set_option(option.name, value) == -1);
        CHECK(set_option(option.name, option.fallback) == 0);
    }
    CHECK(set_option("architecture", "h16g") == 0);  // profile=m5-macos26 changed it
}

}  // namespace test_runtime
