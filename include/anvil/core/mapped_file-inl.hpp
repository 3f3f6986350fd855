// anvil: mapped_file's definitions (see mapped_file.hpp; compilation.hpp says when this file is compiled).
#pragma once

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

#include "anvil/core/error.hpp"
#include "anvil/core/mapped_file.hpp"

namespace anvil {

namespace detail {

// --- POSIX: everything platform-specific about mapping a file is in this section. ---

ANVIL_INLINE std::string os_error_text(int error_number) {
    return std::strerror(error_number);
}

ANVIL_INLINE os_file_descriptor::~os_file_descriptor() {
    if (descriptor_ >= 0) ::close(descriptor_);
}

ANVIL_INLINE os_mapping map_file(const std::filesystem::path& path) {
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

ANVIL_INLINE void unmap_file(const os_mapping& mapping) noexcept {
    if (mapping.address != nullptr) ::munmap(mapping.address, mapping.size);
}

ANVIL_INLINE void advise_mapping(const os_mapping& mapping, access_hint hint) noexcept {
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

ANVIL_INLINE mapped_file mapped_file::open(const std::filesystem::path& path, access_hint hint) {
    mapped_file file;
    file.mapping_ = detail::map_file(path);
    file.path_ = path;
    if (hint != access_hint::normal) file.advise(hint);
    return file;
}

ANVIL_INLINE mapped_file& mapped_file::operator=(mapped_file&& other) noexcept {
    if (this != &other) {
        detail::unmap_file(mapping_);
        mapping_ = std::exchange(other.mapping_, {});
        path_ = std::move(other.path_);
    }
    return *this;
}

}  // namespace anvil
