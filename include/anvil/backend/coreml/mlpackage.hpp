// anvil: the `.mlpackage` writer (COREML.md §1): `Manifest.json`, `Data/com.apple.CoreML/model.mlmodel` (the
// encoded Model, model_spec.hpp) and `Data/com.apple.CoreML/weights/<file>` (MIL blob storage v2, written by
// the same weight_blob_writer the private path uses). `@model_path` in a blob reference is the directory
// that holds model.mlmodel, so "@model_path/weights/weight.bin" lands in Data/com.apple.CoreML/weights/.
//
// The manifest's item identifiers are derived from the package's content (UUID-shaped, RFC 9562 version 8)
// rather than random as coremltools makes them, so exporting the same model twice gives the same bytes; Core
// ML only needs them unique within the manifest (ModelPackage.cpp).
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "anvil/backend/ane/weight_file.hpp"
#include "anvil/compilation.hpp"

namespace anvil::detail::coreml {

inline constexpr std::string_view package_author = "com.apple.CoreML";

struct mlpackage_contents {
    std::vector<std::byte> model;                // model.mlmodel: a serialised CoreML.Specification.Model
    std::vector<ane::weight_file> weight_files;  // paths "@model_path/weights/<file>"
};

// Manifest.json naming the model item `model_id` and the weights item `weights_id`, laid out as
// coremltools' json.dump(indent=2) lays it out.
[[nodiscard]] std::string manifest_json(std::string_view model_id, std::string_view weights_id);

// A UUID-shaped identifier (8-4-4-4-12 upper-case hex, version 8) from the SHA-256 of `seed`.
[[nodiscard]] std::string content_identifier(std::string_view seed);

// The digest of a package's contents (model and weight files): its identity, and the key Core ML's compiled
// copy is cached under (coreml_runtime.hpp).
[[nodiscard]] std::string package_digest(const mlpackage_contents& contents);

// Writes the package to `directory` (which must end in .mlpackage), replacing a package already there. It is
// written beside it first and moved into place, so a reader never sees half a package. Throws io_error.
void write_mlpackage(const std::filesystem::path& directory, const mlpackage_contents& contents);

}  // namespace anvil::detail::coreml

#if ANVIL_DEFINITIONS
#include "anvil/backend/coreml/mlpackage-inl.hpp"
#endif
