// anvil: the `_ANE*` calls of AppleNeuralEngine.framework (RUNTIME.md §2): an in-memory model built from MIL
// text and weight blobs, compiled, loaded, bound to IOSurfaces through requests, evaluated and unloaded.
// Every call runs inside an autorelease pool and keeps only what it retained; a call returning NO is an
// anvil::error carrying the framework's NSError.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "anvil/backend/ane/core_foundation.hpp"
#include "anvil/backend/ane/io_surface.hpp"
#include "anvil/backend/ane/objc_runtime.hpp"
#include "anvil/backend/ane/weight_file.hpp"
#include "anvil/backend/cache.hpp"
#include "anvil/core/error.hpp"

namespace anvil::detail::ane {

// QOS_CLASS_DEFAULT, what every working codebase passes (RUNTIME.md §2 "QoS").
inline constexpr unsigned ane_qos = 21;

struct device_info {
    bool has_ane = false;
    bool known = false;        // _ANEDeviceInfo answered; false: the chip is unknown (RUNTIME.md §0 #14)
    std::string architecture;  // "h16g" for M4, ...; empty when unknown
    unsigned cores = 0;
    int macos_major = 0;  // kern.osproductversion's major version ("15.1" -> 15); 0 when unknown
};

// The macOS major version the framework runs on, from libSystem's kern.osproductversion (the simulator
// reports its own): the ios18 dialect needs macOS 15 (RUNTIME.md §0b #18). 0 when it cannot be read.
inline int macos_major_version() {
    const runtime& rt = runtime::get();
    char text[64] = {};
    std::size_t size = sizeof text - 1;
    if (rt.libsystem.sysctlbyname("kern.osproductversion", text, &size, nullptr, 0) != 0) return 0;
    int major = 0;
    for (const char* c = text; *c >= '0' && *c <= '9' && major < 1000; ++c)
        major = major * 10 + (*c - '0');
    return major;
}

// +[_ANEDeviceInfo hasANE / aneArchitectureType / numANECores], each where the framework has it. The class is
// optional: no working codebase but one queries it, so without it the framework's presence is taken to mean
// a Neural Engine of unknown kind, which the backend meets with its most conservative lowering.
inline device_info query_device() {
    const runtime& rt = runtime::get();
    device_info info;
    info.macos_major = macos_major_version();
    // Looked up on every query rather than once at load: cheap, and a simulator told to drop the class
    // mid-process is believed.
    const objc_id cls = rt.classes.device_info != nullptr
                            ? rt.objc.objc_getClass(ANVIL_PRIVATE_TEXT("_ANEDeviceInfo"))
                            : nullptr;
    if (cls == nullptr) {
        info.has_ane = true;
        return info;
    }
    const autorelease_pool pool;
    info.known = true;
    info.has_ane =
        rt.messages.has_ane.available ? static_cast<bool>(rt.send(cls, rt.messages.has_ane)) : true;
    if (rt.messages.ane_architecture_type.available) {
        const objc_id architecture = rt.send(cls, rt.messages.ane_architecture_type);
        if (is_cf_string(architecture)) info.architecture = string_value(architecture, "aneArchitectureType");
    }
    if (info.architecture.empty()) info.known = false;
    if (rt.messages.num_ane_cores.available) info.cores = rt.send(cls, rt.messages.num_ane_cores);
    return info;
}

// One input or output as the compiled program lays it out (RUNTIME.md §3, §0 #8): element (c, h, w) at
// c * plane_stride + h * row_stride + w * element size. `name` is the MIL name (the "@output" suffix the
// framework adds to output symbols is removed).
struct symbol_layout {
    std::string name;
    std::int64_t channels = 0, height = 1, width = 0;
    std::size_t row_stride = 0, plane_stride = 0;
    bool fp16 = true;
};

struct model_layout {
    std::vector<symbol_layout> inputs, outputs;  // in symbol-index order
};

// An `_ANERequest` and the `_ANEIOSurfaceObject`s it binds. Build once, evaluate many times (RUNTIME.md §2
// "Reuse"). The io_surfaces it was made from must outlive it.
class ane_request {
public:
    ane_request() = default;
    ane_request(ane_request&&) noexcept = default;
    ane_request& operator=(ane_request&&) noexcept = default;

