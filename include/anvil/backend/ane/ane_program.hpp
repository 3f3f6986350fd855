// anvil: the Neural Engine backend's program. Compiling partitions the graph (partition.hpp), lowers each ANE
// segment to MIL + weights (lowering.hpp) with the variants the capability record or the chip's defaults
// choose (capabilities.hpp), and compiles, loads and evaluates it once through AppleNeuralEngine.framework
// (ane_framework.hpp) — or loads it from the program cache — with one flat IOSurface per input and output,
// laid out as the compiled program reports. A segment the Neural Engine refuses at any of those steps runs on
// the CPU instead (or, under strict_device, is an error naming it), and the placement report says so. Host
// segments are ordinary CPU programs. A run copies the inputs into their surfaces (fp32 to fp16, in the
// layout the lowering chose, padded to the I/O width), evaluates the segments in order and copies the outputs
// back. A resident input's surfaces are packed at compile and then only where write_input writes; a host
// mirror of it serves read_input and the outputs.
//
// device::coreml takes the public route with the same partition and lowering: each ANE segment's program is
// encoded as a Core ML model (backend/coreml), compiled once into a .mlmodelc at a permanent path keyed by
// the package's digest (so Core ML's own Neural Engine cache hits on later runs), loaded with computeUnits =
// CPUAndNeuralEngine and run with MLMultiArrays over host buffers laid out as the surfaces would be. The chip
// is not known on that route, so the lowering takes the conservative defaults of an unknown chip (ios16, spec
// 7) unless a dialect is asked for.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "anvil/backend/ane/ane_framework.hpp"
#include "anvil/backend/ane/capabilities.hpp"
#include "anvil/backend/ane/io_surface.hpp"
#include "anvil/backend/ane/lowering.hpp"
#include "anvil/backend/ane/partition.hpp"
#include "anvil/backend/ane/program_cache.hpp"
#include "anvil/backend/ane/residency.hpp"
#include "anvil/backend/ane/surface_packing.hpp"
#include "anvil/backend/ane/tiling.hpp"
#include "anvil/backend/cache.hpp"
#include "anvil/backend/coreml/coreml_framework.hpp"
#include "anvil/backend/coreml/mlpackage.hpp"
#include "anvil/backend/coreml/model_spec.hpp"
#include "anvil/backend/cpu/executor.hpp"
#include "anvil/backend/program.hpp"
#include "anvil/backend/resident_weights.hpp"
#include "anvil/core/convert.hpp"
#include "anvil/core/half.hpp"
#include "anvil/core/warning.hpp"
#include "anvil/graph/dump.hpp"
#include "anvil/graph/passes.hpp"
#include "anvil/graph/stages.hpp"

namespace anvil::detail::ane {

// The smallest surface the ANE is reported to evaluate reliably (RUNTIME.md §3: ~48 KiB on M4 Max; OMLX
// allocates 64 KiB), rounded like OMLX to 16 KiB.
inline constexpr std::size_t min_surface_bytes = std::size_t{64} << 10;
inline constexpr std::size_t surface_granule = std::size_t{16} << 10;

// Replaces every compute node whose operands are all constants (after folding, only those folding would
// expand: casts of fp16 weights, dequantisations) by its value, so each weight reaches a segment as a
// constant that the ANE lowering embeds in fp16 and a CPU segment copies.
[[nodiscard]] inline graph_body materialise_constants(const graph_body& body) {
    return fold_constants(body, cpu::evaluate_constant, folding::everything);
}

// As materialise_constants, but int8 and palette dequantisation stay (a Core ML program keeps them
// compressed).
[[nodiscard]] inline graph_body materialise_constants_but_dequantisation(const graph_body& body) {
    return fold_constants(body, cpu::evaluate_constant, folding::all_but_dequantisation);
}

// A segment's nodes as a graph of their own: the values it reads from outside become inputs named "v<id>",
// the weights it reads (constants, and compressed weights with their constants) are copied.
[[nodiscard]] inline graph_body extract_segment(const graph_body& body, const segment& seg) {
    graph_body sub;
    std::unordered_map<value_id, value_id> mapped;
    auto add = [&](node n) {
        sub.nodes.push_back(std::move(n));
        return static_cast<value_id>(sub.nodes.size() - 1);
    };
    for (const value_id id : seg.inputs) {
        node in;
        in.kind = op::input;
        in.result = body.nodes[id].result;
        in.name = message("v", id);
        mapped[id] = add(std::move(in));
    }
    for (const value_id id : seg.nodes) {
        node copy = body.nodes[id];
        for (auto& input : copy.inputs) {
            auto it = mapped.find(input);
            if (it == mapped.end()) {
                if (!is_weight_value(body, input)) {
                    throw error(message("ANE partition: ", describe_node(body, id), " reads ",
                                        describe_node(body, input),
                                        ", which its segment neither computes nor receives"));
                }
                node weight = body.nodes[input];
                for (auto& part : weight.inputs) {  // a compressed weight's own constants
                    auto found = mapped.find(part);
                    if (found == mapped.end()) found = mapped.emplace(part, add(body.nodes[part])).first;
                    part = found->second;
                }
                it = mapped.emplace(input, add(std::move(weight))).first;
            }
            input = it->second;
        }
        mapped[id] = add(std::move(copy));
    }
    for (const value_id id : seg.outputs)
        sub.outputs.push_back(mapped.at(id));
    return sub;
}

// Core ML runs matmul and einsum on the Neural Engine of every chip, M1/M2 included (RUNTIME.md §0b #25: the
// refusal there is the private compiler's; ml-ane-transformers and ANEMLL ship such models): a Core ML
// program keeps products of computed tensors native, unless compile_options::ane_lowering says otherwise.
inline void core_ml_products(lowering_choices& choices, const std::map<std::string, std::string>& overrides) {
    if (overrides.contains("matmul") || choices.of(lowering_feature::matmul) == lowering_variant::native)
        return;
    choices.set(lowering_feature::matmul, lowering_variant::native);
    choices.source += "; matmul native, as Core ML runs it on every chip";
}

// The dialect: the one asked for, else the lowering choices' (ios18 on chips known to take it, ios16 on M1/M2
// and on chips of unknown kind, RUNTIME.md §4).
inline mil_dialect choose_dialect(mil_version requested, const lowering_choices& choices) {
    switch (requested) {
        case mil_version::ios18:
            return mil_dialect::ios18;
        case mil_version::ios16:
            return mil_dialect::ios16;
        case mil_version::automatic:
            break;
    }
    return choices.of(lowering_feature::dialect) == lowering_variant::native ? mil_dialect::ios18
                                                                             : mil_dialect::ios16;
}

inline std::size_t round_up(std::size_t value, std::size_t granule) {
    return (value + granule - 1) / granule * granule;
}

// The bytes of a program's weight files: what the framework holds for it once loaded.
inline std::size_t total_bytes(std::span<const weight_file> files) {
    std::size_t bytes = 0;
    for (const weight_file& file : files)
        bytes += file.bytes.size();
    return bytes;
}

// The Neural Engine refused a segment: where (compile, load, layout, evaluate) and the framework's message.
struct device_refusal {
    std::string stage;
    std::string what;
};

// The passes both Neural Engine routes run before lowering: dead code out, constants and batch norms folded
// as `options` ask, and the remaining constant subgraphs materialised (but for int8 and palette
// dequantisation when `keep_compressed`: the lowering keeps them compressed, compressed_weights).
inline graph_body prepare_body(graph_body body, const compile_options& options, bool keep_compressed) {
    body = eliminate_dead_code(body);
    if (options.fold_constants) body = fold_constants(body, cpu::evaluate_constant);
    if (options.fold_batch_norm) body = fold_batch_norm(body);
    return keep_compressed ? materialise_constants_but_dequantisation(body) : materialise_constants(body);
}

class ane_program final : public program_impl {
public:
    ane_program(graph_body body, const compile_options& options)
        : options_(options), stage_labels_(body.stage_labels) {
        body = prepare_body(std::move(body), options, true);

        if (on_coreml()) {
            (void)coreml::coreml_runtime::get();  // throws unsupported_error where Core ML is not there
            cache_directory_ = cache_directory(options.cache_dir);
            cache_root_ = cache_directory_.empty() ? std::filesystem::temp_directory_path() / "anvil-coreml"
                                                   : cache_directory_ / "coreml";
        } else {
            const device_info device = query_device();
            if (!device.has_ane) {
                throw unsupported_error(
                    message("compile: device::ane: this machine reports no Neural Engine (",
                            runtime::get().library(), ")"));
            }
            architecture_ = device.architecture;
            macos_major_ = device.macos_major;
            cache_directory_ = cache_directory(options.cache_dir);
            cache_root_ = cache_root(options.cache_dir);
        }
        cache_max_bytes_ = anvil::cache::max_bytes(options.cache_max_bytes);
        choose_lowering_for(options);
        if (on_coreml()) states_supported_ = coreml::coreml_model::supports_states();
        // Compressed after tiling, so a tile of a wide weight is compressed on its own.
        body_ = compress_weights(tile_wide_linears(body, lowering_.max_dimension, program_weight_limit()),
                                 options.weight_compression);
        for (std::size_t id = 0; id < body_.nodes.size(); ++id) {
            const node& n = body_.nodes[id];
            if (n.kind != op::input) continue;
            inputs_.push_back({n.name, n.result.type, n.result.shape});
            input_ids_.push_back(static_cast<value_id>(id));
        }
        mark_resident(inputs_, options.resident_inputs);
        resident_.assign(body_.nodes.size(), false);
        for (std::size_t i = 0; i < inputs_.size(); ++i) {
            if (inputs_[i].resident) resident_[input_ids_[i]] = true;
        }
        for (std::size_t i = 0; i < body_.outputs.size(); ++i) {
            const node& n = body_.nodes[body_.outputs[i]];
            outputs_.push_back({message("output", i), n.result.type, n.result.shape});
        }

        partition_limits limits;
        limits.max_program_weight_bytes = program_weight_limit();
        partition_result parts = partition(body_, lowering_, options.strict_device, limits);
        for (const auto& fallback : parts.fallbacks)
            placement_.host_nodes.push_back(
                message(describe_node(body_, fallback.node), ": ", fallback.reason));
        placement_.chunks = parts.chunks.size();
        stage_of_ = effective_stages(body_);
        std::vector<planned_segment> plan = plan_segments(std::move(parts.segments));

        std::size_t ane_index = 0;
        std::size_t largest_after_split =
            0;  // weight bytes of the largest program that compiled after a split
        bool split = false;
        for (std::size_t p = 0; p < plan.size(); ++p) {
            planned_segment& planned = plan[p];
            step s;
            s.device = planned.seg.device;
            s.inputs = planned.seg.inputs;
            s.outputs = planned.seg.outputs;
            placement_segment report;
            report.op_count = planned.seg.nodes.size();
            report.ops = ops_summary(body_, planned.seg.nodes);
            report.reason = std::move(planned.cpu_reason);
            report.chunk = planned.seg.chunk;
            report.stages = stages_held(planned.seg.nodes);
            if (planned.seg.device == segment_device::ane) {
                report.weight_bytes = segment_weight_bytes(body_, planned.seg.nodes);
                const std::size_t index = ane_index++;
                try {
                    // A program past the smallest weight limit reported is split before other forms are
                    // tried: a size refusal would refuse every form again, a compile each.
                    const bool forms_first = report.weight_bytes <= smallest_reported_weight_limit ||
                                             weighted_nodes(planned.seg) < 2;
                    s.ane = on_coreml() ? build_coreml_step(planned.seg, std::move(*planned.lowered), index)
                                        : build_private_step(planned.seg, std::move(*planned.lowered), index,
                                                             forms_first);
                    report.device = on_coreml() ? "coreml" : "ane";
                    report.cached = s.ane->cached;
                    if (!s.ane->placement_note.empty()) report.reason = s.ane->placement_note;
                    if (!planned.split_note.empty())
                        report.reason =
                            planned.split_note + (report.reason.empty() ? "" : "; " + report.reason);
                    if (split) largest_after_split = std::max(largest_after_split, report.weight_bytes);
                } catch (const device_refusal& refusal) {
                    // Split only where the refusal may be the program's size: a refusal naming an op is
                    // about that op, and a process past its budget refuses any compile.
                    if (!on_coreml() && refusal.stage == "compile" && refused_op_of(refusal.what).empty() &&
                        report.weight_bytes > smallest_split_weight_bytes &&
                        compiles_in_process() < compile_budget(options_.ane_compile_budget) &&
                        split_in_half(plan, p, refusal)) {
                        --ane_index;  // the halves take this index and the next
                        split = true;
                        --p;
                        continue;
                    }
                    refuse(planned.seg, index, report, refusal);
                    s.device = segment_device::cpu;
                }
            }
            if (s.device == segment_device::cpu) {
                s.cpu = make_cpu_step(planned.seg);
                report.device = "cpu";
            }
            placement_.segments.push_back(std::move(report));
            steps_.push_back(std::move(s));
        }
        // The size cap, once the programs this compile wrote are finished and unlocked (they are kept).
        if (compiled_ > 0) cache_files::enforce_cap(cache_directory_, cache_max_bytes_, cache_keys_);
        if (largest_after_split > 0) {
            placement_.max_program_weight_bytes_learned = largest_after_split;
            record_program_weight_limit(options, architecture_, largest_after_split);
        }
        produced_.clear();
        mark_host_copies();
        release_build_data();
        bind_resident();
        placement_.backend = on_coreml() ? "coreml" : "ane";
        placement_.device = on_coreml()             ? std::string("Core ML (CPUAndNeuralEngine)")
                            : architecture_.empty() ? std::string("unknown")
                                                    : architecture_;
        placement_.lowering = message(choices_.source, ": ", choices_.summary());
    }

