// `anvil cache`: the compiled-program cache as a user sees it (backend/cache.hpp) — what it holds, its size,
// and pruning or clearing it.
#pragma once

#include "arguments.hpp"
#include "info.hpp"
#include "model_commands.hpp"

#include <anvil/anvil.hpp>
#include <anvil/backend/ane/ane_framework.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace anvil::cli {

inline constexpr const char* cache_usage =
    "usage: anvil cache [list|size|prune|clear] [--dir DIR] [--json]\n"
    "       anvil cache prune [--max-bytes N] [--older-than DAYS] [--stale]\n"
    "       anvil cache clear [--records]\n"
    "\n"
    "The cache of compiled Neural Engine programs and Core ML models (and the capability records\n"
    "`anvil selftest` writes) in DIR: --dir, else $ANVIL_CACHE_DIR, else ~/Library/Caches/anvil or\n"
    "~/.cache/anvil.\n"
    "  list    (the default) each entry, most recently used first: kind, size, last use, the model it was\n"
    "          compiled from, its key and the key's parts (anvil version, OS build, chip, record digest)\n"
    "  size    the total, and per model\n"
    "  prune   removes least recently used programs until the programs fit in --max-bytes N (a byte\n"
    "          count, or with a K, M or G suffix), those not used for --older-than DAYS, and with --stale\n"
    "          every entry compiled by another anvil version or for another OS build or chip, or whose\n"
    "          manifest is malformed (a capability record of another OS build or chip too); with none of\n"
    "          these, the automatic cap ($ANVIL_CACHE_MAX_BYTES, else 4G). Prints what it removed\n"
    "  clear   removes every program; capability records too with --records\n"
    "Every compile applies the cap of compile_options::cache_max_bytes, else $ANVIL_CACHE_MAX_BYTES\n"
    "(\"none\": no cap), else 4G, removing least recently used programs; a cache hit updates an entry's\n"
    "last use. Entries another process is compiling or loading are never removed (prune and clear report\n"
    "them as in use), and an unfinished entry (an interrupted or refused compile) is never listed or\n"
    "loaded; prune and clear remove it.\n"
    "\n"
    "--json (stable formats; times are UTC, ISO 8601 with milliseconds; sizes in bytes):\n"
    "  an entry: {\"kind\": \"ane-program\"|\"coreml-model\"|\"capability-record\", \"key\", \"path\",\n"
    "            \"model\", \"anvil_version\", \"os_build\", \"chip\", \"record_digest\", \"bytes\",\n"
    "            \"created\", \"last_use\", \"problem\" (\"\" unless the manifest is malformed)}\n"
    "  list:   {\"directory\", \"entries\": [entry...], \"total_bytes\"}\n"
    "  size:   {\"directory\", \"total_bytes\", \"program_bytes\", \"record_bytes\", \"entries\",\n"
    "           \"models\": [{\"model\", \"bytes\", \"entries\"}...] (largest first)}\n"
    "  prune, clear: {\"directory\", \"removed\": [entry...], \"removed_bytes\", \"in_use\": [entry...],\n"
    "           \"remaining_bytes\" (the programs left)}\n";

