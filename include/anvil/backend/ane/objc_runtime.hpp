// anvil: the bridge to the Objective-C runtime, Core Foundation, IOSurface and Foundation from plain C++,
// shared by both routes to the Neural Engine: `system_runtime` loads those public system libraries only,
// `runtime` adds the private AppleNeuralEngine.framework (the ANE backend), and backend/coreml adds the
// public CoreML.framework on top of `system_runtime` — so an app on the Core ML route never loads the private
// framework (App Review rejects that). Every symbol is resolved with dlopen/dlsym (RUNTIME.md §1), from the
// system libraries on a Mac, or all of them from the simulator named by ANVIL_ANE_SIM. Everything used is
// probed once at start-up, so a changed API is an error naming the missing piece, never a crash. Messages are
// sent by looking the implementation up (class_getMethodImplementation, after class_respondsToSelector) and
// calling it through its exact prototype: `objc_bridge::send` is the only place an IMP is cast (DESIGN.md
// "How the two meet").
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "anvil/core/error.hpp"

// ANVIL_PUBLIC_APIS_ONLY=1 builds anvil for the App Store: App Review rejects apps that reference non-public
// APIs (App Store Review Guidelines 2.5.1, found by static analysis of the binary), so the bridge to the
// private AppleNeuralEngine.framework is compiled out — no path, class or selector of it is left in the
// binary — device::ane reports that it is not there, and device::coreml (the public CoreML.framework) is the
// route to the Neural Engine. ANVIL_PRIVATE_TEXT wraps each message that would name a private class.
#ifndef ANVIL_PUBLIC_APIS_ONLY
#define ANVIL_PUBLIC_APIS_ONLY 0
#endif
#if ANVIL_PUBLIC_APIS_ONLY
#define ANVIL_PRIVATE_TEXT(text) "a private framework call (compiled out)"
#else
#define ANVIL_PRIVATE_TEXT(text) text
#endif

#if __has_include(<dlfcn.h>)
#include <dlfcn.h>
#define ANVIL_ANE_HAS_DLFCN 1
#else
#define ANVIL_ANE_HAS_DLFCN 0
#endif

