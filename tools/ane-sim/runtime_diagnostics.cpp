// anvil's ANE simulator: the diagnostics tests read (README.md "Diagnostics") and the process-wide rules the
// MIL part reads at compile time, set one by one or from ANVIL_ANE_SIM_OPTIONS when the state is created.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

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

// One of two spellings: `on` for true, `off` for false.
bool parse_flag(std::string_view text, std::string_view on, std::string_view off, bool& flag) {
    if (text != on && text != off) return false;
    flag = text == on;
    return true;
}

// An op name for the fail_*_op options: empty (off) or an op of mil_ops.json.
bool parse_op(std::string_view text, std::string& op) {
    if (!text.empty() && !is_known_op(text)) return false;
    op = std::string(text);
    return true;
}

enum class option_result : std::uint8_t { applied, unknown_name, bad_value };

option_result apply_option(rules& options, std::string_view name, std::string_view value) {
    const auto result = [](bool ok) { return ok ? option_result::applied : option_result::bad_value; };
    const std::map<std::string_view, std::int64_t*> integers = {
        {"compile_budget", &options.compile_budget},
        {"max_live_programs", &options.max_live_programs},
        {"max_dimension", &options.max_dimension},
        {"min_surface_bytes", &options.min_surface_bytes},
        {"softmax_max_axis", &options.softmax_max_axis},
        {"blobfile_limit", &options.blobfile_limit},
        {"inject_load_failures", &options.inject_load_failures},
        {"compile_delay_ms", &options.compile_delay_ms},
        {"coreml_fail_loads", &options.coreml_fail_loads},
        {"max_program_weight_bytes", &options.max_program_weight_bytes},
    };
    if (auto found = integers.find(name); found != integers.end())
        return result(parse_integer(value, 0, *found->second));
    const std::map<std::string_view, std::pair<rule_mode*, bool>> modes = {
        {"conv_bias", {&options.conv_bias, false}},
        {"const_broadcast", {&options.const_broadcast, false}},
        {"named_matmul_flags", {&options.named_matmul_flags, false}},
        {"gelu", {&options.gelu, true}},
        {"rsqrt", {&options.rsqrt, true}},
        {"reduce_prod", {&options.reduce_prod, true}},
        {"io_width", {&options.io_width, false}},
        {"pooling", {&options.pooling, false}},
        {"anchor", {&options.anchor, false}},
        {"einsum_m1_m2", {&options.einsum_m1_m2, false}},
        {"transcendentals", {&options.transcendentals, false}},
        {"sub_byte_constexpr", {&options.sub_byte_constexpr, false}},
    };
    if (auto found = modes.find(name); found != modes.end())
        return result(parse_mode(value, found->second.second, *found->second.first));
    const std::map<std::string_view, std::string*> ops = {
        {"fail_compile_op", &options.fail_compile_op}, {"fail_load_op", &options.fail_load_op},
        {"fail_eval_op", &options.fail_eval_op},       {"hang_eval_op", &options.hang_eval_op},
        {"wrong_eval_op", &options.wrong_eval_op},
    };
    if (auto found = ops.find(name); found != ops.end()) return result(parse_op(value, *found->second));
    if (name == "equal_surface_sizes")
        return result(parse_flag(value, "1", "0", options.equal_surface_sizes));
    if (name == "live_names") return result(parse_flag(value, "present", "omit", options.live_names));
    if (name == "device_info") return result(parse_flag(value, "present", "absent", options.device_info));
    if (name == "compute_plan") return result(parse_flag(value, "present", "absent", options.compute_plan));
    if (name == "states") return result(parse_flag(value, "present", "absent", options.states));
    if (name == "identity") return result(parse_flag(value, "text", "weights", options.identity_by_text));
    if (name == "macos") {  // RUNTIME.md §0b #18: macOS 14 has no ios18 dialect and no MLState
        std::int64_t major = 0;
        if (!parse_integer(value, 11, major) || major > 99) return option_result::bad_value;
        options.macos = major;
        options.states = major >= 15;
        return option_result::applied;
    }
    if (name == "plane_stride_pad") {
        std::int64_t pad = 0;
        if (!parse_integer(value, 0, pad) || pad % 64 != 0) return option_result::bad_value;
        options.plane_stride_pad = pad;
        return option_result::applied;
    }
    if (name == "architecture") {
        if (!is_architecture_name(value)) return option_result::bad_value;
        options.architecture = std::string(value);
        return option_result::applied;
    }
    if (name == "profile") {  // RUNTIME.md §0 #9: M5 / macOS 26.5 compiles and loads them, then fails
        if (value == "m5-macos26") {
            options.transcendentals = rule_mode::error;
            options.architecture = "h17g";
        } else if (value == "default") {
            options.transcendentals = rule_mode::allow;
            options.architecture = rules{}.architecture;
        } else {
            return option_result::bad_value;
        }
        options.profile = std::string(value);
        return option_result::applied;
    }
    return option_result::unknown_name;
}