    std::vector<host_tensor> run(std::span<const named_tensor> inputs) override {
        std::lock_guard lock(mutex_);
        std::vector<host_tensor> values(body_.nodes.size());
        bind_inputs(inputs, values);
        for (auto& s : steps_) {
            if (s.device == segment_device::cpu) {
                run_cpu_step(s, values);
            } else {
                run_ane_step(*s.ane, values);
            }
        }
        std::vector<host_tensor> results;
        for (const value_id id : body_.outputs) {
            const node& n = body_.nodes[id];
            if (resident_[id]) {  // a copy: the host mirror changes with the next write_input
                results.push_back(cpu::from_compute_floats(mirror_of(id).values<float>().data(),
                                                           n.result.type, n.result.shape));
                continue;
            }
            const host_tensor& value = n.kind == op::constant ? n.data : values[id];
            if (value.type() == n.result.type) {
                results.push_back(value);
                continue;
            }
            std::vector<float> floats(value.element_count());
            cpu::to_compute_floats(value, floats.data(), "output");
            results.push_back(cpu::from_compute_floats(floats.data(), n.result.type, n.result.shape));
        }
        return results;
    }

    [[nodiscard]] const std::vector<io_info>& inputs() const override { return inputs_; }
    [[nodiscard]] const std::vector<io_info>& outputs() const override { return outputs_; }
    [[nodiscard]] numerics_report numerics() const override {
        std::lock_guard lock(mutex_);
        numerics_report merged;
        for (const auto& s : steps_) {
            if (!s.cpu) continue;
            auto report = s.cpu->numerics();
            merged.overflows.insert(merged.overflows.end(), report.overflows.begin(), report.overflows.end());
        }
        return merged;
    }

    [[nodiscard]] placement_report placement() const override { return placement_; }

    // The placement of every segment (ANE programs with their MIL; CPU segments with their graph, and the
    // framework's error where the Neural Engine refused one) and the reason each host node is not on it.
    [[nodiscard]] std::string dump() const override {
        std::size_t on_ane = 0;
        for (const auto& s : steps_)
            on_ane += s.ane ? 1u : 0u;
        std::string text =
            message(on_coreml() ? "Core ML program (" : "ANE program (", placement_.device, ", ",
                    lowering_.dialect == mil_dialect::ios18 ? "program(1.3)/ios18" : "program(1.0)/ios16",
                    "): ", steps_.size(), " segment(s), ", on_ane, " on the Neural Engine, ",
                    placement_.refused(), " refused by it and run on the CPU; ", compiled_, " compiled, ",
                    cache_hits_, " loaded from the cache, ", shared_surfaces_,
                    " intermediate(s) passed between ANE programs by IOSurface\n",
                    "lowering: ", placement_.lowering, "\n");
        if (placement_.chunks > 1) {
            text += message("chunks: ", placement_.chunks, " of whole stages, by the limit of ",
                            program_weight_limit(), " weight bytes per program\n");
        }
        for (const auto& host : placement_.host_nodes)
            text += message("host: ", host, "\n");
        for (std::size_t i = 0; i < steps_.size(); ++i) {
            const auto& s = steps_[i];
            const placement_segment& p = placement_.segments[i];
            if (s.cpu) {
                text +=
                    message("segment ", i, ": CPU (", p.ops, ")", p.reason.empty() ? "" : ": ", p.reason,
                            p.framework_error.empty() ? "" : ": ", p.framework_error, "\n", s.cpu->dump());
            } else {
                text += message("segment ", i, on_coreml() ? ": Core ML (" : ": ANE (",
                                s.ane->key.substr(0, 16), p.cached ? ", cached" : "", "; ", chunk_summary(p),
                                p.ops, "; ", s.ane->lowered.padded_surfaces,
                                " surface(s) padded to the I/O width)\n", s.ane->lowered.mil);
            }
        }
        return text;
    }

    // The write lands in the host mirror (rounded to the input's type), then in every place a segment reads
    // the input: only the written region of each ANE input surface is re-packed, and a CPU segment's resident
    // copy is written in place.
    void write_input(std::string_view name, std::span<const std::int64_t> offsets,
                     const host_tensor& part) override {
        const write_region region = check_write(inputs_, name, offsets, part);
        std::vector<float> values(part.element_count());
        cpu::to_compute_floats(part, values.data(), message("program::write_input: input '", name, "'"));
        const value_id id = input_ids_[region.input];
        cpu::round_to_type(values.data(), values.size(), body_.nodes[id].result.type);
        const std::vector<std::size_t> starts = region.run_starts();
        const std::size_t length = region.run_length();
        std::lock_guard lock(mutex_);
        float* mirror = mirror_of(id).values<float>().data();
        for (std::size_t k = 0; k < starts.size(); ++k)
            std::memcpy(mirror + starts[k], values.data() + k * length, length * sizeof(float));
        if (starts.empty()) return;
        for (auto& s : steps_) {
            if (s.cpu) {
                if (std::find(s.inputs.begin(), s.inputs.end(), id) != s.inputs.end())
                    s.cpu->write_input(segment_input_name(id), offsets, part);
                continue;
            }
            for (std::size_t i = 0; i < s.ane->lowered.inputs.size(); ++i) {
                const surface_layout& layout = s.ane->lowered.inputs[i];
                if (layout.value != id) continue;
                with_input(*s.ane, i, [&](std::byte* data, const surface_layout& at) {
                    pack_region(at, starts, length, mirror, data);
                });
            }
        }
    }

