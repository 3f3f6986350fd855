// anvil: the safetensors writer, for tools and tests. Tensors are collected, then written once, laid out as
// Hugging Face's writer lays them out (safetensors/src/tensor.rs, `prepare`): by decreasing alignment, then
// by name, after a header padded with spaces to a multiple of 8 bytes, so every tensor is aligned for its
// type and the file is byte for byte what the reference writes for the same tensors and metadata.
#pragma once

#include "anvil/compilation.hpp"
#include "anvil/core/dtype.hpp"
#include "anvil/io/safetensors.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

namespace anvil {

namespace detail {

// Hugging Face's Dtype enum order (BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, F64,
// I64, U64): its writer sorts by it, descending. Indexed by anvil's dtype (f64, f32, f16, bf16, f8_e4m3,
// f8_e5m2, i64, i32, i16, i8, u64, u32, u16, u8, bool).
inline constexpr std::array<int, dtype_count> safetensors_layout_rank = {12, 11, 7,  8,  4, 3, 13, 9,
                                                                         5,  2,  14, 10, 6, 1, 0};

static_assert(
    [] {
        for (std::size_t a = 0; a < dtype_count; ++a) {
            for (std::size_t b = 0; b < dtype_count; ++b) {
                const bool a_first = safetensors_layout_rank[a] > safetensors_layout_rank[b];
                if (a_first && dtype_table[a].size < dtype_table[b].size) return false;
            }
        }
        return true;
    }(),
    "safetensors_layout_rank must put larger dtypes first, or the writer would leave tensors unaligned");

// Closes a C stream on every path out of write().
struct file_closer {
    void operator()(std::FILE* stream) const noexcept { std::fclose(stream); }
};

}  // namespace detail

class safetensors_writer {
public:
    // A "__metadata__" entry; setting a key again replaces its value.
    void set_metadata(std::string key, std::string value);

    // Copies `data`, which must hold exactly the bytes of `shape` in `type` (little-endian, C order).
    void add(std::string name, dtype type, std::vector<std::int64_t> shape, std::span<const std::byte> data);

    template <class T>
    void add(std::string name, std::vector<std::int64_t> shape, std::span<const T> values) {
        static_assert(
            detail::tensor_element<T>,
            "safetensors_writer::add<T>: T must be double, float, anvil::half, anvil::bfloat16 or a "
            "fixed-width integer (write bool and fp8 tensors as bytes with their dtype)");
        add(std::move(name), dtype_of_v<T>, std::move(shape), std::as_bytes(values));
    }
    template <class T>
    void add(std::string name, std::vector<std::int64_t> shape, const std::vector<T>& values) {
        add(std::move(name), std::move(shape), std::span<const T>(values));
    }

    // A copy of a tensor read from another file, under its own name or a new one.
    void add(const tensor_view& tensor) { add(tensor.name(), tensor); }
    void add(std::string name, const tensor_view& tensor);

    [[nodiscard]] std::size_t size() const noexcept { return entries_.size(); }

    // The whole file in memory.
    [[nodiscard]] std::vector<std::byte> to_bytes() const;

    // Writes the file, streaming each tensor's bytes; io_error names the path and the system's reason.
    void write(const std::filesystem::path& path) const;

private:
    struct pending_tensor {
        std::string name;
        dtype type;
        std::vector<std::int64_t> shape;
        std::vector<std::byte> data;
    };

    [[nodiscard]] std::vector<std::size_t> layout_order() const;

    [[nodiscard]] std::uint64_t data_size() const;

    // Compact JSON, "__metadata__" first, tensors in layout order; padded with spaces to a multiple of 8.
    [[nodiscard]] std::string header_text(const std::vector<std::size_t>& order) const;

    static void append_length(std::vector<std::byte>& out, std::uint64_t length);

    std::vector<pending_tensor> entries_;
    std::unordered_set<std::string> names_;
    std::vector<std::pair<std::string, std::string>> metadata_;
};

}  // namespace anvil

#if ANVIL_DEFINITIONS
#include "anvil/io/safetensors_writer-inl.hpp"
#endif
