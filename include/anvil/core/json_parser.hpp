// anvil: the JSON parser (RFC 8259): parse() and parse_file(), a strict single-pass parser over a string_view
// (UTF-8 validated, depth-limited, int64 and double numbers, errors with byte offsets), fast on documents of
// 10-100 MB such as tokenizer.json.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/compilation.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/json_value.hpp"

// GCC 12 reports a false -Wmaybe-uninitialized inside std::variant's move constructor when a value holding an
// array or object is moved at -O2 (a known false positive of that release); the pragma keeps users' -Werror
// builds working.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace anvil::json {

struct parse_options {
    std::size_t max_depth = 512;        // arrays and objects nested deeper than this are an error
    bool allow_duplicate_keys = false;  // RFC 8259 says names SHOULD be unique; safetensors needs them to be
};

namespace detail {

using anvil::detail::message;

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
    // p_ is at the opening quote; leaves p_ after the closing one.
    void parse_string(std::string& out);
    // Appends the character the escape at `backslash` stands for; returns the position after the escape.
    const char* parse_escape(const char* backslash, std::string& out);
    [[nodiscard]] value parse_number();
    // Reads `"key" :` and the whitespace after it.
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

}  // namespace detail

// ---- parse -----------------------------------------------------------------------------------------------

// Parses RFC 8259 JSON; errors are anvil::json_error with "<source_name>: byte <offset>: <what is wrong>".
[[nodiscard]] value parse(std::string_view text, std::string_view source_name = "JSON",
                          const parse_options& options = {});

// anvil::io_error when the file cannot be read; errors in its contents name the path.
[[nodiscard]] value parse_file(const std::filesystem::path& path, const parse_options& options = {});
}  // namespace anvil::json

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#if ANVIL_DEFINITIONS
#include "anvil/core/json_parser-inl.hpp"
#endif
