// The compiled-program cache as a user sees it (backend/cache.hpp): manifests written after a compile, hits
// that update the last use, pruning and clearing that skip an entry whose lock is held, the automatic size
// cap, and malformed manifests, through the simulator. `anvil cache` is tested in tests/cli.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>
#include <anvil/backend/ane/ane_framework.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "ane_simulator.hpp"
#include "ane_test_block.hpp"
#include "model_test_support.hpp"

namespace test_program_cache {

using anvil_test::temporary_folder;

TEST_CASE("program cache: byte counts and the cap's setting") {
    CHECK(anvil::cache::parse_bytes("1000") == 1000u);
    CHECK(anvil::cache::parse_bytes("4G") == (std::uintmax_t{4} << 30));
    CHECK(anvil::cache::parse_bytes("512m") == (std::uintmax_t{512} << 20));
    CHECK_FALSE(anvil::cache::parse_bytes("").has_value());
    CHECK_FALSE(anvil::cache::parse_bytes("-1").has_value());
    CHECK_FALSE(anvil::cache::parse_bytes("12Q").has_value());
    CHECK_FALSE(anvil::cache::parse_bytes("99999999999999999999G").has_value());
    CHECK(anvil::cache::max_bytes(123) == 123u);
    CHECK_THROWS_WITH_AS((void)anvil::cache::entries("/nonexistent/anvil-cache"),
                         doctest::Contains("'/nonexistent/anvil-cache' does not exist"), anvil::io_error);
}

TEST_CASE("program cache: a malformed manifest is listed with its problem and pruned as stale") {
    temporary_folder cache;
    std::filesystem::create_directories(cache.path / "ane" / "abc");
    std::ofstream(cache.path / "ane" / "abc" / "data") << "compiled";
    std::ofstream(cache.path / "ane" / "abc.json") << "{\"format\": 3";
    std::filesystem::create_directories(cache.path / "ane" / "unfinished");
    const auto listed = anvil::cache::entries(cache.path);
    REQUIRE(listed.size() == 1);  // the entry without a manifest is not listed
    CHECK(listed[0].key == "abc");
    CHECK(listed[0].problem.find("malformed cache manifest") != std::string::npos);
    CHECK(listed[0].problem.find("abc.json") != std::string::npos);
    anvil::cache::prune_options stale;
    stale.stale = true;
    const auto removed = anvil::cache::prune(cache.path, stale);
    CHECK(removed.removed.size() == 2);  // the malformed entry, and the unfinished one nobody holds
    CHECK_FALSE(std::filesystem::exists(cache.path / "ane" / "abc"));
    CHECK_FALSE(std::filesystem::exists(cache.path / "ane" / "unfinished"));
}

#ifdef ANVIL_ANE_SIM_PATH

using anvil_test::ane_block;
using anvil_test::sim;

anvil::compile_options ane_options(const temporary_folder& cache) {
    anvil::compile_options options;
    options.target = anvil::device::ane;
    options.cache_dir = cache.path.string();
    options.model_source = "models/block";
    return options;
}

TEST_CASE("program cache: a compile writes a manifest, a hit updates the last use") {
    sim();
    temporary_folder cache;
    ane_block b;
    { (void)anvil::compile({b.out}, ane_options(cache)); }
    auto listed = anvil::cache::entries(cache.path);
    REQUIRE(listed.size() == 1);
    const anvil::cache::entry first = listed[0];
    CHECK(first.kind == anvil::cache::entry_kind::ane_program);
    CHECK(first.model == "models/block");
    CHECK(first.anvil_version == anvil::version_string);
    CHECK(first.os_build == anvil::detail::ane::os_build());
    CHECK(first.chip == anvil_test::simulated_architecture());
    CHECK(first.problem == "");
    CHECK(first.bytes > 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    anvil::program again = anvil::compile({b.out}, ane_options(cache));
    CHECK(again.placement().segments[0].cached);
    listed = anvil::cache::entries(cache.path);
    REQUIRE(listed.size() == 1);
    CHECK(listed[0].last_use > first.last_use);
    CHECK(listed[0].created == first.created);
}

TEST_CASE("program cache: prune and clear skip an entry whose lock another holds") {
    sim();
    temporary_folder cache;
    ane_block b;
    { (void)anvil::compile({b.out}, ane_options(cache)); }
    const auto listed = anvil::cache::entries(cache.path);
    REQUIRE(listed.size() == 1);
    {
        // The lock a compiling or loading process holds (flock: two open files conflict in one process too).
        anvil::detail::ane::directory_lock held(cache.path / "ane" / listed[0].key);
        const auto kept = anvil::cache::clear(cache.path);
        CHECK(kept.removed.empty());
        REQUIRE(kept.in_use.size() == 1);
        CHECK(kept.in_use[0].key == listed[0].key);
        CHECK(anvil::cache::entries(cache.path).size() == 1);
    }
    const auto cleared = anvil::cache::clear(cache.path);
    CHECK(cleared.removed.size() == 1);
    CHECK(anvil::cache::entries(cache.path).empty());
    CHECK_FALSE(std::filesystem::exists(cache.path / "ane" / (listed[0].key + ".lock")));
    // The entry compiles again into a cache whose lock file went.
    anvil::program again = anvil::compile({b.out}, ane_options(cache));
    CHECK_FALSE(again.placement().segments[0].cached);
    CHECK(anvil::cache::entries(cache.path).size() == 1);
}

TEST_CASE("program cache: the size cap after a compile removes the least recently used, never the new one") {
    sim();
    temporary_folder cache;
    auto options = ane_options(cache);
    for (const float shift : {0.0f, 0.5f, 1.0f}) {
        ane_block b(shift);
        (void)anvil::compile({b.out}, options);
    }
    auto listed = anvil::cache::entries(cache.path);
    REQUIRE(listed.size() == 3);
    const std::string newest = listed[0].key;
    options.cache_max_bytes = listed[0].bytes + listed[1].bytes + listed[0].bytes / 2;
    ane_block b(1.5f);
    anvil::program p = anvil::compile({b.out}, options);
    CHECK_FALSE(p.placement().segments[0].cached);
    listed = anvil::cache::entries(cache.path);
    REQUIRE(listed.size() == 2);
    CHECK(listed[1].key == newest);
    options.cache_max_bytes = 1;  // less than one program: the one just compiled stays
    ane_block c(2.0f);
    (void)anvil::compile({c.out}, options);
    CHECK(anvil::cache::entries(cache.path).size() == 1);
}

#endif  // ANVIL_ANE_SIM_PATH

}  // namespace test_program_cache