    [[nodiscard]] host_tensor read_input(std::string_view name) const override {
        const std::size_t index = find_resident(inputs_, name, "program::read_input");
        std::lock_guard lock(mutex_);
        const host_tensor& mirror = mirror_of(input_ids_[index]);
        return host_tensor::from(mirror.values<float>(), mirror.shape());
    }

    [[nodiscard]] std::size_t compiled_count() const noexcept { return compiled_; }
    [[nodiscard]] std::size_t shared_surface_count() const noexcept { return shared_surfaces_; }
    [[nodiscard]] std::size_t cache_hit_count() const noexcept { return cache_hits_; }
    [[nodiscard]] const lowering_choices& choices() const noexcept { return choices_; }

private:
    struct ane_step {
        lowered_segment lowered;
        std::string key;
        bool cached = false;
        std::optional<ane_model> model;
        loaded_program_ticket ticket;  // after `model`: off the pool's list before the model goes
        std::optional<loaded_programs::pin> first_evaluation_pin;  // while the first evaluation runs
        // In lowered.inputs / lowered.outputs order. An input may be the very surface an earlier ANE program
        // writes the value to (input_shared): nothing is copied between the two programs.
        std::vector<std::shared_ptr<io_surface>> input_surfaces;
        std::vector<std::shared_ptr<io_surface>> output_surfaces;
        std::vector<bool> input_shared;
        std::vector<bool> output_to_host;  // false when only later ANE programs read it, through its surface
        std::optional<ane_request> request;
        // The surfaces the request binds, in the program's symbol order: a program unloaded to make room gets
        // its request made again from them when it is loaded again.
        std::vector<const io_surface*> bound_inputs, bound_outputs;
        // The Core ML route: the loaded model and host buffers laid out as the surfaces would be.
        std::optional<coreml::coreml_model> coreml;
        objc_object
            state;  // its MLState (macOS 15) when resident inputs are states; released before `coreml`
        std::vector<std::vector<std::byte>> input_buffers, output_buffers;  // none for a state input
        std::vector<float> scratch;
        std::string placement_note;  // Core ML: the ops its compute plan keeps off the Neural Engine
        weight_residency weights;    // the blobs the framework holds for this program (resident_weight_bytes)
    };
    struct step {
        segment_device device = segment_device::cpu;
        std::vector<value_id> inputs;
        std::vector<value_id> outputs;
        std::unique_ptr<cpu::cpu_program> cpu;
        std::unique_ptr<ane_step> ane;
    };
    // A segment as planned: ANE segments with their lowering, CPU ones with why they are there.
    struct planned_segment {
        segment seg;
        std::optional<lowered_segment> lowered;
        std::string cpu_reason;
        std::string split_note;  // a half of a program the compiler refused: which, and why
    };

    // The smallest per-program weight limit reported (RUNTIME.md §0b #20: "22 MB > compile limit", ~8 MB).
    static constexpr std::size_t smallest_reported_weight_limit = std::size_t{8} << 20;
    // A program refused at compile is split only when it holds more weights than this: no device is reported
    // to refuse a program under ~8 MB for its size, so a smaller one was refused for something else.
    static constexpr std::size_t smallest_split_weight_bytes = std::size_t{4} << 20;

    // How many of the segment's nodes read weights.
    [[nodiscard]] std::size_t weighted_nodes(const segment& seg) const {
        return static_cast<std::size_t>(std::count_if(seg.nodes.begin(), seg.nodes.end(), [&](value_id id) {
            const auto& inputs = body_.nodes[id].inputs;
            return std::any_of(inputs.begin(), inputs.end(),
                               [&](value_id input) { return is_weight_value(body_, input); });
        }));
    }

    // The most weight bytes one program holds: compile_options', or less where this machine's capability
    // record learned that larger programs are refused (RUNTIME.md §0b #20).
    [[nodiscard]] std::size_t program_weight_limit() const {
        const std::size_t learned = choices_.max_program_weight_bytes;
        return learned == 0 ? options_.ane_max_program_weight_bytes
                            : std::min(learned, options_.ane_max_program_weight_bytes);
    }

    // A program the compiler refused in every form is split in two, between stages where the weights are
    // closest to halved (or between nodes, in a segment of one stage), and each half is tried on its own
    // (RUNTIME.md §0b #20: a per-program weight limit, reported from ~8 MB to far larger). False when the
    // segment cannot be split so that each half holds weights.
    bool split_in_half(std::vector<planned_segment>& plan, std::size_t p, const device_refusal& refusal) {
        const segment seg = plan[p].seg;
        const std::vector<value_id>& nodes = seg.nodes;
        std::vector<std::size_t> counted_in(body_.nodes.size(), 0);
        std::vector<std::size_t> before(nodes.size() + 1, 0);  // weight bytes of nodes [0, i)
        for (std::size_t i = 0; i < nodes.size(); ++i)
            before[i + 1] = before[i] + new_weight_bytes(body_, nodes[i], counted_in, 1);
        const std::size_t total = before.back();
        std::size_t cut = 0;
        const auto distance = [&](std::size_t i) {
            return before[i] > total / 2 ? before[i] - total / 2 : total / 2 - before[i];
        };
        for (const bool stage_boundaries : {true, false}) {
            for (std::size_t i = 1; i < nodes.size(); ++i) {
                if (before[i] == 0 || before[i] == total) continue;  // each half must hold weights
                if (stage_boundaries && stage_of_[nodes[i]] == stage_of_[nodes[i - 1]]) continue;
                if (cut == 0 || distance(i) < distance(cut)) cut = i;
            }
            if (cut != 0) break;
        }
        if (cut == 0) return false;
        planned_segment first, second;
        first.seg = second.seg = seg;
        first.seg.nodes.assign(nodes.begin(), nodes.begin() + static_cast<std::ptrdiff_t>(cut));
        second.seg.nodes.assign(nodes.begin() + static_cast<std::ptrdiff_t>(cut), nodes.end());
        const std::string why = message("half of a program of ", total,
                                        " weight bytes the compiler refused (", refusal.what, ")");
        first.split_note = message("the first ", why);
        second.split_note = message("the second ", why);
        plan[p] = std::move(first);
        plan.insert(plan.begin() + static_cast<std::ptrdiff_t>(p) + 1, std::move(second));
        std::vector<segment> segments;
        for (const auto& planned : plan)
            segments.push_back(planned.seg);
        compute_boundaries(body_, segments);
        for (std::size_t i = 0; i < plan.size(); ++i)
            plan[i].seg = std::move(segments[i]);
        for (const std::size_t half : {p, p + 1}) {
            try {
                plan[half].lowered = lower(body_, plan[half].seg.nodes, plan[half].seg.inputs,
                                           plan[half].seg.outputs, segment_lowering_options(plan[half].seg));
            } catch (const error& e) {
                plan[half].seg.device = segment_device::cpu;
                plan[half].lowered.reset();
                plan[half].cpu_reason = message(plan[half].split_note, "; its lowering failed: ", e.what());
            }
        }
        return true;
    }

    static std::string segment_input_name(value_id id) { return message("v", id); }

    // The stages whose weights `nodes` read ("layer 2 to layer 5"), else those the nodes belong to; "" for a
    // graph without stage marks.
    [[nodiscard]] std::string stages_held(std::span<const value_id> nodes) const {
        if (stage_labels_.empty() || nodes.empty()) return {};
        std::uint32_t first = std::numeric_limits<std::uint32_t>::max(), last = 0;
        for (const bool weighted_only : {true, false}) {
            for (const value_id id : nodes) {
                const bool reads_weights =
                    std::any_of(body_.nodes[id].inputs.begin(), body_.nodes[id].inputs.end(),
                                [&](value_id input) { return is_weight_value(body_, input); });
                if (weighted_only && !reads_weights) continue;
                first = std::min(first, stage_of_[id]);
                last = std::max(last, stage_of_[id]);
            }
            if (first <= last) break;
        }
        const auto label = [&](std::uint32_t stage) {
            return stage < stage_labels_.size() ? stage_labels_[stage] : message("stage ", stage);
        };
        return stage_range(label(first), label(last));
    }

    // "chunk 1 of 3: layer 2 to layer 3, 123456 weight bytes; " for the dump, "" with one chunk.
    [[nodiscard]] std::string chunk_summary(const placement_segment& p) const {
        if (placement_.chunks < 2) return {};
        return message("chunk ", p.chunk, " of ", placement_.chunks, ": ", p.stages,
                       p.stages.empty() ? "" : ", ", p.weight_bytes, " weight bytes; ");
    }

    [[nodiscard]] bool on_coreml() const noexcept { return options_.target == device::coreml; }

