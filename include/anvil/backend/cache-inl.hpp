// anvil: cache's definitions (see cache.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "anvil/backend/ane/program_cache.hpp"
#include "anvil/backend/cache.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/json.hpp"
#include "anvil/core/warning.hpp"
#include "anvil/version.hpp"

namespace anvil::detail::cache_files {

namespace fs = std::filesystem;

inline constexpr std::string_view manifest_format = "anvil-cache-entry/1";

inline constexpr std::string_view kind_folder(cache::entry_kind kind) noexcept {
    return kind == cache::entry_kind::coreml_model ? "coreml" : "ane";
}

// The modification time of `path` (nullopt when it has none), at the file system's resolution.
inline std::optional<std::chrono::system_clock::time_point> modified(const fs::path& path) noexcept {
    struct stat info {};
    if (::stat(path.c_str(), &info) != 0) return std::nullopt;
    const auto since =
        std::chrono::seconds(info.st_mtim.tv_sec) + std::chrono::nanoseconds(info.st_mtim.tv_nsec);
    return std::chrono::system_clock::time_point(
        std::chrono::duration_cast<std::chrono::system_clock::duration>(since));
}

// Bytes of the regular files under `path` (or of `path` itself), links not followed.
inline std::uintmax_t bytes_under(const fs::path& path) noexcept {
    std::error_code code;
    if (fs::is_regular_file(fs::symlink_status(path, code))) {
        const auto size = fs::file_size(path, code);
        return code ? 0 : size;
    }
    std::uintmax_t total = 0;
    for (fs::recursive_directory_iterator it(path, code), end; !code && it != end; it.increment(code)) {
        std::error_code ignored;
        if (it->is_regular_file(ignored) && !it->is_symlink(ignored)) {
            const auto size = it->file_size(ignored);
            if (!ignored) total += size;
        }
    }
    return total;
}

ANVIL_INLINE file_lock::file_lock(std::filesystem::path file, bool wait) : path_(std::move(file)) {
    // Without waiting a few tries suffice: a file is replaced only by a prune, which then no longer holds it.
    for (int attempt = 0; wait || attempt < 3; ++attempt) {
        fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (fd_ < 0) return;
        int status = 0;
        while ((status = ::flock(fd_, wait ? LOCK_EX : LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {
        }
        if (status != 0) {  // another holds it
            ::close(fd_);
            fd_ = -1;
            return;
        }
        struct stat opened {};
        struct stat named {};
        if (::fstat(fd_, &opened) != 0) {
            held_ = true;  // nothing to compare with
            return;
        }
        if (::stat(path_.c_str(), &named) == 0) {
            if (opened.st_ino == named.st_ino && opened.st_dev == named.st_dev) {
                held_ = true;
                return;
            }
        } else if (errno != ENOENT) {
            held_ = true;
            return;
        }
        ::close(fd_);  // unlinked or replaced while this waited: lock the file at the path
        fd_ = -1;
    }
}

ANVIL_INLINE file_lock::~file_lock() {
    if (fd_ >= 0) ::close(fd_);
}

ANVIL_INLINE void file_lock::remove_file() noexcept {
    if (held_) ::unlink(path_.c_str());
}

ANVIL_INLINE fs::path manifest_path(const fs::path& root, std::string_view key) {
    return root / (std::string(key) + ".json");
}

ANVIL_INLINE bool finished(const fs::path& root, std::string_view key) {
    std::error_code code;
    return fs::is_regular_file(manifest_path(root, key), code);
}

ANVIL_INLINE void unfinish(const fs::path& root, std::string_view key) noexcept {
    std::error_code ignored;
    fs::remove(manifest_path(root, key), ignored);
}

ANVIL_INLINE std::string iso_time(std::chrono::system_clock::time_point t) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
    const std::time_t seconds = static_cast<std::time_t>(ms / 1000);
    std::tm parts{};
    ::gmtime_r(&seconds, &parts);
    char text[96];
    std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", parts.tm_year + 1900,
                  parts.tm_mon + 1, parts.tm_mday, parts.tm_hour, parts.tm_min, parts.tm_sec,
                  static_cast<int>(ms % 1000));
    return text;
}

// Sets the modification time of `file` to `t` exactly: the file system's own clock is coarser (a tick), so a
// time it stamped may precede the manifest's "created".
inline void set_modified(const fs::path& file, std::chrono::system_clock::time_point t) noexcept {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
    timespec times[2];
    times[0].tv_sec = static_cast<time_t>(ns / 1'000'000'000);
    times[0].tv_nsec = static_cast<long>(ns % 1'000'000'000);
    times[1] = times[0];
    ::utimensat(AT_FDCWD, file.c_str(), times, 0);
}

ANVIL_INLINE void write_manifest(const fs::path& root, const manifest& m) noexcept {
    try {
        const auto now = std::chrono::system_clock::now();
        json::object out;
        out["format"] = json::value(manifest_format);
        out["kind"] = json::value(cache::kind_name(m.kind));
        out["key"] = json::value(m.key);
        out["model"] = json::value(m.model);
        out["anvil_version"] = json::value(version_string);
        out["os_build"] = json::value(ane::os_build());
        out["chip"] = json::value(m.chip);
        out["record_digest"] = json::value(m.record_digest);
        out["bytes"] = json::value(bytes_under(root / m.key));
        out["created"] = json::value(iso_time(now));
        out["created_unix_ms"] = json::value(
            std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count());
        const fs::path file = manifest_path(root, m.key);
        fs::path staging = file;
        staging += message(".", ::getpid(), "-", std::this_thread::get_id(), ".tmp");
        {
            std::ofstream stream(staging, std::ios::binary | std::ios::trunc);
            stream << json::dump(json::value(std::move(out)), 2) << "\n";
            if (!stream) {
                std::error_code ignored;
                fs::remove(staging, ignored);
                return;
            }
        }
        std::error_code code;
        set_modified(staging, now);       // the last use, so far its creation
        fs::rename(staging, file, code);  // atomic: a reader sees no manifest or the whole of it
        if (code) fs::remove(staging, code);
    } catch (const std::exception&) {
        // an unwritable cache: the entry stays unfinished, and the next run compiles again
    }
}

ANVIL_INLINE void touch(const fs::path& root, std::string_view key) noexcept {
    set_modified(manifest_path(root, key), std::chrono::system_clock::now());
}

// The entry a manifest describes; `problem` says what is wrong with a malformed one.
inline cache::entry read_entry(const fs::path& root, cache::entry_kind kind, const std::string& key) {
    cache::entry e;
    e.kind = kind;
    e.key = key;
    e.path = root / key;
    const fs::path file = manifest_path(root, key);
    e.bytes = bytes_under(e.path) + bytes_under(file);
    e.last_use = modified(file).value_or(std::chrono::system_clock::time_point{});
    e.created = e.last_use;
    try {
        const json::value v = json::parse_file(file);
        const auto text = [&](std::string_view field) -> std::string {
            const json::value* found = v.find(field);
            if (found == nullptr || !found->is_string())
                throw format_error(message("no string \"", field, "\""));
            return found->as_string();
        };
        if (!v.is_object()) throw format_error("not a JSON object");
        if (text("format") != manifest_format)
            throw format_error(
                message("format \"", text("format"), "\", expected \"", manifest_format, "\""));
        if (text("kind") != cache::kind_name(kind))
            throw format_error(message("kind \"", text("kind"), "\" in the ", kind_folder(kind), " folder"));
        if (text("key") != key) throw format_error(message("key \"", text("key"), "\" for entry ", key));
        e.model = text("model");
        e.anvil_version = text("anvil_version");
        e.os_build = text("os_build");
        e.chip = text("chip");
        e.record_digest = text("record_digest");
        if (const json::value* ms = v.find("created_unix_ms"); ms != nullptr && ms->is_integer())
            e.created = std::chrono::system_clock::time_point(
                std::chrono::duration_cast<std::chrono::system_clock::duration>(
                    std::chrono::milliseconds(ms->as_int())));
        if (!fs::is_directory(e.path))
            throw format_error(message("its program ", e.path.string(), " is missing"));
    } catch (const std::exception& failure) {
        e.problem = message("malformed cache manifest ", file.string(), ": ", failure.what());
    }
    return e;
}

inline cache::entry read_record_entry(const fs::path& file) {
    cache::entry e;
    e.kind = cache::entry_kind::capability_record;
    e.key = file.filename().string();
    e.path = file;
    e.model = "anvil selftest";
    e.bytes = bytes_under(file);
    e.last_use = modified(file).value_or(std::chrono::system_clock::time_point{});
    e.created = e.last_use;
    try {
        const json::value v = json::parse_file(file);
        const auto text = [&](std::string_view field) -> std::string {
            const json::value* found = v.find(field);
            return found != nullptr && found->is_string() ? found->as_string() : std::string();
        };
        if (!v.is_object()) throw format_error("not a JSON object");
        e.os_build = text("os_build");
        e.chip = text("chip");
        e.anvil_version = text("anvil_version");
        if (e.os_build.empty()) throw format_error("no string \"os_build\"");
    } catch (const std::exception& failure) {
        e.problem = message("malformed capability record ", file.string(), ": ", failure.what());
    }
    return e;
}

inline bool is_record_name(const std::string& name) {
    return name.starts_with("capabilities-") && name.ends_with(".json");
}

// Finished programs (a manifest beside the directory) of one kind, and the keys of unfinished ones: a
// directory or a temporary manifest without a manifest.
inline void scan(const fs::path& dir, cache::entry_kind kind, std::vector<cache::entry>& finished_entries,
                 std::set<std::string>* unfinished) {
    const fs::path root = dir / kind_folder(kind);
    std::error_code code;
    if (!fs::is_directory(root, code)) return;
    std::set<std::string> manifests;
    std::set<std::string> others;
    for (fs::directory_iterator it(root, code), end; !code && it != end; it.increment(code)) {
        const std::string name = it->path().filename().string();
        const std::string key = name.substr(0, name.find('.'));
        if (key.empty()) continue;
        if (name == key + ".json")
            manifests.insert(key);
        else if (name != key + ".lock")
            others.insert(key);  // the program's directory, or a manifest being written
        else if (unfinished != nullptr && !fs::exists(root / key))
            others.insert(key);  // a lock left by a compile that never created its directory
    }
    for (const auto& key : manifests)
        finished_entries.push_back(read_entry(root, kind, key));
    if (unfinished != nullptr) {
        for (const auto& key : others)
            if (manifests.count(key) == 0) unfinished->insert(key);
    }
}

// Removes one program under its lock: the manifest first (so a crash leaves an unfinished entry, never a
// listed one without its program), then the directory, the temporaries and the lock file.
inline bool remove_program(const fs::path& root, const std::string& key) {
    file_lock lock(root / (key + ".lock"), false);
    if (!lock.held()) return false;
    std::error_code ignored;
    fs::remove(manifest_path(root, key), ignored);
    fs::remove_all(root / key, ignored);
    std::vector<fs::path> temporaries;
    for (fs::directory_iterator it(root, ignored), end; !ignored && it != end; it.increment(ignored)) {
        const std::string name = it->path().filename().string();
        if (name.starts_with(key + ".json.") && name.ends_with(".tmp")) temporaries.push_back(it->path());
    }
    for (const auto& t : temporaries)
        fs::remove(t, ignored);
    lock.remove_file();
    return true;
}

inline std::uintmax_t program_bytes(const std::vector<cache::entry>& all) {
    std::uintmax_t total = 0;
    for (const auto& e : all)
        if (e.kind != cache::entry_kind::capability_record) total += e.bytes;
    return total;
}

inline cache::removal prune_directory(const fs::path& dir, const cache::prune_options& options,
                                      bool everything, bool records) {
    std::error_code code;
    if (!fs::is_directory(dir, code))
        throw io_error(message("cache directory '", dir.string(), "' does not exist or is not a directory"));
    cache::removal result;
    std::vector<cache::entry> programs;
    for (const auto kind : {cache::entry_kind::ane_program, cache::entry_kind::coreml_model}) {
        std::set<std::string> unfinished;
        scan(dir, kind, programs, &unfinished);
        const fs::path root = dir / kind_folder(kind);
        for (const auto& key : unfinished) {
            cache::entry e;
            e.kind = kind;
            e.key = key;
            e.path = root / key;
            e.bytes = bytes_under(e.path);
            e.problem = "unfinished: no manifest (an interrupted or refused compile)";
            // Held: being compiled right now, and finished soon.
            if (remove_program(root, key)) {
                result.removed_bytes += e.bytes;
                result.removed.push_back(std::move(e));
            }
        }
    }
    const auto now = std::chrono::system_clock::now();
    const std::string this_os = ane::os_build();
    const auto foreign = [&](const cache::entry& e) {
        return !e.problem.empty() || e.os_build != this_os ||
               (!options.chip.empty() && !e.chip.empty() && e.chip != options.chip);
    };
    std::vector<bool> chosen(programs.size(), false);
    for (std::size_t i = 0; i < programs.size(); ++i) {
        const cache::entry& e = programs[i];
        if (options.keep.count(e.key) != 0) continue;
        chosen[i] = everything || (options.stale && (foreign(e) || e.anvil_version != version_string)) ||
                    (options.older_than && now - e.last_use > *options.older_than);
    }
    std::uintmax_t total = program_bytes(programs);
    const auto remove = [&](std::size_t i) {
        const cache::entry& e = programs[i];
        if (remove_program(dir / kind_folder(e.kind), e.key)) {
            total -= std::min(total, e.bytes);
            result.removed_bytes += e.bytes;
            result.removed.push_back(e);
        } else {
            result.in_use.push_back(e);
        }
    };
    for (std::size_t i = 0; i < programs.size(); ++i)
        if (chosen[i]) remove(i);
    if (options.max_bytes && total > *options.max_bytes) {
        std::vector<std::size_t> order;
        for (std::size_t i = 0; i < programs.size(); ++i)
            if (!chosen[i] && options.keep.count(programs[i].key) == 0) order.push_back(i);
        std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
            return programs[a].last_use < programs[b].last_use;
        });
        for (const std::size_t i : order) {
            if (total <= *options.max_bytes) break;
            remove(i);
        }
    }
    result.remaining_bytes = total;
    if (records || options.stale) {
        for (fs::directory_iterator it(dir, code), end; !code && it != end; it.increment(code)) {
            const std::string name = it->path().filename().string();
            if (!is_record_name(name)) continue;
            cache::entry e = read_record_entry(it->path());
            if (!records && !foreign(e)) continue;
            std::error_code removed;
            if (fs::remove(e.path, removed)) {
                result.removed_bytes += e.bytes;
                result.removed.push_back(std::move(e));
            }
        }
    }
    return result;
}

ANVIL_INLINE void enforce_cap(const fs::path& dir, std::uintmax_t limit,
                              const std::set<std::string>& keep) noexcept {
    if (dir.empty() || limit == cache::no_cap) return;
    try {
        std::vector<cache::entry> programs;
        for (const auto kind : {cache::entry_kind::ane_program, cache::entry_kind::coreml_model})
            scan(dir, kind, programs, nullptr);
        if (program_bytes(programs) <= limit) return;
        cache::prune_options options;
        options.max_bytes = limit;
        options.keep = keep;
        const cache::removal r = prune_directory(dir, options, false, false);
        if (r.remaining_bytes > limit) {
            warn(message("the program cache ", dir.string(), " holds ", r.remaining_bytes,
                         " bytes, past its cap of ", limit,
                         " (ANVIL_CACHE_MAX_BYTES, compile_options::"
                         "cache_max_bytes): what is left is in use or was just compiled"));
        }
    } catch (const std::exception& failure) {
        warn(message("the program cache's size cap was not applied: ", failure.what()));
    }
}

}  // namespace anvil::detail::cache_files

namespace anvil::cache {

ANVIL_INLINE std::string_view kind_name(entry_kind kind) noexcept {
    switch (kind) {
        case entry_kind::ane_program:
            return "ane-program";
        case entry_kind::coreml_model:
            return "coreml-model";
        case entry_kind::capability_record:
            return "capability-record";
    }
    return "unknown";
}

ANVIL_INLINE std::filesystem::path directory(std::string_view requested) {
    return detail::ane::cache_directory(requested);
}

ANVIL_INLINE std::vector<entry> entries(const std::filesystem::path& dir) {
    namespace files = detail::cache_files;
    std::error_code code;
    if (!std::filesystem::is_directory(dir, code)) {
        throw io_error(
            detail::message("cache directory '", dir.string(), "' does not exist or is not a directory"));
    }
    std::vector<entry> all;
    files::scan(dir, entry_kind::ane_program, all, nullptr);
    files::scan(dir, entry_kind::coreml_model, all, nullptr);
    for (std::filesystem::directory_iterator it(dir, code), end; !code && it != end; it.increment(code)) {
        if (files::is_record_name(it->path().filename().string()))
            all.push_back(files::read_record_entry(it->path()));
    }
    std::stable_sort(all.begin(), all.end(),
                     [](const entry& a, const entry& b) { return a.last_use > b.last_use; });
    return all;
}

ANVIL_INLINE removal prune(const std::filesystem::path& dir, const prune_options& options) {
    return detail::cache_files::prune_directory(dir, options, false, false);
}

ANVIL_INLINE removal clear(const std::filesystem::path& dir, bool records) {
    return detail::cache_files::prune_directory(dir, {}, true, records);
}

ANVIL_INLINE std::optional<std::uintmax_t> parse_bytes(std::string_view text) {
    if (text.empty()) return std::nullopt;
    std::uintmax_t unit = 1;
    switch (text.back()) {
        case 'K':
        case 'k':
            unit = std::uintmax_t{1} << 10;
            break;
        case 'M':
        case 'm':
            unit = std::uintmax_t{1} << 20;
            break;
        case 'G':
        case 'g':
            unit = std::uintmax_t{1} << 30;
            break;
        default:
            break;
    }
    if (unit != 1) text.remove_suffix(1);
    if (text.empty() || text.size() > 19) return std::nullopt;
    std::uintmax_t value = 0;
    for (const char c : text) {
        if (c < '0' || c > '9') return std::nullopt;
        value = value * 10 + static_cast<std::uintmax_t>(c - '0');
    }
    if (value > no_cap / unit) return std::nullopt;
    return value * unit;
}

ANVIL_INLINE std::uintmax_t max_bytes(std::uintmax_t configured) {
    if (configured != 0) return configured;
    if (const char* env = std::getenv("ANVIL_CACHE_MAX_BYTES"); env != nullptr && *env != '\0') {
        if (std::string_view(env) == "none") return no_cap;
        if (const auto parsed = parse_bytes(env)) return *parsed;
        throw error(
            detail::message("ANVIL_CACHE_MAX_BYTES: expected a byte count (e.g. 4G, 512M or 1000000) or "
                            "\"none\", got '",
                            env, "'"));
    }
    return default_max_bytes;
}

}  // namespace anvil::cache