namespace detail_cache {

inline json::value entry_json(const cache::entry& e) {
    json::object out;
    out["kind"] = json::value(cache::kind_name(e.kind));
    out["key"] = json::value(e.key);
    out["path"] = json::value(e.path.string());
    out["model"] = json::value(e.model);
    out["anvil_version"] = json::value(e.anvil_version);
    out["os_build"] = json::value(e.os_build);
    out["chip"] = json::value(e.chip);
    out["record_digest"] = json::value(e.record_digest);
    out["bytes"] = json::value(e.bytes);
    out["created"] = json::value(detail::cache_files::iso_time(e.created));
    out["last_use"] = json::value(detail::cache_files::iso_time(e.last_use));
    out["problem"] = json::value(e.problem);
    return json::value(std::move(out));
}

inline json::value entries_json(const std::vector<cache::entry>& list) {
    json::array out;
    for (const auto& e : list)
        out.push_back(entry_json(e));
    return json::value(std::move(out));
}

inline std::string model_of(const cache::entry& e) {
    return e.model.empty() ? "(unnamed graph)" : e.model;
}

inline void print_entry(const cache::entry& e, const char* lead) {
    std::printf("%s%-17s %10s  %s  %s\n", lead, std::string(cache::kind_name(e.kind)).c_str(),
                detail_info::human_bytes(e.bytes).c_str(), detail::cache_files::iso_time(e.last_use).c_str(),
                model_of(e).c_str());
    if (e.kind == cache::entry_kind::capability_record && e.problem.empty()) {
        std::printf("%s    %s: OS %s, chip %s\n", lead, e.key.c_str(), e.os_build.c_str(), e.chip.c_str());
        return;
    }
    if (!e.problem.empty()) {
        std::printf("%s    %s\n", lead, e.problem.c_str());
        return;
    }
    std::printf("%s    key %s: anvil %s, OS %s%s%s%s%s\n", lead, e.key.substr(0, 16).c_str(),
                e.anvil_version.c_str(), e.os_build.c_str(), e.chip.empty() ? "" : ", chip ", e.chip.c_str(),
                e.record_digest.empty() ? "" : ", record ", e.record_digest.substr(0, 12).c_str());
}

// This machine's Neural Engine architecture ("" when there is none or it is unknown), for --stale.
inline std::string this_chip(const char* argv0) {
    if (locate_neural_engine(argv0).empty()) return {};
    try {
        return detail::ane::query_device().architecture;
    } catch (const std::exception&) {
        return {};
    }
}

inline void print_removal(const std::filesystem::path& dir, const cache::removal& r, bool as_json) {
    if (as_json) {
        json::object out;
        out["directory"] = json::value(dir.string());
        out["removed"] = entries_json(r.removed);
        out["removed_bytes"] = json::value(r.removed_bytes);
        out["in_use"] = entries_json(r.in_use);
        out["remaining_bytes"] = json::value(r.remaining_bytes);
        std::printf("%s\n", json::dump(json::value(std::move(out)), 2).c_str());
        return;
    }
    for (const auto& e : r.removed)
        print_entry(e, "removed ");
    for (const auto& e : r.in_use)
        print_entry(e, "in use, kept ");
    std::printf("removed %zu entr%s (%s); %s of programs left in %s\n", r.removed.size(),
                r.removed.size() == 1 ? "y" : "ies", detail_info::human_bytes(r.removed_bytes).c_str(),
                detail_info::human_bytes(r.remaining_bytes).c_str(), dir.string().c_str());
}

inline std::uintmax_t byte_count(const arguments& args, std::string_view name) {
    const std::string text = *args.value(name);
    const auto parsed = cache::parse_bytes(text);
    if (!parsed)
        throw usage_error(detail::message(
            "cache prune: --", name, " expects a byte count (e.g. 1000000, 512M or 4G), got '", text, "'"));
    return *parsed;
}

}  // namespace detail_cache

