// anvil: ONNX's recurrent layers (RNN, GRU, LSTM), unrolled over their static sequence length.
// Member definitions of onnx_detail::importer (importer-inl.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/models/import/onnx/importer-inl.hpp"

namespace anvil::models::onnx_detail {

// RNN, GRU and LSTM, unrolled over the sequence (its length is static here): the input's projection for
// every step at once, then per step the hidden state's projection and the gates, as onnx/Operators.md
// writes them (gate orders: GRU z, r, h; LSTM i, o, f, c). Both directions, both layouts, peepholes,
// GRU's linear_before_reset, LSTM's input_forget, clip, and the Sigmoid, Tanh and Relu activations.
inline std::vector<value> importer::recurrent(const onnx_node& n) {
    const std::string& type = n.op_type;
    const std::int64_t gate_count = type == "LSTM" ? 4 : type == "GRU" ? 3 : 1;
    const bool batch_first = int_attribute(n, "layout", 0) != 0;
    value x = input(n, 0);
    if (x.rank() != 3) throw shape_error(message(where(n), ": X ", x.shape(), " is not rank 3"));
    if (batch_first) x = permute(x, {1, 0, 2});
    const std::int64_t steps = x.shape()[0], batch = x.shape()[1], features = x.shape()[2];
    const value w = input(n, 1), r = input(n, 2);
    const std::string direction = string_attribute(n, "direction", "forward");
    const std::int64_t directions = direction == "bidirectional" ? 2 : 1;
    if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
        throw format_error(message(where(n), ": direction '", direction, "'"));
    const std::int64_t hidden = w.shape()[1] / gate_count;
    if (w.rank() != 3 || w.shape()[0] != directions || w.shape()[2] != features || r.rank() != 3 ||
        r.shape()[1] != gate_count * hidden || r.shape()[2] != hidden)
        throw shape_error(message(where(n), ": W ", w.shape(), " and R ", r.shape(), " do not fit X ",
                                  x.shape(), " and ", directions, " directions"));
    if (const onnx_attribute* size = n.find("hidden_size"); size != nullptr && size->i != hidden)
        throw shape_error(message(where(n), ": hidden_size ", size->i, " but W holds ", hidden));
    if (has_input(n, 4)) {
        for (const std::int64_t length : required_ints(n, 4, "sequence_lens"))
            if (length != steps) unsupported(n, "sequences of different lengths (sequence_lens)");
    }
    const bool linear_before_reset = int_attribute(n, "linear_before_reset", 0) != 0;
    const bool input_forget = int_attribute(n, "input_forget", 0) != 0;
    const std::optional<float> clip =
        n.find("clip") != nullptr ? std::optional<float>(float_attribute(n, "clip", 0.0f)) : std::nullopt;
    // The activations, per direction: RNN f; GRU f, g; LSTM f, g, h.
    const std::size_t per_direction = type == "LSTM" ? 3 : type == "GRU" ? 2 : 1;
    std::vector<std::string> activations;
    if (const onnx_attribute* given = n.find("activations")) activations = given->strings;
    if (activations.empty()) {
        const std::vector<std::string> defaults = type == "RNN" ? std::vector<std::string>{"Tanh"}
                                                  : type == "GRU"
                                                      ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                      : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
        for (std::int64_t d = 0; d < directions; ++d)
            activations.insert(activations.end(), defaults.begin(), defaults.end());
    }
    if (activations.size() != per_direction * static_cast<std::size_t>(directions))
        throw format_error(
            message(where(n), ": ", activations.size(), " activations for ", directions, " directions"));
    if (n.find("activation_alpha") != nullptr || n.find("activation_beta") != nullptr)
        unsupported(n, "activation_alpha and activation_beta");
    const auto activate = [&](const std::string& name, value v) {
        if (clip) {
            attributes c;
            c.min = -*clip;
            c.max = *clip;
            v = apply(op::clamp, {v}, c);
        }
        if (name == "Sigmoid") return apply(op::sigmoid, {v});
        if (name == "Tanh") return apply(op::tanh, {v});
        if (name == "Relu") return apply(op::relu, {v});
        unsupported(n, message("the activation '", name, "'"));
    };
    const auto of_direction = [&](const value& t, std::int64_t d, std::vector<std::int64_t> shape) {
        return reshape(slice(t, 0, d, d + 1), std::move(shape));
    };
    const auto gate = [&](const value& t, std::int64_t g) {
        return slice(t, 1, g * hidden, (g + 1) * hidden);
    };
    const auto initial = [&](std::size_t index, std::int64_t d) -> value {
        if (!has_input(n, index)) return broadcast_to(scalar_like(0.0, x), {batch, hidden});
        value h0 = input(n, index);
        if (batch_first) h0 = permute(h0, {1, 0, 2});
        return of_direction(h0, d, {batch, hidden});
    };
    std::vector<value> outputs_y, last_h, last_c;
    for (std::int64_t d = 0; d < directions; ++d) {
        const bool backwards = direction == "reverse" || d == 1;
        const value wd = of_direction(w, d, {gate_count * hidden, features});
        const value rd = of_direction(r, d, {gate_count * hidden, hidden});
        std::optional<value> wb, rb;
        if (has_input(n, 3)) {
            const value bd = of_direction(input(n, 3), d, {2 * gate_count * hidden});
            wb = slice(bd, 0, 0, gate_count * hidden);
            rb = slice(bd, 0, gate_count * hidden, 2 * gate_count * hidden);
        }
        std::optional<value> peephole;
        if (type == "LSTM" && has_input(n, 7)) peephole = of_direction(input(n, 7), d, {3 * hidden});
        // Every step's input projection (with both biases, but GRU's h gate keeps its R bias apart when
        // it is applied before the reset).
        value projected = apply(op::linear, {reshape(x, {steps * batch, features}), wd});
        if (wb) projected = apply(op::add, {projected, *wb});
        projected = reshape(projected, {steps, batch, gate_count * hidden});
        const std::string* f = &activations[static_cast<std::size_t>(d) * per_direction];
        value h = initial(5, d);
        value c = type == "LSTM" ? initial(6, d) : value{};
        std::vector<value> ys(static_cast<std::size_t>(steps));
        for (std::int64_t i = 0; i < steps; ++i) {
            const std::int64_t t = backwards ? steps - 1 - i : i;
            const value xt = reshape(slice(projected, 0, t, t + 1), {batch, gate_count * hidden});
            value hr = apply(op::linear, {h, rd});
            if (rb) hr = apply(op::add, {hr, *rb});
            if (type == "RNN") {
                h = activate(f[0], apply(op::add, {xt, hr}));
            } else if (type == "GRU") {
                const value z = activate(f[0], apply(op::add, {gate(xt, 0), gate(hr, 0)}));
                const value reset = activate(f[0], apply(op::add, {gate(xt, 1), gate(hr, 1)}));
                value candidate;
                if (linear_before_reset) {
                    candidate = apply(op::add, {gate(xt, 2), apply(op::mul, {reset, gate(hr, 2)})});
                } else {
                    const value rdh = slice(rd, 0, 2 * hidden, 3 * hidden);
                    value recurrent_part = apply(op::linear, {apply(op::mul, {reset, h}), rdh});
                    if (rb)
                        recurrent_part =
                            apply(op::add, {recurrent_part, slice(*rb, 0, 2 * hidden, 3 * hidden)});
                    candidate = apply(op::add, {gate(xt, 2), recurrent_part});
                }
                const value ht = activate(f[1], candidate);
                const value keep = apply(op::sub, {scalar_like(1.0, z), z});
                h = apply(op::add, {apply(op::mul, {keep, ht}), apply(op::mul, {z, h})});
            } else {
                value pre_i = apply(op::add, {gate(xt, 0), gate(hr, 0)});
                value pre_o = apply(op::add, {gate(xt, 1), gate(hr, 1)});
                value pre_f = apply(op::add, {gate(xt, 2), gate(hr, 2)});
                const value pre_c = apply(op::add, {gate(xt, 3), gate(hr, 3)});
                if (peephole) {
                    pre_i = apply(op::add, {pre_i, apply(op::mul, {slice(*peephole, 0, 0, hidden), c})});
                    pre_f = apply(op::add,
                                  {pre_f, apply(op::mul, {slice(*peephole, 0, 2 * hidden, 3 * hidden), c})});
                }
                const value it = activate(f[0], pre_i);
                const value ft =
                    input_forget ? apply(op::sub, {scalar_like(1.0, it), it}) : activate(f[0], pre_f);
                const value ct = activate(f[1], pre_c);
                c = apply(op::add, {apply(op::mul, {ft, c}), apply(op::mul, {it, ct})});
                if (peephole)
                    pre_o =
                        apply(op::add, {pre_o, apply(op::mul, {slice(*peephole, 0, hidden, 2 * hidden), c})});
                h = apply(op::mul, {activate(f[0], pre_o), activate(f[2], c)});
            }
            ys[static_cast<std::size_t>(t)] = reshape(h, {1, 1, batch, hidden});
        }
        attributes along_time;
        along_time.axis = 0;
        outputs_y.push_back(steps == 1 ? ys[0] : g_.apply(op::concat, ys, along_time));
        last_h.push_back(reshape(h, {1, batch, hidden}));
        if (type == "LSTM") last_c.push_back(reshape(c, {1, batch, hidden}));
    }
    const auto join = [&](const std::vector<value>& parts, std::int64_t axis) {
        if (parts.size() == 1) return parts[0];
        attributes a;
        a.axis = axis;
        return g_.apply(op::concat, parts, a);
    };
    value y = join(outputs_y, 1), y_h = join(last_h, 0);
    if (batch_first) {
        y = permute(y, {2, 0, 1, 3});
        y_h = permute(y_h, {1, 0, 2});
    }
    std::vector<value> out{y, y_h};
    if (type == "LSTM") out.push_back(batch_first ? permute(join(last_c, 0), {1, 0, 2}) : join(last_c, 0));
    return out;
}

}  // namespace anvil::models::onnx_detail
