// anvil's ANE simulator: the model's directory. The caller stages model.mil and weights/<file> there before
// compile, and compile leaves net.plist and data beside them (RUNTIME.md §2 "Temp directory"). Without
// setModelURL: the directory is NSTemporaryDirectory()/<hexStringIdentifier>/; after it, the model-URL
// directory itself (RUNTIME.md §0 #2), whose artefacts let another process load without compiling.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "runtime_ane.hpp"

namespace anvil_sim {

namespace {

namespace fs = std::filesystem;

bool read_file(const fs::path& path, std::string& contents) {
    std::ifstream stream(path, std::ios::binary);
    if (!stream) return false;
    contents.assign(std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>());
    return true;
}

bool write_file(const fs::path& path, const std::string& contents) {
    std::ofstream stream(path, std::ios::binary | std::ios::trunc);
    stream << contents;
    return static_cast<bool>(stream);
}

// The compiled artefacts (RUNTIME.md §2: after compile the directory holds net.plist and data).
std::string net_plist_for(const std::string& hex) {
    return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<plist version=\"1.0\">\n<dict>\n"
           "  <key>hexStringIdentifier</key>\n  <string>" +
           hex + "</string>\n</dict>\n</plist>\n";
}
std::string data_for(const std::string& hex) {
    return "anvil-ane-sim compiled program " + hex + "\n";
}

bool has_model_url(const in_memory_model_object& model) {
    return model.model_url != nullptr && model.model_url->alive;
}

}  // namespace

std::string hex_identifier_of(const descriptor_object& descriptor) {
    std::uint64_t first = 0xcbf29ce484222325ULL;
    std::uint64_t second = 0x9e3779b97f4a7c15ULL;
    auto feed = [&](const void* bytes, std::size_t size) {
        auto* p = static_cast<const unsigned char*>(bytes);
        for (std::size_t i = 0; i < size; ++i) {
            first = (first ^ p[i]) * 0x100000001b3ULL;
            second = ((second << 5 | second >> 59) ^ p[i]) * 0xff51afd7ed558ccdULL;
        }
    };
    auto feed_size = [&](std::size_t size) {
        std::uint64_t value = size;
        feed(&value, sizeof value);
    };
    feed_size(descriptor.mil_text.size());
    feed(descriptor.mil_text.data(), descriptor.mil_text.size());
    const bool text_only = sim().options.identity_by_text;
    for (const weight_file& weight : text_only ? std::vector<weight_file>{} : descriptor.weights) {
        feed_size(weight.key.size());
        feed(weight.key.data(), weight.key.size());
        feed(&weight.offset, sizeof weight.offset);
        feed_size(weight.data.size());
        feed(weight.data.data(), weight.data.size());
    }
    char text[33];
    std::snprintf(text, sizeof text, "%016llx%016llx", static_cast<unsigned long long>(first),
                  static_cast<unsigned long long>(second ^ (second >> 31)));
    return text;
}

std::string model_directory(const in_memory_model_object& model) {
    return has_model_url(model) ? model.model_url->path : temporary_directory() + model.hex_identifier;
}

std::string check_staged_files(const in_memory_model_object& model) {
    const bool at_url = has_model_url(model);
    const fs::path directory = model_directory(model);
    const std::string where = at_url ? "the model-URL directory" : "the model's temporary directory";
    const std::string remedy =
        at_url
            ? " (after setModelURL:, compile reads model.mil and weights/<file> from the model-URL "
              "directory itself: write them there before compileWithQoS:options:error:, RUNTIME.md §0 #2)" +
                  cite(rule::model_url_staging)
            : " (write NSTemporaryDirectory()/<hexStringIdentifier>/model.mil and weights/<file> "
              "before compileWithQoS:options:error:, RUNTIME.md §2 step 4)" +
                  cite(rule::temporary_directory);
    std::string contents;
    const fs::path mil_path = directory / "model.mil";
    if (!read_file(mil_path, contents)) return where + " lacks " + mil_path.string() + remedy;
    if (contents != model.descriptor->mil_text)
        return mil_path.string() + " differs from the MIL text given to the descriptor" + remedy;
    const std::string prefix = "@model_path/";
    for (const weight_file& weight : model.descriptor->weights) {
        if (weight.key.rfind(prefix + "weights/", 0) != 0)
            return "weights key '" + weight.key + "' is not of the form @model_path/weights/<file>" +
                   cite(rule::weights_entries);
        const fs::path path = directory / weight.key.substr(prefix.size());
        if (!read_file(path, contents)) return where + " lacks " + path.string() + remedy;
        if (contents.size() != weight.data.size() ||
            !std::equal(contents.begin(), contents.end(), reinterpret_cast<const char*>(weight.data.data())))
            return path.string() + " differs from the data of weights entry '" + weight.key + "'" + remedy;
    }
    return "";
}

bool write_artefacts(const in_memory_model_object& model) {
    const fs::path directory = model_directory(model);
    std::error_code ignored;
    fs::create_directories(directory, ignored);
    return write_file(directory / "net.plist", net_plist_for(model.hex_identifier)) &&
           write_file(directory / "data", data_for(model.hex_identifier));
}

bool artefacts_exist(const in_memory_model_object& model) {
    if (!has_model_url(model)) return false;
    std::string plist;
    std::string data;
    const fs::path directory = model.model_url->path;
    return read_file(directory / "net.plist", plist) && plist == net_plist_for(model.hex_identifier) &&
           read_file(directory / "data", data) && data == data_for(model.hex_identifier);
}

}  // namespace anvil_sim