inline int run_cache(const std::vector<std::string_view>& argv, const char* argv0) {
    for (const auto a : argv) {
        if (a == "--help" || a == "-h") {
            std::fputs(cache_usage, stdout);
            return 0;
        }
    }
    std::string_view command = "list";
    std::vector<std::string_view> rest = argv;
    if (!rest.empty() && !rest.front().starts_with("--")) {
        command = rest.front();
        rest.erase(rest.begin());
    }
    if (command != "list" && command != "size" && command != "prune" && command != "clear") {
        throw usage_error(
            detail::message("cache: unknown subcommand '", command, "' (list, size, prune or clear)"));
    }
    std::vector<option_spec> spec = {{"json", false}, {"dir", true}};
    if (command == "prune")
        spec.insert(spec.end(), {{"max-bytes", true}, {"older-than", true}, {"stale", false}});
    if (command == "clear") spec.push_back({"records", false});
    const std::string name = detail::message("cache ", command);
    const arguments args(name, rest, spec);
    if (!args.positional().empty())
        throw usage_error(detail::message(name, ": unexpected argument '", args.positional().front(), "'"));
    const bool as_json = args.flag("json");

    // Checked before the directory, so a mistyped option is a usage error wherever the cache is.
    cache::prune_options prune;
    if (command == "prune") {
        if (args.value("max-bytes")) prune.max_bytes = detail_cache::byte_count(args, "max-bytes");
        if (const auto days = args.value("older-than")) {
            char* end = nullptr;
            const double value = std::strtod(days->c_str(), &end);
            if (days->empty() || end != days->c_str() + days->size() || !std::isfinite(value) || value < 0 ||
                value > 1e6) {
                throw usage_error(detail::message(
                    "cache prune: --older-than expects a number of days (e.g. 30 or 0.5), got '", *days,
                    "'"));
            }
            prune.older_than = std::chrono::seconds(static_cast<std::int64_t>(std::llround(value * 86400.0)));
        }
        prune.stale = args.flag("stale");
        if (!prune.max_bytes && !prune.older_than && !prune.stale) prune.max_bytes = cache::max_bytes();
        if (prune.stale) prune.chip = detail_cache::this_chip(argv0);
    }

    const std::filesystem::path dir = cache::directory(args.value("dir").value_or(""));
    if (dir.empty()) {
        throw error(
            detail::message(name,
                            ": no cache directory (caching is off: $ANVIL_CACHE_DIR or --dir is \"none\", "
                            "or no home directory is known)"));
    }
    std::error_code code;
    if (!std::filesystem::is_directory(dir, code)) {
        throw error(
            detail::message(name, ": the cache directory '", dir.string(),
                            "' does not exist (nothing was compiled into it; --dir or $ANVIL_CACHE_DIR "
                            "chooses another)"));
    }

    if (command == "prune" || command == "clear") {
        const cache::removal r =
            command == "prune" ? cache::prune(dir, prune) : cache::clear(dir, args.flag("records"));
        detail_cache::print_removal(dir, r, as_json);
        return 0;
    }
    const std::vector<cache::entry> all = cache::entries(dir);
    for (const auto& e : all)
        if (!e.problem.empty())
            detail::warn(detail::message(e.problem, " ('anvil cache prune --stale' removes it)"));
    std::uintmax_t total = 0;
    std::uintmax_t records = 0;
    for (const auto& e : all) {
        total += e.bytes;
        if (e.kind == cache::entry_kind::capability_record) records += e.bytes;
    }
    if (command == "list") {
        if (as_json) {
            json::object out;
            out["directory"] = json::value(dir.string());
            out["entries"] = detail_cache::entries_json(all);
            out["total_bytes"] = json::value(total);
            std::printf("%s\n", json::dump(json::value(std::move(out)), 2).c_str());
            return 0;
        }
        for (const auto& e : all)
            detail_cache::print_entry(e, "");
        std::printf("%zu entr%s, %s in %s\n", all.size(), all.size() == 1 ? "y" : "ies",
                    detail_info::human_bytes(total).c_str(), dir.string().c_str());
        return 0;
    }
    // size
    std::map<std::string, std::pair<std::uintmax_t, std::size_t>> by_model;
    for (const auto& e : all) {
        auto& [bytes, count] = by_model[e.model];
        bytes += e.bytes;
        ++count;
    }
    std::vector<std::pair<std::string, std::pair<std::uintmax_t, std::size_t>>> models(by_model.begin(),
                                                                                       by_model.end());
    std::stable_sort(models.begin(), models.end(),
                     [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
    if (as_json) {
        json::object out;
        out["directory"] = json::value(dir.string());
        out["total_bytes"] = json::value(total);
        out["program_bytes"] = json::value(total - records);
        out["record_bytes"] = json::value(records);
        out["entries"] = json::value(all.size());
        json::array list;
        for (const auto& [model, totals] : models) {
            json::object m;
            m["model"] = json::value(model);
            m["bytes"] = json::value(totals.first);
            m["entries"] = json::value(totals.second);
            list.push_back(json::value(std::move(m)));
        }
        out["models"] = json::value(std::move(list));
        std::printf("%s\n", json::dump(json::value(std::move(out)), 2).c_str());
        return 0;
    }
    std::printf("%s in %s (%zu entr%s: %s of programs, %s of capability records)\n",
                detail_info::human_bytes(total).c_str(), dir.string().c_str(), all.size(),
                all.size() == 1 ? "y" : "ies", detail_info::human_bytes(total - records).c_str(),
                detail_info::human_bytes(records).c_str());
    for (const auto& [model, totals] : models)
        std::printf("  %10s  %zu entr%s  %s\n", detail_info::human_bytes(totals.first).c_str(), totals.second,
                    totals.second == 1 ? "y" : "ies", model.empty() ? "(unnamed graph)" : model.c_str());
    return 0;
}

}  // namespace anvil::cli
