// anvil: the Neural Engine backend's program. Compiling partitions the graph (partition.hpp), lowers each ANE
// segment to MIL + weights (lowering.hpp), and compiles and loads it through AppleNeuralEngine.framework
// (ane_framework.hpp) — or loads it from the program cache — with one IOSurface per input and output,
// allocated once. Host segments are ordinary CPU programs. A run copies the inputs into their surfaces (fp32
// to fp16, with the 64-byte row stride and the layout the lowering chose), evaluates the segments in order
// and copies the outputs back. A resident input's surfaces are packed at compile and then only where
// write_input writes; a host mirror of it serves read_input and the outputs.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "anvil/backend/ane/ane_framework.hpp"
#include "anvil/backend/ane/io_surface.hpp"
#include "anvil/backend/ane/lowering.hpp"
#include "anvil/backend/ane/partition.hpp"
#include "anvil/backend/ane/program_cache.hpp"
#include "anvil/backend/ane/tiling.hpp"
#include "anvil/backend/cpu/executor.hpp"
#include "anvil/backend/program.hpp"
#include "anvil/core/convert.hpp"
#include "anvil/core/half.hpp"
#include "anvil/graph/dump.hpp"
#include "anvil/graph/passes.hpp"

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

// A segment's nodes as a graph of their own: the values it reads from outside become inputs named "v<id>",
// the constants it reads are copied.
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
                const node& producer = body.nodes[input];
                if (producer.kind != op::constant) {
                    throw error(message("ANE partition: ", describe_node(body, id), " reads ",
                                        describe_node(body, input),
                                        ", which its segment neither computes nor receives"));
                }
                it = mapped.emplace(input, add(producer)).first;
            }
            input = it->second;
        }
        mapped[id] = add(std::move(copy));
    }
    for (const value_id id : seg.outputs)
        sub.outputs.push_back(mapped.at(id));
    return sub;
}

inline mil_dialect choose_dialect(mil_version requested, std::string_view architecture) {
    switch (requested) {
        case mil_version::ios18:
            return mil_dialect::ios18;
        case mil_version::ios16:
            return mil_dialect::ios16;
        case mil_version::automatic:
            break;
    }
    // M1 (h13) and M2 (h14) accept only program(1.0) with verbose scalars (RUNTIME.md §4, MDX PR#6).
    if (architecture.starts_with("h13") || architecture.starts_with("h14")) return mil_dialect::ios16;
    return mil_dialect::ios18;
}

inline std::size_t round_up(std::size_t value, std::size_t granule) {
    return (value + granule - 1) / granule * granule;
}

