// The malformed-file corpus check shared by the JSON, npy and safetensors tests. tests/data/malformed/<kind>/
// holds one defect per file and expected.tsv, lines `<file name>\t<text the error must contain>`. Every file
// must be listed once and every listed file must exist; loading it must throw anvil::format_error whose
// message names the file's path and contains the expected text; and no two files may give the same message
// once their paths are taken out (each file a distinct defect).
#pragma once

#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <string_view>

template <class Load>
void check_malformed_corpus(std::string_view kind, std::size_t minimum_files, Load&& load) {
    const std::filesystem::path folder = std::filesystem::path(ANVIL_TEST_DATA_DIR) / "malformed" / kind;
    std::map<std::string, std::string> expected;
    std::ifstream manifest(folder / "expected.tsv");
    REQUIRE_MESSAGE(manifest.good(), "cannot read ", (folder / "expected.tsv").string());
    for (std::string line; std::getline(manifest, line);) {
        if (line.empty()) continue;
        const auto tab = line.find('\t');
        REQUIRE_MESSAGE(tab != std::string::npos, "expected.tsv line without a tab: ", line);
        CHECK_MESSAGE(expected.emplace(line.substr(0, tab), line.substr(tab + 1)).second,
                      "listed twice: ", line);
    }
    CHECK(expected.size() >= minimum_files);

    std::set<std::string> seen, messages;
    for (const auto& entry : std::filesystem::directory_iterator(folder)) {
        const std::string name = entry.path().filename().string();
        if (name == "expected.tsv") continue;
        CAPTURE(name);
        seen.insert(name);
        const auto found = expected.find(name);
        if (found == expected.end()) {
            FAIL_CHECK("not listed in expected.tsv");
            continue;
        }
        try {
            load(entry.path());
            FAIL_CHECK("loaded without an error");
        } catch (const anvil::format_error& e) {
            std::string message = e.what();
            CAPTURE(message);
            CHECK(message.find(found->second) != std::string::npos);
            const auto path = message.find(entry.path().string());
            REQUIRE_MESSAGE(path != std::string::npos, "the message does not name the file's path");
            message.erase(path, entry.path().string().size());
            CHECK_MESSAGE(messages.insert(message).second, "another file gave the same message");
        }
    }
    for (const auto& entry : expected) {
        CHECK_MESSAGE(seen.count(entry.first) == 1, "listed in expected.tsv but missing: ", entry.first);
    }
}
