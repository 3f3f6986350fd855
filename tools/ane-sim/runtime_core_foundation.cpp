// anvil's ANE simulator: the CoreFoundation part (and Foundation's NSTemporaryDirectory). CF objects are
// objects of the simulator's runtime, so Objective-C calls and CFRetain/CFRelease count on the same retain
// counts, as toll-free bridging does on macOS (RUNTIME.md §1).
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "runtime.hpp"

namespace anvil_sim {

namespace {

constexpr std::uint32_t encoding_utf8 = 0x08000100;
constexpr std::uint32_t encoding_ascii = 0x0600;

// The CF type ids as macOS numbers them (values do not matter, only that they differ).
constexpr unsigned long string_type_id = 7;
constexpr unsigned long dictionary_type_id = 18;
constexpr unsigned long array_type_id = 19;
constexpr unsigned long data_type_id = 20;
constexpr unsigned long boolean_type_id = 21;
constexpr unsigned long number_type_id = 22;
constexpr unsigned long url_type_id = 29;
constexpr unsigned long error_type_id = 32;

boolean_object* make_constant_boolean(bool value) {
    auto* made = make_object<boolean_object>(value);
    made->immortal = true;
    return made;
}

// Bytes of each CFNumberType (CFNumber.h); 0 = not a number type.
struct number_type_info {
    std::size_t size;
    bool is_float;
};
number_type_info number_type(long type) {
    switch (type) {
        case 1:
        case 7:
            return {1, false};  // SInt8, Char
        case 2:
        case 8:
            return {2, false};  // SInt16, Short
        case 3:
        case 9:
            return {4, false};  // SInt32, Int
        case 4:
        case 10:
        case 11:
        case 14:
        case 15:
            return {8, false};  // SInt64, Long, LongLong, CFIndex, NSInteger
        case 5:
        case 12:
            return {4, true};  // Float32, Float
        case 6:
        case 13:
        case 16:
            return {8, true};  // Float64, Double, CGFloat
        default:
            return {0, false};
    }
}

bool is_utf8_or_ascii(std::uint32_t encoding) {
    return encoding == encoding_utf8 || encoding == encoding_ascii;
}

// The CFType callbacks: present so that the callback structs are real, and retaining as CF's do.
const void* callback_retain(const void*, const void* value) {
    lock_guard lock(sim().mutex);
    retain_object(value, "kCFType callbacks retain");
    return value;
}
void callback_release(const void*, const void* value) {
    lock_guard lock(sim().mutex);
    release_object(value, "kCFType callbacks release");
}
void* callback_copy_description(const void* value) {
    lock_guard lock(sim().mutex);
    return make_string(describe(value));
}
unsigned char callback_equal(const void* a, const void* b) {
    lock_guard lock(sim().mutex);
    return objects_equal(static_cast<const object*>(a), static_cast<const object*>(b)) ? 1 : 0;
}
unsigned long callback_hash(const void* value) {
    return reinterpret_cast<std::uintptr_t>(value);
}

template <class T>
T* checked(const void* pointer, const char* function) {
    if (T* typed = as<T>(pointer)) return typed;
    record_violation(std::string(function) + ": expected " + T::class_name + ", got " + describe(pointer));
    return nullptr;
}

}  // namespace

array_object::~array_object() {
    if (retained)
        for (object* element : elements)
            release_object(element, "NSArray dealloc");
}

dictionary_object::~dictionary_object() {
    if (retains_keys)
        for (object* key : keys)
            release_object(key, "NSDictionary dealloc");
    if (retains_values)
        for (object* value : values)
            release_object(value, "NSDictionary dealloc");
}

error_object::~error_object() {
    release_object(domain, "NSError dealloc");
}

void define_core_foundation_classes() {
    define_class(string_object::class_name, string_type_id, &destroy_as<string_object>);
    define_class(data_object::class_name, data_type_id, &destroy_as<data_object>);
    define_class(number_object::class_name, number_type_id, &destroy_as<number_object>);
    define_class(boolean_object::class_name, boolean_type_id, &destroy_as<boolean_object>);
    define_class(array_object::class_name, array_type_id, &destroy_as<array_object>);
    define_class(dictionary_object::class_name, dictionary_type_id, &destroy_as<dictionary_object>);
    define_class(error_object::class_name, error_type_id, &destroy_as<error_object>);
    define_class(url_object::class_name, url_type_id, &destroy_as<url_object>);
}

string_object* make_string(std::string text) {
    return make_object<string_object>(std::move(text));
}

number_object* make_integer(std::int64_t value) {
    return make_object<number_object>(false, value, static_cast<double>(value));
}

array_object* make_array(std::vector<object*> items) {
    return make_object<array_object>(std::move(items), true);
}

dictionary_object* make_dictionary(std::vector<std::pair<std::string, object*>> entries) {
    auto* made = make_object<dictionary_object>();
    for (auto& [key, value] : entries) {
        made->keys.push_back(make_string(key));
        made->values.push_back(value);
    }
    return made;
}

object* dictionary_lookup(const dictionary_object& dictionary, std::string_view key) {
    for (std::size_t i = 0; i < dictionary.keys.size(); ++i) {
        auto* key_string = as<string_object>(dictionary.keys[i]);
        if (key_string != nullptr && key_string->text == key) return dictionary.values[i];
    }
    return nullptr;
}

bool objects_equal(const object* a, const object* b) {
    if (a == b) return true;
    if (auto* sa = as<string_object>(a)) {
        auto* sb = as<string_object>(b);
        return sb != nullptr && sa->text == sb->text;
    }
    if (auto* na = as<number_object>(a)) {
        auto* nb = as<number_object>(b);
        if (nb == nullptr) return false;
        if (!na->is_float && !nb->is_float) return na->integer_value == nb->integer_value;
        return na->float_value == nb->float_value;
    }
    if (auto* da = as<data_object>(a)) {
        auto* db = as<data_object>(b);
        return db != nullptr && da->bytes == db->bytes;
    }
    return false;
}

std::string temporary_directory() {
    const char* from_environment = std::getenv("TMPDIR");
    std::string directory =
        from_environment != nullptr && *from_environment != 0 ? from_environment : "/tmp/";
    if (directory.back() != '/') directory.push_back('/');
    return directory;
}

void set_error(void** error_out, long code, std::string description) {
    if (error_out == nullptr) return;
    auto* error =
        make_object<error_object>(make_string("com.apple.appleneuralengine"), code, std::move(description));
    *error_out = autorelease_object(error, "NSError");
}

}  // namespace anvil_sim

