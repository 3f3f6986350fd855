// anvil: checkpoint's definitions (see checkpoint.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "anvil/core/checked_math.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/json.hpp"
#include "anvil/core/mapped_file.hpp"
#include "anvil/io/checkpoint.hpp"
#include "anvil/io/safetensors.hpp"

namespace anvil::detail {

ANVIL_INLINE std::filesystem::path checked_shard_path(std::string_view index, std::string_view tensor,
                                                      std::string_view file_name) {
    const auto refuse = [&](std::string_view why) {
        return format_error(message(index, ": weight_map gives tensor ", quoted_name(tensor), " the shard ",
                                    quoted_name(file_name), ", which ", why));
    };
    if (file_name.empty()) throw refuse("is empty");
    if (file_name.find('\0') != std::string_view::npos) throw refuse("contains a NUL byte");
    const std::filesystem::path relative(file_name);
    if (relative.has_root_path()) throw refuse("is an absolute path (shards must stay inside the folder)");
    for (const auto& part : relative) {
        if (part == "..") throw refuse("uses \"..\" (shards must stay inside the folder)");
    }
    return relative.lexically_normal();
}

ANVIL_INLINE bool is_safetensors_name(const std::filesystem::path& path) {
    return path.extension() == ".safetensors";
}

}  // namespace anvil::detail