    // Calls `write(bytes, layout)` with the bytes of input `i` of an ANE step — its locked surface, its Core
    // ML buffer, or its MLState buffer — and the layout they have (a state's rows are as far apart as Core ML
    // says at each access).
    template <class Write>
    static void with_input(ane_step& s, std::size_t i, Write&& write) {
        const surface_layout& layout = s.lowered.inputs[i];
        if (layout.state) {
            const std::array<std::int64_t, 4> shape{1, layout.channels, 1, layout.surface_width};
            coreml::with_state_buffer(s.state, layout.symbol, shape,
                                      [&](std::byte* data, std::span<const std::int64_t> strides) {
                                          surface_layout at = layout;  // rows as far apart as Core ML says
                                          at.channel_stride = static_cast<std::size_t>(strides[1]) * 2;
                                          write(data, at);
                                      });
            return;
        }
        if (s.coreml) {
            write(s.input_buffers[i].data(), layout);
            return;
        }
        auto guard = s.input_surfaces[i]->lock(false);
        write(guard.data(), layout);
    }

    [[nodiscard]] host_tensor& mirror_of(value_id id) { return mirrors_.at(id); }
    [[nodiscard]] const host_tensor& mirror_of(value_id id) const { return mirrors_.at(id); }

    // The lowering of one segment. On the Core ML route with MLState (macOS 15), the resident inputs the
    // segment reads (KV caches) become states in the ios18 dialect: Core ML keeps them between predictions
    // and the host writes only what changes, where an input would pass the whole cache to every prediction.
    [[nodiscard]] lowering_options segment_lowering_options(const segment& seg) const {
        lowering_options options = lowering_;
        if (!on_coreml() && holds_palette(seg)) {
            // The private compiler is reported to refuse sub-byte ios18 weights and to take ios16's form
            // (RUNTIME.md §0b #19): the record's `palette` feature (or its default) says which this one
            // takes.
            switch (options.variant(lowering_feature::palette)) {
                case lowering_variant::native:
                    break;
                case lowering_variant::decomposed:
                    options.dialect = mil_dialect::ios16;
                    break;
                case lowering_variant::cpu:
                    options.compressed_palettes = false;
                    break;
            }
        }
        if (!on_coreml()) {
            options.pack_inputs = true;
            for (const value_id id : seg.inputs)
                if (id < ane_produced_.size() && ane_produced_[id]) options.unpacked_inputs.push_back(id);
        }
        if (!states_usable()) return options;
        for (const value_id id : seg.inputs)
            if (resident_[id]) options.state_inputs.push_back(id);
        if (!options.state_inputs.empty()) options.dialect = mil_dialect::ios18;
        return options;
    }

    // Whether the segment reads a palettised constant weight (a dequantize_lut of constants).
    [[nodiscard]] bool holds_palette(const segment& seg) const {
        for (const value_id id : seg.nodes)
            for (const value_id input : body_.nodes[id].inputs)
                if (body_.nodes[input].kind == op::dequantize_lut && is_host_constant(body_, input))
                    return true;
        return false;
    }

    // States need Core ML's MLState (macOS 15) and the ios18 dialect, unless ios16 was asked for.
    [[nodiscard]] bool states_usable() const {
        return on_coreml() && options_.ane_mil != mil_version::ios16 && states_supported_;
    }

    // The placement note of a Core ML segment whose resident inputs are passed to every prediction, because
    // they could not be states; "" when it reads none.
    [[nodiscard]] std::string resident_inputs_passed(const segment& seg) const {
        std::string names;
        for (const value_id id : seg.inputs)
            if (resident_[id]) names += message(names.empty() ? "" : ", ", body_.nodes[id].name);
        if (names.empty()) return {};
        const std::string why = options_.ane_mil == mil_version::ios16
                                    ? "the ios16 dialect was asked for, and states need ios18"
                                    : "this Core ML has no MLState (before macOS 15 / iOS 18)";
        return message("the resident inputs ", names,
                       " are passed to every prediction, not kept in MLState: ", why);
    }

    void choose_lowering_for(const compile_options& options) {
        choices_ = choices_for(options, architecture_, macos_major_);
        if (on_coreml()) core_ml_products(choices_, options.ane_lowering);
        lowering_.choices = choices_;
        lowering_.dialect = choose_dialect(options.ane_mil, choices_);
        lowering_.one_file_per_weight =
            !on_coreml() && choices_.of(lowering_feature::weight_files) == lowering_variant::decomposed;
        lowering_.compressed_weights = true;
        lowering_.core_ml_program = on_coreml();  // Core ML places each op itself: no kernel size is refused
    }

    // Lowers each ANE segment. One that holds no conv or matmul (RUNTIME.md §0 #6: such a program may not
    // compile or load) joins the next ANE segment when no segment between reads it, or the previous one when
    // everything it reads exists by then — an attention mask built from the input joins the encoder that
    // reads it — unless the chip is known to load unanchored programs; failing that it runs on the CPU. A
    // segment whose lowering fails runs on the CPU too. Neighbouring CPU segments then merge.
    std::vector<planned_segment> plan_segments(std::vector<segment> segments) {
        // Values an ANE segment produces: a later program may read them from that program's own output
        // surface, so they are never packed with other inputs.
        ane_produced_.assign(body_.nodes.size(), false);
        for (const segment& seg : segments)
            if (seg.device == segment_device::ane)
                for (const value_id id : seg.outputs)
                    ane_produced_[id] = true;
        std::vector<std::string> reasons(segments.size());
        std::vector<std::optional<lowered_segment>> lowered(segments.size());
        const auto lower_at = [&](std::size_t i) {
            segment& seg = segments[i];
            try {
                lowered[i] = lower(body_, seg.nodes, seg.inputs, seg.outputs, segment_lowering_options(seg));
            } catch (const error& e) {
                if (options_.strict_device)
                    throw unsupported_error(message("compile: strict_device: ANE segment (",
                                                    ops_summary(body_, seg.nodes),
                                                    ") cannot be lowered: ", e.what()));
                reasons[i] = message("the lowering failed: ", e.what());
                seg.device = segment_device::cpu;
                lowered[i].reset();
            }
        };
        for (std::size_t i = 0; i < segments.size(); ++i)
            if (segments[i].device == segment_device::ane) lower_at(i);
        const bool anchors_needed =
            lowering_.variant(lowering_feature::anchorless) != lowering_variant::native;
        for (std::size_t i = 0; anchors_needed && i < segments.size();) {
            if (segments[i].device != segment_device::ane || !lowered[i] || lowered[i]->anchored) {
                ++i;
                continue;
            }
            const std::optional<std::size_t> into = anchored_neighbour(segments, lowered, i);
            if (!into) {
                const std::string why = message(
                    "it holds no conv or matmul, and a program without one may not compile or load "
                    "(RUNTIME.md §0 "
                    "#6; anvil selftest finds out whether this Neural Engine loads one)");
                if (options_.strict_device) {
                    throw unsupported_error(message("compile: strict_device: the ANE segment of ",
                                                    ops_summary(body_, segments[i].nodes),
                                                    " cannot run on the Neural Engine: ", why));
                }
                reasons[i] = why;
                segments[i].device = segment_device::cpu;
                lowered[i].reset();
                ++i;
                continue;
            }
            // Earlier nodes first keeps the joined segment in a topological order.
            std::vector<value_id>& target = segments[*into].nodes;
            if (*into > i) {
                target.insert(target.begin(), segments[i].nodes.begin(), segments[i].nodes.end());
            } else {
                target.insert(target.end(), segments[i].nodes.begin(), segments[i].nodes.end());
            }
            segments.erase(segments.begin() + static_cast<std::ptrdiff_t>(i));
            lowered.erase(lowered.begin() + static_cast<std::ptrdiff_t>(i));
            reasons.erase(reasons.begin() + static_cast<std::ptrdiff_t>(i));
            compute_boundaries(body_, segments);
            const std::size_t joined = *into > i ? *into - 1 : *into;
            lower_at(joined);
            i = std::min(i, joined);
        }
        // Merge neighbouring CPU segments, keeping the lowering of each remaining ANE segment (its boundary
        // does not change: its readers and producers stay in other segments).
        std::vector<planned_segment> plan;
        for (std::size_t i = 0; i < segments.size(); ++i) {
            if (!plan.empty() && plan.back().seg.device == segment_device::cpu &&
                segments[i].device == segment_device::cpu) {
                planned_segment& last = plan.back();
                last.seg.nodes.insert(last.seg.nodes.end(), segments[i].nodes.begin(),
                                      segments[i].nodes.end());
                if (!reasons[i].empty())
                    last.cpu_reason += message(last.cpu_reason.empty() ? "" : "; ", reasons[i]);
                continue;
            }
            plan.push_back({std::move(segments[i]), std::move(lowered[i]), std::move(reasons[i]), {}});
        }
        std::vector<segment> merged;
        for (const auto& p : plan)
            merged.push_back(p.seg);
        compute_boundaries(body_, merged);
        for (std::size_t i = 0; i < plan.size(); ++i) {
            plan[i].seg = std::move(merged[i]);
            if (plan[i].seg.device == segment_device::cpu && plan[i].cpu_reason.empty())
                plan[i].cpu_reason = "host-only ops";
        }
        return plan;
    }