class ane_program final : public program_impl {
public:
    ane_program(graph_body body, const compile_options& options) : options_(options) {
        body = eliminate_dead_code(body);
        if (options.fold_constants) body = fold_constants(body, cpu::evaluate_constant);
        if (options.fold_batch_norm) body = fold_batch_norm(body);
        body = materialise_constants(body);

        const device_info device = query_device();
        if (!device.has_ane) {
            throw unsupported_error(message("compile: device::ane: this machine reports no Neural Engine (",
                                            runtime::get().library(), ")"));
        }
        architecture_ = device.architecture;
        lowering_.dialect = choose_dialect(options.ane_mil, architecture_);
        cache_root_ = cache_root(options.cache_dir);
        body_ = tile_wide_linears(body, lowering_.max_dimension);
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
        limits.max_program_weight_bytes = options.ane_max_program_weight_bytes;
        partition_result parts = partition(body_, lowering_, options.strict_device, limits);
        fallbacks_ = std::move(parts.fallbacks);
        std::size_t ane_index = 0;
        for (auto& seg : parts.segments) {
            step s;
            s.device = seg.device;
            s.inputs = seg.inputs;
            s.outputs = seg.outputs;
            if (seg.device == segment_device::cpu) {
                compile_options cpu_options = options_;
                cpu_options.target = device::cpu;
                // A resident input the segment reads stays resident there, under the segment's name for it.
                cpu_options.resident_inputs.clear();
                for (const value_id id : seg.inputs) {
                    if (resident_[id]) cpu_options.resident_inputs.push_back(segment_input_name(id));
                }
                s.cpu = std::make_unique<cpu::cpu_program>(extract_segment(body_, seg), cpu_options);
            } else {
                s.ane = build_ane_step(seg, ane_index++);
            }
            steps_.push_back(std::move(s));
        }
        produced_.clear();
        mark_host_copies();
        release_build_data();
        bind_resident();
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

    // The placement of every segment (ANE programs with their MIL; CPU segments with their graph) and the
    // reason each host node is not on the Neural Engine.
    [[nodiscard]] std::string dump() const override {
        std::string text =
            message("ANE program (", architecture_, ", ",
                    lowering_.dialect == mil_dialect::ios18 ? "program(1.3)/ios18" : "program(1.0)/ios16",
                    "): ", steps_.size(), " segment(s), ", compiled_, " compiled, ", cache_hits_,
                    " loaded from the cache, ", shared_surfaces_,
                    " intermediate(s) passed between ANE programs by IOSurface\n");
        for (const auto& fallback : fallbacks_) {
            text += message("host: ", describe_node(body_, fallback.node), ": ", fallback.reason, "\n");
        }
        for (std::size_t i = 0; i < steps_.size(); ++i) {
            const auto& s = steps_[i];
            if (s.cpu) {
                text += message("segment ", i, ": CPU\n", s.cpu->dump());
            } else {
                text +=
                    message("segment ", i, ": ANE (", s.ane->key.substr(0, 16), ")\n", s.ane->lowered.mil);
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
                auto guard = s.ane->input_surfaces[i]->lock(false);
                pack_region(layout, starts, length, mirror, guard.data());
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

private:
    struct ane_step {
        lowered_segment lowered;
        std::string key;
        std::optional<ane_model> model;
        // In lowered.inputs / lowered.outputs order. An input may be the very surface an earlier ANE program
        // writes the value to (input_shared): nothing is copied between the two programs.
        std::vector<std::shared_ptr<io_surface>> input_surfaces;
        std::vector<std::shared_ptr<io_surface>> output_surfaces;
        std::vector<bool> input_shared;
        std::vector<bool> output_to_host;  // false when only later ANE programs read it, through its surface
        std::optional<ane_request> request;
        std::vector<float> scratch;
    };
    struct step {
        segment_device device = segment_device::cpu;
        std::vector<value_id> inputs;
        std::vector<value_id> outputs;
        std::unique_ptr<cpu::cpu_program> cpu;
        std::unique_ptr<ane_step> ane;
    };

    static std::string segment_input_name(value_id id) { return message("v", id); }

    [[nodiscard]] host_tensor& mirror_of(value_id id) { return mirrors_.at(id); }
    [[nodiscard]] const host_tensor& mirror_of(value_id id) const { return mirrors_.at(id); }

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
                    auto guard = s.ane->input_surfaces[k]->lock(false);
                    pack(s.ane->lowered.inputs[k], mirror.values<float>().data(), guard.data());
                }
            }
        }
    }

    std::unique_ptr<ane_step> build_ane_step(const segment& seg, std::size_t index) {
        auto s = std::make_unique<ane_step>();
        s->lowered = lower(body_, seg.nodes, seg.inputs, seg.outputs, lowering_);
        s->key = program_key(s->lowered.mil, s->lowered.weights, architecture_);
        const std::string where = message("compile: ANE program ", index, " (", seg.nodes.size(), " ops)");
        s->model.emplace(ane_model::create(s->lowered.mil, s->lowered.weights));
        ane_model& model = *s->model;
        bool from_cache = false;
        if (!cache_root_.empty()) {
            const std::filesystem::path dir = cache_root_ / s->key;
            std::error_code ignored;
            std::filesystem::create_directories(dir, ignored);
            if (model.set_cache_directory(dir) && model.compiled_model_exists()) from_cache = true;
        }
        try {
            if (!from_cache) {
                reserve_compile();
                model.compile();
                ++compiled_;
            } else {
                ++cache_hits_;
            }
            model.load();
        } catch (const error& e) {
            throw error(message(where, ": ", e.what()));
        }
        bind_surfaces(*s, model.layout(), where);
        return s;
    }

