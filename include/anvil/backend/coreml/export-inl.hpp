// anvil: export_mlpackage's definitions (see export.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "anvil/backend/ane/ane_program.hpp"
#include "anvil/backend/ane/capabilities.hpp"
#include "anvil/backend/ane/lowering.hpp"
#include "anvil/backend/ane/weight_blob.hpp"
#include "anvil/backend/coreml/export.hpp"
#include "anvil/backend/coreml/mlpackage.hpp"
#include "anvil/backend/coreml/model_spec.hpp"
#include "anvil/version.hpp"

namespace anvil {

namespace export_detail {

using detail::message;

// One function as export_mlpackage lowers it: the passes device::coreml runs before it partitions (with
// compile's default options), then the whole graph as one ML program.
inline detail::ane::lowered_program lower_function(const mlpackage_function& function, bool ios18,
                                                   weight_compression weights) {
    using namespace detail;
    const graph_body body = compress_weights(
        ane::prepare_body(body_of(function.outputs, "export"), compile_options{}, true), weights);
    if (!function.states.empty() && !ios18) {
        throw unsupported_error(message("export: the state '", function.states.front().input,
                                        "' needs Core ML spec 9 (macOS 15 / iOS 18): set ios18"));
    }
    std::vector<ane::state_binding> states;
    for (const mlpackage_state& s : function.states)
        states.push_back({s.input, s.output});
    // lower_program checks there is one name per output that is not a state's
    std::vector<std::string> names = function.output_names;
    if (names.empty()) {
        const auto written = static_cast<std::size_t>(std::count_if(
            states.begin(), states.end(), [](const ane::state_binding& s) { return s.output.has_value(); }));
        for (std::size_t i = 0; i + written < function.outputs.size(); ++i)
            names.push_back(message("output", i));
    }
    ane::lowering_options lowering;
    lowering.choices = ane::choose_lowering("", std::nullopt, {}, {});  // any Mac: the unknown chip's rules
    ane::core_ml_products(lowering.choices, {});                        // but Core ML runs matmul on all
    lowering.dialect = ios18 ? ane::mil_dialect::ios18 : ane::mil_dialect::ios16;
    lowering.compressed_weights = true;
    lowering.core_ml_program = true;  // Core ML places each op itself: no kernel size is refused
    return ane::lower_program(body, names, lowering, states);
}

inline std::uint32_t load_u32(std::span<const std::byte> bytes, std::size_t at) {
    std::uint32_t value = 0;
    std::memcpy(&value, bytes.data() + at, 4);  // little-endian, as the blob format and every Mac
    return value;
}
inline std::uint64_t load_u64(std::span<const std::byte> bytes, std::size_t at) {
    std::uint64_t value = 0;
    std::memcpy(&value, bytes.data() + at, 8);
    return value;
}

// One weight file for every function of a multi-function package: each function's blobs re-appended to
// one writer, a payload already there (the same checkpoint tensor in the prefill and the decode function)
// stored once and referenced by both.
inline detail::ane::weight_file share_weights(std::span<detail::ane::lowered_program> programs) {
    using namespace detail::ane;
    const std::string path = "@model_path/weights/weight.bin";
    weight_blob_writer merged;
    std::unordered_multimap<std::uint64_t, std::uint64_t> written;  // payload hash -> record offset
    for (lowered_program& program : programs) {
        const auto rebase = [&](mil_constant& blob) {
            const auto file = std::find_if(program.weights.begin(), program.weights.end(),
                                           [&](const weight_file& f) { return f.path == blob.blob_path; });
            const std::span<const std::byte> bytes = file != program.weights.end()
                                                         ? std::span<const std::byte>(file->bytes)
                                                         : std::span<const std::byte>();
            if (blob.blob_offset + weight_blob_writer::round_up(1) > bytes.size())
                throw error(message("export: the blob at ", blob.blob_offset, " of ", blob.blob_path,
                                    " is not in its weight file"));
            const auto record = static_cast<std::size_t>(blob.blob_offset);
            const std::uint32_t type = load_u32(bytes, record + 4);
            const std::uint64_t size = load_u64(bytes, record + 8);
            const std::uint64_t at = load_u64(bytes, record + 16);
            const std::uint64_t padding_bits = load_u64(bytes, record + 24);
            if (at > bytes.size() || size > bytes.size() - at)
                throw error(message("export: the blob at ", blob.blob_offset, " runs past its weight file"));
            const std::span<const std::byte> payload = bytes.subspan(static_cast<std::size_t>(at), size);
            std::uint64_t hash = (1469598103934665603ull ^ type) * 1099511628211ull ^ padding_bits;  // FNV-1a
            for (const std::byte b : payload)
                hash = (hash ^ static_cast<std::uint64_t>(b)) * 1099511628211ull;
            std::uint64_t offset = 0;
            bool found = false;
            for (auto [it, end] = written.equal_range(hash); it != end && !found; ++it) {
                const std::span<const std::byte> have = merged.bytes();
                const auto record_at = static_cast<std::size_t>(it->second);
                const std::uint64_t have_at = load_u64(have, record_at + 16);
                if (load_u32(have, record_at + 4) == type && load_u64(have, record_at + 8) == size &&
                    load_u64(have, record_at + 24) == padding_bits &&
                    std::equal(payload.begin(), payload.end(),
                               have.begin() + static_cast<std::ptrdiff_t>(have_at))) {
                    offset = it->second;
                    found = true;
                }
            }
            if (!found) {
                offset = merged.append(static_cast<blob_dtype>(type), payload, padding_bits);
                written.emplace(hash, offset);
            }
            blob.blob_offset = offset;
            blob.blob_path = path;
        };
        for (mil_statement& statement : program.program.statements) {
            if (statement.op == "const" && statement.value.kind == mil_constant_kind::blob)
                rebase(statement.value);
            for (auto& parameter : statement.parameters)
                if (parameter.second.value.kind == mil_constant_kind::blob) rebase(parameter.second.value);
        }
        program.weights.clear();
    }
    return {path, merged.release()};
}

inline std::vector<mlpackage_port> ports_of(const std::vector<detail::ane::program_port>& ports) {
    std::vector<mlpackage_port> made;
    for (const auto& p : ports)
        made.push_back({p.name, {p.shape.begin(), p.shape.end()}, p.dtype});
    return made;
}

// The functions lowered, their weights shared, encoded and written.
inline mlpackage_summary write_functions(std::span<const mlpackage_function> functions,
                                         const std::filesystem::path& package,
                                         const mlpackage_options& options) {
    using namespace detail;
    if (package.extension() != ".mlpackage") {
        throw error(message("export: '", package.string(), "' does not end in .mlpackage"));
    }
    if (options.weights == weight_compression::lut4g32 && !options.ios18) {
        throw unsupported_error(
            "export: lut4g32 (a palette per group of channels) needs Core ML spec 9 (macOS 15 / iOS 18): set "
            "ios18");
    }
    std::vector<ane::lowered_program> lowered;
    for (const mlpackage_function& function : functions)
        lowered.push_back(lower_function(function, options.ios18, options.weights));
    std::vector<ane::weight_file> weights;
    if (lowered.size() == 1) {
        weights = lowered.front().weights;
    } else {
        weights.push_back(share_weights(lowered));
    }

    coreml::model_spec spec;
    for (std::size_t i = 0; i < functions.size(); ++i)
        spec.functions.push_back({functions[i].name, &lowered[i].program, lowered[i].results, {}, {}});
    spec.default_function = options.default_function;
    spec.metadata.short_description = options.description;
    spec.metadata.author = options.author;
    spec.metadata.license = options.license;
    spec.metadata.version = options.version;
    spec.metadata.user_defined = options.user_defined;
    spec.metadata.user_defined.emplace_back("com.github.anvil.version", version_string);
    coreml::mlpackage_contents contents;
    contents.model = coreml::encode_model(spec);  // checks the names, the dialects and the default
    contents.weight_files = weights;
    coreml::write_mlpackage(package, contents);

    mlpackage_summary summary;
    std::vector<std::string> narrow;  // states whose last dimension is not a multiple of 32
    std::int64_t width = 0;           // the first one's
    for (std::size_t i = 0; i < functions.size(); ++i) {
        const ane::lowered_program& l = lowered[i];
        summary.functions.push_back(
            {functions[i].name, ports_of(l.inputs), ports_of(l.outputs), ports_of(l.states)});
        for (const auto& state : l.states) {
            const std::int64_t last = state.shape.rank() > 0 ? state.shape[state.shape.rank() - 1] : 32;
            if (last % 32 == 0 || std::find(narrow.begin(), narrow.end(), state.name) != narrow.end())
                continue;
            if (narrow.empty()) width = last;
            narrow.push_back(state.name);
        }
        for (const auto& statement : l.program.statements)
            if (statement.op != "const") ++summary.operations;  // read_state and write_state included
    }
    const std::string& default_name =
        options.default_function.empty() ? functions.front().name : options.default_function;
    for (const mlpackage_interface& f : summary.functions) {
        if (f.name != default_name) continue;
        summary.inputs = f.inputs;
        summary.outputs = f.outputs;
        summary.states = f.states;
    }
    if (!narrow.empty()) {
        summary.warnings.push_back(message(
            narrow.size(), " states (", narrow.front(), narrow.size() > 1 ? ", ..." : "",
            ") have a last dimension that is not a multiple of 32 (", width,
            "): stateful models fail on the Neural Engine then (coremltools #2631), so Core ML may run them "
            "elsewhere"));
    }
    summary.weight_bytes = ane::total_bytes(weights);
    summary.digest = coreml::package_digest(contents);
    return summary;
}

}  // namespace export_detail

ANVIL_INLINE mlpackage_summary export_mlpackage(std::span<const value> outputs,
                                                const std::filesystem::path& package,
                                                const mlpackage_options& options) {
    const mlpackage_function main{
        "main", {outputs.begin(), outputs.end()}, options.output_names, options.states};
    return export_detail::write_functions(std::span<const mlpackage_function>(&main, 1), package, options);
}

ANVIL_INLINE mlpackage_summary export_mlpackage(std::span<const mlpackage_function> functions,
                                                const std::filesystem::path& package,
                                                const mlpackage_options& options) {
    if (functions.size() < 2) {
        throw error(detail::message("export: a multi-function package needs two functions or more, got ",
                                    functions.size()));
    }
    if (!options.ios18) {
        throw unsupported_error(
            "export: a multi-function package needs Core ML spec 9 (macOS 15 / iOS 18): set ios18");
    }
    return export_detail::write_functions(functions, package, options);
}

}  // namespace anvil
