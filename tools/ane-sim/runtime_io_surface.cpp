// anvil's ANE simulator: the IOSurface part. A surface is a CF object over a zero-filled, 64-byte aligned
// buffer; creation checks the property dictionary against the ANE's layout rules (CONSTRAINTS.md "I/O
// surfaces", RUNTIME.md §3) and the lock state is tracked so evaluate can tell a locked surface or an
// unlocked write.
#include <cstdint>
#include <string>

#include "citations.hpp"
#include "runtime.hpp"

namespace anvil_sim {

namespace {

constexpr unsigned long surface_type_id = 41;
constexpr std::size_t largest_surface = std::size_t{1}
                                        << 34;  // beyond any ANE program: a size computed wrong
constexpr int io_return_error = static_cast<int>(0xE00002BC);
constexpr int io_return_not_locked = static_cast<int>(0xE00002CD);
constexpr std::uint32_t lock_read_only = 1;

// The surface property, or `fallback` when absent; false when present but not a number (or negative).
bool read_size(const dictionary_object& properties, std::string_view key, std::size_t fallback,
               std::size_t& value) {
    object* entry = dictionary_lookup(properties, key);
    if (entry == nullptr) {
        value = fallback;
        return true;
    }
    auto* number = as<number_object>(entry);
    if (number == nullptr || number->is_float || number->integer_value < 0) {
        record_violation("IOSurfaceCreate: property " + std::string(key) + " is " + describe(entry) +
                         ", expected a non-negative integer NSNumber");
        return false;
    }
    value = static_cast<std::size_t>(number->integer_value);
    return true;
}

const void* make_constant_key(const char* name) {
    string_object* key = make_string(name);
    key->immortal = true;
    return key;
}

surface_object* checked_surface(const void* surface, const char* function) {
    if (auto* typed = as<surface_object>(surface)) return typed;
    record_violation(std::string(function) + ": expected an IOSurface, got " + describe(surface));
    return nullptr;
}

}  // namespace

std::uint64_t digest_bytes(const std::byte* bytes, std::size_t size, std::uint64_t seed) {
    std::uint64_t hash = 0xcbf29ce484222325ULL ^ seed;  // FNV-1a 64
    for (std::size_t i = 0; i < size; ++i) {
        hash ^= static_cast<std::uint64_t>(bytes[i]);
        hash *= 0x100000001b3ULL;
    }
    return hash;
}

void define_io_surface_class() {
    define_class(surface_object::class_name, surface_type_id, &destroy_as<surface_object>);
}

}  // namespace anvil_sim

using namespace anvil_sim;

// The values of the kIOSurface* keys are the key names themselves, as on macOS.
ANVIL_SIM_EXPORT const void* const kIOSurfaceWidth = make_constant_key("IOSurfaceWidth");
ANVIL_SIM_EXPORT const void* const kIOSurfaceHeight = make_constant_key("IOSurfaceHeight");
ANVIL_SIM_EXPORT const void* const kIOSurfaceBytesPerElement = make_constant_key("IOSurfaceBytesPerElement");
ANVIL_SIM_EXPORT const void* const kIOSurfaceBytesPerRow = make_constant_key("IOSurfaceBytesPerRow");
ANVIL_SIM_EXPORT const void* const kIOSurfaceAllocSize = make_constant_key("IOSurfaceAllocSize");
ANVIL_SIM_EXPORT const void* const kIOSurfacePixelFormat = make_constant_key("IOSurfacePixelFormat");

ANVIL_SIM_EXPORT void* IOSurfaceCreate(const void* properties) {
    lock_guard lock(sim().mutex);
    auto* dictionary = as<dictionary_object>(properties);
    if (dictionary == nullptr) {
        record_violation("IOSurfaceCreate: the properties are " + describe(properties) +
                         ", expected an NSDictionary");
        return nullptr;
    }
    std::size_t width = 0;
    std::size_t height = 0;
    std::size_t element = 0;
    std::size_t row = 0;
    std::size_t alloc = 0;
    std::size_t pixel_format = 0;
    if (!read_size(*dictionary, "IOSurfaceWidth", 0, width) ||
        !read_size(*dictionary, "IOSurfaceHeight", 0, height) ||
        !read_size(*dictionary, "IOSurfaceBytesPerElement", 1, element) ||
        !read_size(*dictionary, "IOSurfacePixelFormat", 0, pixel_format))
        return nullptr;
    if (width == 0 || height == 0 || element == 0 || width > largest_surface || height > largest_surface ||
        element > 16) {
        record_violation("IOSurfaceCreate: width " + std::to_string(width) + ", height " +
                         std::to_string(height) + ", bytes per element " + std::to_string(element) +
                         ": each must be given and positive (element at most 16)");
        return nullptr;
    }
    if (!read_size(*dictionary, "IOSurfaceBytesPerRow", width * element, row)) return nullptr;
    if (row < width * element) {
        record_violation("IOSurfaceCreate: bytes per row " + std::to_string(row) + " is less than width " +
                         std::to_string(width) + " x bytes per element " + std::to_string(element));
        return nullptr;
    }
    if (row % 64 != 0) {
        record_violation("IOSurfaceCreate: bytes per row " + std::to_string(row) +
                         " is not a multiple of 64, the ANE's row alignment (RUNTIME.md §3: RowStride = "
                         "round_up(Width * elemsize, 64))" +
                         cite(rule::row_stride));
        return nullptr;
    }
    if (!read_size(*dictionary, "IOSurfaceAllocSize", row * height, alloc)) return nullptr;
    if (row > largest_surface / height || alloc > largest_surface || alloc < row * height) {
        record_violation("IOSurfaceCreate: alloc size " + std::to_string(alloc) + " is less than height " +
                         std::to_string(height) + " x bytes per row " + std::to_string(row) +
                         " (or too large)");
        return nullptr;
    }
    auto* surface = make_object<surface_object>();
    surface->width = width;
    surface->height = height;
    surface->bytes_per_element = element;
    surface->bytes_per_row = row;
    surface->alloc_size = alloc;
    surface->pixel_format = static_cast<std::uint32_t>(pixel_format);
    surface->storage.assign(alloc + 64, std::byte{0});
    auto address = reinterpret_cast<std::uintptr_t>(surface->storage.data());
    surface->base = surface->storage.data() + ((64 - address % 64) % 64);
    surface->digest_at_unlock = digest_bytes(surface->base, alloc, 0);
    return surface;
}

