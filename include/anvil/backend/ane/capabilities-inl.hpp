// anvil: capabilities' definitions (see capabilities.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>

#include "anvil/backend/ane/ane_framework.hpp"
#include "anvil/backend/ane/capabilities.hpp"
#include "anvil/backend/ane/program_cache.hpp"
#include "anvil/backend/program.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/json.hpp"
#include "anvil/core/sha256.hpp"
#include "anvil/version.hpp"

namespace anvil::detail::ane {

ANVIL_INLINE std::optional<lowering_feature> feature_named(std::string_view name) {
    for (const auto& d : feature_descriptions)
        if (d.name == name) return d.feature;
    return std::nullopt;
}

ANVIL_INLINE std::string_view variant_name(lowering_variant v) {
    switch (v) {
        case lowering_variant::native:
            return "native";
        case lowering_variant::decomposed:
            return "decomposed";
        case lowering_variant::cpu:
            return "cpu";
    }
    return "?";
}

ANVIL_INLINE std::optional<lowering_variant> variant_named(std::string_view name) {
    if (name == "native") return lowering_variant::native;
    if (name == "decomposed") return lowering_variant::decomposed;
    if (name == "cpu") return lowering_variant::cpu;
    return std::nullopt;
}

ANVIL_INLINE std::string lowering_choices::summary() const {
    std::string text;
    for (const auto& d : feature_descriptions)
        text += message(text.empty() ? "" : ", ", d.name, "=", variant_name(of(d.feature)));
    return text;
}

ANVIL_INLINE lowering_choices default_choices(std::string_view architecture, int macos_major) {
    using f = lowering_feature;
    using v = lowering_variant;
    lowering_choices c;
    const bool old_or_unknown = architecture.empty() || is_h13_or_h14(architecture);
    c.set(f::matmul, old_or_unknown ? v::decomposed : v::native);
    c.set(f::max_pool, v::decomposed);
    c.set(f::avg_pool, v::decomposed);
    c.set(f::softmax, v::native);
    c.set(f::gelu, v::decomposed);
    c.set(f::rsqrt, v::decomposed);
    // reduce_mean and the transcendentals are reported unusable at dispatch on M5 / macOS 26.5 and verified
    // elsewhere (RUNTIME.md §0 #9): decomposed wherever a decomposition exists until a record shows the op
    // holds; log has none, and stays the op.
    c.set(f::reduce_mean, v::decomposed);
    c.set(f::exp, v::decomposed);
    c.set(f::log, v::native);
    c.set(f::sqrt, v::decomposed);
    c.set(f::io_width, v::decomposed);
    c.set(f::anchorless, v::cpu);
    c.set(f::palette, v::decomposed);
    // Sources conflict on M1 (RUNTIME.md §0 #15): one file per weight where single blobs are reported to
    // fail.
    c.set(f::weight_files, old_or_unknown ? v::decomposed : v::native);
    const bool before_macos_15 = macos_major > 0 && macos_major < 15;
    c.set(f::dialect, old_or_unknown || before_macos_15 ? v::decomposed : v::native);
    c.source = architecture.empty() ? std::string("conservative defaults (the chip is unknown)")
                                    : message("defaults for ", architecture);
    if (macos_major > 0) c.source += message(" on macOS ", macos_major);
    return c;
}

ANVIL_INLINE std::optional<lowering_variant> capability_record::best(lowering_feature f) const {
    const auto found = features.find(std::string(describe_feature(f).name));
    if (found == features.end() || found->second.empty()) return std::nullopt;
    for (const lowering_variant v : {lowering_variant::native, lowering_variant::decomposed}) {
        const auto outcome = found->second.find(std::string(variant_name(v)));
        if (outcome != found->second.end() && outcome->second.held) return v;
    }
    return lowering_variant::cpu;
}

ANVIL_INLINE std::string capability_record::digest() const {
    sha256 hash;
    hash.update(format).update("|").update(os_build).update("|").update(chip);
    for (const auto& [feature, variants] : features)
        for (const auto& [variant, outcome] : variants)
            hash.update(message("|", feature, ".", variant, "=", outcome.held ? "held" : "failed"));
    return hash.finish_hex();
}

ANVIL_INLINE json::value capability_record::to_json() const {
    json::object root;
    root["format"] = json::value(std::string(format));
    root["os_build"] = json::value(os_build);
    root["chip"] = json::value(chip);
    root["anvil"] = json::value(anvil_version);
    root["simulated"] = json::value(simulated);
    if (max_program_weight_bytes > 0)
        root["max_program_weight_bytes"] = json::value(static_cast<std::int64_t>(max_program_weight_bytes));
    json::object by_feature;
    for (const auto& [feature, variants] : features) {
        json::object by_variant;
        for (const auto& [variant, outcome] : variants) {
            json::object o;
            o["held"] = json::value(outcome.held);
            o["max_error"] = json::value(outcome.max_error);
            o["tolerance"] = json::value(outcome.tolerance);
            o["ms"] = json::value(outcome.ms);
            o["error"] = json::value(outcome.error);
            by_variant[variant] = json::value(std::move(o));
        }
        by_feature[feature] = json::value(std::move(by_variant));
    }
    root["features"] = json::value(std::move(by_feature));
    return json::value(std::move(root));
}

ANVIL_INLINE capability_record capability_record::parse(std::string_view text, const std::string& where) {
    json::value root;
    try {
        root = json::parse(text);
    } catch (const error& e) {
        throw format_error(message("ANE capability record '", where, "': ", e.what()));
    }
    const auto field = [&](const json::value& object, std::string_view key, json::kind kind,
                           std::string_view context) -> const json::value& {
        const json::value* found = object.find(key);
        if (found == nullptr || found->type() != kind) {
            throw format_error(message("ANE capability record '", where, "': ", context, " has no ",
                                       json::kind_name(kind), " \"", key, "\""));
        }
        return *found;
    };
    if (!root.is_object()) throw format_error(message("ANE capability record '", where, "': not an object"));
    capability_record record;
    const std::string& version = field(root, "format", json::kind::string, "the record").as_string();
    if (version != format) {
        throw format_error(message("ANE capability record '", where, "': format \"", version,
                                   "\", expected \"", format, "\" (run anvil selftest again)"));
    }
    record.os_build = field(root, "os_build", json::kind::string, "the record").as_string();
    record.chip = field(root, "chip", json::kind::string, "the record").as_string();
    record.anvil_version = field(root, "anvil", json::kind::string, "the record").as_string();
    record.simulated = field(root, "simulated", json::kind::boolean, "the record").as_bool();
    if (const json::value* limit = root.find("max_program_weight_bytes"); limit != nullptr) {
        if (!limit->is_integer() || limit->as_int() <= 0) {
            throw format_error(message("ANE capability record '", where,
                                       "': max_program_weight_bytes is not a positive integer"));
        }
        record.max_program_weight_bytes = static_cast<std::size_t>(limit->as_int());
    }
    for (const auto& [feature, variants] :
         field(root, "features", json::kind::object, "the record").as_object()) {
        if (!feature_named(feature)) {
            throw format_error(
                message("ANE capability record '", where, "': unknown feature \"", feature, "\""));
        }
        if (!variants.is_object()) {
            throw format_error(
                message("ANE capability record '", where, "': feature \"", feature, "\" is not an object"));
        }
        for (const auto& [variant, outcome] : variants.as_object()) {
            if (!variant_named(variant) || variant == "cpu") {
                throw format_error(message("ANE capability record '", where, "': feature \"", feature,
                                           "\" has unknown variant \"", variant, "\""));
            }
            const std::string context = message("\"", feature, ".", variant, "\"");
            if (!outcome.is_object()) {
                throw format_error(
                    message("ANE capability record '", where, "': ", context, " is not an object"));
            }
            probe_outcome o;
            o.held = field(outcome, "held", json::kind::boolean, context).as_bool();
            if (const json::value* e = outcome.find("max_error"); e != nullptr && e->is_number())
                o.max_error = e->as_double();
            if (const json::value* t = outcome.find("tolerance"); t != nullptr && t->is_number())
                o.tolerance = t->as_double();
            if (const json::value* m = outcome.find("ms"); m != nullptr && m->is_number())
                o.ms = m->as_double();
            if (const json::value* e = outcome.find("error"); e != nullptr && e->is_string())
                o.error = e->as_string();
            record.features[feature][variant] = std::move(o);
        }
    }
    return record;
}

ANVIL_INLINE std::string file_name_part(std::string_view text) {
    std::string out;
    for (const char c : text.substr(0, 80)) {
        const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                           c == '.' || c == '-';
        out += plain ? c : '_';
    }
    return out.empty() ? std::string("unknown") : out;
}

ANVIL_INLINE std::filesystem::path record_path(const std::filesystem::path& cache_directory,
                                               std::string_view os_build, std::string_view chip) {
    return cache_directory / message("capabilities-", file_name_part(os_build), "-",
                                     file_name_part(chip.empty() ? "unknown" : chip), ".json");
}

ANVIL_INLINE std::optional<capability_record> read_record(const std::filesystem::path& path,
                                                          std::string_view os_build, std::string_view chip) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return std::nullopt;
    std::ostringstream text;
    text << in.rdbuf();
    capability_record record = capability_record::parse(text.str(), path.string());
    if (record.os_build != os_build || record.chip != chip) {
        throw format_error(message("ANE capability record '", path.string(), "' is for OS build \"",
                                   record.os_build, "\" and chip \"", record.chip, "\", this machine is \"",
                                   os_build, "\" and \"", chip, "\" (run anvil selftest again)"));
    }
    return record;
}

