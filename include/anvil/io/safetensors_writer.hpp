// anvil: the safetensors writer, for tools and tests. Tensors are collected, then written once, laid out as
// Hugging Face's writer lays them out (safetensors/src/tensor.rs, `prepare`): by decreasing alignment, then
// by name, after a header padded with spaces to a multiple of 8 bytes, so every tensor is aligned for its
// type and the file is byte for byte what the reference writes for the same tensors and metadata.
#pragma once

#include "anvil/core/checked_math.hpp"
#include "anvil/core/dtype.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/json.hpp"
#include "anvil/io/safetensors.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
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
    void set_metadata(std::string key, std::string value) {
        for (auto& [existing_key, existing_value] : metadata_) {
            if (existing_key == key) {
                existing_value = std::move(value);
                return;
            }
        }
        metadata_.emplace_back(std::move(key), std::move(value));
    }

    // Copies `data`, which must hold exactly the bytes of `shape` in `type` (little-endian, C order).
    void add(std::string name, dtype type, std::vector<std::int64_t> shape, std::span<const std::byte> data) {
        if (name == "__metadata__") {
            throw format_error("safetensors_writer: '__metadata__' is reserved, it cannot name a tensor");
        }
        if (names_.contains(name)) {
            throw format_error(
                detail::message("safetensors_writer: tensor ", detail::quoted_name(name), " is added twice"));
        }
        const auto count = detail::checked_element_count(std::span<const std::int64_t>(shape));
        const auto byte_count = count ? detail::checked_mul(*count, dtype_size(type)) : std::nullopt;
        if (!byte_count) {
            throw shape_error(detail::message("safetensors_writer: tensor ", detail::quoted_name(name),
                                              ": shape ", detail::extents_to_string(shape, false),
                                              " has a negative extent or too many elements"));
        }
        if (*byte_count != data.size()) {
            throw shape_error(detail::message("safetensors_writer: tensor ", detail::quoted_name(name), ": ",
                                              dtype_name(type), " ", detail::extents_to_string(shape, false),
                                              " needs ", *byte_count, " bytes, got ", data.size()));
        }
        names_.insert(name);
        entries_.push_back({std::move(name), type, std::move(shape), {data.begin(), data.end()}});
    }

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
    void add(std::string name, const tensor_view& tensor) {
        add(std::move(name), tensor.type(), {tensor.shape().begin(), tensor.shape().end()}, tensor.bytes());
    }

    [[nodiscard]] std::size_t size() const noexcept { return entries_.size(); }

    // The whole file in memory.
    [[nodiscard]] std::vector<std::byte> to_bytes() const {
        const auto order = layout_order();
        const std::string header = header_text(order);
        std::vector<std::byte> out;
        out.reserve(8 + header.size() + data_size());
        append_length(out, header.size());
        const auto* header_bytes = reinterpret_cast<const std::byte*>(header.data());
        out.insert(out.end(), header_bytes, header_bytes + header.size());
        for (const std::size_t index : order) {
            out.insert(out.end(), entries_[index].data.begin(), entries_[index].data.end());
        }
        return out;
    }

    // Writes the file, streaming each tensor's bytes; io_error names the path and the system's reason.
    void write(const std::filesystem::path& path) const {
        const auto order = layout_order();
        const std::string header = header_text(order);
        std::unique_ptr<std::FILE, detail::file_closer> stream(std::fopen(path.c_str(), "wb"));
        if (!stream) {
            throw io_error(
                detail::message(path.string(), ": cannot open for writing: ", std::strerror(errno)));
        }
        std::vector<std::byte> length;
        append_length(length, header.size());
        const auto put = [&](const void* bytes, std::size_t size) {
            if (size != 0 && std::fwrite(bytes, 1, size, stream.get()) != size) {
                throw io_error(detail::message(path.string(), ": cannot write: ", std::strerror(errno)));
            }
        };
        put(length.data(), length.size());
        put(header.data(), header.size());
        for (const std::size_t index : order)
            put(entries_[index].data.data(), entries_[index].data.size());
        if (std::fclose(stream.release()) != 0) {
            throw io_error(detail::message(path.string(), ": cannot finish writing: ", std::strerror(errno)));
        }
    }

private:
    struct pending_tensor {
        std::string name;
        dtype type;
        std::vector<std::int64_t> shape;
        std::vector<std::byte> data;
    };

    [[nodiscard]] std::vector<std::size_t> layout_order() const {
        std::vector<std::size_t> order(entries_.size());
        for (std::size_t i = 0; i < order.size(); ++i)
            order[i] = i;
        std::sort(order.begin(), order.end(), [this](std::size_t a, std::size_t b) {
            const int rank_a = detail::safetensors_layout_rank[static_cast<std::size_t>(entries_[a].type)];
            const int rank_b = detail::safetensors_layout_rank[static_cast<std::size_t>(entries_[b].type)];
            return rank_a != rank_b ? rank_a > rank_b : entries_[a].name < entries_[b].name;
        });
        return order;
    }

    [[nodiscard]] std::uint64_t data_size() const {
        std::uint64_t total = 0;
        for (const auto& e : entries_)
            total += e.data.size();
        return total;
    }

    // Compact JSON, "__metadata__" first, tensors in layout order; padded with spaces to a multiple of 8.
    [[nodiscard]] std::string header_text(const std::vector<std::size_t>& order) const {
        json::object header;
        if (!metadata_.empty()) {
            json::object metadata;
            for (const auto& [key, value] : metadata_)
                metadata[key] = json::value(value);
            header["__metadata__"] = json::value(std::move(metadata));
        }
        std::uint64_t offset = 0;
        for (const std::size_t index : order) {
            const auto& e = entries_[index];
            json::array shape;
            for (const std::int64_t extent : e.shape)
                shape.emplace_back(extent);
            const auto end = offset + e.data.size();
            json::object description;
            description["dtype"] = json::value(std::string(safetensors_dtype_name(e.type)));
            description["shape"] = json::value(std::move(shape));
            description["data_offsets"] = json::value(json::array{
                json::value(static_cast<std::int64_t>(offset)), json::value(static_cast<std::int64_t>(end))});
            header[e.name] = json::value(std::move(description));
            offset = end;
        }
        std::string text = json::dump(json::value(std::move(header)));
        text.append((8 - text.size() % 8) % 8, ' ');
        return text;
    }

    static void append_length(std::vector<std::byte>& out, std::uint64_t length) {
        for (int i = 0; i < 8; ++i)
            out.push_back(static_cast<std::byte>((length >> (8 * i)) & 0xFFu));
    }

    std::vector<pending_tensor> entries_;
    std::unordered_set<std::string> names_;
    std::vector<std::pair<std::string, std::string>> metadata_;
};

}  // namespace anvil
