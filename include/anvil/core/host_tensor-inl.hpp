// anvil: host_tensor's definitions (see host_tensor.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "anvil/core/convert.hpp"
#include "anvil/core/dtype.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/core/shape.hpp"

namespace anvil {

ANVIL_INLINE host_tensor::host_tensor(dtype type, dims shape) : type_(type), shape_(shape) {
    const std::size_t bytes = byte_count(type, shape);
    auto storage = std::shared_ptr<std::byte[]>(new std::byte[bytes == 0 ? 1 : bytes]());
    data_ = storage.get();
    owner_ = std::move(storage);
}

ANVIL_INLINE host_tensor::host_tensor(dtype type, dims shape, const void* data,
                                      std::shared_ptr<const void> owner)
    : type_(type),
      shape_(shape),
      owner_(std::move(owner)),
      data_(static_cast<std::byte*>(const_cast<void*>(data))) {
    if (data_ == nullptr && byte_count(type, shape) != 0) {
        throw error(detail::message("host_tensor ", shape, " ", dtype_name(type), ": the data is null"));
    }
}

ANVIL_INLINE std::vector<float> host_tensor::to_f32() const {
    std::vector<float> out(element_count());
    if (!out.empty()) convert_to_f32(type_, data_, out.size(), out.data());
    return out;
}

ANVIL_INLINE host_tensor host_tensor::reshaped(dims shape) const {
    if (shape.element_count() != shape_.element_count()) {
        throw shape_error(detail::message("host_tensor::reshaped: ", shape_, " has ", shape_.element_count(),
                                          " elements, ", shape, " has ", shape.element_count()));
    }
    host_tensor result = *this;
    result.shape_ = shape;
    return result;
}

ANVIL_INLINE std::size_t host_tensor::byte_count(dtype type, const dims& shape) {
    const auto bytes = detail::checked_mul(shape.element_count(), std::uint64_t{dtype_size(type)});
    if (!bytes || *bytes > static_cast<std::uint64_t>(PTRDIFF_MAX)) {
        throw shape_error(detail::message("host_tensor ", shape, " ", dtype_name(type),
                                          ": the byte size does not fit in memory"));
    }
    return static_cast<std::size_t>(*bytes);
}

}  // namespace anvil