    // The anchored ANE segment the unanchored segment `i` can join: the next one when no segment between
    // reads what `i` computes, else the previous one when every value `i` reads is computed by then.
    std::optional<std::size_t> anchored_neighbour(const std::vector<segment>& segments,
                                                  const std::vector<std::optional<lowered_segment>>& lowered,
                                                  std::size_t i) const {
        const auto anchored = [&](std::size_t k) {
            return segments[k].device == segment_device::ane && lowered[k] && lowered[k]->anchored;
        };
        const auto reads_from_i = [&](std::size_t k) {
            for (const value_id v : segments[k].inputs)
                if (std::find(segments[i].outputs.begin(), segments[i].outputs.end(), v) !=
                    segments[i].outputs.end())
                    return true;
            return false;
        };
        for (std::size_t k = i + 1; k < segments.size(); ++k) {
            if (anchored(k)) return k;
            if (reads_from_i(k)) break;
        }
        std::vector<std::size_t> producer(body_.nodes.size(), segments.size());
        for (std::size_t k = 0; k < segments.size(); ++k)
            for (const value_id id : segments[k].nodes)
                producer[id] = k;
        for (std::size_t k = i; k-- > 0;) {
            if (!anchored(k)) continue;
            const bool ready =
                std::all_of(segments[i].inputs.begin(), segments[i].inputs.end(),
                            [&](value_id v) { return producer[v] == segments.size() || producer[v] <= k; });
            if (ready) return k;
            break;
        }
        return std::nullopt;
    }

    // `fp16`: with the Neural Engine's numerics (every op rounded to fp16, overflow to infinity), to compare
    // a program with.
    std::unique_ptr<cpu::cpu_program> make_cpu_step(const segment& seg, bool fp16 = false) const {
        compile_options cpu_options = options_;
        cpu_options.target = device::cpu;
        cpu_options.ane_numerics = fp16;
        cpu_options.placement_log.reset();
        // A resident input the segment reads stays resident there, under the segment's name for it.
        cpu_options.resident_inputs.clear();
        for (const value_id id : seg.inputs) {
            if (resident_[id]) cpu_options.resident_inputs.push_back(segment_input_name(id));
        }
        return std::make_unique<cpu::cpu_program>(extract_segment(body_, seg), cpu_options);
    }

    // The Neural Engine refused segment `index`: under strict_device that is an error naming the op, the
    // segment and the framework's message; otherwise the segment runs on the CPU, the placement report keeps
    // the message, and one warning line says so.
    void refuse(const segment& seg, std::size_t index, placement_segment& report,
                const device_refusal& refusal) {
        const std::string what =
            message("ANE segment ", index, " (", ops_summary(body_, seg.nodes), ") was refused at ",
                    refusal.stage, on_coreml() ? " by Core ML: " : " by the Neural Engine: ", refusal.what);
        if (options_.strict_device) throw unsupported_error(message("compile: strict_device: ", what));
        report.refused_at = refusal.stage;
        report.framework_error = refusal.what;
        report.reason = message("the Neural Engine refused it at ", refusal.stage);
        warn(message(what, "; it runs on the CPU instead"));
    }

    // Every resident input starts at zero: its host mirror, and each ANE surface that reads it, packed once
    // here (a fresh surface's contents are not promised to be zero). run() never packs these surfaces again.
    void bind_resident() {
        for (std::size_t i = 0; i < inputs_.size(); ++i) {
            if (!inputs_[i].resident) continue;
            const value_id id = input_ids_[i];
            host_tensor& mirror = mirrors_[id] = host_tensor(dtype::f32, inputs_[i].shape);
            for (auto& s : steps_) {
                if (!s.ane) continue;
                for (std::size_t k = 0; k < s.ane->lowered.inputs.size(); ++k) {
                    if (s.ane->lowered.inputs[k].value != id) continue;
                    with_input(*s.ane, k, [&](std::byte* data, const surface_layout& at) {
                        pack(at, mirror.values<float>().data(), data);
                    });
                }
            }
        }
    }

    // A cache entry once its program has loaded (its lock still held): a hit's last use becomes now, and a
    // fresh compile's manifest is written, which makes the entry one later runs load.
    void note_cache_use(const ane_step& s, anvil::cache::entry_kind kind) {
        if (s.cached) {
            cache_files::touch(cache_root_, s.key);
        } else {
            cache_files::write_manifest(
                cache_root_, {kind, s.key, options_.model_source, on_coreml() ? std::string() : architecture_,
                              choices_.digest});
        }
        cache_keys_.insert(s.key);
    }

    // Compiles (or loads from the cache), loads, binds and evaluates once: a segment whose compile, load or
    // first evaluation fails raises device_refusal, so the caller can run it on the CPU instead.
    std::unique_ptr<ane_step> build_ane_step(const segment& seg, lowered_segment lowered, std::size_t index) {
        auto s = std::make_unique<ane_step>();
        s->lowered = std::move(lowered);
        s->key = program_key(s->lowered.mil, s->lowered.weights, architecture_, choices_.digest);
        const auto refused = [](std::string stage, const std::exception& e) {
            return device_refusal{std::move(stage), e.what()};
        };
        try {
            s->model.emplace(ane_model::create(s->lowered.mil, s->lowered.weights));
            s->ticket.set(&*s->model);
        } catch (const error& e) {
            throw refused("compile", e);
        }
        // The framework holds the weights now (and the staged files will): no second copy stays here. What it
        // holds counts as this step's resident weights (keyed by the step, which no other buffer shares).
        s->weights = weight_residency(s.get(), total_bytes(s->lowered.weights), weight_device::ane);
        std::vector<weight_file>().swap(s->lowered.weights);
        ane_model& model = *s->model;
        // From the probe (compiledModelExists) to the load, another process must not clear or rewrite the
        // cache entry: its lock is held until this program has loaded (RUNTIME.md §0b #22).
        // The entry is a hit only when finished (its manifest written after a load, backend/cache.hpp): a
        // half-written one is compiled again.
        std::optional<directory_lock> cache_lock;
        if (!cache_root_.empty()) {
            const std::filesystem::path dir = cache_root_ / s->key;
            try {
                std::error_code code;
                std::filesystem::create_directories(cache_root_, code);  // for the lock file
                cache_lock.emplace(dir);
                if (model.set_cache_directory(dir)) {
                    s->cached = cache_files::finished(cache_root_, s->key) && model.compiled_model_exists();
                } else {
                    cache_lock.reset();
                }
            } catch (const error&) {
                s->cached = false;  // an unwritable cache only costs the compile
            }
        }
        const load_retry_policy retry = load_retry_from_environment(load_retry_policy{
            options_.ane_load_attempts, options_.ane_load_first_retry_delay, &load_backoff_left_});
        const auto compile_fresh = [&] {
            if (cache_lock) cache_files::unfinish(cache_root_, s->key);
            try {
                count_compile(options_.ane_compile_budget);
                loaded_programs::instance().compile(model, cache_lock.has_value());
                ++compiled_;
            } catch (const error& e) {
                throw device_refusal{
                    "compile", message(e.what(), framework_detail::named_mil_op(e.what(), s->lowered.mil))};
            }
        };
        if (!s->cached) compile_fresh();
        const std::size_t cap = options_.ane_max_loaded_programs;
        try {
            loaded_programs::instance().load(model, retry, cap);
        } catch (const error& e) {
            if (!s->cached)
                throw device_refusal{
                    "load", message(e.what(), framework_detail::named_mil_op(e.what(), s->lowered.mil))};
            // A cached compile that no longer loads (an OS update the key missed, a damaged file): compile
            // afresh once.
            s->cached = false;
            compile_fresh();
            try {
                loaded_programs::instance().load(model, retry, cap);
            } catch (const error& again) {
                throw device_refusal{"load", message(again.what(), framework_detail::named_mil_op(
                                                                       again.what(), s->lowered.mil))};
            }
        }
        if (cache_lock) {
            note_cache_use(*s, anvil::cache::entry_kind::ane_program);
            cache_lock.reset();
        }
        if (s->cached) ++cache_hits_;
        const std::string where = message("ANE program ", index, " (", seg.nodes.size(), " ops)");
        try {
            bind_surfaces(*s, model.layout(), where);
        } catch (const error& e) {
            forget_produced(*s);
            throw refused("layout", e);
        }
        try {
            // The first evaluation, on inputs of ones (not zeros, which would turn log and rsqrt into
            // infinities): a program the device refuses at dispatch is known now, while its constants are
            // still there to build the CPU segment from.
            for (std::size_t i = 0; i < s->lowered.inputs.size(); ++i) {
                if (!s->input_shared[i]) fill_with_ones(s->lowered.inputs[i], *s->input_surfaces[i]);
            }
            evaluate_with_watchdog(s);
        } catch (const error& e) {
            if (s) forget_produced(*s);
            throw device_refusal{"evaluate", message(e.what(), framework_detail::named_mil_op(
                                                                   e.what(), s ? s->lowered.mil : ""))};
        }
        if (!s->cached && options_.ane_verify_first_evaluation) {
            if (std::string wrong = first_evaluation_problem(seg, *s); !wrong.empty()) {
                forget_produced(*s);
                throw device_refusal{"evaluate", wrong};
            }
        }
        return s;
    }