using namespace anvil_sim;

// The CFDictionaryKeyCallBacks / ValueCallBacks / CFArrayCallBacks layouts of CoreFoundation.
struct cf_dictionary_key_callbacks {
    long version;
    const void* (*retain)(const void*, const void*);
    void (*release)(const void*, const void*);
    void* (*copy_description)(const void*);
    unsigned char (*equal)(const void*, const void*);
    unsigned long (*hash)(const void*);
};
struct cf_value_callbacks {
    long version;
    const void* (*retain)(const void*, const void*);
    void (*release)(const void*, const void*);
    void* (*copy_description)(const void*);
    unsigned char (*equal)(const void*, const void*);
};

ANVIL_SIM_EXPORT const void* const kCFAllocatorDefault = nullptr;
ANVIL_SIM_EXPORT const cf_dictionary_key_callbacks kCFTypeDictionaryKeyCallBacks = {
    0, &callback_retain, &callback_release, &callback_copy_description, &callback_equal, &callback_hash};
ANVIL_SIM_EXPORT const cf_value_callbacks kCFTypeDictionaryValueCallBacks = {
    0, &callback_retain, &callback_release, &callback_copy_description, &callback_equal};
ANVIL_SIM_EXPORT const cf_value_callbacks kCFTypeArrayCallBacks = {
    0, &callback_retain, &callback_release, &callback_copy_description, &callback_equal};
ANVIL_SIM_EXPORT const void* const kCFBooleanTrue = make_constant_boolean(true);
ANVIL_SIM_EXPORT const void* const kCFBooleanFalse = make_constant_boolean(false);

