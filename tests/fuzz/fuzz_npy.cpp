// Fuzz target for anvil::npy::parse. Any input either parses or throws anvil::error; an input that parses
// must write back (npy::serialize, in memory) to bytes that parse to the same array.
#include <anvil/core/npy.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
    anvil::npy::array array;
    try {
        array = anvil::npy::parse(bytes, "fuzz.npy");
    } catch (const anvil::error&) {
        return 0;
    }
    static_cast<void>(array.to_f32());
    // Not caught: what anvil parsed, anvil must be able to write and read back unchanged.
    const std::vector<std::byte> written = anvil::npy::serialize(array.type, array.shape, array.data.data());
    const anvil::npy::array again = anvil::npy::parse(written, "rewritten.npy");
    if (again.type != array.type || again.shape != array.shape || again.data != array.data) std::abort();
    return 0;
}
