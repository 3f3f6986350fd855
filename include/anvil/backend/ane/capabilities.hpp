// anvil: what this Neural Engine accepts. Sources disagree about many ops per chip and OS (RUNTIME.md §0), so
// each op family that has several lowerings has a *feature* with up to two variants — native (the op as MIL
// spells it) and decomposed (anvil's rewrite into ops every chip takes) — and otherwise runs on the CPU. The
// variant used comes from the capability record `anvil selftest` writes for this (OS build, chip) after it
// probed every variant on the device and checked its numbers against the CPU; without a record it comes from
// the conservative defaults of RUNTIME.md §0 for the chip (the most conservative when the chip is unknown).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

#include "anvil/backend/ane/program_cache.hpp"
#include "anvil/backend/program.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/json.hpp"
#include "anvil/core/sha256.hpp"

namespace anvil::detail::ane {

enum class lowering_feature : std::uint8_t {
    matmul,       // products of two computed tensors: matmul, attention's q k^T and weights v
    max_pool,     // max_pool2d
    avg_pool,     // avg_pool2d
    softmax,      // softmax (axes up to softmax_max_axis; longer ones are always decomposed)
    gelu,         // gelu (erf form)
    rsqrt,        // rsqrt
    reduce_mean,  // reduce_mean (and the global average pool)
    exp,          // exp
    log,          // log
    sqrt,         // sqrt
    io_width,     // native: inputs and outputs at their own width; decomposed: padded to a multiple of 32
    anchorless,   // native: programs with no conv or matmul are allowed; cpu: such segments run on the CPU
    dialect,      // native: program(1.3)/ios18; decomposed: program(1.0)/ios16
};
inline constexpr std::size_t feature_count = 13;

enum class lowering_variant : std::uint8_t { native, decomposed, cpu };

struct feature_description {
    lowering_feature feature;
    std::string_view name;
    std::string_view native;
    std::string_view decomposed;  // empty: there is no decomposition (the fallback is the CPU)
};

inline constexpr std::array<feature_description, feature_count> feature_descriptions{{
    {lowering_feature::matmul, "matmul", "the matmul op",
     "a broadcast mul and reduce_sum (no matmul: it fails on M1/M2, RUNTIME.md §0 #4)"},
    {lowering_feature::max_pool, "max_pool", "the max_pool op",
     "strided slices and maximum (max_pool is reported rejected, RUNTIME.md §0 #5)"},
    {lowering_feature::avg_pool, "avg_pool", "the avg_pool op",
     "a depthwise conv with constant weights (avg_pool is reported rejected, RUNTIME.md §0 #5)"},
    {lowering_feature::softmax, "softmax", "the softmax op", "reduce_max, sub, exp, reduce_sum, real_div"},
    {lowering_feature::gelu, "gelu", "the gelu op",
     "0.5 x (1 + erf(x / sqrt(2))) (gelu is reported rejected, RUNTIME.md §6)"},
    {lowering_feature::rsqrt, "rsqrt", "the rsqrt op with a positive epsilon",
     "pow(x, -0.5) (rsqrt is reported rejected, RUNTIME.md §6)"},
    {lowering_feature::reduce_mean, "reduce_mean", "the reduce_mean op", "reduce_sum times 1/n"},
    {lowering_feature::exp, "exp", "the exp op", "pow(e, x)"},
    {lowering_feature::log, "log", "the log op with a positive epsilon", ""},
    {lowering_feature::sqrt, "sqrt", "the sqrt op", "pow(x, 0.5)"},
    {lowering_feature::io_width, "io_width", "inputs and outputs at their own width",
     "the innermost dimension of every input and output padded to a multiple of 32 on the host and sliced "
     "inside the program (RUNTIME.md §0 #3)"},
    {lowering_feature::anchorless, "anchorless", "programs with no conv or matmul", ""},
    {lowering_feature::dialect, "dialect", "program(1.3) with ios18 ops",
     "program(1.0) with ios16 ops and verbose scalars (RUNTIME.md §4)"},
}};

[[nodiscard]] inline const feature_description& describe_feature(lowering_feature f) {
    return feature_descriptions.at(static_cast<std::size_t>(f));
}

[[nodiscard]] inline std::optional<lowering_feature> feature_named(std::string_view name) {
    for (const auto& d : feature_descriptions)
        if (d.name == name) return d.feature;
    return std::nullopt;
}

[[nodiscard]] inline std::string_view variant_name(lowering_variant v) {
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

[[nodiscard]] inline std::optional<lowering_variant> variant_named(std::string_view name) {
    if (name == "native") return lowering_variant::native;
    if (name == "decomposed") return lowering_variant::decomposed;
    if (name == "cpu") return lowering_variant::cpu;
    return std::nullopt;
}

// M1 (h13) and M2 (h14): no matmul or SDPA, program(1.0)/ios16 only (RUNTIME.md §0 #4, §4).
[[nodiscard]] inline bool is_h13_or_h14(std::string_view architecture) {
    return architecture.starts_with("h13") || architecture.starts_with("h14");
}

// The variant of each feature a program is lowered with, and where that choice came from.
struct lowering_choices {
    std::array<lowering_variant, feature_count> chosen{};
    std::string source;  // "defaults for h16g", "record /path/capabilities-...json", ...
    std::string digest;  // of the record's outcomes; empty without a record (part of the program cache key)

    [[nodiscard]] lowering_variant of(lowering_feature f) const {
        return chosen.at(static_cast<std::size_t>(f));
    }
    void set(lowering_feature f, lowering_variant v) { chosen.at(static_cast<std::size_t>(f)) = v; }

    // "matmul=decomposed, max_pool=decomposed, ..." for placement reports.
    [[nodiscard]] std::string summary() const {
        std::string text;
        for (const auto& d : feature_descriptions)
            text += message(text.empty() ? "" : ", ", d.name, "=", variant_name(of(d.feature)));
        return text;
    }
};

// The conservative defaults of RUNTIME.md §0 for a chip ("" when unknown: the most conservative set).
[[nodiscard]] inline lowering_choices default_choices(std::string_view architecture) {
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
    c.set(f::reduce_mean, v::native);
    c.set(f::exp, v::native);
    c.set(f::log, v::native);
    c.set(f::sqrt, v::native);
    c.set(f::io_width, v::decomposed);
    c.set(f::anchorless, v::cpu);
    c.set(f::dialect, old_or_unknown ? v::decomposed : v::native);
    c.source = architecture.empty() ? std::string("conservative defaults (the chip is unknown)")
                                    : message("defaults for ", architecture);
    return c;
}

// One probe of one variant on the device: whether it compiled, loaded, evaluated and matched the CPU.
struct probe_outcome {
    bool held = false;
    double max_error = 0.0;
    double tolerance = 0.0;
    double ms = 0.0;
    std::string error;  // why it did not hold
};

// What `anvil selftest` found on one (OS build, chip): outcomes by feature name, then variant name.
struct capability_record {
    static constexpr std::string_view format = "anvil-ane-capabilities/1";
    std::string os_build;
    std::string chip;
    std::string anvil_version;
    bool simulated = false;
    std::map<std::string, std::map<std::string, probe_outcome>> features;

    // The best variant that held: native, then decomposed, else the CPU; nullopt when never probed.
    [[nodiscard]] std::optional<lowering_variant> best(lowering_feature f) const {
        const auto found = features.find(std::string(describe_feature(f).name));
        if (found == features.end() || found->second.empty()) return std::nullopt;
        for (const lowering_variant v : {lowering_variant::native, lowering_variant::decomposed}) {
            const auto outcome = found->second.find(std::string(variant_name(v)));
            if (outcome != found->second.end() && outcome->second.held) return v;
        }
        return lowering_variant::cpu;
    }

    // A digest of the outcomes (what held, not the timings), so re-running the self-test with the same
    // results keeps every cached program valid, and a different result compiles afresh.
    [[nodiscard]] std::string digest() const {
        sha256 hash;
        hash.update(format).update("|").update(os_build).update("|").update(chip);
        for (const auto& [feature, variants] : features)
            for (const auto& [variant, outcome] : variants)
                hash.update(message("|", feature, ".", variant, "=", outcome.held ? "held" : "failed"));
        return hash.finish_hex();
    }

    [[nodiscard]] json::value to_json() const {
        json::object root;
        root["format"] = json::value(std::string(format));
        root["os_build"] = json::value(os_build);
        root["chip"] = json::value(chip);
        root["anvil"] = json::value(anvil_version);
        root["simulated"] = json::value(simulated);
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

    // Parses a record; a malformed one is an error naming the file and what is wrong.
    [[nodiscard]] static capability_record parse(std::string_view text, const std::string& where) {
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
        if (!root.is_object())
            throw format_error(message("ANE capability record '", where, "': not an object"));
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
        for (const auto& [feature, variants] :
             field(root, "features", json::kind::object, "the record").as_object()) {
            if (!feature_named(feature)) {
                throw format_error(
                    message("ANE capability record '", where, "': unknown feature \"", feature, "\""));
            }
            if (!variants.is_object()) {
                throw format_error(message("ANE capability record '", where, "': feature \"", feature,
                                           "\" is not an object"));
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
};

// A file-name-safe spelling of the OS build and chip ("Linux 6.1.0-27 #1 SMP" -> "Linux_6.1.0-27__1_SMP").
[[nodiscard]] inline std::string file_name_part(std::string_view text) {
    std::string out;
    for (const char c : text.substr(0, 80)) {
        const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                           c == '.' || c == '-';
        out += plain ? c : '_';
    }
    return out.empty() ? std::string("unknown") : out;
}

// <cache directory>/capabilities-<os build>-<chip>.json
[[nodiscard]] inline std::filesystem::path record_path(const std::filesystem::path& cache_directory,
                                                       std::string_view os_build, std::string_view chip) {
    return cache_directory / message("capabilities-", file_name_part(os_build), "-",
                                     file_name_part(chip.empty() ? "unknown" : chip), ".json");
}

// The record at `path`, nullopt when there is none; a malformed or foreign one (another OS build or chip) is
// an error, so a stale record never silently picks variants.
[[nodiscard]] inline std::optional<capability_record> read_record(const std::filesystem::path& path,
                                                                  std::string_view os_build,
                                                                  std::string_view chip) {
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

// The defaults for the chip, replaced feature by feature by what the record says held, then by explicit
// overrides (compile_options::ane_lowering: feature name -> variant name).
[[nodiscard]] inline lowering_choices choose_lowering(std::string_view architecture,
                                                      const std::optional<capability_record>& record,
                                                      const std::filesystem::path& record_file,
                                                      const std::map<std::string, std::string>& overrides) {
    lowering_choices c = default_choices(architecture);
    if (record) {
        for (const auto& d : feature_descriptions)
            if (const auto best = record->best(d.feature)) c.set(d.feature, *best);
        c.source = message("the capability record ", record_file.string());
        c.digest = record->digest();
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

// The capability record for this OS build and chip, if `anvil selftest` wrote one, decides each op's
// lowering; otherwise the conservative defaults for the chip do. compile_options::ane_lowering overrides come
// last.
inline lowering_choices choices_for(const compile_options& options, const std::string& architecture) {
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
    return choose_lowering(architecture, record, file, options.ane_lowering);
}

}  // namespace anvil::detail::ane
