// `anvil selftest`: every lowering variant probed on the Neural Engine (the capability record, written to the
// cache directory for later programs to lower by), then every IR op on the Neural Engine and on the CPU with
// the error of each against the CPU and both times. On a Mac it runs on the ANE; elsewhere on the simulator
// (ANVIL_ANE_SIM, or the libanvil-ane-sim.so built next to this binary).
#pragma once

#include "arguments.hpp"
#include "model_commands.hpp"

#include <anvil/anvil.hpp>
#include <anvil/backend/ane/ane_program.hpp>

#include <dlfcn.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace anvil::cli {

inline constexpr const char* selftest_usage =
    "usage: anvil selftest [--json] [--report FILE] [--repeats N]\n"
    "\n"
    "First probes every lowering variant (native and decomposed forms of matmul, pooling, softmax, gelu,\n"
    "rsqrt, reduce_mean, exp, log, sqrt; unpadded I/O widths; programs without a conv; the MIL dialect) on\n"
    "the Neural Engine, each on its own and with no CPU fallback, and checks its numbers against the CPU.\n"
    "What held is the capability record for this OS build and chip, written to the cache directory\n"
    "($ANVIL_CACHE_DIR, else ~/Library/Caches/anvil or ~/.cache/anvil) as\n"
    "capabilities-<os build>-<chip>.json: from then on every program compiled for the Neural Engine picks,\n"
    "per op, the best variant that held. Then runs one small graph per op with those choices and prints,\n"
    "per op, where it ran (native, decomposed, host, or refused by the device), its largest error against\n"
    "the CPU relative to the output's magnitude, the fp16 tolerance for that op, and the time of one run on\n"
    "each. --report FILE writes all of it as JSON (chip, OS build, the record, every probe and op) for a "
    "bug\n"
    "report. Exit status 1 when any op fails.\n"
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

namespace detail_selftest {

// The simulator's counters of the op types compiled since its last reset (what variants the op table used),
// or an empty object on a Mac.
inline json::value simulator_counts(bool reset) {
    json::object counts;
    const char* library = std::getenv("ANVIL_ANE_SIM");
    if (library == nullptr || *library == '\0') return json::value(std::move(counts));
    void* handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) return json::value(std::move(counts));
    void* counter_symbol = dlsym(handle, "anvil_ane_sim_counter");
    void* reset_symbol = dlsym(handle, "anvil_ane_sim_reset");
    if (counter_symbol != nullptr && reset_symbol != nullptr) {
        if (reset) {
            reinterpret_cast<void (*)()>(reset_symbol)();
        } else {
            const auto counter = reinterpret_cast<long (*)(const char*)>(counter_symbol);
            for (const char* name : {"compiles",       "compile_cache_hits",
                                     "loads",          "evaluations",
                                     "op:conv",        "op:matmul",
                                     "op:reduce_sum",  "op:max_pool",
                                     "op:avg_pool",    "op:maximum",
                                     "op:softmax",     "op:gelu",
                                     "op:rsqrt",       "op:pow",
                                     "op:reduce_mean", "op:exp",
                                     "op:log",         "op:sqrt",
                                     "op:pad",         "op:slice_by_index"})
                counts[name] = json::value(static_cast<std::int64_t>(counter(name)));
        }
    }
    dlclose(handle);
    return json::value(std::move(counts));
}

}  // namespace detail_selftest