namespace anvil::detail::ane {

// Objective-C and Core Foundation handles. Every CF object is an Objective-C object (toll-free bridging), so
// one pointer type serves both.
using objc_id = void*;
using class_handle = void*;         // Class
using selector = void*;             // SEL
using implementation = void (*)();  // IMP
// BOOL: C `bool` on arm64 Apple platforms (the only ones with a Neural Engine) and in the simulator.
#if defined(__APPLE__) && !defined(__arm64__) && !defined(__aarch64__)
using objc_bool = signed char;
#else
using objc_bool = bool;
#endif
using cf_index = long;             // CFIndex
using cf_type_id = unsigned long;  // CFTypeID
using cf_boolean = unsigned char;  // Boolean

inline constexpr std::uint32_t cf_string_encoding_utf8 = 0x08000100u;
inline constexpr cf_index cf_number_sint64_type = 4;
inline constexpr cf_index cf_url_posix_path_style = 0;
inline constexpr std::uint32_t io_surface_lock_read_only = 1;

// A selector with the prototype of its method (receiver and selector left out). `available` is false for an
// optional method the framework lacks.
template <class Signature>
struct typed_selector;

template <class Result, class... Args>
struct typed_selector<Result(Args...)> {
    selector sel = nullptr;
    const char* name = "";
    bool available = false;
};

// The C functions used, with their exact prototypes; the field names are the C symbols'.
struct objc_functions {
    class_handle (*objc_getClass)(const char*) = nullptr;
    selector (*sel_registerName)(const char*) = nullptr;
    const char* (*sel_getName)(selector) = nullptr;
    class_handle (*object_getClass)(objc_id) = nullptr;
    const char* (*class_getName)(class_handle) = nullptr;
    objc_bool (*class_respondsToSelector)(class_handle, selector) = nullptr;
    implementation (*class_getMethodImplementation)(class_handle, selector) = nullptr;
    objc_id (*objc_retain)(objc_id) = nullptr;
    void (*objc_release)(objc_id) = nullptr;
    void* (*objc_autoreleasePoolPush)() = nullptr;
    void (*objc_autoreleasePoolPop)(void*) = nullptr;
};

struct core_foundation_functions {
    const void* kCFAllocatorDefault =
        nullptr;  // addresses of the data symbols; read through runtime's accessors
    const void* kCFTypeDictionaryKeyCallBacks = nullptr;
    const void* kCFTypeDictionaryValueCallBacks = nullptr;
    const void* kCFTypeArrayCallBacks = nullptr;
    cf_type_id (*CFGetTypeID)(objc_id) = nullptr;
    cf_type_id (*CFStringGetTypeID)() = nullptr;
    cf_type_id (*CFDataGetTypeID)() = nullptr;
    cf_type_id (*CFDictionaryGetTypeID)() = nullptr;
    cf_type_id (*CFArrayGetTypeID)() = nullptr;
    cf_type_id (*CFNumberGetTypeID)() = nullptr;
    cf_type_id (*CFErrorGetTypeID)() = nullptr;
    objc_id (*CFDataCreate)(objc_id, const std::uint8_t*, cf_index) = nullptr;
    const std::uint8_t* (*CFDataGetBytePtr)(objc_id) = nullptr;
    cf_index (*CFDataGetLength)(objc_id) = nullptr;
    objc_id (*CFStringCreateWithCString)(objc_id, const char*, std::uint32_t) = nullptr;
    cf_boolean (*CFStringGetCString)(objc_id, char*, cf_index, std::uint32_t) = nullptr;
    const char* (*CFStringGetCStringPtr)(objc_id, std::uint32_t) = nullptr;
    cf_index (*CFStringGetLength)(objc_id) = nullptr;
    cf_index (*CFStringGetMaximumSizeForEncoding)(cf_index, std::uint32_t) = nullptr;
    objc_id (*CFNumberCreate)(objc_id, cf_index, const void*) = nullptr;
    cf_boolean (*CFNumberGetValue)(objc_id, cf_index, void*) = nullptr;
    objc_id (*CFArrayCreate)(objc_id, const void**, cf_index, const void*) = nullptr;
    cf_index (*CFArrayGetCount)(objc_id) = nullptr;
    const void* (*CFArrayGetValueAtIndex)(objc_id, cf_index) = nullptr;
    objc_id (*CFDictionaryCreate)(objc_id, const void**, const void**, cf_index, const void*,
                                  const void*) = nullptr;
    cf_index (*CFDictionaryGetCount)(objc_id) = nullptr;
    const void* (*CFDictionaryGetValue)(objc_id, const void*) = nullptr;
    objc_id (*CFErrorGetDomain)(objc_id) = nullptr;
    cf_index (*CFErrorGetCode)(objc_id) = nullptr;
    objc_id (*CFErrorCopyDescription)(objc_id) = nullptr;
    objc_id (*CFURLCreateWithFileSystemPath)(objc_id, objc_id, cf_index, cf_boolean) = nullptr;
    objc_id (*CFURLCopyFileSystemPath)(objc_id, cf_index) = nullptr;
};

struct io_surface_functions {
    const void* kIOSurfaceWidth = nullptr;  // addresses of CFStringRef variables
    const void* kIOSurfaceHeight = nullptr;
    const void* kIOSurfaceBytesPerElement = nullptr;
    const void* kIOSurfaceBytesPerRow = nullptr;
    const void* kIOSurfaceAllocSize = nullptr;
    const void* kIOSurfacePixelFormat = nullptr;
    objc_id (*IOSurfaceCreate)(objc_id) = nullptr;
    int (*IOSurfaceLock)(objc_id, std::uint32_t, std::uint32_t*) = nullptr;
    int (*IOSurfaceUnlock)(objc_id, std::uint32_t, std::uint32_t*) = nullptr;
    void* (*IOSurfaceGetBaseAddress)(objc_id) = nullptr;
    std::size_t (*IOSurfaceGetAllocSize)(objc_id) = nullptr;
    std::size_t (*IOSurfaceGetBytesPerRow)(objc_id) = nullptr;
};

struct foundation_functions {
    objc_id (*NSTemporaryDirectory)() = nullptr;
};

// libSystem: the OS version decides the MIL dialect (RUNTIME.md §0b #18), and a simulated Mac reports its
// own.
struct system_library_functions {
    int (*sysctlbyname)(const char*, void*, std::size_t*, void*, std::size_t) = nullptr;
};

// The AppleNeuralEngine classes (RUNTIME.md §1); `device_info` may be null (it is optional).
struct framework_classes {
    class_handle in_memory_model_descriptor = nullptr;  // _ANEInMemoryModelDescriptor
    class_handle in_memory_model = nullptr;             // _ANEInMemoryModel
    class_handle model = nullptr;                       // _ANEModel
    class_handle request = nullptr;                     // _ANERequest
    class_handle io_surface_object = nullptr;           // _ANEIOSurfaceObject
    class_handle device_info = nullptr;                 // _ANEDeviceInfo
};

// The selectors with their prototypes, RUNTIME.md §2 table (QoS is `unsigned int`, errors are NSError**).
struct framework_messages {
    typed_selector<objc_id(objc_id, objc_id, objc_id)>
        model_with_mil_text;  // + modelWithMILText:weights:optionsPlist:
    typed_selector<objc_id(objc_id)> in_memory_model_with_descriptor;
    typed_selector<objc_id()> hex_string_identifier;
    typed_selector<objc_bool(unsigned, objc_id, objc_id*)> compile_with_qos;
    typed_selector<objc_bool(unsigned, objc_id, objc_id*)> load_with_qos;
    typed_selector<objc_bool(unsigned, objc_id, objc_id, objc_id*)> evaluate_with_qos;
    typed_selector<objc_bool(unsigned, objc_id*)> unload_with_qos;
    typed_selector<objc_id()> model;             // -[_ANEInMemoryModel model] -> _ANEModel
    typed_selector<objc_id()> model_attributes;  // -[_ANEModel modelAttributes]
    typed_selector<objc_id(objc_id)> object_with_io_surface;
    typed_selector<objc_id(objc_id, objc_id, objc_id, objc_id, objc_id, objc_id, objc_id)>
        request_with_inputs;  // the 7-argument form
    // Optional (RUNTIME.md §1 device query, §7 persistent cache).
    typed_selector<void(objc_id)> set_model_url;
    typed_selector<objc_bool()> compiled_model_exists;
    typed_selector<objc_id()> ane_architecture_type;
    typed_selector<objc_bool()> has_ane;
    typed_selector<unsigned()> num_ane_cores;
};

namespace runtime_detail {

// dlsym's void* to a function pointer (conditionally supported in ISO C++, always on POSIX).
template <class Function>
Function function_from_symbol(void* symbol) noexcept {
    static_assert(sizeof(Function) == sizeof(void*), "function pointers must be the size of data pointers");
    Function result = nullptr;
    std::memcpy(&result, &symbol, sizeof result);
    return result;
}

struct library_handles {
    void* objc = nullptr;
    void* core_foundation = nullptr;
    void* io_surface = nullptr;
    void* foundation = nullptr;
    void* system = nullptr;
    void* framework = nullptr;
};

inline constexpr const char* no_engine_message = ANVIL_PRIVATE_TEXT(
    "no Neural Engine on this machine (AppleNeuralEngine.framework needs macOS); set "
    "ANVIL_ANE_SIM=/path/to/libanvil-ane-sim.so to run the ANE backend on the simulator");
inline constexpr const char* public_apis_only_message =
    "device::ane is compiled out of this build (ANVIL_PUBLIC_APIS_ONLY, for the App Store): use "
    "device::coreml, "
    "the public Core ML route to the Neural Engine";

}  // namespace runtime_detail

// The function tables and message sending every bridge shares; `system_runtime`, `runtime` and the Core ML
// runtime are its three loaders.
class objc_bridge {
public:
    objc_bridge(const objc_bridge&) = delete;
    objc_bridge& operator=(const objc_bridge&) = delete;