    [[nodiscard]] objc_id get() const noexcept { return request_.get(); }
    [[nodiscard]] explicit operator bool() const noexcept { return static_cast<bool>(request_); }

private:
    friend class ane_model;
    std::vector<objc_object> surface_objects_;
    objc_object request_;  // declared last: released first
};

namespace framework_detail {

// Models with the same MIL and weights share `NSTemporaryDirectory()/<hex>` (RUNTIME.md §2 "Temp directory",
// ORI §5.3's ownership trap) — across processes too, since the temporary directory is per user. Within a
// process a count decides when the last model is gone; across processes a shared flock on `<hex>.lock` beside
// the directory marks it in use, and the directory is removed only by a process that can take the lock
// exclusively (the lock files, a few bytes each, stay: removing one could split a later pair of users between
// two lock files).
struct directory_user {
    int count = 0;
    int lock_fd = -1;
};

inline std::mutex& directory_mutex() {
    static std::mutex mutex;
    return mutex;
}
inline std::map<std::string, directory_user>& directory_users() {
    static std::map<std::string, directory_user> users;
    return users;
}

inline std::filesystem::path lock_path(const std::filesystem::path& directory) {
    std::filesystem::path lock = directory;
    lock += ".lock";
    return lock;
}

inline void acquire_directory(const std::filesystem::path& directory) {
    const std::lock_guard<std::mutex> guard(directory_mutex());
    directory_user& user = directory_users()[directory.string()];
    if (user.count++ > 0) return;
    user.lock_fd = ::open(lock_path(directory).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    // Without a lock file (an unwritable temporary directory) the compile itself fails with a clear message.
    if (user.lock_fd >= 0) {
        while (::flock(user.lock_fd, LOCK_SH) != 0 && errno == EINTR) {
        }
    }
}

inline void release_directory(const std::filesystem::path& directory) noexcept {
    const std::lock_guard<std::mutex> guard(directory_mutex());
    auto& users = directory_users();
    const auto found = users.find(directory.string());
    if (found == users.end() || --found->second.count > 0) return;
    const int fd = found->second.lock_fd;
    users.erase(found);
    if (fd < 0) return;
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
        std::error_code ignored;
        std::filesystem::remove_all(directory, ignored);
    }
    ::close(fd);  // releases the lock
}

inline std::filesystem::path temporary_directory() {
    const runtime& rt = runtime::get();
    const autorelease_pool pool;
    const objc_id path = rt.foundation.NSTemporaryDirectory();
    if (path == nullptr) throw error("ANE: NSTemporaryDirectory() returned nil");
    const std::string text = string_value(path, "NSTemporaryDirectory()");
    if (text.empty()) throw error("ANE: NSTemporaryDirectory() returned an empty path");
    return std::filesystem::path(text);
}

// "@model_path/weights/w.bin" -> "weights/w.bin"; anything that would leave the model directory is refused.
inline std::filesystem::path weight_relative_path(const std::string& key) {
    constexpr std::string_view prefix = "@model_path/";
    if (key.compare(0, prefix.size(), prefix) != 0 || key.size() == prefix.size()) {
        throw error(
            message("ANE weights: key '", key,
                    "' must be the BLOBFILE path \"@model_path/<file>\" (RUNTIME.md §2 weights dictionary)"));
    }
    const std::filesystem::path relative(key.substr(prefix.size()));
    for (const auto& part : relative) {
        if (part == ".." || part == "." || part.empty()) {
            throw error(message("ANE weights: key '", key, "' leaves the model directory"));
        }
    }
    if (relative.is_absolute()) throw error(message("ANE weights: key '", key, "' is an absolute path"));
    if (relative == "model.mil")
        throw error(message("ANE weights: key '", key, "' would overwrite the MIL text"));
    return relative;
}

// Writes `bytes` to `path` unless it already holds them; through a temporary file and a rename, so another
// process compiling the same program never reads a half-written file.
inline void write_file(const std::filesystem::path& path, std::span<const std::byte> bytes) {
    std::error_code code;
    std::filesystem::create_directories(path.parent_path(), code);
    if (code)
        throw io_error(
            message("ANE: cannot create directory '", path.parent_path().string(), "': ", code.message()));
    if (std::filesystem::file_size(path, code) == bytes.size() && !code) {
        std::ifstream in(path, std::ios::binary);
        std::vector<char> existing(bytes.size());
        in.read(existing.data(), static_cast<std::streamsize>(existing.size()));
        if (in && std::memcmp(existing.data(), bytes.data(), bytes.size()) == 0) return;
    }
    std::filesystem::path staging = path;
    staging += message(".", ::getpid(), ".tmp");
    {
        std::ofstream out(staging, std::ios::binary | std::ios::trunc);
        out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
        out.close();
        if (!out) {
            std::filesystem::remove(staging, code);
            throw io_error(message("ANE: cannot write '", staging.string(), "'"));
        }
    }
    std::filesystem::rename(staging, path, code);
    if (code) {
        std::filesystem::remove(staging, code);
        throw io_error(message("ANE: cannot move '", staging.string(), "' to '", path.string(), "'"));
    }
}

// The text of the MIL line a compiler message names ("... line 12 ..."), or empty.
inline std::string named_mil_line(std::string_view description, std::string_view mil_text) {
    for (std::size_t at = description.find("line "); at != std::string_view::npos;
         at = description.find("line ", at + 1)) {
        std::size_t digit = at + 5;
        std::size_t number = 0;
        while (digit < description.size() && description[digit] >= '0' && description[digit] <= '9' &&
               number < 100'000'000) {
            number = number * 10 + static_cast<std::size_t>(description[digit] - '0');
            ++digit;
        }
        if (digit == at + 5 || number == 0) continue;
        std::size_t begin = 0;
        for (std::size_t line = 1; line < number; ++line) {
            begin = mil_text.find('\n', begin);
            if (begin == std::string_view::npos) return {};
            ++begin;
        }
        std::string_view text = mil_text.substr(begin, mil_text.find('\n', begin) - begin);
        while (!text.empty() && (text.front() == ' ' || text.front() == '\t'))
            text.remove_prefix(1);
        while (!text.empty() && (text.back() == '\r' || text.back() == ' '))
            text.remove_suffix(1);
        return message("; MIL line ", number, ": ", text);
    }
    return {};
}

// The MIL op on the line a framework message names ("line 12: ..."), e.g. " (MIL line 12: softmax)", or "".
inline std::string named_mil_op(std::string_view description, std::string_view mil_text) {
    for (std::size_t at = description.find("line "); at != std::string_view::npos;
         at = description.find("line ", at + 1)) {
        std::size_t digit = at + 5, number = 0;
        while (digit < description.size() && description[digit] >= '0' && description[digit] <= '9' &&
               number < 100'000'000)
            number = number * 10 + static_cast<std::size_t>(description[digit++] - '0');
        if (digit == at + 5 || number == 0) continue;
        std::size_t begin = 0;
        for (std::size_t line = 1; line < number && begin != std::string_view::npos; ++line) {
            begin = mil_text.find('\n', begin);
            if (begin != std::string_view::npos) ++begin;
        }
        if (begin == std::string_view::npos) return {};
        const std::string_view text = mil_text.substr(begin, mil_text.find('\n', begin) - begin);
        const std::size_t equals = text.find(" = ");
        const std::size_t paren = equals == std::string_view::npos ? equals : text.find('(', equals);
        if (paren == std::string_view::npos) return {};
        return message(" (MIL line ", number, ": ", text.substr(equals + 3, paren - equals - 3), ")");
    }
    return {};
}

// What a failed call reports: the NSError (+0, autoreleased: read inside the caller's pool).
inline std::string failure_reason(objc_id error_object) {
    return error_object == nullptr ? std::string("returned NO with nil error") : describe_error(error_object);
}

// Whether a failure says the device holds as many programs as it allows: status 0x50004 (TMC: "the sixteenth
// compile in a process fail[s] with 0x50004"), as the framework's text or as the NSError's code (327684).
inline bool says_device_full(std::string_view reason) {
    return reason.find("0x50004") != std::string_view::npos ||
           reason.find("code 327684:") != std::string_view::npos;
}

// A number in modelAttributes: CFNumber, or a CFString of digits.
inline std::int64_t attribute_number(objc_id dictionary, const char* key, std::string_view context) {
    const objc_id value = dictionary_lookup(dictionary, key, context);
    if (value == nullptr) {
        throw error(message("ANE modelAttributes: ", context, " has no \"", key, "\" (RUNTIME.md §3)"));
    }
    const std::string what = message(context, " \"", key, "\"");
    if (!is_cf_string(value)) return number_value(value, what);
    const std::string text = string_value(value, what);
    std::int64_t result = 0;
    if (text.empty() || text.size() > 18)
        throw error(message("ANE modelAttributes: ", what, " is \"", text, "\""));
    for (const char c : text) {
        if (c < '0' || c > '9') throw error(message("ANE modelAttributes: ", what, " is \"", text, "\""));
        result = result * 10 + (c - '0');
    }
    return result;
}

inline objc_id required_key(objc_id dictionary, const char* key, std::string_view context) {
    const objc_id value = dictionary_lookup(dictionary, key, context);
    if (value == nullptr) {
        throw error(message("ANE modelAttributes: ", context, " has no \"", key,
                            "\" (RUNTIME.md §3; the program's layout cannot be read)"));
    }
    return value;
}

inline std::string optional_string(objc_id dictionary, const char* key) {
    const objc_id value = dictionary_lookup(dictionary, key);
    return is_cf_string(value) ? string_value(value) : std::string();
}

// A Live entry's optional count ("Interleave", "Batches", "Depth"): 1 when absent.
inline std::int64_t optional_count(objc_id entry, const char* key, std::string_view context) {
    return dictionary_lookup(entry, key) == nullptr ? 1 : attribute_number(entry, key, context);
}

// "out000@output" -> "out000": output symbols come back with the suffix (RUNTIME.md §0 #1, ironmill, FTN);
// both spellings are accepted.
inline std::string without_output_suffix(std::string name) {
    constexpr std::string_view suffix = "@output";
    if (name.size() > suffix.size() && name.ends_with(suffix)) name.resize(name.size() - suffix.size());
    return name;
}

// The symbols in index order, each matched to its LiveInputList/LiveOutputList entry by "Symbol" or "Name"
// (either spelling of an output), or by position when the entries carry neither (RUNTIME.md §0 #8). Each
// layout is checked: anvil binds [1, C, 1, W] surfaces, one batch, one plane per channel, no interleave.
inline std::vector<symbol_layout> read_symbols(objc_id symbols, objc_id live, const char* kind) {
    const std::size_t count = array_count(symbols, message(kind, " symbols"));
    const std::size_t live_count = array_count(live, message("Live", kind, "List"));
    std::vector<symbol_layout> result;
    for (std::size_t i = 0; i < count; ++i) {
        symbol_layout layout;
        layout.name = without_output_suffix(string_value(array_at(symbols, i), message(kind, " symbol ", i)));
        objc_id entry = nullptr;
        bool named = false;
        for (std::size_t j = 0; j < live_count && entry == nullptr; ++j) {
            const objc_id candidate = array_at(live, j);
            const std::string symbol = optional_string(candidate, "Symbol");
            const std::string name = optional_string(candidate, "Name");
            named = named || !symbol.empty() || !name.empty();
            if ((!symbol.empty() && without_output_suffix(symbol) == layout.name) ||
                (!name.empty() && without_output_suffix(name) == layout.name)) {
                entry = candidate;
            }
        }
        if (entry == nullptr && !named && live_count == count) entry = array_at(live, i);
        if (entry == nullptr) {
            throw error(message("ANE modelAttributes: ", kind, " symbol '", layout.name,
                                "' has no entry in Live", kind, "List"));
        }
        const std::string context = message(kind, " '", layout.name, "'");
        layout.channels = attribute_number(entry, "Channels", context);
        layout.height = attribute_number(entry, "Height", context);
        layout.width = attribute_number(entry, "Width", context);
        layout.row_stride = static_cast<std::size_t>(attribute_number(entry, "RowStride", context));
        layout.plane_stride = static_cast<std::size_t>(attribute_number(entry, "PlaneStride", context));
        const std::string type = optional_string(entry, "Type");
        if (type == "Float32") {
            layout.fp16 = false;
        } else if (type != "Float16") {
            throw error(message("ANE modelAttributes: ", context, " has element type \"", type,
                                "\"; expected \"Float16\" or \"Float32\""));
        }
        const std::int64_t interleave = optional_count(entry, "Interleave", context);
        const std::int64_t batches = optional_count(entry, "Batches", context);
        const std::int64_t depth = optional_count(entry, "Depth", context);
        const std::size_t element = layout.fp16 ? 2 : 4;
        const auto width_bytes = static_cast<std::size_t>(std::max<std::int64_t>(layout.width, 0)) * element;
        if (layout.channels <= 0 || layout.width <= 0 || layout.height != 1 || interleave != 1 ||
            batches != 1 || depth != 1 || layout.row_stride < width_bytes || layout.row_stride % 64 != 0 ||
            layout.plane_stride < layout.row_stride || layout.plane_stride % 64 != 0) {
            throw error(
                message("ANE modelAttributes: the compiled program lays out ", context, " as Channels ",
                        layout.channels, ", Height ", layout.height, ", Width ", layout.width, ", RowStride ",
                        layout.row_stride, ", PlaneStride ", layout.plane_stride, ", Interleave ", interleave,
                        ", Batches ", batches, ", Depth ", depth,
                        "; anvil binds one [1, C, 1, W] plane per channel with 64-byte aligned strides "
                        "and no interleave (RUNTIME.md §0 #8)"));
        }
        result.push_back(std::move(layout));
    }
    return result;
}

}  // namespace framework_detail

// How loadWithQoS is retried: failures for lack of ANE resources are machine-wide and transient, so working
// code retries with exponential backoff (ANEDVD: up to 7 tries, 0.1 s to 3.2 s; RUNTIME.md §0 #13).
// A compile or load the device refused because it holds as many loaded programs as it allows (0x50004). Not
// transient (RUNTIME.md §0b #23): waiting does not help, unloading another program does (loaded_programs).
class device_full : public error {
public:
    using error::error;
};

struct load_retry_policy {
    int attempts = 7;
    std::chrono::milliseconds first_delay{100};
    // What is left of the backoff one program may spend, across every load of every form it is tried in
    // (null: no cap); each delay is taken from it, and the tries stop when it is spent.
    std::chrono::milliseconds* backoff_left = nullptr;
};

// `configured`, unless $ANVIL_ANE_LOAD_RETRY ("ATTEMPTS,FIRST_DELAY_MS", e.g. "7,100") overrides it: a test
// that makes every load fail, or a user who would rather fall back to the CPU at once, shortens the wait.
inline load_retry_policy load_retry_from_environment(load_retry_policy configured) {
    const char* text = std::getenv("ANVIL_ANE_LOAD_RETRY");
    if (text == nullptr || *text == '\0') return configured;
    char* end = nullptr;
    const long attempts = std::strtol(text, &end, 10);
    long delay = -1;
    if (end != text && *end == ',') {
        const char* rest = end + 1;
        delay = std::strtol(rest, &end, 10);
        if (end == rest) delay = -1;
    }
    if (attempts < 1 || attempts > 100 || delay < 0 || delay > 60'000 || *end != '\0') {
        throw error(
            message("ANVIL_ANE_LOAD_RETRY: expected \"ATTEMPTS,FIRST_DELAY_MS\" (1 to 100 tries, a delay "
                    "of 0 to 60000 ms), got '",
                    text, "'"));
    }
    return {static_cast<int>(attempts), std::chrono::milliseconds(delay), configured.backoff_left};
}

// An exclusive flock on `<directory>.lock` for as long as it lives: two processes staging and compiling the
// same cached program must not clear each other's files, and a cache prune skips an entry whose lock is held
// (backend/cache.hpp, file_lock).
class directory_lock {
public:
    explicit directory_lock(const std::filesystem::path& directory)
        : lock_(framework_detail::lock_path(directory), true) {}

private:
    cache_files::file_lock lock_;
};

// An `_ANEInMemoryModel` with its MIL and weights. Move-only; the destructor unloads it when loaded, releases
// it and removes its temp directory when no other model uses it.
class ane_model {
public:
    ane_model(ane_model&& other) noexcept { *this = std::move(other); }
    ane_model& operator=(ane_model&& other) noexcept {
        if (this != &other) {
            destroy();
            model_ = std::move(other.model_);
            hex_ = std::move(other.hex_);
            directory_ = std::exchange(other.directory_, {});
            model_url_ = std::exchange(other.model_url_, {});
            mil_data_ = std::move(other.mil_data_);
            weight_files_ = std::move(other.weight_files_);
            loaded_ = std::exchange(other.loaded_, false);
        }
        return *this;
    }
    ane_model(const ane_model&) = delete;
    ane_model& operator=(const ane_model&) = delete;
    ~ane_model() { destroy(); }

