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
    int4 = 8,
    uint1 = 9,
    uint2 = 10,
    uint4 = 11,
    uint3 = 12,
    uint6 = 13,
    int32 = 14,
    uint32 = 15,
};

inline constexpr std::size_t blob_alignment = 64;
inline constexpr std::uint32_t blob_sentinel = 0xDEADBEEFu;
inline constexpr std::uint32_t blob_storage_version = 2;

// Values of `bits` bits each (1, 2, 3, 4 or 6; each below 2^bits) packed as MIL blobs hold them
// (COREML.md §1.5, MILBlob/SubByteTypes.cpp): LSB first, element i at bit (i * bits) % 8 of byte
// (i * bits) / 8, a value that crosses a byte boundary continuing in the next byte. `padding_bits` is what
// the metadata record's padding_size_in_bits says: the unused high bits of the last byte.
struct packed_sub_byte {
    std::vector<std::byte> bytes;
    std::uint64_t padding_bits = 0;
};
[[nodiscard]] inline packed_sub_byte pack_sub_byte(std::span<const std::uint8_t> values, unsigned bits) {
    const std::uint64_t total_bits = values.size() * static_cast<std::uint64_t>(bits);
    packed_sub_byte packed;
    packed.bytes.assign(static_cast<std::size_t>((total_bits + 7) / 8), std::byte{0});
    packed.padding_bits = (8 - total_bits % 8) % 8;
    for (std::size_t i = 0; i < values.size(); ++i) {
        const std::uint64_t at = i * static_cast<std::uint64_t>(bits);
        const unsigned value = values[i] & ((1u << bits) - 1u);
        const auto byte = static_cast<std::size_t>(at / 8);
        const unsigned shift = static_cast<unsigned>(at % 8);
        packed.bytes[byte] |= static_cast<std::byte>((value << shift) & 0xFFu);
        if (shift + bits > 8) packed.bytes[byte + 1] |= static_cast<std::byte>(value >> (8 - shift));
    }
    return packed;
}

class weight_blob_writer {
public:
    weight_blob_writer() : bytes_(blob_alignment, std::byte{0}) { store_u32(4, blob_storage_version); }

    // Appends one blob; returns the offset its BLOBFILE reference uses (the metadata record's). A sub-byte
    // type's payload is packed LSB first (pack_sub_byte), `padding_bits` of its last byte unused.
    std::uint64_t append(blob_dtype type, std::span<const std::byte> payload,
                         std::uint64_t padding_bits = 0) {
        // Each record starts at the next aligned offset; as in coremltools' FileWriter, the file ends right
        // after the last payload (readers use the records' offsets and sizes).
        const std::size_t metadata = round_up(bytes_.size());
        bytes_.resize(metadata + blob_alignment, std::byte{0});
        store_u32(metadata, blob_sentinel);
        store_u32(metadata + 4, static_cast<std::uint32_t>(type));
        store_u64(metadata + 8, payload.size());
        store_u64(metadata + 16, metadata + blob_alignment);  // absolute payload offset
        store_u64(metadata + 24, padding_bits);               // +32..63 reserved stay zero
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
