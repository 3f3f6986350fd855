// anvil: the CPU backend's program — the graph after the passes, one prepared kernel per node, and one arena
// laid out by the memory plan, so a run converts the inputs in, runs the kernels in order and converts the
// outputs out without allocating anything else. A resident input keeps its arena slot for the program's
// life; write_input writes it in place and a run does not touch it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "anvil/backend/cpu/kernels.hpp"
#include "anvil/backend/cpu/memory_plan.hpp"
#include "anvil/backend/cpu/numerics.hpp"
#include "anvil/backend/program.hpp"
#include "anvil/backend/resident_weights.hpp"
#include "anvil/core/convert.hpp"
#include "anvil/core/thread_pool.hpp"
#include "anvil/graph/dump.hpp"
#include "anvil/graph/passes.hpp"

namespace anvil::detail::cpu {

// Integers are held exactly as floats on the CPU; this is the largest magnitude for which that is exact.
inline constexpr double exact_integer_limit = 16777216.0;  // 2^24

// Elements of any dtype as f32, integers range-checked (`what` names the tensor in the error).
inline void to_compute_floats(const host_tensor& tensor, float* out, std::string_view what) {
    const std::size_t count = tensor.element_count();
    if (count == 0) return;
    if (is_floating(tensor.type())) {
        convert_to_f32(tensor.type(), tensor.raw(), count, out);
        return;
    }
    convert_to_f32(tensor.type(), tensor.raw(), count, out);
    // convert_to_f32 rounds large integers; check the exact values.
    auto check = [&](auto values) {
        for (std::size_t i = 0; i < count; ++i) {
            const auto v = values[i];
            if (static_cast<double>(v) > exact_integer_limit ||
                static_cast<double>(v) < -exact_integer_limit) {
                throw error(message(what, ": integer ", +v, " at index ", i,
                                    " is beyond 2^24, the CPU backend's exact integer range"));
            }
        }
    };
    switch (tensor.type()) {
        case dtype::i64:
            check(tensor.values<std::int64_t>());
            break;
        case dtype::u64:
            check(tensor.values<std::uint64_t>());
            break;
        case dtype::i32:
            check(tensor.values<std::int32_t>());
            break;
        case dtype::u32:
            check(tensor.values<std::uint32_t>());
            break;
        default:
            break;  // narrower integers always fit
    }
}

// Compute values (float, or double in a float64_program) into a host tensor of `type`: each value rounded
// once to a floating type's precision (a double narrowed first as cast_value does, so f16 and bf16 round
// once), integers truncated, booleans nonzero.
template <class T>
host_tensor from_compute_values(const T* values, dtype type, const dims& shape) {
    host_tensor out(type, shape);
    const std::size_t count = out.element_count();
    auto fill = [&](auto typed) {
        using element = typename decltype(typed)::element_type;
        for (std::size_t i = 0; i < count; ++i)
            typed[i] = static_cast<element>(values[i]);
    };
    switch (type) {
        case dtype::f32:
            if constexpr (std::is_same_v<T, float>)
                std::memcpy(out.raw(), values, count * sizeof(float));
            else
                fill(out.values<float>());
            break;
        case dtype::f64:
            if constexpr (std::is_same_v<T, double>) {
                if (count != 0) std::memcpy(out.raw(), values, count * sizeof(double));
            } else {
                fill(out.values<double>());
            }
            break;
        case dtype::f16:
            if constexpr (std::is_same_v<T, float>) {
                convert_f32_to_f16(values, count, out.values<half>().data());
            } else {
                for (std::size_t i = 0; i < count; ++i)
                    out.values<half>()[i] = half(narrowed_to_round_again(values[i]));
            }
            break;
        case dtype::bf16:
            if constexpr (std::is_same_v<T, float>) {
                convert_f32_to_bf16(values, count, out.values<bfloat16>().data());
            } else {
                for (std::size_t i = 0; i < count; ++i)
                    out.values<bfloat16>()[i] = bfloat16(narrowed_to_round_again(values[i]));
            }
            break;
        case dtype::i64:
            fill(out.values<std::int64_t>());
            break;
        case dtype::i32:
            fill(out.values<std::int32_t>());
            break;
        case dtype::i16:
            fill(out.values<std::int16_t>());
            break;
        case dtype::i8:
            fill(out.values<std::int8_t>());
            break;
        case dtype::u64:
            fill(out.values<std::uint64_t>());
            break;
        case dtype::u32:
            fill(out.values<std::uint32_t>());
            break;
        case dtype::u16:
            fill(out.values<std::uint16_t>());
            break;
        case dtype::u8:
            fill(out.values<std::uint8_t>());
            break;
        case dtype::boolean:
            for (std::size_t i = 0; i < count; ++i)
                out.values<bool>()[i] = values[i] != T(0);
            break;
        case dtype::f8_e4m3:
        case dtype::f8_e5m2:
            throw unsupported_error(message("CPU backend: no conversion to ", dtype_name(type), " outputs"));
    }
    return out;
}

// f32 compute values into a host tensor of `type` (rounding to its precision; integers truncate).
inline host_tensor from_compute_floats(const float* values, dtype type, const dims& shape) {
    return from_compute_values(values, type, shape);
}

// Rounds f32 values to the precision of `type` in place: an f16 value computed in f32 is still an f16 value.
inline void round_to_type(float* values, std::size_t count, dtype type) {
    if (type == dtype::f16) {
        for (std::size_t i = 0; i < count; ++i)
            values[i] = static_cast<float>(half(values[i]));
    } else if (type == dtype::bf16) {
        for (std::size_t i = 0; i < count; ++i)
            values[i] = static_cast<float>(bfloat16(values[i]));
    }
}

// Elements of any dtype as doubles (exact for every floating type), integers range-checked (`what` names the
// tensor in the error).
inline void to_compute_doubles(const host_tensor& tensor, double* out, std::string_view what) {
    const std::size_t count = tensor.element_count();
    if (count == 0) return;
    const auto widen = [&](auto values) {
        for (std::size_t i = 0; i < count; ++i)
            out[i] = static_cast<double>(values[i]);
    };
    const auto widen_checked = [&](auto values) {
        // Compared as integers: 2^53 + 1 converts to the double 2^53.
        constexpr std::int64_t limit = std::int64_t{1} << 53;
        for (std::size_t i = 0; i < count; ++i) {
            const auto v = values[i];
            bool beyond = false;
            if constexpr (std::is_signed_v<decltype(+v)>)
                beyond = v > limit || v < -limit;
            else
                beyond = v > static_cast<std::uint64_t>(limit);
            if (beyond) {
                throw error(message(what, ": integer ", +v, " at index ", i,
                                    " is beyond 2^53, the float64 program's exact integer range"));
            }
            out[i] = static_cast<double>(v);
        }
    };
    switch (tensor.type()) {
        case dtype::f64:
            std::memcpy(out, tensor.raw(), count * sizeof(double));
            return;
        case dtype::i64:
            return widen_checked(tensor.values<std::int64_t>());
        case dtype::u64:
            return widen_checked(tensor.values<std::uint64_t>());
        case dtype::i32:
            return widen(tensor.values<std::int32_t>());
        case dtype::u32:
            return widen(tensor.values<std::uint32_t>());
        default: {
            // Every other type (f32, f16, bf16, fp8, narrower integers, bool) is exact in float.
            std::vector<float> floats(count);
            convert_to_f32(tensor.type(), tensor.raw(), count, floats.data());
            for (std::size_t i = 0; i < count; ++i)
                out[i] = floats[i];
            return;
        }
    }
}

// Rounds double values to the precision of a floating `type` in place (f32, f16, bf16, fp8); f64 and the
// integers (whose ops produce whole numbers) are left as they are.
inline void round_to_type(double* values, std::size_t count, dtype type) {
    if (type == dtype::f64 || !is_floating(type)) return;
    for (std::size_t i = 0; i < count; ++i)
        values[i] = cast_value(values[i], type);
}

// A constant as the kernels read it, in f32 (fp16-rounded for ane_numerics): an aligned f32 constant read in
// place, else a converted copy.
struct f32_constant {
    host_tensor source;  // keeps the constant's storage, and so its address, alive while the copy is shared
    std::vector<float> converted;
    const float* values = nullptr;  // source's own data, or converted's
    std::size_t count = 0;
};

// An f32 copy (or view) is shared by every program built from the same constant, as packed weights are
// (shared_packed_weight): a recipe compiles one program per input shape, and each would otherwise hold its
// own copy of every weight the kernels read as f32 — an embedding table, 47 MB for a MiniLM, per shape. Keyed
// by the constant's address, type and size and the rounding; a live entry keeps that storage alive, so no
// other data can appear at the address while the entry is used.
inline std::shared_ptr<const f32_constant> shared_f32_constant(const host_tensor& data, bool fp16_rounded,
                                                               std::string_view what) {
    using key = std::tuple<const void*, dtype, std::size_t, bool>;
    static std::mutex mutex;
    static std::map<key, std::weak_ptr<const f32_constant>> cache;
    const key id{data.raw(), data.type(), data.element_count(), fp16_rounded};
    {
        const std::lock_guard lock(mutex);
        if (auto found = cache.find(id); found != cache.end()) {
            if (auto shared = found->second.lock()) return shared;
        }
    }
    auto copy = std::make_shared<f32_constant>();
    copy->source = data;
    copy->count = data.element_count();
    if (data.type() == dtype::f32 && !fp16_rounded &&
        reinterpret_cast<std::uintptr_t>(data.raw()) % alignof(float) == 0) {
        copy->values = static_cast<const float*>(data.raw());  // already what the kernels read
    } else {
        copy->converted.resize(copy->count);
        to_compute_floats(data, copy->converted.data(), what);
        if (fp16_rounded) round_to_fp16(copy->converted.data(), copy->converted.size());
        copy->values = copy->converted.data();
    }
    const std::lock_guard lock(mutex);
    if (auto found = cache.find(id); found != cache.end()) {
        if (auto shared = found->second.lock()) return shared;  // another thread made it meanwhile
    }
    std::erase_if(cache, [](const auto& entry) { return entry.second.expired(); });
    cache[id] = copy;
    return copy;
}

// Folds constants with the reference kernels: in double where the node reads or makes a float64 value (so
// a float64 constant is folded without rounding), else in float as the kernels would compute it.
inline host_tensor evaluate_constant(const node& n, std::span<const host_tensor> operands) {
    bool wide = n.result.type == dtype::f64;
    for (const auto& operand : operands)
        wide = wide || operand.type() == dtype::f64;
    const auto evaluate = [&](auto element) {
        using T = decltype(element);
        std::vector<std::vector<T>> storage;
        std::vector<basic_const_tensor_span<T>> spans;
        for (const auto& operand : operands) {
            storage.emplace_back(operand.element_count());
            if constexpr (std::is_same_v<T, double>)
                to_compute_doubles(operand, storage.back().data(), "constant");
            else
                to_compute_floats(operand, storage.back().data(), "constant");
        }
        for (std::size_t i = 0; i < operands.size(); ++i)
            spans.push_back({storage[i].data(), operands[i].shape()});
        std::vector<T> result(static_cast<std::size_t>(n.result.shape.element_count()));
        evaluate_reference(n, spans, basic_tensor_span<T>{result.data(), n.result.shape});
        return from_compute_values(result.data(), n.result.type, n.result.shape);
    };
    return wide ? evaluate(0.0) : evaluate(0.0f);
}

class cpu_program final : public program_impl {
public:
    cpu_program(graph_body body, const compile_options& options) : options_(options) {
        if (options.threads != 0) own_pool_ = std::make_unique<thread_pool>(options.threads);
        body = eliminate_dead_code(body);
        if (options.fold_constants) body = fold_constants(body, evaluate_constant);
        if (options.fold_batch_norm) body = fold_batch_norm(body);
        // ane_numerics rounds each op's output, so ops stay separate there.
        if (options.fuse_elementwise && !options.ane_numerics) body = fuse_elementwise(body);
        body_ = std::move(body);
        prepare();
    }