    // +[_ANEInMemoryModelDescriptor modelWithMILText:weights:optionsPlist:] then
    // +[_ANEInMemoryModel inMemoryModelWithDescriptor:]: MIL as UTF-8 NSData, weights as
    // { key: { "offset": 0, "data": NSData } } (an empty dictionary, never nil), optionsPlist nil.
    [[nodiscard]] static ane_model create(std::string_view mil_text, std::span<const weight_file> weights) {
        const runtime& rt = runtime::get();
        const autorelease_pool pool;
        ane_model result;
        result.mil_data_ = make_data(std::as_bytes(std::span<const char>(mil_text.data(), mil_text.size())));

        const objc_object offset_key = make_string("offset");
        const objc_object data_key = make_string("data");
        const objc_object zero = make_number(0);
        std::vector<objc_object> keep;
        std::vector<std::pair<objc_id, objc_id>> entries;
        std::set<std::string> seen;
        for (const weight_file& file : weights) {
            std::filesystem::path relative = framework_detail::weight_relative_path(file.path);
            if (!seen.insert(file.path).second)
                throw error(message("ANE weights: key '", file.path, "' given twice"));
            objc_object data = make_data(file.bytes);
            objc_object inner =
                make_dictionary({{offset_key.get(), zero.get()}, {data_key.get(), data.get()}});
            objc_object key = make_string(file.path);
            entries.emplace_back(key.get(), inner.get());
            result.weight_files_.emplace_back(std::move(relative), objc_object::retain(data.get()));
            keep.push_back(std::move(key));
            keep.push_back(std::move(inner));
            keep.push_back(std::move(data));
        }
        const objc_object weight_dictionary = make_dictionary(entries);

        const objc_id descriptor =
            rt.send(rt.classes.in_memory_model_descriptor, rt.messages.model_with_mil_text,
                    result.mil_data_.get(), weight_dictionary.get(), nullptr);
        if (descriptor == nullptr) {
            throw error(
                ANVIL_PRIVATE_TEXT("ANE: +[_ANEInMemoryModelDescriptor "
                                   "modelWithMILText:weights:optionsPlist:] returned nil (the "
                                   "framework rejected the MIL text or the weights dictionary)"));
        }
        const objc_id model =
            rt.send(rt.classes.in_memory_model, rt.messages.in_memory_model_with_descriptor, descriptor);
        if (model == nullptr)
            throw error(
                ANVIL_PRIVATE_TEXT("ANE: +[_ANEInMemoryModel inMemoryModelWithDescriptor:] returned nil"));
        result.model_ = objc_object::retain(model);

        const objc_id hex = rt.send(model, rt.messages.hex_string_identifier);
        if (hex == nullptr)
            throw error(ANVIL_PRIVATE_TEXT("ANE: -[_ANEInMemoryModel hexStringIdentifier] returned nil"));
        result.hex_ = string_value(hex, "hexStringIdentifier");
        if (result.hex_.empty() || result.hex_.find('/') != std::string::npos || result.hex_ == "." ||
            result.hex_ == "..") {
            throw error(message("ANE: hexStringIdentifier \"", result.hex_, "\" is not a directory name"));
        }
        const std::filesystem::path directory = framework_detail::temporary_directory() / result.hex_;
        framework_detail::acquire_directory(directory);
        result.directory_ = directory;
        return result;
    }

