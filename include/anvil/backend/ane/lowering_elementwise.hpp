// anvil: lowering of elementwise nodes (unary, binary, comparisons and logic, where, fused chains) to MIL,
// with the decompositions the ANE needs (RUNTIME.md §6: gelu and rsqrt are rejected; silu is safest as
// x * sigmoid(x)); booleans are held as fp16 1 and 0, as the CPU holds them in f32. A node runs
// channels-first when its non-constant operands are the result's full shape and one of them is already
// channels-first, so chains after a 1x1 conv stay in [1, C, 1, S] without transposes.
#pragma once

#include <cmath>
#include <cstddef>
#include <numbers>
#include <span>
#include <string>
#include <vector>

#include "anvil/backend/ane/lowering_context.hpp"

namespace anvil::detail::ane {

// The epsilon working code gives log, rsqrt and inverse (ironmill: fp16(0x1.0cp-17)); none passes 0, and the
// ops' defaults (1e-45 for log) round to 0 in fp16 (RUNTIME.md §0 #10).
inline constexpr float transcendental_epsilon = 0x1.0cp-17f;

// e^x: the exp op, or pow(e, x) where the chip refuses exp (RUNTIME.md §0 #9).
inline mil_ref exponential(segment_lowering& L, mil_ref x, const std::string& name) {
    if (L.options().variant(lowering_feature::exp) == lowering_variant::decomposed) {
        return L.mil().op("pow", name, L.mil().shape(x),
                          {{"x", {L.scalar(static_cast<float>(std::numbers::e), name + "_e")}}, {"y", {x}}});
    }
    return L.unary("exp", x, name);
}

// select(compare(x, y), value, otherwise): `value` where the MIL comparison `compare` holds.
inline mil_ref select_where(segment_lowering& L, std::string_view compare, mil_ref x, mil_ref y, float value,
                            mil_ref otherwise, const std::string& name) {
    mil_writer& mil = L.mil();
    const mil_shape shape = broadcast_mil(mil.shape(x), mil.shape(y));
    const mil_ref condition = mil.op(compare, name + "_cond", shape, {{"x", {x}}, {"y", {y}}}, "bool");
    return mil.op("select", name, broadcast_mil(shape, mil.shape(otherwise)),
                  {{"a", {L.scalar(value, name + "_true")}}, {"b", {otherwise}}, {"cond", {condition}}});
}

// The MIL comparison `compare` as a boolean held in fp16: 1 where it holds, else 0 (MIL's bool tensors
// cannot leave a program through an fp16 surface, and the ANE computes in fp16).
inline mil_ref compare_in_fp16(segment_lowering& L, std::string_view compare, mil_ref x, mil_ref y,
                               const std::string& name) {
    return select_where(L, compare, x, y, 1.0f, L.scalar(0.0f, name + "_false"), name);
}

// `kind` applied to MIL operands already in one layout; the final op is named `name`.
inline mil_ref apply_elementwise(segment_lowering& L, op kind, std::span<const mil_ref> x, float alpha,
                                 float beta, const std::string& name) {
    mil_writer& mil = L.mil();
    const auto scalar = [&](float value, const char* suffix) { return L.scalar(value, name + suffix); };
    switch (kind) {
        case op::relu:
            return L.unary("relu", x[0], name);
        case op::sigmoid:
            return L.unary("sigmoid", x[0], name);
        case op::tanh:
            return L.unary("tanh", x[0], name);
        case op::exp:
            return exponential(L, x[0], name);
        case op::sqrt:
            if (L.options().variant(lowering_feature::sqrt) == lowering_variant::decomposed)
                return L.binary("pow", x[0], scalar(0.5f, "_exponent"), name);
            return L.unary("sqrt", x[0], name);
        case op::abs:
            return L.unary("abs", x[0], name);
        case op::log:
            return mil.op("log", name, mil.shape(x[0]),
                          {{"epsilon", {scalar(transcendental_epsilon, "_epsilon")}}, {"x", {x[0]}}});
        case op::gelu: {
            if (L.options().native(lowering_feature::gelu)) {
                return mil.op("gelu", name, mil.shape(x[0]),
                              {{"mode", {mil.const_string(name + "_mode", "EXACT")}}, {"x", {x[0]}}});
            }
            const mil_ref scaled =
                L.binary("mul", x[0], scalar(static_cast<float>(std::numbers::sqrt2 / 2.0), "_rsqrt2"),
                         name + "_scaled");
            const mil_ref erf = L.unary("erf", scaled, name + "_erf");
            const mil_ref one_plus = L.binary("add", erf, scalar(1.0f, "_one"), name + "_erf1");
            const mil_ref half_x = L.binary("mul", x[0], scalar(0.5f, "_half"), name + "_halfx");
            return L.binary("mul", half_x, one_plus, name);
        }
        case op::gelu_tanh: {
            const mil_ref square = L.binary("mul", x[0], x[0], name + "_x2");
            const mil_ref cube = L.binary("mul", square, x[0], name + "_x3");
            const mil_ref term = L.binary("mul", cube, scalar(0.044715f, "_c"), name + "_cx3");
            const mil_ref inner = L.binary("add", x[0], term, name + "_inner");
            const mil_ref scaled =
                L.binary("mul", inner, scalar(static_cast<float>(std::sqrt(2.0 / std::numbers::pi)), "_k"),
                         name + "_scaled");
            const mil_ref t = L.unary("tanh", scaled, name + "_tanh");
            const mil_ref one_plus = L.binary("add", t, scalar(1.0f, "_one"), name + "_tanh1");
            const mil_ref half_x = L.binary("mul", x[0], scalar(0.5f, "_half"), name + "_halfx");
            return L.binary("mul", half_x, one_plus, name);
        }
        case op::quick_gelu: {
            const mil_ref scaled = L.binary("mul", x[0], scalar(1.702f, "_alpha"), name + "_scaled");
            const mil_ref gate = L.unary("sigmoid", scaled, name + "_sigmoid");
            return L.binary("mul", x[0], gate, name);
        }
        case op::silu:
            return L.binary("mul", x[0], L.unary("sigmoid", x[0], name + "_sigmoid"), name);
        case op::rsqrt:
            if (L.options().native(lowering_feature::rsqrt)) {
                return mil.op("rsqrt", name, mil.shape(x[0]),
                              {{"epsilon", {scalar(transcendental_epsilon, "_epsilon")}}, {"x", {x[0]}}});
            }
            return L.binary("pow", x[0], scalar(-0.5f, "_exponent"), name);
        case op::neg:
            return L.binary("mul", x[0], scalar(-1.0f, "_minus1"), name);
        case op::erf:
            return L.unary("erf", x[0], name);
        case op::sign: {
            // NaN and zeros pass through both selects as themselves (a negative zero stays negative).
            const mil_ref zero = scalar(0.0f, "_zero");
            const mil_ref negative = select_where(L, "less", x[0], zero, -1.0f, x[0], name + "_negative");
            return select_where(L, "greater", x[0], zero, 1.0f, negative, name);
        }
        case op::equal:
            return compare_in_fp16(L, "equal", x[0], x[1], name);
        case op::less:
            return compare_in_fp16(L, "less", x[0], x[1], name);
        case op::less_equal:
            return compare_in_fp16(L, "less_equal", x[0], x[1], name);
        case op::greater:
            return compare_in_fp16(L, "greater", x[0], x[1], name);
        case op::greater_equal:
            return compare_in_fp16(L, "greater_equal", x[0], x[1], name);
        // Booleans are 1 and 0 wherever anvil makes one (comparisons, these ops, bool inputs and constants),
        // so plain arithmetic on them is exact.
        case op::logical_and:
            return L.binary("mul", x[0], x[1], name);
        case op::logical_or:
            return L.binary("maximum", x[0], x[1], name);
        case op::logical_xor:
            return compare_in_fp16(L, "not_equal", x[0], x[1], name);
        case op::logical_not:
            return L.binary("sub", scalar(1.0f, "_one"), x[0], name);
        case op::clamp: {
            const half low = to_fp16(alpha), high = to_fp16(beta);
            if (static_cast<float>(low) < static_cast<float>(high)) {
                return mil.op(
                    "clip", name, mil.shape(x[0]),
                    {{"alpha", {scalar(low, "_alpha")}}, {"beta", {scalar(high, "_beta")}}, {"x", {x[0]}}});
            }
            // clip needs alpha < beta (iOS17); min >= max clamps everything to max, as torch.clamp does.
            const mil_ref raised = L.binary("maximum", x[0], scalar(low, "_alpha"), name + "_max");
            return L.binary("minimum", raised, scalar(high, "_beta"), name);
        }
        case op::cast:
            return x[0];
        case op::add:
            return L.binary("add", x[0], x[1], name);
        case op::sub:
            return L.binary("sub", x[0], x[1], name);
        case op::mul:
            return L.binary("mul", x[0], x[1], name);
        case op::div:
            return L.binary("real_div", x[0], x[1], name);
        case op::pow:
            return L.binary("pow", x[0], x[1], name);
        case op::maximum:
            return L.binary("maximum", x[0], x[1], name);
        case op::minimum:
            return L.binary("minimum", x[0], x[1], name);
        case op::where: {
            const mil_ref condition = mil.op("not_equal", name + "_cond", mil.shape(x[0]),
                                             {{"x", {x[0]}}, {"y", {scalar(0.0f, "_zero")}}}, "bool");
            const mil_shape shape =
                broadcast_mil(broadcast_mil(mil.shape(x[0]), mil.shape(x[1])), mil.shape(x[2]));
            return mil.op("select", name, shape, {{"a", {x[1]}}, {"b", {x[2]}}, {"cond", {condition}}});
        }
        default:
            throw error(message("ane lowering: ", op_name(kind), " is not an elementwise op"));
    }
}

// The layout an elementwise node over `operands` with result shape `result` runs in.
inline value_layout elementwise_layout(segment_lowering& L, std::span<const value_id> operands,
                                       const dims& result) {
    bool any_channels_first = false;
    for (const value_id v : operands) {
        if (L.is_constant(v)) continue;
        if (!(L.ir_shape(v) == result)) return value_layout::logical;
        any_channels_first = any_channels_first || L.has_channels_first(v);
    }
    return any_channels_first && L.channels_first_fits(result) ? value_layout::channels_first
                                                               : value_layout::logical;
}

// The operands of an elementwise node in `layout`: constants as scalars, [1, C, 1, 1] or full-shape weights
// (a mask's with headroom, segment_lowering::holds_mask).
inline std::vector<mil_ref> elementwise_operands(segment_lowering& L, std::span<const value_id> operands,
                                                 const dims& result, value_layout layout,
                                                 const std::string& name) {
    std::vector<mil_ref> refs;
    bool all_constant = true;
    for (const value_id v : operands)
        all_constant = all_constant && L.is_constant(v);
    for (std::size_t i = 0; i < operands.size(); ++i) {
        const value_id v = operands[i];
        if (!L.is_constant(v)) {
            refs.push_back(L.form(v, layout));
            continue;
        }
        const bool mask = L.holds_mask(v);
        if (all_constant && i == 0) {
            // Something must carry the full shape.
            const mil_shape full = segment_lowering::logical_shape(result);
            const dims& shape = L.ir_shape(v);
            refs.push_back(L.fp16_const(
                message(name, "_in", i), full,
                broadcast_values(L.constant_values(v), mil_shape(shape.begin(), shape.end()), full), mask));
        } else {
            refs.push_back(L.broadcast_constant(L.constant_values(v), L.ir_shape(v), result, layout,
                                                message(name, "_in", i), mask));
        }
    }
    return refs;
}

inline void lower_elementwise(segment_lowering& L, value_id id) {
    const node& n = L.at(id);
    const dims& result = n.result.shape;
    const value_layout layout = elementwise_layout(L, n.inputs, result);
    const std::string name = L.base(id);
    std::vector<mil_ref> values = elementwise_operands(L, n.inputs, result, layout, name);
    mil_ref out;
    if (n.kind == op::fused_elementwise) {
        for (std::size_t s = 0; s < n.attrs.steps.size(); ++s) {
            const fused_step& step = n.attrs.steps[s];
            std::vector<mil_ref> args;
            for (std::size_t i = 0; i < elementwise_arity(step.kind); ++i)
                args.push_back(values.at(step.operands[i]));
            const bool last = s + 1 == n.attrs.steps.size();
            values.push_back(apply_elementwise(L, step.kind, args, step.alpha, step.beta,
                                               last ? name : message(name, "_step", s)));
        }
        out = values.back();
    } else {
        out = apply_elementwise(L, n.kind, values, n.attrs.min, n.attrs.max, name);
    }
    L.set_form(id, layout, out);
}

}  // namespace anvil::detail::ane
