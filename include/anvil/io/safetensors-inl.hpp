// anvil: safetensors's definitions (see safetensors.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/core/checked_math.hpp"
#include "anvil/core/convert.hpp"
#include "anvil/core/dtype.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/json.hpp"
#include "anvil/core/mapped_file.hpp"
#include "anvil/core/shape.hpp"
#include "anvil/io/safetensors.hpp"

namespace anvil::detail {

ANVIL_INLINE std::string quoted_name(std::string_view name) {
    constexpr std::size_t limit = 200;
    std::string out = "'";
    for (std::size_t i = 0; i < name.size() && i < limit; ++i) {
        const auto c = static_cast<unsigned char>(name[i]);
        if (c < 0x20 || c == 0x7f) {
            constexpr std::string_view hex = "0123456789abcdef";
            out += "\\x";
            out += hex[c >> 4];
            out += hex[c & 0xf];
        } else {
            out += static_cast<char>(c);
        }
    }
    if (name.size() > limit) out += message("... (", name.size(), " bytes)");
    out += "'";
    return out;
}

ANVIL_INLINE std::vector<std::string_view> closest_names(std::string_view wanted,
                                                         std::span<const std::string_view> names) {
    constexpr std::size_t max_wanted = 256;
    constexpr std::uint64_t max_cells = 20'000'000;
    std::vector<std::pair<std::size_t, std::string_view>> scored;
    if (wanted.size() > max_wanted) return {};
    const std::size_t threshold = std::max<std::size_t>(2, wanted.size() / 3);
    std::uint64_t cells = 0;
    std::vector<std::size_t> previous;
    std::vector<std::size_t> current;
    for (const std::string_view name : names) {
        const auto ends_with_dotted = [](std::string_view longer, std::string_view shorter) {
            return longer.size() > shorter.size() && longer.ends_with(shorter) &&
                   longer[longer.size() - shorter.size() - 1] == '.';
        };
        if (ends_with_dotted(name, wanted) || ends_with_dotted(wanted, name)) {
            scored.emplace_back(1, name);
            continue;
        }
        const std::size_t difference =
            name.size() > wanted.size() ? name.size() - wanted.size() : wanted.size() - name.size();
        if (difference > threshold) continue;
        cells += static_cast<std::uint64_t>(name.size() + 1) * (wanted.size() + 1);
        if (cells > max_cells) break;
        previous.resize(name.size() + 1);
        current.resize(name.size() + 1);
        std::iota(previous.begin(), previous.end(), std::size_t{0});
        for (std::size_t i = 1; i <= wanted.size(); ++i) {
            current[0] = i;
            for (std::size_t j = 1; j <= name.size(); ++j) {
                const std::size_t substitution = previous[j - 1] + (wanted[i - 1] == name[j - 1] ? 0 : 1);
                current[j] = std::min({previous[j] + 1, current[j - 1] + 1, substitution});
            }
            std::swap(previous, current);
        }
        if (previous[name.size()] <= threshold) scored.emplace_back(previous[name.size()], name);
    }
    std::sort(scored.begin(), scored.end());
    std::vector<std::string_view> best;
    for (std::size_t i = 0; i < scored.size() && i < 3; ++i)
        best.push_back(scored[i].second);
    return best;
}

ANVIL_INLINE std::string no_tensor_message(std::string_view source, std::string_view wanted,
                                           std::span<const std::string_view> names,
                                           std::size_t tensor_count) {
    std::string text = message(source, ": no tensor named ", quoted_name(wanted));
    const auto close = closest_names(wanted, names);
    if (close.empty()) return text + message(" (it holds ", tensor_count, " tensors)");
    text += " (did you mean ";
    for (std::size_t i = 0; i < close.size(); ++i)
        text += (i > 0 ? ", " : "") + quoted_name(close[i]);
    return text + "?)";
}

}  // namespace anvil::detail

