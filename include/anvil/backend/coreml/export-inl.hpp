// anvil: export_mlpackage's definitions (see export.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "anvil/backend/ane/ane_program.hpp"
#include "anvil/backend/ane/capabilities.hpp"
#include "anvil/backend/ane/lowering.hpp"
#include "anvil/backend/coreml/export.hpp"
#include "anvil/backend/coreml/mlpackage.hpp"
#include "anvil/backend/coreml/model_spec.hpp"
#include "anvil/version.hpp"

namespace anvil {

ANVIL_INLINE mlpackage_summary export_mlpackage(std::span<const value> outputs,
                                                const std::filesystem::path& package,
                                                const mlpackage_options& options) {
    using namespace detail;
    if (package.extension() != ".mlpackage") {
        throw error(message("export: '", package.string(), "' does not end in .mlpackage"));
    }
    // The passes device::coreml runs before it partitions, with compile's default options.
    const graph_body body = ane::prepare_body(body_of(outputs, "export"), compile_options{});

    std::vector<std::string> names = options.output_names;  // lower_program checks there is one per output
    if (names.empty()) {
        for (std::size_t i = 0; i < outputs.size(); ++i)
            names.push_back(message("output", i));
    }
    ane::lowering_options lowering;
    lowering.choices = ane::choose_lowering("", std::nullopt, {}, {});  // any Mac: the unknown chip's rules
    lowering.dialect = options.ios18 ? ane::mil_dialect::ios18 : ane::mil_dialect::ios16;
    const ane::lowered_program lowered = ane::lower_program(body, names, lowering);

    coreml::model_spec spec;
    spec.functions.push_back({"main", &lowered.program, lowered.results, {}, {}});
    spec.metadata.short_description = options.description;
    spec.metadata.author = options.author;
    spec.metadata.license = options.license;
    spec.metadata.version = options.version;
    spec.metadata.user_defined = options.user_defined;
    spec.metadata.user_defined.emplace_back("com.github.anvil.version", version_string);
    coreml::mlpackage_contents contents;
    contents.model = coreml::encode_model(spec);
    contents.weight_files = lowered.weights;
    coreml::write_mlpackage(package, contents);

    mlpackage_summary summary;
    for (const auto& in : lowered.inputs)
        summary.inputs.push_back({in.name, {in.shape.begin(), in.shape.end()}, in.dtype});
    for (const auto& out : lowered.outputs)
        summary.outputs.push_back({out.name, {out.shape.begin(), out.shape.end()}, out.dtype});
    for (const auto& statement : lowered.program.statements)
        if (statement.op != "const") ++summary.operations;
    summary.weight_bytes = ane::total_bytes(lowered.weights);
    summary.digest = coreml::package_digest(contents);
    return summary;
}

}  // namespace anvil
