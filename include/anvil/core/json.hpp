// anvil: JSON (RFC 8259). A strict single-pass parser over a string_view (UTF-8 validated, depth-limited,
// int64 and double numbers, errors with byte offsets) and a writer; used for safetensors headers, config.json
// and tokenizer.json, so both stay fast on documents of 10-100 MB.
#pragma once

#include <array>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "anvil/core/checked_math.hpp"
#include "anvil/core/error.hpp"

// GCC 12 reports a false -Wmaybe-uninitialized inside std::variant's move constructor when a value holding an
// array or object is moved at -O2 (a known false positive of that release); the pragma keeps users' -Werror
// builds working.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace anvil::json {

enum class kind : std::uint8_t { null, boolean, integer, number, string, array, object };

// "null", "boolean", "integer", "number" (a double), "string", "array", "object".
[[nodiscard]] constexpr std::string_view kind_name(kind k) noexcept {
    constexpr std::array<std::string_view, 7> names = {"null",   "boolean", "integer", "number",
                                                       "string", "array",   "object"};
    return names[static_cast<std::size_t>(k)];
}

class value;
using array = std::vector<value>;

namespace detail {
class parser;
}  // namespace detail

// An object keeps its members in insertion order. Up to linear_search_limit members are searched linearly;
// larger objects get a hash index (built once, kept up to date by operator[]), so a 100k-entry vocabulary
// is cheap. With duplicate keys allowed, every member is kept and find() returns the last, as Python's json
// does. The members are defined after value, which they contain.
class object {
public:
    using member = std::pair<std::string, value>;
    using const_iterator = std::vector<member>::const_iterator;
    static constexpr std::size_t linear_search_limit = 8;

    object() = default;
    object(const object& other);
    object(object&& other) noexcept = default;
    object& operator=(const object& other);
    object& operator=(object&& other) noexcept = default;
    ~object() = default;

    [[nodiscard]] const value* find(std::string_view key) const;
    [[nodiscard]] value* find(std::string_view key);
    [[nodiscard]] bool contains(std::string_view key) const { return find(key) != nullptr; }
    // Inserts a null member when the key is absent. Later insertions invalidate references.
    value& operator[](std::string key);
    [[nodiscard]] std::size_t size() const noexcept;
    [[nodiscard]] bool empty() const noexcept;
    [[nodiscard]] const_iterator begin() const noexcept;
    [[nodiscard]] const_iterator end() const noexcept;
    // Equal members in the same order.
    friend bool operator==(const object& a, const object& b);

private:
    friend class value;
    friend class detail::parser;
    static constexpr std::size_t no_duplicate = std::numeric_limits<std::size_t>::max();

    // Take parsed members / (re)build the index; both return the position of the first repeated key, or
    // no_duplicate (always, when duplicates are allowed: then the later member wins).
    std::size_t adopt(std::vector<member>&& members, bool allow_duplicate_keys);
    std::size_t build_index(bool allow_duplicate_keys);

    std::vector<member> members_;
    // Slots hold (hash >> 32) << 32 | (position + 1), 0 when empty; open addressing, load factor <= 1/2.
    std::unique_ptr<std::vector<std::uint64_t>> index_;
};

class value {
public:
    value() noexcept = default;
    value(std::nullptr_t) noexcept {}
    value(bool b) noexcept : data_(b) {}
    // Any integer type but bool and the character types (a char is no number). An unsigned value above
    // INT64_MAX throws anvil::type_error rather than silently becoming a double.
    template <std::integral Int>
    requires(!std::same_as<Int, bool> && !std::same_as<Int, char> && !std::same_as<Int, wchar_t> &&
             !std::same_as<Int, char8_t> && !std::same_as<Int, char16_t> && !std::same_as<Int, char32_t>)
        value(Int i)
        : data_(checked_int64(i)) {}
    value(double d) noexcept : data_(d) {}
    value(std::string s) noexcept : data_(std::move(s)) {}
    value(std::string_view s) : data_(std::string(s)) {}
    value(const char* s) : data_(std::string(s)) {}
    value(array a) noexcept : data_(std::move(a)) {}
    value(object o) noexcept : data_(std::move(o)) {}

    value(const value&) = default;
    value(value&&) noexcept = default;
    value& operator=(const value&) = default;
    value& operator=(value&&) noexcept = default;
    ~value() {
        if (data_.index() >= static_cast<std::size_t>(kind::array)) release_nested();
    }