ANVIL_SIM_EXPORT const void* CFRetain(const void* value) {
    lock_guard lock(sim().mutex);
    if (value == nullptr) {
        record_violation("CFRetain(NULL): crashes on macOS");
        return nullptr;
    }
    retain_object(value, "CFRetain");
    return value;
}

ANVIL_SIM_EXPORT void CFRelease(const void* value) {
    lock_guard lock(sim().mutex);
    if (value == nullptr) {
        record_violation("CFRelease(NULL): crashes on macOS");
        return;
    }
    release_object(value, "CFRelease");
}

ANVIL_SIM_EXPORT unsigned long CFGetTypeID(const void* value) {
    lock_guard lock(sim().mutex);
    if (!is_known_object(value) || !static_cast<const object*>(value)->alive) {
        record_violation("CFGetTypeID: " + describe(value));
        return 0;
    }
    return static_cast<const object*>(value)->isa->type_id;
}

ANVIL_SIM_EXPORT long CFGetRetainCount(const void* value) {
    lock_guard lock(sim().mutex);
    if (!is_known_object(value) || !static_cast<const object*>(value)->alive) {
        record_violation("CFGetRetainCount: " + describe(value));
        return 0;
    }
    auto* o = static_cast<const object*>(value);
    return o->immortal ? std::numeric_limits<long>::max() : o->retain_count;
}

ANVIL_SIM_EXPORT unsigned long CFStringGetTypeID() {
    return string_type_id;
}
ANVIL_SIM_EXPORT unsigned long CFDataGetTypeID() {
    return data_type_id;
}
ANVIL_SIM_EXPORT unsigned long CFDictionaryGetTypeID() {
    return dictionary_type_id;
}
ANVIL_SIM_EXPORT unsigned long CFArrayGetTypeID() {
    return array_type_id;
}
ANVIL_SIM_EXPORT unsigned long CFNumberGetTypeID() {
    return number_type_id;
}
ANVIL_SIM_EXPORT unsigned long CFBooleanGetTypeID() {
    return boolean_type_id;
}
ANVIL_SIM_EXPORT unsigned long CFErrorGetTypeID() {
    return error_type_id;
}
ANVIL_SIM_EXPORT unsigned long CFURLGetTypeID() {
    return url_type_id;
}

ANVIL_SIM_EXPORT const void* CFDataCreate(const void*, const std::uint8_t* bytes, long length) {
    lock_guard lock(sim().mutex);
    if (length < 0 || (length > 0 && bytes == nullptr)) {
        record_violation("CFDataCreate: " + std::to_string(length) +
                         " bytes from a null pointer or negative length");
        return nullptr;
    }
    auto* begin = reinterpret_cast<const std::byte*>(bytes);
    return make_object<data_object>(std::vector<std::byte>(begin, begin + length));
}

ANVIL_SIM_EXPORT const std::uint8_t* CFDataGetBytePtr(const void* data) {
    lock_guard lock(sim().mutex);
    auto* typed = checked<data_object>(data, "CFDataGetBytePtr");
    return typed != nullptr ? reinterpret_cast<const std::uint8_t*>(typed->bytes.data()) : nullptr;
}

ANVIL_SIM_EXPORT long CFDataGetLength(const void* data) {
    lock_guard lock(sim().mutex);
    auto* typed = checked<data_object>(data, "CFDataGetLength");
    return typed != nullptr ? static_cast<long>(typed->bytes.size()) : 0;
}

ANVIL_SIM_EXPORT const void* CFStringCreateWithCString(const void*, const char* text,
                                                       std::uint32_t encoding) {
    lock_guard lock(sim().mutex);
    if (text == nullptr) {
        record_violation("CFStringCreateWithCString: NULL C string (crashes on macOS)");
        return nullptr;
    }
    if (!is_utf8_or_ascii(encoding)) {
        record_violation("CFStringCreateWithCString: encoding " + std::to_string(encoding) +
                         " is not supported by the simulator (use kCFStringEncodingUTF8 = 0x08000100)");
        return nullptr;
    }
    std::string value(text);
    if (encoding == encoding_ascii)
        for (char c : value)
            if (static_cast<unsigned char>(c) >= 0x80) return nullptr;  // not ASCII: CF returns NULL
    return make_string(std::move(value));
}

