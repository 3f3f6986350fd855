// anvil: an IOSurface holding one ANE input or output tensor [1, C, 1, W]. The backend makes flat surfaces,
// as working code does (RUNTIME.md §0 #16, OMLX make_surface): Width = the allocation in bytes, Height 1, one
// byte per element, so channel c lives wherever the compiled program's PlaneStride puts it, which may exceed
// its row (§0 #8). The shaped form (Width = W, Height = C, BytesPerRow the row stride) stays for tests of the
// bridge. The CPU reads and writes a surface only under a lock, and never while the ANE evaluates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "anvil/backend/ane/core_foundation.hpp"
#include "anvil/backend/ane/objc_runtime.hpp"
#include "anvil/core/error.hpp"

namespace anvil::detail::ane {

class io_surface {
public:
    // Unlocks in its destructor. Move-only.
    class lock_guard {
    public:
        lock_guard(const lock_guard&) = delete;
        lock_guard& operator=(const lock_guard&) = delete;
        lock_guard(lock_guard&& other) noexcept
            : surface_(std::exchange(other.surface_, nullptr)),
              options_(other.options_),
              data_(other.data_) {}
        lock_guard& operator=(lock_guard&&) = delete;
        ~lock_guard() {
            if (surface_ != nullptr)
                system_runtime::get().surface.IOSurfaceUnlock(surface_, options_, nullptr);
        }

        [[nodiscard]] std::byte* data() const noexcept { return data_; }

    private:
        friend class io_surface;
        lock_guard(objc_id surface, std::uint32_t options, std::byte* data) noexcept
            : surface_(surface), options_(options), data_(data) {}

        objc_id surface_;
        std::uint32_t options_;
        std::byte* data_;
    };

    // A surface for [1, channels, 1, width] with `element_size`-byte elements (2 for fp16, 4 for fp32).
    [[nodiscard]] static io_surface create(std::int64_t channels, std::int64_t width,
                                           std::size_t element_size, std::size_t row_stride,
                                           std::size_t alloc_size) {
        if (channels <= 0 || width <= 0) {
            throw shape_error(message("ANE surface: [1, ", channels, ", 1, ", width,
                                      "] needs positive channels and width"));
        }
        if (element_size != 2 && element_size != 4) {
            throw type_error(message("ANE surface: element size ", element_size,
                                     " bytes; the ANE reads fp16 (2) or fp32 (4)"));
        }
        const auto row_bytes = static_cast<std::size_t>(width) * element_size;
        if (row_stride % 64 != 0 || row_stride < row_bytes) {
            throw shape_error(
                message("ANE surface: row stride ", row_stride, " bytes for rows of ", row_bytes,
                        " bytes; it must be a multiple of 64 and at least the row (RUNTIME.md §3)"));
        }
        const auto needed = static_cast<std::size_t>(channels) * row_stride;
        if (alloc_size < needed) {
            throw shape_error(message("ANE surface: allocation of ", alloc_size, " bytes for ", channels,
                                      " rows of stride ", row_stride, " (", needed, " bytes needed)"));
        }
        const system_runtime& rt = system_runtime::get();
        const auto& s = rt.surface;
        const objc_object width_number = make_number(width);
        const objc_object height_number = make_number(channels);
        const objc_object element_number = make_number(static_cast<std::int64_t>(element_size));
        const objc_object stride_number = make_number(static_cast<std::int64_t>(row_stride));
        const objc_object alloc_number = make_number(static_cast<std::int64_t>(alloc_size));
        const objc_object format_number = make_number(0);
        const objc_object properties = make_dictionary({
            {rt.io_surface_key(s.kIOSurfaceWidth), width_number.get()},
            {rt.io_surface_key(s.kIOSurfaceHeight), height_number.get()},
            {rt.io_surface_key(s.kIOSurfaceBytesPerElement), element_number.get()},
            {rt.io_surface_key(s.kIOSurfaceBytesPerRow), stride_number.get()},
            {rt.io_surface_key(s.kIOSurfaceAllocSize), alloc_number.get()},
            {rt.io_surface_key(s.kIOSurfacePixelFormat), format_number.get()},
        });
        objc_object handle = objc_object::adopt(s.IOSurfaceCreate(properties.get()));
        if (!handle) {
            throw error(message("ANE surface: IOSurfaceCreate failed for [1, ", channels, ", 1, ", width,
                                "], row stride ", row_stride, ", ", alloc_size, " bytes"));
        }
        io_surface result(std::move(handle));
        result.alloc_size_ = s.IOSurfaceGetAllocSize(result.handle());
        result.row_stride_ = s.IOSurfaceGetBytesPerRow(result.handle());
        if (result.alloc_size_ < needed || result.row_stride_ != row_stride) {
            throw error(message("ANE surface: IOSurfaceCreate gave ", result.alloc_size_,
                                " bytes with row stride ", result.row_stride_, " where ", alloc_size, " and ",
                                row_stride, " were asked"));
        }
        return result;
    }