    [[nodiscard]] kind type() const noexcept { return static_cast<kind>(data_.index()); }
    [[nodiscard]] bool is_null() const noexcept { return type() == kind::null; }
    [[nodiscard]] bool is_bool() const noexcept { return type() == kind::boolean; }
    [[nodiscard]] bool is_integer() const noexcept { return type() == kind::integer; }
    [[nodiscard]] bool is_double() const noexcept { return type() == kind::number; }
    [[nodiscard]] bool is_number() const noexcept { return is_integer() || is_double(); }
    [[nodiscard]] bool is_string() const noexcept { return type() == kind::string; }
    [[nodiscard]] bool is_array() const noexcept { return type() == kind::array; }
    [[nodiscard]] bool is_object() const noexcept { return type() == kind::object; }

    // On the wrong kind these throw anvil::type_error naming the expected and actual kinds and the offset.
    [[nodiscard]] bool as_bool() const { return get<bool>(kind::boolean); }
    [[nodiscard]] std::int64_t as_int() const { return get<std::int64_t>(kind::integer); }
    [[nodiscard]] double as_double() const {  // integers convert
        if (const auto* i = std::get_if<std::int64_t>(&data_)) return static_cast<double>(*i);
        return get<double>(kind::number);
    }
    [[nodiscard]] const std::string& as_string() const { return get<std::string>(kind::string); }
    [[nodiscard]] const array& as_array() const { return get<array>(kind::array); }
    [[nodiscard]] const object& as_object() const { return get<object>(kind::object); }
    [[nodiscard]] array& as_array() { return const_cast<array&>(std::as_const(*this).as_array()); }
    [[nodiscard]] object& as_object() { return const_cast<object&>(std::as_const(*this).as_object()); }

    // nullptr when this is not an object or the key is absent.
    [[nodiscard]] const value* find(std::string_view key) const {
        const auto* o = std::get_if<object>(&data_);
        return o ? o->find(key) : nullptr;
    }
    [[nodiscard]] value* find(std::string_view key) {
        return const_cast<value*>(std::as_const(*this).find(key));
    }
    // The member named key: anvil::format_error when absent, anvil::type_error when this is not an object.
    [[nodiscard]] const value& at(std::string_view key) const;

    // Byte offset in the parsed text where this value began; 0 for values built in code.
    [[nodiscard]] std::size_t offset() const noexcept { return offset_plus_one_ ? offset_plus_one_ - 1 : 0; }

    // Same kind and contents: numbers by == (so 0.0 == -0.0, and an integer never equals a double), objects
    // member by member in order.
    friend bool operator==(const value& a, const value& b) { return a.data_ == b.data_; }

private:
    friend class detail::parser;

    template <class Int>
    static std::int64_t checked_int64(Int i) {
        if constexpr (std::is_unsigned_v<Int> && sizeof(Int) >= sizeof(std::int64_t)) {
            if (i > static_cast<Int>(std::numeric_limits<std::int64_t>::max()))
                throw type_error(
                    anvil::detail::message("integer ", i, " does not fit a JSON integer (int64)"));
        }
        return static_cast<std::int64_t>(i);
    }
    template <class T>
    const T& get(kind expected) const {
        if (const auto* p = std::get_if<T>(&data_)) return *p;
        throw_wrong_kind(expected);
    }
    [[noreturn]] void throw_wrong_kind(kind expected) const;
    void release_nested() noexcept;

    std::variant<std::nullptr_t, bool, std::int64_t, double, std::string, array, object> data_;
    std::size_t offset_plus_one_ = 0;  // 0: built in code, not parsed
};

struct parse_options {
    std::size_t max_depth = 512;        // arrays and objects nested deeper than this are an error
    bool allow_duplicate_keys = false;  // RFC 8259 says names SHOULD be unique; safetensors needs them to be
};

// ---- object ----------------------------------------------------------------------------------------------

inline object::object(const object& other)
    : members_(other.members_),
      index_(other.index_ ? std::make_unique<std::vector<std::uint64_t>>(*other.index_) : nullptr) {}

inline object& object::operator=(const object& other) {
    if (this != &other) *this = object(other);
    return *this;
}

inline std::size_t object::size() const noexcept {
    return members_.size();
}
inline bool object::empty() const noexcept {
    return members_.empty();
}
inline object::const_iterator object::begin() const noexcept {
    return members_.begin();
}
inline object::const_iterator object::end() const noexcept {
    return members_.end();
}
inline bool operator==(const object& a, const object& b) {
    return a.members_ == b.members_;
}

inline const value* object::find(std::string_view key) const {
    if (!index_) {
        for (std::size_t i = members_.size(); i-- > 0;)
            if (members_[i].first == key) return &members_[i].second;
        return nullptr;
    }
    const std::vector<std::uint64_t>& slots = *index_;
    const std::uint64_t hash = std::hash<std::string_view>{}(key);
    const std::size_t mask = slots.size() - 1;
    for (std::size_t at = static_cast<std::size_t>(hash) & mask;; at = (at + 1) & mask) {
        const std::uint64_t slot = slots[at];
        if (slot == 0) return nullptr;
        const member& m = members_[static_cast<std::size_t>(slot & 0xffffffffu) - 1];
        if ((slot >> 32) == (hash >> 32) && m.first == key) return &m.second;
    }
}

