// libFuzzer target for anvil's image decoding (the PPM/PGM parser and the format dispatch; PNG and JPEG go to
// stb_image where the build has it). Any input may be rejected with an anvil::error; one that decodes must
// give exactly height * width * 3 bytes within the size limits, and preprocessing it must give finite values.
#include <anvil/io/image.hpp>
#include <anvil/io/image_transforms.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    anvil::image decoded;
    try {
        decoded = anvil::decode_image(
            std::span<const std::byte>(reinterpret_cast<const std::byte*>(data), size), "fuzz input");
    } catch (const anvil::error&) {
        return 0;
    }
    if (decoded.channels != 3 || decoded.width < 1 || decoded.height < 1 ||
        decoded.pixels.size() != static_cast<std::size_t>(decoded.width * decoded.height * 3)) {
        std::abort();  // a decoded image must be what it says
    }
    if (decoded.width * decoded.height > 4096 * 4096) return 0;  // keep each run fast
    anvil::image_preprocessing small = anvil::image_preprocessing::imagenet();
    small.resize_shortest_edge = 12;
    small.crop_height = small.crop_width = 10;
    const auto values = anvil::preprocess(decoded, small).to_f32();
    for (const float v : values) {
        if (!std::isfinite(v)) std::abort();
    }
    return 0;
}
