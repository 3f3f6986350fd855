// The ANE simulator's runtime half against the rules CONSTRAINTS.md added from the third audit (RUNTIME.md
// §0b), through dlopen as the backend reaches it: the OS version and the ios18 dialect, the per-program
// weight limit, a compiled identity taken from the MIL text alone, and an evaluation that never completes.
#include <doctest/doctest.h>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "runtime_harness.hpp"

namespace test_runtime_third_audit {

using namespace ane_sim_runtime;

// A weight file (MIL blob storage v2) holding one fp16 tensor of `count` values equal to `value`, its
// metadata record at 64.
std::string fp16_blob(std::size_t count, float value) {
    std::string file(128 + 2 * count, '\0');
    const auto put32 = [&](std::size_t at, std::uint32_t v) { std::memcpy(file.data() + at, &v, 4); };
    const auto put64 = [&](std::size_t at, std::uint64_t v) { std::memcpy(file.data() + at, &v, 8); };
    put32(0, 1);  // count
    put32(4, 2);  // version
    put32(64, 0xDEADBEEFu);
    put32(68, 1);  // fp16
    put64(72, 2 * count);
    put64(80, 128);
    const std::uint16_t half = half_of(static_cast<int>(value));
    for (std::size_t i = 0; i < count; ++i)
        std::memcpy(file.data() + 128 + 2 * i, &half, 2);
    return file;
}

const std::string weight_key = "@model_path/weights/weight.bin";

// y = x * w[c] on [1, 64, 1, 32]: a depthwise 1x1 conv whose weights live in the weight file.
const std::string scaled_mil = program_text(
    "tensor<fp16, [1, 64, 1, 32]> x",
    "        tensor<fp16, [64, 1, 1, 1]> w = const()[name = string(\"w\"), val = tensor<fp16, [64, 1, 1, "
    "1]>(BLOBFILE(path = string(\"@model_path/weights/weight.bin\"), offset = uint64(64)))];\n"
    "        tensor<fp16, [1, 64, 1, 32]> y = conv(x = x, weight = w, groups = int32(64))[name = "
    "string(\"y\")];\n",
    "y");

// Compiles and loads `model` (staged in its temporary directory with `weights`), evaluates it once on
// inputs of 1 and returns output element 0.
float first_output(id model, const std::string& mil, const std::string& weights) {
    populate_temporary_directory(model, mil, {{weight_key, weights}});
    id error = nullptr;
    REQUIRE(compile(model, &error));
    REQUIRE(load(model, &error));
    id in = flat_surface(surface_bytes);
    id out = flat_surface(surface_bytes);
    lock(in, 0);
    for (int c = 0; c < 64; ++c)
        for (int s = 0; s < 32; ++s)
            surface_halves(in)[c * 32 + s] = half_of(1);
    unlock(in, 0);
    id request = make_request({in}, {out});
    REQUIRE(evaluate(model, request, &error));
    lock(out, 1);
    const std::uint16_t bits = surface_halves(out)[0];
    unlock(out, 1);
    release(request);
    cf_release(in);
    cf_release(out);
    REQUIRE(unload(model, &error));
    remove_temporary_directory(model);
    return bits == half_of(1) ? 1.0f : bits == half_of(2) ? 2.0f : -1.0f;
}

TEST_CASE("ane sim third audit: the simulated macOS reports its version, and macOS 14 has no ios18 dialect") {
    reset();
    using sysctl = int(const char*, void*, std::size_t*, void*, std::size_t);
    const auto read_version = [] {
        char text[32] = {};
        std::size_t size = sizeof text;
        REQUIRE(symbol<sysctl>("sysctlbyname")("kern.osproductversion", text, &size, nullptr, 0) == 0);
        return std::string(text);
    };
    CHECK(read_version() == "15.0");
    std::size_t size = 0;
    CHECK(symbol<sysctl>("sysctlbyname")("kern.osproductversion", nullptr, &size, nullptr, 0) == 0);
    CHECK(size == 5);
    CHECK(symbol<sysctl>("sysctlbyname")("hw.unknown", nullptr, &size, nullptr, 0) == -1);
    scoped_option macos("macos", "14", "15");
    CHECK(read_version() == "14.0");
    CHECK(get_class("MLState") == nullptr);  // MLState arrived with macOS 15 as well
    void* pool = pool_push();
    id model = make_model(relu_mil);
    populate_temporary_directory(model, relu_mil);
    id error = nullptr;
    CHECK_FALSE(compile(model, &error));
    const error_info info = read_error(error);
    CHECK(
        info.description.find("function main is ios18, which needs macOS 15; the simulated OS is macOS 14") !=
        std::string::npos);
    CHECK(cites(info.description, 93));
    remove_temporary_directory(model);
    release(model);
    // The same program as program(1.0)/ios16 compiles.
    std::string ones;
    for (int c = 0; c < 64; ++c)
        ones += c == 0 ? "1.0" : ", 1.0";
    const std::string ios16 =
        "program(1.0)\n"
        "[buildInfo = dict<tensor<string, []>, tensor<string, []>>({{\"coremlc-version\", \"3505.4.1\"}})]\n"
        "{\n    func main<ios16>(tensor<fp16, [1, 64, 1, 32]> x) {\n"
        "        tensor<fp16, [64, 1, 1, 1]> w = const()[name = tensor<string, []>(\"w\"), val = "
        "tensor<fp16, [64, "
        "1, 1, 1]>([" +
        ones +
        "])];\n"
        "        tensor<int32, []> g = const()[name = tensor<string, []>(\"g\"), val = tensor<int32, "
        "[]>(64)];\n"
        "        tensor<fp16, [1, 64, 1, 32]> y = conv(groups = g, weight = w, x = x)[name = tensor<string, "
        "[]>(\"y\")];\n"
        "    } -> (y);\n}\n";
    id old = make_model(ios16);
    populate_temporary_directory(old, ios16);
    CHECK(compile(old, &error));
    remove_temporary_directory(old);
    release(old);
    pool_pop(pool);
    CHECK(violations().empty());
}

TEST_CASE("ane sim third audit: a program past max_program_weight_bytes fails to compile") {
    reset();
    void* pool = pool_push();
    const std::string weights = fp16_blob(64, 1.0f);  // 256 bytes in all
    id model = make_model(scaled_mil, {{weight_key, weights}});
    populate_temporary_directory(model, scaled_mil, {{weight_key, weights}});
    id error = nullptr;
    {
        scoped_option limit("max_program_weight_bytes", "200", "0");
        CHECK_FALSE(compile(model, &error));
        const error_info info = read_error(error);
        CHECK(info.description.rfind("ANECCompile() FAILED: the program's weights hold 256 bytes, past this "
                                     "device's limit of 200 per program",
                                     0) == 0);
        CHECK(cites(info.description, 95));
    }
    CHECK(compile(model, &error));
    remove_temporary_directory(model);
    release(model);
    pool_pop(pool);
    CHECK(violations().empty());
}

TEST_CASE(
    "ane sim third audit: two programs with one MIL text share a compiled identity, whatever their weights") {
    reset();
    scoped_option budget("compile_budget", "100000", "119");
    void* pool = pool_push();
    // The text names no weights digest: the first compile's weights are what the identity runs.
    const std::string text = scaled_mil + "\n// ones and twos\n";
    const std::string ones = fp16_blob(64, 1.0f), twos = fp16_blob(64, 2.0f);
    id first = make_model(text, {{weight_key, ones}});
    id second = make_model(text, {{weight_key, twos}});
    CHECK(hex_of(first) == hex_of(second));
    CHECK(first_output(first, text, ones) == 1.0f);
    CHECK(first_output(second, text, twos) == 1.0f);  // the first program's weights: wrong numbers
    CHECK(violations().find("a program with this MIL text was compiled before with other weights") !=
          std::string::npos);
    CHECK(violations().find("[CONSTRAINTS.md:96]") != std::string::npos);
    release(first);
    release(second);
    reset();
    {
        // identity=weights: the weights feed the identifier too (ANEDVD), and each program runs its own.
        scoped_option identity("identity", "weights", "text");
        const std::string other = scaled_mil + "\n// by weights\n";
        id a = make_model(other, {{weight_key, ones}});
        id b = make_model(other, {{weight_key, twos}});
        CHECK(hex_of(a) != hex_of(b));
        CHECK(first_output(a, other, ones) == 1.0f);
        CHECK(first_output(b, other, twos) == 2.0f);
        release(a);
        release(b);
    }
    // A text that differs (a digest of the weights in it) is a new identity under identity=text too.
    const std::string digested = scaled_mil + "\n// twos\n";
    id c = make_model(digested, {{weight_key, twos}});
    CHECK(first_output(c, digested, twos) == 2.0f);
    release(c);
    pool_pop(pool);
    CHECK(violations().empty());
}

TEST_CASE("ane sim third audit: hang_eval_op hangs a program's first evaluation until the test resets") {
    reset();
    scoped_option hang("hang_eval_op", "conv", "");
    void* pool = pool_push();
    id model = compiled_and_loaded(relu_mil);
    id in = flat_surface(surface_bytes);
    id out = flat_surface(surface_bytes);
    id request = make_request({in}, {out});
    std::atomic<bool> returned{false};
    bool ok = true;
    std::string description;
    std::thread evaluation([&] {
        void* thread_pool = pool_push();  // autorelease pools are per thread
        id error = nullptr;
        ok = evaluate(model, request, &error);
        if (!ok) description = read_error(error).description;
        pool_pop(thread_pool);
        returned = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    CHECK_FALSE(returned.load());
    // The simulator's lock is not held while it hangs: other calls go on.
    CHECK(counter("evaluations") == 0);
    reset();
    evaluation.join();
    CHECK_FALSE(ok);
    CHECK(description.find("the evaluation never completed (injected by the simulator: hang_eval_op=conv") !=
          std::string::npos);
    CHECK(cites(description, 98));
    id error = nullptr;
    CHECK(evaluate(model, request, &error));  // only the first evaluation hangs
    release(request);
    cf_release(in);
    cf_release(out);
    CHECK(unload(model, &error));
    remove_temporary_directory(model);
    release(model);
    pool_pop(pool);
    CAPTURE(violations());
    CHECK(violations().empty());
}

}  // namespace test_runtime_third_audit
