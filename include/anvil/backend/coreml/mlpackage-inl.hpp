// anvil: mlpackage's definitions (see mlpackage.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <unistd.h>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <span>
#include <string>
#include <system_error>

#include "anvil/backend/coreml/mlpackage.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/sha256.hpp"

namespace anvil::detail::coreml {

namespace mlpackage_detail {

inline constexpr std::string_view model_path_prefix = "@model_path/";

inline void write_file(const std::filesystem::path& path, std::span<const std::byte> bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) throw io_error(message("Core ML package: cannot write '", path.string(), "'"));
}

// The file a blob reference names, relative to the directory of model.mlmodel. Only "weights/<name>" is a
// place a package holds weights, and a name cannot climb out of it.
inline std::string weight_file_name(const std::string& reference) {
    const std::string prefix = std::string(model_path_prefix) + "weights/";
    const std::string name = reference.starts_with(prefix) ? reference.substr(prefix.size()) : std::string();
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
        throw error(message("Core ML package: the weight file '", reference,
                            "' is not of the form @model_path/weights/<file>"));
    }
    return name;
}

}  // namespace mlpackage_detail

ANVIL_INLINE std::string manifest_json(std::string_view model_id, std::string_view weights_id) {
    const auto item = [](std::string_view id, std::string_view description, std::string_view name) {
        return message("    \"", id, "\": {\n      \"author\": \"", package_author,
                       "\",\n      \"description\": \"", description, "\",\n      \"name\": \"", name,
                       "\",\n      \"path\": \"", package_author, "/", name, "\"\n    }");
    };
    return message("{\n  \"fileFormatVersion\": \"1.0.0\",\n  \"itemInfoEntries\": {\n",
                   item(model_id, "CoreML Model Specification", "model.mlmodel"), ",\n",
                   item(weights_id, "CoreML Model Weights", "weights"),
                   "\n  },\n  \"rootModelIdentifier\": \"", model_id, "\"\n}");
}

ANVIL_INLINE std::string content_identifier(std::string_view seed) {
    auto digest = sha256().update(seed).finish();
    digest[6] = static_cast<std::uint8_t>((digest[6] & 0x0Fu) | 0x80u);  // version 8: vendor-defined
    digest[8] = static_cast<std::uint8_t>((digest[8] & 0x3Fu) | 0x80u);  // RFC 4122 variant
    std::string text;
    for (std::size_t i = 0; i < 16; ++i) {
        if (i == 4 || i == 6 || i == 8 || i == 10) text += '-';
        char hex[3];
        std::snprintf(hex, sizeof hex, "%02X", digest[i]);
        text += hex;
    }
    return text;
}

ANVIL_INLINE std::string package_digest(const mlpackage_contents& contents) {
    sha256 hash;
    hash.update("anvil mlpackage 1\n").update(contents.model);
    for (const auto& file : contents.weight_files) {
        hash.update(message("\n", file.path, "\n", file.bytes.size(), "\n")).update(file.bytes);
    }
    return hash.finish_hex();
}

ANVIL_INLINE void write_mlpackage(const std::filesystem::path& directory,
                                  const mlpackage_contents& contents) {
    using namespace mlpackage_detail;
    if (directory.extension() != ".mlpackage") {
        throw io_error(message("Core ML package: '", directory.string(), "' must end in .mlpackage"));
    }
    std::error_code code;
    if (std::filesystem::exists(directory, code) &&
        !std::filesystem::exists(directory / "Manifest.json", code)) {
        throw io_error(message("Core ML package: '", directory.string(),
                               "' exists and is not a package (no Manifest.json); not replacing it"));
    }
    const std::filesystem::path parent = directory.has_parent_path() ? directory.parent_path() : ".";
    std::filesystem::create_directories(parent, code);
    if (code) {
        throw io_error(message("Core ML package: cannot create '", parent.string(), "': ", code.message()));
    }
    std::filesystem::path staging = directory;
    staging += message(".", ::getpid(), ".partial");
    std::filesystem::remove_all(staging, code);
    const std::filesystem::path data = staging / "Data" / std::string(package_author);
    std::filesystem::create_directories(data / "weights", code);
    if (code) {
        throw io_error(
            message("Core ML package: cannot create '", (data / "weights").string(), "': ", code.message()));
    }
    try {
        write_file(data / "model.mlmodel", contents.model);
        for (const auto& file : contents.weight_files)
            write_file(data / "weights" / weight_file_name(file.path), file.bytes);
        const std::string digest = package_digest(contents);
        const std::string manifest = manifest_json(content_identifier(digest + " model.mlmodel"),
                                                   content_identifier(digest + " weights"));
        write_file(staging / "Manifest.json", std::as_bytes(std::span(manifest.data(), manifest.size())));
    } catch (...) {
        std::filesystem::remove_all(staging, code);
        throw;
    }
    std::filesystem::remove_all(directory, code);
    std::filesystem::rename(staging, directory, code);
    if (code) {
        std::filesystem::remove_all(staging, code);
        throw io_error(message("Core ML package: cannot move the package into '", directory.string(),
                               "': ", code.message()));
    }
}

}  // namespace anvil::detail::coreml
