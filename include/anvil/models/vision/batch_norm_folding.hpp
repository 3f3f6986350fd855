// anvil: BatchNorm folded into the convolution before it, at load. In inference a BatchNorm is an affine map
// per channel, y = (x - mean) * gamma / sqrt(var + eps) + beta, so conv -> BatchNorm is one convolution with
// weight W * s and bias beta - mean * s (s = gamma / sqrt(var + eps)). The arithmetic runs on the host in
// float64 from the stored values and is rounded once to f32, so the graph holds a convolution with a bias and
// nothing else.
#pragma once

#include <string_view>
#include <vector>

#include "anvil/compilation.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/core/shape.hpp"
#include "anvil/fwd.hpp"

namespace anvil::models {

// PyTorch's BatchNorm2d default, which torchvision's and Hugging Face's ResNets keep.
inline constexpr double batch_norm_default_eps = 1e-5;

// A convolution with BatchNorm folded in: weight [out, in / groups, kh, kw] and bias [out], both f32.
struct folded_convolution {
    host_tensor weight;
    host_tensor bias;
};

}  // namespace anvil::models

namespace anvil::detail {

// The elements in float64: exact for f16, bf16 and f32 (through f32), and f64 read as it is.
[[nodiscard]] std::vector<double> values_f64(const tensor_view& view);

}  // namespace anvil::detail

namespace anvil::models {

// Folds the BatchNorm `<norm>.weight`, `.bias`, `.running_mean`, `.running_var` (each [out]) into the
// bias-free convolution `convolution_weight` of shape `expected_weight` ([out, ...]). Every tensor is checked
// as checked_tensor does; a running variance that makes var + eps not positive is refused.
[[nodiscard]] folded_convolution fold_batch_norm(const checkpoint& weights,
                                                 std::string_view convolution_weight, std::string_view norm,
                                                 const dims& expected_weight,
                                                 double eps = batch_norm_default_eps);

}  // namespace anvil::models

#if ANVIL_DEFINITIONS
#include "anvil/models/vision/batch_norm_folding-inl.hpp"
#endif