    [[nodiscard]] bool simulated() const noexcept { return simulated_; }

    objc_functions objc;
    core_foundation_functions cf;
    io_surface_functions surface;
    foundation_functions foundation;
    system_library_functions libsystem;

    // The values of the CF data symbols, read at use (kCFAllocatorDefault is NULL on a Mac).
    [[nodiscard]] objc_id default_allocator() const noexcept {
        return *static_cast<objc_id const*>(cf.kCFAllocatorDefault);
    }
    [[nodiscard]] objc_id io_surface_key(const void* symbol_address) const noexcept {
        return *static_cast<objc_id const*>(symbol_address);
    }

    // Sends `m` to `receiver` (an instance, or a class object for a class method) through the exact
    // prototype.
    template <class Result, class... Args>
    Result send(objc_id receiver, const typed_selector<Result(Args...)>& m,
                std::type_identity_t<Args>... args) const {
        return invoke<Result, Args...>(receiver, m.sel, m.name, args...);
    }

    // The same for a selector outside the probed table: the prototype is Result(objc_id, SEL, Args...) with
    // Args deduced from the arguments, so pass exactly typed values (21u, not 21, for an `unsigned int`).
    template <class Result, class... Args>
    Result send(objc_id receiver, selector sel, Args... args) const {
        const char* name = sel != nullptr ? objc.sel_getName(sel) : nullptr;
        return invoke<Result, Args...>(receiver, sel, name != nullptr ? name : "(null selector)", args...);
    }