inline value* object::find(std::string_view key) {
    return const_cast<value*>(std::as_const(*this).find(key));
}

inline value& object::operator[](std::string key) {
    if (value* existing = find(key)) return *existing;
    members_.emplace_back(std::move(key), value{});
    if (index_ && members_.size() * 2 <= index_->size()) {
        const std::uint64_t hash = std::hash<std::string_view>{}(members_.back().first);
        const std::size_t mask = index_->size() - 1;
        std::size_t at = static_cast<std::size_t>(hash) & mask;
        while ((*index_)[at] != 0)
            at = (at + 1) & mask;
        (*index_)[at] = (hash >> 32 << 32) | members_.size();
    } else if (members_.size() > linear_search_limit) {
        build_index(true);
    }
    return members_.back().second;
}

inline std::size_t object::adopt(std::vector<member>&& members, bool allow_duplicate_keys) {
    members_ = std::move(members);
    index_.reset();
    if (members_.size() > linear_search_limit) return build_index(allow_duplicate_keys);
    for (std::size_t i = 1; i < members_.size() && !allow_duplicate_keys; ++i)
        for (std::size_t j = 0; j < i; ++j)
            if (members_[i].first == members_[j].first) return i;
    return no_duplicate;
}

inline std::size_t object::build_index(bool allow_duplicate_keys) {
    if (members_.size() >= 0xffffffffu)
        throw format_error(
            anvil::detail::message("JSON object with ", members_.size(), " members is too large"));
    const std::size_t capacity = std::bit_ceil(members_.size() * 2);
    index_ = std::make_unique<std::vector<std::uint64_t>>(capacity, 0);
    std::vector<std::uint64_t>& slots = *index_;
    const std::size_t mask = capacity - 1;
    // Hashing first lets the insertion loop prefetch its slots: in a large index every key is a cache miss.
    std::vector<std::uint64_t> hashes(members_.size());
    for (std::size_t i = 0; i < members_.size(); ++i)
        hashes[i] = std::hash<std::string_view>{}(members_[i].first);
    constexpr std::size_t prefetch_distance = 16;
    for (std::size_t position = 0; position < members_.size(); ++position) {
        if (position + prefetch_distance < members_.size())
            __builtin_prefetch(&slots[static_cast<std::size_t>(hashes[position + prefetch_distance]) & mask]);
        const std::uint64_t hash = hashes[position];
        const std::uint64_t entry = (hash >> 32 << 32) | (position + 1);
        for (std::size_t at = static_cast<std::size_t>(hash) & mask;; at = (at + 1) & mask) {
            const std::uint64_t slot = slots[at];
            const bool same_key =
                slot != 0 && (slot >> 32) == (hash >> 32) &&
                members_[static_cast<std::size_t>(slot & 0xffffffffu) - 1].first == members_[position].first;
            if (same_key && !allow_duplicate_keys) return position;
            if (slot == 0 || same_key) {
                slots[at] = entry;
                break;
            }
        }
    }
    return no_duplicate;
}

// ---- value -----------------------------------------------------------------------------------------------

inline void value::throw_wrong_kind(kind expected) const {
    constexpr std::array<std::string_view, 7> described = {"null",     "a boolean", "an integer", "a number",
                                                           "a string", "an array",  "an object"};
    throw type_error(anvil::detail::message(
        "JSON: expected ", described[static_cast<std::size_t>(expected)], ", got ", described[data_.index()],
        offset_plus_one_ ? anvil::detail::message(" (the value at byte ", offset(), ")") : ""));
}

inline const value& value::at(std::string_view key) const {
    if (const value* found = as_object().find(key)) return *found;
    throw format_error(anvil::detail::message(
        "JSON: missing key \"", key, "\"",
        offset_plus_one_ ? anvil::detail::message(" (the object at byte ", offset(), ")") : ""));
}

