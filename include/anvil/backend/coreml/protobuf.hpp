// anvil: a protobuf wire-format encoder of its own (no libprotobuf): varints, length-delimited fields and
// packed repeats, enough for Core ML's Model.proto, FeatureTypes.proto and MIL.proto (COREML.md §2). Fields
// are appended in the order the caller writes them; Core ML's messages are written in field-number order, as
// protobuf's own serialiser does, so golden bytes compare exactly. proto3 rules (COREML.md §2.4): scalar
// defaults may be left out by the caller, a oneof member is written even when empty, repeated numbers packed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace anvil::detail::coreml {

// Wire types (the low three bits of a key).
enum class wire_type : std::uint8_t { varint = 0, fixed64 = 1, length_delimited = 2, fixed32 = 5 };

class protobuf_writer {
public:
    // An int32/int64/uint64/bool/enum field. Negative int32 and int64 values take ten bytes (two's
    // complement of the 64-bit value), as protobuf encodes them.
    protobuf_writer& varint(std::uint32_t field, std::uint64_t value) {
        key(field, wire_type::varint);
        raw_varint(value);
        return *this;
    }
    protobuf_writer& signed_varint(std::uint32_t field, std::int64_t value) {
        return varint(field, static_cast<std::uint64_t>(value));
    }
    protobuf_writer& boolean(std::uint32_t field, bool value) { return varint(field, value ? 1 : 0); }

    protobuf_writer& bytes(std::uint32_t field, std::span<const std::byte> data) {
        key(field, wire_type::length_delimited);
        raw_varint(data.size());
        bytes_.insert(bytes_.end(), data.begin(), data.end());
        return *this;
    }
    protobuf_writer& string(std::uint32_t field, std::string_view text) {
        return bytes(field, std::as_bytes(std::span(text.data(), text.size())));
    }
    // A sub-message (written even when empty: that is how a oneof member with default content is selected).
    protobuf_writer& message(std::uint32_t field, const protobuf_writer& child) {
        return bytes(field, child.bytes_);
    }

    // `repeated int32/int64/uint64/bool` fields, packed into one length-delimited field.
    template <class Integer>
    protobuf_writer& packed_varints(std::uint32_t field, std::span<const Integer> values) {
        protobuf_writer body;
        for (const Integer value : values)
            body.raw_varint(static_cast<std::uint64_t>(static_cast<std::int64_t>(value)));
        return message(field, body);
    }
    // `repeated float`, packed: four little-endian bytes each.
    protobuf_writer& packed_floats(std::uint32_t field, std::span<const float> values) {
        protobuf_writer body;
        for (const float value : values) {
            std::uint32_t bits = 0;
            std::memcpy(&bits, &value, sizeof bits);
            for (int i = 0; i < 4; ++i)
                body.bytes_.push_back(static_cast<std::byte>((bits >> (8 * i)) & 0xFFu));
        }
        return message(field, body);
    }

    // A `map<string, V>` entry: `Entry{key = 1, value = 2}`.
    protobuf_writer& map_entry(std::uint32_t field, std::string_view map_key, const protobuf_writer& value) {
        protobuf_writer entry;
        entry.string(1, map_key).message(2, value);
        return message(field, entry);
    }
    protobuf_writer& map_entry(std::uint32_t field, std::string_view map_key, std::string_view value) {
        protobuf_writer entry;
        entry.string(1, map_key).string(2, value);
        return message(field, entry);
    }

    [[nodiscard]] bool empty() const noexcept { return bytes_.empty(); }
    [[nodiscard]] const std::vector<std::byte>& bytes() const noexcept { return bytes_; }
    [[nodiscard]] std::vector<std::byte> release() { return std::move(bytes_); }

private:
    void key(std::uint32_t field, wire_type type) {
        raw_varint((static_cast<std::uint64_t>(field) << 3) | static_cast<std::uint64_t>(type));
    }
    void raw_varint(std::uint64_t value) {
        while (value >= 0x80) {
            bytes_.push_back(static_cast<std::byte>((value & 0x7Fu) | 0x80u));
            value >>= 7;
        }
        bytes_.push_back(static_cast<std::byte>(value));
    }

    std::vector<std::byte> bytes_;
};

}  // namespace anvil::detail::coreml
