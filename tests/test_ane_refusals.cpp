// The Neural Engine backend when the device refuses a program: the more conservative forms it is lowered in
// before its segment goes to the CPU (ios16, fp16 weights, every op decomposed), the dialect chosen from the
// OS, and sub-byte palettes in the ios16 form (RUNTIME.md §0b #18, #19, #22), through the simulator. Their
// own process: each refused form is a compile of the ~119 a process gets.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ane_simulator.hpp"
#include "ane_test_block.hpp"
#include "model_test_support.hpp"

namespace test_ane_refusals {

#ifdef ANVIL_ANE_SIM_PATH

using anvil_test::ane_block;
using anvil_test::captured_warnings;
using anvil_test::max_difference;
using anvil_test::scoped_option;
using anvil_test::sim;
using anvil_test::temporary_folder;

anvil::compile_options ane_options(const temporary_folder& cache) {
    anvil::compile_options options;
    options.target = anvil::device::ane;
    options.cache_dir = cache.path.string();
    return options;
}

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

TEST_CASE(
    "ane refusals: a refused segment is lowered again, more conservatively, before it goes to the CPU") {
    temporary_folder cache;
    ane_block b;
    const auto want = anvil::compile({b.out}).run(b.inputs);
    for (const char* fault : {"fail_compile_op", "fail_load_op", "fail_eval_op"}) {
        CAPTURE(fault);
        // The native softmax is refused: ios16 still holds it, the decomposed form does not.
        scoped_option injected(fault, "softmax", "");
        auto options = ane_options(cache);
        options.cache_dir = "none";
        options.ane_load_first_retry_delay = std::chrono::milliseconds(1);
        sim().reset();
        anvil::program p = anvil::compile({b.out}, options);
        const anvil::placement_report report = p.placement();
        CHECK(report.refused() == 0);
        REQUIRE(report.segments.size() == 1);
        CHECK(report.segments[0].device == "ane");
        CAPTURE(report.segments[0].reason);
        CHECK(
            contains(report.segments[0].reason, "it runs with every op that has a decomposition decomposed"));
        // The ios16 form still holds the softmax the device named: it is not compiled.
        CHECK_FALSE(contains(report.segments[0].reason, "program(1.0)/ios16"));
        CHECK(sim().counter("compiles") == 2);
        CHECK(max_difference(want[0], p.run(b.inputs)[0]) < 1e-2);
        // A variant asked for explicitly stays as asked: the segment goes to the CPU.
        options.ane_lowering["softmax"] = "native";
        captured_warnings warnings;
        CHECK(anvil::compile({b.out}, options).placement().refused() == 1);
        // So does the exact form anvil selftest's probes need.
        options.ane_lowering.clear();
        options.ane_exact_lowering = true;
        CHECK(anvil::compile({b.out}, options).placement().refused() == 1);
    }
    CHECK(sim().counter("live_programs") == 0);
}

TEST_CASE("ane refusals: the dialect follows the OS: macOS 14 gets ios16 without a refused compile") {
    const std::string chip = anvil_test::simulated_architecture();
    const bool old_chip = anvil::detail::ane::is_h13_or_h14(chip);
    temporary_folder cache;
    ane_block b;
    const auto want = anvil::compile({b.out}).run(b.inputs);
    auto options = ane_options(cache);
    options.cache_dir = "none";
    {
        scoped_option macos("macos", "14", "15");
        sim().reset();
        anvil::program p = anvil::compile({b.out}, options);
        CHECK(contains(p.placement().lowering, "defaults for " + chip + " on macOS 14"));
        CHECK(contains(p.placement().lowering, "dialect=decomposed"));
        CHECK(contains(p.dump(), "program(1.0)/ios16"));
        CHECK(p.placement().segments.at(0).reason.empty());  // no refused form before it
        CHECK(sim().counter("compiles") == 1);
        CHECK(max_difference(want[0], p.run(b.inputs)[0]) < 1e-2);
    }
    sim().reset();
    anvil::program p = anvil::compile({b.out}, options);
    CHECK(contains(p.placement().lowering, "on macOS 15"));
    // M1/M2 take program(1.0) only, whatever the OS (RUNTIME.md §0 #4).
    CHECK(contains(p.dump(), old_chip ? "program(1.0)/ios16" : "program(1.3)/ios18"));
    CHECK(sim().counter("compiles") == 1);
}

TEST_CASE("ane refusals: a compile refused in ios18 is lowered once more in ios16 before the CPU") {
    // Sub-byte palettes are refused in ios18 programs by the private compiler (RUNTIME.md §0b #19); the
    // `palette` variant asked for natively keeps them so, and the ios16 form, with uint8-packed indices,
    // holds.
    temporary_folder cache;
    ane_block b;
    auto cpu = anvil::compile_options{};
    cpu.weight_compression = anvil::weight_compression::lut4;
    const auto want = anvil::compile({b.out}, cpu).run(b.inputs);
    auto options = ane_options(cache);
    options.cache_dir = "none";
    options.weight_compression = anvil::weight_compression::lut4;
    options.ane_lowering["palette"] = "native";
    sim().reset();
    anvil::program p = anvil::compile({b.out}, options);
    const anvil::placement_report report = p.placement();
    REQUIRE(report.segments.size() == 1);
    CHECK(report.refused() == 0);
    CAPTURE(report.segments[0].reason);
    if (anvil::detail::ane::is_h13_or_h14(anvil_test::simulated_architecture())) {
        // M1/M2 take program(1.0) only: the ios16 form from the start, nothing refused.
        CHECK(report.segments[0].reason.empty());
        CHECK(sim().counter("compiles") == 1);
        CHECK(max_difference(want[0], p.run(b.inputs)[0]) < 1e-2);
        return;
    }
    CHECK(contains(report.segments[0].reason, "refused at compile"));
    CHECK(contains(report.segments[0].reason, "sub-byte constexpr weights in an ios18 program are refused"));
    CHECK(contains(report.segments[0].reason, "it runs lowered as program(1.0)/ios16"));
    CHECK(contains(p.dump(), "program(1.0)\n["));         // the segment's MIL
    CHECK(contains(p.dump(), "constexpr_lut_to_dense"));  // still compressed, in the ios16 form
    CHECK(sim().counter("compiles") == 2);                // the refused ios18 compile, then ios16
    CHECK(max_difference(want[0], p.run(b.inputs)[0]) < 1e-2);
    // By default (no record) the ios16 form is chosen at once: no refused compile.
    options.ane_lowering.clear();
    sim().reset();
    anvil::program direct = anvil::compile({b.out}, options);
    CHECK(direct.placement().segments.at(0).reason.empty());
    CHECK(contains(direct.dump(), "program(1.0)\n["));
    CHECK(sim().counter("compiles") == 1);
    CHECK(contains(direct.dump(), "constexpr_lut_to_dense"));
    CHECK(max_difference(want[0], direct.run(b.inputs)[0]) < 1e-2);
}

TEST_CASE(
    "ane refusals: a cached program that no longer loads is staged and compiled again from its weights") {
    // RUNTIME.md §0b #22: the weights stay until the first load succeeds, so a stale cache entry is
    // recompiled in the same form, not given up or lowered otherwise.
    temporary_folder cache;
    ane_block b;
    const auto want = anvil::compile({b.out}).run(b.inputs);
    auto options = ane_options(cache);
    options.ane_load_attempts = 2;
    options.ane_load_first_retry_delay = std::chrono::milliseconds(1);
    { CHECK_FALSE(anvil::compile({b.out}, options).placement().segments.at(0).cached); }
    scoped_option failures("inject_load_failures", "2", "0");  // the cached program's two tries
    sim().reset();
    anvil::program p = anvil::compile({b.out}, options);
    const anvil::placement_report report = p.placement();
    REQUIRE(report.segments.size() == 1);
    CHECK(report.segments[0].device == "ane");
    CHECK_FALSE(report.segments[0].cached);
    CHECK(report.segments[0].reason.empty());  // the same form, compiled again
    CHECK(sim().counter("compiles") == 1);
    CHECK(max_difference(want[0], p.run(b.inputs)[0]) < 1e-2);
    CHECK(sim().violations() == "");
}

TEST_CASE("ane refusals: a first evaluation that never returns is abandoned after the watchdog's timeout") {
    // RUNTIME.md §0b #22: a wedged driver never signals. The simulator hangs the first evaluation of every
    // program holding softmax; the decomposed form has none, and runs.
    temporary_folder cache;
    ane_block b;
    const auto want = anvil::compile({b.out}).run(b.inputs);
    auto options = ane_options(cache);
    options.cache_dir = "none";
    options.ane_first_evaluation_timeout = std::chrono::milliseconds(300);
    {
        scoped_option hang("hang_eval_op", "softmax", "");
        const auto start = std::chrono::steady_clock::now();
        anvil::program p = anvil::compile({b.out}, options);
        CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
        const anvil::placement_report report = p.placement();
        REQUIRE(report.segments.size() == 1);
        CHECK(report.segments[0].device == "ane");
        CAPTURE(report.segments[0].reason);
        CHECK(contains(report.segments[0].reason,
                       "refused at evaluate (the first evaluation did not return within 300 ms"));
        CHECK(
            contains(report.segments[0].reason, "it runs with every op that has a decomposition decomposed"));
        CHECK(max_difference(want[0], p.run(b.inputs)[0]) < 1e-2);
        // Tested in one form only, the segment runs on the CPU.
        options.ane_exact_lowering = true;
        captured_warnings warnings;
        anvil::program exact = anvil::compile({b.out}, options);
        CHECK(exact.placement().refused() == 1);
        CHECK(max_difference(want[0], exact.run(b.inputs)[0]) < 1e-6);
    }
    sim().reset();  // the hung evaluations return now
}

TEST_CASE("ane refusals: a program whose first evaluation disagrees with the CPU runs on the CPU") {
    // RUNTIME.md §0b #21: a program compiled with another program's weights returns other numbers. The
    // simulator's wrong_eval_op makes every evaluation of a program holding softmax return 1 - y.
    temporary_folder cache;
    ane_block b;
    const auto want = anvil::compile({b.out}).run(b.inputs);
    auto options = ane_options(cache);
    options.cache_dir = "none";
    options.ane_exact_lowering = true;
    scoped_option wrong("wrong_eval_op", "softmax", "");
    captured_warnings warnings;
    anvil::program p = anvil::compile({b.out}, options);
    const anvil::placement_report report = p.placement();
    REQUIRE(report.refused() == 1);
    CHECK(report.segments[0].refused_at == "evaluate");
    CAPTURE(report.segments[0].framework_error);
    CHECK(contains(report.segments[0].framework_error, "differs from the CPU's on the same inputs"));
    CHECK(max_difference(want[0], p.run(b.inputs)[0]) < 1e-6);
    // Without the comparison the wrong numbers would reach the caller.
    options.ane_verify_first_evaluation = false;
    anvil::program unchecked = anvil::compile({b.out}, options);
    CHECK(unchecked.placement().refused() == 0);
    CHECK(max_difference(want[0], unchecked.run(b.inputs)[0]) > 0.1);
    sim().reset();
}

TEST_CASE("ane refusals: two programs of one structure and other weights each run their own weights") {
    // RUNTIME.md §0b #21: the simulator gives a text the identity of its first compile (identity=text); the
    // weights' digest in buildInfo makes the second program's text differ, so it runs its own weights.
    temporary_folder cache;
    ane_block first(0.0f), second(0.05f);
    auto options = ane_options(cache);
    options.cache_dir = "none";
    options.ane_verify_first_evaluation = false;  // the numbers below, not the check, must show it
    sim().reset();
    anvil::program a = anvil::compile({first.out}, options);
    anvil::program b = anvil::compile({second.out}, options);
    CHECK(a.placement().refused() == 0);
    CHECK(b.placement().refused() == 0);
    CHECK(max_difference(anvil::compile({first.out}).run(first.inputs)[0], a.run(first.inputs)[0]) < 1e-2);
    CHECK(max_difference(anvil::compile({second.out}).run(second.inputs)[0], b.run(second.inputs)[0]) < 1e-2);
    CHECK(sim().violations() == "");
}

TEST_CASE("ane refusals: a full device unloads the least recently used program, which loads again when run") {
    // RUNTIME.md §0b #23: a full pool (0x50004) is not transient; unloading another program makes room. The
    // simulated device holds two programs; four are compiled and run in turns, each on its own weights.
    temporary_folder cache;
    // Programs an earlier test abandoned in a hung first evaluation stay loaded for good (and are never
    // unloaded: the blocked call still uses them): the device holds two more.
    const long held = sim().counter("live_programs");
    const std::string room = std::to_string(held + 2);
    scoped_option pool("max_live_programs", room.c_str(), "15");
    auto options = ane_options(cache);
    options.cache_dir = "none";
    options.ane_load_first_retry_delay = std::chrono::milliseconds(1);
    sim().reset();
    auto& loaded = anvil::detail::ane::loaded_programs::instance();
    const std::size_t unloaded_before = loaded.unloaded_for_room();
    std::vector<std::unique_ptr<ane_block>> blocks;
    std::vector<anvil::program> programs;
    std::vector<std::vector<anvil::host_tensor>> wanted;
    for (int i = 0; i < 4; ++i) {
        blocks.push_back(std::make_unique<ane_block>(0.02f * static_cast<float>(i)));
        wanted.push_back(anvil::compile({blocks.back()->out}).run(blocks.back()->inputs));
        programs.push_back(anvil::compile({blocks.back()->out}, options));
        CHECK(programs.back().placement().refused() == 0);
        CHECK(sim().counter("live_programs") <= held + 2);
    }
    CHECK(loaded.unloaded_for_room() - unloaded_before == 2);
    const long loads_before = sim().counter("loads");
    for (int round = 0; round < 2; ++round) {
        for (const int i : {0, 3, 1, 2}) {
            CAPTURE(i);
            const auto got =
                programs[static_cast<std::size_t>(i)].run(blocks[static_cast<std::size_t>(i)]->inputs);
            CHECK(max_difference(wanted[static_cast<std::size_t>(i)][0], got[0]) < 1e-2);
            CHECK(sim().counter("live_programs") <= held + 2);
        }
    }
    // 0 and 1 were unloaded while 2 and 3 compiled; every run of a program not among the two most recently
    // used loads it again: compiles stay at four.
    CHECK(sim().counter("loads") - loads_before == 8 - 1);
    CHECK(sim().counter("compiles") == 4);
    programs.clear();
    CHECK(sim().counter("live_programs") == held);
    CHECK(sim().violations() == "");
}

TEST_CASE("ane refusals: ane_max_loaded_programs unloads before the device is full") {
    temporary_folder cache;
    auto options = ane_options(cache);
    options.cache_dir = "none";
    // Programs an earlier test abandoned in a hung first evaluation stay loaded, and count against the cap.
    const long held = sim().counter("live_programs");
    options.ane_max_loaded_programs = static_cast<std::size_t>(held) + 1;
    sim().reset();
    ane_block first(0.0f), second(0.05f);
    const auto want_first = anvil::compile({first.out}).run(first.inputs);
    const auto want_second = anvil::compile({second.out}).run(second.inputs);
    anvil::program a = anvil::compile({first.out}, options);
    anvil::program b = anvil::compile({second.out}, options);
    CHECK(a.placement().refused() == 0);
    CHECK(b.placement().refused() == 0);
    for (int round = 0; round < 3; ++round) {
        CHECK(max_difference(want_first[0], a.run(first.inputs)[0]) < 1e-2);
        CHECK(sim().counter("live_programs") == held + 1);
        CHECK(max_difference(want_second[0], b.run(second.inputs)[0]) < 1e-2);
        CHECK(sim().counter("live_programs") == held + 1);
    }
    CHECK(sim().counter("loads") == 2 + 6);  // each run loads its program again, unloading the other
    CHECK(sim().violations() == "");
}

TEST_CASE("ane refusals: a program being compiled into the cache is neither probed nor cleared by another") {
    // RUNTIME.md §0b #22: the cache entry's lock is held from the probe (compiledModelExists) to the load. A
    // thread compiles a program into the cache, each compile taking 300 ms (compile_delay_ms); another asks
    // for the same program 100 ms later. Without the lock it would find no compiled program, clear the first
    // one's staged files and compile again; with it, it waits and loads what the first compiled.
    temporary_folder cache;
    ane_block b;
    const auto want = anvil::compile({b.out}).run(b.inputs);
    const auto options = ane_options(cache);
    scoped_option slow("compile_delay_ms", "300", "0");
    sim().reset();
    std::optional<anvil::program> first, second;
    std::exception_ptr failure;
    std::mutex failure_mutex;
    const auto compile_into = [&](std::optional<anvil::program>& out) {
        try {
            out.emplace(anvil::compile({b.out}, options));
        } catch (...) {
            const std::lock_guard lock(failure_mutex);
            failure = std::current_exception();
        }
    };
    std::thread early([&] { compile_into(first); });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::thread late([&] { compile_into(second); });
    early.join();
    late.join();
    if (failure) std::rethrow_exception(failure);
    REQUIRE(first);
    REQUIRE(second);
    CHECK(sim().counter("compiles") == 1);
    CHECK(first->placement().refused() == 0);
    CHECK(second->placement().refused() == 0);
    REQUIRE(second->placement().segments.size() == 1);
    CHECK(second->placement().segments[0].cached);
    CHECK(max_difference(want[0], first->run(b.inputs)[0]) < 1e-2);
    CHECK(max_difference(want[0], second->run(b.inputs)[0]) < 1e-2);
    CHECK(sim().violations() == "");
}

#endif  // ANVIL_ANE_SIM_PATH

}  // namespace test_ane_refusals
