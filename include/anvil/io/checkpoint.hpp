// anvil: a model's weights as Hugging Face stores them: one .safetensors file, or a folder holding
// model.safetensors, or model.safetensors.index.json and the shards its weight_map names, or several
// .safetensors files without an index. Every shard is memory-mapped and validated; tensors are looked up by
// name across all of them, and a name held by two shards is an error rather than a silent choice.
#pragma once

#include "anvil/compilation.hpp"
#include "anvil/io/safetensors.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace anvil {

namespace detail {

// Index files are a few hundred kilobytes even for the largest models; the bound keeps a hostile one cheap.
inline constexpr std::uint64_t checkpoint_max_index_size = 100'000'000;

// A weight_map file name made safe to open under `folder`: relative, no "..", no NUL, not empty. Symbolic
// links inside the folder are followed as usual (Hugging Face's cache links snapshots to blobs elsewhere).
[[nodiscard]] std::filesystem::path checked_shard_path(std::string_view index, std::string_view tensor,
                                                       std::string_view file_name);

[[nodiscard]] bool is_safetensors_name(const std::filesystem::path& path);

}  // namespace detail

// One tensor another format holds (a GGUF file), under its Hugging Face name: `bytes` are `type` elements
// of row-major `shape`, owned by whatever from_tensors' `owner` keeps alive (the file's mapping, a
// dequantised copy).
struct checkpoint_tensor {
    std::string name;
    dtype type = dtype::f32;
    std::vector<std::int64_t> shape;
    std::span<const std::byte> bytes;
    // Rows of ggml blocks along the last axis instead of `type` values (a GGUF file's quantised weight, kept
    // as stored): the values are f32, and the bytes hold whole blocks of this type.
    std::optional<ggml_type> blocks = std::nullopt;
};

class checkpoint {
public:
    [[nodiscard]] static checkpoint open(const std::filesystem::path& file_or_folder);

    // A checkpoint of tensors read from another format: looked up, checked and loaded as a safetensors
    // checkpoint's are. `source` names them in messages (the file's path); `owner` keeps their bytes alive
    // as long as the checkpoint. Each tensor's byte count must match its type and shape, and names must be
    // unique (format_error otherwise).
    [[nodiscard]] static checkpoint from_tensors(std::string source, std::vector<checkpoint_tensor> tensors,
                                                 std::shared_ptr<const void> owner);

    checkpoint(checkpoint&&) noexcept = default;
    checkpoint& operator=(checkpoint&&) noexcept = default;
    checkpoint(const checkpoint&) = delete;
    checkpoint& operator=(const checkpoint&) = delete;
    ~checkpoint() = default;

    // What open() was given.
    [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
    // The index file, when the checkpoint has one; empty otherwise.
    [[nodiscard]] const std::filesystem::path& index_path() const noexcept { return index_path_; }

    [[nodiscard]] const tensor_view* find(std::string_view name) const;
    [[nodiscard]] bool contains(std::string_view name) const { return find(name) != nullptr; }
    // The named tensor, or a format_error "models/gpt2: no tensor named 'x' (did you mean 'y'?)".
    [[nodiscard]] const tensor_view& tensor(std::string_view name) const;

    // Every tensor of every file, sorted by name.
    [[nodiscard]] const std::vector<const tensor_view*>& tensors() const noexcept { return by_name_; }
    [[nodiscard]] std::size_t size() const noexcept { return by_name_.size(); }
    [[nodiscard]] std::span<const safetensors_file> files() const noexcept { return files_; }

    // Elements and data bytes over all tensors.
    [[nodiscard]] std::uint64_t parameter_count() const noexcept;
    [[nodiscard]] std::uint64_t byte_size() const noexcept;

private:
    checkpoint() = default;

    void add_file(const std::filesystem::path& file);

    // Hugging Face's names first; without them, every .safetensors file of the folder.
    void open_folder(const std::filesystem::path& folder);

    void open_index(const std::filesystem::path& index);

    void check_unique(const std::string& source, std::string_view why) const;

    void build_index();

    std::filesystem::path path_;
    std::filesystem::path index_path_;
    std::string source_;
    std::vector<safetensors_file> files_;
    // from_tensors: the views (allocated once, so by_name_ may point into them) and what keeps their bytes.
    std::unique_ptr<std::vector<tensor_view>> foreign_;
    std::shared_ptr<const void> owner_;
    std::vector<const tensor_view*> by_name_;  // into files_' or foreign_'s views, which keep their addresses
};

}  // namespace anvil

#if ANVIL_DEFINITIONS
#include "anvil/io/checkpoint-inl.hpp"
#endif