    std::vector<host_tensor> run(std::span<const named_tensor> inputs) override {
        std::lock_guard lock(mutex_);
        thread_pool& threads = pool();
        bind_inputs(inputs);
        report_ = {};
        std::vector<const_tensor_span> operand_spans;
        for (std::size_t id = 0; id < body_.nodes.size(); ++id) {
            const node& n = body_.nodes[id];
            if (n.kind == op::input || n.kind == op::constant || !needed_[id] || alias_[id] != no_value)
                continue;
            operand_spans.clear();
            for (const value_id input : n.inputs)
                operand_spans.push_back({data_of(input), body_.nodes[input].result.shape});
            float* out = buffer_of(static_cast<value_id>(id));
            kernels_[id].run(operand_spans, {out, n.result.shape}, threads, workspace_);
            finish_value(static_cast<value_id>(id), out);
        }
        std::vector<host_tensor> results;
        for (const value_id id : body_.outputs) {
            const node& n = body_.nodes[id];
            results.push_back(from_compute_floats(data_of(id), n.result.type, n.result.shape));
        }
        return results;
    }

    [[nodiscard]] const std::vector<io_info>& inputs() const override { return inputs_; }
    [[nodiscard]] const std::vector<io_info>& outputs() const override { return outputs_; }
    [[nodiscard]] numerics_report numerics() const override {
        std::lock_guard lock(mutex_);
        return report_;
    }
    [[nodiscard]] std::string dump() const override { return anvil::dump(body_); }

