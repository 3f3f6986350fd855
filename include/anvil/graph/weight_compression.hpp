// anvil: weight compression — a graph pass that stores the weights of linear and conv2d nodes compressed,
// as int8 with a scale per output channel (dequantize_int8) or as palettes of 16 or 64 values found by
// k-means (dequantize_lut), per tensor or per group of output channels. The graph keeps computing with the
// dequantised weights, so every backend runs it: the CPU executes the dequantisation, the Core ML route
// keeps it in the package as constexpr ops (only the compressed bytes are stored), the private Neural
// Engine path folds it into fp16 weights.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "anvil/compilation.hpp"
#include "anvil/graph/graph.hpp"

namespace anvil {

enum class weight_compression : std::uint8_t {
    none,
    int8,     // symmetric int8, one scale per output channel: w = q * scale[c], q in [-127, 127]
    lut4,     // a 16-entry palette for the whole tensor (4-bit indices)
    lut4g32,  // a 16-entry palette per group of 32 output channels (or of the largest divisor of the
              // channel count below 32)
    lut6,     // a 64-entry palette for the whole tensor (6-bit indices)
};

// "none", "int8", "lut4", "lut4g32", "lut6"; nullopt for anything else.
[[nodiscard]] std::optional<weight_compression> parse_weight_compression(std::string_view text);
[[nodiscard]] std::string_view weight_compression_name(weight_compression how) noexcept;

// Weights with fewer elements stay as they are: their bytes do not matter, and their scales or palette would
// outweigh them.
inline constexpr std::int64_t min_compressed_elements = 256;

// The bytes a Core ML program stores for a weight [rows, columns] compressed `how` (the lowering keeps it as
// a constexpr op, backend/ane/lowering_context.hpp): int8 values and an fp16 scale per row; palette indices
// packed at 4 or 6 bits and fp16 palettes (one per 32-row group for lut4g32). fp16 for none, and for weights
// under min_compressed_elements, which stay as they are. The private Neural Engine path embeds every weight
// in fp16 whatever this says. Blob headers and alignment are not counted.
[[nodiscard]] std::size_t compressed_weight_bytes(std::int64_t rows, std::int64_t columns,
                                                  weight_compression how);

// Replaces each floating-point constant that is the weight (operand 1) of linear or conv2d nodes, directly
// or through a floating-point cast, and is read by nothing else, with its compressed form: dequantize_int8
// or dequantize_lut over new constants, named as the weight was (a tied embedding, also read by a gather,
// stays as it is). Deterministic: the same weights give the same bytes. The palettes are 1-D k-means:
// Lloyd's iterations on the sorted values from two starts, evenly spaced levels and evenly spaced
// quantiles, the fixed point with the smaller squared error kept (so never worse than uniform levels).
[[nodiscard]] graph_body compress_weights(const graph_body& body, weight_compression how);

}  // namespace anvil

#if ANVIL_DEFINITIONS
#include "anvil/graph/weight_compression-inl.hpp"
#endif
