// anvil: fp16_rescale's definitions (see fp16_rescale.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/backend/compile.hpp"
#include "anvil/core/bfloat16.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/ggml_types.hpp"
#include "anvil/core/half.hpp"
#include "anvil/expr/expr.hpp"
#include "anvil/models/llm/fp16_rescale.hpp"

namespace anvil::models::recipe_detail {

// fp16's largest finite value: the most a consumer's weight may reach after its 2^s.
inline constexpr double fp16_largest = 65504.0;

ANVIL_INLINE host_tensor scaled_by_power_of_two(std::span<const float> values, const dims& shape,
                                                dtype stored, int exponent, std::string_view name) {
    std::vector<float> scaled(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) {
        const float x = values[i];
        const float y = std::ldexp(x, exponent);
        // Inexact only where a value overflows float32 or falls into its subnormals.
        if (!std::isfinite(y) || std::ldexp(y, -exponent) != x) {
            throw error(anvil::detail::message("fp16 rescale: '", name, "' times 2^", exponent,
                                               " is not exact in float32 (element ", i, ": ", x, ")"));
        }
        scaled[i] = y;
    }
    const auto narrowed = [&]<class Narrow>() -> std::optional<host_tensor> {
        std::vector<Narrow> narrow(scaled.size());
        for (std::size_t i = 0; i < scaled.size(); ++i) {
            narrow[i] = Narrow(scaled[i]);
            if (static_cast<float>(narrow[i]) != scaled[i]) return std::nullopt;
        }
        return host_tensor::from(narrow, shape);
    };
    std::optional<host_tensor> kept;
    if (stored == dtype::f16) kept = narrowed.template operator()<half>();
    if (stored == dtype::bf16) kept = narrowed.template operator()<bfloat16>();
    return kept ? std::move(*kept) : host_tensor::from(scaled, shape);
}

// One pair of one layer in a calibration graph: its two linear nodes.
struct calibration_site {
    std::int64_t layer = 0;
    projection_pair pair = projection_pair::attention;
    value_id producer = 0, consumer = 0;
    std::string not_linear;  // why the pair cannot be rescaled, or empty
};

struct calibration_graph {
    graph g;
    value logits;
    std::vector<calibration_site> sites;
};

// The linear node of `g` whose weight operand is `weight`.
ANVIL_INLINE value_id linear_reading(const graph& g, const tensor<float>& weight) {
    const value_id w = weight.value().id();
    for (value_id id = 0; id < g.size(); ++id) {
        const node& n = g[id];
        if (n.kind == op::linear && n.inputs.size() >= 2 && n.inputs[1] == w) return id;
    }
    throw error(anvil::detail::message("fp16 rescale: no linear node reads weight value %", w));
}

// The decoder's step for one sequence of `tokens` tokens (its one cache slot hidden by the mask), and where
// each pair's projections sit in it.
ANVIL_INLINE calibration_graph build_calibration_graph(const decoder_config& c,
                                                       const decoder_weight_source& source,
                                                       std::int64_t tokens) {
    calibration_graph out;
    weight_loader loader(out.g, source.file());
    const decoder_weights w = load_decoder_weights(loader, source, c);
    out.logits = decoder_step(out.g, w, c, {1, tokens, 1, false, 0}).front();
    for (std::size_t i = 0; i < w.layers.size(); ++i) {
        const decoder_layer& layer = w.layers[i];
        const auto layer_index = static_cast<std::int64_t>(i);
        out.sites.push_back({layer_index,
                             projection_pair::attention,
                             linear_reading(out.g, layer.attention.value.weight),
                             linear_reading(out.g, layer.attention.output.weight),
                             {}});
        calibration_site mlp{layer_index,
                             projection_pair::mlp,
                             linear_reading(out.g, layer.mlp.up.weight),
                             linear_reading(out.g, layer.mlp.down.weight),
                             {}};
        // relu is positively homogeneous; gelu and its kin are not, so no power of two passes through them.
        if (!layer.mlp.gate && layer.mlp.act != activation::relu) {
            mlp.not_linear =
                "not rescalable: the MLP's activation (not relu) lies between the two, and act(x / 2^s) is "
                "not "
                "act(x) / 2^s";
        }
        out.sites.push_back(std::move(mlp));
    }
    return out;
}

ANVIL_INLINE compile_options calibration_options(const compile_options& cpu, const decoder_config& c,
                                                 bool ane_numerics) {
    compile_options o;
    o.target = device::cpu;
    o.kernels = cpu.kernels;
    o.threads = cpu.threads;
    o.ane_numerics = ane_numerics;
    for (std::int64_t i = 0; i < c.layers; ++i) {  // one empty slot each, which the mask hides
        o.resident_inputs.push_back(cache_key_name(i));
        o.resident_inputs.push_back(cache_value_name(i));
    }
    return o;
}

// The stored constant behind a weight value (through its cast or dequantisation to f32), and the f32 values
// the graph computes with.
struct stored_weight {
    std::string name;
    dtype type = dtype::f32;  // what a scaled copy may keep (f32 for quantised blocks)
    dims shape;
    std::vector<float> values;
};

ANVIL_INLINE stored_weight read_stored_weight(const graph& g, value_id id) {
    const node& top = g[id];
    const bool converted = top.kind == op::cast || top.kind == op::dequantize_ggml;
    const node& constant = converted ? g[top.inputs.at(0)] : top;
    if (constant.kind != op::constant) {
        throw error(anvil::detail::message("fp16 rescale: weight value %", id, " is a ", op_name(top.kind),
                                           ", not a stored tensor"));
    }
    stored_weight w;
    w.name = constant.name;
    w.shape = top.result.shape;
    if (top.kind == op::dequantize_ggml) {
        w.values.resize(static_cast<std::size_t>(w.shape.element_count()));
        const host_tensor& blocks = constant.data;
        dequantize_ggml(
            static_cast<ggml_type>(top.attrs.ggml_type),
            std::span<const std::byte>(static_cast<const std::byte*>(blocks.raw()), blocks.byte_size()),
            w.values);
    } else {
        w.type = constant.data.type();
        w.values = constant.data.to_f32();
    }
    return w;
}

ANVIL_INLINE bool finite_values(const host_tensor& t) {
    for (const float x : t.to_f32())
        if (!std::isfinite(x)) return false;
    return true;
}

}  // namespace anvil::models::recipe_detail