    // The first evaluation, given ane_first_evaluation_timeout to return (RUNTIME.md §0b #22: a wedged driver
    // never signals). One that does not is abandoned: the step (its model, surfaces and request, which the
    // blocked call still uses) is kept for the life of the process, `s` is left empty, and an error says so.
    void evaluate_with_watchdog(std::unique_ptr<ane_step>& s) {
        struct first_evaluation {
            std::mutex mutex;
            std::condition_variable done;
            bool finished = false;
            std::exception_ptr failure;
        };
        auto state = std::make_shared<first_evaluation>();
        ane_step* const evaluated = s.get();
        // Not unloaded to make room while it runs; an abandoned evaluation keeps its pin for good.
        evaluated->first_evaluation_pin.emplace(use_loaded(*evaluated));
        std::thread evaluation([state, evaluated] {
            std::exception_ptr failure;
            try {
                evaluated->model->evaluate(*evaluated->request);
            } catch (...) {
                failure = std::current_exception();
            }
            const std::lock_guard lock(state->mutex);
            state->failure = failure;
            state->finished = true;
            state->done.notify_all();
        });
        std::unique_lock lock(state->mutex);
        const bool finished = state->done.wait_for(lock, options_.ane_first_evaluation_timeout,
                                                   [&] { return state->finished; });
        lock.unlock();
        if (!finished) {
            evaluation.detach();
            forget_produced(*s);
            abandoned_steps().push_back(std::move(s));
            throw error(message(
                "the first evaluation did not return within ", options_.ane_first_evaluation_timeout.count(),
                " ms (a wedged driver never signals, RUNTIME.md §0b #22); the program is abandoned"));
        }
        evaluation.join();
        s->first_evaluation_pin.reset();
        if (state->failure) std::rethrow_exception(state->failure);
    }

    // Steps whose first evaluation never returned: the blocked call still reads them, so they are never
    // destroyed (not even at exit: the allocation is not freed).
    static std::vector<std::unique_ptr<ane_step>>& abandoned_steps() {
        static auto* steps = new std::vector<std::unique_ptr<ane_step>>();
        return *steps;
    }

    // Why the first evaluation's outputs are wrong, or "": they are compared with the CPU's segment on the
    // same inputs (ones, or what an earlier program wrote into a shared surface), computed with the Neural
    // Engine's numerics, so fp16 rounding and overflow pass (ane_numerics and fp16 rescaling are for those);
    // numbers unrelated to the CPU's (another program's weights, RUNTIME.md §0b #21) and a NaN or infinity on
    // one side only do not.
    [[nodiscard]] std::string first_evaluation_problem(const segment& seg, ane_step& s) {
        std::unique_ptr<cpu::cpu_program> cpu = make_cpu_step(seg, true);
        std::vector<named_tensor> inputs;
        for (std::size_t i = 0; i < s.lowered.inputs.size(); ++i) {
            const surface_layout& layout = s.lowered.inputs[i];
            host_tensor value(dtype::f32, layout.shape);
            if (s.input_shared[i]) {
                auto guard = s.input_surfaces[i]->lock(true);
                unpack(layout, guard.data(), value.values<float>().data());
            } else {
                std::fill(value.values<float>().begin(), value.values<float>().end(), 1.0f);
            }
            // A boolean or integer input (fp16 on the ANE) goes to the CPU's segment in its own type.
            const dtype type = body_.nodes[layout.value].result.type;
            if (!is_floating(type))
                value = cpu::from_compute_floats(value.values<float>().data(), type, layout.shape);
            const std::string name = segment_input_name(layout.value);
            if (resident_[layout.value]) {
                const std::vector<std::int64_t> origin(layout.shape.rank(), 0);
                cpu->write_input(name, origin, value);
            } else {
                inputs.push_back({name, std::move(value)});
            }
        }
        const std::vector<host_tensor> want = cpu->run(inputs);
        for (std::size_t o = 0; o < s.lowered.outputs.size(); ++o) {
            const surface_layout& layout = s.lowered.outputs[o];
            const auto at = std::find(seg.outputs.begin(), seg.outputs.end(), layout.value);
            if (at == seg.outputs.end()) continue;
            std::vector<float> expected(
                want[static_cast<std::size_t>(at - seg.outputs.begin())].element_count());
            cpu::to_compute_floats(want[static_cast<std::size_t>(at - seg.outputs.begin())], expected.data(),
                                   "first evaluation");
            std::vector<float> got(expected.size());
            {
                auto guard = s.output_surfaces[o]->lock(true);
                unpack(layout, guard.data(), got.data());
            }
            double difference = 0.0, scale = 0.0;
            for (std::size_t i = 0; i < got.size(); ++i) {
                if (!std::isfinite(expected[i]) && !std::isfinite(got[i]))
                    continue;  // fp16 overflows on both
                if (std::isfinite(expected[i]) != std::isfinite(got[i])) {
                    return message("its first evaluation gave ", got[i], " at element ", i, " of ",
                                   layout.symbol, " where the CPU gives ", expected[i]);
                }
                difference += static_cast<double>(got[i] - expected[i]) * (got[i] - expected[i]);
                scale += static_cast<double>(expected[i]) * expected[i];
            }
            // fp16 keeps 11 bits; a chunk of layers drifts by a few percent at most. 20% (RMS, relative) is
            // another computation, not rounding.
            if (difference > 0.04 * std::max(scale, 1e-12)) {
                return message(
                    "its first evaluation differs from the CPU's on the same inputs by ",
                    std::sqrt(difference / std::max(scale, 1e-12)), " (RMS, relative) in ", layout.symbol,
                    ": the program computes other numbers (weights mistaken for another program's? "
                    "RUNTIME.md §0b #21)");
            }
        }
        return {};
    }

    // The private path's step. A program the Neural Engine refuses is lowered again, each time more
    // conservatively, before its segment goes to the CPU: in program(1.0)/ios16 when it was ios18 (the ios18
    // dialect needs macOS 15, and a chip may take only ios16, RUNTIME.md §0b #18); with its compressed
    // weights expanded to fp16 (public code shows the private compiler int8 constexpr ops only and reports
    // sub-byte palettes refused, §4 and §0b #19); and with every op that has a decomposition decomposed. A
    // form whose MIL equals one already refused is not compiled again. The placement report says which form
    // ran.
    std::unique_ptr<ane_step> build_private_step(const segment& seg, lowered_segment lowered,
                                                 std::size_t index, bool other_forms = true) {
        load_backoff_left_ = options_.ane_load_max_backoff;
        std::vector<std::string> refused_texts{lowered.mil};
        device_refusal first;
        try {
            return build_ane_step(seg, std::move(lowered), index);
        } catch (const device_refusal& refusal) {
            // A layout mismatch is the bridge's, not the device's; a probe tests one form only.
            if (refusal.stage == "layout" || options_.ane_exact_lowering || !other_forms) throw;
            first = refusal;
        }
        // What the caller asked for explicitly (a dialect, a feature's variant) stays as asked.
        const auto overridden = [&](lowering_feature f) {
            return options_.ane_lowering.contains(std::string(describe_feature(f).name));
        };
        lowering_options form = segment_lowering_options(seg);
        std::vector<std::pair<std::string, lowering_options>> forms;
        if (form.dialect == mil_dialect::ios18 && options_.ane_mil != mil_version::ios18 &&
            !overridden(lowering_feature::dialect)) {
            form.dialect = mil_dialect::ios16;
            forms.emplace_back("lowered as program(1.0)/ios16", form);
        }
        if (form.compressed_weights) {
            form.compressed_weights = false;
            forms.emplace_back("with its compressed weights expanded to fp16", form);
        }
        for (const auto& d : feature_descriptions) {
            if (!d.decomposed.empty() && form.choices.of(d.feature) == lowering_variant::native &&
                d.feature != lowering_feature::dialect && !overridden(d.feature))
                form.choices.set(d.feature, lowering_variant::decomposed);
        }
        forms.emplace_back("with every op that has a decomposition decomposed", form);
        // A form that still holds the op the device named is not compiled (it would be refused again, at the
        // cost of a compile of the ~119 a process gets) unless that op is a constexpr one, whose form changes
        // with the dialect; nor is any form once the budget is spent.
        std::string named_op = refused_op_of(first.what);
        std::string tried;
        for (const auto& [what, options] : forms) {
            if (compiles_in_process() >= compile_budget(options_.ane_compile_budget)) break;
            lowered_segment again;
            try {
                again = lower(body_, seg.nodes, seg.inputs, seg.outputs, options);
            } catch (const error& e) {
                tried += message("; ", what, ": the lowering failed: ", e.what());
                continue;
            }
            if (std::find(refused_texts.begin(), refused_texts.end(), again.mil) != refused_texts.end())
                continue;
            if (!named_op.empty() && !named_op.starts_with("constexpr_") &&
                again.mil.find(message(" = ", named_op, "(")) != std::string::npos)
                continue;
            refused_texts.push_back(again.mil);
            try {
                std::unique_ptr<ane_step> built = build_ane_step(seg, std::move(again), index);
                built->placement_note =
                    message("refused at ", first.stage, " (", first.what, tried, "); it runs ", what);
                return built;
            } catch (const device_refusal& refusal) {
                tried += message("; ", what, ", refused at ", refusal.stage, ": ", refusal.what);
                named_op = refused_op_of(refusal.what);
            }
        }
        throw device_refusal{first.stage, first.what + tried};
    }

    // The MIL op a refusal names (build_ane_step appends " (MIL line N: op)" where the framework's message
    // gives a line), or "".
    static std::string refused_op_of(std::string_view what) {
        const std::size_t at = what.rfind("(MIL line ");
        if (at == std::string_view::npos) return {};
        const std::size_t colon = what.find(": ", at);
        const std::size_t close = what.find(')', at);
        if (colon == std::string_view::npos || close == std::string_view::npos || close < colon) return {};
        return std::string(what.substr(colon + 2, close - colon - 2));
    }

    // A refused program's outputs are not there for later programs to read.
    void forget_produced(const ane_step& s) {
        for (const auto& out : s.lowered.outputs)
            produced_.erase(out.value);
    }

