// anvil's ANE simulator: the libobjc part. Class records with metaclasses, interned selectors, retain
// counting that reports double releases and messages to deallocated objects instead of crashing, and
// per-thread autorelease pool stacks (RUNTIME.md §2 "Autorelease and ownership").
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "citations.hpp"
#include "runtime.hpp"

namespace anvil_sim {

namespace {

state* global_state = nullptr;

// One stack of pools per thread, as in Objective-C; each pool is the list of objects it will release. Kept
// in a map by thread, under the simulator's lock, rather than in thread_local storage: this library is
// dlopen'd, and clang 14's LeakSanitizer on glibc 2.36 crashes at exit ("Tracer caught signal 11") scanning a
// dlopen'd library's dynamic TLS. A thread's entry goes when its last pool is popped.
using pool_stack_t = std::vector<std::vector<object*>>;
std::map<std::thread::id, pool_stack_t>& pool_stacks() {
    static auto* stacks = new std::map<std::thread::id, pool_stack_t>();  // never destroyed: used at exit
    return *stacks;
}
pool_stack_t& this_thread_pools() {
    return pool_stacks()[std::this_thread::get_id()];
}

class_record* root_class() {
    return sim().classes.at("NSObject");
}

id nsobject_retain(id self, sel) {
    return retain_object(self, "-[NSObject retain]");
}
void nsobject_release(id self, sel) {
    release_object(self, "-[NSObject release]");
}
id nsobject_autorelease(id self, sel) {
    return autorelease_object(self, "-[NSObject autorelease]");
}
unsigned long nsobject_retain_count(id self, sel) {
    auto* o = retain_object(self, "-[NSObject retainCount]");
    if (o == nullptr) return 0;
    --o->retain_count;
    return static_cast<unsigned long>(o->retain_count);
}

// -[NSObject isKindOfClass:]: the receiver's class or one of its superclasses is `cls`.
bool nsobject_is_kind_of_class(id self, sel, void* cls) {
    lock_guard lock(sim().mutex);
    if (!is_known_object(self) || !static_cast<object*>(self)->alive) {
        record_violation("-[NSObject isKindOfClass:] sent to " + describe(self) + cite(rule::ownership));
        return false;
    }
    for (const class_record* c = static_cast<object*>(self)->isa; c != nullptr; c = c->superclass)
        if (c == cls) return true;
    return false;
}

class_record* new_class_pair(std::string_view name, class_record* superclass) {
    auto* cls = new class_record{};
    auto* meta = new class_record{};
    cls->name = std::string(name);
    meta->name = std::string(name);
    meta->is_meta = true;
    cls->isa = meta;
    meta->isa = meta;
    cls->superclass = superclass;
    meta->superclass = superclass != nullptr ? superclass->isa : nullptr;
    state& s = sim();
    s.classes[cls->name] = cls;
    s.class_records.insert(cls);
    s.class_records.insert(meta);
    return cls;
}

imp lookup_method(const class_record* cls, const char* selector_name) {
    for (; cls != nullptr; cls = cls->superclass) {
        auto found = cls->methods.find(selector_name);
        if (found != cls->methods.end()) return found->second;
    }
    return nullptr;
}

// What class_getMethodImplementation returns for a selector the class lacks (the real runtime returns
// _objc_msgForward, which ends in doesNotRecognizeSelector:). Called as imp(self, _cmd, ...): the first two
// arguments are always the receiver and the selector.
long unknown_selector_trap(id self, sel cmd) {
    lock_guard lock(sim().mutex);
    std::string selector_name = cmd != nullptr ? static_cast<const char*>(cmd) : "(null)";
    if (is_class_record(self)) {
        auto* cls = static_cast<class_record*>(self);
        record_violation("+[" + cls->name + " " + selector_name + "]: unrecognized selector sent to class " +
                         cls->name +
                         " (the simulator implements only the selectors of RUNTIME.md §2, §3, §7)" +
                         cite(rule::classes_and_selectors));
    } else {
        std::string class_name = is_known_object(self) ? static_cast<object*>(self)->isa->name : "?";
        record_violation("-[" + class_name + " " + selector_name + "]: unrecognized selector sent to " +
                         describe(self) +
                         " (the simulator implements only the selectors of RUNTIME.md §2, §3, §7)" +
                         cite(rule::classes_and_selectors));
    }
    return 0;
}

}  // namespace

state& sim() {
    if (global_state == nullptr) {
        global_state = new state{};
        new_class_pair("NSObject", nullptr);
        class_record* root = global_state->classes.at("NSObject");
        add_method(root, "retain", reinterpret_cast<imp>(&nsobject_retain));
        add_method(root, "release", reinterpret_cast<imp>(&nsobject_release));
        add_method(root, "autorelease", reinterpret_cast<imp>(&nsobject_autorelease));
        add_method(root, "retainCount", reinterpret_cast<imp>(&nsobject_retain_count));
        add_method(root, "isKindOfClass:", reinterpret_cast<imp>(&nsobject_is_kind_of_class));
        define_core_foundation_classes();
        define_io_surface_class();
        define_ane_classes();
        define_coreml_classes();
        apply_environment_options();
    }
    return *global_state;
}

const char* intern_selector(std::string_view name) {
    return sim().selectors.emplace(name).first->c_str();
}

void record_violation(std::string_view message) {
    state& s = sim();
    s.violations.append(message);
    s.violations.push_back('\n');
    ++s.violation_count;
}

std::atomic<int>& pending_handlers() {
    static std::atomic<int> pending{0};
    return pending;
}

void add_counter(std::string_view name, long amount) {
    state& s = sim();
    auto found = s.counters.find(name);
    if (found == s.counters.end()) found = s.counters.emplace(std::string(name), 0).first;
    found->second += amount;
}

class_record* define_class(std::string_view name, unsigned long type_id, void (*destroy)(object*)) {
    class_record* cls = new_class_pair(name, root_class());
    cls->type_id = type_id;
    cls->destroy = destroy;
    return cls;
}

void add_method(class_record* cls, std::string_view selector_name, imp implementation) {
    cls->methods[intern_selector(selector_name)] = implementation;
}

void add_class_method(class_record* cls, std::string_view selector_name, imp implementation) {
    cls->isa->methods[intern_selector(selector_name)] = implementation;
}

class_record* find_class(std::string_view name) {
    state& s = sim();
    auto found = s.classes.find(name);
    return found == s.classes.end() ? nullptr : found->second;
}

bool is_known_object(const void* pointer) {
    return pointer != nullptr && sim().objects.count(static_cast<const object*>(pointer)) != 0;
}

bool is_class_record(const void* pointer) {
    return pointer != nullptr && sim().class_records.count(static_cast<const class_record*>(pointer)) != 0;
}

std::string describe(const void* pointer) {
    if (pointer == nullptr) return "nil";
    if (is_class_record(pointer)) return "the class " + static_cast<const class_record*>(pointer)->name;
    if (!is_known_object(pointer)) return "a pointer that is not an object";
    auto* o = static_cast<const object*>(pointer);
    if (!o->alive) return "a deallocated " + o->isa->name + " (use after free)";
    return "an " + o->isa->name;
}

object* retain_object(const void* pointer, std::string_view who) {
    if (pointer == nullptr || is_class_record(pointer)) return nullptr;
    if (!is_known_object(pointer) || !static_cast<const object*>(pointer)->alive) {
        record_violation(std::string(who) + ": retain of " + describe(pointer) + cite(rule::ownership));
        return nullptr;
    }
    auto* o = static_cast<object*>(const_cast<void*>(pointer));
    if (!o->immortal) ++o->retain_count;
    return o;
}

void release_object(const void* pointer, std::string_view who) {
    if (pointer == nullptr || is_class_record(pointer)) return;
    if (!is_known_object(pointer)) {
        record_violation(std::string(who) + ": release of " + describe(pointer) + cite(rule::ownership));
        return;
    }
    auto* o = static_cast<object*>(const_cast<void*>(pointer));
    if (o->immortal) return;
    if (!o->alive) {
        record_violation(std::string(who) + ": double release: " + describe(pointer) +
                         " was released more times than it was retained" + cite(rule::ownership));
        return;
    }
    if (--o->retain_count == 0) o->isa->destroy(o);
}

id autorelease_object(id pointer, std::string_view who) {
    if (pointer == nullptr || is_class_record(pointer)) return pointer;
    if (!is_known_object(pointer) || !static_cast<object*>(pointer)->alive) {
        record_violation(std::string(who) + ": autorelease of " + describe(pointer) + cite(rule::ownership));
        return pointer;
    }
    auto* o = static_cast<object*>(pointer);
    if (o->immortal) return pointer;
    pool_stack_t& pool_stack = this_thread_pools();
    if (pool_stack.empty()) {
        pool_stacks().erase(std::this_thread::get_id());
        record_violation(std::string(who) + ": " + describe(pointer) +
                         " autoreleased with no autorelease pool in place, so it leaks (wrap the calls in "
                         "objc_autoreleasePoolPush/Pop, RUNTIME.md §2 \"Autorelease and ownership\")" +
                         cite(rule::ownership));
        return pointer;
    }
    pool_stack.back().push_back(o);
    return pointer;
}

}  // namespace anvil_sim

