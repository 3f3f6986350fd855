// The ANE bridge (objc_runtime, core_foundation, io_surface, ane_framework) against the ANE simulator:
// loading, device query, CF round trips, IOSurfaces, a compile/load/evaluate/unload checked against a naive
// loop, the load retry, compiler messages, the temp-directory ownership and 200 cycles without leaks. The
// simulator's own diagnostics (live objects, violations, counters) are read through dlsym. Without
// ANVIL_ANE_SIM_PATH only the "no Neural Engine" error is checked (on a non-Apple machine).
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>
#include <anvil/backend/ane/ane_program.hpp>

#include "ane_simulator.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

namespace test_ane_bridge {

namespace ane = anvil::detail::ane;

#ifndef ANVIL_ANE_SIM_PATH

#if !defined(__APPLE__)
TEST_CASE("ane bridge: without the simulator a Linux machine reports that it has no Neural Engine") {
    unsetenv("ANVIL_ANE_SIM");
    try {
        (void)ane::runtime::get();
        FAIL("runtime::get() loaded something on a machine without a Neural Engine");
    } catch (const anvil::unsupported_error& e) {
        const std::string text = e.what();
        CHECK(text.find("no Neural Engine on this machine") != std::string::npos);
        CHECK(text.find("ANVIL_ANE_SIM=") != std::string::npos);
    }
}
#endif

#else  // ANVIL_ANE_SIM_PATH

// The simulator's diagnostics, from the same loaded library the bridge uses (dlopen returns the same handle).
using anvil_test::simulator;

const ane::runtime& sim_runtime() {
    setenv("ANVIL_ANE_SIM", ANVIL_ANE_SIM_PATH, 1);
    return ane::runtime::get();
}

// Resets the simulator's counters at the start of a case; at its end, nothing may be alive and no rule
// broken.
struct clean_simulator {
    clean_simulator() {
        (void)sim_runtime();
        anvil_test::sim().reset();
    }
    clean_simulator(const clean_simulator&) = delete;
    clean_simulator& operator=(const clean_simulator&) = delete;
    ~clean_simulator() {
        const simulator& s = anvil_test::sim();
        CHECK_MESSAGE(s.counter("live_objects") == 0, "live objects:\n", s.live_objects());
        CHECK_MESSAGE(s.counter("live_programs") == 0, "programs still loaded");
        CHECK_MESSAGE(std::string(s.violations()).empty(), "violations:\n", s.violations());
    }
};

constexpr const char* mil_header =
    "program(1.3)\n"
    "[buildInfo = dict<string, string>({{\"coremlc-component-MIL\", \"3510.2.1\"}, {\"coremlc-version\", "
    "\"3505.4.1\"}, {\"coremltools-component-milinternal\", \"\"}, {\"coremltools-version\", \"9.0\"}})]\n"
    "{\n";

// `output` = a depthwise 1x1 conv of `input` [1, 64, 1, 32] with weights 1: the identity, and the anchor op a
// program needs on the device (RUNTIME.md §0 #6: a program with no conv or matmul may not load).
std::string identity_conv(const std::string& input, const std::string& output) {
    std::string ones;
    for (int c = 0; c < 64; ++c)
        ones += c == 0 ? "1.0" : ", 1.0";
    return "        tensor<fp16, [64, 1, 1, 1]> w_" + output + " = const()[name = string(\"w_" + output +
           "\"), val = tensor<fp16, [64, 1, 1, 1]>([" + ones + "])];\n" +
           "        tensor<fp16, [1, 64, 1, 32]> " + output + " = conv(x = " + input + ", weight = w_" +
           output + ", groups = int32(64))[name = string(\"" + output + "\")];\n";
}

// z = relu(x + y) over two [1, 64, 1, 32] fp16 inputs (RUNTIME.md §4 header A), x through the identity conv.
std::string relu_add_mil() {
    return std::string(mil_header) +
           "    func main<ios18>(tensor<fp16, [1, 64, 1, 32]> x, tensor<fp16, [1, 64, 1, 32]> y) {\n" +
           identity_conv("x", "xc") +
           "        tensor<fp16, [1, 64, 1, 32]> s = add(x = xc, y = y)[name = string(\"s\")];\n"
           "        tensor<fp16, [1, 64, 1, 32]> z = relu(x = s)[name = string(\"z\")];\n"
           "    } -> (z);\n"
           "}\n";
}

// z = x + b with b a [1, 64, 1, 1] BLOBFILE constant, x through the identity conv.
std::string bias_add_mil() {
    return std::string(mil_header) + "    func main<ios18>(tensor<fp16, [1, 64, 1, 32]> x) {\n" +
           identity_conv("x", "xc") +
           "        tensor<fp16, [1, 64, 1, 1]> b = const()[name = string(\"b\"), val = tensor<fp16, [1, 64, "
           "1, "
           "1]>(BLOBFILE(path = string(\"@model_path/weights/bias.bin\"), offset = uint64(64)))];\n"
           "        tensor<fp16, [1, 64, 1, 32]> z = add(x = xc, y = b)[name = string(\"z\")];\n"
           "    } -> (z);\n"
           "}\n";
}

void put_u32(std::vector<std::byte>& out, std::size_t at, std::uint32_t value) {
    for (std::size_t i = 0; i < 4; ++i)
        out[at + i] = static_cast<std::byte>((value >> (8 * i)) & 0xFFu);
}
void put_u64(std::vector<std::byte>& out, std::size_t at, std::uint64_t value) {
    for (std::size_t i = 0; i < 8; ++i)
        out[at + i] = static_cast<std::byte>((value >> (8 * i)) & 0xFFu);
}

// One fp16 tensor in MIL blob storage v2 (RUNTIME.md §5): file header, metadata at 64, data at 128.
std::vector<std::byte> fp16_blob(const std::vector<float>& values) {
    const std::size_t size = values.size() * 2;
    std::vector<std::byte> out(128 + (size + 63) / 64 * 64, std::byte{0});
    put_u32(out, 0, 1);
    put_u32(out, 4, 2);
    put_u32(out, 64, 0xDEADBEEFu);
    put_u32(out, 68, 1);
    put_u64(out, 72, size);
    put_u64(out, 80, 128);
    for (std::size_t i = 0; i < values.size(); ++i) {
        const std::uint16_t bits = anvil::float_to_half_bits(values[i]);
        out[128 + 2 * i] = static_cast<std::byte>(bits & 0xFFu);
        out[129 + 2 * i] = static_cast<std::byte>(bits >> 8);
    }
    return out;
}

constexpr std::int64_t channels = 64;
constexpr std::int64_t width = 32;
constexpr std::size_t row_stride = 64;     // 32 fp16 = 64 bytes, already a multiple of 64
constexpr std::size_t alloc_size = 65536;  // the "at least 64 KiB" rule of RUNTIME.md §3

ane::io_surface make_surface() {
    return ane::io_surface::create(channels, width, 2, row_stride, alloc_size);
}

void write_fp16(const ane::io_surface& surface, const std::vector<float>& values) {
    const auto lock = surface.lock(false);
    for (std::int64_t c = 0; c < channels; ++c) {
        for (std::int64_t s = 0; s < width; ++s) {
            const std::uint16_t bits =
                anvil::float_to_half_bits(values[static_cast<std::size_t>(c * width + s)]);
            std::memcpy(
                lock.data() + static_cast<std::size_t>(c) * row_stride + static_cast<std::size_t>(s) * 2,
                &bits, 2);
        }
    }
}

std::vector<float> read_fp16(const ane::io_surface& surface) {
    const auto lock = surface.lock(true);
    std::vector<float> values(static_cast<std::size_t>(channels * width));
    for (std::int64_t c = 0; c < channels; ++c) {
        for (std::int64_t s = 0; s < width; ++s) {
            std::uint16_t bits = 0;
            std::memcpy(
                &bits,
                lock.data() + static_cast<std::size_t>(c) * row_stride + static_cast<std::size_t>(s) * 2, 2);
            values[static_cast<std::size_t>(c * width + s)] = anvil::half_bits_to_float(bits);
        }
    }
    return values;
}

// Multiples of 1/4 in [-4, 4): exact in fp16, and so are their sums.
std::vector<float> pattern(int seed) {
    std::vector<float> values(static_cast<std::size_t>(channels * width));
    for (std::size_t i = 0; i < values.size(); ++i) {
        values[i] =
            static_cast<float>(static_cast<int>((i * 7 + static_cast<std::size_t>(seed) * 13) % 32) - 16) *
            0.25f;
    }
    return values;
}

std::string thrown_message(auto&& action) {
    try {
        action();
    } catch (const anvil::error& e) {
        return e.what();
    }
    return "(nothing thrown)";
}

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

std::filesystem::path expected_temp_directory(const std::string& hex) {
    const char* tmpdir = std::getenv("TMPDIR");
    return std::filesystem::path(tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp/") / hex;
}

TEST_CASE("ane bridge: the runtime loads from the simulator and reports it; device info comes from it") {
    const clean_simulator check;
    const ane::runtime& rt = sim_runtime();
    CHECK(rt.simulated());
    CHECK(rt.library() == ANVIL_ANE_SIM_PATH);
    CHECK(&rt == &ane::runtime::get());

    const ane::device_info info = ane::query_device();
    CHECK(info.has_ane);
    CHECK(info.architecture == anvil_test::simulated_architecture());  // the default, or this run's profile
    CHECK(info.known);
    CHECK(info.cores > 0);
    {
        const anvil_test::scoped_option chip("architecture", "h15g", "h16g");
        CHECK(ane::query_device().architecture == "h15g");
    }
}

TEST_CASE("ane bridge: a selector the class lacks is an error naming both, not a crash") {
    const clean_simulator check;
    const ane::runtime& rt = sim_runtime();
    const std::string text = thrown_message([&] {
        (void)rt.send<ane::objc_id>(rt.classes.request, rt.selector_named("noSuchSelectorForAnvil"));
    });
    CHECK(contains(text, "noSuchSelectorForAnvil"));
    CHECK(contains(text, "_ANERequest"));
    CHECK(
        contains(thrown_message([&] { (void)rt.send(nullptr, rt.messages.hex_string_identifier); }), "nil"));
}

TEST_CASE("ane bridge: Core Foundation values round-trip") {
    const clean_simulator check;
    const std::string text =
        "Gr\xC3\xBC\xC3\x9F"
        "e \xE2\x9C\x93 anvil";
    const ane::objc_object string = ane::make_string(text);
    CHECK(ane::string_value(string.get()) == text);

    const ane::objc_object number = ane::make_number(-1234567890123LL);
    CHECK(ane::number_value(number.get()) == -1234567890123LL);

    const std::vector<std::byte> bytes = {std::byte{0}, std::byte{0xFF}, std::byte{0}, std::byte{42}};
    const ane::objc_object data = ane::make_data(bytes);
    const auto read = ane::data_bytes(data.get());
    CHECK(std::vector<std::byte>(read.begin(), read.end()) == bytes);

    const ane::objc_id elements[] = {string.get(), number.get(), data.get()};
    const ane::objc_object array = ane::make_array(elements);
    REQUIRE(ane::array_count(array.get()) == 3);
    CHECK(ane::array_at(array.get(), 1) == number.get());
    CHECK(contains(thrown_message([&] { (void)ane::array_at(array.get(), 3); }), "index 3"));

    const ane::objc_object key_a = ane::make_string("alpha");
    const ane::objc_object key_b = ane::make_string("beta");
    const ane::objc_object dictionary =
        ane::make_dictionary({{key_a.get(), number.get()}, {key_b.get(), array.get()}});
    CHECK(ane::dictionary_count(dictionary.get()) == 2);
    CHECK(ane::dictionary_lookup(dictionary.get(), "alpha") == number.get());  // looked up by content
    CHECK(ane::array_count(ane::dictionary_lookup(dictionary.get(), "beta")) == 3);
    CHECK(ane::dictionary_lookup(dictionary.get(), "gamma") == nullptr);
    CHECK(ane::dictionary_count(ane::make_empty_dictionary().get()) == 0);

    const std::string mismatch = thrown_message([&] { (void)ane::string_value(number.get(), "the answer"); });
    CHECK(contains(mismatch, "the answer"));
    CHECK(contains(mismatch, "expected a CFString, got CFNumber"));
}

TEST_CASE("ane bridge: IOSurfaces are created with the asked layout and read back what was written") {
    const clean_simulator check;
    {
        const ane::io_surface surface = make_surface();
        CHECK(surface.handle() != nullptr);
        CHECK(surface.alloc_size() >= alloc_size);
        CHECK(surface.row_stride() == row_stride);
        const std::vector<float> values = pattern(3);
        write_fp16(surface, values);
        CHECK(read_fp16(surface) == values);
    }
    CHECK(contains(thrown_message([] { (void)ane::io_surface::create(4, 40, 2, 96, 65536); }),
                   "multiple of 64"));
    CHECK(contains(thrown_message([] { (void)ane::io_surface::create(4, 40, 2, 64, 65536); }),
                   "at least the row"));
    CHECK(contains(thrown_message([] { (void)ane::io_surface::create(4, 32, 3, 64, 65536); }),
                   "element size 3"));
    CHECK(contains(thrown_message([] { (void)ane::io_surface::create(64, 32, 2, 64, 1024); }),
                   "4096 bytes needed"));
}

TEST_CASE("ane bridge: relu(x + y) compiles, loads, evaluates and unloads, matching a naive loop") {
    const clean_simulator check;
    const simulator& sim = anvil_test::sim();
    const ane::io_surface x = make_surface();
    const ane::io_surface y = make_surface();
    const ane::io_surface z = make_surface();
    {
        ane::ane_model model = ane::ane_model::create(relu_add_mil(), {});
        CHECK(!model.hex_identifier().empty());
        CHECK(model.directory() == expected_temp_directory(model.hex_identifier()));
        model.compile();
        CHECK(std::filesystem::exists(model.directory() / "model.mil"));
        model.load();
        CHECK(model.loaded());
        CHECK(sim.counter("live_programs") == 1);

        const ane::model_layout layout = model.layout();
        REQUIRE(layout.inputs.size() == 2);
        REQUIRE(layout.outputs.size() == 1);
        CHECK(layout.inputs[0].name == "x");
        CHECK(layout.inputs[1].name == "y");
        CHECK(layout.outputs[0].name == "z");
        for (const ane::symbol_layout& symbol : {layout.inputs[0], layout.inputs[1], layout.outputs[0]}) {
            CHECK(symbol.channels == channels);
            CHECK(symbol.height == 1);
            CHECK(symbol.width == width);
            CHECK(symbol.row_stride == row_stride);
            CHECK(symbol.fp16);
        }

        const std::vector<float> a = pattern(1);
        const std::vector<float> b = pattern(2);
        write_fp16(x, a);
        write_fp16(y, b);
        const ane::io_surface* inputs[] = {&x, &y};
        const ane::io_surface* outputs[] = {&z};
        const ane::ane_request request = model.make_request(inputs, outputs);
        model.evaluate(request);
        const std::vector<float> result = read_fp16(z);
        std::size_t mismatches = 0;
        for (std::size_t i = 0; i < a.size(); ++i) {
            const float expected = a[i] + b[i] > 0.0f ? a[i] + b[i] : 0.0f;
            if (result[i] != expected) ++mismatches;
        }
        CHECK(mismatches == 0);
        CHECK(sim.counter("compiles") == 1);
        CHECK(sim.counter("loads") == 1);
        CHECK(sim.counter("evaluations") == 1);

        model.unload();
        CHECK(!model.loaded());
        CHECK(sim.counter("live_programs") == 0);
        CHECK(contains(thrown_message([&] { model.evaluate(request); }), "not loaded"));
    }
}

TEST_CASE("ane bridge: weights reach the framework and the model directory; the last owner removes it") {
    const clean_simulator check;
    std::vector<float> bias(static_cast<std::size_t>(channels));
    for (std::size_t c = 0; c < bias.size(); ++c)
        bias[c] = static_cast<float>(c % 9) - 4.0f;
    const std::vector<ane::weight_file> weights = {{"@model_path/weights/bias.bin", fp16_blob(bias)}};

    ane::ane_model first = ane::ane_model::create(bias_add_mil(), weights);
    std::filesystem::path directory = first.directory();
    {
        ane::ane_model second = ane::ane_model::create(bias_add_mil(), weights);
        CHECK(second.hex_identifier() == first.hex_identifier());  // same MIL and weights, same directory
        second.compile();
        std::ifstream written(directory / "weights" / "bias.bin", std::ios::binary);
        const std::vector<char> on_disk((std::istreambuf_iterator<char>(written)),
                                        std::istreambuf_iterator<char>());
        REQUIRE(on_disk.size() == weights[0].bytes.size());
        CHECK(std::memcmp(on_disk.data(), weights[0].bytes.data(), on_disk.size()) == 0);

        second.load();
        const ane::io_surface x = make_surface();
        const ane::io_surface z = make_surface();
        const std::vector<float> a = pattern(5);
        write_fp16(x, a);
        const ane::io_surface* inputs[] = {&x};
        const ane::io_surface* outputs[] = {&z};
        const ane::ane_request request = second.make_request(inputs, outputs);
        second.evaluate(request);
        const std::vector<float> result = read_fp16(z);
        std::size_t mismatches = 0;
        for (std::size_t i = 0; i < a.size(); ++i) {
            if (result[i] != a[i] + bias[i / static_cast<std::size_t>(width)]) ++mismatches;
        }
        CHECK(mismatches == 0);
    }  // second destroyed (unloaded on the way): the first still uses the directory
    CHECK(std::filesystem::exists(directory / "model.mil"));
    ane::ane_model moved = std::move(first);
    CHECK(std::filesystem::exists(directory));
    { const ane::ane_model last = std::move(moved); }
    CHECK(!std::filesystem::exists(directory));
}

TEST_CASE(
    "ane bridge: a failed load is retried with exponential backoff; a lasting failure is a clear error") {
    const clean_simulator check;
    const simulator& sim = anvil_test::sim();
    {
        // The simulator fails the next N loads in a row with a transient error (RUNTIME.md §0 #13).
        sim.option("inject_load_failures", "3");
        ane::ane_model first = ane::ane_model::create(relu_add_mil(), {});
        ane::ane_model second = ane::ane_model::create(
            // Other weights than the earlier case's under the same text would share its compiled identity
            // (RUNTIME.md §0b #21): the text says which weights it holds, as anvil's buildInfo digest does.
            bias_add_mil() + "// a bias of ones\n",
            {{{"@model_path/weights/bias.bin", fp16_blob(std::vector<float>(64, 1.0f))}}});
        first.compile();
        second.compile();
        const auto started = std::chrono::steady_clock::now();
        first.load(
            ane::load_retry_policy{7, std::chrono::milliseconds(10)});  // fails 3 times: 10 + 20 + 40 ms
        CHECK(std::chrono::steady_clock::now() - started >= std::chrono::milliseconds(70));
        second.load();
        CHECK(first.loaded());
        CHECK(second.loaded());
        CHECK(sim.counter("live_programs") == 2);
        CHECK(sim.counter("loads") == 2);
        sim.option("inject_load_failures", "0");
    }
    // A load that keeps failing (nothing compiled) reports the framework's message after the last try.
    ane::ane_model model = ane::ane_model::create(relu_add_mil(), {});
    const std::string text = thrown_message([&] {
        model.load(ane::load_retry_policy{3, std::chrono::milliseconds(1)});
    });
    CHECK(contains(text, "ANE load of program " + model.hex_identifier()));
    CHECK(contains(text, "after 3 tries"));
    CHECK(contains(text, "not compiled"));
    CHECK(!model.loaded());
}

TEST_CASE("ane bridge: a bad MIL program is an anvil::error carrying the compiler's message and line") {
    const clean_simulator check;
    const std::string mil =
        std::string(mil_header) +
        "    func main<ios18>(tensor<fp16, [1, 64, 1, 32]> x) {\n"
        "        tensor<fp16, [1, 64, 1, 32]> z = frobnicate(x = x)[name = string(\"z\")];\n"
        "    } -> (z);\n"
        "}\n";
    const std::string text = thrown_message([&] {
        ane::ane_model model = ane::ane_model::create(mil, {});
        model.compile();
    });
    CHECK(contains(text, "ANE compile of program"));
    CHECK(contains(text, "frobnicate"));
    CHECK(contains(text, "MIL line 5: tensor<fp16, [1, 64, 1, 32]> z = frobnicate"));

    const std::string bad_key = thrown_message([] {
        const std::vector<ane::weight_file> weights = {{"weights/bias.bin", {}}};
        (void)ane::ane_model::create(bias_add_mil(), weights);
    });
    CHECK(contains(bad_key, "@model_path/"));
}

TEST_CASE("ane bridge: a cache directory set with setModelURL: serves a second model without a compile") {
    const clean_simulator check;
    const simulator& sim = anvil_test::sim();
    const std::filesystem::path cache =
        std::filesystem::temp_directory_path() / ("anvil_test_ane_bridge_cache_" + std::to_string(getpid()));
    std::filesystem::remove_all(cache);
    // A text of this process's own: another test process compiling relu_add_mil() stages it in the same
    // <tmp>/<hex> directory (the identifier follows the text), which this test checks stays unused.
    std::string mil = relu_add_mil();
    const std::string sum_name = "string(\"s\")";
    mil.replace(mil.find(sum_name), sum_name.size(), "string(\"s_" + std::to_string(getpid()) + "\")");
    {
        ane::ane_model model = ane::ane_model::create(mil, {});
        REQUIRE(model.set_cache_directory(cache));
        CHECK(!model.compiled_model_exists());
        model.compile();
        model.load();
        // Staged in the model-URL directory itself, as OMLX does (RUNTIME.md §0 #2), not in <tmp>/<hex>.
        CHECK(std::filesystem::exists(cache / "model.mil"));
        CHECK(!std::filesystem::exists(model.directory() / "model.mil"));
    }
    {
        ane::ane_model model = ane::ane_model::create(mil, {});
        REQUIRE(model.set_cache_directory(cache));
        CHECK(model.compiled_model_exists());
        model.load();
        CHECK(sim.counter("compiles") == 1);
        CHECK(sim.counter("compile_cache_hits") == 1);
    }
    std::filesystem::remove_all(cache);
}

TEST_CASE("ane bridge: 200 create/compile/load/evaluate/unload/destroy cycles leave nothing behind") {
    const clean_simulator check;
    const simulator& sim = anvil_test::sim();
    // The per-process budget (119) would stop this test; only a new process resets the count.
    sim.option("compile_budget", "1000000");
    const ane::io_surface x = make_surface();
    const ane::io_surface y = make_surface();
    const ane::io_surface z = make_surface();
    const std::vector<float> a = pattern(7);
    const std::vector<float> b = pattern(8);
    write_fp16(x, a);
    write_fp16(y, b);
    const ane::io_surface* inputs[] = {&x, &y};
    const ane::io_surface* outputs[] = {&z};
    const long live_before = sim.counter("live_objects");
    long live_after_first = -1;
    for (int cycle = 0; cycle < 200; ++cycle) {
        {
            ane::ane_model model = ane::ane_model::create(relu_add_mil(), {});
            model.compile();
            model.load();
            const ane::ane_request request = model.make_request(inputs, outputs);
            model.evaluate(request);
            model.unload();
        }
        if (cycle == 0) live_after_first = sim.counter("live_objects");
    }
    CHECK(live_after_first == live_before);
    CHECK(sim.counter("live_objects") == live_before);
    CHECK(sim.counter("compiles") == 200);
    CHECK(sim.counter("evaluations") == 200);
    const std::vector<float> result = read_fp16(z);
    CHECK(result[5] == (a[5] + b[5] > 0.0f ? a[5] + b[5] : 0.0f));
}

#endif  // ANVIL_ANE_SIM_PATH

}  // namespace test_ane_bridge
