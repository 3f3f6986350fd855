// anvil: the GGUF reader's definitions (see gguf.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include "anvil/core/bfloat16.hpp"
#include "anvil/core/checked_math.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/half.hpp"
#include "anvil/core/mapped_file.hpp"
#include "anvil/io/gguf.hpp"
#include "anvil/io/safetensors.hpp"

namespace anvil {

using detail::message;

ANVIL_INLINE std::string_view gguf_value_type_name(gguf_value_type type) noexcept {
    switch (type) {
        case gguf_value_type::uint8:
            return "u8";
        case gguf_value_type::int8:
            return "i8";
        case gguf_value_type::uint16:
            return "u16";
        case gguf_value_type::int16:
            return "i16";
        case gguf_value_type::uint32:
            return "u32";
        case gguf_value_type::int32:
            return "i32";
        case gguf_value_type::float32:
            return "f32";
        case gguf_value_type::boolean:
            return "bool";
        case gguf_value_type::string:
            return "string";
        case gguf_value_type::array:
            return "array";
        case gguf_value_type::uint64:
            return "u64";
        case gguf_value_type::int64:
            return "i64";
        case gguf_value_type::float64:
            return "f64";
    }
    return "unknown";
}

namespace detail {

// The size in the file of one element of a numeric or bool type.
inline std::size_t gguf_scalar_size(gguf_value_type type) {
    using t = gguf_value_type;
    switch (type) {
        case t::uint8:
        case t::int8:
        case t::boolean:
            return 1;
        case t::uint16:
        case t::int16:
            return 2;
        case t::uint32:
        case t::int32:
        case t::float32:
            return 4;
        case t::uint64:
        case t::int64:
        case t::float64:
            return 8;
        case t::string:
        case t::array:
            break;
    }
    return 0;
}

// A scalar of `type` read from `at` (gguf_scalar_size(type) bytes): integers as u64 or i64, floats as
// double.
inline std::variant<std::monostate, std::uint64_t, std::int64_t, double, bool, std::string> gguf_read_scalar(
    gguf_value_type type, const std::byte* at) {
    using t = gguf_value_type;
    const auto read = [&](auto value) {
        std::memcpy(&value, at, sizeof value);
        return value;
    };
    switch (type) {
        case t::uint8:
            return std::uint64_t{read(std::uint8_t{})};
        case t::int8:
            return std::int64_t{read(std::int8_t{})};
        case t::uint16:
            return std::uint64_t{read(std::uint16_t{})};
        case t::int16:
            return std::int64_t{read(std::int16_t{})};
        case t::uint32:
            return std::uint64_t{read(std::uint32_t{})};
        case t::int32:
            return std::int64_t{read(std::int32_t{})};
        case t::uint64:
            return read(std::uint64_t{});
        case t::int64:
            return read(std::int64_t{});
        case t::float32:
            return static_cast<double>(read(float{}));
        case t::float64:
            return read(double{});
        case t::boolean:
            return read(std::uint8_t{}) != 0;
        case t::string:
        case t::array:
            break;
    }
    return std::monostate{};
}

template <class Scalar>
std::optional<std::int64_t> gguf_integer_of(const Scalar& v) noexcept {
    if (const auto* u = std::get_if<std::uint64_t>(&v)) {
        if (*u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return std::nullopt;
        return static_cast<std::int64_t>(*u);
    }
    if (const auto* i = std::get_if<std::int64_t>(&v)) return *i;
    return std::nullopt;
}

template <class Scalar>
std::optional<double> gguf_number_of(const Scalar& v) noexcept {
    if (const auto* u = std::get_if<std::uint64_t>(&v)) return static_cast<double>(*u);
    if (const auto* i = std::get_if<std::int64_t>(&v)) return static_cast<double>(*i);
    if (const auto* f = std::get_if<double>(&v)) return *f;
    return std::nullopt;
}

}  // namespace detail

ANVIL_INLINE std::optional<std::int64_t> gguf_value::integer() const noexcept {
    return detail::gguf_integer_of(scalar_);
}

ANVIL_INLINE std::optional<double> gguf_value::number() const noexcept {
    return detail::gguf_number_of(scalar_);
}

ANVIL_INLINE std::optional<bool> gguf_value::boolean() const noexcept {
    if (const auto* b = std::get_if<bool>(&scalar_)) return *b;
    return std::nullopt;
}

ANVIL_INLINE std::optional<std::int64_t> gguf_value::integer_at(std::size_t index) const noexcept {
    const std::size_t size = detail::gguf_scalar_size(element_type_);
    if (!is_array() || size == 0 || index >= count_) return std::nullopt;
    return detail::gguf_integer_of(detail::gguf_read_scalar(element_type_, raw_.data() + index * size));
}

ANVIL_INLINE std::optional<double> gguf_value::number_at(std::size_t index) const noexcept {
    const std::size_t size = detail::gguf_scalar_size(element_type_);
    if (!is_array() || size == 0 || index >= count_) return std::nullopt;
    return detail::gguf_number_of(detail::gguf_read_scalar(element_type_, raw_.data() + index * size));
}

ANVIL_INLINE std::string gguf_value::describe() const {
    const std::string type(gguf_value_type_name(type_));
    if (const auto* s = string())
        return type + " " + detail::quoted_name(s->size() > 60 ? s->substr(0, 57) + "..." : *s);
    if (is_array()) return message("array of ", count_, " ", gguf_value_type_name(element_type_));
    if (const auto b = boolean()) return type + (*b ? " true" : " false");
    if (const auto* f = std::get_if<double>(&scalar_)) return message(type, " ", *f);
    if (const auto* u = std::get_if<std::uint64_t>(&scalar_)) return message(type, " ", *u);
    if (const auto* i = std::get_if<std::int64_t>(&scalar_)) return message(type, " ", *i);
    return type;
}

ANVIL_INLINE ggml_type_layout gguf_tensor::layout() const {
    const auto found = ggml_layout(type);
    if (!found) throw format_error(message("GGUF tensor '", name, "': unknown ggml type ", type));
    return *found;
}

ANVIL_INLINE std::vector<float> gguf_tensor::to_f32() const {
    std::vector<float> out(static_cast<std::size_t>(element_count));
    dequantize_ggml(static_cast<ggml_type>(type), bytes, out);
    return out;
}

namespace detail {

// A cursor over the header: every read is bounds-checked, and each failure names the file and what was
// being read.
class gguf_reader {
public:
    gguf_reader(std::span<const std::byte> bytes, std::string_view source) : bytes_(bytes), source_(source) {}

