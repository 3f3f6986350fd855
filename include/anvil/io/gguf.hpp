// anvil: the GGUF reader (llama.cpp's model files). A file is memory-mapped and its header parsed and
// validated in one step; each tensor is a view of its bytes in the mapping (no copy). Every byte is hostile:
// llama.cpp's own parser has had heap overflows from crafted files, so every length, count, dimension,
// product, offset and alignment is checked against the file before it is used, and every failure is an
// anvil::format_error naming the file, the key or tensor, and the defect.
//   Layout (little-endian, versions 2 and 3): "GGUF" | u32 version | u64 tensor count | u64 metadata count |
//   metadata: (string key, u32 type, value)* | tensor infos: (string name, u32 n_dims, u64 ne[n_dims],
//   u32 ggml type, u64 offset)* | padding to general.alignment (32 by default) | data section. A string is a
//   u64 length and that many bytes; an array a u32 element type, a u64 count and the elements. ne[0] is the
//   innermost (contiguous) dimension: a PyTorch weight [out, in] is stored as ne = [in, out]. Offsets are
//   relative to the data section and multiples of the alignment.
#pragma once

#include "anvil/compilation.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/ggml_types.hpp"
#include "anvil/core/mapped_file.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace anvil {

// The GGUF metadata value types (gguf.h `enum gguf_type`).
enum class gguf_value_type : std::uint32_t {
    uint8 = 0,
    int8 = 1,
    uint16 = 2,
    int16 = 3,
    uint32 = 4,
    int32 = 5,
    float32 = 6,
    boolean = 7,
    string = 8,
    array = 9,
    uint64 = 10,
    int64 = 11,
    float64 = 12,
};

[[nodiscard]] std::string_view gguf_value_type_name(gguf_value_type type) noexcept;

namespace detail {
class gguf_reader;
}

// One metadata value: a number, a bool, a string, or an array of one element type (GGUF allows arrays of
// arrays; no model file has them and anvil refuses them). Arrays are views of the file's bytes (strings as
// string_views into it), so a large vocabulary costs no copy; valid as long as the gguf_file.
class gguf_value {
public:
    [[nodiscard]] gguf_value_type type() const noexcept { return type_; }
    [[nodiscard]] bool is_array() const noexcept { return type_ == gguf_value_type::array; }

    // Any integer type, when its value fits int64 (else nullopt); nullopt for other types.
    [[nodiscard]] std::optional<std::int64_t> integer() const noexcept;
    // Any integer or float type.
    [[nodiscard]] std::optional<double> number() const noexcept;
    [[nodiscard]] std::optional<bool> boolean() const noexcept;
    [[nodiscard]] const std::string* string() const noexcept { return std::get_if<std::string>(&scalar_); }

    // An array's element type and size (0 for a scalar), and its elements.
    [[nodiscard]] gguf_value_type element_type() const noexcept { return element_type_; }
    [[nodiscard]] std::size_t size() const noexcept { return count_; }
    [[nodiscard]] std::optional<std::int64_t> integer_at(std::size_t index) const noexcept;
    [[nodiscard]] std::optional<double> number_at(std::size_t index) const noexcept;
    [[nodiscard]] std::span<const std::string_view> strings() const noexcept { return strings_; }

    // "u32 7", "string 'llama'", "array of 32000 string": for `anvil info` and messages.
    [[nodiscard]] std::string describe() const;

private:
    friend class detail::gguf_reader;
    gguf_value_type type_ = gguf_value_type::uint8;
    gguf_value_type element_type_ = gguf_value_type::uint8;
    std::variant<std::monostate, std::uint64_t, std::int64_t, double, bool, std::string> scalar_;
    std::span<const std::byte> raw_;  // a numeric or bool array's elements, in the file
    std::vector<std::string_view> strings_;
    std::size_t count_ = 0;
};