    [[nodiscard]] const std::string& hex_identifier() const noexcept { return hex_; }
    [[nodiscard]] const std::filesystem::path& directory() const noexcept { return directory_; }

    // -setModelURL: with a file URL: the program cache's directory for this program. The on-disk cache
    // follows OMLX (RUNTIME.md §0 #2): with a model URL the compiler stages model.mil and weights/ in that
    // directory itself (not in NSTemporaryDirectory()/<hex>), and compiledModelExists asks whether it already
    // holds the compiled program. The other working path, electricapp's — never calling setModelURL: and
    // relying on aned's own cache by hexStringIdentifier — leaves where and how long a compiled program is
    // kept to the system, and cannot key it by anvil's version or the capability record. False when the
    // framework lacks the selector (the program then compiles from the temporary directory, uncached).
    bool set_cache_directory(const std::filesystem::path& dir) {
        const runtime& rt = runtime::get();
        if (!rt.responds(model(), rt.messages.set_model_url)) return false;
        std::error_code code;
        std::filesystem::create_directories(dir, code);
        if (code)
            throw io_error(
                message("ANE: cannot create cache directory '", dir.string(), "': ", code.message()));
        const autorelease_pool pool;
        const objc_object url = make_directory_url(dir.string());
        rt.send(model(), rt.messages.set_model_url, url.get());
        model_url_ = dir;
        return true;
    }