    [[nodiscard]] selector selector_named(const char* name) const { return objc.sel_registerName(name); }

    // Whether the receiver's class implements `m` (for optional methods).
    template <class Signature>
    [[nodiscard]] bool responds(objc_id receiver, const typed_selector<Signature>& m) const {
        return receiver != nullptr && m.sel != nullptr &&
               objc.class_respondsToSelector(objc.object_getClass(receiver), m.sel);
    }

    [[nodiscard]] std::string class_name(objc_id object) const {
        if (object == nullptr) return "nil";
        const char* name = objc.class_getName(objc.object_getClass(object));
        return name != nullptr ? name : "?";
    }

protected:
    // `bridge` names the bridge in errors ("ANE bridge"), `changed_api` says what a missing method means.
    objc_bridge(std::string bridge, std::string changed_api)
        : bridge_(std::move(bridge)), changed_api_(std::move(changed_api)) {}
    // A framework's bridge: the system libraries' tables, as `system` loaded them.
    objc_bridge(const objc_bridge& system, std::string bridge, std::string changed_api)
        : objc(system.objc),
          cf(system.cf),
          surface(system.surface),
          foundation(system.foundation),
          libsystem(system.libsystem),
          simulated_(system.simulated_),
          bridge_(std::move(bridge)),
          changed_api_(std::move(changed_api)) {}
    ~objc_bridge() = default;

#if ANVIL_ANE_HAS_DLFCN
    static void* open_library(const char* path, const char* what, const std::string& bridge) {
        void* handle = ::dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (handle == nullptr) {
            const char* reason = ::dlerror();
            throw unsupported_error(message(bridge, ": cannot load ", what, " from '", path,
                                            "': ", reason != nullptr ? reason : "dlopen failed"));
        }
        return handle;
    }

    template <class Pointer>
    static void resolve(void* handle, const char* name, Pointer& target, std::vector<std::string>& missing) {
        void* symbol = ::dlsym(handle, name);
        if (symbol == nullptr) {
            missing.emplace_back(message("symbol ", name));
            return;
        }
        if constexpr (std::is_same_v<Pointer, const void*>) {
            target = symbol;
        } else {
            target = runtime_detail::function_from_symbol<Pointer>(symbol);
        }
    }
#endif

    class_handle find_class(const char* name, bool required, std::vector<std::string>& missing) const {
        class_handle cls = objc.objc_getClass(name);
        if (cls == nullptr && required) missing.emplace_back(message("class ", name));
        return cls;
    }

    // Registers the selector and checks the class (or, for a class method, its metaclass) implements it.
    template <class Signature>
    void find_message(typed_selector<Signature>& m, const char* name, class_handle cls, bool class_method,
                      bool required, std::vector<std::string>& missing) const {
        m.name = name;
        m.sel = objc.sel_registerName(name);
        if (cls == nullptr) return;  // the class itself is reported missing
        const class_handle target = class_method ? objc.object_getClass(cls) : cls;
        m.available = m.sel != nullptr && target != nullptr && objc.class_respondsToSelector(target, m.sel);
        if (!m.available && required) {
            missing.emplace_back(
                message("selector ", class_method ? "+[" : "-[", objc.class_getName(cls), " ", name, "]"));
        }
    }