// One tensor of a GGUF file: its name, ggml type, dimensions (ne order: ne[0] innermost) and bytes, which
// point into the file's mapping. Valid as long as the gguf_file it came from.
struct gguf_tensor {
    std::string name;
    std::uint32_t type = 0;            // a ggml_type number; ggml_layout(type) knows it
    std::vector<std::int64_t> ne;      // 1 to 4 dimensions, each >= 0, ne[0] a multiple of the block
    std::uint64_t offset = 0;          // in the data section
    std::span<const std::byte> bytes;  // exactly the tensor's bytes
    std::uint64_t element_count = 0;

    // The dimensions outermost first, as a row-major shape: ne reversed ([out, in] for a weight).
    [[nodiscard]] std::vector<std::int64_t> shape() const { return {ne.rbegin(), ne.rend()}; }
    [[nodiscard]] ggml_type_layout layout() const;  // known for every tensor of a parsed file
    // Every value as f32 (dequantized): element_count floats in row-major order.
    [[nodiscard]] std::vector<float> to_f32() const;
};

namespace detail {

// Limits that keep a hostile header's work bounded (ggml: GGML_MAX_DIMS 4; no real file nests arrays).
inline constexpr std::size_t gguf_max_dims = 4;
inline constexpr std::uint64_t gguf_default_alignment = 32;
// The GGUF spec's key rules (ASCII, at most 2^16 - 1 bytes) and ggml's name buffer (GGML_MAX_NAME bytes with
// the terminating NUL, so at most 63 bytes of name: llama.cpp refuses a file holding a longer one).
inline constexpr std::size_t gguf_key_limit = std::size_t{1} << 16;
inline constexpr std::size_t ggml_max_name = 64;

}  // namespace detail

// A parsed and validated GGUF file: a gguf_file that exists is valid. Move-only; open() owns the mapping,
// parse() borrows the caller's bytes.
class gguf_file {
public:
    [[nodiscard]] static gguf_file open(const std::filesystem::path& path);
    // Borrows `bytes`, which must outlive the result and its tensors.
    [[nodiscard]] static gguf_file parse(std::span<const std::byte> bytes, std::string source_name);

    gguf_file(gguf_file&&) noexcept = default;
    gguf_file& operator=(gguf_file&&) noexcept = default;
    gguf_file(const gguf_file&) = delete;
    gguf_file& operator=(const gguf_file&) = delete;
    ~gguf_file() = default;

    [[nodiscard]] std::string_view source_name() const noexcept { return source_; }
    [[nodiscard]] std::uint32_t version() const noexcept { return version_; }
    [[nodiscard]] std::uint64_t alignment() const noexcept { return alignment_; }
    [[nodiscard]] std::uint64_t data_offset() const noexcept { return data_offset_; }

    // The metadata in file order; find() is nullptr when the key is absent.
    [[nodiscard]] const std::vector<std::pair<std::string, gguf_value>>& metadata() const noexcept {
        return metadata_;
    }
    [[nodiscard]] const gguf_value* find(std::string_view key) const;
    // Typed reads: format_error naming the key when it is absent or of another type.
    [[nodiscard]] std::int64_t integer(std::string_view key) const;
    [[nodiscard]] double number(std::string_view key) const;
    [[nodiscard]] const std::string& string(std::string_view key) const;
    [[nodiscard]] const gguf_value& array(std::string_view key) const;

    // Every tensor, in the order of the file's tensor infos.
    [[nodiscard]] std::span<const gguf_tensor> tensors() const noexcept { return tensors_; }
    [[nodiscard]] const gguf_tensor* find_tensor(std::string_view name) const;
    // The named tensor, or a format_error "x.gguf: no tensor named 'x' (did you mean 'y'?)".
    [[nodiscard]] const gguf_tensor& tensor(std::string_view name) const;

private:
    gguf_file() = default;
    void parse_bytes(std::span<const std::byte> bytes);

    std::string source_;
    std::optional<mapped_file> mapping_;
    std::uint32_t version_ = 0;
    std::uint64_t alignment_ = detail::gguf_default_alignment;
    std::uint64_t data_offset_ = 0;
    std::vector<std::pair<std::string, gguf_value>> metadata_;
    std::vector<gguf_tensor> tensors_;
};

}  // namespace anvil

#if ANVIL_DEFINITIONS
#include "anvil/io/gguf-inl.hpp"
#endif
