// Tests of the GGUF reader (io/gguf.hpp). Where the expected values come from:
// tools/reference/gguf_fixtures.py, an independent writer with its own quantiser per ggml type, wrote
// types.gguf and decoded the blocks it wrote into types_expected.npy (whole-array numpy code, not anvil's
// block loops); types.json lists the tensors and the metadata the script wrote. The malformed corpus (one
// defect per file) comes from the same script.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>
#include <anvil/io/gguf.hpp>

#include "malformed_corpus.hpp"
#include "model_test_support.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace test_gguf {

using anvil::gguf_file;
using anvil::gguf_value_type;
using anvil_test::data_path;

TEST_CASE("gguf: every ggml type's tensor dequantises to what the independent writer encoded") {
    const gguf_file file = gguf_file::open(data_path("gguf/types.gguf"));
    const anvil::json::value listing = anvil::json::parse_file(data_path("gguf/types.json"));
    const std::vector<float> expected = anvil_test::load_npy(data_path("gguf/types_expected.npy")).to_f32();
    CHECK(file.version() == 3);
    CHECK(file.alignment() == 64);
    CHECK(file.data_offset() % 64 == 0);
    const auto& tensors = listing.find("tensors")->as_array();
    REQUIRE(file.tensors().size() == tensors.size());
    std::size_t at = 0;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        const anvil::gguf_tensor& t = file.tensors()[i];
        const std::string type = tensors[i].find("type")->as_string();
        CAPTURE(type);
        CHECK(t.name == tensors[i].find("name")->as_string());
        CHECK(std::string(t.layout().name) == type);
        CHECK(t.ne == std::vector<std::int64_t>{256, 3});
        CHECK(t.shape() == std::vector<std::int64_t>{3, 256});
        CHECK(t.bytes.size() == static_cast<std::size_t>(tensors[i].find("bytes")->as_int()));
        CHECK(t.offset % 64 == 0);
        const std::vector<float> got = t.to_f32();
        REQUIRE(got.size() == 768);
        std::size_t differ = 0;
        for (std::size_t j = 0; j < got.size(); ++j)
            differ += got[j] == expected[at + j] ? 0 : 1;  // the same decoding: equal, not close
        CHECK(differ == 0);
        at += got.size();
    }
    CHECK(at == expected.size());
}

TEST_CASE("gguf: metadata of every value type reads back, typed reads name what is wrong") {
    const gguf_file file = gguf_file::open(data_path("gguf/types.gguf"));
    CHECK(file.string("general.architecture") == "llama");
    CHECK(file.integer("general.alignment") == 64);
    CHECK(file.integer("fixture.u8") == 200);
    CHECK(file.integer("fixture.i8") == -100);
    CHECK(file.integer("fixture.u16") == 65000);
    CHECK(file.integer("fixture.i16") == -30000);
    CHECK(file.integer("fixture.i32") == -2000000000);
    CHECK(file.integer("fixture.u64") == (std::int64_t{1} << 40));
    CHECK(file.integer("fixture.i64") == -(std::int64_t{1} << 40));
    CHECK(file.number("fixture.f32") == 0.5);
    CHECK(file.number("fixture.f64") == 0.125);
    CHECK(file.find("fixture.bool")->boolean() == true);
    const auto& ints = file.array("fixture.ints");
    CHECK(ints.element_type() == gguf_value_type::int32);
    REQUIRE(ints.size() == 3);
    CHECK(ints.integer_at(0) == 1);
    CHECK(ints.integer_at(1) == -2);
    CHECK(ints.integer_at(2) == 3);
    CHECK_FALSE(ints.integer_at(3).has_value());
    CHECK(file.array("fixture.floats").number_at(1) == -1.5);
    CHECK(file.array("fixture.bools").integer_at(1) == std::nullopt);  // bools are not integers
    const auto strings = file.array("fixture.strings").strings();
    REQUIRE(strings.size() == 3);
    CHECK(strings[0] == "a");
    CHECK(strings[1] == "\xC3\xBC");
    CHECK(strings[2].empty());
    CHECK(file.array("fixture.strings").describe() == "array of 3 string");
    CHECK_THROWS_WITH_AS((void)file.string("fixture.u8"),
                         doctest::Contains("metadata 'fixture.u8' is u8 200; expected a string"),
                         anvil::format_error);
    CHECK_THROWS_WITH_AS((void)file.integer("llama.block_count"),
                         doctest::Contains("no metadata key 'llama.block_count'"), anvil::format_error);
    CHECK_THROWS_WITH_AS((void)file.tensor("t0.f3"), doctest::Contains("did you mean 't0.f32'"),
                         anvil::format_error);
}

TEST_CASE("gguf: every file of the malformed corpus is refused with its own message") {
    check_malformed_corpus("gguf", 20,
                           [](const std::filesystem::path& path) { (void)gguf_file::open(path); });
}

TEST_CASE("gguf: zero-sized dimensions are legal, and a 63-byte name is the longest ggml holds") {
    // gguf_fixtures.py wrote the file: ggml requires only non-negative sizes (its GGML_MAX_NAME is 64 bytes
    // with the terminating NUL).
    const gguf_file file = gguf_file::open(data_path("gguf/zero_sized.gguf"));
    REQUIRE(file.tensors().size() == 4);
    const auto& empty = file.tensor("empty.f32");
    CHECK(empty.ne == std::vector<std::int64_t>{0, 2});
    CHECK(empty.element_count == 0);
    CHECK(empty.bytes.empty());
    CHECK(empty.to_f32().empty());
    CHECK(file.tensor("empty.q8_0").layout().name == std::string_view("Q8_0"));
    CHECK(file.tensor("empty.q8_0").element_count == 0);
    CHECK(file.tensor(std::string(63, 'w')).to_f32() == std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7});
    CHECK(file.tensor("after.f16").to_f32() == std::vector<float>{1.5f, -2.0f});
}

TEST_CASE("gguf: a dequantiser refuses sizes that do not fit and types it lacks") {
    std::vector<std::byte> block(34);
    std::vector<float> out(32);
    anvil::dequantize_ggml(anvil::ggml_type::Q8_0, block, out);
    std::vector<float> partial(16);
    CHECK_THROWS_AS(anvil::dequantize_ggml(anvil::ggml_type::Q8_0, block, partial), anvil::format_error);
    std::vector<std::byte> short_block(33);
    CHECK_THROWS_AS(anvil::dequantize_ggml(anvil::ggml_type::Q8_0, short_block, out), anvil::format_error);
    std::vector<float> k(256);
    std::vector<std::byte> q2(84);
    CHECK_THROWS_WITH_AS(anvil::dequantize_ggml(anvil::ggml_type::Q2_K, q2, k), doctest::Contains("Q2_K"),
                         anvil::unsupported_error);
}

TEST_CASE("gguf: truncating the valid file anywhere is a format_error, never a crash") {
    const std::vector<std::byte> bytes = [] {
        const anvil::mapped_file m = anvil::mapped_file::open(data_path("gguf/types.gguf"));
        return std::vector<std::byte>(m.bytes().begin(), m.bytes().end());
    }();
    std::size_t refused = 0;
    for (std::size_t size = 0; size < bytes.size(); size += 37) {
        try {
            (void)gguf_file::parse(std::span<const std::byte>(bytes.data(), size), "cut.gguf");
        } catch (const anvil::format_error&) {
            ++refused;
        }
    }
    CHECK(refused == (bytes.size() + 36) / 37);
}

}  // namespace test_gguf
