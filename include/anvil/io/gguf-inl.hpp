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

ANVIL_INLINE std::optional<ggml_type_layout> ggml_layout(std::uint32_t type) {
    switch (static_cast<ggml_type>(type)) {
        case ggml_type::F32:
            return ggml_type_layout{"F32", 1, 4, true};
        case ggml_type::F16:
            return ggml_type_layout{"F16", 1, 2, true};
        case ggml_type::BF16:
            return ggml_type_layout{"BF16", 1, 2, true};
        case ggml_type::Q4_0:
            return ggml_type_layout{"Q4_0", 32, 18, true};  // f16 d, 16 bytes of nibbles
        case ggml_type::Q4_1:
            return ggml_type_layout{"Q4_1", 32, 20, true};  // f16 d, f16 m, 16 bytes
        case ggml_type::Q5_0:
            return ggml_type_layout{"Q5_0", 32, 22, true};  // f16 d, u32 high bits, 16 bytes
        case ggml_type::Q5_1:
            return ggml_type_layout{"Q5_1", 32, 24, true};  // f16 d, f16 m, u32 high bits, 16 bytes
        case ggml_type::Q8_0:
            return ggml_type_layout{"Q8_0", 32, 34, true};  // f16 d, 32 int8
        case ggml_type::Q8_1:
            return ggml_type_layout{"Q8_1", 32, 36, false};  // f16 d, f16 s, 32 int8
        case ggml_type::Q2_K:
            return ggml_type_layout{"Q2_K", 256, 84, false};
        case ggml_type::Q3_K:
            return ggml_type_layout{"Q3_K", 256, 110, false};
        case ggml_type::Q4_K:
            return ggml_type_layout{"Q4_K", 256, 144, true};  // f16 d, dmin, 12 scale bytes, 128 bytes
        case ggml_type::Q5_K:
            return ggml_type_layout{"Q5_K", 256, 176, true};  // ... and 32 bytes of high bits
        case ggml_type::Q6_K:
            return ggml_type_layout{"Q6_K", 256, 210, true};  // 128 low, 64 high, 16 int8 scales, f16 d
        case ggml_type::Q8_K:
            return ggml_type_layout{"Q8_K", 256, 292, true};  // f32 d, 256 int8, 16 int16 sums
        case ggml_type::IQ4_NL:
            return ggml_type_layout{"IQ4_NL", 32, 18, true};  // f16 d, 16 bytes of table indices
    }
    return std::nullopt;
}

