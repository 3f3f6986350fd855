// anvil: Core Foundation helpers for the ANE bridge. The framework takes
// NSData/NSString/NSNumber/NSDictionary/ NSArray arguments; the CF types are toll-free bridged to them
// (RUNTIME.md §1), so plain CF calls build them. Builders return owning objc_objects; readers check the CF
// type and say what they found instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/backend/ane/objc_runtime.hpp"
#include "anvil/core/error.hpp"

namespace anvil::detail::ane {

namespace cf_detail {

inline cf_index to_cf_index(std::size_t count, const char* what) {
    if (count > static_cast<std::size_t>(INT64_MAX)) throw error(message("ANE bridge: ", what, " too large"));
    return static_cast<cf_index>(count);
}

inline objc_object created(objc_id object, const char* what) {
    if (object == nullptr) throw error(message("ANE bridge: ", what, " returned NULL (out of memory?)"));
    return objc_object::adopt(object);
}

}  // namespace cf_detail

// The CF type of `object` by name, for messages ("CFString", "CFNumber", ..., or its class name).
inline std::string cf_type_name(objc_id object) {
    const system_runtime& rt = system_runtime::get();
    if (object == nullptr) return "nil";
    const cf_type_id type = rt.cf.CFGetTypeID(object);
    if (type == rt.cf.CFStringGetTypeID()) return "CFString";
    if (type == rt.cf.CFDataGetTypeID()) return "CFData";
    if (type == rt.cf.CFDictionaryGetTypeID()) return "CFDictionary";
    if (type == rt.cf.CFArrayGetTypeID()) return "CFArray";
    if (type == rt.cf.CFNumberGetTypeID()) return "CFNumber";
    if (type == rt.cf.CFErrorGetTypeID()) return "CFError";
    return rt.class_name(object);
}

inline bool is_cf_string(objc_id object) {
    const system_runtime& rt = system_runtime::get();
    return object != nullptr && rt.cf.CFGetTypeID(object) == rt.cf.CFStringGetTypeID();
}

inline void expect_cf_type(objc_id object, cf_type_id (*type_of)(), const char* expected,
                           std::string_view what) {
    if (object == nullptr || system_runtime::get().cf.CFGetTypeID(object) != type_of()) {
        throw error(message("ANE bridge: ", what, ": expected a ", expected, ", got ", cf_type_name(object)));
    }
}

// ---- builders
// -------------------------------------------------------------------------------------------------

inline objc_object make_data(std::span<const std::byte> bytes) {
    const system_runtime& rt = system_runtime::get();
    return cf_detail::created(
        rt.cf.CFDataCreate(rt.default_allocator(), reinterpret_cast<const std::uint8_t*>(bytes.data()),
                           cf_detail::to_cf_index(bytes.size(), "CFData")),
        "CFDataCreate");
}

inline objc_object make_string(std::string_view utf8) {
    if (utf8.find('\0') != std::string_view::npos) {
        throw error("ANE bridge: a CFString cannot hold a NUL character");
    }
    const system_runtime& rt = system_runtime::get();
    const std::string terminated(utf8);
    return cf_detail::created(
        rt.cf.CFStringCreateWithCString(rt.default_allocator(), terminated.c_str(), cf_string_encoding_utf8),
        "CFStringCreateWithCString (is the text valid UTF-8?)");
}

inline objc_object make_number(std::int64_t value) {
    const system_runtime& rt = system_runtime::get();
    return cf_detail::created(rt.cf.CFNumberCreate(rt.default_allocator(), cf_number_sint64_type, &value),
                              "CFNumberCreate");
}

// A CFArray retaining each element (kCFTypeArrayCallBacks).
inline objc_object make_array(std::span<const objc_id> elements) {
    const system_runtime& rt = system_runtime::get();
    std::vector<const void*> values(elements.begin(), elements.end());
    return cf_detail::created(
        rt.cf.CFArrayCreate(rt.default_allocator(), values.data(),
                            cf_detail::to_cf_index(values.size(), "CFArray"), rt.cf.kCFTypeArrayCallBacks),
        "CFArrayCreate");
}

// A CFDictionary retaining keys and values (kCFTypeDictionary callbacks); empty pairs give `@{}`.
inline objc_object make_dictionary(std::span<const std::pair<objc_id, objc_id>> pairs) {
    const system_runtime& rt = system_runtime::get();
    std::vector<const void*> keys;
    std::vector<const void*> values;
    keys.reserve(pairs.size());
    values.reserve(pairs.size());
    for (const auto& [key, value] : pairs) {
        if (key == nullptr || value == nullptr) throw error("ANE bridge: a CFDictionary key or value is nil");
        keys.push_back(key);
        values.push_back(value);
    }
    return cf_detail::created(
        rt.cf.CFDictionaryCreate(rt.default_allocator(), keys.data(), values.data(),
                                 cf_detail::to_cf_index(keys.size(), "CFDictionary"),
                                 rt.cf.kCFTypeDictionaryKeyCallBacks, rt.cf.kCFTypeDictionaryValueCallBacks),
        "CFDictionaryCreate");
}

inline objc_object make_dictionary(std::initializer_list<std::pair<objc_id, objc_id>> pairs) {
    return make_dictionary(std::span<const std::pair<objc_id, objc_id>>(pairs.begin(), pairs.size()));
}

inline objc_object make_empty_dictionary() {
    return make_dictionary(std::span<const std::pair<objc_id, objc_id>>{});
}

// A file URL for a directory (CFURL is NSURL).
inline objc_object make_directory_url(const std::string& path) {
    const system_runtime& rt = system_runtime::get();
    const objc_object text = make_string(path);
    return cf_detail::created(
        rt.cf.CFURLCreateWithFileSystemPath(rt.default_allocator(), text.get(), cf_url_posix_path_style, 1),
        "CFURLCreateWithFileSystemPath");
}

// A file URL for a file or a directory.
inline objc_object make_file_url(const std::string& path, bool directory) {
    const system_runtime& rt = system_runtime::get();
    const objc_object text = make_string(path);
    return cf_detail::created(rt.cf.CFURLCreateWithFileSystemPath(rt.default_allocator(), text.get(),
                                                                  cf_url_posix_path_style, directory ? 1 : 0),
                              "CFURLCreateWithFileSystemPath");
}

// ---- readers
// --------------------------------------------------------------------------------------------------

inline std::string string_value(objc_id string, std::string_view what = "value") {
    const system_runtime& rt = system_runtime::get();
    expect_cf_type(string, rt.cf.CFStringGetTypeID, "CFString", what);
    if (const char* direct = rt.cf.CFStringGetCStringPtr(string, cf_string_encoding_utf8)) return direct;
    const cf_index capacity =
        rt.cf.CFStringGetMaximumSizeForEncoding(rt.cf.CFStringGetLength(string), cf_string_encoding_utf8) + 1;
    if (capacity <= 0) throw error(message("ANE bridge: ", what, ": CFString of invalid length"));
    std::string buffer(static_cast<std::size_t>(capacity), '\0');
    if (!rt.cf.CFStringGetCString(string, buffer.data(), capacity, cf_string_encoding_utf8)) {
        throw error(message("ANE bridge: ", what, ": CFString not convertible to UTF-8"));
    }
    buffer.resize(std::char_traits<char>::length(buffer.c_str()));
    return buffer;
}

inline std::int64_t number_value(objc_id number, std::string_view what = "value") {
    const system_runtime& rt = system_runtime::get();
    expect_cf_type(number, rt.cf.CFNumberGetTypeID, "CFNumber", what);
    std::int64_t value = 0;
    if (!rt.cf.CFNumberGetValue(number, cf_number_sint64_type, &value)) {
        throw error(message("ANE bridge: ", what, ": CFNumber is not an exact 64-bit integer"));
    }
    return value;
}

inline std::span<const std::byte> data_bytes(objc_id data, std::string_view what = "value") {
    const system_runtime& rt = system_runtime::get();
    expect_cf_type(data, rt.cf.CFDataGetTypeID, "CFData", what);
    const cf_index length = rt.cf.CFDataGetLength(data);
    if (length <= 0) return {};
    return {reinterpret_cast<const std::byte*>(rt.cf.CFDataGetBytePtr(data)),
            static_cast<std::size_t>(length)};
}

inline std::size_t array_count(objc_id array, std::string_view what = "value") {
    const system_runtime& rt = system_runtime::get();
    expect_cf_type(array, rt.cf.CFArrayGetTypeID, "CFArray", what);
    const cf_index count = rt.cf.CFArrayGetCount(array);
    return count > 0 ? static_cast<std::size_t>(count) : 0;
}

// The element, not owned (valid while the array is).
inline objc_id array_at(objc_id array, std::size_t index, std::string_view what = "value") {
    const std::size_t count = array_count(array, what);
    if (index >= count) {
        throw error(
            message("ANE bridge: ", what, ": index ", index, " past the array's ", count, " elements"));
    }
    return const_cast<void*>(
        system_runtime::get().cf.CFArrayGetValueAtIndex(array, static_cast<cf_index>(index)));
}

inline std::size_t dictionary_count(objc_id dictionary, std::string_view what = "value") {
    const system_runtime& rt = system_runtime::get();
    expect_cf_type(dictionary, rt.cf.CFDictionaryGetTypeID, "CFDictionary", what);
    const cf_index count = rt.cf.CFDictionaryGetCount(dictionary);
    return count > 0 ? static_cast<std::size_t>(count) : 0;
}

// The value for a string key, not owned; nullptr when absent.
inline objc_id dictionary_lookup(objc_id dictionary, std::string_view key, std::string_view what = "value") {
    const system_runtime& rt = system_runtime::get();
    expect_cf_type(dictionary, rt.cf.CFDictionaryGetTypeID, "CFDictionary", what);
    const objc_object key_string = make_string(key);
    return const_cast<void*>(rt.cf.CFDictionaryGetValue(dictionary, key_string.get()));
}

// "domain, code N: description" of an NSError/CFError (not owned).
// The POSIX path of a file URL (CFURL is NSURL).
inline std::string url_path(objc_id url, std::string_view what = "URL") {
    const system_runtime& rt = system_runtime::get();
    if (url == nullptr) throw error(message("ANE bridge: ", what, " is nil"));
    const objc_object path = cf_detail::created(rt.cf.CFURLCopyFileSystemPath(url, cf_url_posix_path_style),
                                                "CFURLCopyFileSystemPath");
    return string_value(path.get(), what);
}

inline std::string describe_error(objc_id error_object) {
    if (error_object == nullptr) return "no error object";
    const system_runtime& rt = system_runtime::get();
    if (rt.cf.CFGetTypeID(error_object) != rt.cf.CFErrorGetTypeID()) {
        return message("an error object of unexpected type ", cf_type_name(error_object));
    }
    const objc_id domain = rt.cf.CFErrorGetDomain(error_object);
    const cf_index code = rt.cf.CFErrorGetCode(error_object);
    const objc_object description = objc_object::adopt(rt.cf.CFErrorCopyDescription(error_object));
    return message(
        is_cf_string(domain) ? string_value(domain, "error domain") : std::string("unknown domain"),
        ", code ", code, ": ",
        is_cf_string(description.get()) ? string_value(description.get(), "error description")
                                        : std::string("no description"));
}

}  // namespace anvil::detail::ane
