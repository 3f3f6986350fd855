// JSON: RFC 8259 acceptance and rejection (messages and byte offsets), numbers, Unicode, the writer against
// Python's json module, limits, and the malformed corpus under tests/data/malformed/json.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>
#include "malformed_corpus.hpp"

#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

// A namespace of its own, so the test files can be compiled together (a unity build).
namespace test_json {

namespace json = anvil::json;
using namespace std::string_literals;

namespace {

const std::filesystem::path data_dir = ANVIL_TEST_DATA_DIR;

std::string read_bytes(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    REQUIRE(in);
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
}

// The json_error thrown for text, which must fail.
anvil::json_error parse_error(std::string_view text, const json::parse_options& options = {}) {
    try {
        (void)json::parse(text, "test.json", options);
    } catch (const anvil::json_error& e) {
        return e;
    }
    FAIL("parsed without error: ", text);
    return anvil::json_error("", 0);
}

struct rejection {
    std::string text;
    std::string message;  // what the error must say, after "test.json: byte <offset>: "
    std::size_t offset;
};

}  // namespace

TEST_CASE("json: accepts RFC 8259 documents") {
    const std::vector<std::string> documents = {"[]",
                                                "{}",
                                                "[[]]",
                                                "0",
                                                "-0",
                                                "\"\"",
                                                "true",
                                                "false",
                                                "null",
                                                " [1] ",
                                                "\t\r\n[1]\n",
                                                "1e5",
                                                "1E+5",
                                                "1.5e-5",
                                                "-0.0e0",
                                                "[1,2,3]",
                                                R"({"a":{"b":[1,{"c":null}]}})",
                                                R"("\u0000")",
                                                R"("\/")",
                                                R"({"":0})",
                                                "[1e-400]",
                                                "[123456789012345678901234567890]",
                                                R"("\uDBFF\uDFFF")",
                                                R"("\uaBcD")",
                                                "\"\xc2\x80\xdf\xbf\xe0\xa0\x80\xed\x9f\xbf\xee\x80\x80\xef"
                                                "\xbf\xbf\xf0\x90\x80\x80\xf4\x8f\xbf\xbf\"",
                                                "\"\xe2\x80\xa8\"",
                                                "\"\x7f\"",
                                                R"([1, "a", {"b": [true, false, null]}, -1.5E-2, 0.0])",
                                                " { \"a\" : [ 1 , 2 ] , \"b\" : { } } "};
    for (const std::string& document : documents) {
        CAPTURE(document);
        CHECK_NOTHROW((void)json::parse(document));
    }
}

TEST_CASE("json: rejects malformed text with a message and the byte offset of the defect") {
    const std::vector<rejection> cases = {
        {"", "empty input", 0},
        {"  \n ", "empty input (only whitespace)", 4},
        {"\xef\xbb\xbf{}", "byte order mark (U+FEFF) at the start", 0},
        {"\xef\xbb", "expected a JSON value, found byte 0xEF", 0},
        {"[1,2,]", "trailing comma before ']'", 5},
        {R"({"a":1,})", "trailing comma before '}'", 7},
        {R"({"a" 1})", "expected ':' after object key, found '1'", 5},
        {R"({"a":1 "b":2})", "expected ',' or '}' after object member, found '\"'", 7},
        {R"({"a":1])", "expected ',' or '}' after object member, found ']'", 6},
        {"[1 2]", "expected ',' or ']' after array element, found '2'", 3},
        {"[1}", "expected ',' or ']' after array element, found '}'", 2},
        {"[\"a\"\x01]", "expected ',' or ']' after array element, found byte 0x01", 4},
        {"[1,", "expected a JSON value, found end of input", 3},
        {"[", "expected a JSON value, found end of input", 1},
        {"{", "expected a string as object key, found end of input", 1},
        {"{1:2}", "expected a string as object key, found '1'", 1},
        {R"({"a":})", "expected a JSON value, found '}'", 5},
        {"[\xc3\xa9]", "expected a JSON value, found byte 0xC3", 1},
        {"[True]", "expected a JSON value, found 'T'", 1},
        {"[\"abc", "unterminated string (it starts at byte 1)", 5},
        {"[\"\\", "unterminated string (input ends inside an escape)", 3},
        {"[\"a\tb\"]", "unescaped control character 0x09 in string", 3},
        {"[\"\x1f\"]", "unescaped control character 0x1F in string", 2},
        {R"(["\x"])", "invalid escape '\\x' in string", 2},
        {R"(["\U0041"])", "invalid escape '\\U' in string", 2},
        {"[\"\\\x01\"]", "invalid escape in string: '\\' followed by byte 0x01", 2},
        {R"(["\u12G4"])", "invalid \\u escape: expected 4 hex digits", 2},
        {R"(["\u12"])", "invalid \\u escape: expected 4 hex digits", 2},
        {"[\"\\u\x10\x11\x12\x13\"]", "invalid \\u escape: expected 4 hex digits", 2},
        {R"(["\ud800"])", "high surrogate \\ud800 not followed by a low surrogate escape", 2},
        {R"(["\uD800\u0041"])", "high surrogate \\uD800 not followed by a low surrogate escape", 2},
        {R"(["\ud800\ud800"])", "high surrogate \\ud800 not followed by a low surrogate escape", 2},
        {R"(["\udc00"])", "lone low surrogate \\udc00 in string", 2},
        {"[\"\xc0\xaf\"]", "invalid UTF-8 (overlong encoding) in string", 2},
        {"[\"\xc1\xbf\"]", "invalid UTF-8 (overlong encoding) in string", 2},
        {"[\"\xe0\x80\xaf\"]", "invalid UTF-8 (overlong encoding) in string", 2},
        {"[\"\xe0\x9f\xbf\"]", "invalid UTF-8 (overlong encoding) in string", 2},
        {"[\"\xf0\x80\x80\xaf\"]", "invalid UTF-8 (overlong encoding) in string", 2},
        {"[\"\xf0\x8f\xbf\xbf\"]", "invalid UTF-8 (overlong encoding) in string", 2},
        {"[\"\xed\xa0\x80\"]", "invalid UTF-8 (encoded surrogate) in string", 2},
        {"[\"\xed\xbf\xbf\"]", "invalid UTF-8 (encoded surrogate) in string", 2},
        {"[\"\xf4\x90\x80\x80\"]", "invalid UTF-8 (code point above U+10FFFF) in string", 2},
        {"[\"\xf5\x80\x80\x80\"]", "invalid UTF-8 (code point above U+10FFFF) in string", 2},
        {"[\"\xe2\x82\"]", "invalid UTF-8 (truncated sequence) in string", 2},
        {"[\"\xe2\x82", "invalid UTF-8 (truncated sequence) in string", 2},
        {"[\"ok\xf0\x9f\x98\"]", "invalid UTF-8 (truncated sequence) in string", 4},
        {"[\"\x80\"]", "invalid UTF-8 (unexpected continuation byte) in string", 2},
        {"[\"\xc3\xa9\xa9\"]", "invalid UTF-8 (unexpected continuation byte) in string", 4},
        {"[\"ab\xff\"]", "invalid UTF-8 (invalid byte 0xFF) in string", 4},
        {"[\"\xf8\x88\x80\x80\x80\"]", "invalid UTF-8 (invalid byte 0xF8) in string", 2},
        {"[012]", "leading zero in number", 1},
        {"[-012]", "leading zero in number", 1},
        {"[00]", "leading zero in number", 1},
        {"[+1]", "a number cannot start with '+'", 1},
        {"[.5]", "a number cannot start with '.'", 1},
        {"[1.]", "expected a digit after the decimal point, found ']'", 3},
        {"[1.e5]", "expected a digit after the decimal point, found 'e'", 3},
        {"[1e]", "expected a digit in the exponent, found ']'", 3},
        {"[1e+]", "expected a digit in the exponent, found ']'", 4},
        {"[-]", "expected a digit after '-', found ']'", 2},
        {"[- 1]", "expected a digit after '-', found byte 0x20", 2},
        {"[1e400]", "number out of range", 1},
        {"[-1e400]", "number out of range", 1},
        {"[1.7976931348623159e308]", "number out of range", 1},
        {"1" + std::string(400, '0'), "number out of range", 0},
        {"1e99999999999999999999", "number out of range", 0},
        {"[NaN]", "NaN and Infinity are not allowed in JSON", 1},
        {"[Infinity]", "NaN and Infinity are not allowed in JSON", 1},
        {"[-Infinity]", "NaN and Infinity are not allowed in JSON", 2},
        {"[tru]", "invalid literal (expected 'true')", 1},
        {"[nul", "invalid literal (expected 'null')", 1},
        {"[falsy]", "invalid literal (expected 'false')", 1},
        {"// c\n{}", "comments are not allowed in JSON", 0},
        {"[1,/* c */2]", "comments are not allowed in JSON", 3},
        {"['a']", "strings must be enclosed in double quotes, not single quotes", 1},
        {R"({"weight":1,"weight":2})", "duplicate key \"weight\" in object", 12},
        {R"({"a":{"x":1,"x":2}})", "duplicate key \"x\" in object", 12},
        {R"({"a\n":1,"a\n":2})", "duplicate key \"a\\n\" in object", 9},
        {"{} {}", "trailing data after the JSON value", 3},
        {"[1]]", "trailing data after the JSON value", 3},
        {"[1]/*c*/", "trailing data after the JSON value", 3},
        {"1 2", "trailing data after the JSON value", 2},
        {"truex", "trailing data after the JSON value", 4},
        {std::string(513, '[') + std::string(513, ']'), "nesting deeper than 512", 512},
    };
    for (const rejection& c : cases) {
        CAPTURE(c.text);
        const anvil::json_error e = parse_error(c.text);
        const std::string prefix = "test.json: byte " + std::to_string(c.offset) + ": ";
        CHECK(std::string_view(e.what()).substr(0, prefix.size()) == prefix);
        CHECK(std::string(e.what()).find(c.message) == prefix.size());
        CHECK(e.offset() == c.offset);
    }
}

TEST_CASE("json: errors are anvil::format_error and give the line and column") {
    const std::string text = "{\n  \"a\": 1,\n  \"b\" 2\n}";
    try {
        (void)json::parse(text, "cfg.json");
        FAIL("parsed");
    } catch (const anvil::format_error& e) {
        CHECK(std::string(e.what()) ==
              "cfg.json: byte 18: expected ':' after object key, found '2' (line 3, column 7)");
    }
    try {
        (void)json::parse("[1,]");
    } catch (const anvil::json_error& e) {
        CHECK(std::string(e.what()).rfind("JSON: byte 3: ", 0) == 0);
    }
}

TEST_CASE("json: integers that fit int64 are integers, everything else is a correctly rounded double") {
    constexpr auto int64_min = std::numeric_limits<std::int64_t>::min();
    constexpr auto int64_max = std::numeric_limits<std::int64_t>::max();
    CHECK(json::parse("9223372036854775807").as_int() == int64_max);
    CHECK(json::parse("-9223372036854775808").as_int() == int64_min);
    const json::value above = json::parse("9223372036854775808");
    CHECK(above.type() == json::kind::number);
    CHECK(above.as_double() == 9223372036854775808.0);
    const json::value below = json::parse("-9223372036854775809");
    CHECK(below.type() == json::kind::number);
    CHECK(below.as_double() == -9223372036854775808.0);
    CHECK(json::parse("123456789012345678901234567890").as_double() == 123456789012345678901234567890.0);

    const json::value minus_zero_int = json::parse("-0");
    CHECK(minus_zero_int.type() == json::kind::integer);
    CHECK(minus_zero_int.as_int() == 0);
    const json::value minus_zero = json::parse("-0.0");
    CHECK(minus_zero.type() == json::kind::number);
    CHECK(std::signbit(minus_zero.as_double()));
    CHECK(json::parse("1.0").type() == json::kind::number);
    CHECK(json::parse("1E2").type() == json::kind::number);
    CHECK(json::parse("1E2").as_double() == 100.0);

    CHECK(json::parse("0.1").as_double() == 0.1);
    CHECK(json::parse("0.1000000000000000055511151231257827021181583404541015625").as_double() == 0.1);
    CHECK(json::parse("2.2250738585072011e-308").as_double() == 2.2250738585072011e-308);
    CHECK(json::parse("1.7976931348623157e308").as_double() == std::numeric_limits<double>::max());
    CHECK(json::parse("4.9406564584124654e-324").as_double() == std::numeric_limits<double>::denorm_min());
    CHECK(json::parse("3e-324").as_double() == std::numeric_limits<double>::denorm_min());

    // Underflow to zero keeps the sign and is not an error.
    const json::value tiny = json::parse("1e-400");
    CHECK(tiny.as_double() == 0.0);
    CHECK_FALSE(std::signbit(tiny.as_double()));
    CHECK(std::signbit(json::parse("-1e-400").as_double()));
    CHECK(json::parse("2e-324").as_double() == 0.0);
    CHECK(json::parse("0.00000000000000000000000001e-300").as_double() == 0.0);
    CHECK(json::parse("1e-99999999999999999999").as_double() == 0.0);
    CHECK(json::parse("0e99999999999999999999").as_double() == 0.0);
    CHECK(json::parse("0.0e400").as_double() == 0.0);
    CHECK(json::parse("1e308").as_double() == 1e308);
}

TEST_CASE("json: unicode escapes become UTF-8 and surrogate pairs combine") {
    // Expected bytes from the Unicode standard's UTF-8 encoding of each code point.
    CHECK(json::parse(R"("\u0041")").as_string() == "A");
    CHECK(json::parse(R"("\u0000")").as_string() == "\0"s);
    CHECK(json::parse(R"("\u00e9")").as_string() == "\xc3\xa9");
    CHECK(json::parse(R"("\u07FF")").as_string() == "\xdf\xbf");
    CHECK(json::parse(R"("\u0800")").as_string() == "\xe0\xa0\x80");
    CHECK(json::parse(R"("\u4E2d")").as_string() == "\xe4\xb8\xad");
    CHECK(json::parse(R"("\uffff")").as_string() == "\xef\xbf\xbf");
    CHECK(json::parse(R"("\ud83d\ude00")").as_string() == "\xf0\x9f\x98\x80");  // U+1F600
    CHECK(json::parse(R"("\uD800\uDC00")").as_string() == "\xf0\x90\x80\x80");  // U+10000
    CHECK(json::parse(R"("\udbff\udfff")").as_string() == "\xf4\x8f\xbf\xbf");  // U+10FFFF
    CHECK(json::parse(R"("a\"b\\c\/d\be\ff\ng\rh\ti")").as_string() == "a\"b\\c/d\be\ff\ng\rh\ti");
    CHECK(json::parse("\"\xf0\x9f\x98\x80 raw\"").as_string() == "\xf0\x9f\x98\x80 raw");
    const std::string long_text(1000, 'x');
    CHECK(json::parse("\"" + long_text + "\\n" + long_text + "\"").as_string() ==
          long_text + "\n" + long_text);
}

TEST_CASE("json: values know their kind, offset and members") {
    const json::value v = json::parse(R"({"a": [10, "x", {"b": null}], "c": true, "d": 2.5})");
    CHECK(v.is_object());
    CHECK(v.offset() == 0);
    const json::array& a = v.at("a").as_array();
    REQUIRE(a.size() == 3);
    CHECK(v.at("a").offset() == 6);
    CHECK(a[0].offset() == 7);
    CHECK(a[0].as_int() == 10);
    CHECK(a[1].offset() == 11);
    CHECK(a[1].as_string() == "x");
    CHECK(a[2].offset() == 16);
    CHECK(a[2].find("b")->is_null());
    CHECK(a[2].find("b")->offset() == 22);
    CHECK(v.at("c").as_bool());
    CHECK(v.at("d").as_double() == 2.5);
    CHECK(v.at("d").is_number());
    CHECK(a[0].is_number());
    CHECK(a[0].as_double() == 10.0);
    CHECK(v.find("missing") == nullptr);
    CHECK(a[0].find("a") == nullptr);
    std::vector<std::string> keys;
    for (const auto& [key, member] : v.as_object())
        keys.push_back(key);
    CHECK(keys == std::vector<std::string>{"a", "c", "d"});
    CHECK(json::value(1).offset() == 0);
    CHECK(json::kind_name(v.at("d").type()) == "number");
    CHECK(json::kind_name(a[0].type()) == "integer");
}

TEST_CASE("json: the wrong kind throws anvil::type_error naming both kinds") {
    const json::value v = json::parse(R"({"a": "x", "n": 1.5})");
    try {
        (void)v.at("a").as_int();
        FAIL("no throw");
    } catch (const anvil::type_error& e) {
        CHECK(std::string(e.what()) == "JSON: expected an integer, got a string (the value at byte 6)");
    }
    try {
        (void)json::value().as_string();
        FAIL("no throw");
    } catch (const anvil::type_error& e) {
        CHECK(std::string(e.what()) == "JSON: expected a string, got null");
    }
    CHECK_THROWS_AS((void)v.at("n").as_int(), anvil::type_error);  // a double is not an integer
    CHECK_THROWS_AS((void)v.as_array(), anvil::type_error);
    CHECK_THROWS_AS((void)v.at("a").as_object(), anvil::type_error);
    CHECK_THROWS_AS((void)v.at("a").as_bool(), anvil::type_error);
    CHECK_THROWS_AS((void)v.at("a").as_double(), anvil::type_error);
    try {
        (void)v.at("b");
        FAIL("no throw");
    } catch (const anvil::format_error& e) {
        CHECK(std::string(e.what()) == "JSON: missing key \"b\" (the object at byte 0)");
    }
}

TEST_CASE("json: duplicate keys are rejected by default and kept (last wins) when allowed") {
    json::parse_options options;
    options.allow_duplicate_keys = true;
    for (const int count : {3, 40}) {  // both the linear and the hashed lookup
        CAPTURE(count);
        std::string text = "{";
        for (int i = 0; i < count; ++i)
            text += "\"k" + std::to_string(i) + "\":" + std::to_string(i) + ",";
        const std::size_t duplicate_offset = text.size();
        text += "\"k1\":\"again\"}";
        const anvil::json_error e = parse_error(text);
        CHECK(e.offset() == duplicate_offset);
        CHECK(std::string(e.what()).find("duplicate key \"k1\" in object") != std::string::npos);

        const json::value v = json::parse(text, "test.json", options);
        CHECK(v.as_object().size() == static_cast<std::size_t>(count) + 1);
        CHECK(v.at("k1").as_string() == "again");
        CHECK(v.at("k0").as_int() == 0);
        CHECK(v.at("k2").as_int() == 2);
    }
}

TEST_CASE("json: the depth limit is enforced without deep recursion") {
    CHECK_NOTHROW((void)json::parse(std::string(512, '[') + std::string(512, ']')));
    std::string objects;
    for (int i = 0; i < 512; ++i)
        objects += "{\"a\":";
    objects += "1" + std::string(512, '}');
    CHECK_NOTHROW((void)json::parse(objects));
    CHECK(parse_error("{\"a\":" + objects + "}").offset() == 5 * 512);

    const anvil::json_error deep = parse_error(std::string(100000, '['));
    CHECK(deep.offset() == 512);
    CHECK(std::string(deep.what()).find("nesting deeper than 512") != std::string::npos);

    json::parse_options flat;
    flat.max_depth = 0;
    CHECK(json::parse("1", "test.json", flat).as_int() == 1);
    CHECK(std::string(parse_error("[]", flat).what()) ==
          "test.json: byte 0: nesting deeper than 0 (line 1, column 1)");

    // A caller may allow very deep values: building, writing and destroying them must not recurse per level.
    json::parse_options deep_options;
    deep_options.max_depth = 200000;
    const std::string text = std::string(100000, '[') + std::string(100000, ']');
    {
        const json::value v = json::parse(text, "deep.json", deep_options);
        CHECK(json::dump(v) == text);
    }
}

TEST_CASE("json: dump writes RFC 8259 text as Python's json module does") {
    // Python: json.dumps(s, ensure_ascii=False) for s = 'a"b\\c\n\x01\x7f/\u00e9\t\b\f\r'
    CHECK(json::dump(json::value("a\"b\\c\n\x01\x7f/\xc3\xa9\t\b\f\r")) ==
          "\"a\\\"b\\\\c\\n\\u0001\x7f/\xc3\xa9\\t\\b\\f\\r\"");
    CHECK(json::dump(json::value("\0\x1f"s)) == "\"\\u0000\\u001f\"");
    CHECK(json::dump(json::value(100.0)) == "100.0");
    CHECK(json::dump(json::value(-0.0)) == "-0.0");
    CHECK(json::dump(json::value(0.1)) == "0.1");
    CHECK(json::dump(json::value(1e300)) == "1e+300");
    CHECK(json::dump(json::value(std::numeric_limits<std::int64_t>::min())) == "-9223372036854775808");
    CHECK(json::dump(json::value(true)) == "true");
    CHECK(json::dump(json::value(nullptr)) == "null");
    CHECK(json::dump(json::value()) == "null");

    const json::value v = json::parse(R"({"a":[1,{}],"b":{},"c":[]})");
    CHECK(json::dump(v) == R"({"a":[1,{}],"b":{},"c":[]})");
    // Python: json.dumps(v, indent=2) and indent=0
    CHECK(json::dump(v, 2) == "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": {},\n  \"c\": []\n}");
    CHECK(json::dump(json::parse("[1,2]"), 0) == "[\n1,\n2\n]");

    CHECK_THROWS_AS((void)json::dump(json::value(std::numeric_limits<double>::infinity())),
                    anvil::type_error);
    CHECK_THROWS_AS((void)json::dump(json::value(std::nan(""))), anvil::type_error);
    CHECK_THROWS_AS((void)json::dump(json::value("\xc3")), anvil::type_error);
    CHECK_THROWS_AS((void)json::dump(json::value("\xed\xa0\x80")), anvil::type_error);
}

TEST_CASE("json: the reference document reads and writes as Python's json module does") {
    const json::value v = json::parse_file(data_dir / "json" / "reference.json");
    CHECK(json::dump(v) == read_bytes(data_dir / "json" / "reference.compact.json"));
    CHECK(json::dump(v, 2) == read_bytes(data_dir / "json" / "reference.pretty.json"));
    CHECK(json::parse(read_bytes(data_dir / "json" / "reference.compact.json")) == v);
}

TEST_CASE("json: built values round-trip through dump and parse") {
    json::object inner;
    inner["text"] = "multi\nline \xe2\x9c\x93 \"quoted\"";
    inner["list"] = json::array{1, -2.5, "x", nullptr, true, json::array{}, json::object{}};
    inner["big"] = std::numeric_limits<std::int64_t>::max();
    inner["unsigned"] = 42u;
    inner["small"] = std::int8_t{-5};
    inner["view"] = std::string_view("sv");
    json::object root;
    root["inner"] = inner;
    root["array"] = json::array{json::value(inner), json::value(json::array{json::value(json::array{1})})};
    root["double"] = 3.0;
    const json::value v(root);
    for (const int indent : {-1, 0, 1, 4}) {
        CAPTURE(indent);
        const json::value back = json::parse(json::dump(v, indent));
        CHECK(back == v);
        CHECK(back.at("double").is_double());
        CHECK(back.at("inner").at("big").is_integer());
    }
    CHECK_FALSE(json::parse("[1]") == json::parse("[1.0]"));
    CHECK_FALSE(json::parse(R"({"a":1,"b":2})") == json::parse(R"({"b":2,"a":1})"));
    CHECK_THROWS_AS((void)json::value(std::uint64_t{1} << 63), anvil::type_error);
    static_assert(!std::is_constructible_v<json::value, char>, "a char is not a JSON number");

    // Random finite doubles come back bit for bit.
    std::mt19937_64 random(12345);
    for (int i = 0; i < 20000; ++i) {
        const double d = std::bit_cast<double>(random());
        if (!std::isfinite(d)) continue;
        const json::value back = json::parse(json::dump(json::value(d)));
        CAPTURE(d);
        REQUIRE(back.is_double());
        CHECK(std::bit_cast<std::uint64_t>(back.as_double()) == std::bit_cast<std::uint64_t>(d));
    }
}

TEST_CASE("json: objects keep insertion order and look up large key sets quickly") {
    json::object built;
    for (int i = 0; i < 1000; ++i)
        built["key" + std::to_string(999 - i)] = i;
    built["key500"] = "replaced";
    REQUIRE(built.size() == 1000);
    CHECK(built.begin()->first == "key999");
    CHECK(built.find("key500")->as_string() == "replaced");
    const json::object copy = built;
    for (int i = 0; i < 1000; ++i) {
        if (i == 499) continue;
        REQUIRE(copy.find("key" + std::to_string(999 - i)) != nullptr);
        CHECK(copy.find("key" + std::to_string(999 - i))->as_int() == i);
    }
    CHECK(copy.find("key1000") == nullptr);
    json::value document = json::object{};
    document.as_object()["x"] = 1;
    document.as_object()["list"] = json::array{};
    document.find("list")->as_array().push_back("y");
    CHECK(json::dump(document) == R"({"x":1,"list":["y"]})");
    CHECK_FALSE(copy.contains("nope"));

    // A vocabulary-sized object: 200k keys, parsed and every key found in well under a second each way.
    constexpr int count = 200000;
    std::string text = "{";
    for (int i = 0; i < count; ++i)
        text += "\"tok\\u0120" + std::to_string(i) + "\": " + std::to_string(i) + ",\n";
    text.back() = '}';
    text[text.size() - 2] = ' ';
    const auto start = std::chrono::steady_clock::now();
    const json::value vocab = json::parse(text);
    const json::object& tokens = vocab.as_object();
    REQUIRE(tokens.size() == count);
    std::int64_t sum = 0;
    for (int i = 0; i < count; ++i) {
        const json::value* id = tokens.find("tok\xc4\xa0" + std::to_string(i));
        REQUIRE(id != nullptr);
        sum += id->as_int();
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK(sum == std::int64_t{count} * (count - 1) / 2);
    CHECK(seconds < 10.0);  // ~0.1 s optimised; a linear lookup would take minutes
    CHECK((++tokens.begin())->first ==
          "tok\xc4\xa0"
          "1");

    text.insert(text.size() - 1, ",\"tok\\u01207\":0");
    const anvil::json_error e = parse_error(text);
    CHECK(e.offset() == text.size() - 15);
    CHECK(std::string(e.what()).find("duplicate key \"tok\xc4\xa0"
                                     "7\" in object") != std::string::npos);
}

TEST_CASE("json: parse_file names the file and reports unreadable paths as anvil::io_error") {
    const std::filesystem::path missing = data_dir / "json" / "does_not_exist.json";
    try {
        (void)json::parse_file(missing);
        FAIL("no throw");
    } catch (const anvil::io_error& e) {
        CHECK(std::string(e.what()).find(missing.string()) != std::string::npos);
    }
    CHECK_THROWS_AS((void)json::parse_file(data_dir / "json"), anvil::io_error);  // a directory
}

TEST_CASE("json: every file of the malformed corpus fails with its expected message") {
    check_malformed_corpus("json", 12,
                           [](const std::filesystem::path& path) { (void)json::parse_file(path); });
}

}  // namespace test_json