    // A resident input's slot in the arena is its own for the program's life (plan_buffers pins it), so a
    // write lands where the kernels read it, converted and rounded as bind_inputs converts a run's inputs.
    void write_input(std::string_view name, std::span<const std::int64_t> offsets,
                     const host_tensor& part) override {
        const write_region region = check_write(inputs_, name, offsets, part);
        std::vector<float> values(part.element_count());
        to_compute_floats(part, values.data(), message("program::write_input: input '", name, "'"));
        const node& n = body_.nodes[input_ids_[region.input]];
        round_to_type(values.data(), values.size(), n.result.type);
        if (options_.ane_numerics && is_floating(n.result.type)) round_to_fp16(values.data(), values.size());
        const std::vector<std::size_t> starts = region.run_starts();
        const std::size_t length = region.run_length();
        std::lock_guard lock(mutex_);
        float* slot = buffer_of(input_ids_[region.input]);
        for (std::size_t k = 0; k < starts.size(); ++k)
            std::memcpy(slot + starts[k], values.data() + k * length, length * sizeof(float));
    }

    [[nodiscard]] host_tensor read_input(std::string_view name) const override {
        const std::size_t index = find_resident(inputs_, name, "program::read_input");
        std::lock_guard lock(mutex_);
        const value_id id = input_ids_[index];
        return from_compute_floats(arena_ + plan_.offsets[buffer_index_[id]] / sizeof(float), dtype::f32,
                                   inputs_[index].shape);
    }

