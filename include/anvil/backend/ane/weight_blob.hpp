// anvil: the writer of MIL weight files ("MIL Blob Storage v2", coremltools' MILBlob/Blob/StorageFormat.hpp),
// byte-exact as MIL.md §1.5, RUNTIME.md §5 and COREML.md §1.5 describe them: a 64-byte storage header, then
// per blob a 64-byte metadata record followed by its payload, every record 64-byte aligned, nothing after the
// last payload. A MIL `BLOBFILE(..., offset = N)` names the metadata record's offset N, not the payload's
// (pointing at the payload reads garbage silently).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <utility>

namespace anvil::detail::ane {

// `mil_dtype` codes of the metadata record (MIL.md §1.5).
enum class blob_dtype : std::uint32_t {
    float16 = 1,
    float32 = 2,
    uint8 = 3,
    int8 = 4,
    bfloat16 = 5,
    int16 = 6,
    uint16 = 7,
    int32 = 14,
    uint32 = 15,
};

inline constexpr std::size_t blob_alignment = 64;
inline constexpr std::uint32_t blob_sentinel = 0xDEADBEEFu;
inline constexpr std::uint32_t blob_storage_version = 2;

class weight_blob_writer {
public:
    weight_blob_writer() : bytes_(blob_alignment, std::byte{0}) { store_u32(4, blob_storage_version); }

    // Appends one blob; returns the offset its BLOBFILE reference uses (the metadata record's).
    std::uint64_t append(blob_dtype type, std::span<const std::byte> payload) {
        // Each record starts at the next aligned offset; as in coremltools' FileWriter, the file ends right
        // after the last payload (readers use the records' offsets and sizes).
        const std::size_t metadata = round_up(bytes_.size());
        bytes_.resize(metadata + blob_alignment, std::byte{0});
        store_u32(metadata, blob_sentinel);
        store_u32(metadata + 4, static_cast<std::uint32_t>(type));
        store_u64(metadata + 8, payload.size());
        store_u64(metadata + 16, metadata + blob_alignment);  // absolute payload offset
        // +24 padding_size_in_bits and +32..63 reserved stay zero (byte-sized types have no bit padding).
        bytes_.insert(bytes_.end(), payload.begin(), payload.end());
        ++count_;
        store_u32(0, count_);
        return metadata;
    }

    [[nodiscard]] std::uint32_t count() const noexcept { return count_; }
    [[nodiscard]] const std::vector<std::byte>& bytes() const noexcept { return bytes_; }
    [[nodiscard]] std::vector<std::byte> release() { return std::move(bytes_); }

    [[nodiscard]] static constexpr std::size_t round_up(std::size_t size) noexcept {
        return (size + blob_alignment - 1) / blob_alignment * blob_alignment;
    }

private:
    void store_u32(std::size_t at, std::uint32_t value) {
        for (std::size_t i = 0; i < 4; ++i)
            bytes_[at + i] = static_cast<std::byte>((value >> (8 * i)) & 0xFFu);
    }
    void store_u64(std::size_t at, std::uint64_t value) {
        for (std::size_t i = 0; i < 8; ++i)
            bytes_[at + i] = static_cast<std::byte>((value >> (8 * i)) & 0xFFu);
    }

    std::vector<std::byte> bytes_;
    std::uint32_t count_ = 0;
};

}  // namespace anvil::detail::ane