namespace anvil {

ANVIL_INLINE std::vector<float> tensor_view::to_f32() const {
    std::vector<float> out(static_cast<std::size_t>(info_.element_count));
    to_f32(out);
    return out;
}

ANVIL_INLINE void tensor_view::to_f32(std::span<float> out) const {
    check_output_size(out.size(), "to_f32");
    if (info_.blocks) {
        dequantize_ggml(*info_.blocks, bytes_, out);
        return;
    }
    if (!out.empty()) convert_to_f32(info_.type, bytes_.data(), out.size(), out.data());
}

ANVIL_INLINE std::vector<half> tensor_view::to_f16() const {
    std::vector<half> out(static_cast<std::size_t>(info_.element_count));
    to_f16(out);
    return out;
}

ANVIL_INLINE void tensor_view::to_f16(std::span<half> out) const {
    check_output_size(out.size(), "to_f16");
    if (info_.blocks) {
        const std::vector<float> values = to_f32();
        convert_to_f16(dtype::f32, values.data(), out.size(), out.data());
        return;
    }
    if (!out.empty()) convert_to_f16(info_.type, bytes_.data(), out.size(), out.data());
}

ANVIL_INLINE const tensor_view& tensor_view::require_shape(std::span<const std::int64_t> expected) const {
    bool matches = expected.size() == info_.shape.size();
    for (std::size_t axis = 0; matches && axis < expected.size(); ++axis) {
        matches = expected[axis] == dyn || expected[axis] == info_.shape[axis];
    }
    if (!matches) {
        throw shape_error(detail::message(prefix(), "expected shape ", detail::extents_to_string(expected),
                                          ", got ", detail::extents_to_string(info_.shape, false)));
    }
    return *this;
}

ANVIL_INLINE const tensor_view& tensor_view::require_type(dtype expected) const {
    if (info_.type != expected) {
        throw type_error(detail::message(prefix(), "expected dtype ", dtype_name(expected), ", got ",
                                         dtype_name(info_.type)));
    }
    return *this;
}

ANVIL_INLINE const tensor_view& tensor_view::require(dtype expected_type,
                                                     std::span<const std::int64_t> expected_shape) const {
    require_shape(expected_shape);
    return require_type(expected_type);
}

ANVIL_INLINE std::string tensor_view::prefix() const {
    return detail::message(*source_, ": tensor ", detail::quoted_name(info_.name), ": ");
}

ANVIL_INLINE void tensor_view::check_output_size(std::size_t size, std::string_view what) const {
    if (size != info_.element_count) {
        throw shape_error(detail::message(prefix(), what, " needs room for exactly ", info_.element_count,
                                          " elements, got ", size));
    }
}

ANVIL_INLINE safetensors_file safetensors_file::open(const std::filesystem::path& path, access_hint hint) {
    auto mapping = mapped_file::open(path, hint);
    auto file = parse(mapping.bytes(), path.string());
    file.mapping_ = std::move(mapping);  // the views keep pointing into the same pages
    file.path_ = path;
    return file;
}

ANVIL_INLINE safetensors_file safetensors_file::parse(std::vector<std::byte>&& bytes,
                                                      std::string source_name) {
    auto file = parse(std::span<const std::byte>(bytes), std::move(source_name));
    file.owned_bytes_ = std::move(bytes);  // a moved vector keeps its buffer: the views stay valid
    return file;
}

ANVIL_INLINE const tensor_view* safetensors_file::find(std::string_view name) const {
    const auto position = std::lower_bound(
        by_name_.begin(), by_name_.end(), name,
        [this](std::uint32_t index, std::string_view wanted) { return tensors_[index].name() < wanted; });
    if (position == by_name_.end() || tensors_[*position].name() != name) return nullptr;
    return &tensors_[*position];
}

ANVIL_INLINE const tensor_view& safetensors_file::tensor(std::string_view name) const {
    if (const tensor_view* found = find(name)) return *found;
    std::vector<std::string_view> names;
    names.reserve(tensors_.size());
    for (const auto& view : tensors_)
        names.emplace_back(view.name());
    throw format_error(detail::no_tensor_message(*source_, name, names, tensors_.size()));
}

ANVIL_INLINE const std::string* safetensors_file::find_metadata(std::string_view key) const {
    for (const auto& [entry_key, value] : metadata_) {
        if (entry_key == key) return &value;
    }
    return nullptr;
}

namespace detail {

ANVIL_INLINE std::string describe_json(const json::value& value) {
    if (value.is_number()) return "the number " + json::dump(value);
    if (value.is_string()) return "a string";
    if (value.is_array()) return "an array";
    if (value.is_object()) return "an object";
    return "the JSON literal " + json::dump(value);
}

// A non-negative JSON integer, or nullopt (fractions, negatives, non-numbers, integers past 2^63 - 1).
[[nodiscard]] ANVIL_INLINE std::optional<std::uint64_t> non_negative_integer(const json::value& value) {
    if (!value.is_integer()) return std::nullopt;
    const std::int64_t integer = value.as_int();
    if (integer < 0) return std::nullopt;
    return static_cast<std::uint64_t>(integer);
}

// One header entry checked on its own; the tiling of the data section is checked afterwards.
[[nodiscard]] ANVIL_INLINE tensor_info parse_tensor_entry(std::string_view source, const std::string& name,
                                                          const json::value& entry, std::uint64_t data_size) {
    const auto where = [&] { return message(source, ": tensor ", quoted_name(name), ": "); };
    if (!entry.is_object()) {
        throw format_error(message(where(), "entry is ", describe_json(entry),
                                   ", expected an object with dtype, shape and data_offsets"));
    }
    const json::value* type_value = nullptr;
    const json::value* shape_value = nullptr;
    const json::value* offsets_value = nullptr;
    for (const auto& [key, value] : entry.as_object()) {
        if (key == "dtype") {
            type_value = &value;
        } else if (key == "shape") {
            shape_value = &value;
        } else if (key == "data_offsets") {
            offsets_value = &value;
        } else {
            throw format_error(message(where(), "unknown key ", quoted_name(key),
                                       " (an entry holds only dtype, shape and data_offsets)"));
        }
    }
    for (const auto& [value, key] : {std::pair{type_value, "dtype"}, std::pair{shape_value, "shape"},
                                     std::pair{offsets_value, "data_offsets"}}) {
        if (value == nullptr) throw format_error(message(where(), "the entry has no \"", key, "\""));
    }

    tensor_info info;
    info.name = name;
    if (!type_value->is_string()) {
        throw format_error(
            message(where(), "dtype is ", describe_json(*type_value), ", expected a string such as \"F32\""));
    }
    const auto type = dtype_from_safetensors_name(type_value->as_string());
    if (!type) throw format_error(message(where(), "unknown dtype ", quoted_name(type_value->as_string())));
    info.type = *type;

    if (!shape_value->is_array()) {
        throw format_error(message(where(), "shape is ", describe_json(*shape_value),
                                   ", expected an array of non-negative integers"));
    }
    const auto& extents = shape_value->as_array();
    // check_header_arrays has bounded the rank by safetensors_max_rank.
    for (std::size_t axis = 0; axis < extents.size(); ++axis) {
        const auto extent = non_negative_integer(extents[axis]);
        if (!extent) {
            throw format_error(message(where(), "shape[", axis, "] is ", describe_json(extents[axis]),
                                       ", expected a non-negative integer"));
        }
        info.shape.push_back(static_cast<std::int64_t>(*extent));
    }
    const auto count = checked_element_count(std::span<const std::int64_t>(info.shape));
    const auto byte_count = count ? checked_mul(*count, dtype_size(info.type)) : std::nullopt;
    if (!byte_count) {
        throw format_error(message(where(), "shape ", extents_to_string(info.shape, false), " of ",
                                   dtype_name(info.type), " has more than 2^64 bytes"));
    }
    info.element_count = *count;

    if (!offsets_value->is_array() || offsets_value->as_array().size() != 2) {
        throw format_error(message(where(), "data_offsets is ", describe_json(*offsets_value),
                                   offsets_value->is_array()
                                       ? message(" of ", offsets_value->as_array().size(), " values")
                                       : std::string(),
                                   ", expected [begin, end]"));
    }
    for (std::size_t i = 0; i < 2; ++i) {
        if (!non_negative_integer(offsets_value->as_array()[i])) {
            throw format_error(message(where(), "data_offsets[", i, "] is ",
                                       describe_json(offsets_value->as_array()[i]),
                                       ", expected a non-negative integer"));
        }
    }
    info.data_begin = *non_negative_integer(offsets_value->as_array()[0]);
    info.data_end = *non_negative_integer(offsets_value->as_array()[1]);
    const auto offsets_text = [&] { return message("[", info.data_begin, ", ", info.data_end, "]"); };
    if (info.data_begin > info.data_end) {
        throw format_error(message(where(), "data_offsets ", offsets_text(), " begin after they end"));
    }
    if (info.data_end > data_size) {
        throw format_error(message(where(), "data_offsets ", offsets_text(), " run past the end of the ",
                                   data_size, "-byte data section"));
    }
    if (info.data_end - info.data_begin != *byte_count) {
        throw format_error(message(where(), "data_offsets ", offsets_text(), " hold ",
                                   info.data_end - info.data_begin, " bytes, but ", dtype_name(info.type),
                                   " ", extents_to_string(info.shape, false), " needs ", *byte_count, " (",
                                   *count, " elements x ", dtype_size(info.type), " bytes)"));
    }
    return info;
}

[[nodiscard]] ANVIL_INLINE std::vector<std::pair<std::string, std::string>> parse_safetensors_metadata(
    std::string_view source, const json::value& value) {
    if (!value.is_object()) {
        throw format_error(
            message(source, ": __metadata__ is ", describe_json(value), ", expected an object of strings"));
    }
    std::vector<std::pair<std::string, std::string>> entries;
    for (const auto& [key, entry] : value.as_object()) {
        if (!entry.is_string()) {
            throw format_error(message(source, ": __metadata__ value ", quoted_name(key), " is ",
                                       describe_json(entry), ", expected a string"));
        }
        entries.emplace_back(key, entry.as_string());
    }
    return entries;
}

// The tensors, sorted by offset, must tile [0, data_size) exactly: no overlap, no gap, nothing after the
// last.
ANVIL_INLINE void check_tiling(std::string_view source, const std::vector<tensor_info*>& by_offset,
                               std::uint64_t data_size) {
    std::uint64_t covered = 0;  // end of the bytes accounted for so far
    const tensor_info* previous = nullptr;
    for (const tensor_info* info : by_offset) {
        if (previous != nullptr && info->data_begin < previous->data_end) {
            throw format_error(message(source, ": tensors ", quoted_name(previous->name), " [",
                                       previous->data_begin, ", ", previous->data_end, ") and ",
                                       quoted_name(info->name), " [", info->data_begin, ", ", info->data_end,
                                       ") overlap"));
        }
        if (info->data_begin > covered) {
            throw format_error(message(source, ": bytes [", covered, ", ", info->data_begin,
                                       ") of the data section belong to no tensor (a gap ",
                                       previous != nullptr ? "after " + quoted_name(previous->name)
                                                           : std::string("before the first tensor"),
                                       ")"));
        }
        covered = info->data_end;
        previous = info;
    }
    if (covered != data_size) {
        throw format_error(message(
            source, ": the last ", data_size - covered, " bytes of the data section belong to no tensor (",
            previous != nullptr ? "tensors end at " + std::to_string(covered) : std::string("no tensors"),
            ", the data section at ", data_size, ")"));
    }
}

// Runs before the JSON parser builds its tree. No array of a valid header is longer than safetensors_max_rank
// (shapes; data_offsets has 2), so a longer one is refused here, in one pass over the bytes, instead of after
// it has become millions of JSON values (a tree is ~50 times larger than such an array's text). A quick scan,
// not a parser: it skips strings and counts commas; malformed text is left to the parser to report.
ANVIL_INLINE void check_header_arrays(std::string_view source, std::string_view text) {
    constexpr std::size_t max_depth = 8;
    std::array<bool, max_depth> is_array{};
    std::array<std::size_t, max_depth> commas{};
    std::array<std::size_t, max_depth> opened_at{};
    std::size_t depth = 0;
    std::string_view tensor;  // the root key last seen, as written (escapes and all)
    bool expect_root_key = false;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (c == '"') {
            const std::size_t begin = i + 1;
            for (++i; i < text.size() && text[i] != '"'; ++i) {
                if (text[i] == '\\') ++i;
            }
            if (depth == 1 && expect_root_key) tensor = text.substr(begin, std::min(i, text.size()) - begin);
            expect_root_key = false;
        } else if (c == '[' || c == '{') {
            if (depth == max_depth) return;  // the parser's depth limit reports it
            is_array[depth] = c == '[';
            commas[depth] = 0;
            opened_at[depth] = i;
            ++depth;
            expect_root_key = depth == 1;
        } else if (c == ']' || c == '}') {
            if (depth == 0) return;
            --depth;
        } else if (c == ',' && depth > 0) {
            expect_root_key = depth == 1;
            if (is_array[depth - 1] && ++commas[depth - 1] >= safetensors_max_rank) {
                throw format_error(message(source, ": tensor ", quoted_name(tensor),
                                           ": the array at file byte ", opened_at[depth - 1] + 8,
                                           " holds more than ", safetensors_max_rank,
                                           " values; shape and data_offsets never do"));
            }
        }
    }
}

}  // namespace detail