namespace anvil::models {

ANVIL_INLINE std::string_view projection_pair_name(projection_pair pair) noexcept {
    return pair == projection_pair::attention ? "attention" : "mlp";
}

ANVIL_INLINE int fp16_rescale_shift(double peak, double limit) {
    if (!(limit > 0.0 && limit <= recipe_detail::fp16_largest)) {
        throw error(anvil::detail::message("fp16 rescale: the limit must be in (0, 65504], got ", limit));
    }
    if (!std::isfinite(peak))
        throw error(anvil::detail::message("fp16 rescale: the peak ", peak, " is not finite"));
    int shift = 0;
    while (std::ldexp(std::fabs(peak), -shift) > limit)
        ++shift;
    return shift;
}

ANVIL_INLINE std::size_t fp16_rescale_report::rescaled_pairs() const noexcept {
    std::size_t count = 0;
    for (const fp16_pair_scale& p : pairs)
        count += p.shift > 0 ? 1 : 0;
    return count;
}

ANVIL_INLINE std::string fp16_rescale_report::to_string() const {
    std::ostringstream out;
    out << "fp16 rescale: " << calibration_tokens << " calibration tokens, limit " << limit << ", "
        << rescaled_pairs() << " of " << pairs.size() << " pairs rescaled\n";
    for (const fp16_pair_scale& p : pairs) {
        out << "layer " << p.layer << ' ' << projection_pair_name(p.pair) << ' ' << p.producer << " -> "
            << p.consumer << ": peak " << p.peak << ", ";
        if (p.shift > 0) {
            out << "2^-" << p.shift << " / 2^" << p.shift;
        } else {
            out << "unchanged";
        }
        out << " (output peak " << p.output_peak << ")";
        if (!p.note.empty()) out << "; " << p.note;
        out << '\n';
    }
    const auto overflow = [&](std::string_view when, const std::optional<numerics_report>& report) {
        if (!report) return;
        out << "ane_numerics " << when << ": ";
        if (report->clean()) {
            out << "no op leaves fp16\n";
        } else {
            const std::size_t n = report->overflows.size();
            out << n << (n == 1 ? " op leaves" : " ops leave") << " fp16\n" << report->to_string();
        }
    };
    overflow("before", before);
    overflow("after", after);
    return out.str();
}

ANVIL_INLINE fp16_rescaled calibrate_fp16_rescale(const decoder_config& c,
                                                  const std::shared_ptr<const decoder_weight_source>& weights,
                                                  std::span<const std::int32_t> ids,
                                                  const fp16_rescale_options& options,
                                                  const compile_options& cpu) {
    if (ids.empty()) throw error("fp16 rescale: no calibration token ids (give ids, or a text to encode)");
    for (const std::int32_t id : ids) {
        if (id < 0 || id >= c.vocab_size) {
            throw error(anvil::detail::message("fp16 rescale: calibration token id ", id,
                                               " is outside the vocabulary (", c.vocab_size, " ids)"));
        }
    }
    const auto tokens = static_cast<std::int64_t>(ids.size());
    if (c.learned_positions() && tokens > c.max_position_embeddings) {
        throw error(anvil::detail::message("fp16 rescale: ", tokens, " calibration tokens, more than the ",
                                           c.max_position_embeddings, " positions ", c.model_type,
                                           " has embeddings for"));
    }
    static_cast<void>(fp16_rescale_shift(0.0, options.limit));  // checks the limit before any work

    std::vector<std::int64_t> positions(ids.size());
    std::iota(positions.begin(), positions.end(), std::int64_t{0});
    const std::vector<std::int64_t> hidden_slot{-1};
    const std::vector<named_tensor> inputs =
        decoder_step_inputs(c, ids, positions, hidden_slot, 1, tokens, 1, std::span<const std::int64_t>());

    // fp32: every pair's peaks, reduced in the graph (max |x| of the producer's output, the consumer's input
    // and output), so no activation is copied out.
    recipe_detail::calibration_graph measured = recipe_detail::build_calibration_graph(c, *weights, tokens);
    const graph& g = measured.g;
    std::vector<value> outputs{measured.logits};
    const auto peak_of = [&](value_id id) {
        return anvil::max(anvil::abs(tensor<float>(value(g.body(), id))), std::vector<std::int64_t>{}, true)
            .value();
    };
    for (const recipe_detail::calibration_site& site : measured.sites) {
        outputs.push_back(peak_of(site.producer));
        outputs.push_back(peak_of(g[site.consumer].inputs.at(0)));
        outputs.push_back(peak_of(site.consumer));
    }
    program fp32 =
        compile(std::span<const value>(outputs), recipe_detail::calibration_options(cpu, c, false));
    const std::vector<host_tensor> results = fp32.run(inputs);
    if (!recipe_detail::finite_values(results.front())) {
        throw error(
            "fp16 rescale: the model's fp32 logits on the calibration ids are not finite, which no rescaling "
            "for fp16 can mend");
    }

    fp16_rescaled rescaled;
    fp16_rescale_report& report = rescaled.report;
    report.calibration_tokens = tokens;
    report.limit = options.limit;
    std::map<std::string, host_tensor> replacements;
    const auto fold = [&](value_id weight, int exponent) {
        recipe_detail::stored_weight w = recipe_detail::read_stored_weight(g, weight);
        std::string key = w.name;
        if (key.rfind(weights->prefix(), 0) == 0) key.erase(0, weights->prefix().size());
        replacements.insert_or_assign(
            key, recipe_detail::scaled_by_power_of_two(w.values, w.shape, w.type, exponent, w.name));
    };
    const auto without_suffix = [&](value_id linear) {
        std::string name = recipe_detail::read_stored_weight(g, g[linear].inputs.at(1)).name;
        if (name.ends_with(".weight")) name.resize(name.size() - 7);
        return name;
    };
    for (std::size_t k = 0; k < measured.sites.size(); ++k) {
        const recipe_detail::calibration_site& site = measured.sites[k];
        fp16_pair_scale p;
        p.layer = site.layer;
        p.pair = site.pair;
        p.producer = without_suffix(site.producer);
        p.consumer = without_suffix(site.consumer);
        const float produced = results[1 + 3 * k].to_f32().front();
        const float consumed = results[2 + 3 * k].to_f32().front();
        p.peak = std::max(double{produced}, double{consumed});
        p.output_peak = results[3 + 3 * k].to_f32().front();
        if (!std::isfinite(p.peak) || !std::isfinite(p.output_peak)) {
            throw error(anvil::detail::message("fp16 rescale: layer ", p.layer, " ", p.producer, " -> ",
                                               p.consumer,
                                               ": the fp32 values are not finite on the calibration ids"));
        }
        p.note = site.not_linear;
        const int wanted = p.note.empty() ? fp16_rescale_shift(p.peak, options.limit) : 0;
        p.shift = wanted;
        if (wanted > 0) {
            // The Neural Engine stores weights in fp16: the consumer's largest weight times 2^s must stay
            // there.
            const node& consumer = g[site.consumer];
            double largest = 0.0;
            for (const float x : recipe_detail::read_stored_weight(g, consumer.inputs.at(1)).values)
                largest = std::max(largest, double{std::fabs(x)});
            while (p.shift > 0 && std::ldexp(largest, p.shift) > recipe_detail::fp16_largest)
                --p.shift;
            if (p.shift < wanted) {
                p.note = anvil::detail::message("2^", wanted, " would take ", p.consumer,
                                                "'s largest weight past fp16; capped at 2^", p.shift);
            }
        }
        if (p.shift > 0) {
            const node& producer = g[site.producer];
            fold(producer.inputs.at(1), -p.shift);
            if (producer.inputs.size() > 2) fold(producer.inputs[2], -p.shift);  // the bias shrinks with it
            fold(g[site.consumer].inputs.at(1), p.shift);                        // its bias does not
        }
        report.pairs.push_back(std::move(p));
    }
    rescaled.weights = replacements.empty() ? weights : weights->with_tensors(std::move(replacements));

    if (options.check_numerics) {
        const auto overflow = [&](const decoder_weight_source& source) {
            const recipe_detail::calibration_graph built =
                recipe_detail::build_calibration_graph(c, source, tokens);
            program p = compile({built.logits}, recipe_detail::calibration_options(cpu, c, true));
            static_cast<void>(p.run(inputs));
            return p.numerics();
        };
        report.before = overflow(*weights);
        report.after = rescaled.weights == weights ? *report.before : overflow(*rescaled.weights);
    }
    return rescaled;
}

}  // namespace anvil::models