    // The bytes of the arena that holds every intermediate value.
    [[nodiscard]] std::size_t arena_bytes() const noexcept { return plan_.arena_bytes; }

private:
    [[nodiscard]] thread_pool& pool() const { return own_pool_ ? *own_pool_ : thread_pool::global(); }

    void prepare() {
        const std::size_t count = body_.nodes.size();
        kernels_.resize(count);
        std::vector<bool> needs_f32(count, false);
        // A cast of a constant to f32 computes nothing on the CPU, where every value is f32 already: it reads
        // the constant's f32 copy (and kernels that convert weights while packing look through it).
        alias_.assign(count, no_value);
        for (std::size_t id = 0; id < count; ++id) {
            const node& n = body_.nodes[id];
            if (n.kind == op::cast && (n.attrs.to == dtype::f32 || n.attrs.to == dtype::f64) &&
                body_.nodes[n.inputs[0]].kind == op::constant &&
                is_floating(body_.nodes[n.inputs[0]].result.type)) {
                alias_[id] = n.inputs[0];
            }
        }
        std::size_t workspace_floats = 0;
        for (std::size_t id = 0; id < count; ++id) {
            const node& n = body_.nodes[id];
            if (n.kind == op::input) {
                inputs_.push_back({n.name, n.result.type, n.result.shape});
                input_ids_.push_back(static_cast<value_id>(id));
            }
        }
        mark_resident(inputs_, options_.resident_inputs);
        for (std::size_t id = 0; id < count; ++id) {
            const node& n = body_.nodes[id];
            if (n.kind == op::input || n.kind == op::constant || alias_[id] != no_value) continue;
            kernels_[id] = prepare_kernel(body_, static_cast<value_id>(id), options_.kernels, pool().size(),
                                          options_.int8_activations);
            workspace_floats = std::max(workspace_floats, kernels_[id].workspace_floats);
        }
        for (std::size_t i = 0; i < body_.outputs.size(); ++i) {
            const node& n = body_.nodes[body_.outputs[i]];
            needs_f32[body_.outputs[i]] = true;
            outputs_.push_back({"output" + std::to_string(i), n.result.type, n.result.shape});
        }
        // A node is computed when an output or a computed node reads its f32 value: a dequantisation whose
        // only reader is a GEMM that dequantises while packing is skipped.
        needed_.assign(count, false);
        for (const value_id id : body_.outputs)
            needed_[id] = true;
        for (std::size_t id = count; id-- > 0;) {
            const node& n = body_.nodes[id];
            if (n.kind == op::input) needed_[id] = true;
            if (!needed_[id] || n.kind == op::constant || n.kind == op::input) continue;
            for (std::size_t k = 0; k < n.inputs.size(); ++k) {
                const auto& natively = kernels_[id].reads_natively;
                if (k >= natively.size() || !natively[k]) needed_[n.inputs[k]] = true;
            }
        }
        for (std::size_t id = 0; id < count; ++id) {
            const node& n = body_.nodes[id];
            if (!needed_[id] || n.kind == op::constant || n.kind == op::input) continue;
            for (std::size_t k = 0; k < n.inputs.size(); ++k) {
                const auto& natively = kernels_[id].reads_natively;
                if (k >= natively.size() || !natively[k]) needs_f32[n.inputs[k]] = true;
            }
        }
        // Constants read as f32 get an f32 copy (in ane_numerics mode rounded to fp16, as ANE weights are),
        // shared with other programs built from the same constant.
        constant_values_.resize(count);
        for (std::size_t id = 0; id < count; ++id) {
            const node& n = body_.nodes[id];
            if (n.kind != op::constant || !needs_f32[id]) continue;
            constant_values_[id] =
                shared_f32_constant(n.data, options_.ane_numerics, n.name.empty() ? "constant" : n.name);
        }
        // What the program reads weights from while it runs, for resident_weight_bytes(): the f32 copies and
        // the buffers kernels read their constants from.
        for (const auto& copy : constant_values_) {
            if (copy) residency_.emplace_back(copy->values, copy->count * sizeof(float), weight_device::cpu);
        }
        for (std::size_t id = 0; id < count; ++id) {
            if (!needed_[id]) continue;
            for (const auto& [address, bytes] : kernels_[id].weight_buffers)
                residency_.emplace_back(address, bytes, weight_device::cpu);
        }
        plan_buffers();
        workspace_storage_.assign(workspace_floats + buffer_alignment / sizeof(float), 0.0f);
        workspace_ = std::span<float>(aligned(workspace_storage_.data()), workspace_floats);
    }

