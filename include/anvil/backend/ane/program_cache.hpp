// anvil: the on-disk cache of compiled ANE programs and the per-process compile budget. A program is named by
// a SHA-256 of its MIL text, its weights, the OS build, the Neural Engine's architecture and anvil's version,
// so a second run of the same model — in any process — loads the compiled program instead of compiling it
// (RUNTIME.md §7: `setModelURL:` + `compiledModelExists`). The framework leaks resources per compile and is
// reported to fail past ~119 compiles per process (RUNTIME.md §6), but not at a fixed count (ANEDVD compiled
// 121, §0 #11): anvil counts its compiles and warns near a configurable budget, and a compile the framework
// then refuses sends that segment to the CPU.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

#include "anvil/backend/ane/weight_file.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/sha256.hpp"
#include "anvil/core/warning.hpp"
#include "anvil/version.hpp"

#if defined(__APPLE__)
#include <sys/sysctl.h>
#else
#include <sys/utsname.h>
#endif

namespace anvil::detail::ane {

// The OS build the compiled programs are valid for (a new OS may compile differently).
inline std::string os_build() {
#if defined(__APPLE__)
    char buffer[256] = {};
    std::size_t size = sizeof buffer;
    if (sysctlbyname("kern.osversion", buffer, &size, nullptr, 0) == 0) return std::string(buffer);
    return "unknown-macos";
#else
    utsname name{};
    if (uname(&name) == 0) return std::string(name.sysname) + " " + name.release + " " + name.version;
    return "unknown";
#endif
}

// The cache directory: `requested` when given; else $ANVIL_CACHE_DIR; else the platform's user cache
// directory (~/Library/Caches/anvil on macOS, $XDG_CACHE_HOME/anvil or ~/.cache/anvil elsewhere). Empty
// when caching is off (`requested` or $ANVIL_CACHE_DIR equal to "none") or no home directory is known.
inline std::filesystem::path cache_directory(std::string_view requested) {
    std::string chosen(requested);
    if (chosen.empty()) {
        if (const char* env = std::getenv("ANVIL_CACHE_DIR"); env != nullptr && *env != '\0') chosen = env;
    }
    if (chosen == "none") return {};
    if (!chosen.empty()) return std::filesystem::path(chosen);
#if defined(__APPLE__)
    if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0')
        return std::filesystem::path(home) / "Library" / "Caches" / "anvil";
#else
    if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0')
        return std::filesystem::path(xdg) / "anvil";
    if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0')
        return std::filesystem::path(home) / ".cache" / "anvil";
#endif
    return {};
}

// Where compiled programs go: <cache directory>/ane.
inline std::filesystem::path cache_root(std::string_view requested) {
    const std::filesystem::path base = cache_directory(requested);
    return base.empty() ? base : base / "ane";
}

// The cache key of one program: hex SHA-256 over everything that changes what the compiler produces.
// `record_digest` is the capability record's (empty without one): a new record compiles afresh.
inline std::string program_key(std::string_view mil_text, std::span<const weight_file> weights,
                               std::string_view architecture, std::string_view record_digest) {
    sha256 digest;
    auto field = [&](std::string_view label, std::string_view text) {
        digest.update(label).update(std::to_string(text.size())).update(":").update(text);
    };
    field("anvil", version_string);
    field("os", os_build());
    field("chip", architecture);
    field("capabilities", record_digest);
    field("mil", mil_text);
    for (const auto& file : weights) {
        field("weight", file.path);
        digest.update(std::to_string(file.bytes.size()))
            .update(":")
            .update(std::span<const std::byte>(file.bytes));
    }
    return digest.finish_hex();
}

// Compiles this process has run.
inline std::atomic<long>& compiles_in_process() {
    static std::atomic<long> count{0};
    return count;
}

// The budget a warning refers to: `configured` when positive, else $ANVIL_ANE_COMPILE_BUDGET, else 119.
inline long compile_budget(long configured = 0) {
    if (configured > 0) return configured;
    if (const char* env = std::getenv("ANVIL_ANE_COMPILE_BUDGET"); env != nullptr && *env != '\0') {
        char* end = nullptr;
        const long value = std::strtol(env, &end, 10);
        if (end != env && *end == '\0' && value > 0) return value;
        throw error(message("ANVIL_ANE_COMPILE_BUDGET: expected a positive integer, got '", env, "'"));
    }
    return 119;
}

// Counts one compile; warns once when the count comes within 10 of the budget and once when it passes it.
// Never refuses: the framework decides, and a refused compile sends its segment to the CPU.
inline void count_compile(long configured_budget = 0) {
    const long budget = compile_budget(configured_budget);
    const long count = ++compiles_in_process();
    const long near = std::max(1L, budget - 10);
    if (count == near) {
        warn(message("this process has compiled ", count, " Neural Engine programs of a budget of ", budget,
                     ": the framework leaks per compile and is reported to refuse compiles past ~119 per "
                     "process (RUNTIME.md §6); refused segments run on the CPU. The program cache turns "
                     "compiles into loads; ANVIL_ANE_COMPILE_BUDGET sets the budget"));
    } else if (count == budget + 1) {
        warn(message("this process has compiled ", count, " Neural Engine programs, past the budget of ",
                     budget, "; further compiles may be refused (or crash the framework, RUNTIME.md §6)"));
    }
}

}  // namespace anvil::detail::ane