// Destroying a deep value recursively could overflow the stack (max_depth is the caller's choice), so nested
// containers are moved to a work list and destroyed one level at a time.
inline void value::release_nested() noexcept {
    std::vector<value> pending;
    const auto take_nested_children = [&pending](value& v) {
        const auto take = [&pending](value& child) {
            const auto* a = std::get_if<array>(&child.data_);
            const auto* o = std::get_if<object>(&child.data_);
            if ((a && !a->empty()) || (o && !o->empty())) pending.push_back(std::move(child));
        };
        if (auto* a = std::get_if<array>(&v.data_)) {
            for (value& child : *a)
                take(child);
        } else if (auto* o = std::get_if<object>(&v.data_)) {
            for (object::member& m : o->members_)
                take(m.second);
        }
    };
    take_nested_children(*this);
    while (!pending.empty()) {
        value current = std::move(pending.back());
        pending.pop_back();
        take_nested_children(current);
    }
}

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
[[nodiscard]] inline std::size_t utf8_sequence_length(const char* at, const char* end,
                                                      utf8_problem& problem) noexcept {
    const auto* p = reinterpret_cast<const unsigned char*>(at);
    const unsigned lead = p[0];
    if (lead < 0xc2 || lead >= 0xf5) {
        problem = lead < 0xc0   ? utf8_problem::continuation
                  : lead < 0xc2 ? utf8_problem::overlong
                  : lead < 0xf8 ? utf8_problem::too_large
                                : utf8_problem::invalid_byte;
        return 0;
    }
    const std::size_t length = lead < 0xe0 ? 2 : lead < 0xf0 ? 3 : 4;
    for (std::size_t i = 1; i < length; ++i) {
        if (at + i >= end || (p[i] & 0xc0u) != 0x80u) {
            problem = utf8_problem::truncated;
            return 0;
        }
    }
    const unsigned low = lead == 0xe0 ? 0xa0 : lead == 0xf0 ? 0x90 : 0x80;  // the second byte's range
    const unsigned high = lead == 0xed ? 0x9f : lead == 0xf4 ? 0x8f : 0xbf;
    if (p[1] < low || p[1] > high) {
        problem = p[1] < low     ? utf8_problem::overlong
                  : lead == 0xed ? utf8_problem::surrogate
                                 : utf8_problem::too_large;
        return 0;
    }
    return length;
}

inline void append_utf8(std::string& out, std::uint32_t code_point) {
    if (code_point < 0x80) {
        out += static_cast<char>(code_point);
        return;
    }
    const unsigned extra = code_point < 0x800 ? 1 : code_point < 0x10000 ? 2 : 3;  // continuation bytes
    char bytes[4];
    bytes[0] = static_cast<char>(((0xff00u >> (extra + 1)) & 0xffu) | (code_point >> (6 * extra)));
    for (unsigned i = 1; i <= extra; ++i)
        bytes[i] = static_cast<char>(0x80u | ((code_point >> (6 * (extra - i))) & 0x3fu));
    out.append(bytes, extra + 1);
}

// Skips string bytes that need no attention: 8 at a time while no byte of the word is '"', '\\', a control
// character or >= 0x80 (the first such byte is exact: borrows only run upward from a flagged byte).
[[nodiscard]] inline const char* skip_plain_string_bytes(const char* p, const char* end) noexcept {
    static_assert(std::endian::native == std::endian::little, "the SWAR scan reads the first byte lowest");
    constexpr std::uint64_t ones = 0x0101010101010101u;
    while (end - p >= 8) {
        std::uint64_t word = 0;
        std::memcpy(&word, p, 8);
        const std::uint64_t quote = word ^ (ones * '"');
        const std::uint64_t backslash = word ^ (ones * '\\');
        const std::uint64_t stops = (word | ((word - ones * 0x20) & ~word) | ((quote - ones) & ~quote) |
                                     ((backslash - ones) & ~backslash)) &
                                    (ones * 0x80);
        if (stops != 0) return p + (std::countr_zero(stops) >> 3);
        p += 8;
    }
    while (p < end && static_cast<unsigned char>(*p) >= 0x20 && static_cast<unsigned char>(*p) < 0x80 &&
           *p != '"' && *p != '\\')
        ++p;
    return p;
}

inline void write_string(std::string& out, const std::string& s) {
    constexpr std::string_view escaped = "\"\\\b\f\n\r\t";
    constexpr std::string_view escape_letters = "\"\\bfnrt";
    out += '"';
    const char* const end = s.data() + s.size();
    const char* run = s.data();  // the start of bytes not yet copied to out
    for (const char* p = run;;) {
        p = skip_plain_string_bytes(p, end);
        if (p == end) break;
        const auto c = static_cast<unsigned char>(*p);
        if (c >= 0x80) {
            utf8_problem problem{};
            const std::size_t length = utf8_sequence_length(p, end, problem);
            if (length == 0)
                throw type_error(message("JSON: cannot write a string that is not valid UTF-8 (",
                                         utf8_problem_text(problem), " at byte ", p - s.data(),
                                         " of the string)"));
            p += length;
            continue;
        }
        out.append(run, p);
        const std::size_t letter = escaped.find(*p);
        if (letter != std::string_view::npos) {
            out += '\\';
            out += escape_letters[letter];
        } else {  // lower-case hex, as Python writes it
            out += "\\u00";
            out += static_cast<char>(hex_digits[c >> 4] | 0x20);
            out += static_cast<char>(hex_digits[c & 15] | 0x20);
        }
        run = ++p;
    }
    out.append(run, end);
    out += '"';
}