    [[noreturn]] void fail(std::string_view what) const {
        throw format_error(message(source_, ": ", what, " (at byte ", at_, " of ", bytes_.size(), ")"));
    }
    [[nodiscard]] std::size_t position() const noexcept { return at_; }
    [[nodiscard]] std::size_t remaining() const noexcept { return bytes_.size() - at_; }

    template <class T>
    T scalar(std::string_view what) {
        if (remaining() < sizeof(T)) fail(message("the file ends inside ", what));
        T value{};
        std::memcpy(&value, bytes_.data() + at_, sizeof(T));
        at_ += sizeof(T);
        return value;
    }

    std::string string(std::string_view what) { return std::string(string_view_of(what)); }

    // A string as a view of the file's bytes.
    std::string_view string_view_of(std::string_view what) {
        const auto length = scalar<std::uint64_t>(what);
        if (length > remaining())
            fail(message(what, " claims ", length, " bytes; ", remaining(), " remain in the file"));
        const std::string_view out(reinterpret_cast<const char*>(bytes_.data() + at_),
                                   static_cast<std::size_t>(length));
        at_ += static_cast<std::size_t>(length);
        return out;
    }

    gguf_value value(gguf_value_type type, std::string_view what) {
        using t = gguf_value_type;
        gguf_value out;
        out.type_ = type;
        if (type == t::string) {
            out.scalar_ = string(what);
            return out;
        }
        if (type != t::array) {
            const std::size_t size = gguf_scalar_size(type);
            if (size == 0) fail(message(what, " has unknown value type ", static_cast<std::uint32_t>(type)));
            if (remaining() < size) fail(message("the file ends inside ", what));
            if (type == t::boolean && static_cast<std::uint8_t>(bytes_[at_]) > 1)
                fail(message(what, " is a bool holding ", static_cast<unsigned>(bytes_[at_]),
                             " (expected 0 or 1)"));
            out.scalar_ = gguf_read_scalar(type, bytes_.data() + at_);
            at_ += size;
            return out;
        }
        const auto element = scalar<std::uint32_t>(what);
        if (element == static_cast<std::uint32_t>(t::array))
            fail(message(what, " is an array of arrays, which anvil does not read (no model file has one)"));
        if (element > static_cast<std::uint32_t>(t::float64))
            fail(message(what, " is an array of unknown type ", element));
        out.element_type_ = static_cast<t>(element);
        const auto count = scalar<std::uint64_t>(what);
        // Every element takes at least one byte (a string at least 8, its length): a count past what remains
        // is a lie, refused before anything is allocated for it.
        const std::size_t least = out.element_type_ == t::string ? 8 : gguf_scalar_size(out.element_type_);
        if (count > remaining() / least)
            fail(message(what, " claims ", count, " ", gguf_value_type_name(out.element_type_), " elements; ",
                         remaining(), " bytes remain"));
        out.count_ = static_cast<std::size_t>(count);
        if (out.element_type_ == t::string) {
            out.strings_.reserve(out.count_);
            for (std::size_t i = 0; i < out.count_; ++i)
                out.strings_.push_back(string_view_of(what));
            return out;
        }
        out.raw_ = bytes_.subspan(at_, out.count_ * least);
        if (out.element_type_ == t::boolean)
            for (std::size_t i = 0; i < out.count_; ++i)
                if (static_cast<std::uint8_t>(out.raw_[i]) > 1)
                    fail(message(what, "[", i, "] is a bool holding ", static_cast<unsigned>(out.raw_[i]),
                                 " (expected 0 or 1)"));
        at_ += out.count_ * least;
        return out;
    }

private:
    std::span<const std::byte> bytes_;
    std::string_view source_;
    std::size_t at_ = 0;
};

}  // namespace detail

ANVIL_INLINE gguf_file gguf_file::open(const std::filesystem::path& path) {
    gguf_file file;
    file.source_ = path.string();
    file.mapping_ = mapped_file::open(path);
    file.parse_bytes(file.mapping_->bytes());
    return file;
}

ANVIL_INLINE gguf_file gguf_file::parse(std::span<const std::byte> bytes, std::string source_name) {
    gguf_file file;
    file.source_ = std::move(source_name);
    file.parse_bytes(bytes);
    return file;
}

ANVIL_INLINE void gguf_file::parse_bytes(std::span<const std::byte> bytes) {
    detail::gguf_reader r(bytes, source_);
    if (bytes.size() < 4 || std::memcmp(bytes.data(), "GGUF", 4) != 0)
        throw format_error(message(source_, ": not a GGUF file (it does not start with \"GGUF\")"));
    static_cast<void>(r.scalar<std::uint32_t>("the magic"));
    version_ = r.scalar<std::uint32_t>("the version");
    if (version_ == 1)
        r.fail("GGUF version 1 (32-bit counts) is not supported; convert the model with a current llama.cpp");
    if ((version_ & 0xFFFFu) == 0 && version_ != 0)
        r.fail(
            message("the version reads ", version_, ": a big-endian GGUF file, which anvil does not read"));
    if (version_ != 2 && version_ != 3)
        r.fail(message("GGUF version ", version_, " is not supported (2 or 3)"));
    const auto tensor_count = r.scalar<std::uint64_t>("the tensor count");
    const auto metadata_count = r.scalar<std::uint64_t>("the metadata count");
    // Each metadata entry takes at least 12 bytes (a key length and a value type), each tensor info 24 (a
    // name length, n_dims, type, offset): counts past the file's size are refused before any allocation.
    if (metadata_count > r.remaining() / 12)
        r.fail(message("the header claims ", metadata_count, " metadata entries; the file is too small"));
    if (tensor_count > r.remaining() / 24)
        r.fail(message("the header claims ", tensor_count, " tensors; the file is too small"));
    metadata_.reserve(static_cast<std::size_t>(metadata_count));
    std::unordered_set<std::string> keys;
    for (std::uint64_t i = 0; i < metadata_count; ++i) {
        std::string key = r.string(message("metadata entry ", i, "'s key"));
        if (key.empty()) r.fail(message("metadata entry ", i, " has an empty key"));
        // The GGUF spec: a key is ASCII and at most 2^16 - 1 bytes long.
        if (key.size() >= detail::gguf_key_limit)
            r.fail(message("metadata entry ", i, "'s key is ", key.size(),
                           " bytes long; GGUF keys are shorter than 2^16 bytes"));
        if (const auto wide = std::find_if(key.begin(), key.end(),
                                           [](char c) { return static_cast<unsigned char>(c) >= 0x80; });
            wide != key.end())
            r.fail(message("metadata key ", detail::quoted_name(key), " is not ASCII (byte ",
                           static_cast<unsigned>(static_cast<unsigned char>(*wide)), " at ",
                           wide - key.begin(), "); GGUF keys are ASCII"));
        if (!keys.insert(key).second)
            r.fail(message("metadata key ", detail::quoted_name(key), " appears twice"));
        const auto type = r.scalar<std::uint32_t>(message("the type of ", detail::quoted_name(key)));
        if (type > static_cast<std::uint32_t>(gguf_value_type::float64))
            r.fail(message("metadata ", detail::quoted_name(key), " has unknown value type ", type));
        gguf_value value =
            r.value(static_cast<gguf_value_type>(type), message("metadata ", detail::quoted_name(key)));
        metadata_.emplace_back(std::move(key), std::move(value));
    }
    if (const gguf_value* a = find("general.alignment")) {
        const auto n = a->integer();
        if (a->type() != gguf_value_type::uint32 || !n || *n == 0 || (*n & (*n - 1)) != 0)
            throw format_error(
                message(source_, ": general.alignment must be a u32 power of two, got ", a->describe()));
        alignment_ = static_cast<std::uint64_t>(*n);
    }
    tensors_.reserve(static_cast<std::size_t>(tensor_count));
    std::unordered_set<std::string> names;
    for (std::uint64_t i = 0; i < tensor_count; ++i) {
        gguf_tensor t;
        t.name = r.string(message("tensor ", i, "'s name"));
        const std::string label = message("tensor ", detail::quoted_name(t.name));
        if (t.name.empty()) r.fail(message("tensor ", i, " has an empty name"));
        // ggml keeps a name in char[GGML_MAX_NAME = 64] with its terminating NUL; llama.cpp refuses longer.
        if (t.name.size() >= detail::ggml_max_name)
            r.fail(message(label, "'s name is ", t.name.size(), " bytes long; ggml holds at most ",
                           detail::ggml_max_name - 1, " (GGML_MAX_NAME is ", detail::ggml_max_name,
                           " with the terminating NUL)"));
        const auto dims = r.scalar<std::uint32_t>(label + "'s dimension count");
        if (dims < 1 || dims > detail::gguf_max_dims)
            r.fail(
                message(label, " has ", dims, " dimensions (GGUF allows 1 to ", detail::gguf_max_dims, ")"));
        for (std::uint32_t d = 0; d < dims; ++d) {
            const auto extent = r.scalar<std::uint64_t>(label + "'s dimensions");
            // A zero extent is legal (ggml requires only non-negative sizes): the tensor holds no data.
            if (extent > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
                r.fail(message(label, " has dimension ", d, " = ", extent, " (past 2^63 - 1)"));
            t.ne.push_back(static_cast<std::int64_t>(extent));
        }
        t.type = r.scalar<std::uint32_t>(label + "'s type");
        t.offset = r.scalar<std::uint64_t>(label + "'s offset");
        const auto layout = ggml_layout(t.type);
        if (!layout) r.fail(message(label, " has ggml type ", t.type, ", which anvil does not know"));
        const auto count = detail::checked_element_count(std::span<const std::int64_t>(t.ne));
        if (!count) r.fail(message(label, "'s dimensions multiply past 2^64"));
        t.element_count = *count;
        if (static_cast<std::uint64_t>(t.ne[0]) % layout->block != 0)
            r.fail(message(label, " is ", layout->name, " with ne[0] = ", t.ne[0],
                           ", not a multiple of its block of ", layout->block));
        if (!names.insert(t.name).second) r.fail(message(label, " appears twice"));
        tensors_.push_back(std::move(t));
    }
    const auto data_start = detail::checked_add(r.position(), alignment_ - 1);
    if (!data_start) r.fail("the data offset overflows");
    data_offset_ = *data_start / alignment_ * alignment_;
    if (data_offset_ > bytes.size())
        throw format_error(message(source_, ": the file ends before its data section (", bytes.size(),
                                   " bytes; the data starts at ", data_offset_, ")"));
    const std::uint64_t data_size = bytes.size() - data_offset_;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
    for (gguf_tensor& t : tensors_) {
        const ggml_type_layout layout = *ggml_layout(t.type);
        const auto size = detail::checked_mul(t.element_count / layout.block, layout.bytes);
        const std::string label = message(source_, ": tensor ", detail::quoted_name(t.name));
        if (!size) throw format_error(message(label, "'s size overflows"));
        if (t.offset % alignment_ != 0)
            throw format_error(
                message(label, " is at offset ", t.offset, ", not a multiple of the alignment ", alignment_));
        const auto end = detail::checked_add(t.offset, *size);
        if (!end || *end > data_size)
            throw format_error(message(label, " (", layout.name, ", ", *size, " bytes at offset ", t.offset,
                                       ") runs past the data section's ", data_size,
                                       " bytes: the file is truncated"));
        t.bytes =
            bytes.subspan(static_cast<std::size_t>(data_offset_ + t.offset), static_cast<std::size_t>(*size));
        ranges.emplace_back(t.offset, *end);
    }
    std::sort(ranges.begin(), ranges.end());
    for (std::size_t i = 1; i < ranges.size(); ++i)
        if (ranges[i].first < ranges[i - 1].second)
            throw format_error(message(source_, ": two tensors overlap at data offset ", ranges[i].first));
}

ANVIL_INLINE const gguf_value* gguf_file::find(std::string_view key) const {
    for (const auto& [name, value] : metadata_)
        if (name == key) return &value;
    return nullptr;
}

namespace detail {

[[noreturn]] inline void gguf_wrong_type(std::string_view source, std::string_view key, const gguf_value* v,
                                         std::string_view wanted) {
    if (!v) throw format_error(message(source, ": no metadata key '", key, "'"));
    throw format_error(message(source, ": metadata '", key, "' is ", v->describe(), "; expected ", wanted));
}

}  // namespace detail

ANVIL_INLINE std::int64_t gguf_file::integer(std::string_view key) const {
    const gguf_value* v = find(key);
    if (v) {
        if (const auto n = v->integer()) return *n;
    }
    detail::gguf_wrong_type(source_, key, v, "an integer");
}

ANVIL_INLINE double gguf_file::number(std::string_view key) const {
    const gguf_value* v = find(key);
    if (v) {
        if (const auto n = v->number()) return *n;
    }
    detail::gguf_wrong_type(source_, key, v, "a number");
}

ANVIL_INLINE const std::string& gguf_file::string(std::string_view key) const {
    const gguf_value* v = find(key);
    if (v && v->string()) return *v->string();
    detail::gguf_wrong_type(source_, key, v, "a string");
}

ANVIL_INLINE const gguf_value& gguf_file::array(std::string_view key) const {
    const gguf_value* v = find(key);
    if (v && v->is_array()) return *v;
    detail::gguf_wrong_type(source_, key, v, "an array");
}

ANVIL_INLINE const gguf_tensor* gguf_file::find_tensor(std::string_view name) const {
    for (const gguf_tensor& t : tensors_)
        if (t.name == name) return &t;
    return nullptr;
}

ANVIL_INLINE const gguf_tensor& gguf_file::tensor(std::string_view name) const {
    if (const gguf_tensor* t = find_tensor(name)) return *t;
    std::vector<std::string_view> names;
    names.reserve(tensors_.size());
    for (const gguf_tensor& t : tensors_)
        names.push_back(t.name);
    throw format_error(detail::no_tensor_message(source_, name, names, tensors_.size()));
}

}  // namespace anvil
