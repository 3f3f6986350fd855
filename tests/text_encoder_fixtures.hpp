// What the text-encoder, sentence-encoder and cross-encoder tests share: the fixtures tools/reference/
// text_encoders.py wrote, read back as token-id lists, and a fixture folder with its config.json replaced.
#pragma once

#include "model_test_support.hpp"

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

namespace anvil_test::text_encoders {

inline std::string fixture(const std::string& name) {
    return data_path("text_encoders/" + name);
}

using anvil_test::cpu;

// A fixture's texts: ids.npy [N, L] cut to lengths.npy, and their type ids.
struct texts {
    std::vector<std::vector<std::int32_t>> ids, types;
};

inline texts read_texts(const std::string& folder, const std::string& stem = "") {
    const auto ids = load_npy(folder + "/" + stem + "ids.npy");
    const auto types = load_npy(folder + "/" + stem + "type_ids.npy");
    const auto lengths = load_npy(folder + "/" + stem + "lengths.npy");
    texts result;
    const auto width = static_cast<std::size_t>(ids.shape()[1]);
    for (std::size_t i = 0; i < lengths.element_count(); ++i) {
        const auto length = static_cast<std::size_t>(lengths.values<std::int32_t>()[i]);
        const auto row = ids.values<std::int32_t>().subspan(i * width, length);
        const auto type_row = types.values<std::int32_t>().subspan(i * width, length);
        result.ids.emplace_back(row.begin(), row.end());
        result.types.emplace_back(type_row.begin(), type_row.end());
    }
    return result;
}

// A copy of a fixture folder with config.json replaced (the weights are linked). The process id keeps the
// test executables that run at the same time apart.
struct edited_folder {
    std::filesystem::path path;
    edited_folder(const std::string& name, const std::string& config) {
        path = std::filesystem::temp_directory_path() /
               ("anvil-text-fixture-" + name + "-" + std::to_string(getpid()) + "-" +
                std::to_string(std::hash<std::string>{}(config)));
        std::filesystem::remove_all(path);
        std::filesystem::create_directories(path);
        std::filesystem::create_symlink(std::filesystem::absolute(fixture(name) + "/model.safetensors"),
                                        path / "model.safetensors");
        std::ofstream(path / "config.json") << config;
    }
    ~edited_folder() {
        std::error_code ignored;
        std::filesystem::remove_all(path, ignored);
    }
    edited_folder(const edited_folder&) = delete;
    edited_folder& operator=(const edited_folder&) = delete;
};

}  // namespace anvil_test::text_encoders