    // -compiledModelExists: the cache directory already holds this program (false without the selector).
    [[nodiscard]] bool compiled_model_exists() const {
        const runtime& rt = runtime::get();
        if (!rt.responds(model(), rt.messages.compiled_model_exists)) return false;
        const autorelease_pool pool;
        return rt.send(model(), rt.messages.compiled_model_exists);
    }

    // Stages model.mil and weights/ — in the model-URL directory, cleared first as OMLX does so no file of an
    // earlier, interrupted compile stays beside them; else in <tmp>/<hex>/ — and compiles. The error carries
    // the compiler's message and the MIL line it names. The weights stay until the first load succeeds: a
    // program that then fails to load (a stale cached compile) is staged and compiled again from them
    // (RUNTIME.md §0b #22); afterwards no copy stays (§0 #12). `cache_locked`: the caller holds the
    // directory_lock of the model-URL directory (flock locks of two open files conflict within one process
    // too, so it is not taken again).
    void compile(bool cache_locked = false) {
        const runtime& rt = runtime::get();
        std::optional<directory_lock> lock;
        if (!model_url_.empty()) {
            if (!cache_locked) lock.emplace(model_url_);
            std::error_code ignored;
            std::filesystem::remove_all(model_url_, ignored);
            write_model_directory(model_url_);
        } else {
            write_model_directory(directory_);
        }
        const autorelease_pool pool;
        const objc_object options = make_empty_dictionary();
        objc_id failure = nullptr;
        if (rt.send(model(), rt.messages.compile_with_qos, ane_qos, options.get(), &failure)) return;
        const std::string reason = framework_detail::failure_reason(failure);
        if (framework_detail::says_device_full(reason))
            throw device_full(message("ANE compile of program ", hex_, " failed: ", reason));
        const auto mil = data_bytes(mil_data_.get(), "MIL text");
        const std::string_view mil_text(reinterpret_cast<const char*>(mil.data()), mil.size());
        throw error(message("ANE compile of program ", hex_, " failed: ", reason,
                            framework_detail::named_mil_line(reason, mil_text)));
    }