    [[noreturn]] void throw_missing(const std::string& library,
                                    const std::vector<std::string>& missing) const {
        std::string list;
        for (const std::string& item : missing)
            list += (list.empty() ? "" : ", ") + item;
        throw error(message(
            bridge_, ": ", library, " lacks what anvil needs: ", list,
            simulated_ ? " (is ANVIL_ANE_SIM the anvil ANE simulator?)" : message(" (", changed_api_, ")")));
    }

    bool simulated_ = false;

private:
    template <class Result, class... Args>
    Result invoke(objc_id receiver, selector sel, const char* name, Args... args) const {
        const implementation method = lookup(receiver, sel, name);
        using prototype = Result (*)(objc_id, selector, Args...);
        return reinterpret_cast<prototype>(method)(receiver, sel, args...);  // the only cast of an IMP
    }

    implementation lookup(objc_id receiver, selector sel, const char* name) const {
        if (receiver == nullptr) throw error(message(bridge_, ": message '", name, "' sent to nil"));
        const class_handle cls = objc.object_getClass(receiver);
        const std::pair<class_handle, selector> key{cls, sel};
        const std::lock_guard<std::mutex> guard(cache_mutex_);
        if (const auto found = method_cache_.find(key); found != method_cache_.end()) return found->second;
        if (cls == nullptr || !objc.class_respondsToSelector(cls, sel)) {
            throw error(message(bridge_, ": class '", class_name(receiver), "' does not respond to '", name,
                                "' (", changed_api_, ")"));
        }
        const implementation method = objc.class_getMethodImplementation(cls, sel);
        if (method == nullptr) {
            throw error(message(bridge_, ": no implementation of '", name, "' in class '",
                                class_name(receiver), "'"));
        }
        method_cache_.emplace(key, method);
        return method;
    }

    std::string bridge_;
    std::string changed_api_;
    mutable std::mutex cache_mutex_;
    mutable std::map<std::pair<class_handle, selector>, implementation> method_cache_;
};

// The public system libraries: libobjc, CoreFoundation, IOSurface, Foundation (or the simulator). Opened once
// (thread-safe), never closed.
class system_runtime final : public objc_bridge {
public:
    // Loads on first use; throws unsupported_error when there is nothing to load (not a Mac, no simulator),
    // anvil::error naming every missing symbol.
    [[nodiscard]] static const system_runtime& get() {
        static const system_runtime instance{construct_tag{}};
        return instance;
    }

    [[nodiscard]] const std::string& library() const noexcept { return library_; }
    // The dlopen handle the frameworks' symbols come from when simulated (every symbol, one library).
    [[nodiscard]] void* simulator_handle() const noexcept { return simulator_handle_; }

private:
    struct construct_tag {};

    explicit system_runtime(construct_tag)
        : objc_bridge("ANE bridge", "the Objective-C runtime or a system library lacks an expected symbol") {
        load();
    }

    void load() {
#if !ANVIL_ANE_HAS_DLFCN
        throw unsupported_error(runtime_detail::no_engine_message);
#else
        runtime_detail::library_handles handles;
        const char* simulator = std::getenv("ANVIL_ANE_SIM");
        if (simulator != nullptr && *simulator != '\0') {
            simulated_ = true;
            library_ = simulator;
            void* handle = open_library(simulator, "the ANE simulator named by ANVIL_ANE_SIM", "ANE bridge");
            simulator_handle_ = handle;
            handles = {handle, handle, handle, handle, handle, handle};
        } else {
#if defined(__APPLE__)
            library_ = "/usr/lib/libobjc.A.dylib";
            handles.objc = open_library("/usr/lib/libobjc.A.dylib", "the Objective-C runtime", "ANE bridge");
            handles.core_foundation =
                open_library("/System/Library/Frameworks/CoreFoundation.framework/CoreFoundation",
                             "CoreFoundation", "ANE bridge");
            handles.io_surface = open_library("/System/Library/Frameworks/IOSurface.framework/IOSurface",
                                              "IOSurface", "ANE bridge");
            handles.foundation = open_library("/System/Library/Frameworks/Foundation.framework/Foundation",
                                              "Foundation", "ANE bridge");
            handles.system = open_library("/usr/lib/libSystem.B.dylib", "libSystem", "ANE bridge");
#else
            throw unsupported_error(runtime_detail::no_engine_message);
#endif
        }
        std::vector<std::string> missing;
        resolve_functions(handles, missing);
        if (!missing.empty()) throw_missing(library_, missing);
#endif
    }

