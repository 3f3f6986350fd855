// The ANE simulator's runtime half against the rules CONSTRAINTS.md added from the second audit (RUNTIME.md
// §0), through dlopen as the backend reaches it: the Live entries and their options, I/O widths, anchors,
// the M5 profile, the per-op counters, injected failures, device info, and ANVIL_ANE_SIM_OPTIONS.
#include <doctest/doctest.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime_harness.hpp"

namespace test_runtime_audit {

using namespace ane_sim_runtime;

// A model of `mil` staged in its temporary directory; retained (discard releases it), inside the caller's
// pool.
id staged_model(const std::string& mil) {
    id model = make_model(mil);
    populate_temporary_directory(model, mil);
    return model;
}

void discard(id model) {
    id ignored = nullptr;
    unload(model, &ignored);  // NO with an NSError when it is not loaded, nothing worse
    remove_temporary_directory(model);
    release(model);
}

// Evaluates once on flat surfaces of at least the minimum size; "" or the error's description.
std::string evaluate_once(id model, long input_bytes = surface_bytes, long output_bytes = surface_bytes) {
    id in = flat_surface(std::max(input_bytes, surface_bytes));
    id out = flat_surface(std::max(output_bytes, surface_bytes));
    id request = make_request({in}, {out});
    id error = nullptr;
    const bool ok = evaluate(model, request, &error);
    release(request);
    cf_release(in);
    cf_release(out);
    return ok ? "" : read_error(error).description;
}

const std::string evaluate_prefix =
    "ANEProgramProcessRequestDirect() Failed with status=0x1d : Program Inference error: ";

// [1, 64, 1, 32] -> conv (line 6) -> `op` (line 7) -> y.
std::string after_conv(const std::string& statement,
                       const std::string& out_type = "tensor<fp16, [1, 64, 1, 32]>") {
    return program_text(
        "tensor<fp16, [1, 64, 1, 32]> x",
        identity_conv("x", "c") + "        " + out_type + " y = " + statement + "[name = string(\"y\")];\n",
        "y");
}

// y = x @ x on [1, 64, 32, 32] (the matmul on line 5): anchored without a conv.
const std::string matmul_mil = program_text(
    "tensor<fp16, [1, 64, 32, 32]> x",
    "        tensor<fp16, [1, 64, 32, 32]> y = matmul(x = x, y = x)[name = string(\"y\")];\n", "y");

TEST_CASE("ane sim audit: live_names=omit drops Name and Symbol from every Live entry") {
    reset();
    void* pool = pool_push();
    id model = staged_model(relu_mil);
    id error = nullptr;
    REQUIRE(compile(model, &error));
    auto entries = [&](const char* list) {
        id attributes = send<id>(send<id>(model, "model"), "modelAttributes");
        return dictionary_get(array_at(dictionary_get(attributes, "NetworkStatusList"), 0), list);
    };
    {
        scoped_option omit("live_names", "omit", "present");
        for (const char* list : {"LiveInputList", "LiveOutputList"}) {
            INFO(list);
            id entry = array_at(entries(list), 0);
            CHECK(dictionary_get(entry, "Name") == nullptr);
            CHECK(dictionary_get(entry, "Symbol") == nullptr);
            CHECK(number_value(dictionary_get(entry, "Channels")) == 64);
            CHECK(number_value(dictionary_get(entry, "PlaneStride")) == 64);
        }
    }
    CHECK(text_of(dictionary_get(array_at(entries("LiveOutputList"), 0), "Name")) == "y@output");
    discard(model);
    pool_pop(pool);
    CHECK(violations().empty());
}

TEST_CASE("ane sim audit: plane_stride_pad moves each channel to c * PlaneStride") {
    reset();
    void* pool = pool_push();
    id model = staged_model(relu_mil);
    id error = nullptr;
    REQUIRE(compile(model, &error));
    REQUIRE(load(model, &error));
    scoped_option pad("plane_stride_pad", "64", "0");
    id attributes = send<id>(send<id>(model, "model"), "modelAttributes");
    id status = array_at(dictionary_get(attributes, "NetworkStatusList"), 0);
    for (const char* list : {"LiveInputList", "LiveOutputList"}) {
        id entry = array_at(dictionary_get(status, list), 0);
        CHECK(number_value(dictionary_get(entry, "RowStride")) == 64);
        CHECK(number_value(dictionary_get(entry, "PlaneStride")) == 128);  // Height * RowStride + 64
        CHECK(number_value(dictionary_get(entry, "DepthStride")) == 64 * 128);
    }
    id in = flat_surface(surface_bytes);
    id out = flat_surface(surface_bytes);
    id request = make_request({in}, {out});
    // Channel c at byte c * 128, as PlaneStride says: the numbers come back where they belong.
    lock(in, 0);
    for (int c = 0; c < 64; ++c)
        for (int s = 0; s < 32; ++s)
            surface_halves(in)[c * 64 + s] = half_of(c % 5 - 2);
    unlock(in, 0);
    REQUIRE(evaluate(model, request, &error));
    bool right = true;
    for (int c = 0; c < 64; ++c)
        for (int s = 0; s < 32; ++s)
            right = right && surface_halves(out)[c * 64 + s] == half_of(c % 5 - 2 > 0 ? c % 5 - 2 : 0);
    CHECK(right);
    // A caller that assumes PlaneStride = Height * RowStride writes channel c at c * 64 and reads garbage.
    lock(in, 0);
    for (int c = 0; c < 64; ++c)
        for (int s = 0; s < 32; ++s)
            surface_halves(in)[c * 32 + s] = half_of(c % 5 - 2);
    unlock(in, 0);
    REQUIRE(evaluate(model, request, &error));
    bool packed_right = true;
    for (int c = 0; c < 64; ++c)
        for (int s = 0; s < 32; ++s)
            packed_right =
                packed_right && surface_halves(out)[c * 32 + s] == half_of(c % 5 - 2 > 0 ? c % 5 - 2 : 0);
    CHECK_FALSE(packed_right);
    // AllocSize must hold Channels * PlaneStride: 64 * (64 + 768) = 53248 > 49152.
    {
        scoped_option wide("plane_stride_pad", "768", "0");
        CHECK_FALSE(evaluate(model, request, &error));
        const std::string message = read_error(error).description;
        CHECK(message.rfind(evaluate_prefix + "the surface of input 'x'", 0) == 0);
        CHECK(message.find("needs Channels * PlaneStride = 53248 bytes") != std::string::npos);
        CHECK(cites(message, 71));
    }
    CHECK(set_option("plane_stride_pad", "100") == -1);  // PlaneStride stays a multiple of 64
    unload(model, &error);
    release(request);
    cf_release(in);
    cf_release(out);
    discard(model);
    pool_pop(pool);
    CHECK(violations().empty());
}

TEST_CASE("ane sim audit: I/O widths below 32 or not a multiple of 32 fail at evaluate") {
    reset();
    scoped_option budget("compile_budget", "100000", "119");
    void* pool = pool_push();
    struct narrow {
        std::string mil, message;
    };
    const std::vector<narrow> cases = {
        {program_text("tensor<fp16, [1, 64, 1, 16]> x", identity_conv("x", "y", 64, 16), "y"),
         "input 'x' has width 16 (the innermost dimension of [1, 64, 1, 16])"},
        {program_text("tensor<fp16, [1, 64, 1, 48]> x", identity_conv("x", "y", 64, 48), "y"),
         "input 'x' has width 48"},
        {after_conv("reshape(shape = tensor<int32, [4]>([1, 128, 1, 16]), x = c)",
                    "tensor<fp16, [1, 128, 1, 16]>"),
         "output 'y' has width 16"},
    };
    for (const narrow& c : cases) {
        INFO(c.message);
        id model = staged_model(c.mil);
        id error = nullptr;
        REQUIRE(compile(model, &error));
        REQUIRE(load(model, &error));
        const std::string message = evaluate_once(model);
        CHECK(message.rfind(evaluate_prefix + c.message, 0) == 0);
        CHECK(cites(message, 73));
        {
            scoped_option allow("io_width", "allow", "error");
            CHECK(evaluate_once(model) == "");
        }
        discard(model);
    }
    pool_pop(pool);
    CHECK(violations().empty());
}

TEST_CASE("ane sim audit: a program without conv, matmul or linear fails to load unless anchor=allow") {
    reset();
    scoped_option budget("compile_budget", "100000", "119");
    void* pool = pool_push();
    const std::string relu_only = program_text(
        "tensor<fp16, [1, 64, 1, 32]> x",
        "        tensor<fp16, [1, 64, 1, 32]> r = relu(x = x)[name = string(\"r\")];\n"
        "        tensor<fp16, [1, 64, 1, 32]> y = add(x = r, y = fp16(0x1p+0))[name = string(\"y\")];\n",
        "y");
    id model = staged_model(relu_only);
    id error = nullptr;
    REQUIRE(compile(model, &error));  // it compiles; the device refuses it
    CHECK_FALSE(load(model, &error));
    error_info info = read_error(error);
    CHECK(info.code == code_load_refused);
    CHECK(info.description ==
          "ANEProgramLoad() Failed: the program has no conv, matmul or linear op (its ops: relu, add); a "
          "program "
          "without such an anchor can be refused at load: anchor it with a conv, linear or matmul, or run it "
          "on "
          "the CPU (simulator option anchor) [CONSTRAINTS.md:76]");
    CHECK(counter("loads") == 0);
    CHECK(counter("live_programs") == 0);
    {
        scoped_option allow("anchor", "allow", "error");
        REQUIRE(load(model, &error));
        CHECK(evaluate_once(model) == "");
        unload(model, &error);
    }
    discard(model);
    // A matmul anchors a program as well as a conv does.
    id anchored = staged_model(matmul_mil);
    REQUIRE(compile(anchored, &error));
    CHECK(load(anchored, &error));
    discard(anchored);
    pool_pop(pool);
    CHECK(violations().empty());
}

TEST_CASE("ane sim audit: on a simulated h13/h14 chip matmul fails to compile") {
    reset();
    scoped_option budget("compile_budget", "100000", "119");
    void* pool = pool_push();
    id model = staged_model(matmul_mil);
    id error = nullptr;
    for (const char* chip : {"h13", "h14g"}) {
        INFO(chip);
        scoped_option old_chip("architecture", chip, "h16g");
        CHECK_FALSE(compile(model, &error));
        const std::string message = read_error(error).description;
        CHECK(message.rfind("ANECCompile() FAILED: line 5: matmul fails to compile on " + std::string(chip),
                            0) == 0);
        CHECK(cites(message, 74));
    }
    CHECK(compile(model, &error));  // h16g again
    discard(model);
    pool_pop(pool);
    CHECK(violations().empty());
}

TEST_CASE("ane sim audit: pooling is rejected at compile through the runtime too, and counted when allowed") {
    reset();
    scoped_option budget("compile_budget", "100000", "119");
    void* pool = pool_push();
    id model = staged_model(after_conv(
        "max_pool(kernel_sizes = tensor<int32, [2]>([1, 1]), pad_type = string(\"valid\"), strides = "
        "tensor<int32, [2]>([1, 1]), x = c)"));
    id error = nullptr;
    CHECK_FALSE(compile(model, &error));
    const std::string message = read_error(error).description;
    CHECK(message.rfind("ANECCompile() FAILED: line 7: max_pool is rejected", 0) == 0);
    CHECK(cites(message, 75));
    CHECK(counter("op:max_pool") == 0);  // failed compiles count nothing
    {
        scoped_option allow("pooling", "allow", "error");
        CHECK(compile(model, &error));
    }
    CHECK(counter("op:max_pool") == 1);
    CHECK(counter("op:conv") == 1);
    reset();
    CHECK(counter("op:max_pool") == 0);
    discard(model);
    pool_pop(pool);
}

TEST_CASE("ane sim audit: the m5-macos26 profile fails reduce_mean and transcendentals at evaluate") {
    reset();
    scoped_option budget("compile_budget", "100000", "119");
    void* pool = pool_push();
    struct op_case {
        std::string op, statement, type;
    };
    const std::string same = "tensor<fp16, [1, 64, 1, 32]>";
    const std::vector<op_case> cases = {
        {"exp", "exp(x = c)", same},
        {"log", "log(epsilon = fp16(0x1.0cp-17), x = c)", same},
        {"sqrt", "sqrt(x = c)", same},
        {"sin", "sin(x = c)", same},
        {"cos", "cos(x = c)", same},
        {"reduce_mean", "reduce_mean(axes = tensor<int32, [1]>([1]), keep_dims = kd, x = c)",
         "tensor<fp16, [1, 1, 1, 32]>"},
    };
    for (const op_case& c : cases) {
        INFO(c.op);
        std::string mil = after_conv(c.statement, c.type);
        if (c.op == "reduce_mean")  // keep_dims bound to a named const (line 5); the op moves to line 8
            mil.replace(mil.find("        tensor<fp16, [64"), 0,
                        "        bool kd = const()[name = string(\"kd\"), val = bool(true)];\n");
        const std::string line = c.op == "reduce_mean" ? "line 8: " : "line 7: ";
        id model = staged_model(mil);
        id error = nullptr;
        {
            scoped_option m5("profile", "m5-macos26", "default");
            REQUIRE(compile(model, &error));  // compiles and loads fine
            REQUIRE(load(model, &error));
            const std::string message = evaluate_once(model);
            CHECK(message.rfind(evaluate_prefix + line + c.op +
                                    ": compiles and loads but fails at dispatch on the "
                                    "simulated profile m5-macos26",
                                0) == 0);
            CHECK(cites(message, 78));
        }
        CHECK(evaluate_once(model) == "");  // the default profile runs them
        discard(model);
    }
    {
        scoped_option m5("profile", "m5-macos26", "default");
        CHECK(text_of(send<id>(get_class("_ANEDeviceInfo"), "aneArchitectureType")) == "h17g");
    }
    CHECK(text_of(send<id>(get_class("_ANEDeviceInfo"), "aneArchitectureType")) == "h16g");
    {  // the underlying option alone, on the default chip
        scoped_option strict("transcendentals", "error", "allow");
        id model = staged_model(after_conv("exp(x = c)"));
        id error = nullptr;
        REQUIRE(compile(model, &error));
        REQUIRE(load(model, &error));
        CHECK(evaluate_once(model).find("line 7: exp: compiles and loads but fails") != std::string::npos);
        discard(model);
        id plain = staged_model(relu_mil);  // no transcendental: unaffected
        REQUIRE(compile(plain, &error));
        REQUIRE(load(plain, &error));
        CHECK(evaluate_once(plain) == "");
        discard(plain);
    }
    pool_pop(pool);
    CHECK(violations().empty());
}

TEST_CASE("ane sim audit: an epsilon of 0 warns once, like the other warn-mode rules") {
    reset();
    scoped_option budget("compile_budget", "100000", "119");
    void* pool = pool_push();
    const std::string mil = after_conv("log(x = c)");
    id first = staged_model(mil);
    id second = staged_model(mil);
    id error = nullptr;
    REQUIRE(compile(first, &error));
    REQUIRE(compile(second, &error));
    const std::string expected =
        "warning: line 7: log: epsilon is omitted and its default 1e-45 is 0 in fp16; no working code passes "
        "0: "
        "pass a small positive epsilon such as fp16(0x1.0cp-17) [CONSTRAINTS.md:79]\n";
    CHECK(violations() == expected);
    discard(first);
    discard(second);
    pool_pop(pool);
}

TEST_CASE("ane sim audit: device_info=absent removes the _ANEDeviceInfo class") {
    CHECK(get_class("_ANEDeviceInfo") != nullptr);
    {
        scoped_option absent("device_info", "absent", "present");
        CHECK(get_class("_ANEDeviceInfo") == nullptr);
        CHECK(get_class("_ANEInMemoryModel") != nullptr);  // the rest of the framework is there
    }
    CHECK(get_class("_ANEDeviceInfo") != nullptr);
}

TEST_CASE("ane sim audit: fail_compile_op, fail_load_op and fail_eval_op fail the program that has the op") {
    reset();
    scoped_option budget("compile_budget", "100000", "119");
    void* pool = pool_push();
    const std::string softmax = after_conv("softmax(axis = int32(1), x = c)");
    id model = staged_model(softmax);
    id plain = staged_model(relu_mil);
    id error = nullptr;
    {
        scoped_option inject("fail_compile_op", "softmax", "");
        CHECK_FALSE(compile(model, &error));
        CHECK(read_error(error).description ==
              "ANECCompile() FAILED: line 7: softmax: failure injected by the simulator "
              "(fail_compile_op=softmax) "
              "[CONSTRAINTS.md:82]");
        CHECK(compile(plain, &error));  // a program without the op is unaffected
    }
    REQUIRE(compile(model, &error));
    {
        scoped_option inject("fail_load_op", "softmax", "");
        CHECK_FALSE(load(model, &error));
        CHECK(read_error(error).code == code_load_refused);
        CHECK(read_error(error).description ==
              "ANEProgramLoad() Failed: line 7: softmax: failure injected by the simulator "
              "(fail_load_op=softmax) "
              "[CONSTRAINTS.md:82]");
        CHECK(counter("live_programs") == 0);
    }
    REQUIRE(load(model, &error));
    {
        scoped_option inject("fail_eval_op", "softmax", "");
        CHECK(evaluate_once(model) ==
              evaluate_prefix +
                  "line 7: softmax: failure injected by the simulator (fail_eval_op=softmax) "
                  "[CONSTRAINTS.md:82]");
    }
    CHECK(evaluate_once(model) == "");
    discard(model);
    discard(plain);
    pool_pop(pool);
    CHECK(violations().empty());
}

// Runs in a child process started by the next test case, with ANVIL_ANE_SIM_OPTIONS set before the library
// loads; does nothing in an ordinary run.
TEST_CASE("ane sim audit child: ANVIL_ANE_SIM_OPTIONS applied when the library loads") {
    if (std::getenv("ANVIL_ANE_SIM_AUDIT_CHILD") == nullptr) return;
    const std::string problems = violations();
    CHECK(problems.find("anvil-ane-sim: ANVIL_ANE_SIM_OPTIONS: unknown option 'no_such_option'\n") !=
          std::string::npos);
    CHECK(problems.find(
              "anvil-ane-sim: ANVIL_ANE_SIM_OPTIONS: bad value 'sometimes' for option 'io_width'\n") !=
          std::string::npos);
    CHECK(problems.find("anvil-ane-sim: ANVIL_ANE_SIM_OPTIONS: 'plain' is not name=value\n") !=
          std::string::npos);
    reset();  // a wrong environment stays reported for the whole process
    CHECK(violations() == problems);
    void* pool = pool_push();
    // profile=m5-macos26 came after architecture=h15g in the list, and the explicit architecture wins.
    CHECK(text_of(send<id>(get_class("_ANEDeviceInfo"), "aneArchitectureType")) == "h15g");
    // anchor=allow: an unanchored program loads; the profile's transcendentals=error still fails exp.
    id model = staged_model(
        program_text("tensor<fp16, [1, 64, 1, 32]> x",
                     "        tensor<fp16, [1, 64, 1, 32]> y = exp(x = x)[name = string(\"y\")];\n", "y"));
    id error = nullptr;
    REQUIRE(compile(model, &error));
    REQUIRE(load(model, &error));
    CHECK(evaluate_once(model).find("line 5: exp: compiles and loads but fails at dispatch") !=
          std::string::npos);
    discard(model);
    pool_pop(pool);
}

TEST_CASE("ane sim audit: ANVIL_ANE_SIM_OPTIONS is read once, at load, and reports what it cannot apply") {
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe");
    const std::string command =
        "ANVIL_ANE_SIM_AUDIT_CHILD=1 ANVIL_ANE_SIM_OPTIONS='architecture=h15g, "
        "profile=m5-macos26,anchor=allow,"
        "no_such_option=1,io_width=sometimes,plain' '" +
        self.string() + "' '--test-case=ane sim audit child*' 2>&1";
    FILE* child = popen(command.c_str(), "r");
    REQUIRE(child != nullptr);
    std::string output;
    for (char buffer[4096]; std::fgets(buffer, sizeof buffer, child) != nullptr;)
        output += buffer;
    const int status = pclose(child);
    INFO(output);
    CHECK(status == 0);
    // One line on stderr per problem, as the library prints it.
    CHECK(output.find("anvil-ane-sim: ANVIL_ANE_SIM_OPTIONS: unknown option 'no_such_option'\n") !=
          std::string::npos);
    CHECK(output.find("Status: SUCCESS!") != std::string::npos);
}

}  // namespace test_runtime_audit