inline int run_selftest(const std::vector<std::string_view>& argv, const char* argv0) {
    const arguments args("selftest", argv,
                         {{"json", false}, {"help", false}, {"repeats", true}, {"report", true}});
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
    const detail::ane::device_info device = detail::ane::query_device();
    if (!device.has_ane) throw error(detail::message("selftest: ", backend, " reports no Neural Engine"));

    std::vector<ane_probe_row> probes;
    const detail::ane::capability_record record = ane_probe_capabilities(options, &probes);
    const std::filesystem::path cache = detail::ane::cache_directory("");
    std::filesystem::path record_file;
    if (!cache.empty()) {
        record_file = detail::ane::record_path(cache, record.os_build, record.chip);
        write_capability_record(record, record_file);
        options.ane.ane_capabilities = record_file.string();
    } else {
        // Nowhere to keep it: the op table still runs with what the probes found.
        for (const auto& d : detail::ane::feature_descriptions)
            if (const auto best = record.best(d.feature))
                options.ane.ane_lowering[std::string(d.name)] = std::string(detail::ane::variant_name(*best));
        options.ane.ane_capabilities = "none";
    }
    const std::string lowering =
        detail::ane::choices_for(options.ane, device.architecture, device.macos_major).summary();
    detail_selftest::simulator_counts(true);
    const auto rows = ane_selftest(options);
    const json::value counts = detail_selftest::simulator_counts(false);
    std::size_t failed = 0;
    for (const auto& row : rows)
        failed += row.passed ? 0 : 1;

    json::object report;
    report["anvil"] = json::value(std::string(version_string));
    report["backend"] = json::value(backend);
    report["simulated"] = json::value(record.simulated);
    report["chip"] = json::value(record.chip);
    report["os_build"] = json::value(record.os_build);
    json::object record_info;
    record_info["path"] = json::value(record_file.string());
    record_info["digest"] = json::value(record.digest());
    record_info["lowering"] = json::value(lowering);
    record_info["record"] = record.to_json();
    report["capabilities"] = json::value(std::move(record_info));
    json::array probe_list;
    for (const auto& p : probes) {
        json::object o;
        o["feature"] = json::value(p.feature);
        o["variant"] = json::value(p.variant);
        o["held"] = json::value(p.outcome.held);
        o["max_error"] = json::value(std::isfinite(p.outcome.max_error) ? p.outcome.max_error : -1.0);
        o["tolerance"] = json::value(p.outcome.tolerance);
        o["ms"] = json::value(p.outcome.ms);
        o["error"] = json::value(p.outcome.error);
        probe_list.push_back(json::value(std::move(o)));
    }
    report["probes"] = json::value(std::move(probe_list));
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
    report["cases"] = json::value(std::move(list));
    report["failed"] = json::value(static_cast<std::int64_t>(failed));
    if (record.simulated) report["simulator"] = counts;
    const json::value document(std::move(report));
    if (const auto path = args.value("report")) {
        std::ofstream out(*path, std::ios::binary | std::ios::trunc);
        out << json::dump(document, 2) << "\n";
        out.close();
        if (!out) throw error(detail::message("selftest: cannot write the report '", *path, "'"));
    }
    if (args.flag("json")) {
        std::printf("%s\n", json::dump(document, 2).c_str());
    } else {
        std::printf("anvil selftest on %s (chip %s, OS build %s)\n\n", backend.c_str(), record.chip.c_str(),
                    record.os_build.c_str());
        std::printf("%-12s %-10s %-4s %10s  %s\n", "feature", "variant", "held", "max error", "note");
        for (const auto& p : probes) {
            std::printf("%-12s %-10s %-4s %10.2e  %s\n", p.feature.c_str(), p.variant.c_str(),
                        p.outcome.held ? "yes" : "no", p.outcome.max_error, p.outcome.error.c_str());
        }
        std::printf("\ncapability record: %s\nlowering: %s\n\n",
                    record_file.empty() ? "(not written: no cache directory)" : record_file.string().c_str(),
                    lowering.c_str());
        std::printf("%-36s %-10s %10s %9s %9s %9s  %s\n", "case", "placement", "max error", "tolerance",
                    "cpu ms", "ane ms", "result");
        for (const auto& row : rows) {
            std::printf("%-36s %-10s %10.2e %9.1e %9.3f %9.3f  %s%s%s\n", row.name.c_str(),
                        row.placement.c_str(), row.max_error, row.tolerance, row.cpu_ms, row.ane_ms,
                        row.passed ? "ok" : "FAILED", row.note.empty() ? "" : ": ", row.note.c_str());
        }
        std::printf("\n%zu of %zu cases passed\n", rows.size() - failed, rows.size());
        if (const auto path = args.value("report")) std::printf("report written to %s\n", path->c_str());
    }
    return failed == 0 ? 0 : 1;
}

}  // namespace anvil::cli
