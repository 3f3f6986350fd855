// anvil: the JSON writer: dump() (compact or indented, Python's json.dumps layout), with the UTF-8 checks and
// string escaping it shares with the parser (which quotes keys in its messages the way they are written).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "anvil/compilation.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/json_value.hpp"

namespace anvil::json {

// ---- UTF-8 -----------------------------------------------------------------------------------------------

namespace detail {

using anvil::detail::message;

inline constexpr char hex_digits[] = "0123456789ABCDEF";

enum class utf8_problem : std::uint8_t {
    truncated,
    continuation,
    overlong,
    surrogate,
    too_large,
    invalid_byte
};

[[nodiscard]] constexpr std::string_view utf8_problem_text(utf8_problem problem) noexcept {
    constexpr std::array<std::string_view, 6> texts = {
        "truncated sequence", "unexpected continuation byte", "overlong encoding",
        "encoded surrogate",  "code point above U+10FFFF",    "invalid byte"};
    return texts[static_cast<std::size_t>(problem)];
}

// The length of the well-formed UTF-8 sequence at p (whose first byte is >= 0x80), or 0 with the problem
// set; Unicode's table 3-7 of well-formed byte sequences.
[[nodiscard]] std::size_t utf8_sequence_length(const char* at, const char* end,
                                               utf8_problem& problem) noexcept;

// Skips string bytes that need no attention: 8 at a time while no byte of the word is '"', '\\', a control
// character or >= 0x80 (the first such byte is exact: borrows only run upward from a flagged byte).
[[nodiscard]] const char* skip_plain_string_bytes(const char* p, const char* end) noexcept;

void write_string(std::string& out, const std::string& s);

void write_scalar(std::string& out, const value& v);

}  // namespace detail

// ---- dump ------------------------------------------------------------------------------------------------

// Writes v as JSON: compact when indent < 0, else one member or element per line, indented by `indent`
// spaces (Python's json.dumps layout, with ensure_ascii=False). Strings come out as valid UTF-8 with control
// characters escaped, doubles in their shortest round-trip form. A non-finite double or a string that is not
// UTF-8 (possible only in built values) throws anvil::type_error. Iterative: depth is not limited by the
// stack.
[[nodiscard]] std::string dump(const value& v, int indent = -1);

}  // namespace anvil::json

#if ANVIL_DEFINITIONS
#include "anvil/core/json_writer-inl.hpp"
#endif