using namespace anvil_sim;

ANVIL_SIM_EXPORT void* objc_getClass(const char* name) {
    if (name == nullptr) return nullptr;
    lock_guard lock(sim().mutex);
    // Option device_info=absent: the class is missing, as on machines where working code never asks for it
    // (RUNTIME.md §0 #14).
    if (!sim().options.device_info && std::string_view(name) == "_ANEDeviceInfo") return nullptr;
    // Option compute_plan=absent: Core ML before macOS 14.4, which has no MLComputePlan.
    if (!sim().options.compute_plan && std::string_view(name) == "MLComputePlan") return nullptr;
    // Option states=absent: Core ML before macOS 15, which has no MLState.
    if (!sim().options.states && std::string_view(name) == "MLState") return nullptr;
    return find_class(name);
}

ANVIL_SIM_EXPORT void* sel_registerName(const char* name) {
    if (name == nullptr) return nullptr;
    lock_guard lock(sim().mutex);
    return const_cast<char*>(intern_selector(name));
}

ANVIL_SIM_EXPORT const char* sel_getName(void* selector) {
    return selector == nullptr ? "<null selector>" : static_cast<const char*>(selector);
}

ANVIL_SIM_EXPORT void* object_getClass(void* object_pointer) {
    if (object_pointer == nullptr) return nullptr;
    lock_guard lock(sim().mutex);
    if (is_class_record(object_pointer)) return static_cast<class_record*>(object_pointer)->isa;
    if (!is_known_object(object_pointer)) {
        record_violation("object_getClass: " + describe(object_pointer));
        return nullptr;
    }
    auto* o = static_cast<object*>(object_pointer);
    if (!o->alive) record_violation("object_getClass: " + describe(object_pointer) + cite(rule::ownership));
    return o->isa;
}