// ---- parser ----------------------------------------------------------------------------------------------

// An explicit stack instead of recursion: children of open containers wait in values_ (and their keys in
// keys_) and are moved into an exactly sized array or object when it closes.
class parser {
public:
    parser(std::string_view text, std::string_view source_name, const parse_options& options)
        : begin_(text.data()),
          p_(text.data()),
          end_(text.data() + text.size()),
          source_(source_name),
          options_(options) {}

    value run();

private:
    struct frame {
        bool is_object;
        std::size_t first_value;  // the container's children start here in values_, and in keys_
        std::size_t first_key;
        std::size_t offset;
    };

    [[noreturn]] void fail(const char* at, std::string_view what) const;
    [[nodiscard]] std::string found() const;  // the byte at p_, for "expected X, found Y"
    [[nodiscard]] std::size_t offset_of(const char* at) const noexcept {
        return static_cast<std::size_t>(at - begin_);
    }
    [[nodiscard]] int peek() const noexcept { return p_ < end_ ? static_cast<unsigned char>(*p_) : -1; }
    void skip_whitespace() noexcept {
        while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t'))
            ++p_;
    }
    template <class T>
    void push(T&& v, std::size_t offset) {
        values_.emplace_back(std::forward<T>(v)).offset_plus_one_ = offset + 1;
    }
    void parse_scalar();
    void parse_string(std::string& out);
    const char* parse_escape(const char* backslash, std::string& out);
    [[nodiscard]] value parse_number();
    void parse_key();
    void close_container();

    const char* begin_;
    const char* p_;
    const char* end_;
    std::string_view source_;
    parse_options options_;
    std::vector<frame> stack_;
    std::vector<value> values_;
    std::vector<std::string> keys_;
    std::vector<std::size_t> key_offsets_;
};

inline void parser::fail(const char* at, std::string_view what) const {
    const std::size_t offset = offset_of(at);
    std::size_t line = 1;
    std::size_t line_start = 0;
    for (std::size_t i = 0; i < offset; ++i) {
        if (begin_[i] == '\n') {
            ++line;
            line_start = i + 1;
        }
    }
    throw json_error(message(source_, ": byte ", offset, ": ", what, " (line ", line, ", column ",
                             offset - line_start + 1, ")"),
                     offset);
}

inline std::string parser::found() const {
    const int c = peek();
    if (c < 0) return "found end of input";
    if (c >= 0x21 && c < 0x7f) return message("found '", static_cast<char>(c), "'");
    return message("found byte 0x", hex_digits[c >> 4], hex_digits[c & 15]);
}

inline value parser::run() {
    if (p_ == end_) fail(p_, "empty input");
    if (end_ - p_ >= 3 && std::memcmp(p_, "\xEF\xBB\xBF", 3) == 0)
        fail(p_, "byte order mark (U+FEFF) at the start; JSON text must not begin with one");
    skip_whitespace();
    if (p_ == end_) fail(p_, "empty input (only whitespace)");
    for (;;) {
        // A value starts at p_.
        const char open = *p_;
        if (open == '[' || open == '{') {
            if (stack_.size() >= options_.max_depth)
                fail(p_, message("nesting deeper than ", options_.max_depth));
            const std::size_t offset = offset_of(p_++);
            skip_whitespace();
            if (peek() == (open == '[' ? ']' : '}')) {
                ++p_;
                if (open == '[') push(array{}, offset);
                if (open == '{') push(object{}, offset);
            } else {
                stack_.push_back({open == '{', values_.size(), keys_.size(), offset});
                if (open == '{') parse_key();
                if (p_ == end_) fail(p_, "expected a JSON value, found end of input");
                continue;
            }
        } else {
            parse_scalar();
        }
        // A value ended: close containers until a ',' starts the next value.
        for (;;) {
            skip_whitespace();
            if (stack_.empty()) {
                if (p_ != end_) fail(p_, "trailing data after the JSON value");
                return std::move(values_.back());
            }
            const bool in_object = stack_.back().is_object;
            if (peek() == ',') {
                ++p_;
                skip_whitespace();
                if (peek() == (in_object ? '}' : ']'))
                    fail(p_, in_object ? "trailing comma before '}'" : "trailing comma before ']'");
                if (in_object) parse_key();
                if (p_ == end_) fail(p_, "expected a JSON value, found end of input");
                break;
            }
            if (peek() != (in_object ? '}' : ']'))
                fail(p_, message(in_object ? "expected ',' or '}' after object member, "
                                           : "expected ',' or ']' after array element, ",
                                 found()));
            ++p_;
            close_container();
        }
    }
}

