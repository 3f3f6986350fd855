// anvil: SHA-256 (FIPS 180-4), for content digests that must not collide by accident — the keys of the
// compiled-program cache, which name a program by its MIL text, weights, OS build and chip.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "anvil/compilation.hpp"

namespace anvil::detail {

class sha256 {
public:
    sha256() = default;

    sha256& update(std::span<const std::byte> bytes);
    sha256& update(std::string_view text) {
        return update(std::as_bytes(std::span<const char>(text.data(), text.size())));
    }

    // The digest of everything given so far; the object is spent afterwards.
    [[nodiscard]] std::array<std::uint8_t, 32> finish();

    [[nodiscard]] std::string finish_hex();

private:
    static std::uint32_t rotate(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

    void compress();

    std::array<std::uint32_t, 8> state_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                        0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    std::array<std::uint8_t, 64> block_{};
    std::size_t block_size_ = 0;
    std::size_t total_bytes_ = 0;
};

}  // namespace anvil::detail

#if ANVIL_DEFINITIONS
#include "anvil/core/sha256-inl.hpp"
#endif
