// anvil: the JSON value model: kind, value, array and object (insertion-ordered, hash-indexed when large),
// with equality and a destructor that frees deep documents without recursion. Read with json_parser.hpp,
// write with json_writer.hpp.
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "anvil/compilation.hpp"
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
    value() noexcept;
    value(std::nullptr_t) noexcept;
    value(bool b) noexcept;
    // Any integer type but bool and the character types (a char is no number). An unsigned value above
    // INT64_MAX throws anvil::type_error rather than silently becoming a double.
    template <std::integral Int>
    requires(!std::same_as<Int, bool> && !std::same_as<Int, char> && !std::same_as<Int, wchar_t> &&
             !std::same_as<Int, char8_t> && !std::same_as<Int, char16_t> && !std::same_as<Int, char32_t>)
        value(Int i)
        : value(integer_tag{}, checked_int64(i)) {}
    value(double d) noexcept;
    value(std::string s) noexcept;
    value(std::string_view s);
    value(const char* s);
    value(array a) noexcept;
    value(object o) noexcept;

    // Defined with the other members (json_value-inl.hpp), so that a file built against anvil::compiled does
    // not instantiate the variant's copies, moves and comparisons.
    value(const value&);
    value(value&&) noexcept;
    value& operator=(const value&);
    value& operator=(value&&) noexcept;
    ~value();

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
    [[nodiscard]] bool as_bool() const;
    [[nodiscard]] std::int64_t as_int() const;
    [[nodiscard]] double as_double() const;  // integers convert
    [[nodiscard]] const std::string& as_string() const;
    [[nodiscard]] const array& as_array() const;
    [[nodiscard]] const object& as_object() const;
    [[nodiscard]] array& as_array();
    [[nodiscard]] object& as_object();

    // nullptr when this is not an object or the key is absent.
    [[nodiscard]] const value* find(std::string_view key) const;
    [[nodiscard]] value* find(std::string_view key);
    // The member named key: anvil::format_error when absent, anvil::type_error when this is not an object.
    [[nodiscard]] const value& at(std::string_view key) const;

    // Byte offset in the parsed text where this value began; 0 for values built in code.
    [[nodiscard]] std::size_t offset() const noexcept { return offset_plus_one_ ? offset_plus_one_ - 1 : 0; }

    // Same kind and contents: numbers by == (so 0.0 == -0.0, and an integer never equals a double), objects
    // member by member in order.
    friend bool operator==(const value& a, const value& b);

private:
    friend class detail::parser;
    struct integer_tag {};
    value(integer_tag, std::int64_t i) noexcept;

    template <class Int>
    static std::int64_t checked_int64(Int i) {
        if constexpr (std::is_unsigned_v<Int> && sizeof(Int) >= sizeof(std::int64_t)) {
            if (i > static_cast<Int>(std::numeric_limits<std::int64_t>::max()))
                throw type_error(
                    anvil::detail::message("integer ", i, " does not fit a JSON integer (int64)"));
        }
        return static_cast<std::int64_t>(i);
    }
    [[noreturn]] void throw_wrong_kind(kind expected) const;
    // Destroying a deep value recursively could overflow the stack (max_depth is the caller's choice), so
    // nested containers are moved to a work list and destroyed one level at a time.
    void release_nested() noexcept;

    std::variant<std::nullptr_t, bool, std::int64_t, double, std::string, array, object> data_;
    std::size_t offset_plus_one_ = 0;  // 0: built in code, not parsed
};

}  // namespace anvil::json

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#if ANVIL_DEFINITIONS
#include "anvil/core/json_value-inl.hpp"
#endif