namespace detail {

inline float ggml_f16(const std::byte* at) {
    std::uint16_t bits = 0;
    std::memcpy(&bits, at, 2);
    return static_cast<float>(half::from_bits(bits));
}

// ggml's get_scale_min_k4: the 6-bit scale and min of sub-block j (0..7) from a K-quant's 12 scale bytes.
inline void ggml_scale_min_k4(int j, const std::uint8_t* q, int& scale, int& min) {
    if (j < 4) {
        scale = q[j] & 63;
        min = q[j + 4] & 63;
    } else {
        scale = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// One block of each type: `in` its bytes, `out` its values.
inline void dequantize_block(ggml_type type, const std::byte* in, float* out) {
    const auto* u = reinterpret_cast<const std::uint8_t*>(in);
    switch (type) {
        case ggml_type::F32:
            std::memcpy(out, in, 4);
            return;
        case ggml_type::F16:
            *out = ggml_f16(in);
            return;
        case ggml_type::BF16: {
            std::uint16_t bits = 0;
            std::memcpy(&bits, in, 2);
            *out = static_cast<float>(bfloat16::from_bits(bits));
            return;
        }
        case ggml_type::Q4_0: {  // x = (nibble - 8) * d; low nibbles are values 0..15, high 16..31
            const float d = ggml_f16(in);
            for (int j = 0; j < 16; ++j) {
                out[j] = static_cast<float>((u[2 + j] & 0x0F) - 8) * d;
                out[j + 16] = static_cast<float>((u[2 + j] >> 4) - 8) * d;
            }
            return;
        }
        case ggml_type::Q4_1: {  // x = nibble * d + m
            const float d = ggml_f16(in), m = ggml_f16(in + 2);
            for (int j = 0; j < 16; ++j) {
                out[j] = static_cast<float>(u[4 + j] & 0x0F) * d + m;
                out[j + 16] = static_cast<float>(u[4 + j] >> 4) * d + m;
            }
            return;
        }
        case ggml_type::Q5_0:
        case ggml_type::Q5_1: {  // a fifth bit per value from the u32 qh: bit j for value j
            const bool offset = type == ggml_type::Q5_1;
            const float d = ggml_f16(in), m = offset ? ggml_f16(in + 2) : 0.0f;
            const std::size_t at = offset ? 4 : 2;
            std::uint32_t high = 0;
            std::memcpy(&high, in + at, 4);
            const std::uint8_t* qs = u + at + 4;
            for (int j = 0; j < 16; ++j) {
                const int low = (qs[j] & 0x0F) | static_cast<int>(((high >> j) << 4) & 0x10);
                const int upper = (qs[j] >> 4) | static_cast<int>((high >> (j + 12)) & 0x10);
                if (offset) {
                    out[j] = static_cast<float>(low) * d + m;
                    out[j + 16] = static_cast<float>(upper) * d + m;
                } else {
                    out[j] = static_cast<float>(low - 16) * d;
                    out[j + 16] = static_cast<float>(upper - 16) * d;
                }
            }
            return;
        }
        case ggml_type::Q8_0: {
            const float d = ggml_f16(in);
            for (int j = 0; j < 32; ++j)
                out[j] = static_cast<float>(static_cast<std::int8_t>(u[2 + j])) * d;
            return;
        }
        case ggml_type::Q4_K:
        case ggml_type::Q5_K: {
            // 8 sub-blocks of 32: x = d * scale_j * q - dmin * min_j, q a nibble (plus a fifth bit from qh
            // for Q5_K: bit 2i of qh[l] for the low nibbles of the i-th 64, bit 2i + 1 for the high ones).
            const bool five = type == ggml_type::Q5_K;
            const float d = ggml_f16(in), dmin = ggml_f16(in + 2);
            const std::uint8_t* scales = u + 4;
            const std::uint8_t* high = u + 16;
            const std::uint8_t* qs = u + (five ? 48 : 16);
            for (int group = 0; group < 4; ++group) {
                int scale = 0, min = 0;
                ggml_scale_min_k4(2 * group, scales, scale, min);
                const float d1 = d * static_cast<float>(scale), m1 = dmin * static_cast<float>(min);
                ggml_scale_min_k4(2 * group + 1, scales, scale, min);
                const float d2 = d * static_cast<float>(scale), m2 = dmin * static_cast<float>(min);
                const std::uint8_t* q = qs + 32 * group;
                float* y = out + 64 * group;
                for (int l = 0; l < 32; ++l) {
                    const int bit_low = five && (high[l] & (1u << (2 * group))) ? 16 : 0;
                    const int bit_high = five && (high[l] & (2u << (2 * group))) ? 16 : 0;
                    y[l] = d1 * static_cast<float>((q[l] & 0xF) + bit_low) - m1;
                    y[l + 32] = d2 * static_cast<float>((q[l] >> 4) + bit_high) - m2;
                }
            }
            return;
        }
        case ggml_type::Q6_K: {
            // Two halves of 128: 6-bit q = low nibble (ql) | two bits of qh << 4, minus 32; 16 int8 scales,
            // one per 16 values.
            const std::uint8_t* ql = u;
            const std::uint8_t* qh = u + 128;
            const auto* sc = reinterpret_cast<const std::int8_t*>(u + 192);
            const float d = ggml_f16(in + 208);
            for (int half_block = 0; half_block < 2; ++half_block) {
                float* y = out + 128 * half_block;
                const std::uint8_t* l_bits = ql + 64 * half_block;
                const std::uint8_t* h_bits = qh + 32 * half_block;
                const std::int8_t* s = sc + 8 * half_block;
                for (int l = 0; l < 32; ++l) {
                    const int is = l / 16;
                    const int q1 = ((l_bits[l] & 0xF) | (((h_bits[l] >> 0) & 3) << 4)) - 32;
                    const int q2 = ((l_bits[l + 32] & 0xF) | (((h_bits[l] >> 2) & 3) << 4)) - 32;
                    const int q3 = ((l_bits[l] >> 4) | (((h_bits[l] >> 4) & 3) << 4)) - 32;
                    const int q4 = ((l_bits[l + 32] >> 4) | (((h_bits[l] >> 6) & 3) << 4)) - 32;
                    y[l] = d * static_cast<float>(s[is] * q1);
                    y[l + 32] = d * static_cast<float>(s[is + 2] * q2);
                    y[l + 64] = d * static_cast<float>(s[is + 4] * q3);
                    y[l + 96] = d * static_cast<float>(s[is + 6] * q4);
                }
            }
            return;
        }
        case ggml_type::Q8_K: {
            float d = 0.0f;
            std::memcpy(&d, in, 4);
            for (int j = 0; j < 256; ++j)
                out[j] = d * static_cast<float>(static_cast<std::int8_t>(u[4 + j]));
            return;
        }
        case ggml_type::IQ4_NL: {  // a 16-entry non-linear table (ggml's kvalues_iq4nl) times d
            constexpr std::array<int, 16> table{-127, -104, -83, -65, -49, -35, -22, -10,
                                                1,    13,   25,  38,  53,  69,  89,  113};
            const float d = ggml_f16(in);
            for (int j = 0; j < 16; ++j) {
                out[j] = d * static_cast<float>(table[u[2 + j] & 0x0F]);
                out[j + 16] = d * static_cast<float>(table[u[2 + j] >> 4]);
            }
            return;
        }
        default:
            break;
    }
    throw unsupported_error(message("GGUF: no dequantiser for ggml type ", static_cast<std::uint32_t>(type)));
}

}  // namespace detail

ANVIL_INLINE void dequantize_ggml(ggml_type type, std::span<const std::byte> bytes, std::span<float> out) {
    const auto layout = ggml_layout(static_cast<std::uint32_t>(type));
    if (!layout) throw format_error(message("GGUF: unknown ggml type ", static_cast<std::uint32_t>(type)));
    if (!layout->dequantizes)
        throw unsupported_error(
            message("GGUF: ggml type ", layout->name, " has no dequantiser in anvil yet"));
    if (out.size() % layout->block != 0)
        throw format_error(message("GGUF: ", out.size(), " values of ", layout->name,
                                   " are not whole blocks of ", layout->block));
    const std::size_t blocks = out.size() / layout->block;
    if (bytes.size() != blocks * layout->bytes)
        throw format_error(message("GGUF: ", out.size(), " values of ", layout->name, " take ",
                                   blocks * layout->bytes, " bytes; got ", bytes.size()));
    for (std::size_t b = 0; b < blocks; ++b)
        detail::dequantize_block(type, bytes.data() + b * layout->bytes, out.data() + b * layout->block);
}

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
        const auto dims = r.scalar<std::uint32_t>(label + "'s dimension count");
        if (dims < 1 || dims > detail::gguf_max_dims)
            r.fail(
                message(label, " has ", dims, " dimensions (GGUF allows 1 to ", detail::gguf_max_dims, ")"));
        for (std::uint32_t d = 0; d < dims; ++d) {
            const auto extent = r.scalar<std::uint64_t>(label + "'s dimensions");
            if (extent < 1 || extent > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
                r.fail(message(label, " has dimension ", d, " = ", extent, " (each must be at least 1)"));
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