    // Allocates the surfaces and checks the compiled program's symbols against the lowering's: bound by name
    // in the order the program reports (RUNTIME.md §3: the compiler sorts symbols by name). An input that an
    // earlier ANE program produced in the same layout and allocation size reuses that program's output
    // surface.
    void bind_surfaces(ane_step& s, const model_layout& layout, const std::string& where) {
        auto allocate = [&](const std::vector<surface_layout>& wanted,
                            const std::vector<symbol_layout>& reported,
                            std::vector<std::shared_ptr<io_surface>>& surfaces, std::vector<bool>* shared,
                            std::vector<const io_surface*>& bound, const char* kind) {
            if (wanted.size() != reported.size()) {
                throw error(message(where, ": the compiled program has ", reported.size(), " ", kind,
                                    "s, the lowering made ", wanted.size()));
            }
            // Every surface of one kind gets the same allocation size (RUNTIME.md §3, ORI #12).
            std::size_t alloc = min_surface_bytes;
            for (const auto& w : wanted)
                alloc = std::max(
                    alloc, round_up(static_cast<std::size_t>(w.channels) * w.row_stride, surface_granule));
            surfaces.clear();
            for (const auto& w : wanted) {
                const auto produced = produced_.find(w.value);
                if (shared != nullptr && produced != produced_.end() && produced->second.alloc == alloc &&
                    produced->second.layout.channels == w.channels &&
                    produced->second.layout.width == w.width && produced->second.layout.order == w.order &&
                    produced->second.layout.row_stride == w.row_stride) {
                    surfaces.push_back(produced->second.surface);
                    shared->push_back(true);
                    ++shared_surfaces_;
                    continue;
                }
                surfaces.push_back(std::make_shared<io_surface>(
                    io_surface::create(w.channels, w.width, 2, w.row_stride, alloc)));
                if (shared != nullptr) shared->push_back(false);
            }
            if (shared == nullptr) {
                for (std::size_t i = 0; i < wanted.size(); ++i)
                    produced_[wanted[i].value] = {surfaces[i], wanted[i], alloc};
            }
            bound.assign(reported.size(), nullptr);
            for (std::size_t i = 0; i < reported.size(); ++i) {
                const auto& r = reported[i];
                const auto it = std::find_if(wanted.begin(), wanted.end(),
                                             [&](const surface_layout& w) { return w.symbol == r.name; });
                if (it == wanted.end()) {
                    throw error(message(where, ": the compiled program reports ", kind, " symbol '", r.name,
                                        "', which the lowering did not declare"));
                }
                if (r.channels != it->channels || r.width != it->width || !r.fp16 ||
                    (r.row_stride != 0 && r.row_stride != it->row_stride)) {
                    throw error(message(where, ": ", kind, " '", r.name,
                                        "': the compiled program expects [1, ", r.channels, ", ", r.height,
                                        ", ", r.width, "] ", r.fp16 ? "fp16" : "fp32", " with row stride ",
                                        r.row_stride, ", the lowering laid out [1, ", it->channels, ", 1, ",
                                        it->width, "] fp16 with row stride ", it->row_stride));
                }
                bound[i] = surfaces[static_cast<std::size_t>(it - wanted.begin())].get();
            }
        };
        std::vector<const io_surface*> inputs;
        std::vector<const io_surface*> outputs;
        allocate(s.lowered.inputs, layout.inputs, s.input_surfaces, &s.input_shared, inputs, "input");
        allocate(s.lowered.outputs, layout.outputs, s.output_surfaces, nullptr, outputs, "output");
        s.request.emplace(s.model->make_request(inputs, outputs));
    }