    // loadWithQoS, retried with exponential backoff (load_retry_policy).
    void load(const load_retry_policy& retry = {}) {
        const runtime& rt = runtime::get();
        if (loaded_) return;
        std::string reason;
        const int attempts = std::max(1, retry.attempts);
        auto delay = retry.first_delay;
        int tried = 0;
        bool spent = false;
        for (int attempt = 0; attempt < attempts; ++attempt) {
            if (attempt > 0) {
                auto wait = delay;
                if (retry.backoff_left != nullptr) {
                    if (retry.backoff_left->count() <= 0) {
                        spent = true;
                        break;
                    }
                    wait = std::min(wait, *retry.backoff_left);
                    *retry.backoff_left -= wait;
                }
                std::this_thread::sleep_for(wait);
                delay *= 2;
            }
            ++tried;
            const autorelease_pool pool;
            const objc_object options = make_empty_dictionary();
            objc_id failure = nullptr;
            if (rt.send(model(), rt.messages.load_with_qos, ane_qos, options.get(), &failure)) {
                loaded_ = true;
                weight_files_.clear();  // loaded: nothing will be staged again
                return;
            }
            reason = framework_detail::failure_reason(failure);
            // A full device stays full until a program is unloaded: the caller makes room, not the backoff.
            if (framework_detail::says_device_full(reason))
                throw device_full(message("ANE load of program ", hex_, " failed: ", reason));
        }
        throw error(message("ANE load of program ", hex_, " failed after ", tried,
                            tried == 1 ? " try" : " tries", " (backing off from ", retry.first_delay.count(),
                            " ms", spent ? "; the program's backoff is spent" : "", "): ", reason));
    }