    void resolve_functions(const runtime_detail::library_handles& h, std::vector<std::string>& missing) {
#if ANVIL_ANE_HAS_DLFCN
#define ANVIL_ANE_RESOLVE(handle, table, symbol) resolve(handle, #symbol, table.symbol, missing)
        ANVIL_ANE_RESOLVE(h.objc, objc, objc_getClass);
        ANVIL_ANE_RESOLVE(h.objc, objc, sel_registerName);
        ANVIL_ANE_RESOLVE(h.objc, objc, sel_getName);
        ANVIL_ANE_RESOLVE(h.objc, objc, object_getClass);
        ANVIL_ANE_RESOLVE(h.objc, objc, class_getName);
        ANVIL_ANE_RESOLVE(h.objc, objc, class_respondsToSelector);
        ANVIL_ANE_RESOLVE(h.objc, objc, class_getMethodImplementation);
        ANVIL_ANE_RESOLVE(h.objc, objc, objc_retain);
        ANVIL_ANE_RESOLVE(h.objc, objc, objc_release);
        ANVIL_ANE_RESOLVE(h.objc, objc, objc_autoreleasePoolPush);
        ANVIL_ANE_RESOLVE(h.objc, objc, objc_autoreleasePoolPop);

        ANVIL_ANE_RESOLVE(h.core_foundation, cf, kCFAllocatorDefault);
        ANVIL_ANE_RESOLVE(h.core_foundation, cf, kCFTypeDictionaryKeyCallBacks);
        ANVIL_ANE_RESOLVE(h.core_foundation, cf, kCFTypeDictionaryValueCallBacks);
        ANVIL_ANE_RESOLVE(h.core_foundation, cf, kCFTypeArrayCallBacks);
        ANVIL_ANE_RESOLVE(h.core_foundation, cf, CFGetTypeID);
        ANVIL_ANE_RESOLVE(h.core_foundation, cf, CFStringGetTypeID);
        ANVIL_ANE_RESOLVE(h.core_foundation, cf, CFDataGetTypeID);
        ANVIL_ANE_RESOLVE(h.core_foundation, cf, CFDictionaryGetTypeID);
        ANVIL_ANE_RESOLVE(h.core_foundation, cf, CFArrayGetTypeID);
        ANVIL_ANE_RESOLVE(h.core_foundation, cf, CFNumberGetTypeID);
        ANVIL_ANE_RESOLVE(h.core_foundation, cf, CFErrorGetTypeID);
        ANVIL_ANE_RESOLVE(h.core_foundation, cf, CFDataCreate);
        ANVIL_ANE_RESOLVE(h.core_foundation, cf, CFDataGetBytePtr);
        ANVIL_ANE_RESOLVE(h.core_foundation, cf, CFDataGetLength);
        ANVIL_ANE_RESOLVE(h.core_foundation, cf, CFStringCreateWithCString);
        ANVIL_ANE_RESOLVE(h.core_foundation, cf, CFStringGetCString);
        ANVIL_ANE_RESOLVE(h.core_foundation, cf, CFStringGetCStringPtr);
        ANVIL_ANE_RESOLVE(h.core_foundation, cf, CFStringGetLength);
        ANVIL_ANE_RESOLVE(h.core_foundation, cf, CFStringGetMaximumSizeForEncoding);
        ANVIL_ANE_RESOLVE(h.core_foundation, cf, CFNumberCreate);
        ANVIL_ANE_RESOLVE(h.core_foundation, cf, CFNumberGetValue);
        ANVIL_ANE_RESOLVE(h.core_foundation, cf, CFArrayCreate);
        ANVIL_ANE_RESOLVE(h.core_foundation, cf, CFArrayGetCount);
        ANVIL_ANE_RESOLVE(h.core_foundation, cf, CFArrayGetValueAtIndex);
        ANVIL_ANE_RESOLVE(h.core_foundation, cf, CFDictionaryCreate);
        ANVIL_ANE_RESOLVE(h.core_foundation, cf, CFDictionaryGetCount);
        ANVIL_ANE_RESOLVE(h.core_foundation, cf, CFDictionaryGetValue);
        ANVIL_ANE_RESOLVE(h.core_foundation, cf, CFErrorGetDomain);
        ANVIL_ANE_RESOLVE(h.core_foundation, cf, CFErrorGetCode);
        ANVIL_ANE_RESOLVE(h.core_foundation, cf, CFErrorCopyDescription);
        ANVIL_ANE_RESOLVE(h.core_foundation, cf, CFURLCreateWithFileSystemPath);
        ANVIL_ANE_RESOLVE(h.core_foundation, cf, CFURLCopyFileSystemPath);

        ANVIL_ANE_RESOLVE(h.io_surface, surface, kIOSurfaceWidth);
        ANVIL_ANE_RESOLVE(h.io_surface, surface, kIOSurfaceHeight);
        ANVIL_ANE_RESOLVE(h.io_surface, surface, kIOSurfaceBytesPerElement);
        ANVIL_ANE_RESOLVE(h.io_surface, surface, kIOSurfaceBytesPerRow);
        ANVIL_ANE_RESOLVE(h.io_surface, surface, kIOSurfaceAllocSize);
        ANVIL_ANE_RESOLVE(h.io_surface, surface, kIOSurfacePixelFormat);
        ANVIL_ANE_RESOLVE(h.io_surface, surface, IOSurfaceCreate);
        ANVIL_ANE_RESOLVE(h.io_surface, surface, IOSurfaceLock);
        ANVIL_ANE_RESOLVE(h.io_surface, surface, IOSurfaceUnlock);
        ANVIL_ANE_RESOLVE(h.io_surface, surface, IOSurfaceGetBaseAddress);
        ANVIL_ANE_RESOLVE(h.io_surface, surface, IOSurfaceGetAllocSize);
        ANVIL_ANE_RESOLVE(h.io_surface, surface, IOSurfaceGetBytesPerRow);

        ANVIL_ANE_RESOLVE(h.foundation, foundation, NSTemporaryDirectory);
        ANVIL_ANE_RESOLVE(h.system, libsystem, sysctlbyname);
#undef ANVIL_ANE_RESOLVE
#else
        (void)h;
        (void)missing;
#endif
    }

