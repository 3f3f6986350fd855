// anvil: the error hierarchy. Every failure the library reports is an anvil::error whose message names what
// failed (file, tensor, op, byte offset) and why; the library never aborts or prints.
#pragma once

#include <cstddef>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace anvil {

// Base of everything anvil throws.
class error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// The operating system refused: a file that cannot be opened, read, mapped or written.
class io_error : public error {
public:
    using error::error;
};

// Contents that do not follow their format: JSON, .npy, safetensors, config files.
class format_error : public error {
public:
    using error::error;
};

// JSON that is not RFC 8259; offset() is the byte at which parsing stopped.
class json_error : public format_error {
public:
    json_error(const std::string& message, std::size_t byte_offset)
        : format_error(message), offset_(byte_offset) {}
    [[nodiscard]] std::size_t offset() const noexcept { return offset_; }

private:
    std::size_t offset_;
};

// Tensor shapes that do not fit an operation or an expected layout.
class shape_error : public error {
public:
    using error::error;
};

// A value of the wrong element type, or a conversion that is not defined.
class type_error : public error {
public:
    using error::error;
};

// Well-formed input that anvil does not (yet) handle: an unknown architecture, an unsupported option.
class unsupported_error : public error {
public:
    using error::error;
};

namespace detail {

// Builds a message from pieces: detail::message("tensor '", name, "': ", rank, " dims").
template <class... Parts>
[[nodiscard]] std::string message(const Parts&... parts) {
    std::ostringstream out;
    (out << ... << parts);
    return out.str();
}

}  // namespace detail
}  // namespace anvil
