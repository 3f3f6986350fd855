// The ANE backend tests' small block (linear, gelu, layer_norm, softmax), shared by both routes' tests.
#pragma once

#include <anvil/anvil.hpp>

#include <cstddef>
#include <vector>

namespace anvil_test {

// A small block that runs wholly on the ANE: linear, gelu, layer_norm, softmax.
struct ane_block {
    anvil::graph g;
    anvil::value out;
    std::vector<anvil::named_tensor> inputs;

    explicit ane_block(float shift = 0.0f) {
        std::vector<float> w(32 * 48), b(32), x(5 * 48), gamma(32, 1.0f), beta(32, 0.0f);
        for (std::size_t i = 0; i < w.size(); ++i)
            w[i] = static_cast<float>(static_cast<int>(i * 13 % 29) - 14) * 0.01f + shift;
        for (std::size_t i = 0; i < b.size(); ++i)
            b[i] = static_cast<float>(i % 5) * 0.1f;
        for (std::size_t i = 0; i < x.size(); ++i)
            x[i] = static_cast<float>(static_cast<int>(i * 7 % 19) - 9) * 0.1f;
        const auto input = g.input("x", anvil::dtype::f32, anvil::dims{5, 48});
        auto h =
            g.apply(anvil::op::linear, {input, g.constant(anvil::host_tensor::from(w, anvil::dims{32, 48})),
                                        g.constant(anvil::host_tensor::from(b, anvil::dims{32}))});
        h = g.apply(anvil::op::gelu, {h});
        anvil::attributes norm;
        norm.epsilon = 1e-5f;
        h = g.apply(anvil::op::layer_norm,
                    {h, g.constant(anvil::host_tensor::from(gamma, anvil::dims{32})),
                     g.constant(anvil::host_tensor::from(beta, anvil::dims{32}))},
                    norm);
        anvil::attributes soft;
        soft.axis = 1;
        out = g.apply(anvil::op::softmax, {h}, soft);
        inputs.push_back({"x", anvil::host_tensor::from(x, anvil::dims{5, 48})});
    }
};

}  // namespace anvil_test
