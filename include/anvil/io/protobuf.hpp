// anvil: a reader of protocol buffers' wire format (https://protobuf.dev/programming-guides/encoding/), for
// the ONNX importer: no generated code, no dependency. A message is a sequence of fields, each a key varint
// (field number << 3 | wire type) and a value: a varint (0), 8 little-endian bytes (1), a length-delimited
// run of bytes (2: strings, bytes, nested messages, packed repeated numbers) or 4 bytes (5); groups (3, 4)
// are deprecated and refused. Every byte is hostile: varints longer than 10 bytes, lengths past the end of
// the message, field number 0 and unknown wire types are format_errors naming the source, the message path
// and the byte offset. Values are views of the input (no copy).
#pragma once

#include "anvil/compilation.hpp"
#include "anvil/core/error.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace anvil {

enum class protobuf_wire : std::uint8_t { varint = 0, fixed64 = 1, length_delimited = 2, fixed32 = 5 };

// One field of a message: its number, wire type, and value (the integer of a varint or fixed field; the bytes
// of a length-delimited one).
struct protobuf_field {
    std::uint32_t number = 0;
    protobuf_wire wire = protobuf_wire::varint;
    std::uint64_t integer = 0;
    std::span<const std::byte> bytes;
    std::size_t offset = 0;  // of the field's key, from the start of the whole input
};

// Reads the fields of one message in order. `where` names the message in errors ("model.onnx:
// graph.node[3]"); `base` is the message's offset in the whole input, so nested readers report absolute
// offsets.
class protobuf_reader {
public:
    protobuf_reader(std::span<const std::byte> message, std::string where, std::size_t base = 0);

    // The next field, or false at the end of the message.
    [[nodiscard]] bool next(protobuf_field& field);

    // A reader over a length-delimited field's bytes (a nested message), named `where`.
    [[nodiscard]] protobuf_reader nested(const protobuf_field& field, std::string where) const;

    [[nodiscard]] const std::string& where() const noexcept { return where_; }

    // Errors naming this message, the field and what was expected of it.
    [[noreturn]] void fail(const protobuf_field& field, std::string_view what) const;
    // `field` must have wire type `wire` (a field of the schema sent with another type is malformed).
    void expect(const protobuf_field& field, protobuf_wire wire, std::string_view name) const;

    // Typed values of a field named `name`, its wire type checked.
    [[nodiscard]] std::int64_t int64(const protobuf_field& field, std::string_view name) const;
    [[nodiscard]] float float32(const protobuf_field& field, std::string_view name) const;
    [[nodiscard]] double float64(const protobuf_field& field, std::string_view name) const;
    [[nodiscard]] std::string_view string(const protobuf_field& field, std::string_view name) const;
    [[nodiscard]] std::span<const std::byte> bytes(const protobuf_field& field, std::string_view name) const;

    // A repeated number field, packed (one length-delimited run) or not (one field per element): appends.
    void append_int64s(const protobuf_field& field, std::string_view name,
                       std::vector<std::int64_t>& out) const;
    void append_floats(const protobuf_field& field, std::string_view name, std::vector<float>& out) const;
    void append_doubles(const protobuf_field& field, std::string_view name, std::vector<double>& out) const;

private:
    std::uint64_t varint(std::size_t& at, const protobuf_field& field, std::string_view name) const;

    std::span<const std::byte> message_;
    std::string where_;
    std::size_t base_ = 0;
    std::size_t at_ = 0;
};

}  // namespace anvil

#if ANVIL_DEFINITIONS
#include "anvil/io/protobuf-inl.hpp"
#endif
