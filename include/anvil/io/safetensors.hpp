// anvil: the safetensors reader. A file is memory-mapped, its header parsed and validated in one step, and
// each tensor is a view into the mapping (zero-copy). Every byte is treated as hostile: the checks follow
// Hugging Face's reference reader (safetensors/src/tensor.rs) and add the ones it leaves to serde, and every
// failure is an anvil::format_error naming the file, the tensor and the defect.
//   Layout: u64 N (little-endian) | N bytes of UTF-8 JSON | data section. The JSON maps each tensor name to
//   {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]} (offsets relative to the data section);
//   an optional "__metadata__" maps strings to strings. The tensors must tile the data section exactly.
#pragma once

#include "anvil/compilation.hpp"
#include "anvil/core/bfloat16.hpp"
#include "anvil/core/dtype.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/ggml_types.hpp"
#include "anvil/core/half.hpp"
#include "anvil/core/json_value.hpp"
#include "anvil/core/mapped_file.hpp"
#include "anvil/core/shape.hpp"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace anvil {

static_assert(
    std::endian::native == std::endian::little,
    "safetensors stores little-endian data and anvil views it in place: a little-endian host is assumed");

// Where one tensor lives in its file, as the header declares it.
struct tensor_info {
    std::string name;
    dtype type = dtype::f32;
    std::vector<std::int64_t> shape;  // empty for a scalar
    std::uint64_t element_count = 0;
    std::uint64_t data_begin = 0;  // [data_begin, data_end): relative to the start of the data section
    std::uint64_t data_end = 0;
    // Set for a tensor another format stores as rows of ggml blocks (a GGUF file's quantised weight): its
    // values are f32 (`type`), its bytes the blocks of each row along the last axis.
    std::optional<ggml_type> blocks;
};

namespace detail {

// Hugging Face's reader refuses larger headers; so does anvil (it also bounds the JSON parser's work).
inline constexpr std::uint64_t safetensors_max_header_size = 100'000'000;

// No framework writes more dimensions than numpy's limit; refusing them keeps messages and loops bounded.
inline constexpr std::size_t safetensors_max_rank = 64;

// A tensor name as messages quote it: control bytes escaped, very long names cut, so that a hostile header
// cannot make a message unreadable or huge.
[[nodiscard]] std::string quoted_name(std::string_view name);

// Up to three names close to `wanted` (edit distance, or the same name under an extra "prefix."), for
// "did you mean" hints. Bounded work: only on error paths, but the names come from hostile files.
[[nodiscard]] std::vector<std::string_view> closest_names(std::string_view wanted,
                                                          std::span<const std::string_view> names);

// "no tensor named 'x' (did you mean 'y'?)" or "... (it holds 12 tensors)".
[[nodiscard]] std::string no_tensor_message(std::string_view source, std::string_view wanted,
                                            std::span<const std::string_view> names,
                                            std::size_t tensor_count);

// A C++ type a tensor's bytes can be viewed as. bool is left out: a byte other than 0 or 1 read as bool is
// undefined behaviour, and a file may hold any byte.
template <class T>
concept tensor_element = element_type<T> && !std::is_same_v<T, bool>;

}  // namespace detail

// One tensor of a safetensors file: its name, dtype, shape and bytes, which point into the file's mapping (or
// the caller's buffer for safetensors_file::parse). Valid as long as the safetensors_file it came from.
class tensor_view {
public:
    [[nodiscard]] const std::string& name() const noexcept { return info_.name; }
    [[nodiscard]] dtype type() const noexcept { return info_.type; }
    [[nodiscard]] std::span<const std::int64_t> shape() const noexcept { return info_.shape; }
    [[nodiscard]] std::size_t rank() const noexcept { return info_.shape.size(); }
    [[nodiscard]] std::uint64_t element_count() const noexcept { return info_.element_count; }
    [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return bytes_; }
    // The ggml block type the bytes hold, for a quantised tensor of a GGUF file (tensor_info::blocks).
    [[nodiscard]] std::optional<ggml_type> blocks() const noexcept { return info_.blocks; }
    [[nodiscard]] std::size_t byte_size() const noexcept { return bytes_.size(); }
    [[nodiscard]] const tensor_info& info() const noexcept { return info_; }
    // The file (or buffer name) the tensor came from, as messages name it.
    [[nodiscard]] std::string_view source_name() const noexcept { return *source_; }

    // The elements converted to f32 / f16 (f64 and integers round as static_cast would). `out` must hold
    // exactly element_count() values.
    [[nodiscard]] std::vector<float> to_f32() const;
    void to_f32(std::span<float> out) const;
    [[nodiscard]] std::vector<half> to_f16() const;
    void to_f16(std::span<half> out) const;

