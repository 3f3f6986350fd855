// anvil: gradient clipping by global norm, as torch.nn.utils.clip_grad_norm_ (PyTorch 1.13, norm_type 2,
// error_if_nonfinite false).
#pragma once

#include <span>

#include "anvil/compilation.hpp"
#include "anvil/core/host_tensor.hpp"

namespace anvil::train {

// The 2-norm of all gradients as one vector, computed as torch does: each tensor's norm rounded to f32, then
// the norm of those. The sums of squares are in double, so the result is the correctly rounded norm where
// torch's f32 sums may be an ulp or two away (and stays finite where torch's f32 sum of squares of a tensor
// overflows). Gradients must be f32; none gives 0.
[[nodiscard]] float global_grad_norm(std::span<const host_tensor> grads);

// Multiplies every gradient (in place) by min(1, max_norm / (total + 1e-6)), in f32 as torch does, and
// returns total, the global norm before clipping. A non-finite total is returned as it is and scales the
// gradients as torch does with error_if_nonfinite=false: NaN makes every gradient NaN; infinity makes the
// coefficient 0, so finite elements become 0 and infinite ones NaN. A training loop that wants to skip such a
// step checks std::isfinite of the result. Throws anvil::error for a negative or NaN max_norm (torch does not
// check it and would flip the gradients' sign).
float clip_grad_norm(std::span<host_tensor> grads, double max_norm);

}  // namespace anvil::train

#if ANVIL_DEFINITIONS
#include "anvil/train/clip-inl.hpp"
#endif
