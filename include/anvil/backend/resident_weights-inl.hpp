// anvil: resident_weights' definitions (see resident_weights.hpp; compilation.hpp says when this file is
// compiled).
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <tuple>

#include "anvil/backend/resident_weights.hpp"

namespace anvil::detail {

struct weight_registry {
    using key = std::tuple<weight_device, const void*, std::size_t>;

    std::mutex mutex;
    std::map<key, std::size_t> holders;  // how many weight_residency objects hold each buffer
    resident_weights totals;

    // Never destroyed: programs held by static objects may be destroyed after any function-local static,
    // and their residencies still unregister then.
    static weight_registry& instance() {
        static weight_registry* const registry = new weight_registry;
        return *registry;
    }
};

ANVIL_INLINE weight_residency::weight_residency(const void* address, std::size_t bytes, weight_device device)
    : address_(address), bytes_(bytes), device_(device) {
    if (address_ == nullptr || bytes_ == 0) {
        address_ = nullptr;
        return;
    }
    weight_registry& registry = weight_registry::instance();
    const std::lock_guard<std::mutex> lock(registry.mutex);
    if (registry.holders[{device_, address_, bytes_}]++ > 0) return;
    (device_ == weight_device::cpu ? registry.totals.cpu_bytes : registry.totals.ane_bytes) += bytes_;
    ++registry.totals.buffers;
}

ANVIL_INLINE weight_residency::weight_residency(weight_residency&& other) noexcept
    : address_(other.address_), bytes_(other.bytes_), device_(other.device_) {
    other.address_ = nullptr;
}

ANVIL_INLINE weight_residency& weight_residency::operator=(weight_residency&& other) noexcept {
    if (this != &other) {
        release();
        address_ = other.address_;
        bytes_ = other.bytes_;
        device_ = other.device_;
        other.address_ = nullptr;
    }
    return *this;
}

ANVIL_INLINE weight_residency::~weight_residency() {
    release();
}

ANVIL_INLINE void weight_residency::release() noexcept {
    if (address_ == nullptr) return;
    weight_registry& registry = weight_registry::instance();
    const std::lock_guard<std::mutex> lock(registry.mutex);
    const auto found = registry.holders.find({device_, address_, bytes_});
    address_ = nullptr;
    if (found == registry.holders.end() || --found->second > 0) return;
    registry.holders.erase(found);
    (device_ == weight_device::cpu ? registry.totals.cpu_bytes : registry.totals.ane_bytes) -= bytes_;
    --registry.totals.buffers;
}

}  // namespace anvil::detail

namespace anvil {

ANVIL_INLINE resident_weights resident_weight_bytes() {
    detail::weight_registry& registry = detail::weight_registry::instance();
    const std::lock_guard<std::mutex> lock(registry.mutex);
    return registry.totals;
}

}  // namespace anvil