    // Reshape writes nothing: its value is its operand's buffer under another shape, so the two share one
    // request whose lifetime covers both.
    void plan_buffers() {
        const std::size_t count = body_.nodes.size();
        buffer_index_.assign(count, no_value);
        std::vector<buffer_request> requests;
        const auto users = users_of(body_);
        for (std::size_t id = 0; id < count; ++id) {
            const node& n = body_.nodes[id];
            if (n.kind == op::constant || !needed_[id]) continue;
            if (alias_[id] != no_value) continue;
            const bool aliases = n.kind == op::reshape && buffer_index_[n.inputs[0]] != no_value;
            std::size_t index;
            if (aliases) {
                index = buffer_index_[n.inputs[0]];
            } else {
                index = requests.size();
                requests.push_back(
                    {static_cast<std::size_t>(n.result.shape.element_count()) * sizeof(float), id, id});
            }
            buffer_index_[id] = static_cast<value_id>(index);
            for (const value_id user : users[id]) {
                if (needed_[user])
                    requests[index].last_use = std::max<std::size_t>(requests[index].last_use, user);
            }
        }
        for (const value_id id : body_.outputs) {
            if (buffer_index_[id] != no_value) requests[buffer_index_[id]].last_use = count;
        }
        for (std::size_t id = 0; id < count; ++id) {
            if (body_.nodes[id].kind == op::input) requests[buffer_index_[id]].first_use = 0;
        }
        // A resident input lives from compile to the program's end: no other value may ever share its bytes
        // (a reshape of it shares its request and only reads it; no kernel writes into its operands).
        for (std::size_t i = 0; i < inputs_.size(); ++i) {
            if (inputs_[i].resident) requests[buffer_index_[input_ids_[i]]].last_use = count;
        }
        plan_ = plan_memory(requests);
        arena_storage_.assign(plan_.arena_bytes / sizeof(float) + buffer_alignment / sizeof(float), 0.0f);
        arena_ = aligned(arena_storage_.data());
    }

