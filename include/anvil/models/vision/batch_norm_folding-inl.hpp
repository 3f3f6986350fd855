// anvil: batch_norm_folding's definitions (see batch_norm_folding.hpp; compilation.hpp says when this file is
// compiled).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/io/checkpoint.hpp"
#include "anvil/models/common/weights.hpp"
#include "anvil/models/vision/batch_norm_folding.hpp"

namespace anvil::detail {

ANVIL_INLINE std::vector<double> values_f64(const tensor_view& view) {
    std::vector<double> out(static_cast<std::size_t>(view.element_count()));
    if (view.type() == dtype::f64) {
        if (!out.empty()) std::memcpy(out.data(), view.bytes().data(), out.size() * sizeof(double));
        return out;
    }
    const std::vector<float> narrow = view.to_f32();
    const float* in = narrow.data();
    double* wide = out.data();
    for (std::size_t i = 0; i < out.size(); ++i)
        wide[i] = double{in[i]};
    return out;
}

}  // namespace anvil::detail

namespace anvil::models {

ANVIL_INLINE folded_convolution fold_batch_norm(const checkpoint& weights,
                                                std::string_view convolution_weight, std::string_view norm,
                                                const dims& expected_weight, double eps) {
    const dims channels{expected_weight[0]};
    const std::string prefix(norm);
    const auto kernel =
        anvil::detail::values_f64(checked_tensor(weights, convolution_weight, expected_weight));
    const auto gamma = anvil::detail::values_f64(checked_tensor(weights, prefix + ".weight", channels));
    const auto beta = anvil::detail::values_f64(checked_tensor(weights, prefix + ".bias", channels));
    const auto mean = anvil::detail::values_f64(checked_tensor(weights, prefix + ".running_mean", channels));
    const tensor_view& variance_view = checked_tensor(weights, prefix + ".running_var", channels);
    const auto variance = anvil::detail::values_f64(variance_view);

    folded_convolution out{host_tensor(dtype::f32, expected_weight), host_tensor(dtype::f32, channels)};
    float* const weight = out.weight.values<float>().data();
    float* const bias = out.bias.values<float>().data();
    const double* const source = kernel.data();
    const std::size_t outputs = gamma.size();
    const std::size_t per_output = outputs == 0 ? 0 : kernel.size() / outputs;
    for (std::size_t o = 0; o < outputs; ++o) {
        const double denominator = variance[o] + eps;
        if (!(denominator > 0.0) || !std::isfinite(denominator)) {
            throw format_error(anvil::detail::message(variance_view.source_name(), ": tensor '",
                                                      variance_view.name(), "': channel ", o,
                                                      " has running variance ", variance[o],
                                                      ", which with eps ", eps, " is not a positive number"));
        }
        const double scale = gamma[o] / std::sqrt(denominator);
        for (std::size_t i = 0; i < per_output; ++i)
            weight[o * per_output + i] = static_cast<float>(source[o * per_output + i] * scale);
        bias[o] = static_cast<float>(beta[o] - mean[o] * scale);
    }
    return out;
}

}  // namespace anvil::models