inline void parser::close_container() {
    const frame top = stack_.back();
    stack_.pop_back();
    const auto first_value = values_.begin() + static_cast<std::ptrdiff_t>(top.first_value);
    if (!top.is_object) {
        array elements(std::make_move_iterator(first_value), std::make_move_iterator(values_.end()));
        values_.erase(first_value, values_.end());
        push(std::move(elements), top.offset);
        return;
    }
    const std::size_t count = keys_.size() - top.first_key;
    std::vector<object::member> members;
    members.reserve(count);
    for (std::size_t i = 0; i < count; ++i)
        members.emplace_back(std::move(keys_[top.first_key + i]), std::move(values_[top.first_value + i]));
    object result;
    const std::size_t duplicate = result.adopt(std::move(members), options_.allow_duplicate_keys);
    if (duplicate != object::no_duplicate) {
        std::string key;
        write_string(key, result.members_[duplicate].first);
        if (key.size() > 80) {
            std::size_t cut = 80;
            while ((static_cast<unsigned char>(key[cut]) & 0xc0u) == 0x80u)
                --cut;  // whole characters only
            key = key.substr(0, cut) + "...\"";
        }
        fail(begin_ + key_offsets_[top.first_key + duplicate], message("duplicate key ", key, " in object"));
    }
    keys_.resize(top.first_key);
    key_offsets_.resize(top.first_key);
    values_.erase(first_value, values_.end());
    push(std::move(result), top.offset);
}

// Reads `"key" :` and the whitespace after it.
inline void parser::parse_key() {
    if (peek() != '"') fail(p_, message("expected a string as object key, ", found()));
    key_offsets_.push_back(offset_of(p_));
    parse_string(keys_.emplace_back());
    skip_whitespace();
    if (peek() != ':') fail(p_, message("expected ':' after object key, ", found()));
    ++p_;
    skip_whitespace();
}

inline void parser::parse_scalar() {
    const std::size_t offset = offset_of(p_);
    const char c = *p_;
    if (c == '"') {
        std::string s;
        parse_string(s);
        push(std::move(s), offset);
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        push(parse_number(), offset);
    } else if (c == 't' || c == 'f' || c == 'n') {
        const std::string_view literal = c == 't' ? "true" : c == 'f' ? "false" : "null";
        if (std::string_view(p_, end_).substr(0, literal.size()) != literal)
            fail(p_, message("invalid literal (expected '", literal, "')"));
        p_ += literal.size();
        if (c == 'n') push(value{}, offset);
        if (c != 'n') push(c == 't', offset);
    } else {
        constexpr std::string_view mistakes = "NI+./'";
        constexpr std::array<std::string_view, 6> explanations = {
            "NaN and Infinity are not allowed in JSON",
            "NaN and Infinity are not allowed in JSON",
            "a number cannot start with '+'",
            "a number cannot start with '.'",
            "comments are not allowed in JSON",
            "strings must be enclosed in double quotes, not single quotes"};
        const std::size_t mistake = mistakes.find(c);
        if (mistake != std::string_view::npos) fail(p_, explanations[mistake]);
        fail(p_, message("expected a JSON value, ", found()));
    }
}

// p_ is at the opening quote; leaves p_ after the closing one.
inline void parser::parse_string(std::string& out) {
    const char* const open = p_;
    const char* p = p_ + 1;
    const char* run = p;  // the start of bytes not yet appended to out
    for (;;) {
        p = skip_plain_string_bytes(p, end_);
        if (p == end_) fail(p, message("unterminated string (it starts at byte ", offset_of(open), ")"));
        const auto c = static_cast<unsigned char>(*p);
        if (c == '"' || c == '\\') out.append(run, static_cast<std::size_t>(p - run));
        if (c == '"') {
            p_ = p + 1;
            return;
        }
        if (c == '\\') {
            p = run = parse_escape(p, out);
        } else if (c < 0x20) {
            fail(p, message("unescaped control character 0x", hex_digits[c >> 4], hex_digits[c & 15],
                            " in string"));
        } else {
            utf8_problem problem{};
            const std::size_t length = utf8_sequence_length(p, end_, problem);
            if (length == 0 && problem == utf8_problem::invalid_byte)
                fail(p, message("invalid UTF-8 (invalid byte 0x", hex_digits[c >> 4], hex_digits[c & 15],
                                ") in string"));
            if (length == 0) fail(p, message("invalid UTF-8 (", utf8_problem_text(problem), ") in string"));
            p += length;
        }
    }
}

