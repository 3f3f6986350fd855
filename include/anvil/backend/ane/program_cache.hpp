// anvil: the on-disk cache of compiled ANE programs and the per-process compile budget. A program is named by
// a SHA-256 of its MIL text, its weights, the OS build, the Neural Engine's architecture and anvil's version,
// so a second run of the same model — in any process — loads the compiled program instead of compiling it
// (RUNTIME.md §7: `setModelURL:` + `compiledModelExists`). The framework leaks resources per compile and
// fails past ~119 compiles per process (RUNTIME.md §6): anvil counts its compiles and stops with a clear
// error first.
#pragma once

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

#include "anvil/backend/ane/weight_file.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/sha256.hpp"
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
inline std::filesystem::path cache_root(std::string_view requested) {
    std::string chosen(requested);
    if (chosen.empty()) {
        if (const char* env = std::getenv("ANVIL_CACHE_DIR"); env != nullptr && *env != '\0') chosen = env;
    }
    if (chosen == "none") return {};
    if (!chosen.empty()) return std::filesystem::path(chosen) / "ane";
#if defined(__APPLE__)
    if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0')
        return std::filesystem::path(home) / "Library" / "Caches" / "anvil" / "ane";
#else
    if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0')
        return std::filesystem::path(xdg) / "anvil" / "ane";
    if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0')
        return std::filesystem::path(home) / ".cache" / "anvil" / "ane";
#endif
    return {};
}

// The cache key of one program: hex SHA-256 over everything that changes what the compiler produces.
inline std::string program_key(std::string_view mil_text, std::span<const weight_file> weights,
                               std::string_view architecture) {
    sha256 digest;
    auto field = [&](std::string_view label, std::string_view text) {
        digest.update(label).update(std::to_string(text.size())).update(":").update(text);
    };
    field("anvil", version_string);
    field("os", os_build());
    field("chip", architecture);
    field("mil", mil_text);
    for (const auto& file : weights) {
        field("weight", file.path);
        digest.update(std::to_string(file.bytes.size()))
            .update(":")
            .update(std::span<const std::byte>(file.bytes));
    }
    return digest.finish_hex();
}

// Compiles this process has run, and how many it may (LIBANE stops at 115, below the ~119 where the
// framework fails; $ANVIL_ANE_COMPILE_BUDGET overrides).
inline std::atomic<long>& compiles_in_process() {
    static std::atomic<long> count{0};
    return count;
}

inline long compile_budget() {
    if (const char* env = std::getenv("ANVIL_ANE_COMPILE_BUDGET"); env != nullptr && *env != '\0') {
        char* end = nullptr;
        const long value = std::strtol(env, &end, 10);
        if (end != env && *end == '\0' && value > 0) return value;
        throw error(message("ANVIL_ANE_COMPILE_BUDGET: expected a positive integer, got '", env, "'"));
    }
    return 115;
}

// Takes one compile from the budget, or throws before the framework would fail.
inline void reserve_compile() {
    const long budget = compile_budget();
    long current = compiles_in_process().load();
    do {
        if (current >= budget) {
            throw error(
                message("ANE compile budget spent: this process has compiled ", current,
                        " Neural Engine programs, and the framework fails or crashes past ~119 per process "
                        "(AppleNeuralEngine leaks per compile). Reuse compiled programs, let the program "
                        "cache turn compiles into loads, or run the work in a new process "
                        "(ANVIL_ANE_COMPILE_BUDGET changes the limit of ",
                        budget, ")"));
        }
    } while (!compiles_in_process().compare_exchange_weak(current, current + 1));
}

}  // namespace anvil::detail::ane
