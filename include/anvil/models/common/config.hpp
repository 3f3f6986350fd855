// anvil: reading a model's config.json. Every recipe reads its fields through config_reader, so a missing or
// mistyped field gives the same kind of message everywhere ("config.json: 'hidden_size' must be a positive
// integer, got \"768\""), and class labels (id2label) are read once for every classifier.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "anvil/compilation.hpp"
#include "anvil/core/json_value.hpp"

namespace anvil::models {

class config_reader {
public:
    // `source` names the file in messages (usually its path).
    config_reader(const json::value& config, std::string source);

    // A config.json file; the reader keeps the parsed document.
    [[nodiscard]] static json::value read_file(const std::filesystem::path& path);

    [[nodiscard]] bool contains(std::string_view key) const { return config_.find(key) != nullptr; }
    [[nodiscard]] const json::value* find(std::string_view key) const { return config_.find(key); }
    [[nodiscard]] const std::string& source() const noexcept { return source_; }
    [[nodiscard]] const json::value& document() const noexcept { return config_; }

    // An integer in [minimum, maximum]; `fallback` when absent (or null).
    [[nodiscard]] std::int64_t integer(std::string_view key, std::int64_t fallback, std::int64_t minimum = 1,
                                       std::int64_t maximum = std::int64_t{1} << 31) const;

    // A required integer.
    [[nodiscard]] std::int64_t required_integer(std::string_view key, std::int64_t minimum = 1,
                                                std::int64_t maximum = std::int64_t{1} << 31) const;

    // A number greater than zero (epsilons, scales); `fallback` when absent.
    [[nodiscard]] double positive_number(std::string_view key, double fallback) const;

    // A probability in [0, 1) (a dropout's); `fallback` when absent or null.
    [[nodiscard]] double probability(std::string_view key, double fallback) const;

    [[nodiscard]] bool boolean(std::string_view key, bool fallback) const;

    [[nodiscard]] std::string string(std::string_view key, std::string_view fallback) const;

    // A list of integers (e.g. ResNet's "depths"); empty when absent.
    [[nodiscard]] std::vector<std::int64_t> integers(std::string_view key, std::int64_t minimum = 0) const;

    // The class labels: id2label's names by index where config.json has them (keys "0".."N-1"), else
    // "LABEL_0".. as Hugging Face names them. `classes` is the classifier's output size, from the weights.
    [[nodiscard]] std::vector<std::string> labels(std::int64_t classes) const;

private:
    [[nodiscard]] const json::value* present(std::string_view key) const;

    const json::value& config_;
    std::string source_;
};

}  // namespace anvil::models

#if ANVIL_DEFINITIONS
#include "anvil/models/common/config-inl.hpp"
#endif
