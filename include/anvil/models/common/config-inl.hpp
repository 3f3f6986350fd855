// anvil: config's definitions (see config.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <exception>
#include <filesystem>
#include <string>
#include <utility>

#include "anvil/core/error.hpp"
#include "anvil/core/json.hpp"
#include "anvil/models/common/config.hpp"

namespace anvil::models {

ANVIL_INLINE config_reader::config_reader(const json::value& config, std::string source)
    : config_(config), source_(std::move(source)) {
    if (!config_.is_object()) throw format_error(anvil::detail::message(source_, ": expected a JSON object"));
}

ANVIL_INLINE json::value config_reader::read_file(const std::filesystem::path& path) {
    if (!std::filesystem::exists(path))
        throw io_error(anvil::detail::message(path.string(), ": no such file"));
    return json::parse_file(path);
}

ANVIL_INLINE std::int64_t config_reader::integer(std::string_view key, std::int64_t fallback,
                                                 std::int64_t minimum, std::int64_t maximum) const {
    const json::value* v = present(key);
    if (v == nullptr) return fallback;
    if (!v->is_integer() || v->as_int() < minimum || v->as_int() > maximum) {
        throw format_error(anvil::detail::message(source_, ": '", key, "' must be an integer in [", minimum,
                                                  ", ", maximum, "], got ", json::dump(*v)));
    }
    return v->as_int();
}

ANVIL_INLINE std::int64_t config_reader::required_integer(std::string_view key, std::int64_t minimum,
                                                          std::int64_t maximum) const {
    if (present(key) == nullptr)
        throw format_error(anvil::detail::message(source_, ": '", key, "' is missing"));
    return integer(key, 0, minimum, maximum);
}

ANVIL_INLINE double config_reader::positive_number(std::string_view key, double fallback) const {
    const json::value* v = present(key);
    if (v == nullptr) return fallback;
    if (!v->is_number() || !(v->as_double() > 0.0)) {
        throw format_error(
            anvil::detail::message(source_, ": '", key, "' must be a positive number, got ", json::dump(*v)));
    }
    return v->as_double();
}

ANVIL_INLINE double config_reader::probability(std::string_view key, double fallback) const {
    const json::value* v = present(key);
    if (v == nullptr) return fallback;
    if (!v->is_number() || !(v->as_double() >= 0.0 && v->as_double() < 1.0)) {
        throw format_error(anvil::detail::message(
            source_, ": '", key, "' must be a probability (at least 0, below 1), got ", json::dump(*v)));
    }
    return v->as_double();
}

ANVIL_INLINE bool config_reader::boolean(std::string_view key, bool fallback) const {
    const json::value* v = present(key);
    if (v == nullptr) return fallback;
    if (!v->is_bool())
        throw format_error(
            anvil::detail::message(source_, ": '", key, "' must be true or false, got ", json::dump(*v)));
    return v->as_bool();
}

ANVIL_INLINE std::string config_reader::string(std::string_view key, std::string_view fallback) const {
    const json::value* v = present(key);
    if (v == nullptr) return std::string(fallback);
    if (!v->is_string())
        throw format_error(
            anvil::detail::message(source_, ": '", key, "' must be a string, got ", json::dump(*v)));
    return v->as_string();
}

ANVIL_INLINE std::vector<std::int64_t> config_reader::integers(std::string_view key,
                                                               std::int64_t minimum) const {
    std::vector<std::int64_t> out;
    const json::value* v = present(key);
    if (v == nullptr) return out;
    if (!v->is_array()) {
        throw format_error(anvil::detail::message(source_, ": '", key, "' must be a list of integers, got ",
                                                  json::dump(*v)));
    }
    for (const auto& item : v->as_array()) {
        if (!item.is_integer() || item.as_int() < minimum || item.as_int() > (std::int64_t{1} << 31)) {
            throw format_error(anvil::detail::message(
                source_, ": '", key, "' must be a list of integers >= ", minimum, ", got ", json::dump(*v)));
        }
        out.push_back(item.as_int());
    }
    return out;
}

ANVIL_INLINE std::vector<std::string> config_reader::labels(std::int64_t classes) const {
    std::vector<std::string> names;
    names.reserve(static_cast<std::size_t>(classes));
    for (std::int64_t i = 0; i < classes; ++i)
        names.push_back("LABEL_" + std::to_string(i));
    const json::value* map = present("id2label");
    if (map == nullptr) return names;
    if (!map->is_object())
        throw format_error(anvil::detail::message(source_, ": 'id2label' must be an object"));
    for (const auto& [key, name] : map->as_object()) {
        std::int64_t index = -1;
        try {
            std::size_t used = 0;
            index = std::stoll(key, &used);
            if (used != key.size()) index = -1;
        } catch (const std::exception&) {
            index = -1;
        }
        if (index < 0 || index >= classes || !name.is_string()) {
            throw format_error(anvil::detail::message(
                source_, ": id2label entry \"", key, "\" is not a class index in [0, ", classes,
                ") with a string name (the classifier has ", classes, " outputs)"));
        }
        names[static_cast<std::size_t>(index)] = name.as_string();
    }
    return names;
}

ANVIL_INLINE const json::value* config_reader::present(std::string_view key) const {
    const json::value* v = config_.find(key);
    return v == nullptr || v->is_null() ? nullptr : v;
}

}  // namespace anvil::models
