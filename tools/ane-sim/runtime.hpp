// anvil's ANE simulator: what the runtime files (runtime_*.cpp) share. The object model of a tiny Objective-C
// runtime (isa pointers, class records with metaclasses, interned selectors, retain counts, autorelease
// pools), the process-wide state behind one mutex, and helpers to make CF objects and NSErrors. Nothing here
// is exported: the C entry points of README.md are defined in the .cpp files with ANVIL_SIM_EXPORT.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "mil_program.hpp"
#include "rules.hpp"

#define ANVIL_SIM_EXPORT extern "C" __attribute__((visibility("default")))

namespace anvil_sim {

// Every pointer type of the macOS headers is a plain pointer here; BOOL/Boolean are one byte (arm64).
using id = void*;
using sel = void*;
using imp = void*;
using cf_index = long;

struct class_record;

// The header every object starts with; `isa` must stay the first member (toll-free bridging: CF objects are
// Objective-C objects too). Subtypes add no virtual functions, so `isa` stays at offset 0.
struct object {
    class_record* isa = nullptr;
    long retain_count = 1;
    bool alive = true;
    bool immortal = false;  // CF constants: retain/release do nothing
};

// A class object. A class's `isa` is its metaclass, whose methods are the class methods.
struct class_record {
    class_record* isa = nullptr;
    class_record* superclass = nullptr;
    std::string name;
    bool is_meta = false;
    unsigned long type_id = 1;                     // what CFGetTypeID reports for instances
    std::unordered_map<const char*, imp> methods;  // keyed by interned selector name
    void (*destroy)(object*) = nullptr;            // runs the subtype's destructor, leaves a tombstone
};

// Objects are never freed: a deallocated object becomes a tombstone (its payload destroyed, `alive` false) so
// a second release or a message to it is reported instead of reading freed memory.
template <class T>
void destroy_as(object* o) {
    auto* typed = static_cast<T*>(o);
    class_record* cls = typed->isa;
    typed->~T();
    auto* tomb = new (static_cast<void*>(typed)) object{};
    tomb->isa = cls;
    tomb->alive = false;
    tomb->retain_count = 0;
}

struct state {
    std::recursive_mutex mutex;
    std::unordered_set<std::string> selectors;                  // interned names; SEL = c_str()
    std::map<std::string, class_record*, std::less<>> classes;  // by name (class, not metaclass)
    std::unordered_set<const class_record*> class_records;      // classes and metaclasses
    std::unordered_set<const object*> objects;                  // every object ever made, tombstones too
    std::map<std::string, long, std::less<>> counters;
    std::string violations;
    std::string configuration_violations;           // from ANVIL_ANE_SIM_OPTIONS: kept by anvil_ane_sim_reset
    std::unordered_set<std::string> warnings_seen;  // MIL warnings are reported once each
    long violation_count = 0;
    long process_compiles = 0;  // the compile budget: only a new process resets it
    long live_programs = 0;
    rules options;
    // RUNTIME.md §0b #21: what the framework keeps per compiled identity: the weights it compiled first
    // (identity=text: a second program with the same text runs these, whatever it was given).
    std::map<std::string, std::vector<weight_file>, std::less<>> compiled_identities;
    // hang_eval_op: evaluations blocked until anvil_ane_sim_reset (which bumps the generation) or a timeout.
    std::condition_variable_any hang_released;
    long hang_generation = 0;
    std::string returned_violations;  // storage behind the const char* the diagnostics return
    std::string returned_live_objects;
};

// The process-wide state, created on first use and never destroyed (objects outlive static destructors).
state& sim();
using lock_guard = std::lock_guard<std::recursive_mutex>;

const char* intern_selector(std::string_view name);
void record_violation(std::string_view message);
// Applies ANVIL_ANE_SIM_OPTIONS (runtime_diagnostics.cpp); sim() calls it once, when it creates the state.
void apply_environment_options();
void add_counter(std::string_view name, long amount);
// Completion handlers still running on their own threads (runtime_coreml.cpp): live_objects waits for them,
// since each releases what it was handed when it returns.
std::atomic<int>& pending_handlers();

// Defines a class (with its metaclass) under NSObject. The `define_*_classes` functions of each file add
// theirs.
class_record* define_class(std::string_view name, unsigned long type_id, void (*destroy)(object*));
void add_method(class_record* cls, std::string_view selector_name, imp implementation);
void add_class_method(class_record* cls, std::string_view selector_name, imp implementation);
class_record* find_class(std::string_view name);
void define_core_foundation_classes();
void define_io_surface_class();
void define_ane_classes();
void define_coreml_classes();  // runtime_coreml.cpp: the CoreML.framework classes

// A method's C function as the IMP the class tables hold.
template <class Function>
imp as_imp(Function* function) {
    return reinterpret_cast<imp>(function);
}

template <class T, class... Args>
T* make_object(Args&&... args) {
    auto* made = new T(std::forward<Args>(args)...);
    made->isa = find_class(T::class_name);
    sim().objects.insert(made);
    return made;
}

// Retain counting with the checks of CONSTRAINTS.md "Objects and memory"; `who` names the caller in messages.
bool is_known_object(const void* pointer);
bool is_class_record(const void* pointer);
object* retain_object(const void* pointer, std::string_view who);
void release_object(const void* pointer, std::string_view who);
id autorelease_object(id pointer, std::string_view who);
std::string describe(const void* pointer);  // "an NSString", "a deallocated NSData", "a non-object pointer"

// The live object of class T, or nullptr (and no violation) when `pointer` is anything else.
template <class T>
T* as(const void* pointer) {
    if (pointer == nullptr || !is_known_object(pointer)) return nullptr;
    auto* o = static_cast<object*>(const_cast<void*>(pointer));
    if (!o->alive || o->isa == nullptr || o->isa->name != T::class_name) return nullptr;
    return static_cast<T*>(o);
}

// Checks `self` of an instance method: alive and of the class; records a violation naming the selector if
// not.
template <class T>
T* receiver(const void* self, std::string_view selector_name) {
    if (T* typed = as<T>(self)) return typed;
    record_violation(std::string("-[") + T::class_name + " " + std::string(selector_name) + "] sent to " +
                     describe(self));
    return nullptr;
}

// CoreFoundation payloads (runtime_core_foundation.cpp).
struct string_object : object {
    static constexpr const char* class_name = "NSString";
    explicit string_object(std::string value) : text(std::move(value)) {}
    std::string text;
};
struct data_object : object {
    static constexpr const char* class_name = "NSData";
    explicit data_object(std::vector<std::byte> value) : bytes(std::move(value)) {}
    std::vector<std::byte> bytes;
};
struct number_object : object {
    static constexpr const char* class_name = "NSNumber";
    number_object(bool floating, std::int64_t integer, double real)
        : is_float(floating), integer_value(integer), float_value(real) {}
    bool is_float;
    std::int64_t integer_value;
    double float_value;
};
struct boolean_object : object {
    static constexpr const char* class_name = "NSBoolean";
    explicit boolean_object(bool v) : value(v) {}
    bool value;
};
struct array_object : object {
    static constexpr const char* class_name = "NSArray";
    array_object(std::vector<object*> items, bool retains) : elements(std::move(items)), retained(retains) {}
    ~array_object();
    std::vector<object*> elements;
    bool retained;
};
struct dictionary_object : object {
    static constexpr const char* class_name = "NSDictionary";
    ~dictionary_object();
    std::vector<object*> keys;
    std::vector<object*> values;
    bool retains_keys = true;
    bool retains_values = true;
};
struct error_object : object {
    static constexpr const char* class_name = "NSError";
    error_object(object* domain_string, long error_code, std::string text)
        : domain(domain_string), code(error_code), description(std::move(text)) {}
    ~error_object();
    object* domain;
    long code;
    std::string description;
};
struct url_object : object {
    static constexpr const char* class_name = "NSURL";
    url_object(std::string file_path, bool directory) : path(std::move(file_path)), is_directory(directory) {}
    std::string path;
    bool is_directory;
};

// Owned (+1) CF objects, for the runtime's own use.
string_object* make_string(std::string text);
number_object* make_integer(std::int64_t value);
// Takes ownership of the +1 references in `items`.
array_object* make_array(std::vector<object*> items);
// Takes ownership of the +1 references in `entries` (keys are strings).
dictionary_object* make_dictionary(std::vector<std::pair<std::string, object*>> entries);
object* dictionary_lookup(const dictionary_object& dictionary, std::string_view key);
bool objects_equal(const object* a, const object* b);

// NSTemporaryDirectory()'s path: $TMPDIR or /tmp/, ending in '/'.
std::string temporary_directory();

// Sets `*error_out` to an autoreleased NSError (domain com.apple.appleneuralengine) when the caller passed
// one.
void set_error(void** error_out, long code, std::string description);

// IOSurface payload (runtime_io_surface.cpp).
struct surface_object : object {
    static constexpr const char* class_name = "IOSurface";
    std::size_t width = 0;
    std::size_t height = 0;
    std::size_t bytes_per_element = 0;
    std::size_t bytes_per_row = 0;
    std::size_t alloc_size = 0;
    std::uint32_t pixel_format = 0;
    std::vector<std::byte> storage;
    std::byte* base = nullptr;  // 64-byte aligned inside `storage`
    int lock_count = 0;
    bool locked_read_only = false;
    std::uint64_t digest_at_lock = 0;    // a read-only lock must not change the bytes
    std::uint64_t digest_at_unlock = 0;  // evaluate checks nothing wrote the bytes without a lock
};

std::uint64_t digest_bytes(const std::byte* bytes, std::size_t size, std::uint64_t seed);

}  // namespace anvil_sim
