// anvil: the protocol-buffer reader's definitions (see protobuf.hpp; compilation.hpp says when this file is
// compiled).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/io/protobuf.hpp"

namespace anvil {

ANVIL_INLINE protobuf_reader::protobuf_reader(std::span<const std::byte> message, std::string where,
                                              std::size_t base)
    : message_(message), where_(std::move(where)), base_(base) {}

ANVIL_INLINE void protobuf_reader::fail(const protobuf_field& field, std::string_view what) const {
    throw format_error(
        detail::message(where_, ": field ", field.number, " at byte ", field.offset, ": ", what));
}

ANVIL_INLINE std::uint64_t protobuf_reader::varint(std::size_t& at, const protobuf_field& field,
                                                   std::string_view name) const {
    std::uint64_t value = 0;
    // Ten bytes at most: the tenth holds bit 63 alone, so any other bit there (a continuation included) is
    // refused, and the loop ends by returning or failing.
    for (int shift = 0;; shift += 7) {
        if (at >= message_.size()) {
            fail(field, detail::message(name, ": the varint runs past the end of the message (",
                                        message_.size(), " bytes)"));
        }
        const auto byte = static_cast<std::uint8_t>(message_[at++]);
        if (shift == 63 && byte > 1) fail(field, detail::message(name, ": the varint does not fit 64 bits"));
        value |= std::uint64_t{byte & 0x7fu} << shift;
        if ((byte & 0x80u) == 0) return value;
    }
}

ANVIL_INLINE bool protobuf_reader::next(protobuf_field& field) {
    if (at_ >= message_.size()) return false;
    field = {};
    field.offset = base_ + at_;
    const std::uint64_t key = varint(at_, field, "the key");
    field.number = static_cast<std::uint32_t>(key >> 3);
    if ((key >> 3) == 0 || (key >> 3) > 0x1fffffff) fail(field, "field numbers are 1 to 2^29 - 1");
    const auto wire = static_cast<unsigned>(key & 7u);
    const auto fixed = [&](std::size_t size) {
        if (message_.size() - at_ < size) {
            fail(field, detail::message("a ", size, "-byte value runs past the end of the message (",
                                        message_.size() - at_, " bytes left)"));
        }
        std::uint64_t value = 0;
        for (std::size_t i = 0; i < size; ++i)
            value |= std::uint64_t{static_cast<std::uint8_t>(message_[at_ + i])} << (8 * i);
        at_ += size;
        return value;
    };
    switch (wire) {
        case 0:
            field.wire = protobuf_wire::varint;
            field.integer = varint(at_, field, "the value");
            return true;
        case 1:
            field.wire = protobuf_wire::fixed64;
            field.integer = fixed(8);
            return true;
        case 2: {
            field.wire = protobuf_wire::length_delimited;
            const std::uint64_t length = varint(at_, field, "the length");
            if (length > message_.size() - at_) {
                fail(field,
                     detail::message("a length of ", length, " bytes runs past the end of the message (",
                                     message_.size() - at_, " bytes left)"));
            }
            field.bytes = message_.subspan(at_, static_cast<std::size_t>(length));
            at_ += static_cast<std::size_t>(length);
            return true;
        }
        case 5:
            field.wire = protobuf_wire::fixed32;
            field.integer = fixed(4);
            return true;
        default:
            fail(field, detail::message("wire type ", wire,
                                        wire == 3 || wire == 4 ? " (a group, deprecated and not read)"
                                                               : " does not exist"));
    }
}

ANVIL_INLINE protobuf_reader protobuf_reader::nested(const protobuf_field& field, std::string where) const {
    expect(field, protobuf_wire::length_delimited, "a message");
    const auto offset = static_cast<std::size_t>(field.bytes.data() - message_.data());
    return protobuf_reader(field.bytes, std::move(where), base_ + offset);
}

ANVIL_INLINE void protobuf_reader::expect(const protobuf_field& field, protobuf_wire wire,
                                          std::string_view name) const {
    if (field.wire == wire) return;
    constexpr std::string_view names[] = {"varint", "64-bit", "length-delimited", "", "", "32-bit"};
    fail(field, detail::message(name, " must be ", names[static_cast<int>(wire)], ", got ",
                                names[static_cast<int>(field.wire)]));
}

ANVIL_INLINE std::int64_t protobuf_reader::int64(const protobuf_field& field, std::string_view name) const {
    expect(field, protobuf_wire::varint, name);
    return static_cast<std::int64_t>(field.integer);
}

ANVIL_INLINE float protobuf_reader::float32(const protobuf_field& field, std::string_view name) const {
    expect(field, protobuf_wire::fixed32, name);
    return std::bit_cast<float>(static_cast<std::uint32_t>(field.integer));
}

ANVIL_INLINE double protobuf_reader::float64(const protobuf_field& field, std::string_view name) const {
    expect(field, protobuf_wire::fixed64, name);
    return std::bit_cast<double>(field.integer);
}

ANVIL_INLINE std::string_view protobuf_reader::string(const protobuf_field& field,
                                                      std::string_view name) const {
    expect(field, protobuf_wire::length_delimited, name);
    return {reinterpret_cast<const char*>(field.bytes.data()), field.bytes.size()};
}

ANVIL_INLINE std::span<const std::byte> protobuf_reader::bytes(const protobuf_field& field,
                                                               std::string_view name) const {
    expect(field, protobuf_wire::length_delimited, name);
    return field.bytes;
}

ANVIL_INLINE void protobuf_reader::append_int64s(const protobuf_field& field, std::string_view name,
                                                 std::vector<std::int64_t>& out) const {
    if (field.wire == protobuf_wire::varint) {
        out.push_back(static_cast<std::int64_t>(field.integer));
        return;
    }
    expect(field, protobuf_wire::length_delimited, name);
    protobuf_reader packed(field.bytes, where_,
                           base_ + static_cast<std::size_t>(field.bytes.data() - message_.data()));
    while (packed.at_ < packed.message_.size())
        out.push_back(static_cast<std::int64_t>(packed.varint(packed.at_, field, name)));
}

namespace detail {

// Appends the little-endian values of a packed fixed-width field (or one unpacked element).
template <class Float, class Bits>
void append_fixed(const protobuf_reader& reader, const protobuf_field& field, protobuf_wire element_wire,
                  std::string_view name, std::vector<Float>& out) {
    if (field.wire == element_wire) {
        out.push_back(std::bit_cast<Float>(static_cast<Bits>(field.integer)));
        return;
    }
    reader.expect(field, protobuf_wire::length_delimited, name);
    if (field.bytes.size() % sizeof(Float) != 0) {
        reader.fail(field, message(name, ": a packed run of ", field.bytes.size(), " bytes is not whole ",
                                   sizeof(Float), "-byte values"));
    }
    const std::size_t count = field.bytes.size() / sizeof(Float);
    const std::size_t first = out.size();
    out.resize(first + count);
    if constexpr (std::endian::native == std::endian::little) {
        if (count != 0) std::memcpy(out.data() + first, field.bytes.data(), field.bytes.size());
    } else {
        for (std::size_t i = 0; i < count; ++i) {
            Bits bits = 0;
            for (std::size_t b = 0; b < sizeof(Float); ++b)
                bits |= static_cast<Bits>(static_cast<std::uint8_t>(field.bytes[i * sizeof(Float) + b]))
                        << (8 * b);
            out[first + i] = std::bit_cast<Float>(bits);
        }
    }
}

}  // namespace detail

ANVIL_INLINE void protobuf_reader::append_floats(const protobuf_field& field, std::string_view name,
                                                 std::vector<float>& out) const {
    detail::append_fixed<float, std::uint32_t>(*this, field, protobuf_wire::fixed32, name, out);
}

ANVIL_INLINE void protobuf_reader::append_doubles(const protobuf_field& field, std::string_view name,
                                                  std::vector<double>& out) const {
    detail::append_fixed<double, std::uint64_t>(*this, field, protobuf_wire::fixed64, name, out);
}

}  // namespace anvil
