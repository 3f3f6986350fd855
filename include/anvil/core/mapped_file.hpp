// anvil: a read-only memory map of a whole file. Weights are read in place (zero-copy) from the page cache;
// the only operating-system calls live in detail::os_mapping below, so a Windows port changes one section.
#pragma once

#include "anvil/core/error.hpp"

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <span>
#include <string>
#include <utility>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace anvil {

// How the caller expects to touch the mapping; forwarded to the kernel as a hint and never an error.
enum class access_hint : std::uint8_t {
    normal,      // the kernel's default read-ahead
    sequential,  // read front to back once (conversions, checksums)
    random,      // scattered reads (looking up a few tensors of a large file)
    will_need,   // about to read all of it: start reading ahead now
};

namespace detail {

// --- POSIX: everything platform-specific about mapping a file is in this section. ---

struct os_mapping {
    void* address = nullptr;  // nullptr for an empty file: mmap of 0 bytes is an error on POSIX
    std::size_t size = 0;
};

[[nodiscard]] inline std::string os_error_text(int error_number) {
    return std::strerror(error_number);
}

// Closes the descriptor on every path out of map_file.
class os_file_descriptor {
public:
    explicit os_file_descriptor(int descriptor) noexcept : descriptor_(descriptor) {}
    os_file_descriptor(const os_file_descriptor&) = delete;
    os_file_descriptor& operator=(const os_file_descriptor&) = delete;
    ~os_file_descriptor() {
        if (descriptor_ >= 0) ::close(descriptor_);
    }
    [[nodiscard]] int get() const noexcept { return descriptor_; }

private:
    int descriptor_;
};

[[nodiscard]] inline os_mapping map_file(const std::filesystem::path& path) {
    int descriptor = -1;
    do {
        descriptor = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    } while (descriptor < 0 && errno == EINTR);
    if (descriptor < 0) {
        throw io_error(message(path.string(), ": cannot open for reading: ", os_error_text(errno)));
    }
    const os_file_descriptor file(descriptor);

    struct stat status {};
    if (::fstat(file.get(), &status) != 0) {
        throw io_error(message(path.string(), ": cannot read the file's size: ", os_error_text(errno)));
    }
    if (S_ISDIR(status.st_mode)) throw io_error(message(path.string(), ": is a folder, expected a file"));
    if (!S_ISREG(status.st_mode)) {
        // A pipe or device has no fixed size to map.
        throw io_error(message(path.string(), ": is not a regular file, cannot be memory-mapped"));
    }
    if (status.st_size < 0 ||
        static_cast<std::uintmax_t>(status.st_size) > std::numeric_limits<std::size_t>::max()) {
        throw io_error(message(path.string(), ": ", status.st_size, " bytes do not fit the address space"));
    }
    const auto size = static_cast<std::size_t>(status.st_size);
    if (size == 0) return {};

    // MAP_PRIVATE: the mapping is read-only anyway, and private pages are never written back.
    void* address = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, file.get(), 0);
    if (address == MAP_FAILED) {
        throw io_error(
            message(path.string(), ": cannot memory-map ", size, " bytes: ", os_error_text(errno)));
    }
    return {address, size};
}

inline void unmap_file(const os_mapping& mapping) noexcept {
    if (mapping.address != nullptr) ::munmap(mapping.address, mapping.size);
}

inline void advise_mapping(const os_mapping& mapping, access_hint hint) noexcept {
    if (mapping.address == nullptr) return;
    int advice = MADV_NORMAL;
    switch (hint) {
        case access_hint::normal:
            advice = MADV_NORMAL;
            break;
        case access_hint::sequential:
            advice = MADV_SEQUENTIAL;
            break;
        case access_hint::random:
            advice = MADV_RANDOM;
            break;
        case access_hint::will_need:
            advice = MADV_WILLNEED;
            break;
    }
    // Only a hint: a kernel that refuses it reads the file all the same.
    static_cast<void>(::madvise(mapping.address, mapping.size, advice));
}

// --- end of the POSIX section ---

}  // namespace detail

// Owns the mapping; move-only. The bytes stay valid until the mapped_file is destroyed or assigned over.
// As with any mmap, a file truncated by another process while mapped faults on access (SIGBUS): map files
// that are not being rewritten.
class mapped_file {
public:
    mapped_file() = default;

    [[nodiscard]] static mapped_file open(const std::filesystem::path& path,
                                          access_hint hint = access_hint::normal) {
        mapped_file file;
        file.mapping_ = detail::map_file(path);
        file.path_ = path;
        if (hint != access_hint::normal) file.advise(hint);
        return file;
    }

    mapped_file(const mapped_file&) = delete;
    mapped_file& operator=(const mapped_file&) = delete;
    mapped_file(mapped_file&& other) noexcept
        : mapping_(std::exchange(other.mapping_, {})), path_(std::move(other.path_)) {}
    mapped_file& operator=(mapped_file&& other) noexcept {
        if (this != &other) {
            detail::unmap_file(mapping_);
            mapping_ = std::exchange(other.mapping_, {});
            path_ = std::move(other.path_);
        }
        return *this;
    }
    ~mapped_file() { detail::unmap_file(mapping_); }

    [[nodiscard]] std::span<const std::byte> bytes() const noexcept {
        return {static_cast<const std::byte*>(mapping_.address), mapping_.size};
    }
    [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
    [[nodiscard]] std::size_t size() const noexcept { return mapping_.size; }
    [[nodiscard]] bool empty() const noexcept { return mapping_.size == 0; }

    // Tells the kernel how the bytes will be read; never fails.
    void advise(access_hint hint) const noexcept { detail::advise_mapping(mapping_, hint); }

private:
    detail::os_mapping mapping_;
    std::filesystem::path path_;
};

}  // namespace anvil