    // The elements in place, without a copy: T must be the tensor's own element type (float for f32, half for
    // f16, std::int64_t for i64, ...) and the bytes aligned for T (they are in files Hugging Face writes).
    // Otherwise a type_error says which; to_f32() and bytes() work for any tensor.
    template <class T>
    [[nodiscard]] std::span<const T> data() const {
        static_assert(
            detail::tensor_element<T>,
            "tensor_view::data<T>: T must be double, float, anvil::half, anvil::bfloat16 or a fixed-width "
            "integer (bool and fp8 tensors are read through bytes() or to_f32())");
        constexpr dtype wanted = dtype_of_v<T>;
        if (info_.blocks) {
            throw type_error(detail::message(prefix(), "elements are stored as ggml ",
                                             ggml_type_name(*info_.blocks), " blocks; use to_f32()"));
        }
        if (info_.type != wanted) {
            throw type_error(detail::message(prefix(), "elements are ", dtype_name(info_.type),
                                             ", not the requested ", dtype_name(wanted)));
        }
        if (bytes_.empty()) return {};
        if (reinterpret_cast<std::uintptr_t>(bytes_.data()) % alignof(T) != 0) {
            throw type_error(detail::message(
                prefix(), "data is not aligned to ", alignof(T), " bytes for a ", dtype_name(wanted),
                " view (the file's header is not padded); use to_f32() or bytes()"));
        }
        // The bytes are a T array written by the file's producer; the mapping is readable and aligned.
        return {reinterpret_cast<const T*>(bytes_.data()), static_cast<std::size_t>(info_.element_count)};
    }

    // Checks a model loader's expectation and returns *this; anvil::dyn (-1) matches any extent. Throws
    // shape_error "model.safetensors: tensor 'w': expected shape [768, 768], got [768, 512]" or type_error.
    const tensor_view& require_shape(std::span<const std::int64_t> expected) const;
    const tensor_view& require_shape(std::initializer_list<std::int64_t> expected) const {
        return require_shape(std::span<const std::int64_t>(expected.begin(), expected.size()));
    }
    const tensor_view& require_type(dtype expected) const;
    const tensor_view& require(dtype expected_type, std::span<const std::int64_t> expected_shape) const;
    const tensor_view& require(dtype expected_type,
                               std::initializer_list<std::int64_t> expected_shape) const {
        return require(expected_type,
                       std::span<const std::int64_t>(expected_shape.begin(), expected_shape.size()));
    }

private:
    friend class safetensors_file;
    friend class checkpoint;  // checkpoint::from_tensors: tensors another format holds

    tensor_view(tensor_info info, std::span<const std::byte> bytes, std::shared_ptr<const std::string> source)
        : info_(std::move(info)), bytes_(bytes), source_(std::move(source)) {}

    [[nodiscard]] std::string prefix() const;
    void check_output_size(std::size_t size, std::string_view what) const;

    tensor_info info_;
    std::span<const std::byte> bytes_;
    std::shared_ptr<const std::string> source_;  // shared by every view of one file
};

// A parsed and validated safetensors file: a safetensors_file that exists is valid. Move-only; open() owns
// the mapping, parse() borrows the caller's bytes (or takes over a vector passed as an rvalue).
class safetensors_file {
public:
    [[nodiscard]] static safetensors_file open(const std::filesystem::path& path,
                                               access_hint hint = access_hint::normal);

    // Borrows `bytes`, which must outlive the result and its views.
    [[nodiscard]] static safetensors_file parse(std::span<const std::byte> bytes, std::string source_name);
    // Takes the buffer over, so a temporary (a writer's to_bytes(), a downloaded file) is safe to pass.
    [[nodiscard]] static safetensors_file parse(std::vector<std::byte>&& bytes, std::string source_name);

    safetensors_file(safetensors_file&&) noexcept = default;
    safetensors_file& operator=(safetensors_file&&) noexcept = default;
    safetensors_file(const safetensors_file&) = delete;
    safetensors_file& operator=(const safetensors_file&) = delete;
    ~safetensors_file() = default;

    // Empty for a file from parse().
    [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
    [[nodiscard]] std::string_view source_name() const noexcept { return *source_; }

    // Every tensor, in data-offset order.
    [[nodiscard]] std::span<const tensor_view> tensors() const noexcept { return tensors_; }
    [[nodiscard]] std::size_t size() const noexcept { return tensors_.size(); }
    [[nodiscard]] bool contains(std::string_view name) const { return find(name) != nullptr; }
    // nullptr when absent; a binary search over the names.
    [[nodiscard]] const tensor_view* find(std::string_view name) const;
    // The named tensor, or a format_error "model.safetensors: no tensor named 'x' (did you mean 'y'?)".
    [[nodiscard]] const tensor_view& tensor(std::string_view name) const;

    // "__metadata__", in header order.
    [[nodiscard]] const std::vector<std::pair<std::string, std::string>>& metadata() const noexcept {
        return metadata_;
    }
    [[nodiscard]] const std::string* find_metadata(std::string_view key) const;

    [[nodiscard]] std::uint64_t header_size() const noexcept { return header_size_; }  // N, padding included
    [[nodiscard]] std::uint64_t data_size() const noexcept { return data_size_; }
    [[nodiscard]] std::uint64_t file_size() const noexcept { return 8 + header_size_ + data_size_; }
    [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return bytes_; }  // the whole file

private:
    safetensors_file() = default;

    mapped_file mapping_;
    std::vector<std::byte> owned_bytes_;  // for parse(std::vector&&)
    std::filesystem::path path_;
    std::shared_ptr<const std::string> source_;
    std::span<const std::byte> bytes_;
    std::vector<tensor_view> tensors_;
    std::vector<std::uint32_t> by_name_;  // indices into tensors_, sorted by name
    std::vector<std::pair<std::string, std::string>> metadata_;
    std::uint64_t header_size_ = 0;
    std::uint64_t data_size_ = 0;
};

namespace detail {

// "a JSON array", "the number 1.5": what a header value is, for messages (values of unbounded size are not
// printed).
[[nodiscard]] std::string describe_json(const json::value& value);

}  // namespace detail

}  // namespace anvil

#if ANVIL_DEFINITIONS
#include "anvil/io/safetensors-inl.hpp"
#endif