ANVIL_INLINE safetensors_file safetensors_file::parse(std::span<const std::byte> bytes,
                                                      std::string source_name) {
    using detail::message;
    safetensors_file file;
    file.source_ = std::make_shared<const std::string>(std::move(source_name));
    const std::string_view source = *file.source_;
    file.bytes_ = bytes;

    if (bytes.size() < 8) {
        throw format_error(
            message(source, ": the file is ", bytes.size(),
                    " bytes, shorter than the 8-byte header length that starts a safetensors file"));
    }
    std::uint64_t header_size = 0;
    for (std::size_t i = 0; i < 8; ++i)
        header_size |= std::to_integer<std::uint64_t>(bytes[i]) << (8 * i);
    // A file of another kind shows up here first: its first 8 bytes read as an absurd length.
    const bool starts_like_json = bytes.size() > 8 && std::to_integer<char>(bytes[8]) == '{';
    const std::string_view not_safetensors =
        starts_like_json ? "" : " (the file does not look like safetensors)";
    if (header_size > detail::safetensors_max_header_size) {
        throw format_error(message(source, ": header length ", header_size, " exceeds the limit of ",
                                   detail::safetensors_max_header_size, " bytes", not_safetensors));
    }
    if (header_size > bytes.size() - 8) {
        throw format_error(message(source, ": header length ", header_size,
                                   " runs past the end of the file (", bytes.size() - 8,
                                   " bytes follow the length)", not_safetensors));
    }
    if (header_size == 0)
        throw format_error(message(source, ": the header is empty, expected a JSON object"));
    file.header_size_ = header_size;
    file.data_size_ = bytes.size() - 8 - header_size;

    const std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8),
                                static_cast<std::size_t>(header_size));
    // Refused before parsing: a hostile header that is a 100 MB array never becomes a tree.
    const auto first = text.find_first_not_of(" \t\r\n");
    if (first != std::string_view::npos && text[first] != '{') {
        throw format_error(message(source, ": the header starts with ",
                                   detail::quoted_name(text.substr(first, 1)), " at file byte ", first + 8,
                                   ", expected a JSON object"));
    }
    detail::check_header_arrays(source, text);
    json::value header;
    try {
        // A valid header nests three deep (header, entry, shape); the limit bounds hostile nesting.
        header =
            json::parse(text, message(source, ": header"), {.max_depth = 8, .allow_duplicate_keys = false});
    } catch (const json_error& e) {
        // The parser counts from the header's first byte, 8 bytes into the file; offset() is the file's. A
        // message quoting a hostile key (a duplicate) is cut short.
        std::string what = e.what();
        if (what.size() > 600) what = what.substr(0, 600) + "...";
        throw json_error(message(what, " (file byte ", e.offset() + 8, ")"), e.offset() + 8);
    }
    std::vector<tensor_info> infos;
    for (const auto& [name, entry] : header.as_object()) {
        if (name == "__metadata__") {
            file.metadata_ = detail::parse_safetensors_metadata(source, entry);
        } else {
            infos.push_back(detail::parse_tensor_entry(source, name, entry, file.data_size_));
        }
    }
    header = json::value();  // the tree is no longer needed: free it before building the views

    std::vector<tensor_info*> by_offset;
    by_offset.reserve(infos.size());
    for (auto& info : infos)
        by_offset.push_back(&info);
    // Stable: empty tensors that share an offset keep their header order.
    std::stable_sort(by_offset.begin(), by_offset.end(), [](const tensor_info* a, const tensor_info* b) {
        return a->data_begin != b->data_begin ? a->data_begin < b->data_begin : a->data_end < b->data_end;
    });
    detail::check_tiling(source, by_offset, file.data_size_);

    const std::byte* data = bytes.data() + 8 + header_size;
    file.tensors_.reserve(infos.size());
    for (tensor_info* info : by_offset) {
        const std::span<const std::byte> tensor_bytes(
            data + info->data_begin, static_cast<std::size_t>(info->data_end - info->data_begin));
        file.tensors_.push_back(tensor_view(std::move(*info), tensor_bytes, file.source_));
    }
    // Sorted as (name, index) pairs: comparing names in place is cache-friendlier than through the views.
    std::vector<std::pair<std::string_view, std::uint32_t>> names;
    names.reserve(file.tensors_.size());
    for (std::size_t i = 0; i < file.tensors_.size(); ++i) {
        names.emplace_back(file.tensors_[i].name(), static_cast<std::uint32_t>(i));
    }
    std::sort(names.begin(), names.end());
    // The JSON parser refuses duplicate keys; this keeps find() exact whatever parser options change.
    for (std::size_t i = 1; i < names.size(); ++i) {
        if (names[i].first == names[i - 1].first) {
            throw format_error(
                message(source, ": tensor ", detail::quoted_name(names[i].first), " appears twice"));
        }
    }
    file.by_name_.reserve(names.size());
    for (const auto& entry : names)
        file.by_name_.push_back(entry.second);
    return file;
}

}  // namespace anvil