    // Once every segment is compiled, the program needs neither the weights it handed to the compiler (the
    // model's files hold them) nor the constants the segments took copies of: a large model would otherwise
    // keep its weights in memory twice more for the program's lifetime. Constants that are outputs stay.
    void release_build_data() {
        for (auto& s : steps_) {
            if (s.ane) std::vector<weight_file>().swap(s.ane->lowered.weights);
        }
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

    // fp32 values into an fp16 surface laid out as the lowering chose: rows ([1, leading, 1, last]) or
    // columns ([1, last, 1, leading], the channels-first form, transposed here while converting). Each row
    // converts in one vectorised call; a transposed row is gathered first.
    static void pack(const surface_layout& layout, const float* values, std::byte* base) {
        const auto channels = static_cast<std::size_t>(layout.channels);
        const auto width = static_cast<std::size_t>(layout.width);
        std::vector<float> gathered(layout.order == surface_order::rows ? 0 : width);
        for (std::size_t c = 0; c < channels; ++c) {
            auto* row = reinterpret_cast<half*>(base + c * layout.row_stride);
            const float* source = values + c * width;
            if (layout.order == surface_order::columns) {
                for (std::size_t w = 0; w < width; ++w)
                    gathered[w] = values[w * channels + c];
                source = gathered.data();
            }
            convert_f32_to_f16(source, width, row);
        }
    }

    // Runs of `length` elements of the full input starting at `starts` (f32 values in `values`, indexed as
    // the input) into a surface packed as pack() packs the whole: in rows order a run converts row by row, in
    // columns order element by element (each lands in another row). Nothing else of the surface is touched.
    static void pack_region(const surface_layout& layout, std::span<const std::size_t> starts,
                            std::size_t length, const float* values, std::byte* base) {
        const auto channels = static_cast<std::size_t>(layout.channels);
        const auto width = static_cast<std::size_t>(layout.width);
        const std::size_t last = layout.order == surface_order::rows ? width : channels;
        for (const std::size_t start : starts) {
            std::size_t f = start;
            const std::size_t end = f + length;
            if (layout.order == surface_order::rows) {
                while (f < end) {
                    const std::size_t c = f / last, w = f % last;
                    const std::size_t n = std::min(end - f, last - w);
                    convert_f32_to_f16(values + f, n,
                                       reinterpret_cast<half*>(base + c * layout.row_stride) + w);
                    f += n;
                }
            } else {
                for (; f < end; ++f) {
                    const std::size_t c = f % last, w = f / last;
                    convert_f32_to_f16(values + f, 1,
                                       reinterpret_cast<half*>(base + c * layout.row_stride) + w);
                }
            }
        }
    }

    static void unpack(const surface_layout& layout, const std::byte* base, float* values) {
        const auto channels = static_cast<std::size_t>(layout.channels);
        const auto width = static_cast<std::size_t>(layout.width);
        std::vector<float> row_values(layout.order == surface_order::rows ? 0 : width);
        for (std::size_t c = 0; c < channels; ++c) {
            const void* row = base + c * layout.row_stride;
            if (layout.order == surface_order::rows) {
                convert_to_f32(dtype::f16, row, width, values + c * width);
                continue;
            }
            convert_to_f32(dtype::f16, row, width, row_values.data());
            for (std::size_t w = 0; w < width; ++w)
                values[w * channels + c] = row_values[w];
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
            auto guard = s.input_surfaces[i]->lock(false);
            pack(layout, s.scratch.data(), guard.data());
        }
        s.model->evaluate(*s.request);
        for (std::size_t i = 0; i < s.lowered.outputs.size(); ++i) {
            if (!s.output_to_host[i]) continue;
            const auto& layout = s.lowered.outputs[i];
            host_tensor out(dtype::f32, layout.shape);
            auto guard = s.output_surfaces[i]->lock(true);
            unpack(layout, guard.data(), out.values<float>().data());
            values[layout.value] = std::move(out);
        }
    }

    compile_options options_;
    graph_body body_;
    lowering_options lowering_;
    std::string architecture_;
    std::filesystem::path cache_root_;
    std::vector<io_info> inputs_;
    std::vector<value_id> input_ids_;                    // the input node of each of inputs_
    std::vector<bool> resident_;                         // per node: a resident input
    std::unordered_map<value_id, host_tensor> mirrors_;  // per resident input: its f32 contents
    std::vector<io_info> outputs_;
    std::vector<host_fallback> fallbacks_;
    std::vector<step> steps_;
    struct produced_surface {
        std::shared_ptr<io_surface> surface;
        surface_layout layout;
        std::size_t alloc = 0;
    };
    std::unordered_map<value_id, produced_surface> produced_;  // while compiling: ANE outputs by value
    std::size_t compiled_ = 0;
    std::size_t cache_hits_ = 0;
    std::size_t shared_surfaces_ = 0;
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
