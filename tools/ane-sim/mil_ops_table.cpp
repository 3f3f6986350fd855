// anvil's ANE simulator: reads the embedded mil_ops.json once (anvil's JSON parser) and answers per-opset op
// signatures. "changes" entries carry "[auto: ...]" registry diffs ("+inputs a,b", "-inputs c",
// "x: dtypes +int8,uint8", "bias: const True->False"); undoing the diffs newer than the target opset gives
// the older definition (mil_ops.json _meta.conventions.definitions).
#include "mil_ops_table.hpp"

#include <algorithm>
#include <anvil/core/json.hpp>
#include <map>
#include <mutex>
#include <sstream>

#include "mil_ops_json.hpp"

namespace anvil_sim::mil {

namespace {

[[noreturn]] void table_broken(const std::string& what) {
    throw sim_failure(codes::invalid_mil, "the simulator's embedded mil_ops.json is malformed: " + what);
}

int version_of(const std::string& text) {  // "iOS17" -> 17
    if (text.size() != 5 || text.rfind("iOS", 0) != 0) table_broken("opset '" + text + "'");
    return std::stoi(text.substr(3));
}

std::string trim(std::string s) {
    const auto first = s.find_first_not_of(" \t");
    const auto last = s.find_last_not_of(" \t");
    return first == std::string::npos ? std::string() : s.substr(first, last - first + 1);
}

std::vector<std::string> split_list(const std::string& text, char separator) {
    std::vector<std::string> parts;
    std::stringstream in(text);
    std::string part;
    while (std::getline(in, part, separator))
        if (!trim(part).empty()) parts.push_back(trim(part));
    return parts;
}

std::vector<dtype> dtypes_of(const anvil::json::value& list) {
    std::vector<dtype> result;
    for (const auto& entry : list.as_array()) {
        const auto type = dtype_from_name(entry.as_string());
        if (!type) return {};  // a descriptive domain ("tensor of fp16|...") is not checked
        result.push_back(*type);
    }
    return result;
}

// One re-registration's auto diff, to undo when targeting an older opset.
struct change {
    int version = 0;
    std::vector<std::string> added_inputs;
    std::vector<std::string> removed_inputs;
    std::vector<std::pair<std::string, std::vector<dtype>>> added_dtypes;
    std::vector<std::string> became_non_const;
};

struct table_entry {
    op_spec newest;
    std::vector<change> changes;  // newest first
};

change parse_change(int version, const std::string& text) {
    change c;
    c.version = version;
    const auto open = text.find("[auto:");
    if (open == std::string::npos) return c;
    const auto close = text.find(']', open);
    for (const std::string& clause : split_list(text.substr(open + 6, close - open - 6), ';')) {
        if (clause.rfind("+inputs ", 0) == 0) {
            c.added_inputs = split_list(clause.substr(8), ',');
        } else if (clause.rfind("-inputs ", 0) == 0) {
            c.removed_inputs = split_list(clause.substr(8), ',');
        } else if (const auto colon = clause.find(':'); colon != std::string::npos) {
            const std::string input = trim(clause.substr(0, colon));
            const std::string rest = trim(clause.substr(colon + 1));
            if (rest.rfind("dtypes +", 0) == 0) {
                std::vector<dtype> types;
                for (const auto& name : split_list(rest.substr(8), ','))
                    if (auto t = dtype_from_name(name)) types.push_back(*t);
                c.added_dtypes.emplace_back(input, std::move(types));
            } else if (rest == "const True->False") {
                c.became_non_const.push_back(input);
            }
        }
    }
    return c;
}

input_spec parse_input(const std::string& name, const anvil::json::value& spec,
                       const anvil::json::value* types) {
    input_spec input;
    input.name = name;
    input.must_be_const = spec.at("const").as_bool();
    input.optional = spec.at("optional").as_bool();
    if (const auto* fallback = spec.find("default"); fallback && !fallback->is_null()) {
        input.has_default = true;
        if (fallback->is_number()) input.default_number = fallback->as_double();
    }
    const std::string& type = spec.at("type").as_string();
    if (type.rfind("scalar<", 0) == 0)
        input.form = input_form::scalar;
    else if (type.rfind("tuple<", 0) == 0)
        input.form = input_form::tuple;
    else if (type.rfind("state<", 0) == 0)
        input.form = input_form::state;
    else if (type.rfind("attribute", 0) == 0)
        input.form = input_form::attribute;
    // The element dtype: the innermost name after the last '<' before any ',' or '>'.
    const auto inner_start = type.find_last_of('<', type.find_first_of(",>"));
    if (inner_start == std::string::npos) return input;
    const std::string element =
        type.substr(inner_start + 1, type.find_first_of(",>", inner_start) - inner_start - 1);
    if (types && types->find(element)) {
        input.type_id = element;
        input.dtypes = dtypes_of(*types->find(element));
        if (input.dtypes.empty()) input.type_id.clear();
    } else if (auto fixed = dtype_from_name(element)) {
        input.dtypes = {*fixed};
    }
    return input;
}

const std::map<std::string, table_entry, std::less<>>& table() {
    static std::map<std::string, table_entry, std::less<>> entries;
    static std::once_flag once;
    std::call_once(once, [] {
        std::string text;
        for (const char* part : mil_ops_json_parts)
            text += part;
        anvil::json::value root;
        try {
            root = anvil::json::parse(text, "mil_ops.json");
            for (const auto& [op, entry] : root.as_object()) {
                if (op == "_meta") continue;
                table_entry e;
                e.newest.name = op;
                e.newest.since = version_of(entry.at("since").as_string());
                const anvil::json::value* types = entry.find("types");
                for (const auto& [name, spec] : entry.at("inputs").as_object())
                    e.newest.inputs.push_back(parse_input(name, spec, types));
                if (const auto* changes = entry.find("changes"))
                    for (const auto& [version, text_of_change] : changes->as_object())
                        e.changes.push_back(parse_change(version_of(version), text_of_change.as_string()));
                std::sort(e.changes.begin(), e.changes.end(),
                          [](const change& a, const change& b) { return a.version > b.version; });
                entries.emplace(op, std::move(e));
            }
        } catch (const anvil::error& e) {
            table_broken(e.what());
        }
    });
    return entries;
}

std::string_view canonical(std::string_view op) {
    if (op == "not_equal" || op == "less_equal" || op == "greater_equal") return "equal";
    if (op == "reduce_prod") return "reduce_sum";
    return op;
}

}  // namespace

const input_spec* op_spec::find(std::string_view input) const {
    for (const auto& i : inputs)
        if (i.name == input) return &i;
    return nullptr;
}

int op_since(std::string_view op) {
    const auto& entries = table();
    const auto found = entries.find(canonical(op));
    return found == entries.end() ? 0 : found->second.newest.since;
}

std::optional<op_spec> find_op(std::string_view op, int opset_version) {
    const auto& entries = table();
    const auto found = entries.find(canonical(op));
    if (found == entries.end() || found->second.newest.since > opset_version) return std::nullopt;
    op_spec spec = found->second.newest;
    spec.name = std::string(op);
    for (const change& c : found->second.changes) {
        if (c.version <= opset_version) break;
        std::erase_if(spec.inputs, [&](const input_spec& i) {
            return std::find(c.added_inputs.begin(), c.added_inputs.end(), i.name) != c.added_inputs.end();
        });
        for (const auto& name : c.removed_inputs) {  // the older form had it; its type is not in the table
            input_spec restored;
            restored.name = name;
            restored.must_be_const = true;
            spec.inputs.push_back(restored);
        }
        for (auto& input : spec.inputs) {
            for (const auto& entry : c.added_dtypes)
                if (entry.first == input.name)
                    std::erase_if(input.dtypes, [&entry](dtype t) {
                        return std::find(entry.second.begin(), entry.second.end(), t) != entry.second.end();
                    });
            if (std::find(c.became_non_const.begin(), c.became_non_const.end(), input.name) !=
                c.became_non_const.end())
                input.must_be_const = true;
        }
    }
    return spec;
}

}  // namespace anvil_sim::mil