// Appends the character the escape at `backslash` stands for; returns the position after the escape.
inline const char* parser::parse_escape(const char* backslash, std::string& out) {
    constexpr std::string_view letters = "\"\\/bfnrt";
    constexpr std::string_view meanings = "\"\\/\b\f\n\r\t";
    const char* p = backslash + 1;
    if (p == end_) fail(p, "unterminated string (input ends inside an escape)");
    if (const std::size_t simple = letters.find(*p); simple != std::string_view::npos) {
        out += meanings[simple];
        return p + 1;
    }
    const auto c = static_cast<unsigned char>(*p);
    if (c != 'u' && c >= 0x21 && c < 0x7f)
        fail(backslash, message("invalid escape '\\", static_cast<char>(c), "' in string"));
    if (c != 'u')
        fail(backslash, message("invalid escape in string: '\\' followed by byte 0x", hex_digits[c >> 4],
                                hex_digits[c & 15]));
    const auto read_hex4 = [&](const char* digits, std::uint32_t& result) {
        result = 0;
        for (int i = 0; i < 4; ++i) {
            const int h = digits + i < end_ ? digits[i] : 0;
            const int letter = h | 0x20;  // lower case, for letters only
            const int nibble = h >= '0' && h <= '9'             ? h - '0'
                               : letter >= 'a' && letter <= 'f' ? letter - 'a' + 10
                                                                : -1;
            if (nibble < 0) return false;
            result = result << 4 | static_cast<std::uint32_t>(nibble);
        }
        return true;
    };
    std::uint32_t code_point = 0;
    if (!read_hex4(p + 1, code_point)) fail(backslash, "invalid \\u escape: expected 4 hex digits");
    p += 5;
    if (code_point >= 0xdc00 && code_point <= 0xdfff)
        fail(backslash, message("lone low surrogate \\u", std::string_view(p - 4, 4),
                                " in string (not preceded by a high surrogate)"));
    if (code_point >= 0xd800 && code_point <= 0xdbff) {
        std::uint32_t low = 0;
        if (end_ - p < 6 || p[0] != '\\' || p[1] != 'u' || !read_hex4(p + 2, low) || low < 0xdc00 ||
            low > 0xdfff)
            fail(backslash, message("high surrogate \\u", std::string_view(p - 4, 4),
                                    " not followed by a low surrogate escape"));
        code_point = 0x10000 + ((code_point - 0xd800) << 10) + (low - 0xdc00);
        p += 6;
    }
    append_utf8(out, code_point);
    return p;
}

inline value parser::parse_number() {
    const char* const start = p_;
    const auto digits = [&](const char* p) {
        while (p < end_ && *p >= '0' && *p <= '9')
            ++p;
        return p;
    };
    const auto expect_digit = [&](const char* p, std::string_view after) {
        if (p < end_ && *p >= '0' && *p <= '9') return;
        p_ = p;
        fail(p, message("expected a digit ", after, ", ", found()));
    };
    const bool negative = *p_ == '-';
    const char* const integer_begin = p_ + (negative ? 1 : 0);
    if (negative && integer_begin < end_ && *integer_begin == 'I')
        fail(integer_begin, "NaN and Infinity are not allowed in JSON");
    expect_digit(integer_begin, "after '-'");
    const char* const integer_end = *integer_begin == '0' ? integer_begin + 1 : digits(integer_begin);
    if (*integer_begin == '0' && digits(integer_end) != integer_end) fail(start, "leading zero in number");
    const char* p = integer_end;
    const char* fraction_begin = p;
    const char* fraction_end = p;
    if (p < end_ && *p == '.') {
        fraction_begin = ++p;
        expect_digit(p, "after the decimal point");
        p = fraction_end = digits(p);
    }
    std::int64_t exponent = 0;  // saturated: only consulted to tell underflow from overflow
    const bool has_exponent = p < end_ && (*p == 'e' || *p == 'E');
    if (has_exponent) {
        const bool negative_exponent = ++p < end_ && *p == '-';
        if (p < end_ && (*p == '+' || *p == '-')) ++p;
        expect_digit(p, "in the exponent");
        for (; p < end_ && *p >= '0' && *p <= '9'; ++p)
            if (exponent < 1'000'000'000) exponent = exponent * 10 + (*p - '0');
        if (negative_exponent) exponent = -exponent;
    }
    p_ = p;
    if (fraction_begin == fraction_end && !has_exponent) {
        std::optional<std::uint64_t> magnitude = 0;
        for (const char* d = integer_begin; d < integer_end && magnitude; ++d) {
            magnitude = anvil::detail::checked_mul(*magnitude, 10);
            if (magnitude)
                magnitude = anvil::detail::checked_add(*magnitude, static_cast<std::uint64_t>(*d - '0'));
        }
        constexpr auto int64_max = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
        if (magnitude && *magnitude <= int64_max + (negative ? 1 : 0))  // two's complement wraps -2^63 right
            return static_cast<std::int64_t>(negative ? 0 - *magnitude : *magnitude);
    }
    double result = 0;
    const auto [end, error] = std::from_chars(start, p, result);
    if (error == std::errc::result_out_of_range) {
        // from_chars reports underflow and overflow alike; underflow (to +-0) is fine, overflow is not. The
        // decimal exponent of the first significant digit tells them apart.
        const char* significant = integer_begin;
        while (significant < integer_end && *significant == '0')
            ++significant;
        std::int64_t lead = integer_end - significant - 1;
        if (significant == integer_end) {
            significant = fraction_begin;
            while (significant < fraction_end && *significant == '0')
                ++significant;
            lead = -(significant - fraction_begin) - 1;
        }
        if (lead + exponent >= 0) fail(start, "number out of range (beyond the range of a double)");
        result = negative ? -0.0 : 0.0;
    } else if (error != std::errc{} || end != p) {
        fail(start, "invalid number");
    }
    return result;
}

inline void write_scalar(std::string& out, const value& v) {
    char buffer[32];
    if (v.is_null()) out += "null";
    if (v.is_bool()) out += v.as_bool() ? "true" : "false";
    if (v.is_string()) write_string(out, v.as_string());
    if (v.is_integer()) out.append(buffer, std::to_chars(buffer, buffer + sizeof buffer, v.as_int()).ptr);
    if (v.is_double()) {
        const double d = v.as_double();
        if (!std::isfinite(d))
            throw type_error(
                message("JSON: cannot write the non-finite number ", d, " (JSON has no NaN or Infinity)"));
        // The shortest text that reads back as d; ".0" keeps an integral double a double when read back.
        const std::string_view text(buffer, std::to_chars(buffer, buffer + sizeof buffer, d).ptr);
        out += text;
        if (text.find_first_of(".e") == std::string_view::npos) out += ".0";
    }
}

}  // namespace detail

