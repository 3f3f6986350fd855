// The ANE simulator's diagnostics as the backend tests reach them: a dlopen of the very library the backend
// loads (ANVIL_ANE_SIM_PATH), its counters, violations and live objects, and options set for one scope.
#pragma once

#ifdef ANVIL_ANE_SIM_PATH

#include <dlfcn.h>
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <string_view>

namespace anvil_test {

struct simulator {
    simulator() {
        setenv("ANVIL_ANE_SIM", ANVIL_ANE_SIM_PATH, 1);
        handle = dlopen(ANVIL_ANE_SIM_PATH, RTLD_NOW | RTLD_LOCAL);
        REQUIRE_MESSAGE(handle != nullptr, dlerror());
        counter_fn = reinterpret_cast<long (*)(const char*)>(dlsym(handle, "anvil_ane_sim_counter"));
        violations_fn = reinterpret_cast<const char* (*)()>(dlsym(handle, "anvil_ane_sim_violations"));
        live_fn = reinterpret_cast<const char* (*)()>(dlsym(handle, "anvil_ane_sim_live_objects"));
        reset_fn = reinterpret_cast<void (*)()>(dlsym(handle, "anvil_ane_sim_reset"));
        option_fn =
            reinterpret_cast<int (*)(const char*, const char*)>(dlsym(handle, "anvil_ane_sim_set_option"));
        const bool found = counter_fn != nullptr && violations_fn != nullptr && live_fn != nullptr &&
                           reset_fn != nullptr && option_fn != nullptr;
        REQUIRE_MESSAGE(found, "the simulator lacks its diagnostics entry points");
    }
    simulator(const simulator&) = delete;
    simulator& operator=(const simulator&) = delete;
    ~simulator() { dlclose(handle); }

    long counter(const char* name) const { return counter_fn(name); }
    std::string violations() const { return violations_fn(); }
    std::string live_objects() const { return live_fn(); }
    void reset() const { reset_fn(); }
    void option(const char* name, const char* value) const {
        INFO("simulator option ", name, "=", value);
        REQUIRE(option_fn(name, value) == 0);
    }

    void* handle = nullptr;
    long (*counter_fn)(const char*) = nullptr;
    const char* (*violations_fn)() = nullptr;
    const char* (*live_fn)() = nullptr;
    void (*reset_fn)() = nullptr;
    int (*option_fn)(const char*, const char*) = nullptr;
};

inline simulator& sim() {
    static simulator instance;
    return instance;
}

// The value ANVIL_ANE_SIM_OPTIONS gave `name` for this process (the profile a CTest entry runs the suite
// under), else `fallback`.
inline std::string option_from_environment(std::string_view name, std::string_view fallback) {
    const char* text = std::getenv("ANVIL_ANE_SIM_OPTIONS");
    std::string_view rest = text == nullptr ? std::string_view() : std::string_view(text);
    std::string found(fallback);
    while (!rest.empty()) {
        const std::size_t comma = rest.find(',');
        const std::string_view item = rest.substr(0, comma);
        const std::size_t equals = item.find('=');
        if (equals != std::string_view::npos && item.substr(0, equals) == name)
            found = item.substr(equals + 1);
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
    return found;
}

// Sets a simulator option for one scope; restores the process's value (its environment's, else `fallback`,
// the simulator's default) when it ends.
class scoped_option {
public:
    scoped_option(const char* name, const char* value, const char* fallback)
        : name_(name), restore_(option_from_environment(name, fallback)) {
        sim().option(name, value);
    }
    scoped_option(const scoped_option&) = delete;
    scoped_option& operator=(const scoped_option&) = delete;
    ~scoped_option() { sim().option_fn(name_.c_str(), restore_.c_str()); }

private:
    std::string name_;
    std::string restore_;
};

// The architecture this process simulates (the environment's profile, else the simulator's default).
inline std::string simulated_architecture() {
    const bool m5 = option_from_environment("profile", "default") == "m5-macos26";
    return option_from_environment("architecture", m5 ? "h17g" : "h16g");
}

}  // namespace anvil_test

#endif  // ANVIL_ANE_SIM_PATH