ANVIL_SIM_EXPORT unsigned char CFStringGetCString(const void* string, char* buffer, long buffer_size,
                                                  std::uint32_t encoding) {
    lock_guard lock(sim().mutex);
    auto* typed = checked<string_object>(string, "CFStringGetCString");
    if (typed == nullptr || buffer == nullptr || !is_utf8_or_ascii(encoding)) return 0;
    if (static_cast<long>(typed->text.size()) + 1 > buffer_size) return 0;
    std::memcpy(buffer, typed->text.c_str(), typed->text.size() + 1);
    return 1;
}

ANVIL_SIM_EXPORT const char* CFStringGetCStringPtr(const void* string, std::uint32_t encoding) {
    lock_guard lock(sim().mutex);
    auto* typed = checked<string_object>(string, "CFStringGetCStringPtr");
    return typed != nullptr && is_utf8_or_ascii(encoding) ? typed->text.c_str() : nullptr;
}

// The length in UTF-16 code units, as CFString counts.
ANVIL_SIM_EXPORT long CFStringGetLength(const void* string) {
    lock_guard lock(sim().mutex);
    auto* typed = checked<string_object>(string, "CFStringGetLength");
    if (typed == nullptr) return 0;
    long units = 0;
    for (char c : typed->text) {
        auto byte = static_cast<unsigned char>(c);
        if ((byte & 0xC0) != 0x80) units += byte >= 0xF0 ? 2 : 1;
    }
    return units;
}

ANVIL_SIM_EXPORT long CFStringGetMaximumSizeForEncoding(long length, std::uint32_t encoding) {
    if (encoding == encoding_ascii) return length;
    return encoding == encoding_utf8 ? length * 3 : -1;  // kCFNotFound for the rest
}

ANVIL_SIM_EXPORT const void* CFNumberCreate(const void*, long type, const void* value) {
    lock_guard lock(sim().mutex);
    number_type_info info = number_type(type);
    if (info.size == 0 || value == nullptr) {
        record_violation("CFNumberCreate: unknown CFNumberType " + std::to_string(type) + " or NULL value");
        return nullptr;
    }
    if (info.is_float) {
        double real = 0;
        if (info.size == 4) {
            float narrow = 0;
            std::memcpy(&narrow, value, 4);
            real = narrow;
        } else {
            std::memcpy(&real, value, 8);
        }
        return make_object<number_object>(true, static_cast<std::int64_t>(real), real);
    }
    std::int64_t integer = 0;
    switch (info.size) {
        case 1: {
            std::int8_t v;
            std::memcpy(&v, value, 1);
            integer = v;
            break;
        }
        case 2: {
            std::int16_t v;
            std::memcpy(&v, value, 2);
            integer = v;
            break;
        }
        case 4: {
            std::int32_t v;
            std::memcpy(&v, value, 4);
            integer = v;
            break;
        }
        default:
            std::memcpy(&integer, value, 8);
            break;
    }
    return make_integer(integer);
}

// Converts as CFNumberGetValue does; false when the value does not fit the requested type exactly.
ANVIL_SIM_EXPORT unsigned char CFNumberGetValue(const void* number, long type, void* value) {
    lock_guard lock(sim().mutex);
    auto* typed = checked<number_object>(number, "CFNumberGetValue");
    number_type_info info = number_type(type);
    if (typed == nullptr || info.size == 0 || value == nullptr) return 0;
    if (info.is_float) {
        double real = typed->is_float ? typed->float_value : static_cast<double>(typed->integer_value);
        if (info.size == 4) {
            auto narrow = static_cast<float>(real);
            std::memcpy(value, &narrow, 4);
            return static_cast<double>(narrow) == real ? 1 : 0;
        }
        std::memcpy(value, &real, 8);
        return 1;
    }
    std::int64_t integer = typed->integer_value;
    bool exact = !typed->is_float || std::trunc(typed->float_value) == typed->float_value;
    switch (info.size) {
        case 1: {
            auto v = static_cast<std::int8_t>(integer);
            std::memcpy(value, &v, 1);
            exact = exact && v == integer;
            break;
        }
        case 2: {
            auto v = static_cast<std::int16_t>(integer);
            std::memcpy(value, &v, 2);
            exact = exact && v == integer;
            break;
        }
        case 4: {
            auto v = static_cast<std::int32_t>(integer);
            std::memcpy(value, &v, 4);
            exact = exact && v == integer;
            break;
        }
        default:
            std::memcpy(value, &integer, 8);
            break;
    }
    return exact ? 1 : 0;
}