    // Allocates flat surfaces laid out as the compiled program reports (PlaneStride as the channel stride,
    // RUNTIME.md §0 #8, #16) and checks its symbols against the lowering's: bound by name in the order the
    // program reports (the compiler sorts symbols by name; outputs come back as "<name>@output"). An input
    // that an earlier ANE program produced in the same layout and allocation size reuses that program's
    // output surface.
    void bind_surfaces(ane_step& s, const model_layout& layout, const std::string& where) {
        auto allocate = [&](std::vector<surface_layout>& wanted, const std::vector<symbol_layout>& reported,
                            std::vector<std::shared_ptr<io_surface>>& surfaces, std::vector<bool>* shared,
                            std::vector<const io_surface*>& bound, const char* kind) {
            // One symbol per surface; packed inputs share theirs (lowering.hpp pack_inputs). slot[k]: the
            // index of wanted[k]'s symbol among `symbols`.
            std::vector<std::string> symbols;
            std::vector<std::size_t> slot;
            for (const auto& w : wanted) {
                const auto found = std::find(symbols.begin(), symbols.end(), w.symbol);
                slot.push_back(static_cast<std::size_t>(found - symbols.begin()));
                if (found == symbols.end()) symbols.push_back(w.symbol);
            }
            if (symbols.size() != reported.size()) {
                throw error(message(where, ": the compiled program has ", reported.size(), " ", kind,
                                    "s, the lowering made ", symbols.size()));
            }
            std::vector<std::size_t> symbol_of(reported.size());
            for (std::size_t i = 0; i < reported.size(); ++i) {
                const auto& r = reported[i];
                const auto it = std::find(symbols.begin(), symbols.end(), r.name);
                if (it == symbols.end()) {
                    throw error(message(where, ": the compiled program reports ", kind, " symbol '", r.name,
                                        "', which the lowering did not declare"));
                }
                std::int64_t channels = 0, width = 0;
                for (const auto& w : wanted) {
                    if (w.symbol != r.name) continue;
                    channels = std::max(channels, w.first_channel + w.channels);
                    width = w.surface_width;
                }
                if (r.channels != channels || r.width != width || !r.fp16) {
                    throw error(message(where, ": ", kind, " '", r.name,
                                        "': the compiled program expects [1, ", r.channels, ", ", r.height,
                                        ", ", r.width, "] ", r.fp16 ? "fp16" : "fp32",
                                        ", the lowering declared [1, ", channels, ", 1, ", width, "] fp16"));
                }
                for (auto& w : wanted)
                    if (w.symbol == r.name) w.channel_stride = r.plane_stride;
                symbol_of[i] = static_cast<std::size_t>(it - symbols.begin());
            }
            // Every surface of one kind gets the same allocation size (RUNTIME.md §3, ORI #12).
            std::size_t alloc = min_surface_bytes;
            for (const auto& w : wanted)
                alloc = std::max(alloc, round_up(w.offset() + w.bytes(), surface_granule));
            surfaces.clear();
            std::vector<std::shared_ptr<io_surface>> by_symbol(symbols.size());
            for (std::size_t k = 0; k < wanted.size(); ++k) {
                const surface_layout& w = wanted[k];
                const auto produced = produced_.find(w.value);
                if (shared != nullptr && !w.packed && produced != produced_.end() &&
                    produced->second.alloc == alloc && !produced->second.layout.packed &&
                    produced->second.layout.channels == w.channels &&
                    produced->second.layout.width == w.width &&
                    produced->second.layout.surface_width == w.surface_width &&
                    produced->second.layout.order == w.order &&
                    produced->second.layout.channel_stride == w.channel_stride) {
                    surfaces.push_back(produced->second.surface);
                    by_symbol[slot[k]] = surfaces.back();
                    shared->push_back(true);
                    ++shared_surfaces_;
                    continue;
                }
                auto& surface = by_symbol[slot[k]];
                if (!surface) surface = std::make_shared<io_surface>(io_surface::create_flat(alloc));
                surfaces.push_back(surface);
                if (shared != nullptr) shared->push_back(false);
            }
            if (shared == nullptr) {
                for (std::size_t i = 0; i < wanted.size(); ++i)
                    produced_[wanted[i].value] = {surfaces[i], wanted[i], alloc};
            }
            bound.assign(reported.size(), nullptr);
            for (std::size_t i = 0; i < reported.size(); ++i)
                bound[i] = by_symbol[symbol_of[i]].get();
        };
        std::vector<const io_surface*> inputs;
        std::vector<const io_surface*> outputs;
        allocate(s.lowered.inputs, layout.inputs, s.input_surfaces, &s.input_shared, inputs, "input");
        allocate(s.lowered.outputs, layout.outputs, s.output_surfaces, nullptr, outputs, "output");
        s.request.emplace(s.model->make_request(inputs, outputs));
        s.bound_inputs = std::move(inputs);
        s.bound_outputs = std::move(outputs);
    }

    // Once every segment is built, the program needs none of the constants the segments took copies of (a
    // large model would otherwise keep its weights in memory twice more for the program's lifetime).
    // Constants that are outputs stay.
    void release_build_data() {
        std::vector<bool> is_output(body_.nodes.size(), false);
        for (const value_id id : body_.outputs)
            is_output[id] = true;
        for (std::size_t id = 0; id < body_.nodes.size(); ++id) {
            node& n = body_.nodes[id];
            if (n.kind == op::constant && !is_output[id]) n.data = host_tensor();
        }
    }

    // An ANE output is copied to the host only when an output, a CPU segment or an unshared ANE input reads
    // it.
    void mark_host_copies() {
        std::vector<bool> on_host(body_.nodes.size(), false);
        for (const value_id id : body_.outputs)
            on_host[id] = true;
        for (const auto& s : steps_) {
            if (s.cpu) {
                for (const value_id id : s.inputs)
                    on_host[id] = true;
                continue;
            }
            for (std::size_t i = 0; i < s.ane->lowered.inputs.size(); ++i) {
                if (!s.ane->input_shared[i]) on_host[s.ane->lowered.inputs[i].value] = true;
            }
        }
        for (auto& s : steps_) {
            if (!s.ane) continue;
            s.ane->output_to_host.clear();
            for (const auto& out : s.ane->lowered.outputs)
                s.ane->output_to_host.push_back(on_host[out.value]);
        }
    }

    void bind_inputs(std::span<const named_tensor> given, std::vector<host_tensor>& values) const {
        const std::vector<std::size_t> order = match_inputs(given, inputs_);
        for (std::size_t i = 0; i < inputs_.size(); ++i) {
            if (!inputs_[i].resident) values[input_ids_[i]] = given[order[i]].tensor;
        }
    }

    void run_cpu_step(step& s, std::vector<host_tensor>& values) const {
        std::vector<named_tensor> named;
        for (const value_id id : s.inputs) {
            if (!resident_[id]) named.push_back({segment_input_name(id), values[id]});
        }
        auto results = s.cpu->run(named);
        for (std::size_t i = 0; i < s.outputs.size(); ++i)
            values[s.outputs[i]] = std::move(results[i]);
    }

    // Pins the step's program for an evaluation: one unloaded to make room for another program (RUNTIME.md
    // §0b #23) is loaded again first, unloading the least recently used idle one, and its request made again.
    loaded_programs::pin use_loaded(ane_step& s) {
        std::chrono::milliseconds backoff_left = options_.ane_load_max_backoff;
        const load_retry_policy retry = load_retry_from_environment(load_retry_policy{
            options_.ane_load_attempts, options_.ane_load_first_retry_delay, &backoff_left});
        bool reloaded = false;
        try {
            auto pinned =
                loaded_programs::instance().use(*s.model, retry, options_.ane_max_loaded_programs, reloaded);
            if (reloaded) s.request.emplace(s.model->make_request(s.bound_inputs, s.bound_outputs));
            return pinned;
        } catch (const error& e) {
            throw error(message("ANE program ", s.model->hex_identifier(),
                                " was unloaded to make room for another and cannot be loaded again (its "
                                "constants are no longer held, so it cannot move to the CPU now): ",
                                e.what()));
        }
    }

    void run_ane_step(ane_step& s, std::vector<host_tensor>& values) {
        for (std::size_t i = 0; i < s.lowered.inputs.size(); ++i) {
            if (s.input_shared[i]) continue;  // already there: an earlier program wrote it
            const auto& layout = s.lowered.inputs[i];
            if (resident_[layout.value]) continue;  // packed by write_input, region by region
            const host_tensor& value = values[layout.value];
            s.scratch.resize(value.element_count());
            cpu::to_compute_floats(value, s.scratch.data(), layout.symbol);
            with_input(s, i,
                       [&](std::byte* data, const surface_layout& at) { pack(at, s.scratch.data(), data); });
        }
        if (s.coreml) {
            predict_coreml(s);
        } else {
            const auto pinned = use_loaded(s);
            s.model->evaluate(*s.request);
        }
        for (std::size_t i = 0; i < s.lowered.outputs.size(); ++i) {
            if (!s.output_to_host[i]) continue;
            const auto& layout = s.lowered.outputs[i];
            host_tensor out(dtype::f32, layout.shape);
            if (s.coreml) {
                unpack(layout, s.output_buffers[i].data(), out.values<float>().data());
            } else {
                auto guard = s.output_surfaces[i]->lock(true);
                unpack(layout, guard.data(), out.values<float>().data());
            }
            // A boolean (fp16 1 and 0 on the ANE) goes back to its type: a CPU segment reading it takes bool.
            const dtype type = body_.nodes[layout.value].result.type;
            if (!is_floating(type))
                out = cpu::from_compute_floats(out.values<float>().data(), type, layout.shape);
            values[layout.value] = std::move(out);
        }
    }

