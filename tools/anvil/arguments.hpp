// The command line's argument reader: positional arguments and `--flag [value]` options, checked against
// what each command accepts so that a typo is a usage error (exit 2), never silently ignored.
#pragma once

#include <anvil/anvil.hpp>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace anvil::cli {

// A mistake in how the tool was called: printed as `anvil: usage: ...`, exit status 2.
class usage_error : public anvil::error {
public:
    using anvil::error::error;
};

struct option_spec {
    std::string_view name;  // without the leading "--"
    bool takes_value;
};

class arguments {
public:
    // Reads argv[first..]; `spec` lists the options the command accepts.
    arguments(std::string_view command, const std::vector<std::string_view>& argv,
              const std::vector<option_spec>& spec) {
        for (std::size_t i = 0; i < argv.size(); ++i) {
            const std::string_view arg = argv[i];
            if (arg.size() > 2 && arg.substr(0, 2) == "--") {
                std::string_view name = arg.substr(2);
                std::optional<std::string> inline_value;
                if (const auto eq = name.find('='); eq != std::string_view::npos) {
                    inline_value = std::string(name.substr(eq + 1));
                    name = name.substr(0, eq);
                }
                const option_spec* known = nullptr;
                for (const auto& s : spec) {
                    if (s.name == name) known = &s;
                }
                if (known == nullptr) {
                    throw usage_error(detail::message(command, ": unknown option '--", name, "'"));
                }
                if (!known->takes_value) {
                    if (inline_value) {
                        throw usage_error(detail::message(command, ": option '--", name, "' takes no value"));
                    }
                    flags_.insert(std::string(name));
                } else if (inline_value) {
                    values_[std::string(name)].push_back(*inline_value);
                } else {
                    if (i + 1 >= argv.size()) {
                        throw usage_error(detail::message(command, ": option '--", name, "' needs a value"));
                    }
                    values_[std::string(name)].emplace_back(argv[++i]);
                }
            } else if (arg == "--") {
                for (++i; i < argv.size(); ++i)
                    positional_.emplace_back(argv[i]);
            } else {
                positional_.emplace_back(arg);
            }
        }
    }

    [[nodiscard]] bool flag(std::string_view name) const { return flags_.count(std::string(name)) != 0; }
    [[nodiscard]] const std::vector<std::string>& positional() const noexcept { return positional_; }
    [[nodiscard]] std::optional<std::string> value(std::string_view name) const {
        const auto it = values_.find(std::string(name));
        if (it == values_.end()) return std::nullopt;
        return it->second.back();
    }
    // Every value a repeatable option was given, in order.
    [[nodiscard]] std::vector<std::string> values(std::string_view name) const {
        const auto it = values_.find(std::string(name));
        return it == values_.end() ? std::vector<std::string>{} : it->second;
    }

private:
    std::vector<std::string> positional_;
    std::set<std::string> flags_;
    std::map<std::string, std::vector<std::string>> values_;
};

}  // namespace anvil::cli