    std::string library_;
    void* simulator_handle_ = nullptr;
};

// The ANE backend's loader: the system libraries and the private AppleNeuralEngine.framework. Opened once
// (thread-safe), never closed.
class runtime final : public objc_bridge {
public:
    // Loads on first use; throws unsupported_error when there is nothing to load, anvil::error naming every
    // missing symbol, class or selector. A failed load is retried on the next call.
    [[nodiscard]] static const runtime& get() {
        static const runtime instance{construct_tag{}};
        return instance;
    }

    [[nodiscard]] const std::string& library() const noexcept { return library_; }  // the framework's path

    framework_classes classes;
    framework_messages messages;

private:
    struct construct_tag {};

    explicit runtime(construct_tag)
        : objc_bridge(
              system_runtime::get(), "ANE bridge",
              ANVIL_PRIVATE_TEXT("the private AppleNeuralEngine API differs from the one anvil expects")) {
        load();
    }

    void load() {
#if ANVIL_PUBLIC_APIS_ONLY
        throw unsupported_error(runtime_detail::public_apis_only_message);
#elif !ANVIL_ANE_HAS_DLFCN
        throw unsupported_error(runtime_detail::no_engine_message);
#else
        const system_runtime& system = system_runtime::get();
        if (simulated_) {
            library_ = system.library();
        } else {
#if defined(__APPLE__)
            library_ = "/System/Library/PrivateFrameworks/AppleNeuralEngine.framework/AppleNeuralEngine";
            open_library(library_.c_str(), "the private AppleNeuralEngine.framework", "ANE bridge");
#else
            throw unsupported_error(runtime_detail::no_engine_message);
#endif
        }
        std::vector<std::string> missing;
        resolve_framework(missing);
        if (!missing.empty()) throw_missing(library_, missing);
#endif
    }

#if !ANVIL_PUBLIC_APIS_ONLY
    void resolve_framework(std::vector<std::string>& missing) {
        classes.in_memory_model_descriptor = find_class("_ANEInMemoryModelDescriptor", true, missing);
        classes.in_memory_model = find_class("_ANEInMemoryModel", true, missing);
        classes.model = find_class("_ANEModel", true, missing);
        classes.request = find_class("_ANERequest", true, missing);
        classes.io_surface_object = find_class("_ANEIOSurfaceObject", true, missing);
        classes.device_info = find_class("_ANEDeviceInfo", false, missing);

        auto& m = messages;
        find_message(m.model_with_mil_text,
                     "modelWithMILText:weights:optionsPlist:", classes.in_memory_model_descriptor, true, true,
                     missing);
        find_message(m.in_memory_model_with_descriptor,
                     "inMemoryModelWithDescriptor:", classes.in_memory_model, true, true, missing);
        const class_handle model_class = classes.in_memory_model;
        find_message(m.hex_string_identifier, "hexStringIdentifier", model_class, false, true, missing);
        find_message(m.compile_with_qos, "compileWithQoS:options:error:", model_class, false, true, missing);
        find_message(m.load_with_qos, "loadWithQoS:options:error:", model_class, false, true, missing);
        find_message(m.evaluate_with_qos, "evaluateWithQoS:options:request:error:", model_class, false, true,
                     missing);
        find_message(m.unload_with_qos, "unloadWithQoS:error:", model_class, false, true, missing);
        find_message(m.model, "model", model_class, false, true, missing);
        find_message(m.model_attributes, "modelAttributes", classes.model, false, true, missing);
        find_message(m.object_with_io_surface, "objectWithIOSurface:", classes.io_surface_object, true, true,
                     missing);
        find_message(
            m.request_with_inputs,
            "requestWithInputs:inputIndices:outputs:outputIndices:weightsBuffer:perfStats:procedureIndex:",
            classes.request, true, true, missing);
        find_message(m.set_model_url, "setModelURL:", model_class, false, false, missing);
        find_message(m.compiled_model_exists, "compiledModelExists", model_class, false, false, missing);
        find_message(m.ane_architecture_type, "aneArchitectureType", classes.device_info, true, false,
                     missing);
        find_message(m.has_ane, "hasANE", classes.device_info, true, false, missing);
        find_message(m.num_ane_cores, "numANECores", classes.device_info, true, false, missing);
    }
#endif

