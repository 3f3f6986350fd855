// anvil: the value an additive attention mask gives a position that must get no weight, shared by every model
// family's masks (encoders, Whisper, decoder LMs, ...) and by the Neural Engine's lowering of the masks that
// imported graphs carry.
#pragma once

namespace anvil {

// -1e4, as Apple's ml-ane-transformers uses: finite, with headroom in fp16. Not -inf: the Neural Engine's
// softmax returns NaN for a row that holds -inf (RUNTIME.md §0b #24, MIL.md §2.3; torch_ane's MASK_NEG: "not
// -inf: the ANE computes softmax wrong with -inf"). Not fp16's lowest (-65504) either: in fp16, score +
// (-65504) is -inf as soon as the score is below -16. score + (-1e4) stays finite for every score above
// -55504, and exp(-1e4) is exactly 0 in fp16 and fp32 alike, so a masked position gets no weight, as with
// float32's lowest.
inline constexpr float masked_score = -1.0e4f;

}  // namespace anvil
