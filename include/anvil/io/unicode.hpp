// anvil: the Unicode the tokenizers need, without ICU: UTF-8 decoding with precise errors and lossy decoding
// (U+FFFD for each maximal invalid subpart, as Python's errors="replace" and Rust's from_utf8_lossy), general
// categories, the White_Space property, canonical decomposition (NFD) and composition (NFC), and
// lower-casing. The tables are generated from Python's unicodedata by tools/make_unicode_tables.py into
// unicode_tables.hpp.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "anvil/compilation.hpp"

namespace anvil::detail {

// General categories, in the order tools/make_unicode_tables.py packs them (cn, unassigned, is 0).
enum class unicode_category : std::uint8_t {
    cn,
    lu,
    ll,
    lt,
    lm,
    lo,
    mn,
    mc,
    me,
    nd,
    nl,
    no,
    pc,
    pd,
    ps,
    pe,
    pi,
    pf,
    po,
    sm,
    sc,
    sk,
    so,
    zs,
    zl,
    zp,
    cc,
    cf,
    cs,
    co
};

inline constexpr char32_t max_code_point = 0x10FFFF;
inline constexpr char32_t replacement_character = 0xFFFD;

// ---- UTF-8 ----------------------------------------------------------------------------------------------

inline void append_utf8(std::string& out, char32_t code_point) {
    if (code_point < 0x80) {
        out += static_cast<char>(code_point);
    } else if (code_point < 0x800) {
        out += static_cast<char>(0xC0 | (code_point >> 6));
        out += static_cast<char>(0x80 | (code_point & 0x3F));
    } else if (code_point < 0x10000) {
        out += static_cast<char>(0xE0 | (code_point >> 12));
        out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (code_point & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (code_point >> 18));
        out += static_cast<char>(0x80 | ((code_point >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (code_point & 0x3F));
    }
}

// The outcome of reading one UTF-8 sequence: its length and code point, or (length 0) why it is invalid and
// how many bytes form its maximal invalid subpart (Unicode 15, section 3.9, "U+FFFD substitution").
struct utf8_step {
    char32_t code_point = 0;
    std::size_t length = 0;
    std::size_t invalid_length = 0;
    const char* problem = nullptr;
};

utf8_step read_utf8(std::string_view text, std::size_t at);

// anvil::format_error "<what>: invalid UTF-8 at byte N (0xXX): <problem>" unless text is well-formed UTF-8.
void validate_utf8(std::string_view text, std::string_view what);

// The next code point of well-formed UTF-8 (validate first), advancing at.
inline char32_t next_code_point(std::string_view text, std::size_t& at) {
    const auto b0 = static_cast<unsigned char>(text[at]);
    if (b0 < 0x80) {
        ++at;
        return b0;
    }
    const auto b = [&](std::size_t i) {
        return static_cast<char32_t>(static_cast<unsigned char>(text[at + i]) & 0x3F);
    };
    char32_t cp = 0;
    if (b0 < 0xE0) {
        cp = (char32_t{b0} & 0x1F) << 6 | b(1);
        at += 2;
    } else if (b0 < 0xF0) {
        cp = (char32_t{b0} & 0x0F) << 12 | b(1) << 6 | b(2);
        at += 3;
    } else {
        cp = (char32_t{b0} & 0x07) << 18 | b(1) << 12 | b(2) << 6 | b(3);
        at += 4;
    }
    return cp;
}

// Bytes to text with each maximal invalid subpart replaced by U+FFFD.
std::string utf8_lossy(std::string_view bytes);

// ---- categories and properties ---------------------------------------------------------------------------

unicode_category category(char32_t cp);

inline bool is_letter(unicode_category c) {
    return c >= unicode_category::lu && c <= unicode_category::lo;
}
inline bool is_number(unicode_category c) {
    return c >= unicode_category::nd && c <= unicode_category::no;
}
inline bool is_punctuation(unicode_category c) {
    return c >= unicode_category::pc && c <= unicode_category::po;
}
// C*: control, format, surrogate, private use and unassigned.
inline bool is_other(unicode_category c) {
    return c == unicode_category::cn || c >= unicode_category::cc;
}
inline bool is_letter(char32_t cp) {
    return is_letter(category(cp));
}
inline bool is_number(char32_t cp) {
    return is_number(category(cp));
}

// The White_Space property (\s of Rust's regex, Oniguruma and Python's regex module); stable since
// Unicode 6.3.
inline bool is_white_space(char32_t cp) {
    if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
    if (cp < 0x85) return false;
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// ---- lower-casing ----------------------------------------------------------------------------------------

// Up to three code points: what one code point becomes.
struct code_point_sequence {
    std::array<char32_t, 3> code_points{};
    std::size_t size = 0;
};

// Full lower-case mapping of one code point (Python's str.lower() and Rust's char::to_lowercase, without the
// context-dependent final sigma).
code_point_sequence to_lower(char32_t cp);

// ---- canonical decomposition ---------------------------------------------------------------------------

std::uint8_t combining_class(char32_t cp);

// Appends the full canonical decomposition of cp (not yet canonically ordered across code points).
void append_decomposition(char32_t cp, std::u32string& out);

// NFD: full decomposition, then each run of non-starters stably sorted by combining class.
std::u32string nfd(std::u32string_view text);

// ---- canonical composition ----------------------------------------------------------------------------

// The primary composite of a + b, or 0 when there is none (Hangul L+V and LV+T algorithmically).
char32_t compose_pair(char32_t a, char32_t b);

// NFC: NFD, then each code point joins the last starter when nothing between them blocks it (a code point
// in between with class 0 or a class not below its own), as UAX #15's canonical composition says.
std::u32string nfc(std::u32string_view text);

// Well-formed UTF-8 to code points and back.
std::u32string to_code_points(std::string_view utf8);
std::string to_utf8(std::u32string_view code_points);

}  // namespace anvil::detail

#if ANVIL_DEFINITIONS
#include "anvil/io/unicode-inl.hpp"
#endif