ANVIL_INLINE lowering_choices choose_lowering(std::string_view architecture,
                                              const std::optional<capability_record>& record,
                                              const std::filesystem::path& record_file,
                                              const std::map<std::string, std::string>& overrides,
                                              int macos_major) {
    lowering_choices c = default_choices(architecture, macos_major);
    if (record) {
        for (const auto& d : feature_descriptions)
            if (const auto best = record->best(d.feature)) c.set(d.feature, *best);
        // A record of this OS build never shows ios18 holding before macOS 15; one written by hand might.
        if (macos_major > 0 && macos_major < 15)
            c.set(lowering_feature::dialect, lowering_variant::decomposed);
        c.source = message("the capability record ", record_file.string());
        c.digest = record->digest();
        c.max_program_weight_bytes = record->max_program_weight_bytes;
    }
    for (const auto& [name, variant] : overrides) {
        const auto feature = feature_named(name);
        if (!feature) {
            std::string known;
            for (const auto& d : feature_descriptions)
                known += message(known.empty() ? "" : ", ", d.name);
            throw error(
                message("compile: ane_lowering: unknown feature '", name, "' (features: ", known, ")"));
        }
        const auto v = variant_named(variant);
        if (!v) {
            throw error(message("compile: ane_lowering: feature '", name, "': variant '", variant,
                                "' is not native, decomposed or cpu"));
        }
        if (*v == lowering_variant::decomposed && describe_feature(*feature).decomposed.empty()) {
            throw error(message("compile: ane_lowering: feature '", name, "' has no decomposed variant"));
        }
        c.set(*feature, *v);
    }
    if (!overrides.empty()) c.source += " with compile_options::ane_lowering overrides";
    return c;
}

