// anvil: json_value's definitions (see json_value.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/core/json_value.hpp"

// The same false -Wmaybe-uninitialized as in json_value.hpp.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace anvil::json {

// ---- object ----------------------------------------------------------------------------------------------

ANVIL_INLINE object::object(const object& other)
    : members_(other.members_),
      index_(other.index_ ? std::make_unique<std::vector<std::uint64_t>>(*other.index_) : nullptr) {}

ANVIL_INLINE object& object::operator=(const object& other) {
    if (this != &other) *this = object(other);
    return *this;
}

ANVIL_INLINE const value* object::find(std::string_view key) const {
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

ANVIL_INLINE value& object::operator[](std::string key) {
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

ANVIL_INLINE std::size_t object::adopt(std::vector<member>&& members, bool allow_duplicate_keys) {
    members_ = std::move(members);
    index_.reset();
    if (members_.size() > linear_search_limit) return build_index(allow_duplicate_keys);
    for (std::size_t i = 1; i < members_.size() && !allow_duplicate_keys; ++i)
        for (std::size_t j = 0; j < i; ++j)
            if (members_[i].first == members_[j].first) return i;
    return no_duplicate;
}

ANVIL_INLINE std::size_t object::build_index(bool allow_duplicate_keys) {
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

ANVIL_INLINE std::size_t object::size() const noexcept {
    return members_.size();
}
ANVIL_INLINE bool object::empty() const noexcept {
    return members_.empty();
}
ANVIL_INLINE object::const_iterator object::begin() const noexcept {
    return members_.begin();
}
ANVIL_INLINE object::const_iterator object::end() const noexcept {
    return members_.end();
}
ANVIL_INLINE bool operator==(const object& a, const object& b) {
    return a.members_ == b.members_;
}

ANVIL_INLINE value* object::find(std::string_view key) {
    return const_cast<value*>(std::as_const(*this).find(key));
}

// ---- value -----------------------------------------------------------------------------------------------

ANVIL_INLINE value::value() noexcept = default;
ANVIL_INLINE value::value(std::nullptr_t) noexcept {}
ANVIL_INLINE value::value(bool b) noexcept : data_(b) {}
ANVIL_INLINE value::value(integer_tag, std::int64_t i) noexcept : data_(i) {}
ANVIL_INLINE value::value(double d) noexcept : data_(d) {}
ANVIL_INLINE value::value(std::string s) noexcept : data_(std::move(s)) {}
ANVIL_INLINE value::value(std::string_view s) : data_(std::string(s)) {}
ANVIL_INLINE value::value(const char* s) : data_(std::string(s)) {}
ANVIL_INLINE value::value(array a) noexcept : data_(std::move(a)) {}
ANVIL_INLINE value::value(object o) noexcept : data_(std::move(o)) {}

ANVIL_INLINE value::value(const value&) = default;
ANVIL_INLINE value::value(value&&) noexcept = default;
ANVIL_INLINE value& value::operator=(const value&) = default;
ANVIL_INLINE value& value::operator=(value&&) noexcept = default;
ANVIL_INLINE value::~value() {
    if (data_.index() >= static_cast<std::size_t>(kind::array)) release_nested();
}

ANVIL_INLINE bool value::as_bool() const {
    if (const auto* b = std::get_if<bool>(&data_)) return *b;
    throw_wrong_kind(kind::boolean);
}
ANVIL_INLINE std::int64_t value::as_int() const {
    if (const auto* i = std::get_if<std::int64_t>(&data_)) return *i;
    throw_wrong_kind(kind::integer);
}
ANVIL_INLINE double value::as_double() const {
    if (const auto* i = std::get_if<std::int64_t>(&data_)) return static_cast<double>(*i);
    if (const auto* d = std::get_if<double>(&data_)) return *d;
    throw_wrong_kind(kind::number);
}
ANVIL_INLINE const std::string& value::as_string() const {
    if (const auto* s = std::get_if<std::string>(&data_)) return *s;
    throw_wrong_kind(kind::string);
}
ANVIL_INLINE const array& value::as_array() const {
    if (const auto* a = std::get_if<array>(&data_)) return *a;
    throw_wrong_kind(kind::array);
}
ANVIL_INLINE const object& value::as_object() const {
    if (const auto* o = std::get_if<object>(&data_)) return *o;
    throw_wrong_kind(kind::object);
}
ANVIL_INLINE array& value::as_array() {
    return const_cast<array&>(std::as_const(*this).as_array());
}
ANVIL_INLINE object& value::as_object() {
    return const_cast<object&>(std::as_const(*this).as_object());
}

ANVIL_INLINE const value* value::find(std::string_view key) const {
    const auto* o = std::get_if<object>(&data_);
    return o ? o->find(key) : nullptr;
}
ANVIL_INLINE value* value::find(std::string_view key) {
    return const_cast<value*>(std::as_const(*this).find(key));
}

ANVIL_INLINE bool operator==(const value& a, const value& b) {
    return a.data_ == b.data_;
}

ANVIL_INLINE void value::throw_wrong_kind(kind expected) const {
    constexpr std::array<std::string_view, 7> described = {"null",     "a boolean", "an integer", "a number",
                                                           "a string", "an array",  "an object"};
    throw type_error(anvil::detail::message(
        "JSON: expected ", described[static_cast<std::size_t>(expected)], ", got ", described[data_.index()],
        offset_plus_one_ ? anvil::detail::message(" (the value at byte ", offset(), ")") : ""));
}

ANVIL_INLINE const value& value::at(std::string_view key) const {
    if (const value* found = as_object().find(key)) return *found;
    throw format_error(anvil::detail::message(
        "JSON: missing key \"", key, "\"",
        offset_plus_one_ ? anvil::detail::message(" (the object at byte ", offset(), ")") : ""));
}

ANVIL_INLINE void value::release_nested() noexcept {
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
