// anvil: numpy's .npy files, read and written. The command line takes its inputs and writes its outputs in
// this format, so the reader accepts what numpy writes (versions 1.0-3.0, either byte order, Fortran order)
// and treats every byte as hostile; the writer produces byte for byte what numpy.save produces.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "anvil/compilation.hpp"
#include "anvil/core/checked_math.hpp"
#include "anvil/core/dtype.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/half.hpp"
#include "anvil/core/shape.hpp"

namespace anvil::npy {

static_assert(std::endian::native == std::endian::little,
              "anvil::npy keeps element bytes in little-endian order and assumes a little-endian host");

// numpy (since 2.0) refuses more dimensions than this; anvil refuses them too, so a hostile header cannot
// make reordering cost dimensions x elements.
inline constexpr std::size_t max_dimensions = 64;

namespace detail {

using anvil::detail::checked_element_count;
using anvil::detail::checked_mul;
using anvil::detail::extents_to_string;
using anvil::detail::message;

// numpy's spelling of each element type anvil can store in a .npy file (bf16 and fp8 have none).
struct npy_type_code {
    dtype type;
    std::string_view code;  // the descr without its byte-order character
};

inline constexpr std::array<npy_type_code, 12> npy_type_codes{{
    {dtype::f64, "f8"},
    {dtype::f32, "f4"},
    {dtype::f16, "f2"},
    {dtype::i64, "i8"},
    {dtype::i32, "i4"},
    {dtype::i16, "i2"},
    {dtype::i8, "i1"},
    {dtype::u64, "u8"},
    {dtype::u32, "u4"},
    {dtype::u16, "u2"},
    {dtype::u8, "u1"},
    {dtype::boolean, "b1"},
}};

// The descr numpy writes for a type: '<f4', and '|u1' where byte order does not apply.
[[nodiscard]] std::optional<std::string> descr_of(dtype type);

// Header text quoted for a message: non-printable bytes escaped, long runs cut short.
[[nodiscard]] std::string excerpt(std::string_view text, std::size_t limit = 40);

}  // namespace detail

// A whole .npy array in memory: little-endian element bytes in C order, whatever the file's byte order and
// layout were.
struct array {
    dtype type = dtype::f32;
    std::vector<std::int64_t> shape;  // C order; empty for a 0-d (scalar) array
    std::vector<std::byte> data;      // element_count() * dtype_size(type) bytes

    [[nodiscard]] std::uint64_t element_count() const {
        const auto count = detail::checked_element_count(std::span<const std::int64_t>(shape));
        if (!count) throw shape_error("npy::array: shape has a negative extent or too many elements");
        return *count;
    }

    // Throws shape_error unless data holds exactly the bytes that shape and type need (for arrays built by
    // hand; parse and read only return arrays that pass).
    void check_data_size() const;

    // The elements as f32 whatever the dtype, converted by anvil::convert_to_f32.
    [[nodiscard]] std::vector<float> to_f32() const;

    // The elements copied out as T, which must be the array's own element type (no conversion).
    template <class T>
    [[nodiscard]] std::vector<T> values() const;
};

namespace detail {

// What the header dict says.
struct header {
    dtype type = dtype::f32;
    bool big_endian = false;
    bool fortran_order = false;
    std::vector<std::int64_t> shape;
};

// A strict parser for the Python dict literal numpy writes as the header, and the hand-written variants
// Python itself would read: keys in any order, either quote, any spacing, trailing commas. Nothing is
// evaluated; the three keys and their value types are fixed.
class header_parser {
public:
    header_parser(std::string_view text, std::size_t file_offset, std::string_view source)
        : text_(text), file_offset_(file_offset), source_(source) {}

    [[nodiscard]] header parse();

private:
    template <class... Parts>
    [[noreturn]] void fail_at(std::size_t pos, const Parts&... parts) const {
        throw format_error(message(source_, ": .npy header, byte ", file_offset_ + pos, ": ", parts...));
    }
    template <class... Parts>
    [[noreturn]] void fail(const Parts&... parts) const {
        fail_at(pos_, parts...);
    }
    [[noreturn]] void fail_missing(std::string_view key) const;

