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

    if (!options.states.empty() && !options.ios18) {
        throw unsupported_error(message("export: the state '", options.states.front().input,
                                        "' needs Core ML spec 9 (macOS 15 / iOS 18): set ios18"));
    }
    std::vector<ane::state_binding> states;
    for (const mlpackage_state& s : options.states)
        states.push_back({s.input, s.output});
    // lower_program checks there is one name per output that is not a state's
    std::vector<std::string> names = options.output_names;
    if (names.empty()) {
        for (std::size_t i = 0; i + states.size() < outputs.size(); ++i)
            names.push_back(message("output", i));
    }
    ane::lowering_options lowering;
    lowering.choices = ane::choose_lowering("", std::nullopt, {}, {});  // any Mac: the unknown chip's rules
    lowering.dialect = options.ios18 ? ane::mil_dialect::ios18 : ane::mil_dialect::ios16;
    const ane::lowered_program lowered = ane::lower_program(body, names, lowering, states);

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
    std::vector<std::string> narrow;  // states whose last dimension is not a multiple of 32
    std::int64_t width = 0;           // the first one's
    for (const auto& state : lowered.states) {
        summary.states.push_back({state.name, {state.shape.begin(), state.shape.end()}, state.dtype});
        const std::int64_t last = state.shape.rank() > 0 ? state.shape[state.shape.rank() - 1] : 32;
        if (last % 32 == 0) continue;
        if (narrow.empty()) width = last;
        narrow.push_back(state.name);
    }
    if (!narrow.empty()) {
        summary.warnings.push_back(message(
            narrow.size(), " of the ", lowered.states.size(), " states (", narrow.front(),
            narrow.size() > 1 ? ", ..." : "", ") have a last dimension that is not a multiple of 32 (", width,
            "): stateful models fail on the Neural Engine then (coremltools #2631), so Core ML may run them "
            "elsewhere"));
    }
    for (const auto& statement : lowered.program.statements)
        if (statement.op != "const") ++summary.operations;  // read_state and write_state included
    summary.weight_bytes = ane::total_bytes(lowered.weights);
    summary.digest = coreml::package_digest(contents);
    return summary;
}

}  // namespace anvil