    static float* aligned(float* p) {
        const auto address = reinterpret_cast<std::uintptr_t>(p);
        const auto rounded = (address + buffer_alignment - 1) / buffer_alignment * buffer_alignment;
        return p + (rounded - address) / sizeof(float);
    }

    [[nodiscard]] float* buffer_of(value_id id) {
        return arena_ + plan_.offsets[buffer_index_[id]] / sizeof(float);
    }
    [[nodiscard]] const float* data_of(value_id id) {
        if (alias_[id] != no_value) return data_of(alias_[id]);
        if (body_.nodes[id].kind == op::constant)
            return constant_values_[id] ? constant_values_[id]->values : nullptr;
        if (buffer_index_[id] == no_value) return nullptr;  // read natively by its only readers
        return buffer_of(id);
    }

    void bind_inputs(std::span<const named_tensor> given) {
        const std::vector<std::size_t> order = match_inputs(given, inputs_);
        for (std::size_t i = 0; i < inputs_.size(); ++i) {
            if (inputs_[i].resident) continue;  // bound already, written in place by write_input
            const value_id id = input_ids_[i];
            const node& n = body_.nodes[id];
            const named_tensor& input = given[order[i]];
            float* out = buffer_of(id);
            to_compute_floats(input.tensor, out, message("program::run: input '", input.name, "'"));
            round_to_type(out, input.tensor.element_count(), n.result.type);
            finish_value(id, out);
        }
    }

    // After a node computed its value: the fp16 rounding and overflow report of ane_numerics, and rounding
    // to the node's declared precision otherwise.
    void finish_value(value_id id, float* values) {
        const node& n = body_.nodes[id];
        const auto count = static_cast<std::size_t>(n.result.shape.element_count());
        if (options_.ane_numerics && is_floating(n.result.type)) {
            const auto rounding = round_to_fp16(values, count);
            if (rounding.overflowed != 0) {
                report_.overflows.push_back(
                    {id, n.kind, n.name, n.result.shape, rounding.overflowed, count, rounding.max_abs});
            }
        } else if (n.kind != op::input) {
            round_to_type(values, count, n.result.type);
        }
    }

    compile_options options_;
    graph_body body_;
    std::unique_ptr<thread_pool> own_pool_;
    std::vector<prepared_kernel> kernels_;
    std::vector<bool> needed_;
    std::vector<value_id> alias_;  // a cast of a constant: the constant it reads
    std::vector<std::shared_ptr<const f32_constant>> constant_values_;  // null: not read as f32
    std::vector<weight_residency> residency_;  // constant_values_ and the kernels' weight_buffers
    std::vector<value_id> buffer_index_;
    memory_plan plan_;
    std::vector<float> arena_storage_;
    float* arena_ = nullptr;
    std::vector<float> workspace_storage_;
    std::span<float> workspace_;
    std::vector<io_info> inputs_;
    std::vector<value_id> input_ids_;  // the input node of each of inputs_
    std::vector<io_info> outputs_;
    numerics_report report_;
    mutable std::mutex mutex_;
};

}  // namespace anvil::detail::cpu