std::string_view trimmed(std::string_view text) {
    while (!text.empty() && (text.front() == ' ' || text.front() == '\t'))
        text.remove_prefix(1);
    while (!text.empty() && (text.back() == ' ' || text.back() == '\t'))
        text.remove_suffix(1);
    return text;
}

// A problem with ANVIL_ANE_SIM_OPTIONS: one line on stderr (nothing can be thrown to the caller, which only
// called dlopen) and a violation that anvil_ane_sim_reset keeps, so the process's tests notice.
void environment_problem(const std::string& what) {
    const std::string line = "anvil-ane-sim: ANVIL_ANE_SIM_OPTIONS: " + what;
    std::fprintf(stderr, "%s\n", line.c_str());
    sim().configuration_violations += line + "\n";
    record_violation(line);
}

// `name=value,name=value`; `profile` first, so an `architecture` in the same list wins over the profile's.
void apply_option_list(std::string_view list) {
    std::vector<std::pair<std::string_view, std::string_view>> entries;
    while (!list.empty()) {
        const std::size_t comma = list.find(',');
        const std::string_view entry = trimmed(list.substr(0, comma));
        list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
        if (entry.empty()) continue;
        const std::size_t equals = entry.find('=');
        if (equals == std::string_view::npos) {
            environment_problem("'" + std::string(entry) + "' is not name=value");
            continue;
        }
        entries.emplace_back(trimmed(entry.substr(0, equals)), trimmed(entry.substr(equals + 1)));
    }
    std::stable_partition(entries.begin(), entries.end(), [](const auto& e) { return e.first == "profile"; });
    for (const auto& [name, value] : entries) {
        const option_result applied = apply_option(sim().options, name, value);
        if (applied == option_result::unknown_name)
            environment_problem("unknown option '" + std::string(name) + "'");
        else if (applied == option_result::bad_value)
            environment_problem("bad value '" + std::string(value) + "' for option '" + std::string(name) +
                                "'");
    }
}

}  // namespace

void apply_environment_options() {
    if (const char* list = std::getenv("ANVIL_ANE_SIM_OPTIONS"); list != nullptr) apply_option_list(list);
}

}  // namespace anvil_sim

using namespace anvil_sim;

ANVIL_SIM_EXPORT long anvil_ane_sim_counter(const char* name) {
    if (name == nullptr) return -1;
    if (std::string_view(name) == "live_objects") {
        // A completion handler releases what it was handed after it returns; wait (up to 5 s) for those.
        for (int i = 0; i < 5000 && pending_handlers().load() > 0; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
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
    auto count = [&s](std::string_view counter) {
        auto found = s.counters.find(counter);
        return found == s.counters.end() ? 0L : found->second;
    };
    if (wanted.rfind("op:", 0) == 0) return count(wanted);  // op:<MIL op type>, 0 for ops never seen
    for (std::string_view known :
         {"compiles", "compile_cache_hits", "loads", "evaluations", "bytes_in", "bytes_out",
          "bytes_changed_in", "coreml_compiles", "coreml_loads", "coreml_device_compiles",
          "coreml_cache_hits", "coreml_predictions", "coreml_compute_plans", "coreml_states",
          "coreml_input_bytes", "coreml_state_accesses"})
        if (wanted == known) return count(wanted);
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
    // A wrong ANVIL_ANE_SIM_OPTIONS stays wrong for the whole process.
    for (std::size_t start = 0; start < s.configuration_violations.size();) {
        const std::size_t end = s.configuration_violations.find('\n', start);
        record_violation(std::string_view(s.configuration_violations).substr(start, end - start));
        start = end + 1;
    }
    s.warnings_seen.clear();
    s.counters.clear();
    ++s.hang_generation;  // an evaluation hung by hang_eval_op returns (the test is over)
    s.hang_released.notify_all();
}

ANVIL_SIM_EXPORT int anvil_ane_sim_set_option(const char* name, const char* value) {
    if (name == nullptr || value == nullptr) return -1;
    lock_guard lock(sim().mutex);
    return apply_option(sim().options, name, value) == option_result::applied ? 0 : -1;
}
