// anvil: warnings — what the library tells a user without failing (a segment that fell back to the CPU, a
// compile budget nearly spent). One line each, to a handler the application may set; by default to stderr as
// "anvil: warning: ...". The library never writes to stdout.
#pragma once

#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

namespace anvil {

using warning_handler = std::function<void(std::string_view)>;

namespace detail {

struct warning_state {
    std::mutex mutex;
    warning_handler handler;
};

inline warning_state& warnings() {
    static warning_state state;
    return state;
}

inline void warn(std::string_view text) {
    warning_state& state = warnings();
    const std::lock_guard<std::mutex> guard(state.mutex);
    if (state.handler) {
        state.handler(text);
        return;
    }
    std::fprintf(stderr, "anvil: warning: %.*s\n", static_cast<int>(text.size()), text.data());
}

}  // namespace detail

// Replaces the warning handler (an empty one restores stderr); returns the previous one.
inline warning_handler set_warning_handler(warning_handler handler) {
    detail::warning_state& state = detail::warnings();
    const std::lock_guard<std::mutex> guard(state.mutex);
    return std::exchange(state.handler, std::move(handler));
}

}  // namespace anvil
