// anvil: how much memory the weights of the programs alive now take, by device — what `anvil bench` reports
// as resident weight bytes. Each buffer counts once however many programs read it: a recipe compiles one
// program per input shape, and those share their packed weights and the checkpoint's mapping.
//
//   const anvil::resident_weights w = anvil::resident_weight_bytes();
//   std::printf("CPU %zu bytes, Neural Engine %zu bytes\n", w.cpu_bytes, w.ane_bytes);
#pragma once

#include <cstddef>
#include <cstdint>

#include "anvil/compilation.hpp"

namespace anvil {

struct resident_weights {
    // Host memory the CPU kernels read weights from while programs run: f32 copies of constants, packed GEMM
    // panels, and weights read as stored (f16, bf16 or int8, often straight from the checkpoint's mapping).
    // Constants a program no longer reads (those the Neural Engine took) are not counted.
    std::size_t cpu_bytes = 0;
    // Weights loaded Neural Engine programs hold: the blobs handed to the framework, which keeps them for
    // the program's lifetime (anvil keeps no copy).
    std::size_t ane_bytes = 0;
    std::size_t buffers = 0;  // distinct buffers counted
};

// Over every live program, of every backend; 0 when none is alive.
[[nodiscard]] resident_weights resident_weight_bytes();

namespace detail {

enum class weight_device : std::uint8_t { cpu, ane };

// Counts one buffer of weights (its address and size, on a device) in resident_weight_bytes() while alive.
// A buffer registered by several holders (programs sharing it) counts once. Move-only.
class weight_residency {
public:
    weight_residency() noexcept = default;
    weight_residency(const void* address, std::size_t bytes, weight_device device);
    weight_residency(weight_residency&& other) noexcept;
    weight_residency& operator=(weight_residency&& other) noexcept;
    weight_residency(const weight_residency&) = delete;
    weight_residency& operator=(const weight_residency&) = delete;
    ~weight_residency();

private:
    void release() noexcept;

    const void* address_ = nullptr;
    std::size_t bytes_ = 0;
    weight_device device_ = weight_device::cpu;
};

}  // namespace detail
}  // namespace anvil

#if ANVIL_DEFINITIONS
#include "anvil/backend/resident_weights-inl.hpp"
#endif
