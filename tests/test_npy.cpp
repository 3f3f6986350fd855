#include <doctest/doctest.h>
#include <anvil/anvil.hpp>
#include "malformed_corpus.hpp"

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

// A namespace of its own, so the test files can be compiled together (a unity build).
namespace test_npy {

// The fixtures in tests/data/npy/ were written by numpy (tools/fixtures/make_npy_fixtures.py); each array's
// values follow a formula of the flat C-order index i, restated here, so the expected values are computed
// independently of both numpy's files and anvil's reader.

namespace {

namespace fs = std::filesystem;
namespace npy = anvil::npy;

fs::path npy_fixture(std::string_view name) {
    return fs::path(ANVIL_TEST_DATA_DIR) / "npy" / name;
}

std::vector<std::byte> file_bytes(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    REQUIRE_MESSAGE(in.good(), "cannot open ", path.string());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::byte> bytes(text.size());
    for (std::size_t i = 0; i < text.size(); ++i)
        bytes[i] = static_cast<std::byte>(text[i]);
    return bytes;
}

std::vector<std::byte> bytes_of(std::string_view text) {
    std::vector<std::byte> bytes;
    for (const char c : text)
        bytes.push_back(static_cast<std::byte>(c));
    return bytes;
}

// A version 1.0 file as the .npy format document describes it: magic, version, u16 length, header, data.
std::vector<std::byte> npy_file(std::string_view header, std::string_view data) {
    std::string file = "\x93NUMPY\x01";
    file += '\0';
    file += static_cast<char>(header.size() & 0xff);
    file += static_cast<char>(header.size() >> 8);
    file += header;
    file += data;
    return bytes_of(file);
}

std::string parse_error(std::span<const std::byte> bytes, std::string_view source) {
    try {
        static_cast<void>(npy::parse(bytes, source));
    } catch (const anvil::format_error& e) {
        return e.what();
    }
    return "(no error)";
}

std::vector<std::int64_t> dims(std::initializer_list<std::int64_t> extents) {
    return extents;
}

// A folder under the system's temporary folder, removed with its contents at the end of the test.
struct temporary_folder {
    fs::path path;
    temporary_folder() {
        std::random_device random;
        path = fs::temp_directory_path() /
               ("anvil_test_npy_" + std::to_string(random()) + std::to_string(random()));
        fs::create_directories(path);
    }
    temporary_folder(const temporary_folder&) = delete;
    temporary_folder& operator=(const temporary_folder&) = delete;
    ~temporary_folder() {
        std::error_code ignored;
        fs::remove_all(path, ignored);
    }
};

// Every little-endian C-order fixture numpy wrote, with the dtype and shape it holds.
struct numpy_fixture {
    std::string_view name;
    anvil::dtype type;
    std::vector<std::int64_t> shape;
};

const std::vector<numpy_fixture>& c_order_fixtures() {
    using anvil::dtype;
    static const std::vector<numpy_fixture> fixtures = {
        {"f32.npy", dtype::f32, {2, 3}},
        {"f16.npy", dtype::f16, {2, 3}},
        {"f64.npy", dtype::f64, {5}},
        {"i64.npy", dtype::i64, {3}},
        {"i32.npy", dtype::i32, {2, 2}},
        {"i16.npy", dtype::i16, {4}},
        {"i8.npy", dtype::i8, {4}},
        {"u64.npy", dtype::u64, {2}},
        {"u32.npy", dtype::u32, {3}},
        {"u16.npy", dtype::u16, {3}},
        {"u8.npy", dtype::u8, {4}},
        {"bool.npy", dtype::boolean, {5}},
        {"f32_scalar.npy", dtype::f32, {}},
        {"f32_empty.npy", dtype::f32, {0, 3}},
        {"i64_empty.npy", dtype::i64, {2, 0, 4}},
        {"f32_long_extent.npy", dtype::f32, {1234567890123, 0}},
        {"u8_many_dims.npy", dtype::u8, {2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3}},
        {"u8_header_boundary.npy", dtype::u8, {0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 100}},
    };
    return fixtures;
}

template <class T, class Formula>
void check_values(const npy::array& array, std::size_t count, Formula formula) {
    const std::vector<T> values = array.values<T>();
    REQUIRE(values.size() == count);
    for (std::size_t i = 0; i < count; ++i) {
        CAPTURE(i);
        CHECK(values[i] == formula(static_cast<std::int64_t>(i)));
    }
}

}  // namespace

TEST_CASE("npy: reads every dtype numpy writes, with the values numpy was given") {
    using anvil::dtype;
    for (const auto& fixture : c_order_fixtures()) {
        CAPTURE(fixture.name);
        const npy::array array = npy::read(npy_fixture(fixture.name));
        CHECK(array.type == fixture.type);
        CHECK(array.shape == fixture.shape);
        CHECK(array.data.size() == array.element_count() * anvil::dtype_size(array.type));
    }
    check_values<float>(npy::read(npy_fixture("f32.npy")), 6, [](auto i) { return float(i) * 0.5f - 1.0f; });
    check_values<anvil::half>(npy::read(npy_fixture("f16.npy")), 6,
                              [](auto i) { return anvil::half(float(i) * 0.25f - 0.5f); });
    check_values<double>(npy::read(npy_fixture("f64.npy")), 5, [](auto i) { return double(i) / 3.0; });
    check_values<std::int64_t>(npy::read(npy_fixture("i64.npy")), 3,
                               [](auto i) { return i * -1000000000000 + 7; });
    check_values<std::int32_t>(npy::read(npy_fixture("i32.npy")), 4,
                               [](auto i) { return static_cast<std::int32_t>(i * -100000 + 3); });
    check_values<std::int16_t>(npy::read(npy_fixture("i16.npy")), 4,
                               [](auto i) { return static_cast<std::int16_t>(i * -1000 + 5); });
    check_values<std::int8_t>(npy::read(npy_fixture("i8.npy")), 4,
                              [](auto i) { return static_cast<std::int8_t>(i * -40 + 60); });
    check_values<std::uint64_t>(npy::read(npy_fixture("u64.npy")), 2, [](auto i) {
        return static_cast<std::uint64_t>(i) * 10000000000000000000u + 1;
    });
    check_values<std::uint32_t>(npy::read(npy_fixture("u32.npy")), 3,
                                [](auto i) { return static_cast<std::uint32_t>(i) * 2000000000u + 1; });
    check_values<std::uint16_t>(npy::read(npy_fixture("u16.npy")), 3,
                                [](auto i) { return static_cast<std::uint16_t>(i * 30000 + 1); });
    check_values<std::uint8_t>(npy::read(npy_fixture("u8.npy")), 4,
                               [](auto i) { return static_cast<std::uint8_t>(i * 60 + 15); });
    check_values<bool>(npy::read(npy_fixture("bool.npy")), 5, [](auto i) { return i % 2 == 0; });
    check_values<std::uint8_t>(npy::read(npy_fixture("u8_many_dims.npy")), 6,
                               [](auto i) { return static_cast<std::uint8_t>(i); });
}

TEST_CASE("npy: big-endian files are byte-swapped on read") {
    const npy::array f32 = npy::read(npy_fixture("f32_big_endian.npy"));
    CHECK(f32.type == anvil::dtype::f32);
    CHECK(f32.shape == dims({2, 3}));
    check_values<float>(f32, 6, [](auto i) { return float(i) * 0.5f - 1.0f; });
    check_values<anvil::half>(npy::read(npy_fixture("f16_big_endian.npy")), 6,
                              [](auto i) { return anvil::half(float(i) * 0.25f - 0.5f); });
    check_values<std::int64_t>(npy::read(npy_fixture("i64_big_endian.npy")), 3,
                               [](auto i) { return i * -1000000000000 + 7; });
}

TEST_CASE("npy: Fortran-order files come back in C order") {
    const npy::array f32 = npy::read(npy_fixture("f32_fortran.npy"));
    CHECK(f32.shape == dims({2, 3, 4}));
    check_values<float>(f32, 24, [](auto i) { return float(i); });

    const npy::array i16 = npy::read(npy_fixture("i16_fortran_big_endian.npy"));
    CHECK(i16.shape == dims({3, 4}));
    check_values<std::int16_t>(i16, 12, [](auto i) { return static_cast<std::int16_t>(i * 100 - 500); });
}

TEST_CASE("npy: 0-d and empty arrays") {
    const npy::array scalar = npy::read(npy_fixture("f32_scalar.npy"));
    CHECK(scalar.shape.empty());
    CHECK(scalar.element_count() == 1);
    CHECK(scalar.values<float>() == std::vector<float>{-2.5f});

    const npy::array empty = npy::read(npy_fixture("i64_empty.npy"));
    CHECK(empty.shape == dims({2, 0, 4}));
    CHECK(empty.element_count() == 0);
    CHECK(empty.data.empty());
    CHECK(empty.to_f32().empty());
    CHECK(npy::read(npy_fixture("f32_long_extent.npy")).shape == dims({1234567890123, 0}));
}

TEST_CASE("npy: format versions 2.0 and 3.0 read like 1.0") {
    const npy::array version_1 = npy::read(npy_fixture("f32.npy"));
    for (const char* name : {"f32_v2.npy", "f32_v3.npy"}) {
        CAPTURE(name);
        const npy::array later = npy::read(npy_fixture(name));
        CHECK(later.type == version_1.type);
        CHECK(later.shape == version_1.shape);
        CHECK(later.data == version_1.data);
    }
}

TEST_CASE("npy: to_f32 converts every element") {
    std::vector<float> expected;
    for (int i = 0; i < 4; ++i)
        expected.push_back(static_cast<float>(i * -100000 + 3));
    CHECK(npy::read(npy_fixture("i32.npy")).to_f32() == expected);
    expected.clear();
    for (int i = 0; i < 6; ++i)
        expected.push_back(static_cast<float>(i) * 0.25f - 0.5f);
    CHECK(npy::read(npy_fixture("f16_big_endian.npy")).to_f32() == expected);
    expected.clear();
    for (int i = 0; i < 3; ++i)
        expected.push_back(static_cast<float>(i * -1000000000000LL + 7));
    CHECK(npy::read(npy_fixture("i64.npy")).to_f32() == expected);
}

TEST_CASE("npy: files anvil writes match numpy.save byte for byte") {
    const temporary_folder folder;
    for (const auto& fixture : c_order_fixtures()) {
        CAPTURE(fixture.name);
        const std::vector<std::byte> numpy_bytes = file_bytes(npy_fixture(fixture.name));
        const npy::array array = npy::parse(numpy_bytes, fixture.name);
        CHECK(npy::serialize(array.type, array.shape, array.data.data()) == numpy_bytes);
        const fs::path written = folder.path / fixture.name;
        npy::write(written, array);
        CHECK(file_bytes(written) == numpy_bytes);
    }
}

TEST_CASE("npy: typed writes read back with their dtype, shape and values") {
    const temporary_folder folder;
    const std::vector<std::int64_t> shape = {2, 3};
    std::vector<float> f32;
    std::vector<anvil::half> f16;
    std::vector<std::int64_t> i64;
    std::vector<std::int32_t> i32;
    for (int i = 0; i < 6; ++i) {
        f32.push_back(static_cast<float>(i) * 1.5f - 2.0f);
        f16.push_back(anvil::half(static_cast<float>(i) - 2.5f));
        i64.push_back(static_cast<std::int64_t>(i) * 3000000000LL - 5);
        i32.push_back(i * -7);
    }
    npy::write(folder.path / "f32.npy", shape, std::span<const float>(f32));
    npy::write(folder.path / "f16.npy", shape, f16);
    npy::write(folder.path / "i64.npy", shape, i64);
    npy::write(folder.path / "i32.npy", shape, std::span<const std::int32_t>(i32));

    const auto check = [&](const char* name, anvil::dtype type) {
        const npy::array array = npy::read(folder.path / name);
        CHECK(array.type == type);
        CHECK(array.shape == shape);
        return array;
    };
    CHECK(check("f32.npy", anvil::dtype::f32).values<float>() == f32);
    CHECK(check("f16.npy", anvil::dtype::f16).values<anvil::half>() == f16);
    CHECK(check("i64.npy", anvil::dtype::i64).values<std::int64_t>() == i64);
    CHECK(check("i32.npy", anvil::dtype::i32).values<std::int32_t>() == i32);

    const std::vector<std::int64_t> scalar_shape;
    npy::write(folder.path / "scalar.npy", scalar_shape, std::vector<double>{0.1});
    CHECK(npy::read(folder.path / "scalar.npy").values<double>() == std::vector<double>{0.1});
}

TEST_CASE("npy: writing refuses what numpy could not hold or the shape does not fit") {
    const temporary_folder folder;
    const fs::path target = folder.path / "out.npy";
    const std::vector<std::int64_t> shape = {2, 3};
    const std::vector<float> five(5, 1.0f);
    const auto message_of = [](auto&& action) -> std::string {
        try {
            action();
        } catch (const anvil::error& e) {
            return e.what();
        }
        return "(no error)";
    };
    CHECK_THROWS_AS(npy::write(target, shape, five), anvil::shape_error);
    CHECK(message_of([&] { npy::write(target, shape, five); }) ==
          target.string() + ": shape [2, 3] needs 6 elements, got 5");
    const std::vector<std::uint16_t> bits(6, 0);
    CHECK_THROWS_AS(npy::write(target, anvil::dtype::bf16, shape, bits.data()), anvil::type_error);
    CHECK(message_of([&] { npy::write(target, anvil::dtype::bf16, shape, bits.data()); }) ==
          target.string() + ": cannot write bf16: numpy has no such dtype");
    CHECK_THROWS_AS(npy::write(target, anvil::dtype::f32, dims({-1, 3}), five.data()), anvil::shape_error);
    CHECK_THROWS_AS(npy::write(folder.path / "missing" / "x.npy", shape, std::vector<float>(6)),
                    anvil::io_error);
    CHECK_FALSE(fs::exists(target));
    CHECK_THROWS_AS(static_cast<void>(npy::read(npy_fixture("f32.npy")).values<std::int32_t>()),
                    anvil::type_error);
    const npy::array short_data{anvil::dtype::f32, shape, std::vector<std::byte>(20)};
    CHECK_THROWS_WITH_AS(npy::write(target, short_data),
                         "npy::array: data has 20 bytes, shape [2, 3] of f32 needs 24", anvil::shape_error);
    CHECK_THROWS_AS(static_cast<void>(short_data.to_f32()), anvil::shape_error);
}

TEST_CASE("npy: files that cannot be opened are io_errors naming the path") {
    const fs::path missing = npy_fixture("no_such_file.npy");
    try {
        static_cast<void>(npy::read(missing));
        FAIL("reading a missing file did not throw");
    } catch (const anvil::io_error& e) {
        CHECK(std::string(e.what()).find("no_such_file.npy: cannot open for reading") != std::string::npos);
    }
    CHECK_THROWS_AS(static_cast<void>(npy::read(fs::path(ANVIL_TEST_DATA_DIR) / "npy")), anvil::io_error);
}

// Headers written by hand in ways Python's literal syntax (and so numpy.load) accepts.
TEST_CASE("npy: hand-written header variants") {
    const std::string data(24, '\0');
    for (const std::string_view header : {
             std::string_view("{\"shape\": (2, 3), \"descr\": \"<f4\", \"fortran_order\": False}"),
             std::string_view("{'fortran_order':False,'shape':(2,3,),'descr':'<f4',}"),
             std::string_view(
                 "  {\n\t'descr' : '<f4' ,\n\t'fortran_order' : False ,\n\t'shape' : ( 2 , 3 )\n}  \n"),
             std::string_view("{'descr': '=f4', 'fortran_order': False, 'shape': (2, 3)}"),
             std::string_view("{'descr': 'f4', 'fortran_order': False, 'shape': (2, 3)}"),
         }) {
        CAPTURE(header);
        const npy::array array = npy::parse(npy_file(header, data), "variant.npy");
        CHECK(array.type == anvil::dtype::f32);
        CHECK(array.shape == dims({2, 3}));
    }
    const npy::array one =
        npy::parse(npy_file("{'descr':'|u1','fortran_order':True,'shape':(3,)}", "abc"), "x");
    CHECK(one.shape == dims({3}));
    CHECK(one.values<std::uint8_t>() == std::vector<std::uint8_t>{'a', 'b', 'c'});
    const npy::array scalar = npy::parse(
        npy_file("{'descr':'<i4','fortran_order':False,'shape':()}", std::string_view("\x05\0\0\0", 4)), "x");
    CHECK(scalar.shape.empty());
    CHECK(scalar.values<std::int32_t>() == std::vector<std::int32_t>{5});
}

TEST_CASE("npy: every truncation of a valid file is a format_error naming the source") {
    const std::vector<std::byte> bytes = file_bytes(npy_fixture("f32_fortran.npy"));
    for (std::size_t size = 0; size < bytes.size(); ++size) {
        CAPTURE(size);
        const std::string message = parse_error(std::span(bytes).first(size), "cut.npy");
        CHECK(message.starts_with("cut.npy: "));
    }
}

TEST_CASE("npy: each malformed file in the corpus is rejected with its own message") {
    check_malformed_corpus("npy", 8, [](const fs::path& path) { static_cast<void>(npy::read(path)); });
}

TEST_CASE("npy: numpy loads the files anvil writes") {
    // Runs where /usr/bin/python3 has numpy (the development machines); elsewhere it says so and checks
    // nothing.
    if (!fs::exists("/usr/bin/python3") ||
        std::system("/usr/bin/python3 -c 'import numpy' > /dev/null 2>&1") != 0) {
        MESSAGE("skipped: /usr/bin/python3 with numpy is not available, so numpy cannot load anvil's files");
        return;
    }
    const temporary_folder folder;
    std::vector<float> f32;
    std::vector<anvil::half> f16;
    std::vector<std::int64_t> i64;
    std::vector<std::int32_t> i32;
    for (int i = 0; i < 24; ++i) {
        f32.push_back(static_cast<float>(i) * 0.5f - 3.0f);
        f16.push_back(anvil::half(static_cast<float>(i) * 0.25f));
        i64.push_back(static_cast<std::int64_t>(i) * -10000000000LL);
        i32.push_back(i * 1000 - 7);
    }
    npy::write(folder.path / "f32.npy", dims({2, 3, 4}), f32);
    npy::write(folder.path / "f16.npy", dims({24}), f16);
    npy::write(folder.path / "i64.npy", dims({4, 6}), i64);
    npy::write(folder.path / "i32.npy", dims({1, 2, 3, 4}), i32);
    npy::write(folder.path / "scalar.npy", dims({}), std::vector<float>{7.25f});
    npy::write(folder.path / "empty.npy", dims({3, 0}), std::vector<std::int32_t>{});

    std::ofstream script(folder.path / "check.py");
    script << "import sys, numpy as np\n"
              "d = sys.argv[1]\n"
              "def check(name, descr, shape, expected):\n"
              "    a = np.load(d + '/' + name)\n"
              "    assert a.dtype == np.dtype(descr), (name, a.dtype)\n"
              "    assert a.shape == shape, (name, a.shape)\n"
              "    assert np.array_equal(a, np.asarray(expected, dtype=descr).reshape(shape)), (name, a)\n"
              "i = np.arange(24)\n"
              "check('f32.npy', '<f4', (2, 3, 4), i * 0.5 - 3)\n"
              "check('f16.npy', '<f2', (24,), i * 0.25)\n"
              "check('i64.npy', '<i8', (4, 6), i * -10000000000)\n"
              "check('i32.npy', '<i4', (1, 2, 3, 4), i * 1000 - 7)\n"
              "check('scalar.npy', '<f4', (), 7.25)\n"
              "check('empty.npy', '<i4', (3, 0), [])\n";
    script.close();
    const std::string command =
        "/usr/bin/python3 '" + (folder.path / "check.py").string() + "' '" + folder.path.string() + "'";
    CHECK_MESSAGE(std::system(command.c_str()) == 0, "numpy rejected a file anvil wrote: ", command);
}

}  // namespace test_npy
