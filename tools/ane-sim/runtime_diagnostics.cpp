// anvil's ANE simulator: the diagnostics tests read (README.md "Diagnostics") and the process-wide rules the
// MIL part reads at compile time.
#include <charconv>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "runtime.hpp"

namespace anvil_sim {

rules& current_rules() {
    return sim().options;
}

namespace {

bool parse_integer(std::string_view text, std::int64_t minimum, std::int64_t& value) {
    std::int64_t parsed = 0;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), parsed);
    if (error != std::errc{} || end != text.data() + text.size() || parsed < minimum) return false;
    value = parsed;
    return true;
}

bool parse_mode(std::string_view text, bool allow_warn, rule_mode& mode) {
    if (text == "error")
        mode = rule_mode::error;
    else if (text == "allow")
        mode = rule_mode::allow;
    else if (text == "warn" && allow_warn)
        mode = rule_mode::warn;
    else
        return false;
    return true;
}

bool is_architecture_name(std::string_view text) {
    if (text.empty() || text.size() > 16) return false;
    for (char c : text)
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) return false;
    return true;
}

bool apply_option(rules& options, std::string_view name, std::string_view value) {
    const std::map<std::string_view, std::int64_t*> integers = {
        {"compile_budget", &options.compile_budget},
        {"max_live_programs", &options.max_live_programs},
        {"max_dimension", &options.max_dimension},
        {"min_surface_bytes", &options.min_surface_bytes},
        {"softmax_max_axis", &options.softmax_max_axis},
        {"blobfile_limit", &options.blobfile_limit},
        {"inject_load_failures", &options.inject_load_failures},
    };
    if (auto found = integers.find(name); found != integers.end())
        return parse_integer(value, 0, *found->second);
    const std::map<std::string_view, std::pair<rule_mode*, bool>> modes = {
        {"conv_bias", {&options.conv_bias, false}},
        {"const_broadcast", {&options.const_broadcast, false}},
        {"named_matmul_flags", {&options.named_matmul_flags, false}},
        {"gelu", {&options.gelu, true}},
        {"rsqrt", {&options.rsqrt, true}},
        {"reduce_prod", {&options.reduce_prod, true}},
    };
    if (auto found = modes.find(name); found != modes.end())
        return parse_mode(value, found->second.second, *found->second.first);
    if (name == "equal_surface_sizes") {
        if (value != "0" && value != "1") return false;
        options.equal_surface_sizes = value == "1";
        return true;
    }
    if (name == "architecture") {
        if (!is_architecture_name(value)) return false;
        options.architecture = std::string(value);
        return true;
    }
    return false;
}

}  // namespace

}  // namespace anvil_sim

using namespace anvil_sim;

ANVIL_SIM_EXPORT long anvil_ane_sim_counter(const char* name) {
    if (name == nullptr) return -1;
    lock_guard lock(sim().mutex);
    state& s = sim();
    std::string_view wanted = name;
    if (wanted == "live_objects") {
        long live = 0;
        for (const object* o : s.objects)
            if (o->alive && !o->immortal) ++live;
        return live;
    }
    if (wanted == "live_programs") return s.live_programs;
    if (wanted == "violations") return s.violation_count;
    for (std::string_view known : {"compiles", "compile_cache_hits", "loads", "evaluations", "bytes_in",
                                   "bytes_out", "bytes_changed_in"})
        if (wanted == known) {
            auto found = s.counters.find(wanted);
            return found == s.counters.end() ? 0 : found->second;
        }
    return -1;
}

ANVIL_SIM_EXPORT const char* anvil_ane_sim_violations() {
    lock_guard lock(sim().mutex);
    state& s = sim();
    s.returned_violations = s.violations;
    return s.returned_violations.c_str();
}

ANVIL_SIM_EXPORT const char* anvil_ane_sim_live_objects() {
    lock_guard lock(sim().mutex);
    state& s = sim();
    std::map<std::string, long> by_class;
    for (const object* o : s.objects)
        if (o->alive && !o->immortal) ++by_class[o->isa->name];
    s.returned_live_objects.clear();
    for (const auto& [name, count] : by_class)
        s.returned_live_objects += name + " " + std::to_string(count) + "\n";
    return s.returned_live_objects.c_str();
}

ANVIL_SIM_EXPORT void anvil_ane_sim_reset() {
    lock_guard lock(sim().mutex);
    state& s = sim();
    s.violations.clear();
    s.violation_count = 0;
    s.warnings_seen.clear();
    s.counters.clear();
}

ANVIL_SIM_EXPORT int anvil_ane_sim_set_option(const char* name, const char* value) {
    if (name == nullptr || value == nullptr) return -1;
    lock_guard lock(sim().mutex);
    return apply_option(sim().options, name, value) ? 0 : -1;
}
