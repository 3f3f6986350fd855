// anvil: the on-disk cache of compiled ANE programs and the per-process compile budget. A program is named by
// a SHA-256 of its MIL text, its weights, the OS build, the Neural Engine's architecture and anvil's version,
// so a second run of the same model — in any process — loads the compiled program instead of compiling it
// (RUNTIME.md §7: `setModelURL:` + `compiledModelExists`). The framework leaks resources per compile and is
// reported to fail past ~119 compiles per process (RUNTIME.md §6), but not at a fixed count (ANEDVD compiled
// 121, §0 #11): anvil counts its compiles and warns near a configurable budget, and a compile the framework
// then refuses sends that segment to the CPU.
#pragma once

#include <atomic>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

#include "anvil/compilation.hpp"

namespace anvil::detail::ane {

struct weight_file;

// The OS build the compiled programs are valid for (a new OS may compile differently).
std::string os_build();

// The cache directory: `requested` when given; else $ANVIL_CACHE_DIR; else the platform's user cache
// directory (~/Library/Caches/anvil on macOS, $XDG_CACHE_HOME/anvil or ~/.cache/anvil elsewhere). Empty
// when caching is off (`requested` or $ANVIL_CACHE_DIR equal to "none") or no home directory is known.
std::filesystem::path cache_directory(std::string_view requested);

// Where compiled programs go: <cache directory>/ane.
std::filesystem::path cache_root(std::string_view requested);

// The cache key of one program: hex SHA-256 over everything that changes what the compiler produces.
// `record_digest` is the capability record's (empty without one): a new record compiles afresh.
std::string program_key(std::string_view mil_text, std::span<const weight_file> weights,
                        std::string_view architecture, std::string_view record_digest);

// Compiles this process has run.
std::atomic<long>& compiles_in_process();

// The budget a warning refers to: `configured` when positive, else $ANVIL_ANE_COMPILE_BUDGET, else 119.
long compile_budget(long configured = 0);

// Counts one compile; warns once when the count comes within 10 of the budget and once when it passes it.
// Never refuses: the framework decides, and a refused compile sends its segment to the CPU.
void count_compile(long configured_budget = 0);

}  // namespace anvil::detail::ane

#if ANVIL_DEFINITIONS
#include "anvil/backend/ane/program_cache-inl.hpp"
#endif