    [[nodiscard]] bool loaded() const noexcept { return loaded_; }

    void unload() {
        if (!loaded_) return;
        const runtime& rt = runtime::get();
        loaded_ = false;
        const autorelease_pool pool;
        objc_id failure = nullptr;
        if (!rt.send(model(), rt.messages.unload_with_qos, ane_qos, &failure)) {
            throw error(message("ANE unload of program ", hex_,
                                " failed: ", framework_detail::failure_reason(failure)));
        }
    }

    // [[model model] modelAttributes]: symbol order and live layouts (RUNTIME.md §3).
    [[nodiscard]] model_layout layout() const {
        const runtime& rt = runtime::get();
        const autorelease_pool pool;
        const objc_id inner = rt.send(model(), rt.messages.model);
        if (inner == nullptr) {
            throw error(
                message(ANVIL_PRIVATE_TEXT("ANE: -[_ANEInMemoryModel model] returned nil for program "), hex_,
                        (loaded_ ? "" : " (it is not loaded)")));
        }
        const objc_id attributes = rt.send(inner, rt.messages.model_attributes);
        if (attributes == nullptr) {
            throw error(
                message(ANVIL_PRIVATE_TEXT("ANE: -[_ANEModel modelAttributes] returned nil for program "),
                        hex_, (loaded_ ? "" : " (it is not loaded)")));
        }
        using framework_detail::required_key;
        const objc_id description = required_key(attributes, "ANEFModelDescription", "modelAttributes");
        const objc_id status_list = required_key(attributes, "NetworkStatusList", "modelAttributes");
        if (array_count(status_list, "NetworkStatusList") == 0) {
            throw error("ANE modelAttributes: NetworkStatusList is empty (RUNTIME.md §3)");
        }
        const objc_id status = array_at(status_list, 0, "NetworkStatusList");
        model_layout result;
        result.inputs = framework_detail::read_symbols(
            required_key(description, "kANEFModelInputSymbolsArrayKey", "ANEFModelDescription"),
            required_key(status, "LiveInputList", "NetworkStatusList[0]"), "Input");
        result.outputs = framework_detail::read_symbols(
            required_key(description, "kANEFModelOutputSymbolsArrayKey", "ANEFModelDescription"),
            required_key(status, "LiveOutputList", "NetworkStatusList[0]"), "Output");
        return result;
    }

