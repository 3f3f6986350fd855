// anvil: safetensors_writer's definitions (see safetensors_writer.hpp; compilation.hpp says when this file is
// compiled).
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "anvil/core/checked_math.hpp"
#include "anvil/core/dtype.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/json.hpp"
#include "anvil/core/shape.hpp"
#include "anvil/io/safetensors.hpp"
#include "anvil/io/safetensors_writer.hpp"

namespace anvil {

ANVIL_INLINE void safetensors_writer::set_metadata(std::string key, std::string value) {
    for (auto& [existing_key, existing_value] : metadata_) {
        if (existing_key == key) {
            existing_value = std::move(value);
            return;
        }
    }
    metadata_.emplace_back(std::move(key), std::move(value));
}

ANVIL_INLINE void safetensors_writer::add(std::string name, dtype type, std::vector<std::int64_t> shape,
                                          std::span<const std::byte> data) {
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

ANVIL_INLINE void safetensors_writer::add(std::string name, const tensor_view& tensor) {
    add(std::move(name), tensor.type(), {tensor.shape().begin(), tensor.shape().end()}, tensor.bytes());
}

ANVIL_INLINE std::vector<std::byte> safetensors_writer::to_bytes() const {
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

ANVIL_INLINE void safetensors_writer::write(const std::filesystem::path& path) const {
    const auto order = layout_order();
    const std::string header = header_text(order);
    std::unique_ptr<std::FILE, detail::file_closer> stream(std::fopen(path.c_str(), "wb"));
    if (!stream) {
        throw io_error(detail::message(path.string(), ": cannot open for writing: ", std::strerror(errno)));
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

ANVIL_INLINE std::vector<std::size_t> safetensors_writer::layout_order() const {
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

ANVIL_INLINE std::uint64_t safetensors_writer::data_size() const {
    std::uint64_t total = 0;
    for (const auto& e : entries_)
        total += e.data.size();
    return total;
}

ANVIL_INLINE std::string safetensors_writer::header_text(const std::vector<std::size_t>& order) const {
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
        description["data_offsets"] = json::value(json::array{json::value(static_cast<std::int64_t>(offset)),
                                                              json::value(static_cast<std::int64_t>(end))});
        header[e.name] = json::value(std::move(description));
        offset = end;
    }
    std::string text = json::dump(json::value(std::move(header)));
    text.append((8 - text.size() % 8) % 8, ' ');
    return text;
}

ANVIL_INLINE void safetensors_writer::append_length(std::vector<std::byte>& out, std::uint64_t length) {
    for (int i = 0; i < 8; ++i)
        out.push_back(static_cast<std::byte>((length >> (8 * i)) & 0xFFu));
}

}  // namespace anvil
