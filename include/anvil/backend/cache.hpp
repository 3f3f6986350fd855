// anvil: the on-disk cache of compiled programs as a user sees it — what it holds, how large it is, and how
// it is kept small. The cache directory (program_cache.hpp: compile_options::cache_dir, else
// $ANVIL_CACHE_DIR, else the user cache directory) holds
//   ane/<key>/          a compiled Neural Engine program (model.mil, weights/ and what the compiler wrote)
//   coreml/<key>/       a compiled Core ML model (model.mlmodelc)
//   <kind>/<key>.json   the entry's manifest: what it was compiled from and for; its modification time is the
//                       entry's last use, touched on every cache hit
//   <kind>/<key>.lock   the entry's lock, held from the probe to the load (ane_framework.hpp, directory_lock)
//   capabilities-<os build>-<chip>.json   the capability records `anvil selftest` writes
// The manifest is written (to a temporary file, then renamed) only once the program has compiled and loaded,
// so an entry without one — an interrupted or refused compile — is never listed or loaded, and a prune that
// finds it unlocked removes it. Removing an entry takes its lock without waiting and skips an entry another
// thread or process holds, so a prune never deletes a program someone is compiling or loading.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "anvil/compilation.hpp"

namespace anvil::cache {

enum class entry_kind : std::uint8_t {
    ane_program,        // ane/<key>: a Neural Engine program compiled through AppleNeuralEngine.framework
    coreml_model,       // coreml/<key>: a Core ML model compiled for device::coreml
    capability_record,  // capabilities-*.json: what `anvil selftest` found this OS build and chip accept
};

// "ane-program", "coreml-model", "capability-record": the spelling `anvil cache list --json` uses.
[[nodiscard]] std::string_view kind_name(entry_kind kind) noexcept;

struct entry {
    entry_kind kind = entry_kind::ane_program;
    std::string key;             // the program's digest (a record's file name)
    std::filesystem::path path;  // the entry's directory (a record's file)
    std::string model;           // the folder or file it was compiled from (compile_options::model_source)
    std::string anvil_version;   // the key's parts: what the program was compiled by and for
    std::string os_build;
    std::string chip;           // the Neural Engine's architecture; "" on the Core ML route
    std::string record_digest;  // the capability record's, "" without one
    std::uintmax_t bytes = 0;   // on disk now
    std::chrono::system_clock::time_point created;
    std::chrono::system_clock::time_point last_use;
    // Why the manifest could not be read ("" when it was): such an entry is never loaded, and prune with
    // `stale` removes it.
    std::string problem;
};

// The cache directory anvil compiles into: `requested` when given, else $ANVIL_CACHE_DIR, else the user
// cache directory; empty when caching is off ("none").
[[nodiscard]] std::filesystem::path directory(std::string_view requested = {});

// Every finished entry of the cache in `dir` (programs with a manifest, and capability records), most
// recently used first. An io_error when `dir` is not a directory.
[[nodiscard]] std::vector<entry> entries(const std::filesystem::path& dir);

struct prune_options {
    // Least recently used programs go until the programs fit in this many bytes (records never count).
    std::optional<std::uintmax_t> max_bytes;
    // Programs not used for this long go.
    std::optional<std::chrono::seconds> older_than;
    // Every entry compiled by another anvil version or for another OS build or chip goes, and every entry
    // whose manifest is malformed; a capability record of another OS build or chip too.
    bool stale = false;
    // This machine's Neural Engine architecture, for `stale` ("" when unknown: chips are not compared).
    std::string chip;
    // Keys never removed (the programs the caller has just compiled).
    std::set<std::string> keep;
};

struct removal {
    std::vector<entry> removed;
    std::vector<entry> in_use;  // would have gone, but another thread or process holds its lock
    std::uintmax_t removed_bytes = 0;
    std::uintmax_t remaining_bytes = 0;  // the programs left (records not counted)
};

// Removes what `options` say, and in any case every unfinished entry (no manifest) nobody holds.
removal prune(const std::filesystem::path& dir, const prune_options& options);

// Removes every program nobody holds, and the capability records too when `records`.
removal clear(const std::filesystem::path& dir, bool records = false);

// The size cap applied after each compile: `configured` when non-zero, else $ANVIL_CACHE_MAX_BYTES (bytes,
// with an optional K, M or G suffix, or "none"), else default_max_bytes. no_cap: none.
inline constexpr std::uintmax_t default_max_bytes = std::uintmax_t{4} << 30;
inline constexpr std::uintmax_t no_cap = static_cast<std::uintmax_t>(-1);
[[nodiscard]] std::uintmax_t max_bytes(std::uintmax_t configured = 0);

// "4G", "512M", "1000": a byte count with an optional K, M or G (powers of 1024) suffix; nullopt when
// `text` is not one.
[[nodiscard]] std::optional<std::uintmax_t> parse_bytes(std::string_view text);

}  // namespace anvil::cache

namespace anvil::detail::cache_files {

// An exclusive flock on a lock file (<kind>/<key>.lock) for as long as it lives. With `wait` it blocks until
// free (a compile's lock, ane_framework.hpp's directory_lock); without, held() is false when another thread
// or process holds it (a prune). A prune unlinks the lock file of an entry it removes while holding it, and a
// lock taken on an unlinked file excludes nobody, so the file is opened again until the one locked is the one
// at the path. An unwritable cache leaves it unheld: the compile then fails at staging, naming the path.
class file_lock {
public:
    file_lock(std::filesystem::path file, bool wait);
    file_lock(const file_lock&) = delete;
    file_lock& operator=(const file_lock&) = delete;
    ~file_lock();
    [[nodiscard]] bool held() const noexcept { return held_; }
    // Unlinks the lock file, still holding it (for a removed entry).
    void remove_file() noexcept;

private:
    std::filesystem::path path_;
    int fd_ = -1;
    bool held_ = false;
};

// What a program's manifest records, written once it has compiled and loaded.
struct manifest {
    cache::entry_kind kind = cache::entry_kind::ane_program;
    std::string key;
    std::string model;
    std::string chip;
    std::string record_digest;
};

// <root>/<key>.json, where root is <cache directory>/ane or /coreml.
[[nodiscard]] std::filesystem::path manifest_path(const std::filesystem::path& root, std::string_view key);

// Whether the entry finished: its manifest exists (a hit also needs the compiled program itself).
[[nodiscard]] bool finished(const std::filesystem::path& root, std::string_view key);

// Before a compile into the entry: it is unfinished until written again.
void unfinish(const std::filesystem::path& root, std::string_view key) noexcept;

// Writes the manifest (temporary file + rename, so a reader sees none or all of it). Best effort: a cache
// that cannot be written costs only the next run's compile.
void write_manifest(const std::filesystem::path& root, const manifest& m) noexcept;

// A cache hit: the manifest's modification time becomes now.
void touch(const std::filesystem::path& root, std::string_view key) noexcept;

// The cap after a compile: prunes the cache directory `dir` to `limit` bytes (cache::max_bytes), keeping
// `keep`. Best effort, never throws: a warning says when the cap cannot be met or applied.
void enforce_cap(const std::filesystem::path& dir, std::uintmax_t limit,
                 const std::set<std::string>& keep) noexcept;

// "2026-12-07T10:42:46.123Z": a time as `anvil cache list` and the manifests write it (UTC).
[[nodiscard]] std::string iso_time(std::chrono::system_clock::time_point t);

}  // namespace anvil::detail::cache_files

#if ANVIL_DEFINITIONS
#include "anvil/backend/cache-inl.hpp"
#endif
