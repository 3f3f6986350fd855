// The tokenizers' Unicode tables (general category, combining class, NFD, lower-casing) and UTF-8 decoding,
// against values from Python's unicodedata. White-box: anvil::detail is internal, so this test includes its
// header by name and is not among the single-header tests.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>
#include <anvil/io/unicode.hpp>

#include <string>

namespace test_unicode {

TEST_CASE("unicode: tables and UTF-8 against Python's unicodedata") {
    namespace d = anvil::detail;
    CHECK(d::category(U'a') == d::unicode_category::ll);
    CHECK(d::category(U'\u00C5') == d::unicode_category::lu);
    CHECK(d::category(U'\u0301') == d::unicode_category::mn);
    CHECK(d::category(U'\u4E00') == d::unicode_category::lo);
    CHECK(d::category(U'\u0663') == d::unicode_category::nd);
    CHECK(d::category(U'\u216B') == d::unicode_category::nl);
    CHECK(d::category(U'\u00BD') == d::unicode_category::no);
    CHECK(d::category(U'\u00BF') == d::unicode_category::po);
    CHECK(d::category(U'\u200B') == d::unicode_category::cf);
    CHECK(d::category(U'\U0001F600') == d::unicode_category::so);
    CHECK(d::category(U'\U000E0080') == d::unicode_category::cn);
    CHECK(d::category(U'\U0010FFFF') == d::unicode_category::cn);
    CHECK(d::category(U'\U000F0000') == d::unicode_category::co);
    CHECK(d::combining_class(U'\u0301') == 230);
    CHECK(d::combining_class(U'\u0323') == 220);
    CHECK(d::to_utf8(d::nfd(U"\u00C5\u1E69\uAC01")) == "A\u030As\u0323\u0307\u1100\u1161\u11A8");
    CHECK(d::to_utf8(d::nfd(U"a\u0301\u0323")) == "a\u0323\u0301");  // canonical reordering
    const auto lower = [](char32_t cp) {
        const d::code_point_sequence s = d::to_lower(cp);
        return std::u32string(s.code_points.data(), s.size);
    };
    CHECK(lower(U'A') == U"a");
    CHECK(lower(U'\u0130') == U"i\u0307");
    CHECK(lower(U'\u1E9E') == U"\u00DF");
    CHECK(lower(U'\u01C5') == U"\u01C6");
    CHECK(lower(U'\u0100') == U"\u0101");
    CHECK(lower(U'\u0101') == U"\u0101");
    CHECK(lower(U'\u03A3') == U"\u03C3");
    CHECK(lower(U'\U00010400') == U"\U00010428");
    CHECK(d::utf8_lossy("a\xe4\xbd"
                        "b\x80\xf0\x9f\x98\x80") == "a\uFFFDb\uFFFD\U0001F600");
}

}  // namespace test_unicode
