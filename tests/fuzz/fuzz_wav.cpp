// Fuzz target for anvil::decode_wav. Any input either decodes or throws anvil::format_error; what decodes
// has one finite sample per frame, in [-1, 1] for PCM (float files may hold anything finite or not).
#include <anvil/io/wav.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
    anvil::audio audio;
    try {
        audio = anvil::decode_wav(bytes, "fuzz.wav");
    } catch (const anvil::format_error&) {
        return 0;
    }
    if (audio.channels < 1 || audio.sample_rate < 1 || audio.samples.size() > size) std::abort();
    if (audio.encoding.rfind("pcm", 0) == 0)
        for (const float v : audio.samples)
            if (!(v >= -1.0f && v <= 1.0f)) std::abort();
    return 0;
}