    // A state input is not passed: Core ML reads it from the step's MLState.
    static void predict_coreml(ane_step& s) {
        std::vector<coreml::coreml_model::input> inputs;
        for (std::size_t i = 0; i < s.lowered.inputs.size(); ++i) {
            const surface_layout& l = s.lowered.inputs[i];
            if (l.state) continue;
            inputs.push_back(
                {l.symbol, l.channels, l.surface_width, l.channel_stride, s.input_buffers[i].data()});
        }
        std::vector<coreml::coreml_model::output> outputs;
        for (std::size_t i = 0; i < s.lowered.outputs.size(); ++i) {
            const surface_layout& l = s.lowered.outputs[i];
            outputs.push_back(
                {l.symbol, l.channels, l.surface_width, l.channel_stride, s.output_buffers[i].data()});
        }
        s.coreml->predict(inputs, outputs, s.state ? &s.state : nullptr);
    }

    // The Core ML route's step: the segment's program as a Core ML model, compiled once into
    // <cache>/coreml/<package digest>/model.mlmodelc (the permanent path Core ML's Neural Engine cache is
    // keyed by), loaded, and evaluated once on inputs of ones; a failure at any stage raises device_refusal.
    std::unique_ptr<ane_step> build_coreml_step(const segment& seg, lowered_segment lowered,
                                                std::size_t index) {
        auto s = std::make_unique<ane_step>();
        s->lowered = std::move(lowered);
        coreml::mlpackage_contents contents;
        try {
            coreml::model_spec spec;
            spec.functions.push_back({"main", &s->lowered.program, s->lowered.program_outputs, {}, {}});
            spec.metadata.short_description =
                message("anvil segment ", index, " (", ops_summary(body_, seg.nodes), ")");
            contents.model = coreml::encode_model(spec);
        } catch (const error& e) {
            throw device_refusal{"compile", e.what()};
        }
        contents.weight_files = std::move(s->lowered.weights);
        s->key = coreml::package_digest(contents);
        const std::size_t weight_bytes = total_bytes(contents.weight_files);
        const std::filesystem::path dir = cache_root_ / s->key;
        const std::filesystem::path compiled = dir / "model.mlmodelc";
        // As on the private route: the entry's lock from the probe to the load, and a hit only when finished.
        std::optional<directory_lock> cache_lock;
        std::error_code code;
        std::filesystem::create_directories(cache_root_, code);
        if (!code) cache_lock.emplace(dir);
        const auto compile_fresh = [&] {
            const std::filesystem::path package = dir / "model.mlpackage";
            cache_files::unfinish(cache_root_, s->key);
            std::error_code left;
            std::filesystem::remove_all(dir, left);
            try {
                coreml::write_mlpackage(package, contents);
                coreml::coreml_model::compile(package, compiled);
                ++compiled_;
            } catch (const error& e) {
                throw device_refusal{
                    "compile", message(e.what(), framework_detail::named_mil_op(e.what(), s->lowered.mil))};
            }
            std::error_code ignored;
            std::filesystem::remove_all(package, ignored);
        };
        s->cached =
            cache_files::finished(cache_root_, s->key) && std::filesystem::is_directory(compiled, code);
        if (!s->cached) compile_fresh();
        try {
            s->coreml.emplace(coreml::coreml_model::load(compiled));
        } catch (const error& e) {
            if (!s->cached) throw device_refusal{"load", e.what()};
            s->cached = false;  // a damaged or stale cache entry: compile afresh once
            compile_fresh();
            try {
                s->coreml.emplace(coreml::coreml_model::load(compiled));
            } catch (const error& again) {
                throw device_refusal{"load", again.what()};
            }
        }
        if (cache_lock) {
            note_cache_use(*s, anvil::cache::entry_kind::coreml_model);
            cache_lock.reset();
        }
        if (s->cached) ++cache_hits_;
        // Core ML holds the weights now; the program's in-memory copies go.
        s->weights = weight_residency(s.get(), weight_bytes, weight_device::ane);
        s->lowered.program = mil_function{};
        const bool has_states = std::any_of(s->lowered.inputs.begin(), s->lowered.inputs.end(),
                                            [](const surface_layout& in) { return in.state; });
        if (has_states) {
            try {
                s->state = s->coreml->new_state();  // zeros; bind_resident writes the inputs' contents
            } catch (const error& e) {
                throw device_refusal{"load", e.what()};
            }
        }
        for (const auto& in : s->lowered.inputs) {
            s->input_buffers.emplace_back(in.state ? 0 : in.bytes());
            s->input_shared.push_back(false);
        }
        for (const auto& out : s->lowered.outputs)
            s->output_buffers.emplace_back(out.bytes());
        try {
            for (std::size_t i = 0; i < s->lowered.inputs.size(); ++i)
                if (!s->lowered.inputs[i].state)
                    fill_with_ones(s->lowered.inputs[i], s->input_buffers[i].data());
            predict_coreml(*s);
        } catch (const error& e) {
            throw device_refusal{"evaluate", e.what()};
        }
        const std::string passed = has_states ? std::string() : resident_inputs_passed(seg);
        const std::string plan = check_compute_plan(compiled, seg);
        s->placement_note = passed.empty() || plan.empty() ? passed + plan : message(passed, "; ", plan);
        return s;
    }

    // Where Core ML runs the segment's ops (MLComputePlan, macOS 14.4): Core ML falls back to the CPU per op
    // without a word (COREML.md §4.1), so each op it keeps off the Neural Engine is named, in the placement
    // report or, under strict_device, in the error. Returns the report's note ("" when every op is on it).
    std::string check_compute_plan(const std::filesystem::path& compiled, const segment& seg) const {
        const std::string where = message("the Core ML segment (", ops_summary(body_, seg.nodes), ")");
        std::optional<std::vector<coreml::op_device>> plan;
        try {
            plan = coreml::compute_plan(compiled);
        } catch (const error& e) {
            if (options_.strict_device) {
                throw unsupported_error(
                    message("compile: strict_device: Core ML cannot say where ", where, " runs: ", e.what()));
            }
            return message("Core ML's compute plan could not be read: ", e.what());
        }
        if (!plan) {
            if (options_.strict_device) {
                throw unsupported_error(message(
                    "compile: strict_device: MLComputePlan (macOS 14.4 or later) is missing, so nothing can "
                    "show that ",
                    where, " runs on the Neural Engine"));
            }
            return "MLComputePlan is missing (before macOS 14.4): Core ML may run some ops on the CPU";
        }
        std::vector<std::string> off;
        for (const coreml::op_device& d : *plan) {
            if (d.device == "ane") continue;
            off.push_back(message(d.op, " (", d.output, ") on the ",
                                  d.device == "cpu"   ? "CPU"
                                  : d.device == "gpu" ? "GPU"
                                                      : "an unknown device"));
        }
        if (off.empty()) return {};
        std::string list;
        for (std::size_t i = 0; i < off.size() && i < 8; ++i)
            list += (i ? ", " : "") + off[i];
        if (off.size() > 8) list += message(" and ", off.size() - 8, " more");
        const std::string what = message("Core ML keeps ", off.size(), " of the ", plan->size(), " ops of ",
                                         where, " off the Neural Engine: ", list);
        if (options_.strict_device) throw unsupported_error(message("compile: strict_device: ", what));
        return what;
    }

    compile_options options_;
    std::vector<std::string> stage_labels_;  // the recipe's stage labels (graph::begin_stage), by stage
    std::vector<std::uint32_t> stage_of_;    // per node of body_: its effective stage
    graph_body body_;
    lowering_options lowering_;
    lowering_choices choices_;
    std::string architecture_;
    int macos_major_ = 0;  // the private route's OS (0 unknown, and on the Core ML route)
    // Empty without a cache, and for Core ML's temporary one (which is never capped).
    std::filesystem::path cache_directory_;
    std::filesystem::path cache_root_;
    std::uintmax_t cache_max_bytes_ = anvil::cache::default_max_bytes;
    std::set<std::string> cache_keys_;  // the entries this program uses: the cap keeps them
    std::vector<io_info> inputs_;
    std::vector<value_id> input_ids_;                    // the input node of each of inputs_
    std::vector<bool> resident_;                         // per node: a resident input
    std::unordered_map<value_id, host_tensor> mirrors_;  // per resident input: its f32 contents
    std::vector<io_info> outputs_;
    placement_report placement_;  // in steps_ order
    std::vector<step> steps_;
    struct produced_surface {
        std::shared_ptr<io_surface> surface;
        surface_layout layout;
        std::size_t alloc = 0;
    };
    std::unordered_map<value_id, produced_surface> produced_;  // while compiling: ANE outputs by value
    std::vector<bool> ane_produced_;  // per node: an output of a segment planned for the ANE
    std::size_t compiled_ = 0;
    std::size_t cache_hits_ = 0;
    std::size_t shared_surfaces_ = 0;
    bool states_supported_ = false;                   // device::coreml: this Core ML has MLState (macOS 15)
    std::chrono::milliseconds load_backoff_left_{0};  // of the program being built (ane_load_max_backoff)
    mutable std::mutex mutex_;
};

// Whether the Neural Engine backend can run here: the framework (or the simulator) loads and reports an ANE.
inline bool available() noexcept {
    try {
        return query_device().has_ane;
    } catch (...) {
        return false;
    }
}

}  // namespace anvil::detail::ane