    std::string library_;
};

// An owned reference to an Objective-C (or CF) object: released once in the destructor. Move-only.
class objc_object {
public:
    objc_object() = default;

    // Takes over a +1 reference (a `Create`/`Copy` result, or one retained already).
    [[nodiscard]] static objc_object adopt(objc_id object) noexcept { return objc_object(object); }
    // Retains a +0 reference (a factory's autoreleased result, a getter's value).
    [[nodiscard]] static objc_object retain(objc_id object) {
        if (object != nullptr) system_runtime::get().objc.objc_retain(object);
        return objc_object(object);
    }

    objc_object(const objc_object&) = delete;
    objc_object& operator=(const objc_object&) = delete;
    objc_object(objc_object&& other) noexcept : object_(std::exchange(other.object_, nullptr)) {}
    objc_object& operator=(objc_object&& other) noexcept {
        if (this != &other) {
            reset();
            object_ = std::exchange(other.object_, nullptr);
        }
        return *this;
    }
    ~objc_object() { reset(); }

    [[nodiscard]] objc_id get() const noexcept { return object_; }
    [[nodiscard]] explicit operator bool() const noexcept { return object_ != nullptr; }

    void reset() noexcept {
        // A non-null object implies the runtime loaded, so get() cannot throw here.
        if (object_ != nullptr) system_runtime::get().objc.objc_release(std::exchange(object_, nullptr));
    }

private:
    explicit objc_object(objc_id object) noexcept : object_(object) {}
    objc_id object_ = nullptr;
};

// objc_autoreleasePoolPush/Pop around a scope (RUNTIME.md §2 "Autorelease and ownership": a C++ caller has no
// pool, and leaked autoreleased programs exhaust the ~15 live program slots).
class autorelease_pool {
public:
    autorelease_pool() : runtime_(&system_runtime::get()), pool_(runtime_->objc.objc_autoreleasePoolPush()) {}
    autorelease_pool(const autorelease_pool&) = delete;
    autorelease_pool& operator=(const autorelease_pool&) = delete;
    ~autorelease_pool() { runtime_->objc.objc_autoreleasePoolPop(pool_); }

private:
    const system_runtime* runtime_;
    void* pool_;
};

}  // namespace anvil::detail::ane
