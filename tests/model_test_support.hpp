// What the model tests share: reading the fixtures a generator in tools/reference/ wrote, comparing with a
// relative tolerance, and running a recipe on the Neural Engine simulator.
#pragma once

#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace anvil_test {

// Captures anvil's warnings for one scope.
struct captured_warnings {
    captured_warnings()
        : previous(anvil::set_warning_handler([this](std::string_view text) { lines.emplace_back(text); })) {}
    captured_warnings(const captured_warnings&) = delete;
    captured_warnings& operator=(const captured_warnings&) = delete;
    ~captured_warnings() { anvil::set_warning_handler(previous); }
    std::vector<std::string> lines;
    anvil::warning_handler previous;
};

inline std::string data_path(const std::string& relative) {
    return std::string(ANVIL_TEST_DATA_DIR) + "/" + relative;
}

// A float .npy as an f32 host tensor, an integer one as i32.
inline anvil::host_tensor load_npy(const std::string& path) {
    const auto array = anvil::npy::read(path);
    if (array.type == anvil::dtype::i32)
        return anvil::host_tensor::from(array.values<std::int32_t>(), anvil::dims(array.shape));
    if (array.type == anvil::dtype::i64) {
        const auto values = array.values<std::int64_t>();
        std::vector<std::int32_t> narrow(values.size());
        std::transform(values.begin(), values.end(), narrow.begin(),
                       [](std::int64_t v) { return static_cast<std::int32_t>(v); });
        return anvil::host_tensor::from(narrow, anvil::dims(array.shape));
    }
    return anvil::host_tensor::from(array.to_f32(), anvil::dims(array.shape));
}

// max |a - b| over two tensors of one shape.
inline double max_difference(const anvil::host_tensor& a, const anvil::host_tensor& b) {
    REQUIRE(a.shape() == b.shape());
    const auto x = a.to_f32();
    const auto y = b.to_f32();
    double worst = 0.0;
    for (std::size_t i = 0; i < x.size(); ++i)
        worst = std::max(worst, std::fabs(static_cast<double>(x[i]) - static_cast<double>(y[i])));
    return worst;
}

// max |got - expected| / max(1, |expected|): relative for large values, absolute near zero.
inline double max_relative_error(const anvil::host_tensor& got, const anvil::host_tensor& expected) {
    REQUIRE(got.shape() == expected.shape());
    const auto a = got.to_f32();
    const auto b = expected.to_f32();
    double worst = 0.0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (!std::isfinite(a[i])) return INFINITY;
        worst =
            std::max(worst, std::fabs(double{a[i]} - double{b[i]}) / std::max(1.0, std::fabs(double{b[i]})));
    }
    return worst;
}
// The images [batch, 3, size, size] of the ViT-B/16- and CLIP ViT-B/16-shaped fixtures (too large to store,
// so tools/reference/patch16_fixtures.py and the tests compute them alike; exact in fp16): image n, channel
// c, row y, column x holds k / 32 - 1, k = ((x * 31 + y * 17 + c * 7 + n * 13) * (x + 2 * y + 3)) mod 64.
// `first` numbers the first image (n).
inline anvil::host_tensor patch16_pixels(std::int64_t batch, std::int64_t size, std::int64_t first = 0) {
    std::vector<float> values;
    values.reserve(static_cast<std::size_t>(batch * 3 * size * size));
    for (std::int64_t n = first; n < first + batch; ++n)
        for (std::int64_t c = 0; c < 3; ++c)
            for (std::int64_t y = 0; y < size; ++y)
                for (std::int64_t x = 0; x < size; ++x) {
                    const std::int64_t k = ((x * 31 + y * 17 + c * 7 + n * 13) * (x + 2 * y + 3)) % 64;
                    values.push_back(static_cast<float>(k) / 32.0f - 1.0f);
                }
    return anvil::host_tensor::from(values, anvil::dims{batch, 3, size, size});
}

// A fresh folder under the temporary directory (mkdtemp), removed with everything in it when this goes.
struct temporary_folder {
    explicit temporary_folder(const std::string& prefix = "anvil-test") {
        std::string pattern = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
        REQUIRE(mkdtemp(pattern.data()) != nullptr);
        path = pattern;
    }
    temporary_folder(const temporary_folder&) = delete;
    temporary_folder& operator=(const temporary_folder&) = delete;
    ~temporary_folder() {
        std::error_code ignored;
        std::filesystem::remove_all(path, ignored);
    }
    std::filesystem::path path;
};

// A recipe's options for the CPU. Model tests name the device: the default (automatic) picks the Neural
// Engine, which a simulator test case makes present for the rest of the process.
inline anvil::models::load_options cpu(anvil::cpu_kernels kernels = anvil::cpu_kernels::optimized) {
    anvil::models::load_options options;
    options.compile.target = anvil::device::cpu;
    options.compile.kernels = kernels;
    return options;
}

// Compile options for the CPU, and for the Neural Engine through the simulator (nullopt where the build has
// no simulator). The ANE options use a fresh cache directory that lives as long as the returned object.
struct ane_target {
    anvil::compile_options options;
    std::optional<temporary_folder> cache;
};

inline bool ane_simulator_available() {
#ifdef ANVIL_ANE_SIM_PATH
    setenv("ANVIL_ANE_SIM", ANVIL_ANE_SIM_PATH, 1);
    return true;
#else
    return false;
#endif
}

// Fills `target` for the simulator and returns true, or returns false where the build has none (tests then
// say so with a MESSAGE, never silently). `route` is device::ane (the private framework) or device::coreml
// (the public one, which the simulator implements too).
inline bool use_ane_simulator(ane_target& target, anvil::device route = anvil::device::ane) {
    if (!ane_simulator_available()) {
        MESSAGE("this build has no ANE simulator: the Neural Engine half of this test did not run");
        return false;
    }
    target.cache.emplace("anvil-model-cache");
    target.options.target = route;
    target.options.cache_dir = target.cache->path.string();
    return true;
}

// How a test's messages name the route its options take.
inline const char* route_name(const anvil::compile_options& options) {
    return options.target == anvil::device::coreml ? "through the Core ML route" : "on the ANE simulator";
}

// Whether this run's simulator variant injects faults or refuses ops (ANVIL_ANE_SIM_OPTIONS naming fail_*,
// inject* or the m5 profile): those runs check that refused segments run on the CPU, not where they run.
inline bool simulator_injects_faults() {
    const char* sim_options = std::getenv("ANVIL_ANE_SIM_OPTIONS");
    const std::string injected = sim_options ? sim_options : "";
    return injected.find("fail_") != std::string::npos || injected.find("inject") != std::string::npos ||
           injected.find("m5") != std::string::npos;
}

// Every segment the journal recorded ran on the Neural Engine, with no host nodes, and exactly one of them
// holds a conv2d (a vision model's patch embedding, lowered as space-to-depth and a 1x1 conv).
inline void check_all_on_ane_with_one_conv(const anvil::placement_journal& journal) {
    std::size_t convs = 0;
    for (const auto& report : journal.reports()) {
        CHECK(report.host_nodes.empty());
        for (const auto& segment : report.segments) {
            CAPTURE(segment.ops);
            CAPTURE(segment.reason);
            CHECK(segment.device != "cpu");
            if (segment.ops.find("conv2d") != std::string::npos) ++convs;
        }
    }
    CHECK(convs == 1);
}

}  // namespace anvil_test