namespace anvil {

ANVIL_INLINE checkpoint checkpoint::open(const std::filesystem::path& file_or_folder) {
    std::error_code error;
    const auto status = std::filesystem::status(file_or_folder, error);
    if (status.type() == std::filesystem::file_type::not_found) {
        throw io_error(detail::message(file_or_folder.string(), ": no such file or folder"));
    }
    if (error)
        throw io_error(detail::message(file_or_folder.string(), ": cannot inspect: ", error.message()));
    checkpoint result;
    result.path_ = file_or_folder;
    result.source_ = file_or_folder.string();
    if (!std::filesystem::is_directory(status)) {
        if (file_or_folder.filename().string().ends_with(".index.json")) {
            result.open_index(file_or_folder);
        } else {
            result.add_file(file_or_folder);
        }
    } else {
        result.open_folder(file_or_folder);
    }
    result.build_index();
    return result;
}

ANVIL_INLINE const tensor_view* checkpoint::find(std::string_view name) const {
    const auto position = std::lower_bound(
        by_name_.begin(), by_name_.end(), name,
        [](const tensor_view* view, std::string_view wanted) { return view->name() < wanted; });
    if (position == by_name_.end() || (*position)->name() != name) return nullptr;
    return *position;
}

ANVIL_INLINE const tensor_view& checkpoint::tensor(std::string_view name) const {
    if (const tensor_view* found = find(name)) return *found;
    std::vector<std::string_view> names;
    names.reserve(by_name_.size());
    for (const tensor_view* view : by_name_)
        names.emplace_back(view->name());
    throw format_error(detail::no_tensor_message(source_, name, names, by_name_.size()));
}

ANVIL_INLINE std::uint64_t checkpoint::parameter_count() const noexcept {
    std::uint64_t total = 0;
    for (const tensor_view* view : by_name_)
        total += view->element_count();
    return total;
}

ANVIL_INLINE std::uint64_t checkpoint::byte_size() const noexcept {
    std::uint64_t total = 0;
    for (const tensor_view* view : by_name_)
        total += view->byte_size();
    return total;
}

ANVIL_INLINE void checkpoint::add_file(const std::filesystem::path& file) {
    files_.push_back(safetensors_file::open(file));
}

ANVIL_INLINE void checkpoint::open_folder(const std::filesystem::path& folder) {
    std::error_code error;
    if (std::filesystem::is_regular_file(folder / "model.safetensors.index.json", error)) {
        open_index(folder / "model.safetensors.index.json");
        return;
    }
    if (std::filesystem::is_regular_file(folder / "model.safetensors", error)) {
        add_file(folder / "model.safetensors");
        return;
    }
    std::vector<std::filesystem::path> indexes;
    std::vector<std::filesystem::path> files;
    std::filesystem::directory_iterator entries(folder, error);
    for (; !error && entries != std::filesystem::directory_iterator(); entries.increment(error)) {
        const auto& entry_path = entries->path();
        std::error_code type_error_code;
        if (!entries->is_regular_file(type_error_code)) continue;
        const auto name = entry_path.filename().string();
        if (name.ends_with(".safetensors.index.json")) indexes.push_back(entry_path);
        if (detail::is_safetensors_name(entry_path)) files.push_back(entry_path);
    }
    if (error) {
        throw io_error(detail::message(folder.string(), ": cannot list the folder: ", error.message()));
    }
    if (indexes.size() == 1) {
        open_index(indexes.front());
        return;
    }
    if (indexes.size() > 1) {
        throw format_error(
            detail::message(folder.string(), ": ", indexes.size(),
                            " *.safetensors.index.json files and no model.safetensors.index.json;"
                            " open one of them"));
    }
    if (files.empty()) {
        throw format_error(detail::message(folder.string(),
                                           ": no model.safetensors, model.safetensors.index.json or other "
                                           ".safetensors file"));
    }
    std::sort(files.begin(), files.end());
    for (const auto& file : files)
        add_file(file);
    check_unique(folder.string(), "");
}

ANVIL_INLINE void checkpoint::open_index(const std::filesystem::path& index) {
    index_path_ = index;
    const std::string index_name = index.string();
    const auto mapping = mapped_file::open(index);
    if (mapping.size() > detail::checkpoint_max_index_size) {
        throw format_error(detail::message(index_name, ": ", mapping.size(), " bytes, more than the ",
                                           detail::checkpoint_max_index_size, " an index may hold"));
    }
    const std::string_view text(reinterpret_cast<const char*>(mapping.bytes().data()), mapping.size());
    const json::value root = json::parse(text, index_name);  // json_error names the index and the byte
    if (!root.is_object()) {
        throw format_error(detail::message(index_name, ": the index is ", detail::describe_json(root),
                                           ", expected an object with a \"weight_map\""));
    }
    const json::value* weight_map = root.find("weight_map");
    if (weight_map == nullptr) {
        throw format_error(detail::message(index_name, ": the index has no \"weight_map\""));
    }
    if (!weight_map->is_object()) {
        throw format_error(detail::message(index_name, ": \"weight_map\" is ",
                                           detail::describe_json(*weight_map),
                                           ", expected an object mapping tensor names to shard files"));
    }

    // Each shard once, in name order, whatever spelling ("./a" or "a") the map uses.
    const std::filesystem::path folder = index.parent_path();
    std::map<std::filesystem::path, std::size_t> shard_of_path;
    std::vector<std::pair<std::string_view, std::filesystem::path>> listed;  // tensor -> shard
    for (const auto& [tensor_name, file_value] : weight_map->as_object()) {
        if (!file_value.is_string()) {
            throw format_error(detail::message(index_name, ": weight_map gives tensor ",
                                               detail::quoted_name(tensor_name), " ",
                                               detail::describe_json(file_value), ", expected a file name"));
        }
        auto shard = detail::checked_shard_path(index_name, tensor_name, file_value.as_string());
        shard_of_path.emplace(shard, 0);
        listed.emplace_back(tensor_name, std::move(shard));
    }
    for (auto& shard_and_position : shard_of_path) {
        const std::filesystem::path& shard =
            shard_and_position.first;  // named: lambdas cannot capture bindings
        const auto shard_path = folder / shard;
        std::error_code error;
        if (!std::filesystem::is_regular_file(shard_path, error)) {
            const auto user = std::find_if(listed.begin(), listed.end(),
                                           [&](const auto& item) { return item.second == shard; });
            throw io_error(detail::message(index_name, ": shard ", detail::quoted_name(shard.string()),
                                           " (listed for tensor ", detail::quoted_name(user->first),
                                           ") is missing: ", shard_path.string(), " is not a file"));
        }
        shard_and_position.second = files_.size();
        add_file(shard_path);
    }
    for (const auto& [tensor_name, shard] : listed) {
        const auto& file = files_[shard_of_path.at(shard)];
        if (!file.contains(tensor_name)) {
            throw format_error(detail::message(
                index_name, ": weight_map puts tensor ", detail::quoted_name(tensor_name), " in ",
                detail::quoted_name(shard.string()), ", but that shard has no such tensor"));
        }
    }
    // Tensors a shard holds beyond its weight_map entries are kept (Hugging Face loads whole shards), but
    // a name in two shards is ambiguous.
    check_unique(index_name, " (each tensor must be in one shard)");
}

ANVIL_INLINE void checkpoint::check_unique(const std::string& source, std::string_view why) const {
    std::vector<std::pair<std::string_view, std::size_t>> names;  // name, file
    for (std::size_t file = 0; file < files_.size(); ++file) {
        for (const auto& view : files_[file].tensors())
            names.emplace_back(view.name(), file);
    }
    std::sort(names.begin(), names.end());
    for (std::size_t i = 1; i < names.size(); ++i) {
        if (names[i].first == names[i - 1].first) {
            throw format_error(detail::message(source, ": tensor ", detail::quoted_name(names[i].first),
                                               " is in both ", files_[names[i - 1].second].source_name(),
                                               " and ", files_[names[i].second].source_name(), why));
        }
    }
}

ANVIL_INLINE checkpoint checkpoint::from_tensors(std::string source, std::vector<checkpoint_tensor> tensors,
                                                 std::shared_ptr<const void> owner) {
    checkpoint result;
    result.path_ = source;
    result.source_ = source;
    result.owner_ = std::move(owner);
    auto name = std::make_shared<const std::string>(source);
    result.foreign_ = std::make_unique<std::vector<tensor_view>>();
    result.foreign_->reserve(tensors.size());
    for (checkpoint_tensor& t : tensors) {
        const auto counted = detail::checked_element_count(std::span<const std::int64_t>(t.shape));
        if (!counted)
            throw format_error(detail::message(source, ": tensor '", t.name, "' has an invalid shape"));
        const std::uint64_t count = *counted;
        if (t.blocks) {
            const std::optional<ggml_type_layout> layout = ggml_layout(static_cast<std::uint32_t>(*t.blocks));
            const bool rows_fit = layout && !t.shape.empty() && t.shape.back() % layout->block == 0;
            if (!rows_fit || t.type != dtype::f32 ||
                count / (rows_fit ? layout->block : 1) * (rows_fit ? layout->bytes : 0) != t.bytes.size()) {
                throw format_error(detail::message(source, ": tensor '", t.name, "' of ", t.bytes.size(),
                                                   " bytes is not rows of whole ", ggml_type_name(*t.blocks),
                                                   " blocks for its shape ",
                                                   detail::extents_to_string(t.shape, false)));
            }
        } else {
            const auto size = detail::checked_mul(count, dtype_size(t.type));
            if (dtype_size(t.type) == 0 || !size || *size != t.bytes.size()) {
                throw format_error(detail::message(source, ": tensor '", t.name, "' holds ", t.bytes.size(),
                                                   " bytes, not the ", count, " ", dtype_name(t.type),
                                                   " values its shape needs"));
            }
        }
        tensor_info info;
        info.name = std::move(t.name);
        info.type = t.type;
        info.shape = std::move(t.shape);
        info.element_count = count;
        info.data_end = t.bytes.size();
        info.blocks = t.blocks;
        result.foreign_->push_back(tensor_view(std::move(info), t.bytes, name));
    }
    result.build_index();
    for (std::size_t i = 1; i < result.by_name_.size(); ++i) {
        if (result.by_name_[i]->name() == result.by_name_[i - 1]->name())
            throw format_error(
                detail::message(source, ": two tensors are named '", result.by_name_[i]->name(), "'"));
    }
    return result;
}

ANVIL_INLINE void checkpoint::build_index() {
    for (const auto& file : files_) {
        for (const auto& view : file.tensors())
            by_name_.push_back(&view);
    }
    if (foreign_) {
        for (const auto& view : *foreign_)
            by_name_.push_back(&view);
    }
    std::sort(by_name_.begin(), by_name_.end(),
              [](const tensor_view* a, const tensor_view* b) { return a->name() < b->name(); });
}

}  // namespace anvil