ANVIL_SIM_EXPORT unsigned char CFBooleanGetValue(const void* boolean) {
    lock_guard lock(sim().mutex);
    auto* typed = checked<boolean_object>(boolean, "CFBooleanGetValue");
    return typed != nullptr && typed->value ? 1 : 0;
}

ANVIL_SIM_EXPORT const void* CFArrayCreate(const void*, const void** values, long count,
                                           const void* callbacks) {
    lock_guard lock(sim().mutex);
    if (count < 0 || (count > 0 && values == nullptr)) {
        record_violation("CFArrayCreate: " + std::to_string(count) + " values from a NULL array");
        return nullptr;
    }
    if (callbacks == nullptr)
        record_violation(
            "CFArrayCreate: NULL callbacks, so the array does not retain its values (pass "
            "&kCFTypeArrayCallBacks)");
    std::vector<object*> items;
    for (long i = 0; i < count; ++i) {
        if (!is_known_object(values[i])) {
            record_violation("CFArrayCreate: value " + std::to_string(i) + " is " + describe(values[i]));
            return nullptr;
        }
        items.push_back(static_cast<object*>(const_cast<void*>(values[i])));
        if (callbacks != nullptr) retain_object(values[i], "CFArrayCreate");
    }
    return make_object<array_object>(std::move(items), callbacks != nullptr);
}

ANVIL_SIM_EXPORT long CFArrayGetCount(const void* array) {
    lock_guard lock(sim().mutex);
    auto* typed = checked<array_object>(array, "CFArrayGetCount");
    return typed != nullptr ? static_cast<long>(typed->elements.size()) : 0;
}

ANVIL_SIM_EXPORT const void* CFArrayGetValueAtIndex(const void* array, long index) {
    lock_guard lock(sim().mutex);
    auto* typed = checked<array_object>(array, "CFArrayGetValueAtIndex");
    if (typed == nullptr) return nullptr;
    if (index < 0 || index >= static_cast<long>(typed->elements.size())) {
        record_violation("CFArrayGetValueAtIndex: index " + std::to_string(index) + " outside an array of " +
                         std::to_string(typed->elements.size()) + " (raises NSRangeException on macOS)");
        return nullptr;
    }
    return typed->elements[static_cast<std::size_t>(index)];
}

ANVIL_SIM_EXPORT const void* CFDictionaryCreate(const void*, const void** keys, const void** values,
                                                long count, const void* key_callbacks,
                                                const void* value_callbacks) {
    lock_guard lock(sim().mutex);
    if (count < 0 || (count > 0 && (keys == nullptr || values == nullptr))) {
        record_violation("CFDictionaryCreate: " + std::to_string(count) + " entries from NULL arrays");
        return nullptr;
    }
    if (key_callbacks == nullptr || value_callbacks == nullptr)
        record_violation(
            "CFDictionaryCreate: NULL callbacks, so keys compare by pointer and are not retained "
            "(pass &kCFTypeDictionaryKeyCallBacks and &kCFTypeDictionaryValueCallBacks)");
    auto* made = make_object<dictionary_object>();
    made->retains_keys = key_callbacks != nullptr;
    made->retains_values = value_callbacks != nullptr;
    for (long i = 0; i < count; ++i) {
        if (!is_known_object(keys[i]) || !is_known_object(values[i])) {
            record_violation("CFDictionaryCreate: entry " + std::to_string(i) + " has key " +
                             describe(keys[i]) + " and value " + describe(values[i]));
            release_object(made, "CFDictionaryCreate");
            return nullptr;
        }
        auto* key = static_cast<object*>(const_cast<void*>(keys[i]));
        auto* value = static_cast<object*>(const_cast<void*>(values[i]));
        if (made->retains_keys) retain_object(key, "CFDictionaryCreate");
        if (made->retains_values) retain_object(value, "CFDictionaryCreate");
        made->keys.push_back(key);
        made->values.push_back(value);
    }
    return made;
}

