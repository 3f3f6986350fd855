// safetensors: the fixtures written by tools/fixtures/make_safetensors_fixtures.py (an independent writer of
// the format), whose values this file recomputes from the same formulas; the writer against those bytes; the
// malformed corpus; hostile headers built in memory.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>
#include "malformed_corpus.hpp"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

// A namespace of its own, so the test files can be compiled together (a unity build).
namespace test_safetensors {

namespace {

const std::filesystem::path data_dir = std::filesystem::path(ANVIL_TEST_DATA_DIR) / "safetensors";

std::vector<std::byte> read_bytes(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    REQUIRE(in.good());
    std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::byte> bytes(chars.size());
    if (!chars.empty()) std::memcpy(bytes.data(), chars.data(), chars.size());
    return bytes;
}

std::vector<std::byte> with_header(const std::string& header, std::size_t data_size = 0) {
    std::vector<std::byte> bytes(8 + header.size() + data_size);
    const std::uint64_t length = header.size();
    for (int i = 0; i < 8; ++i)
        bytes[static_cast<std::size_t>(i)] = static_cast<std::byte>((length >> (8 * i)) & 0xFF);
    std::memcpy(bytes.data() + 8, header.data(), header.size());
    return bytes;
}

std::string message_of(const std::vector<std::byte>& bytes) {
    try {
        static_cast<void>(anvil::safetensors_file::parse(bytes, "memory.safetensors"));
    } catch (const anvil::format_error& e) {
        return e.what();
    }
    return "(accepted)";
}

// The fixture's formulas, written again from the generator's table: element i of tensor "t_<dtype>".
struct formula {
    anvil::dtype type;
    std::vector<std::int64_t> shape;
    double (*value)(int);
};

const std::vector<formula>& formulas() {
    using anvil::dtype;
    static const std::vector<formula> table = {
        {dtype::f64, {6}, [](int i) { return (i - 3) * 0.5; }},
        {dtype::f32, {2, 3}, [](int i) { return (i - 3) * 0.25; }},
        {dtype::f16, {3, 2}, [](int i) { return (i - 3) * 0.125; }},
        {dtype::bf16, {1, 2, 3}, [](int i) { return (i - 3) * 0.75; }},
        {dtype::f8_e4m3, {2, 3}, [](int i) { return (i - 3) * 0.5; }},
        {dtype::f8_e5m2, {2, 3}, [](int i) { return (i - 3) * 0.25; }},
        {dtype::i64, {2, 3}, [](int i) { return (i - 3) * 1000.0; }},
        {dtype::i32, {2, 3}, [](int i) { return (i - 3) * 100.0; }},
        {dtype::i16, {2, 3}, [](int i) { return (i - 3) * -7.0; }},
        {dtype::i8, {2, 3}, [](int i) { return (i - 3) * 5.0; }},
        {dtype::u64, {2, 3}, [](int i) { return i * 1000.0; }},
        {dtype::u32, {2, 3}, [](int i) { return i * 100.0; }},
        {dtype::u16, {2, 3}, [](int i) { return i * 7.0; }},
        {dtype::u8, {2, 3}, [](int i) { return i * 50.0; }},
        {dtype::boolean, {2, 3}, [](int i) { return static_cast<double>(i % 2); }},
    };
    return table;
}

std::string fixture_name(anvil::dtype type) {
    std::string name = "t_";
    for (const char c : anvil::safetensors_dtype_name(type)) {
        name += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    return name;
}

// The little-endian bytes of a formula tensor, encoded here from the value (IEEE bit patterns by hand for the
// narrow floats, so the writer test does not lean on anvil's own encoders).
std::vector<std::byte> encode(const formula& f) {
    std::vector<std::byte> out;
    const auto put = [&](auto scalar) {
        const auto* p = reinterpret_cast<const std::byte*>(&scalar);
        out.insert(out.end(), p, p + sizeof(scalar));
    };
    const auto count = static_cast<int>(
        anvil::detail::checked_element_count(std::span<const std::int64_t>(f.shape)).value());
    for (int i = 0; i < count; ++i) {
        const double v = f.value(i);
        switch (f.type) {
            case anvil::dtype::f64:
                put(v);
                break;
            case anvil::dtype::f32:
                put(static_cast<float>(v));
                break;
            case anvil::dtype::bf16:
                put(static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(static_cast<float>(v)) >> 16));
                break;
            case anvil::dtype::f16:
            case anvil::dtype::f8_e4m3:
            case anvil::dtype::f8_e5m2: {
                // Exact small values: sign, exponent, mantissa from frexp.
                const int mantissa_bits = f.type == anvil::dtype::f16       ? 10
                                          : f.type == anvil::dtype::f8_e4m3 ? 3
                                                                            : 2;
                const int bias = f.type == anvil::dtype::f16 ? 15 : f.type == anvil::dtype::f8_e4m3 ? 7 : 15;
                unsigned bits = v < 0 ? 1u : 0u;
                if (v != 0) {
                    int exponent = 0;
                    const double m =
                        std::frexp(std::fabs(v), &exponent);  // |v| = m 2^exponent, m in [0.5, 1)
                    const auto fraction = static_cast<unsigned>((m * 2 - 1) * (1 << mantissa_bits));
                    bits = (bits << (f.type == anvil::dtype::f8_e4m3 ? 4 : 5)) |
                           static_cast<unsigned>(exponent - 1 + bias);
                    bits = (bits << mantissa_bits) | fraction;
                } else {
                    bits <<= (f.type == anvil::dtype::f16 ? 15 : 7);
                }
                if (f.type == anvil::dtype::f16) {
                    put(static_cast<std::uint16_t>(bits));
                } else {
                    put(static_cast<std::uint8_t>(bits));
                }
                break;
            }
            case anvil::dtype::i64:
                put(static_cast<std::int64_t>(v));
                break;
            case anvil::dtype::i32:
                put(static_cast<std::int32_t>(v));
                break;
            case anvil::dtype::i16:
                put(static_cast<std::int16_t>(v));
                break;
            case anvil::dtype::i8:
                put(static_cast<std::int8_t>(v));
                break;
            case anvil::dtype::u64:
                put(static_cast<std::uint64_t>(v));
                break;
            case anvil::dtype::u32:
                put(static_cast<std::uint32_t>(v));
                break;
            case anvil::dtype::u16:
                put(static_cast<std::uint16_t>(v));
                break;
            case anvil::dtype::u8:
            case anvil::dtype::boolean:
                put(static_cast<std::uint8_t>(v));
                break;
        }
    }
    return out;
}

template <class T>
void check_typed_view(const anvil::tensor_view& tensor, const formula& f) {
    const auto values = tensor.data<T>();
    REQUIRE(values.size() == tensor.element_count());
    CHECK(static_cast<const void*>(values.data()) == static_cast<const void*>(tensor.bytes().data()));
    for (std::size_t i = 0; i < values.size(); ++i) {
        CHECK(static_cast<double>(values[i]) == f.value(static_cast<int>(i)));
    }
}

}  // namespace

TEST_CASE(
    "safetensors: every dtype of all_dtypes.safetensors matches its formula through to_f32 and to_f16") {
    const auto file = anvil::safetensors_file::open(data_dir / "all_dtypes.safetensors");
    CHECK(file.tensors().size() == formulas().size());
    for (const auto& f : formulas()) {
        CAPTURE(anvil::dtype_name(f.type));
        const auto& tensor = file.tensor(fixture_name(f.type));
        CHECK(tensor.type() == f.type);
        CHECK(std::vector<std::int64_t>(tensor.shape().begin(), tensor.shape().end()) == f.shape);
        REQUIRE(tensor.element_count() == 6);
        CHECK(tensor.byte_size() == 6 * anvil::dtype_size(f.type));
        const auto as_f32 = tensor.to_f32();
        const auto as_f16 = tensor.to_f16();
        REQUIRE(as_f32.size() == 6);
        REQUIRE(as_f16.size() == 6);
        for (int i = 0; i < 6; ++i) {
            CAPTURE(i);
            CHECK(as_f32[static_cast<std::size_t>(i)] == static_cast<float>(f.value(i)));
            CHECK(static_cast<float>(as_f16[static_cast<std::size_t>(i)]) == static_cast<float>(f.value(i)));
        }
        CHECK(tensor.bytes().size() == encode(f).size());
        CHECK(std::equal(tensor.bytes().begin(), tensor.bytes().end(), encode(f).begin()));
    }
    check_typed_view<double>(file.tensor("t_f64"), formulas()[0]);
    check_typed_view<float>(file.tensor("t_f32"), formulas()[1]);
    check_typed_view<anvil::half>(file.tensor("t_f16"), formulas()[2]);
    check_typed_view<anvil::bfloat16>(file.tensor("t_bf16"), formulas()[3]);
    check_typed_view<std::int64_t>(file.tensor("t_i64"), formulas()[6]);
    check_typed_view<std::int32_t>(file.tensor("t_i32"), formulas()[7]);
    check_typed_view<std::int16_t>(file.tensor("t_i16"), formulas()[8]);
    check_typed_view<std::int8_t>(file.tensor("t_i8"), formulas()[9]);
    check_typed_view<std::uint64_t>(file.tensor("t_u64"), formulas()[10]);
    check_typed_view<std::uint32_t>(file.tensor("t_u32"), formulas()[11]);
    check_typed_view<std::uint16_t>(file.tensor("t_u16"), formulas()[12]);
    check_typed_view<std::uint8_t>(file.tensor("t_u8"), formulas()[13]);

    REQUIRE(file.metadata().size() == 2);
    CHECK(file.metadata()[0] == std::pair<std::string, std::string>("format", "pt"));
    CHECK(file.metadata()[1] ==
          std::pair<std::string, std::string>("generator", "make_safetensors_fixtures.py"));
    CHECK(*file.find_metadata("format") == "pt");
    CHECK(file.find_metadata("missing") == nullptr);
}

TEST_CASE(
    "safetensors: tensors come in data-offset order, Hugging Face's layout, each aligned for its type") {
    const auto file = anvil::safetensors_file::open(data_dir / "all_dtypes.safetensors");
    // Hugging Face's writer: decreasing Dtype enum order (its tensor.rs), then name.
    const std::vector<std::string> expected = {"t_u64",     "t_i64",     "t_f64", "t_f32", "t_u32",
                                               "t_i32",     "t_bf16",    "t_f16", "t_u16", "t_i16",
                                               "t_f8_e4m3", "t_f8_e5m2", "t_i8",  "t_u8",  "t_bool"};
    std::vector<std::string> names;
    std::uint64_t previous_end = 0;
    for (const auto& tensor : file.tensors()) {
        names.push_back(tensor.name());
        CHECK(tensor.info().data_begin == previous_end);
        previous_end = tensor.info().data_end;
        CHECK(reinterpret_cast<std::uintptr_t>(tensor.bytes().data()) % anvil::dtype_size(tensor.type()) ==
              0);
    }
    CHECK(names == expected);
    CHECK(previous_end == file.data_size());
    CHECK(file.header_size() % 8 == 0);
    CHECK(file.file_size() == std::filesystem::file_size(data_dir / "all_dtypes.safetensors"));
    CHECK(file.path() == data_dir / "all_dtypes.safetensors");
    CHECK(file.source_name() == (data_dir / "all_dtypes.safetensors").string());
}

TEST_CASE("safetensors: views point into the mapping, no copy") {
    const auto file = anvil::safetensors_file::open(data_dir / "all_dtypes.safetensors");
    const auto whole = file.bytes();
    REQUIRE(whole.size() == file.file_size());
    for (const auto& tensor : file.tensors()) {
        CHECK(tensor.bytes().data() >= whole.data() + 8 + file.header_size());
        CHECK(tensor.bytes().data() + tensor.byte_size() <= whole.data() + whole.size());
        CHECK(tensor.bytes().data() == whole.data() + 8 + file.header_size() + tensor.info().data_begin);
    }
    // Moving the file keeps the mapping, so the views stay valid.
    const auto* before = file.tensor("t_f32").bytes().data();
    auto moved = anvil::safetensors_file::open(data_dir / "all_dtypes.safetensors");
    const auto* moved_before = moved.tensor("t_f32").bytes().data();
    const auto target = std::move(moved);
    CHECK(target.tensor("t_f32").bytes().data() == moved_before);
    CHECK(target.tensor("t_f32").data<float>()[1] == -0.5f);
    CHECK(before != nullptr);
}

TEST_CASE("safetensors: special values of the narrow floats decode as their specifications say") {
    const auto file = anvil::safetensors_file::open(data_dir / "special_floats.safetensors");
    const float inf = std::numeric_limits<float>::infinity();
    const auto f16 = file.tensor("f16").to_f32();
    REQUIRE(f16.size() == 8);
    CHECK(f16[0] == 65504.0f);
    CHECK(f16[1] == -65504.0f);
    CHECK(f16[2] == std::ldexp(1.0f, -14));
    CHECK(f16[3] == std::ldexp(1.0f, -24));
    CHECK(f16[4] == inf);
    CHECK(f16[5] == -inf);
    CHECK((f16[6] == 0.0f && std::signbit(f16[6])));
    CHECK(std::isnan(f16[7]));
    const auto bf16 = file.tensor("bf16").to_f32();
    REQUIRE(bf16.size() == 5);
    CHECK(bf16[0] == 3.38953139e38f);
    CHECK(bf16[1] == std::ldexp(1.0f, -133));
    CHECK(bf16[2] == inf);
    CHECK((bf16[3] == 0.0f && std::signbit(bf16[3])));
    CHECK(std::isnan(bf16[4]));
    const auto e4m3 = file.tensor("f8_e4m3").to_f32();
    REQUIRE(e4m3.size() == 6);
    CHECK(e4m3[0] == 448.0f);
    CHECK(e4m3[1] == -448.0f);
    CHECK(e4m3[2] == std::ldexp(1.0f, -9));
    CHECK(e4m3[3] == std::ldexp(1.0f, -6));
    CHECK((e4m3[4] == 0.0f && std::signbit(e4m3[4])));
    CHECK(std::isnan(e4m3[5]));
    const auto e5m2 = file.tensor("f8_e5m2").to_f32();
    REQUIRE(e5m2.size() == 6);
    CHECK(e5m2[0] == 57344.0f);
    CHECK(e5m2[1] == std::ldexp(1.0f, -16));
    CHECK(e5m2[2] == std::ldexp(1.0f, -14));
    CHECK(e5m2[3] == inf);
    CHECK(e5m2[4] == -inf);
    CHECK(std::isnan(e5m2[5]));
    // fp8 tensors have no C++ element type: their bytes are the raw codes.
    CHECK(file.tensor("f8_e4m3").bytes()[0] == std::byte{0x7E});
    const auto as_half = file.tensor("f8_e5m2").to_f16();
    CHECK(static_cast<float>(as_half[0]) == 57344.0f);
}

TEST_CASE("safetensors: the extremes of every integer type read exactly") {
    const auto file = anvil::safetensors_file::open(data_dir / "wide_ints.safetensors");
    const auto i64 = file.tensor("i64").data<std::int64_t>();
    REQUIRE(i64.size() == 4);
    CHECK(i64[0] == std::numeric_limits<std::int64_t>::min());
    CHECK(i64[1] == std::numeric_limits<std::int64_t>::max());
    CHECK(i64[2] == (std::int64_t{1} << 53) + 1);
    CHECK(i64[3] == -1);
    const auto u64 = file.tensor("u64").data<std::uint64_t>();
    REQUIRE(u64.size() == 3);
    CHECK(u64[0] == std::numeric_limits<std::uint64_t>::max());
    CHECK(u64[1] == std::uint64_t{1} << 63);
    CHECK(file.tensor("i32").data<std::int32_t>()[0] == std::numeric_limits<std::int32_t>::min());
    CHECK(file.tensor("u32").data<std::uint32_t>()[0] == std::numeric_limits<std::uint32_t>::max());
    CHECK(file.tensor("i16").data<std::int16_t>()[1] == 32767);
    CHECK(file.tensor("u16").data<std::uint16_t>()[0] == 65535);
    CHECK(file.tensor("i8").data<std::int8_t>()[0] == -128);
    CHECK(file.tensor("u8").data<std::uint8_t>()[0] == 255);
    // to_f32 rounds as static_cast does.
    const auto i64_f32 = file.tensor("i64").to_f32();
    CHECK(i64_f32[0] == -9223372036854775808.0f);
    CHECK(i64_f32[2] == 9007199254740992.0f);
    CHECK(file.tensor("u32").to_f32()[1] == 16777216.0f);
}

TEST_CASE("safetensors: empty tensors, zero extents and scalars") {
    const auto file = anvil::safetensors_file::open(data_dir / "empty_and_scalar.safetensors");
    const auto& empty = file.tensor("empty");
    CHECK(empty.shape().size() == 1);
    CHECK(empty.shape()[0] == 0);
    CHECK(empty.element_count() == 0);
    CHECK(empty.bytes().empty());
    CHECK(empty.to_f32().empty());
    CHECK(empty.data<float>().empty());
    const auto& zero = file.tensor("zero_extent");
    CHECK(std::vector<std::int64_t>(zero.shape().begin(), zero.shape().end()) ==
          std::vector<std::int64_t>{2, 0, 3});
    CHECK(zero.element_count() == 0);
    const auto& scalar = file.tensor("scalar");
    CHECK(scalar.rank() == 0);
    CHECK(scalar.element_count() == 1);
    CHECK(scalar.to_f32() == std::vector<float>{-2.5f});
    CHECK(scalar.data<double>()[0] == -2.5);
    const auto& flag = file.tensor("flag");
    CHECK(flag.type() == anvil::dtype::boolean);
    CHECK(flag.to_f32() == std::vector<float>{1.0f});
    scalar.require_shape({});
}

TEST_CASE("safetensors: an unaligned tensor converts but refuses a typed view, saying why") {
    const auto file = anvil::safetensors_file::open(data_dir / "unaligned.safetensors");
    const auto& w = file.tensor("w");
    REQUIRE(reinterpret_cast<std::uintptr_t>(w.bytes().data()) % 4 != 0);
    CHECK(w.to_f32() == std::vector<float>{1.5f, -2.0f, 3.25f});
    CHECK_THROWS_WITH_AS(static_cast<void>(w.data<float>()),
                         doctest::Contains("'w': data is not aligned to 4 bytes"), anvil::type_error);
    CHECK(file.tensor("a").data<std::int8_t>()[1] == -2);
}

TEST_CASE("safetensors: header order does not matter, offsets do") {
    const auto file = anvil::safetensors_file::open(data_dir / "unordered.safetensors");
    std::vector<std::string> names;
    for (const auto& tensor : file.tensors())
        names.push_back(tensor.name());
    CHECK(names == std::vector<std::string>{"a", "b", "c"});
    CHECK(file.tensor("c").data<std::int32_t>()[2] == 9);
    CHECK(file.tensor("b").to_f32() == std::vector<float>{3.0f});
    CHECK(*file.find_metadata("note") == "keys out of order");
}

TEST_CASE("safetensors: UTF-8 names, the empty name and UTF-8 metadata") {
    const auto file = anvil::safetensors_file::open(data_dir / "unicode_names.safetensors");
    CHECK(file.tensor("").data<std::uint8_t>()[0] == 1);
    CHECK(file.tensor("caf\xc3\xa9.weight").data<std::uint8_t>()[0] == 2);
    CHECK(file.tensor("\xe5\xb1\x82.0").data<std::uint8_t>()[0] == 3);
    CHECK(file.tensor("emoji.\xf0\x9f\x98\x80").data<std::uint8_t>()[0] == 4);
    CHECK(*file.find_metadata("t\xc3\xaate") == "\xc3\xa9t\xc3\xa9");
}

TEST_CASE("safetensors: files without tensors, with and without metadata (Hugging Face's test_empty bytes)") {
    const auto empty = anvil::safetensors_file::open(data_dir / "no_tensors.safetensors");
    CHECK(empty.tensors().empty());
    CHECK(empty.metadata().empty());
    CHECK(empty.header_size() == 8);
    CHECK(empty.data_size() == 0);
    const auto metadata_only = anvil::safetensors_file::open(data_dir / "metadata_only.safetensors");
    CHECK(metadata_only.tensors().empty());
    CHECK(metadata_only.header_size() == 40);
    REQUIRE(metadata_only.metadata().size() == 1);
    CHECK(metadata_only.metadata()[0].second == "pt");
}

TEST_CASE("safetensors: lookups that fail name the file and suggest close names") {
    const auto file = anvil::safetensors_file::open(data_dir / "all_dtypes.safetensors");
    CHECK(file.find("t_f3") == nullptr);
    CHECK(file.contains("t_f32"));
    const std::string path = (data_dir / "all_dtypes.safetensors").string();
    CHECK_THROWS_WITH_AS(static_cast<void>(file.tensor("t_f3")),
                         doctest::Contains((path + ": no tensor named 't_f3' (did you mean 't_f32'").c_str()),
                         anvil::format_error);
    CHECK_THROWS_WITH_AS(static_cast<void>(file.tensor("model.t_f32")),
                         doctest::Contains("did you mean 't_f32'?"), anvil::format_error);
    CHECK_THROWS_WITH_AS(static_cast<void>(file.tensor("completely.unrelated.name")),
                         doctest::Contains("(it holds 15 tensors)"), anvil::format_error);
}

TEST_CASE("safetensors: require_shape and require_type give the model loaders' messages") {
    const auto file =
        anvil::safetensors_file::parse(read_bytes(data_dir / "all_dtypes.safetensors"), "model.safetensors");
    const auto& t = file.tensor("t_f32");
    CHECK(&t.require_shape({2, 3}) == &t);
    t.require_shape({anvil::dyn, 3});
    t.require(anvil::dtype::f32, {2, 3});
    CHECK_THROWS_WITH_AS(t.require_shape({3, 2}),
                         "model.safetensors: tensor 't_f32': expected shape [3, 2], got [2, 3]",
                         anvil::shape_error);
    CHECK_THROWS_WITH_AS(t.require_shape({6}),
                         "model.safetensors: tensor 't_f32': expected shape [6], got [2, 3]",
                         anvil::shape_error);
    CHECK_THROWS_WITH_AS(t.require_type(anvil::dtype::bf16),
                         "model.safetensors: tensor 't_f32': expected dtype bf16, got f32",
                         anvil::type_error);
    CHECK_THROWS_WITH_AS(static_cast<void>(t.data<anvil::half>()),
                         "model.safetensors: tensor 't_f32': elements are f32, not the requested f16",
                         anvil::type_error);
    std::vector<float> wrong(5);
    CHECK_THROWS_WITH_AS(t.to_f32(wrong),
                         doctest::Contains("to_f32 needs room for exactly 6 elements, got 5"),
                         anvil::shape_error);
    std::vector<anvil::half> halves(6);
    t.to_f16(halves);
    CHECK(static_cast<float>(halves[5]) == 0.5f);
    CHECK(file.path().empty());
    CHECK(t.source_name() == "model.safetensors");
}

TEST_CASE("safetensors: the writer reproduces the independent writer's bytes") {
    // Added in shuffled order: the layout is the writer's job.
    std::vector<formula> shuffled = formulas();
    std::mt19937 random(7);
    std::shuffle(shuffled.begin(), shuffled.end(), random);
    anvil::safetensors_writer writer;
    writer.set_metadata("format", "pt");
    writer.set_metadata("generator", "replaced below");
    writer.set_metadata("generator", "make_safetensors_fixtures.py");
    for (const auto& f : shuffled)
        writer.add(fixture_name(f.type), f.type, f.shape, encode(f));
    CHECK(writer.size() == 15);
    CHECK(writer.to_bytes() == read_bytes(data_dir / "all_dtypes.safetensors"));

    CHECK(anvil::safetensors_writer().to_bytes() == read_bytes(data_dir / "no_tensors.safetensors"));
    anvil::safetensors_writer metadata_only;
    metadata_only.set_metadata("framework", "pt");
    CHECK(metadata_only.to_bytes() == read_bytes(data_dir / "metadata_only.safetensors"));
}

TEST_CASE("safetensors: writer round trip through a file, typed adds and copies of views") {
    anvil::safetensors_writer writer;
    const std::vector<float> weights = {1.0f, -2.0f, 3.5f, 0.25f, 8.0f, -0.0f};
    writer.add("w", {2, 3}, weights);
    writer.add("ids", {3}, std::vector<std::int64_t>{5, -6, 7});
    writer.add("half", {1}, std::vector<anvil::half>{anvil::half(1.5f)});
    writer.add("odd", {3}, std::vector<std::uint8_t>{1, 2, 3});
    writer.add("scalar", {}, std::vector<double>{3.0});
    writer.add("empty", {0, 4}, std::vector<float>{});
    const auto path = std::filesystem::temp_directory_path() / "anvil_test_safetensors_roundtrip.safetensors";
    writer.write(path);
    {
        const auto file = anvil::safetensors_file::open(path);
        CHECK(file.tensors().size() == 6);
        CHECK(file.header_size() % 8 == 0);
        const auto w = file.tensor("w").data<float>();
        CHECK(std::vector<float>(w.begin(), w.end()) == weights);
        CHECK(file.tensor("ids").data<std::int64_t>()[1] == -6);
        CHECK(static_cast<float>(file.tensor("half").data<anvil::half>()[0]) == 1.5f);
        CHECK(file.tensor("scalar").data<double>()[0] == 3.0);
        CHECK(file.tensor("empty").element_count() == 0);
        CHECK(std::filesystem::file_size(path) == file.file_size());
        CHECK(file.bytes().size() == writer.to_bytes().size());
        CHECK(std::equal(file.bytes().begin(), file.bytes().end(), writer.to_bytes().begin()));

        anvil::safetensors_writer copy;
        for (const auto& tensor : file.tensors())
            copy.add(tensor);
        copy.add("w_again", file.tensor("w"));
        const auto again = anvil::safetensors_file::parse(copy.to_bytes(), "copy");
        CHECK(again.tensor("w_again").to_f32() == weights);
        CHECK(again.tensor("odd").bytes().size() == 3);
    }
    std::filesystem::remove(path);
}

TEST_CASE("safetensors: the writer refuses what would make an invalid file") {
    anvil::safetensors_writer writer;
    const std::vector<float> six(6);
    writer.add("w", {2, 3}, six);
    CHECK_THROWS_WITH_AS(writer.add("w", {6}, six), "safetensors_writer: tensor 'w' is added twice",
                         anvil::format_error);
    CHECK_THROWS_WITH_AS(writer.add("v", {4}, six),
                         "safetensors_writer: tensor 'v': f32 [4] needs 16 bytes, got 24",
                         anvil::shape_error);
    CHECK_THROWS_WITH_AS(writer.add("n", {-1, 2}, six),
                         doctest::Contains("'n': shape [-1, 2] has a negative extent"), anvil::shape_error);
    CHECK_THROWS_AS(writer.add("__metadata__", {6}, six), anvil::format_error);
    CHECK_THROWS_WITH_AS(writer.write("/nonexistent-folder/x.safetensors"),
                         doctest::Contains("/nonexistent-folder/x.safetensors: cannot open for writing"),
                         anvil::io_error);
}

TEST_CASE("safetensors: every file of the malformed corpus is refused with its own message") {
    check_malformed_corpus("safetensors", 14, [](const std::filesystem::path& path) {
        static_cast<void>(anvil::safetensors_file::open(path));
    });
}

TEST_CASE("safetensors: a JSON error keeps its offset, counted from the start of the file") {
    try {
        static_cast<void>(anvil::safetensors_file::parse(with_header("{\"a\" 1}"), "m.safetensors"));
        FAIL("accepted");
    } catch (const anvil::json_error& e) {
        CHECK(e.offset() == 8 + 5);
        CHECK(std::string(e.what()).find("m.safetensors: header: byte 5:") == 0);
        CHECK(std::string(e.what()).find("(file byte 13)") != std::string::npos);
    }
}

TEST_CASE("safetensors: hostile headers fail fast and small") {
    // 1 MB of nesting inside an object: refused at depth 8, not by the stack.
    CHECK(message_of(with_header("{\"a\":" + std::string(1'000'000, '['))).find("nesting deeper than 8") !=
          std::string::npos);
    // A 100 MB array never becomes a tree: the first byte decides.
    CHECK(message_of(with_header(" [" + std::string(10'000'000, '0'))).find("starts with '['") !=
          std::string::npos);
    // A million dimensions, each 1.
    std::string dims = "{\"w\":{\"dtype\":\"U8\",\"shape\":[1";
    for (int i = 1; i < 1'000'000; ++i)
        dims += ",1";
    dims += "],\"data_offsets\":[0,1]}}";
    CHECK(message_of(with_header(dims, 1))
              .find("tensor 'w': the array at file byte 35 holds more than 64 values") != std::string::npos);
    // A very long name is cut short in messages.
    const std::string long_name(100'000, 'x');
    const auto message = message_of(with_header("{\"" + long_name + "\":1}"));
    CHECK(message.find("... (100000 bytes)") != std::string::npos);
    CHECK(message.size() < 500);
    // A duplicated long name: the parser's message is cut short too.
    const std::string entry = "\"" + long_name + "\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}";
    const auto duplicate = message_of(with_header("{" + entry + "," + entry + "}"));
    CHECK(duplicate.find("duplicate key") != std::string::npos);
    CHECK(duplicate.size() < 700);
    // Control characters in names are escaped.
    CHECK(message_of(with_header("{\"a\\u0001\":1}")).find("tensor 'a\\x01'") != std::string::npos);
    // Shapes whose product overflows only through the dtype size.
    CHECK(
        message_of(
            with_header("{\"w\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952],\"data_offsets\":[0,0]}}"))
            .find("has more than 2^64 bytes") != std::string::npos);
    // Offsets near 2^63 never wrap.
    CHECK(
        message_of(with_header("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[9223372036854775807,"
                               "9223372036854775807]}}"))
            .find("run past the end of the 0-byte data section") != std::string::npos);
}

TEST_CASE("safetensors: the pre-parse array bound ignores brackets and commas inside strings") {
    std::string commas(5000, ',');
    const std::string header = "{\"__metadata__\":{\"config\":\"[" + commas + "\\\"[" + commas +
                               "\"},\"w\\\"[,\":{\"dtype\":\"U8\",\"shape\":[1,1,1],\"data_offsets\":[0,1]}}";
    auto bytes = with_header(header, 1);
    const auto file = anvil::safetensors_file::parse(std::move(bytes), "strings.safetensors");
    CHECK(file.find_metadata("config")->size() == 10003);
    CHECK(file.tensor("w\"[,").element_count() == 1);
    // Exactly 64 dimensions is the most a shape may have.
    std::string dims = "{\"w\":{\"dtype\":\"U8\",\"shape\":[1";
    for (int i = 1; i < 64; ++i)
        dims += ",1";
    CHECK(message_of(with_header(dims + "],\"data_offsets\":[0,1]}}", 1)) == "(accepted)");
    CHECK(message_of(with_header(dims + ",1],\"data_offsets\":[0,1]}}", 1)).find("more than 64 values") !=
          std::string::npos);
}

TEST_CASE("safetensors: many tensors parse quickly and find() uses the sorted index") {
    anvil::safetensors_writer writer;
    const std::vector<std::uint8_t> one = {7};
    for (int i = 0; i < 20000; ++i)
        writer.add("layer." + std::to_string(i) + ".weight", {1}, one);
    const auto bytes = writer.to_bytes();
    const auto file = anvil::safetensors_file::parse(bytes, "many");
    CHECK(file.size() == 20000);
    for (int i = 0; i < 20000; i += 997) {
        const auto* found = file.find("layer." + std::to_string(i) + ".weight");
        REQUIRE(found != nullptr);
        CHECK(found->name() == "layer." + std::to_string(i) + ".weight");
    }
    CHECK_THROWS_WITH_AS(static_cast<void>(file.tensor("layer.5.weights")),
                         doctest::Contains("did you mean 'layer.5.weight'"), anvil::format_error);
}

TEST_CASE("mapped_file: maps whole files, handles empty ones and names the path when it cannot") {
    const auto path = data_dir / "no_tensors.safetensors";
    auto file = anvil::mapped_file::open(path, anvil::access_hint::sequential);
    CHECK(file.size() == 16);
    CHECK(file.path() == path);
    CHECK(file.bytes()[8] == std::byte{'{'});
    const auto* address = file.bytes().data();
    anvil::mapped_file moved = std::move(file);
    CHECK(moved.bytes().data() == address);
    CHECK(file.empty());
    moved.advise(anvil::access_hint::will_need);

    const auto empty_path = std::filesystem::temp_directory_path() / "anvil_test_empty.safetensors";
    { std::ofstream create(empty_path); }
    const auto empty = anvil::mapped_file::open(empty_path);
    CHECK(empty.size() == 0);
    CHECK(empty.bytes().empty());
    CHECK_THROWS_WITH_AS(static_cast<void>(anvil::safetensors_file::open(empty_path)),
                         doctest::Contains("the file is 0 bytes, shorter than the 8-byte header length"),
                         anvil::format_error);
    std::filesystem::remove(empty_path);

    CHECK_THROWS_WITH_AS(static_cast<void>(anvil::mapped_file::open(data_dir / "missing.safetensors")),
                         doctest::Contains("missing.safetensors: cannot open for reading: No such file"),
                         anvil::io_error);
    CHECK_THROWS_WITH_AS(static_cast<void>(anvil::mapped_file::open(data_dir)),
                         doctest::Contains("is a folder"), anvil::io_error);
}

}  // namespace test_safetensors