ANVIL_SIM_EXPORT const char* class_getName(void* cls) {
    if (cls == nullptr) return "nil";
    lock_guard lock(sim().mutex);
    if (!is_class_record(cls)) {
        record_violation("class_getName: " + describe(cls) + " is not a class");
        return "?";
    }
    return static_cast<class_record*>(cls)->name.c_str();
}

ANVIL_SIM_EXPORT bool class_respondsToSelector(void* cls, void* selector) {
    if (cls == nullptr || selector == nullptr) return false;
    lock_guard lock(sim().mutex);
    if (!is_class_record(cls)) {
        record_violation("class_respondsToSelector: " + describe(cls) + " is not a class");
        return false;
    }
    return lookup_method(static_cast<class_record*>(cls), static_cast<const char*>(selector)) != nullptr;
}

ANVIL_SIM_EXPORT void* class_getMethodImplementation(void* cls, void* selector) {
    if (cls == nullptr) return nullptr;
    lock_guard lock(sim().mutex);
    if (!is_class_record(cls)) {
        record_violation("class_getMethodImplementation: " + describe(cls) + " is not a class");
        return reinterpret_cast<imp>(&unknown_selector_trap);
    }
    imp found = selector != nullptr
                    ? lookup_method(static_cast<class_record*>(cls), static_cast<const char*>(selector))
                    : nullptr;
    return found != nullptr ? found : reinterpret_cast<imp>(&unknown_selector_trap);
}

ANVIL_SIM_EXPORT void* objc_retain(void* value) {
    lock_guard lock(sim().mutex);
    retain_object(value, "objc_retain");
    return value;
}

ANVIL_SIM_EXPORT void objc_release(void* value) {
    lock_guard lock(sim().mutex);
    release_object(value, "objc_release");
}

ANVIL_SIM_EXPORT void* objc_autorelease(void* value) {
    lock_guard lock(sim().mutex);
    return autorelease_object(value, "objc_autorelease");
}

ANVIL_SIM_EXPORT void* objc_autoreleasePoolPush() {
    lock_guard lock(sim().mutex);
    pool_stack_t& pool_stack = this_thread_pools();
    pool_stack.emplace_back();
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(pool_stack.size()));
}

ANVIL_SIM_EXPORT void objc_autoreleasePoolPop(void* token) {
    lock_guard lock(sim().mutex);
    auto depth = static_cast<std::size_t>(reinterpret_cast<std::uintptr_t>(token));
    pool_stack_t& pool_stack = this_thread_pools();
    if (depth == 0 || depth > pool_stack.size()) {
        const std::size_t pushed = pool_stack.size();
        if (pool_stack.empty()) pool_stacks().erase(std::this_thread::get_id());
        record_violation("objc_autoreleasePoolPop: the token " + std::to_string(depth) +
                         " is not a pool on this thread's stack (" + std::to_string(pushed) +
                         " pools pushed): popped twice, or on another thread" + cite(rule::ownership));
        return;
    }
    // Popping an outer pool drains the inner ones too, innermost first, each in reverse autorelease order.
    while (pool_stack.size() >= depth) {
        std::vector<object*> pool = std::move(pool_stack.back());
        pool_stack.pop_back();
        for (auto it = pool.rbegin(); it != pool.rend(); ++it)
            release_object(*it, "objc_autoreleasePoolPop");
    }
    if (this_thread_pools().empty()) pool_stacks().erase(std::this_thread::get_id());
}