ANVIL_INLINE void record_program_weight_limit(const compile_options& options, const std::string& architecture,
                                              std::size_t bytes) {
    if (options.ane_capabilities == "none" || bytes == 0) return;
    const std::filesystem::path cache = cache_directory(options.cache_dir);
    const std::string chip = architecture.empty() ? "unknown" : architecture;
    const std::filesystem::path file = !options.ane_capabilities.empty()
                                           ? std::filesystem::path(options.ane_capabilities)
                                       : cache.empty() ? std::filesystem::path()
                                                       : record_path(cache, os_build(), chip);
    if (file.empty()) return;
    try {
        capability_record record;
        if (auto existing = read_record(file, os_build(), chip)) {
            record = std::move(*existing);
        } else {
            record.os_build = os_build();
            record.chip = chip;
            record.anvil_version = version_string;
            record.simulated = runtime::get().simulated();
        }
        if (record.max_program_weight_bytes != 0 && record.max_program_weight_bytes <= bytes) return;
        record.max_program_weight_bytes = bytes;
        std::error_code code;
        std::filesystem::create_directories(file.parent_path(), code);
        std::filesystem::path staging = file;
        staging += message(".", std::this_thread::get_id(), ".tmp");
        {
            std::ofstream out(staging, std::ios::binary | std::ios::trunc);
            out << json::dump(record.to_json(), 2) << "\n";
            if (!out) return;
        }
        std::filesystem::rename(staging, file, code);  // atomic: readers see the old record or the new one
    } catch (const error&) {
        // a foreign or malformed record stays as it is: reading it reports that at the next compile
    }
}

ANVIL_INLINE lowering_choices choices_for(const compile_options& options, const std::string& architecture,
                                          int macos_major) {
    std::optional<capability_record> record;
    std::filesystem::path file;
    if (options.ane_capabilities != "none") {
        const std::filesystem::path cache = cache_directory(options.cache_dir);
        if (!options.ane_capabilities.empty()) {
            file = options.ane_capabilities;
        } else if (!cache.empty()) {
            file = record_path(cache, os_build(), architecture.empty() ? "unknown" : architecture);
        }
        if (!file.empty())
            record = read_record(file, os_build(), architecture.empty() ? "unknown" : architecture);
        if (!record && !options.ane_capabilities.empty()) {
            throw io_error(message("compile: ane_capabilities: cannot read the capability record '",
                                   file.string(), "'"));
        }
    }
    return choose_lowering(architecture, record, file, options.ane_lowering, macos_major);
}

}  // namespace anvil::detail::ane