// ---- parse, dump ------------------------------------------------------------------------------------------

// Parses RFC 8259 JSON; errors are anvil::json_error with "<source_name>: byte <offset>: <what is wrong>".
[[nodiscard]] inline value parse(std::string_view text, std::string_view source_name = "JSON",
                                 const parse_options& options = {}) {
    return detail::parser(text, source_name, options).run();
}

// anvil::io_error when the file cannot be read; errors in its contents name the path.
[[nodiscard]] inline value parse_file(const std::filesystem::path& path, const parse_options& options = {}) {
    const std::string name = path.string();
    const auto io_failure = [&name](std::string_view what) {
        const int error = errno;
        return io_error(
            anvil::detail::message(name, ": cannot ", what, ": ", std::generic_category().message(error)));
    };
    const std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(name.c_str(), "rb"), &std::fclose);
    if (!file) throw io_failure("open");
    std::error_code size_error;
    const auto expected_size = std::filesystem::file_size(path, size_error);
    std::string text;
    if (!size_error) text.reserve(static_cast<std::size_t>(expected_size));
    char buffer[1 << 16];
    for (std::size_t got = sizeof buffer; got == sizeof buffer;) {
        got = std::fread(buffer, 1, sizeof buffer, file.get());
        text.append(buffer, got);
    }
    if (std::ferror(file.get())) throw io_failure("read");
    return parse(text, name, options);
}

// Writes v as JSON: compact when indent < 0, else one member or element per line, indented by `indent`
// spaces (Python's json.dumps layout, with ensure_ascii=False). Strings come out as valid UTF-8 with control
// characters escaped, doubles in their shortest round-trip form. A non-finite double or a string that is not
// UTF-8 (possible only in built values) throws anvil::type_error. Iterative: depth is not limited by the
// stack.
[[nodiscard]] inline std::string dump(const value& v, int indent = -1) {
    struct frame {
        const value* container;
        std::size_t next;
    };
    std::vector<frame> stack;
    std::string out;
    const auto new_line = [&] {
        if (indent < 0) return;
        out += '\n';
        out.append(stack.size() * static_cast<std::size_t>(indent), ' ');
    };
    const auto open = [&](const value& x) {
        if (x.is_array() || x.is_object()) {
            out += x.is_array() ? '[' : '{';
            stack.push_back({&x, 0});
        } else {
            detail::write_scalar(out, x);
        }
    };
    open(v);
    while (!stack.empty()) {
        const frame top = stack.back();
        const bool is_object = top.container->is_object();
        const std::size_t size =
            is_object ? top.container->as_object().size() : top.container->as_array().size();
        if (top.next == size) {
            stack.pop_back();
            if (size > 0) new_line();
            out += is_object ? '}' : ']';
            continue;
        }
        if (top.next > 0) out += ',';
        new_line();
        ++stack.back().next;
        if (!is_object) {
            open(top.container->as_array()[top.next]);
            continue;
        }
        const object::member& m =
            *std::next(top.container->as_object().begin(), static_cast<std::ptrdiff_t>(top.next));
        detail::write_string(out, m.first);
        out += indent < 0 ? ":" : ": ";
        open(m.second);
    }
    return out;
}

}  // namespace anvil::json

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
