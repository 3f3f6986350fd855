// anvil: reading a model's config.json. Every recipe reads its fields through config_reader, so a missing or
// mistyped field gives the same kind of message everywhere ("config.json: 'hidden_size' must be a positive
// integer, got \"768\""), and class labels (id2label) are read once for every classifier.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/core/json.hpp"

namespace anvil::models {

class config_reader {
public:
    // `source` names the file in messages (usually its path).
    config_reader(const json::value& config, std::string source)
        : config_(config), source_(std::move(source)) {
        if (!config_.is_object())
            throw format_error(anvil::detail::message(source_, ": expected a JSON object"));
    }

    // A config.json file; the reader keeps the parsed document.
    [[nodiscard]] static json::value read_file(const std::filesystem::path& path) {
        if (!std::filesystem::exists(path))
            throw io_error(anvil::detail::message(path.string(), ": no such file"));
        return json::parse_file(path);
    }

    [[nodiscard]] bool contains(std::string_view key) const { return config_.find(key) != nullptr; }
    [[nodiscard]] const json::value* find(std::string_view key) const { return config_.find(key); }
    [[nodiscard]] const std::string& source() const noexcept { return source_; }
    [[nodiscard]] const json::value& document() const noexcept { return config_; }

    // An integer in [minimum, maximum]; `fallback` when absent (or null).
    [[nodiscard]] std::int64_t integer(std::string_view key, std::int64_t fallback, std::int64_t minimum = 1,
                                       std::int64_t maximum = std::int64_t{1} << 31) const {
        const json::value* v = present(key);
        if (v == nullptr) return fallback;
        if (!v->is_integer() || v->as_int() < minimum || v->as_int() > maximum) {
            throw format_error(anvil::detail::message(source_, ": '", key, "' must be an integer in [",
                                                      minimum, ", ", maximum, "], got ", json::dump(*v)));
        }
        return v->as_int();
    }

    // A required integer.
    [[nodiscard]] std::int64_t required_integer(std::string_view key, std::int64_t minimum = 1,
                                                std::int64_t maximum = std::int64_t{1} << 31) const {
        if (present(key) == nullptr)
            throw format_error(anvil::detail::message(source_, ": '", key, "' is missing"));
        return integer(key, 0, minimum, maximum);
    }

    // A number greater than zero (epsilons, scales); `fallback` when absent.
    [[nodiscard]] double positive_number(std::string_view key, double fallback) const {
        const json::value* v = present(key);
        if (v == nullptr) return fallback;
        if (!v->is_number() || !(v->as_double() > 0.0)) {
            throw format_error(anvil::detail::message(source_, ": '", key,
                                                      "' must be a positive number, got ", json::dump(*v)));
        }
        return v->as_double();
    }

    [[nodiscard]] bool boolean(std::string_view key, bool fallback) const {
        const json::value* v = present(key);
        if (v == nullptr) return fallback;
        if (!v->is_bool())
            throw format_error(
                anvil::detail::message(source_, ": '", key, "' must be true or false, got ", json::dump(*v)));
        return v->as_bool();
    }

    [[nodiscard]] std::string string(std::string_view key, std::string_view fallback) const {
        const json::value* v = present(key);
        if (v == nullptr) return std::string(fallback);
        if (!v->is_string())
            throw format_error(
                anvil::detail::message(source_, ": '", key, "' must be a string, got ", json::dump(*v)));
        return v->as_string();
    }

    // A list of integers (e.g. ResNet's "depths"); empty when absent.
    [[nodiscard]] std::vector<std::int64_t> integers(std::string_view key, std::int64_t minimum = 0) const {
        std::vector<std::int64_t> out;
        const json::value* v = present(key);
        if (v == nullptr) return out;
        if (!v->is_array()) {
            throw format_error(anvil::detail::message(source_, ": '", key,
                                                      "' must be a list of integers, got ", json::dump(*v)));
        }
        for (const auto& item : v->as_array()) {
            if (!item.is_integer() || item.as_int() < minimum || item.as_int() > (std::int64_t{1} << 31)) {
                throw format_error(anvil::detail::message(source_, ": '", key,
                                                          "' must be a list of integers >= ", minimum,
                                                          ", got ", json::dump(*v)));
            }
            out.push_back(item.as_int());
        }
        return out;
    }

    // The class labels: id2label's names by index where config.json has them (keys "0".."N-1"), else
    // "LABEL_0".. as Hugging Face names them. `classes` is the classifier's output size, from the weights.
    [[nodiscard]] std::vector<std::string> labels(std::int64_t classes) const {
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

private:
    [[nodiscard]] const json::value* present(std::string_view key) const {
        const json::value* v = config_.find(key);
        return v == nullptr || v->is_null() ? nullptr : v;
    }

    const json::value& config_;
    std::string source_;
};

}  // namespace anvil::models