    // A flat surface of `bytes` bytes (a multiple of 64): Width = bytes, Height = 1, BytesPerElement = 1,
    // BytesPerRow = AllocSize = bytes, pixel format 0.
    [[nodiscard]] static io_surface create_flat(std::size_t bytes) {
        if (bytes == 0 || bytes % 64 != 0)
            throw shape_error(
                message("ANE surface: ", bytes, " bytes; a flat surface is a positive multiple of 64"));
        const system_runtime& rt = system_runtime::get();
        const auto& s = rt.surface;
        const objc_object size_number = make_number(static_cast<std::int64_t>(bytes));
        const objc_object one = make_number(1);
        const objc_object format_number = make_number(0);
        const objc_object properties = make_dictionary({
            {rt.io_surface_key(s.kIOSurfaceWidth), size_number.get()},
            {rt.io_surface_key(s.kIOSurfaceHeight), one.get()},
            {rt.io_surface_key(s.kIOSurfaceBytesPerElement), one.get()},
            {rt.io_surface_key(s.kIOSurfaceBytesPerRow), size_number.get()},
            {rt.io_surface_key(s.kIOSurfaceAllocSize), size_number.get()},
            {rt.io_surface_key(s.kIOSurfacePixelFormat), format_number.get()},
        });
        objc_object handle = objc_object::adopt(s.IOSurfaceCreate(properties.get()));
        if (!handle)
            throw error(
                message("ANE surface: IOSurfaceCreate failed for a flat surface of ", bytes, " bytes"));
        io_surface result(std::move(handle));
        result.alloc_size_ = s.IOSurfaceGetAllocSize(result.handle());
        result.row_stride_ = s.IOSurfaceGetBytesPerRow(result.handle());
        if (result.alloc_size_ < bytes) {
            throw error(message("ANE surface: IOSurfaceCreate gave ", result.alloc_size_, " bytes where ",
                                bytes, " were asked"));
        }
        return result;
    }

    // Read-only locks tell the system the CPU did not write (RUNTIME.md §3 locking).
    [[nodiscard]] lock_guard lock(bool read_only) const {
        if (handle() == nullptr) throw error("ANE surface: lock of a moved-from io_surface");
        const system_runtime& rt = system_runtime::get();
        const std::uint32_t options = read_only ? io_surface_lock_read_only : 0u;
        const int status = rt.surface.IOSurfaceLock(handle(), options, nullptr);
        if (status != 0) throw error(message("ANE surface: IOSurfaceLock failed with status ", status));
        auto* base = static_cast<std::byte*>(rt.surface.IOSurfaceGetBaseAddress(handle()));
        if (base == nullptr) {
            rt.surface.IOSurfaceUnlock(handle(), options, nullptr);
            throw error("ANE surface: IOSurfaceGetBaseAddress returned NULL for a locked surface");
        }
        return lock_guard(handle(), options, base);
    }

    [[nodiscard]] std::size_t alloc_size() const noexcept { return alloc_size_; }
    [[nodiscard]] std::size_t row_stride() const noexcept { return row_stride_; }
    [[nodiscard]] void* handle() const noexcept { return surface_.get(); }  // IOSurfaceRef

private:
    explicit io_surface(objc_object surface) noexcept : surface_(std::move(surface)) {}

    objc_object surface_;
    std::size_t alloc_size_ = 0;
    std::size_t row_stride_ = 0;
};

}  // namespace anvil::detail::ane