    [[nodiscard]] bool at_end() const noexcept { return pos_ >= text_.size(); }
    [[nodiscard]] char peek() const noexcept { return at_end() ? '\0' : text_[pos_]; }
    [[nodiscard]] std::string found() const;
    void skip_space() noexcept {
        while (!at_end() &&
               (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r' || peek() == '\f')) {
            ++pos_;
        }
    }
    // A run of characters up to the next delimiter, for naming a value the parser does not accept.
    [[nodiscard]] std::string_view word() const;

    // A quoted string without escapes: numpy's keys and descrs never need them.
    [[nodiscard]] std::string_view parse_string();
    void parse_descr();
    void parse_fortran_order();
    void parse_shape();
    [[nodiscard]] std::int64_t parse_dimension();

    std::string_view text_;
    std::size_t pos_ = 0;
    std::size_t file_offset_;
    std::string_view source_;
    header result_;
};

[[nodiscard]] std::uint32_t read_little_endian(std::span<const std::byte> bytes) noexcept;

// Rewrites Fortran-order (first index fastest) elements in C order (last index fastest).
[[nodiscard]] std::vector<std::byte> fortran_to_c_order(std::span<const std::byte> source,
                                                        std::span<const std::int64_t> shape,
                                                        std::size_t element_size);

// The element types numpy has a dtype for: anvil's element types less bfloat16.
template <class T>
concept npy_element = element_type<T> && !std::is_same_v<T, bfloat16>;

static_assert(sizeof(bool) == 1 && sizeof(half) == 2, "npy element types must have numpy's sizes");

}  // namespace detail

template <class T>
std::vector<T> array::values() const {
    static_assert(
        detail::npy_element<T>,
        "npy::array::values<T>: T must be double, float, anvil::half, bool or a fixed-width integer");
    if (type != dtype_of_v<T>) {
        throw type_error(detail::message("npy::array: elements are ", dtype_name(type), ", not ",
                                         dtype_name(dtype_of_v<T>)));
    }
    check_data_size();
    std::vector<T> out(data.size() / sizeof(T));
    if constexpr (std::is_same_v<T, bool>) {
        // std::vector<bool> packs bits and has no data().
        for (std::size_t i = 0; i < data.size(); ++i)
            out[i] = data[i] != std::byte{0};
    } else if (!data.empty()) {
        std::memcpy(out.data(), data.data(), data.size());
    }
    return out;
}

namespace detail {

// The preamble and header of a .npy file, checked against the file's size.
struct parsed_header {
    header info;
    std::size_t data_offset = 0;
};

[[nodiscard]] parsed_header parse_preamble_and_header(std::span<const std::byte> bytes,
                                                      std::string_view source);

// Brings the elements, exactly as the file stored them, to little-endian C order, and checks bools.
[[nodiscard]] array finish_array(header info, std::vector<std::byte> data, std::string_view source);

}  // namespace detail

// Parses a whole .npy file held in memory; source_name starts every error message.
[[nodiscard]] array parse(std::span<const std::byte> bytes, std::string_view source_name);

// The bytes numpy.save would write for this array: format 1.0, the header padded with spaces to a multiple of
// 64 bytes, then the elements as given (little-endian, C order). numpy moves to 2.0 only for headers past
// 65535 bytes, and one of at most max_dimensions extents stays under 2 KB.
// destination names the file (or "npy::serialize") in error messages.
[[nodiscard]] std::vector<std::byte> serialize(dtype type, std::span<const std::int64_t> shape,
                                               const void* data,
                                               std::string_view destination = "npy::serialize");

namespace detail {

struct file_closer {
    void operator()(std::FILE* file) const noexcept { std::fclose(file); }
};

[[nodiscard]] std::string errno_text(int error_number);

}  // namespace detail

// Reads a whole .npy file; io_error when it cannot be read, format_error when it is not a valid .npy.
// Works on pipes too: the file system's size is only a hint.
[[nodiscard]] array read(const std::filesystem::path& path);

// Writes a .npy file as numpy.save would; data holds element_count(shape) little-endian elements in C order.
void write(const std::filesystem::path& path, dtype type, std::span<const std::int64_t> shape,
           const void* data);

void write(const std::filesystem::path& path, const array& value);

// The dtype follows T: float '<f4', anvil::half '<f2', std::int64_t '<i8', std::int32_t '<i4', double '<f8',
// bool '|b1', and the other fixed-width integers.
template <class T>
void write(const std::filesystem::path& path, std::span<const std::int64_t> shape,
           std::span<const T> values) {
    static_assert(detail::npy_element<T>,
                  "npy::write<T>: T must be double, float, anvil::half, bool or a fixed-width integer");
    const auto count = detail::checked_element_count(shape);
    if (!count || *count != values.size()) {
        throw shape_error(detail::message(path.string(), ": shape ", detail::extents_to_string(shape, false),
                                          " needs ", count ? std::to_string(*count) : std::string("too many"),
                                          " elements, got ", values.size()));
    }
    write(path, dtype_of_v<T>, shape, values.data());
}

template <class T, class Allocator>
void write(const std::filesystem::path& path, std::span<const std::int64_t> shape,
           const std::vector<T, Allocator>& values) {
    write(path, shape, std::span<const T>(values));
}

}  // namespace anvil::npy

#if ANVIL_DEFINITIONS
#include "anvil/core/npy-inl.hpp"
#endif