ANVIL_SIM_EXPORT long CFDictionaryGetCount(const void* dictionary) {
    lock_guard lock(sim().mutex);
    auto* typed = checked<dictionary_object>(dictionary, "CFDictionaryGetCount");
    return typed != nullptr ? static_cast<long>(typed->keys.size()) : 0;
}

ANVIL_SIM_EXPORT const void* CFDictionaryGetValue(const void* dictionary, const void* key) {
    lock_guard lock(sim().mutex);
    auto* typed = checked<dictionary_object>(dictionary, "CFDictionaryGetValue");
    if (typed == nullptr) return nullptr;
    for (std::size_t i = 0; i < typed->keys.size(); ++i) {
        bool match = typed->retains_keys ? objects_equal(typed->keys[i], static_cast<const object*>(key))
                                         : typed->keys[i] == key;
        if (match) return typed->values[i];
    }
    return nullptr;
}

ANVIL_SIM_EXPORT void CFDictionaryGetKeysAndValues(const void* dictionary, const void** keys,
                                                   const void** values) {
    lock_guard lock(sim().mutex);
    auto* typed = checked<dictionary_object>(dictionary, "CFDictionaryGetKeysAndValues");
    if (typed == nullptr) return;
    for (std::size_t i = 0; i < typed->keys.size(); ++i) {
        if (keys != nullptr) keys[i] = typed->keys[i];
        if (values != nullptr) values[i] = typed->values[i];
    }
}

ANVIL_SIM_EXPORT const void* CFErrorGetDomain(const void* error) {
    lock_guard lock(sim().mutex);
    auto* typed = checked<error_object>(error, "CFErrorGetDomain");
    return typed != nullptr ? typed->domain : nullptr;
}

ANVIL_SIM_EXPORT long CFErrorGetCode(const void* error) {
    lock_guard lock(sim().mutex);
    auto* typed = checked<error_object>(error, "CFErrorGetCode");
    return typed != nullptr ? typed->code : 0;
}

ANVIL_SIM_EXPORT const void* CFErrorCopyDescription(const void* error) {
    lock_guard lock(sim().mutex);
    auto* typed = checked<error_object>(error, "CFErrorCopyDescription");
    return typed != nullptr ? make_string(typed->description) : nullptr;
}

ANVIL_SIM_EXPORT const void* CFURLCreateWithFileSystemPath(const void*, const void* path, long style,
                                                           unsigned char is_directory) {
    lock_guard lock(sim().mutex);
    auto* typed = checked<string_object>(path, "CFURLCreateWithFileSystemPath");
    if (typed == nullptr) return nullptr;
    if (style != 0) {
        record_violation("CFURLCreateWithFileSystemPath: path style " + std::to_string(style) +
                         " (the simulator takes kCFURLPOSIXPathStyle = 0)");
        return nullptr;
    }
    std::string value = typed->text;
    while (value.size() > 1 && value.back() == '/')
        value.pop_back();
    return make_object<url_object>(std::move(value), is_directory != 0);
}

ANVIL_SIM_EXPORT const void* CFURLCopyFileSystemPath(const void* url, long style) {
    lock_guard lock(sim().mutex);
    auto* typed = checked<url_object>(url, "CFURLCopyFileSystemPath");
    if (typed == nullptr) return nullptr;
    if (style != 0)
        record_violation("CFURLCopyFileSystemPath: path style " + std::to_string(style) + " is not POSIX");
    return make_string(typed->path);
}

ANVIL_SIM_EXPORT void* NSTemporaryDirectory() {
    lock_guard lock(sim().mutex);
    return autorelease_object(make_string(temporary_directory()), "NSTemporaryDirectory");
}