    // Binds surfaces to symbol indices 0..n-1 (weightsBuffer nil, perfStats nil, procedureIndex @0).
    [[nodiscard]] ane_request make_request(std::span<const io_surface* const> inputs,
                                           std::span<const io_surface* const> outputs) const {
        const runtime& rt = runtime::get();
        (void)model();
        const autorelease_pool pool;
        ane_request request;
        const auto bind = [&](std::span<const io_surface* const> surfaces, const char* kind,
                              std::vector<objc_object>& indices) {
            std::vector<objc_id> objects;
            for (std::size_t i = 0; i < surfaces.size(); ++i) {
                if (surfaces[i] == nullptr || surfaces[i]->handle() == nullptr) {
                    throw error(
                        message("ANE request for program ", hex_, ": ", kind, " surface ", i, " is null"));
                }
                const objc_id object = rt.send(rt.classes.io_surface_object,
                                               rt.messages.object_with_io_surface, surfaces[i]->handle());
                if (object == nullptr) {
                    throw error(
                        message(ANVIL_PRIVATE_TEXT(
                                    "ANE: +[_ANEIOSurfaceObject objectWithIOSurface:] returned nil for "),
                                kind, " ", i));
                }
                request.surface_objects_.push_back(objc_object::retain(object));
                objects.push_back(object);
                indices.push_back(make_number(static_cast<std::int64_t>(i)));
            }
            return make_array(objects);
        };
        std::vector<objc_object> input_numbers;
        std::vector<objc_object> output_numbers;
        const objc_object input_array = bind(inputs, "input", input_numbers);
        const objc_object output_array = bind(outputs, "output", output_numbers);
        const auto ids_of = [](const std::vector<objc_object>& objects) {
            std::vector<objc_id> result;
            for (const objc_object& object : objects)
                result.push_back(object.get());
            return make_array(result);
        };
        const objc_object input_indices = ids_of(input_numbers);
        const objc_object output_indices = ids_of(output_numbers);
        const objc_object procedure = make_number(0);
        const objc_id made = rt.send(rt.classes.request, rt.messages.request_with_inputs, input_array.get(),
                                     input_indices.get(), output_array.get(), output_indices.get(), nullptr,
                                     nullptr, procedure.get());
        if (made == nullptr) {
            throw error(message(
                ANVIL_PRIVATE_TEXT("ANE: +[_ANERequest requestWithInputs:...] returned nil for program "),
                hex_, " (", inputs.size(), " inputs, ", outputs.size(), " outputs)"));
        }
        request.request_ = objc_object::retain(made);
        return request;
    }

    // evaluateWithQoS:options:request:error: (synchronous).
    void evaluate(const ane_request& request) {
        const runtime& rt = runtime::get();
        if (!loaded_)
            throw error(message("ANE evaluate of program ", hex_, ": it is not loaded (call load() first)"));
        if (!request) throw error(message("ANE evaluate of program ", hex_, ": the request is empty"));
        const autorelease_pool pool;
        const objc_object options = make_empty_dictionary();
        objc_id failure = nullptr;
        if (!rt.send(model(), rt.messages.evaluate_with_qos, ane_qos, options.get(), request.get(),
                     &failure)) {
            throw error(message("ANE evaluate of program ", hex_,
                                " failed: ", framework_detail::failure_reason(failure)));
        }
    }

private:
    ane_model() = default;

    [[nodiscard]] objc_id model() const {
        if (!model_) throw error("ANE: use of a moved-from ane_model");
        return model_.get();
    }

    void write_model_directory(const std::filesystem::path& directory) const {
        framework_detail::write_file(directory / "model.mil", data_bytes(mil_data_.get(), "MIL text"));
        for (const auto& [relative, data] : weight_files_) {
            framework_detail::write_file(directory / relative, data_bytes(data.get(), "weight file"));
        }
    }

    void destroy() noexcept {
        if (model_) {
            const autorelease_pool pool;
            if (loaded_) {
                try {
                    unload();
                } catch (...) {  // a destructor cannot report; the model is released regardless
                }
            }
            model_.reset();
        }
        loaded_ = false;
        weight_files_.clear();
        mil_data_.reset();
        if (!directory_.empty()) framework_detail::release_directory(std::exchange(directory_, {}));
    }

    objc_object model_;
    std::string hex_;
    std::filesystem::path directory_;  // <tmp>/<hex>: staging without a model URL
    std::filesystem::path model_url_;  // the cache directory given to setModelURL:, or empty
    objc_object mil_data_;
    std::vector<std::pair<std::filesystem::path, objc_object>> weight_files_;
    bool loaded_ = false;
};

}  // namespace anvil::detail::ane
