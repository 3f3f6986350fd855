// anvil: program_cache's definitions (see program_cache.hpp; compilation.hpp says when this file is
// compiled).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

#include "anvil/backend/ane/program_cache.hpp"
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

ANVIL_INLINE std::string os_build() {
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

ANVIL_INLINE std::filesystem::path cache_directory(std::string_view requested) {
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

ANVIL_INLINE std::filesystem::path cache_root(std::string_view requested) {
    const std::filesystem::path base = cache_directory(requested);
    return base.empty() ? base : base / "ane";
}

ANVIL_INLINE std::string program_key(std::string_view mil_text, std::span<const weight_file> weights,
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
    // The weights' bytes are hashed once, into the text's buildInfo (mil_writer::text); hashing them here
    // again would double a cache hit's start-up for a large model. A text without that digest (written by
    // hand) gets the bytes hashed here.
    const bool digested = mil_text.find("\"anvil-weights-sha256\"") != std::string_view::npos;
    for (const auto& file : weights) {
        field("weight", file.path);
        digest.update(std::to_string(file.bytes.size())).update(":");
        if (!digested) digest.update(std::span<const std::byte>(file.bytes));
    }
    return digest.finish_hex();
}

ANVIL_INLINE std::atomic<long>& compiles_in_process() {
    static std::atomic<long> count{0};
    return count;
}

ANVIL_INLINE long compile_budget(long configured) {
    if (configured > 0) return configured;
    if (const char* env = std::getenv("ANVIL_ANE_COMPILE_BUDGET"); env != nullptr && *env != '\0') {
        char* end = nullptr;
        const long value = std::strtol(env, &end, 10);
        if (end != env && *end == '\0' && value > 0) return value;
        throw error(message("ANVIL_ANE_COMPILE_BUDGET: expected a positive integer, got '", env, "'"));
    }
    return 119;
}

ANVIL_INLINE void count_compile(long configured_budget) {
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