ANVIL_SIM_EXPORT int IOSurfaceLock(void* surface, std::uint32_t options, std::uint32_t* seed) {
    lock_guard lock(sim().mutex);
    auto* typed = checked_surface(surface, "IOSurfaceLock");
    if (typed == nullptr) return io_return_error;
    bool read_only = (options & lock_read_only) != 0;
    if (typed->lock_count > 0 && typed->locked_read_only != read_only)
        record_violation("IOSurfaceLock: the surface is already locked " +
                         std::string(typed->locked_read_only ? "read-only" : "for writing") +
                         "; a nested lock must use the same options" + cite(rule::surface_locking));
    if (typed->lock_count == 0) {
        typed->locked_read_only = read_only;
        typed->digest_at_lock = digest_bytes(typed->base, typed->alloc_size, 0);
    }
    ++typed->lock_count;
    if (seed != nullptr) *seed = static_cast<std::uint32_t>(typed->digest_at_lock);
    return 0;
}

ANVIL_SIM_EXPORT int IOSurfaceUnlock(void* surface, std::uint32_t options, std::uint32_t* seed) {
    lock_guard lock(sim().mutex);
    auto* typed = checked_surface(surface, "IOSurfaceUnlock");
    if (typed == nullptr) return io_return_error;
    if (typed->lock_count == 0) {
        record_violation("IOSurfaceUnlock: the surface is not locked" + cite(rule::surface_locking));
        return io_return_not_locked;
    }
    if (((options & lock_read_only) != 0) != typed->locked_read_only)
        record_violation("IOSurfaceUnlock: the options differ from those of the matching IOSurfaceLock" +
                         cite(rule::surface_locking));
    std::uint64_t now = digest_bytes(typed->base, typed->alloc_size, 0);
    if (--typed->lock_count == 0) {
        if (typed->locked_read_only && now != typed->digest_at_lock)
            record_violation(
                "IOSurfaceUnlock: the surface was written under a read-only lock (kIOSurfaceLockReadOnly)" +
                cite(rule::surface_locking));
        typed->digest_at_unlock = now;
    }
    if (seed != nullptr) *seed = static_cast<std::uint32_t>(now);
    return 0;
}

ANVIL_SIM_EXPORT void* IOSurfaceGetBaseAddress(void* surface) {
    lock_guard lock(sim().mutex);
    auto* typed = checked_surface(surface, "IOSurfaceGetBaseAddress");
    return typed != nullptr ? typed->base : nullptr;
}

ANVIL_SIM_EXPORT std::size_t IOSurfaceGetAllocSize(void* surface) {
    lock_guard lock(sim().mutex);
    auto* typed = checked_surface(surface, "IOSurfaceGetAllocSize");
    return typed != nullptr ? typed->alloc_size : 0;
}

ANVIL_SIM_EXPORT std::size_t IOSurfaceGetBytesPerRow(void* surface) {
    lock_guard lock(sim().mutex);
    auto* typed = checked_surface(surface, "IOSurfaceGetBytesPerRow");
    return typed != nullptr ? typed->bytes_per_row : 0;
}

ANVIL_SIM_EXPORT std::size_t IOSurfaceGetWidth(void* surface) {
    lock_guard lock(sim().mutex);
    auto* typed = checked_surface(surface, "IOSurfaceGetWidth");
    return typed != nullptr ? typed->width : 0;
}

ANVIL_SIM_EXPORT std::size_t IOSurfaceGetHeight(void* surface) {
    lock_guard lock(sim().mutex);
    auto* typed = checked_surface(surface, "IOSurfaceGetHeight");
    return typed != nullptr ? typed->height : 0;
}

ANVIL_SIM_EXPORT std::size_t IOSurfaceGetBytesPerElement(void* surface) {
    lock_guard lock(sim().mutex);
    auto* typed = checked_surface(surface, "IOSurfaceGetBytesPerElement");
    return typed != nullptr ? typed->bytes_per_element : 0;
}
