// anvil: host_tensor, an n-dimensional array in host memory — what programs take as inputs and give back as
// outputs, and what constants in a graph hold. Copies share the elements (like a shared_ptr), so a weight
// mapped from a safetensors file becomes a graph constant without a copy: the tensor keeps its owner alive.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "anvil/compilation.hpp"
#include "anvil/core/dtype.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/shape.hpp"

namespace anvil {

class host_tensor {
public:
    host_tensor() = default;

    // Zero-filled elements of `type`, laid out row-major.
    host_tensor(dtype type, dims shape);

    // Elements that live elsewhere (a mapped file, a buffer): `owner` keeps them alive as long as any copy of
    // this tensor exists. The bytes must hold exactly shape.element_count() elements of `type`.
    host_tensor(dtype type, dims shape, const void* data, std::shared_ptr<const void> owner);

    // A copy of `values` in a new tensor of shape `shape` (element counts must agree).
    template <class T>
    requires element_type<T>
    [[nodiscard]] static host_tensor from(std::span<const T> values, dims shape) {
        host_tensor result(dtype_of_v<T>, shape);
        if (values.size() != result.element_count()) {
            throw shape_error(detail::message("host_tensor::from: ", values.size(),
                                              " values do not fill shape ", shape, " (",
                                              result.element_count(), " elements)"));
        }
        if (!values.empty()) std::memcpy(result.data_, values.data(), values.size_bytes());
        return result;
    }
    template <class T>
    requires element_type<T>
    [[nodiscard]] static host_tensor from(const std::vector<T>& values, dims shape) {
        return from(std::span<const T>(values), shape);
    }

    [[nodiscard]] dtype type() const noexcept { return type_; }
    [[nodiscard]] const dims& shape() const noexcept { return shape_; }
    [[nodiscard]] std::size_t rank() const noexcept { return shape_.rank(); }
    [[nodiscard]] std::size_t element_count() const {
        return static_cast<std::size_t>(shape_.element_count());
    }
    [[nodiscard]] std::size_t byte_size() const { return byte_count(type_, shape_); }
    [[nodiscard]] bool empty() const { return element_count() == 0; }

    [[nodiscard]] const void* raw() const noexcept { return data_; }
    [[nodiscard]] void* raw() noexcept { return data_; }

    // Typed access; throws type_error when T is not the tensor's dtype.
    template <class T>
    requires element_type<T>
    [[nodiscard]] std::span<T> values() {
        check_type<T>();
        return {reinterpret_cast<T*>(data_), element_count()};
    }
    template <class T>
    requires element_type<T>
    [[nodiscard]] std::span<const T> values() const {
        check_type<T>();
        return {reinterpret_cast<const T*>(data_), element_count()};
    }

    // The elements converted to f32, whatever the dtype.
    [[nodiscard]] std::vector<float> to_f32() const;

    // A tensor of the same elements under another shape with the same element count (no copy).
    [[nodiscard]] host_tensor reshaped(dims shape) const;

private:
    static std::size_t byte_count(dtype type, const dims& shape);

    template <class T>
    void check_type() const {
        if (dtype_of_v<T> != type_) {
            throw type_error(detail::message("host_tensor ", shape_, ": holds ", dtype_name(type_), ", not ",
                                             dtype_name(dtype_of_v<T>)));
        }
    }

    dtype type_ = dtype::f32;
    dims shape_;
    std::shared_ptr<const void> owner_;
    std::byte* data_ = nullptr;
};

// A tensor with its name: a program's input, a checkpoint's or an optimizer state's entry.
struct named_tensor {
    std::string name;
    host_tensor tensor;
};

}  // namespace anvil

#if ANVIL_DEFINITIONS
#include "anvil/core/host_tensor-inl.hpp"
#endif
