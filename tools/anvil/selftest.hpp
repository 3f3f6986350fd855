// `anvil selftest`: every IR op on the Neural Engine and on the CPU, with the error of each against the CPU
// and both times. On a Mac it runs on the ANE; elsewhere on the simulator (ANVIL_ANE_SIM, or the
// libanvil-ane-sim.so built next to this binary).
#pragma once

#include "arguments.hpp"
#include "model_commands.hpp"

#include <anvil/anvil.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace anvil::cli {

inline constexpr const char* selftest_usage =
    "usage: anvil selftest [--json] [--repeats N]\n"
    "\n"
    "Runs one small graph per op on the Neural Engine and on the CPU and prints, per op, where it runs\n"
    "(native, decomposed, host), its largest error against the CPU relative to the output's magnitude, the\n"
    "fp16 tolerance for that op, and the time of one run on each. Exit status 1 when any op fails.\n"
    "Without a Neural Engine it runs on the simulator: $ANVIL_ANE_SIM, else libanvil-ane-sim.so beside this\n"
    "program.\n";

// The Neural Engine, or the simulator beside the executable when nothing else provides one.
inline std::string choose_selftest_backend(const char* argv0) {
    std::string where = locate_neural_engine(argv0);
    if (where.empty()) {
        throw error(
            "selftest: no Neural Engine on this machine and no simulator: set ANVIL_ANE_SIM=/path/to/"
            "libanvil-ane-sim.so (built from tools/ane-sim)");
    }
    return where;
}

inline int run_selftest(const std::vector<std::string_view>& argv, const char* argv0) {
    const arguments args("selftest", argv, {{"json", false}, {"help", false}, {"repeats", true}});
    if (args.flag("help")) {
        std::fputs(selftest_usage, stdout);
        return 0;
    }
    if (!args.positional().empty()) throw usage_error("selftest: takes no positional arguments");
    ane_selftest_options options;
    options.ane.cache_dir = "none";  // measure compiles, not the cache
    if (const auto repeats = args.value("repeats")) {
        char* end = nullptr;
        const long n = std::strtol(repeats->c_str(), &end, 10);
        if (end == repeats->c_str() || *end != '\0' || n < 1 || n > 1000)
            throw usage_error(
                detail::message("selftest: --repeats: expected 1 to 1000, got '", *repeats, "'"));
        options.repeats = static_cast<int>(n);
    }
    const std::string backend = choose_selftest_backend(argv0);
    // A missing or broken framework (or simulator) is one clear error, not a table of failed rows.
    if (!detail::ane::query_device().has_ane)
        throw error(detail::message("selftest: ", backend, " reports no Neural Engine"));
    const auto rows = ane_selftest(options);
    std::size_t failed = 0;
    for (const auto& row : rows)
        failed += row.passed ? 0 : 1;
    if (args.flag("json")) {
        json::array list;
        for (const auto& row : rows) {
            json::object o;
            o["case"] = json::value(row.name);
            o["op"] = json::value(std::string(op_name(row.kind)));
            o["placement"] = json::value(row.placement);
            o["max_error"] = json::value(std::isfinite(row.max_error) ? row.max_error : -1.0);
            o["tolerance"] = json::value(row.tolerance);
            o["passed"] = json::value(row.passed);
            o["cpu_ms"] = json::value(row.cpu_ms);
            o["ane_ms"] = json::value(row.ane_ms);
            o["note"] = json::value(row.note);
            list.push_back(json::value(std::move(o)));
        }
        json::object out;
        out["backend"] = json::value(backend);
        out["cases"] = json::value(std::move(list));
        out["failed"] = json::value(static_cast<std::int64_t>(failed));
        std::printf("%s\n", json::dump(json::value(std::move(out)), 2).c_str());
    } else {
        std::printf("anvil selftest on %s\n\n", backend.c_str());
        std::printf("%-36s %-10s %10s %9s %9s %9s  %s\n", "case", "placement", "max error", "tolerance",
                    "cpu ms", "ane ms", "result");
        for (const auto& row : rows) {
            std::printf("%-36s %-10s %10.2e %9.1e %9.3f %9.3f  %s%s%s\n", row.name.c_str(),
                        row.placement.c_str(), row.max_error, row.tolerance, row.cpu_ms, row.ane_ms,
                        row.passed ? "ok" : "FAILED", row.note.empty() ? "" : ": ", row.note.c_str());
        }
        std::printf("\n%zu of %zu cases passed\n", rows.size() - failed, rows.size());
    }
    return failed == 0 ? 0 : 1;
}

}  // namespace anvil::cli
