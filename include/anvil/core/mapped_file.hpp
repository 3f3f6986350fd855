// anvil: a read-only memory map of a whole file. Weights are read in place (zero-copy) from the page cache;
// the only operating-system calls live in detail::os_mapping below, so a Windows port changes one section.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <utility>

#include "anvil/compilation.hpp"

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

[[nodiscard]] std::string os_error_text(int error_number);

// Closes the descriptor on every path out of map_file.
class os_file_descriptor {
public:
    explicit os_file_descriptor(int descriptor) noexcept : descriptor_(descriptor) {}
    os_file_descriptor(const os_file_descriptor&) = delete;
    os_file_descriptor& operator=(const os_file_descriptor&) = delete;
    ~os_file_descriptor();
    [[nodiscard]] int get() const noexcept { return descriptor_; }

private:
    int descriptor_;
};

[[nodiscard]] os_mapping map_file(const std::filesystem::path& path);

void unmap_file(const os_mapping& mapping) noexcept;

void advise_mapping(const os_mapping& mapping, access_hint hint) noexcept;

// --- end of the POSIX section ---

}  // namespace detail

// Owns the mapping; move-only. The bytes stay valid until the mapped_file is destroyed or assigned over.
// As with any mmap, a file truncated by another process while mapped faults on access (SIGBUS): map files
// that are not being rewritten.
class mapped_file {
public:
    mapped_file() = default;

    [[nodiscard]] static mapped_file open(const std::filesystem::path& path,
                                          access_hint hint = access_hint::normal);

    mapped_file(const mapped_file&) = delete;
    mapped_file& operator=(const mapped_file&) = delete;
    mapped_file(mapped_file&& other) noexcept
        : mapping_(std::exchange(other.mapping_, {})), path_(std::move(other.path_)) {}
    mapped_file& operator=(mapped_file&& other) noexcept;
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

#if ANVIL_DEFINITIONS
#include "anvil/core/mapped_file-inl.hpp"
#endif
