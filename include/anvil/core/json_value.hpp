// anvil: the JSON value model: kind, value, array and object (insertion-ordered, hash-indexed when large),
// with equality and a destructor that frees deep documents without recursion. Read with json_parser.hpp,
// write with json_writer.hpp.
#pragma once

#include <array>
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

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

}  // namespace anvil::json

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
