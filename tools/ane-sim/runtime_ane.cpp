// anvil's ANE simulator: the AppleNeuralEngine.framework part. The `_ANE*` classes with the selectors and C
// signatures of RUNTIME.md §2 (table), §3 ("the rigorous method") and §7, checking the calling sequence and
// the surface rules of CONSTRAINTS.md, and handing the MIL text and weights to mil_program (the MIL part).
#include <algorithm>
#include <anvil/core/half.hpp>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "runtime_ane.hpp"

namespace anvil_sim {

namespace {

struct model_object : object {
    static constexpr const char* class_name = "_ANEModel";
    ~model_object() { release_object(owner, "_ANEModel dealloc"); }
    in_memory_model_object* owner = nullptr;
};

struct request_object : object {
    static constexpr const char* class_name = "_ANERequest";
    ~request_object() {
        for (object* held : {static_cast<object*>(inputs), static_cast<object*>(input_indices),
                             static_cast<object*>(outputs), static_cast<object*>(output_indices),
                             procedure_index, weights_buffer})
            release_object(held, "_ANERequest dealloc");
    }
    array_object* inputs = nullptr;
    array_object* input_indices = nullptr;
    array_object* outputs = nullptr;
    array_object* output_indices = nullptr;
    object* procedure_index = nullptr;
    object* weights_buffer = nullptr;
    std::vector<std::vector<std::byte>> previous_inputs;  // data bytes at the last evaluation, per symbol
};

}  // namespace

in_memory_model_object::~in_memory_model_object() {
    if (loaded) {
        record_violation(
            "_ANEInMemoryModel " + hex_identifier +
            ": model released while loaded (call unloadWithQoS:error: first; what the framework does "
            "with a loaded program whose model is deallocated is unknown)" +
            cite(rule::call_order));
        --sim().live_programs;
    }
    release_object(descriptor, "_ANEInMemoryModel dealloc");
    release_object(model_url, "_ANEInMemoryModel dealloc");
}

namespace {

std::string with_prefix(const char* prefix, const std::string& message) {
    return message.rfind(prefix, 0) == 0 ? message : prefix + message;
}

void report_program_warnings(const mil_program& program) {
    std::string text = program.warnings();
    std::size_t start = 0;
    while (start < text.size()) {
        std::size_t end = text.find('\n', start);
        if (end == std::string::npos) end = text.size();
        std::string line = text.substr(start, end - start);
        if (!line.empty() && sim().warnings_seen.insert(line).second) record_violation("warning: " + line);
        start = end + 1;
    }
}

void check_options(id options, const char* method) {
    if (as<dictionary_object>(options) == nullptr)
        record_violation(std::string("-[_ANEInMemoryModel ") + method + "]: options is " + describe(options) +
                         ", expected an NSDictionary (@{}; RUNTIME.md §2 \"Options dictionaries\")");
}

bool room_for_another_program(void** error) {
    state& s = sim();
    if (s.live_programs < s.options.max_live_programs) return true;
    set_error(
        error, codes::too_many_programs,
        "0x50004: " + std::to_string(s.live_programs) +
            " program instances are loaded (the device allows about " +
            std::to_string(s.options.max_live_programs) +
            "); unload models, and drain the autorelease pools that hold them (RUNTIME.md §2 \"Autorelease "
            "and ownership\")" +
            cite(rule::live_programs));
    return false;
}

// The weights a compile of `model` gets: its own, unless its identity was compiled before in this process
// with other weights (simulator option identity=text, RUNTIME.md §0b #21: 64 layers with one MIL text each
// ran the first layer's weights): then that first compile's, with a warning. Null: its own, and the identity
// is new (remember_identity keeps them once the compile succeeds).
const std::vector<weight_file>* known_weights(const in_memory_model_object& model) {
    state& s = sim();
    if (!s.options.identity_by_text) return nullptr;
    const auto known = s.compiled_identities.find(model.hex_identifier);
    if (known == s.compiled_identities.end()) return nullptr;
    const auto& mine = model.descriptor->weights;
    bool same = known->second.size() == mine.size();
    for (std::size_t i = 0; same && i < mine.size(); ++i)
        same = known->second[i].key == mine[i].key && known->second[i].data == mine[i].data;
    if (!same)
        record_violation(
            "warning: model " + model.hex_identifier +
            ": a program with this MIL text was compiled before with other weights; it runs those "
            "(the identity comes from the text alone: put a digest of the weights into the text)" +
            cite(rule::identity_by_text));
    return &known->second;
}

void remember_identity(const in_memory_model_object& model) {
    state& s = sim();
    if (s.options.identity_by_text)
        s.compiled_identities.try_emplace(model.hex_identifier, model.descriptor->weights);
}

std::unique_ptr<mil_program> compile_program(const in_memory_model_object& model, void** error) {
    try {
        const std::vector<weight_file>* known = known_weights(model);
        auto program = mil_program::compile(
            model.descriptor->mil_text, known != nullptr ? *known : model.descriptor->weights, sim().options);
        if (program == nullptr) throw sim_failure(codes::invalid_mil, "the MIL part returned no program");
        if (known == nullptr) remember_identity(model);
        report_program_warnings(*program);
        return program;
    } catch (const sim_failure& failure) {
        set_error(error, failure.code, with_prefix(compile_prefix, failure.what()));
    } catch (const std::exception& failure) {
        record_violation(std::string("simulator internal error during compile: ") + failure.what());
        set_error(error, codes::invalid_mil, with_prefix(compile_prefix, failure.what()));
    }
    return nullptr;
}

// +[_ANEInMemoryModelDescriptor modelWithMILText:weights:optionsPlist:]
id descriptor_create(id, sel, id mil_text, id weights, id options_plist) {
    lock_guard lock(sim().mutex);
    const std::string where = "+[_ANEInMemoryModelDescriptor modelWithMILText:weights:optionsPlist:]: ";
    auto* mil = as<data_object>(mil_text);
    if (mil == nullptr) {
        record_violation(
            where + "the MIL text is " + describe(mil_text) +
            ", expected NSData of UTF-8 bytes (an NSString crashes or fails silently, RUNTIME.md §2)" +
            cite(rule::mil_text_as_data));
        return nullptr;
    }
    auto* dictionary = as<dictionary_object>(weights);
    if (dictionary == nullptr) {
        record_violation(
            where + "the weights are " + describe(weights) +
            ", expected an NSDictionary (@{} when there are no weights; nil crashes, RUNTIME.md §2)" +
            cite(rule::weights_argument));
        return nullptr;
    }
    if (options_plist != nullptr)
        record_violation(where + "optionsPlist is " + describe(options_plist) +
                         ", expected nil (RUNTIME.md §2)" + cite(rule::weights_argument));
    std::vector<weight_file> files;
    for (std::size_t i = 0; i < dictionary->keys.size(); ++i) {
        auto* key = as<string_object>(dictionary->keys[i]);
        auto* entry = as<dictionary_object>(dictionary->values[i]);
        if (key == nullptr || entry == nullptr) {
            record_violation(where + "weights entry " + std::to_string(i) + " has key " +
                             describe(dictionary->keys[i]) + " and value " + describe(dictionary->values[i]) +
                             ", expected NSString -> @{@\"offset\": @0, @\"data\": NSData}" +
                             cite(rule::weights_entries));
            return nullptr;
        }
        auto* offset = as<number_object>(dictionary_lookup(*entry, "offset"));
        auto* data = as<data_object>(dictionary_lookup(*entry, "data"));
        if (offset == nullptr || data == nullptr || offset->is_float) {
            record_violation(
                where + "weights entry '" + key->text +
                "' must be @{@\"offset\": @0, @\"data\": <NSData: the whole file>} (RUNTIME.md §2)" +
                cite(rule::weights_entries));
            return nullptr;
        }
        if (offset->integer_value != 0)
            record_violation(where + "weights entry '" + key->text + "' has offset " +
                             std::to_string(offset->integer_value) +
                             "; every working codebase passes @0 (its meaning is unknown, RUNTIME.md §2)" +
                             cite(rule::weights_entries));
        files.push_back({key->text, offset->integer_value, data->bytes});
    }
    std::sort(files.begin(), files.end(),
              [](const weight_file& a, const weight_file& b) { return a.key < b.key; });
    auto* made = make_object<descriptor_object>();
    const auto* text = reinterpret_cast<const char*>(mil->bytes.data());
    made->mil_text.assign(text, mil->bytes.size());
    made->weights = std::move(files);
    return autorelease_object(made, "+[_ANEInMemoryModelDescriptor modelWithMILText:weights:optionsPlist:]");
}

// +[_ANEInMemoryModel inMemoryModelWithDescriptor:]
id model_create(id, sel, id descriptor) {
    lock_guard lock(sim().mutex);
    auto* typed = as<descriptor_object>(descriptor);
    if (typed == nullptr) {
        record_violation("+[_ANEInMemoryModel inMemoryModelWithDescriptor:]: the descriptor is " +
                         describe(descriptor) + ", expected an _ANEInMemoryModelDescriptor");
        return nullptr;
    }
    auto* made = make_object<in_memory_model_object>();
    made->descriptor = static_cast<descriptor_object*>(retain_object(typed, "inMemoryModelWithDescriptor:"));
    made->hex_identifier = hex_identifier_of(*typed);
    return autorelease_object(made, "+[_ANEInMemoryModel inMemoryModelWithDescriptor:]");
}

id model_hex_string_identifier(id self, sel) {
    lock_guard lock(sim().mutex);
    auto* model = receiver<in_memory_model_object>(self, "hexStringIdentifier");
    if (model == nullptr) return nullptr;
    return autorelease_object(make_string(model->hex_identifier), "-[_ANEInMemoryModel hexStringIdentifier]");
}

void model_set_model_url(id self, sel, id url) {
    lock_guard lock(sim().mutex);
    auto* model = receiver<in_memory_model_object>(self, "setModelURL:");
    if (model == nullptr) return;
    auto* typed = as<url_object>(url);
    if (url != nullptr && typed == nullptr) {
        record_violation("-[_ANEInMemoryModel setModelURL:]: the URL is " + describe(url) +
                         ", expected an NSURL");
        return;
    }
    retain_object(typed, "setModelURL:");
    release_object(model->model_url, "setModelURL:");
    model->model_url = typed;
}

bool model_compiled_model_exists(id self, sel) {
    lock_guard lock(sim().mutex);
    auto* model = receiver<in_memory_model_object>(self, "compiledModelExists");
    return model != nullptr && artefacts_exist(*model);
}

bool model_compile(id self, sel, unsigned int, id options, void** error) {
    std::unique_lock<std::recursive_mutex> lock(sim().mutex);
    auto* model = receiver<in_memory_model_object>(self, "compileWithQoS:options:error:");
    if (model == nullptr) return false;
    check_options(options, "compileWithQoS:options:error:");
    if (const std::int64_t delay = sim().options.compile_delay_ms; delay > 0) {
        // A compile takes a while (compile_delay_ms): other threads' calls run meanwhile.
        lock.unlock();
        std::this_thread::sleep_for(std::chrono::milliseconds(delay));
        lock.lock();
    }
    if (std::string problem = check_staged_files(*model); !problem.empty()) {
        set_error(error, codes::bad_call, compile_prefix + problem);
        return false;
    }
    state& s = sim();
    if (s.process_compiles >= s.options.compile_budget) {
        set_error(
            error, codes::compile_budget,
            std::string(compile_prefix) + "this process has used its " +
                std::to_string(s.options.compile_budget) +
                " compiles (the ANE compiler leaks resources, RUNTIME.md §6; restart the process, or cache "
                "with setModelURL: + compiledModelExists)" +
                cite(rule::compile_budget));
        return false;
    }
    if (!room_for_another_program(error)) return false;
    if (const std::int64_t limit = s.options.max_program_weight_bytes; limit > 0) {
        std::size_t bytes = 0;
        for (const weight_file& w : model->descriptor->weights)
            bytes += w.data.size();
        if (bytes > static_cast<std::size_t>(limit)) {
            ++s.process_compiles;  // the compiler ran, and refused
            add_counter("compiles", 1);
            set_error(error, codes::invalid_mil,
                      std::string(compile_prefix) + "the program's weights hold " + std::to_string(bytes) +
                          " bytes, past this device's limit of " + std::to_string(limit) +
                          " per program (reported from ~8 MB; split the program: simulator option "
                          "max_program_weight_bytes)" +
                          cite(rule::program_weight_limit));
            return false;
        }
    }
    ++s.process_compiles;
    add_counter("compiles", 1);
    auto program = compile_program(*model, error);
    if (program == nullptr) return false;
    model->program = std::move(program);
    if (!write_artefacts(*model)) {
        set_error(
            error, codes::bad_call,
            std::string(compile_prefix) + "cannot write the compiled model to " + model_directory(*model));
        return false;
    }
    count_ops(*model->program);
    return true;
}

bool model_load(id self, sel, unsigned int, id options, void** error) {
    lock_guard lock(sim().mutex);
    auto* model = receiver<in_memory_model_object>(self, "loadWithQoS:options:error:");
    if (model == nullptr) return false;
    check_options(options, "loadWithQoS:options:error:");
    state& s = sim();
    // ANE resources are machine-wide: a busy device fails every load for a while, whatever the model
    // (RUNTIME.md §0 #13).
    if (s.options.inject_load_failures > 0) {
        --s.options.inject_load_failures;
        set_error(error, codes::transient_load,
                  std::string(load_prefix) +
                      "transient failure: the ANE's resources are busy (injected by the simulator: "
                      "inject_load_failures, " +
                      std::to_string(s.options.inject_load_failures) +
                      " more to come); retry with exponential backoff, RUNTIME.md §0 #13" +
                      cite(rule::load_transient));
        return false;
    }
    if (model->loaded) {
        record_violation("-[_ANEInMemoryModel loadWithQoS:options:error:]: model " + model->hex_identifier +
                         " is already loaded" + cite(rule::call_order));
        return true;
    }
    const bool from_cache = model->program == nullptr;
    if (from_cache && !artefacts_exist(*model)) {
        set_error(error, codes::bad_call,
                  std::string(load_prefix) + "model " + model->hex_identifier +
                      " is not compiled (call compileWithQoS:options:error: first, or setModelURL: to a "
                      "directory whose compiled model matches, see compiledModelExists)" +
                      cite(rule::call_order));
        return false;
    }
    if (!room_for_another_program(error)) return false;
    // Loading a cached compile parses the MIL again internally, which costs no compile.
    std::unique_ptr<mil_program> cached = from_cache ? compile_program(*model, error) : nullptr;
    if (from_cache && cached == nullptr) return false;
    const mil_program& program = from_cache ? *cached : *model->program;
    if (std::string problem = load_problem(program); !problem.empty()) {
        set_error(error, codes::load_refused, load_prefix + problem);
        return false;
    }
    if (from_cache) {
        model->program = std::move(cached);
        count_ops(*model->program);
        add_counter("compile_cache_hits", 1);
    }
    model->loaded = true;
    ++s.live_programs;
    add_counter("loads", 1);
    return true;
}

bool model_unload(id self, sel, unsigned int, void** error) {
    lock_guard lock(sim().mutex);
    auto* model = receiver<in_memory_model_object>(self, "unloadWithQoS:error:");
    if (model == nullptr) return false;
    if (!model->loaded) {
        set_error(error, codes::bad_call,
                  "ANEProgramUnload() Failed: model " + model->hex_identifier + " is not loaded" +
                      cite(rule::call_order));
        return false;
    }
    model->loaded = false;
    model->was_unloaded = true;
    --sim().live_programs;
    return true;
}

// hang_eval_op (RUNTIME.md §0b #22: a wedged driver never signals): the first evaluation of a program
// holding the op blocks, the simulator's lock released, until anvil_ane_sim_reset or ten minutes pass, then
// fails. True when it hung.
bool hang_first_evaluation(in_memory_model_object& model, std::unique_lock<std::recursive_mutex>& lock,
                           void** error) {
    state& s = sim();
    if (s.options.hang_eval_op.empty() || model.evaluated || model.program == nullptr) return false;
    bool holds = false;
    for (const op_statement& statement : model.program->statements())
        holds = holds || statement.op == s.options.hang_eval_op;
    if (!holds) return false;
    model.evaluated = true;
    const long generation = s.hang_generation;
    s.hang_released.wait_for(lock, std::chrono::minutes(10), [&] { return s.hang_generation != generation; });
    set_error(error, codes::program_inference,
              std::string(evaluate_prefix) +
                  "the evaluation never completed (injected by the simulator: "
                  "hang_eval_op=" +
                  s.options.hang_eval_op + "; it returned when the test reset the simulator)" +
                  cite(rule::hung_evaluate));
    return true;
}

const rules& s_options() {
    return sim().options;
}

bool holds_op(const mil_program& program, const std::string& op) {
    if (op.empty()) return false;
    for (const op_statement& statement : program.statements())
        if (statement.op == op) return true;
    return false;
}

// wrong_eval_op (CONSTRAINTS.md: other numbers, as a program compiled with other weights returns): each fp16
// output y becomes 1 - y.
void return_other_numbers(const surface_view& view, const io_tensor& symbol) {
    if (symbol.type != element_type::fp16) return;
    for (std::int64_t c = 0; c < symbol.channels; ++c)
        for (std::int64_t h = 0; h < symbol.height; ++h) {
            std::byte* row = view.base + static_cast<std::size_t>(c) * view.plane_stride +
                             static_cast<std::size_t>(h) * view.row_stride;
            for (std::int64_t w = 0; w < symbol.width; ++w) {
                anvil::half value;
                std::memcpy(&value.bits, row + 2 * w, 2);
                value = anvil::half(1.0f - static_cast<float>(value));
                std::memcpy(row + 2 * w, &value.bits, 2);
            }
        }
}

bool model_evaluate(id self, sel, unsigned int, id options, id request, void** error) {
    std::unique_lock<std::recursive_mutex> lock(sim().mutex);
    auto* model = receiver<in_memory_model_object>(self, "evaluateWithQoS:options:request:error:");
    if (model == nullptr) return false;
    if (model->loaded && hang_first_evaluation(*model, lock, error)) return false;
    model->evaluated = true;
    check_options(options, "evaluateWithQoS:options:request:error:");
    auto* typed = as<request_object>(request);
    if (typed == nullptr) {
        record_violation("-[_ANEInMemoryModel evaluateWithQoS:options:request:error:]: the request is " +
                         describe(request) + ", expected an _ANERequest" + cite(rule::request_selector));
        set_error(error, codes::bad_call,
                  std::string(evaluate_prefix) + "no valid request" + cite(rule::request_selector));
        return false;
    }
    if (!model->loaded) {
        set_error(error, codes::program_inference,
                  std::string(evaluate_prefix) + "model " + model->hex_identifier +
                      (model->was_unloaded ? " was unloaded" : " is not loaded") +
                      " (order: compile, load, evaluate, unload; RUNTIME.md §2)" + cite(rule::call_order));
        return false;
    }
    const auto& input_symbols = model->program->inputs();
    const auto& output_symbols = model->program->outputs();
    std::vector<surface_object*> inputs;
    std::vector<surface_object*> outputs;
    std::vector<surface_view> input_views;
    std::vector<surface_view> output_views;
    std::string problem =
        bind_surfaces(*typed->inputs, *typed->input_indices, input_symbols, "input", inputs);
    if (problem.empty())
        problem = bind_surfaces(*typed->outputs, *typed->output_indices, output_symbols, "output", outputs);
    if (problem.empty()) problem = check_surfaces(inputs, input_symbols, "input", input_views);
    if (problem.empty()) problem = check_surfaces(outputs, output_symbols, "output", output_views);
    if (!problem.empty()) {
        set_error(error, codes::program_inference, evaluate_prefix + problem);
        return false;
    }
    for (std::size_t i = 0; i < inputs.size(); ++i)
        if (digest_bytes(inputs[i]->base, inputs[i]->alloc_size, 0) != inputs[i]->digest_at_unlock)
            record_violation("evaluateWithQoS: the surface of input '" + input_symbols[i].name +
                             "' was written without IOSurfaceLock/IOSurfaceUnlock around the CPU access" +
                             cite(rule::surface_locking));
    if (std::string refused = evaluate_problem(*model->program); !refused.empty()) {
        set_error(error, codes::program_inference, evaluate_prefix + refused);
        return false;
    }
    try {
        model->program->evaluate(input_views, output_views);
    } catch (const sim_failure& failure) {
        set_error(error, failure.code, with_prefix(evaluate_prefix, failure.what()));
        return false;
    } catch (const std::exception& failure) {
        record_violation(std::string("simulator internal error during evaluate: ") + failure.what());
        set_error(error, codes::program_inference, with_prefix(evaluate_prefix, failure.what()));
        return false;
    }
    report_program_warnings(*model->program);
    if (holds_op(*model->program, s_options().wrong_eval_op)) {
        for (std::size_t i = 0; i < outputs.size(); ++i)
            return_other_numbers(output_views[i], output_symbols[i]);
        record_violation(
            "warning: model " + model->hex_identifier +
            ": its evaluation returned other numbers (injected by the simulator: wrong_eval_op=" +
            s_options().wrong_eval_op + ")" + cite(rule::wrong_numbers));
    }
    for (surface_object* output : outputs)
        output->digest_at_unlock = digest_bytes(output->base, output->alloc_size, 0);
    add_counter("evaluations", 1);
    // The first evaluation of a request moves every input byte; later ones count the bytes that changed.
    bool first = typed->previous_inputs.size() != inputs.size();
    typed->previous_inputs.resize(inputs.size());
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        std::vector<std::byte> now = gather_data(input_views[i], input_symbols[i]);
        add_counter("bytes_in", static_cast<long>(now.size()));
        const std::vector<std::byte>& before = typed->previous_inputs[i];
        long changed = 0;
        for (std::size_t b = 0; b < now.size(); ++b)
            if (first || b >= before.size() || before[b] != now[b]) ++changed;
        add_counter("bytes_changed_in", changed);
        typed->previous_inputs[i] = std::move(now);
    }
    for (std::size_t i = 0; i < outputs.size(); ++i)
        add_counter("bytes_out", static_cast<long>(gather_data(output_views[i], output_symbols[i]).size()));
    return true;
}

id model_model(id self, sel) {
    lock_guard lock(sim().mutex);
    auto* model = receiver<in_memory_model_object>(self, "model");
    if (model == nullptr) return nullptr;
    auto* made = make_object<model_object>();
    made->owner = static_cast<in_memory_model_object*>(retain_object(model, "-[_ANEInMemoryModel model]"));
    return autorelease_object(made, "-[_ANEInMemoryModel model]");
}

// -[_ANEModel modelAttributes] (RUNTIME.md §3 "the rigorous method"); empty before compile or load.
id model_attributes(id self, sel) {
    lock_guard lock(sim().mutex);
    auto* model = receiver<model_object>(self, "modelAttributes");
    if (model == nullptr) return nullptr;
    const mil_program* program = model->owner->alive ? model->owner->program.get() : nullptr;
    object* attributes = program != nullptr ? model_attributes_of(*program) : make_dictionary({});
    return autorelease_object(attributes, "-[_ANEModel modelAttributes]");
}

// +[_ANEIOSurfaceObject objectWithIOSurface:]
id surface_wrapper_create(id, sel, void* surface) {
    lock_guard lock(sim().mutex);
    auto* typed = as<surface_object>(surface);
    if (typed == nullptr) {
        record_violation("+[_ANEIOSurfaceObject objectWithIOSurface:]: the surface is " + describe(surface) +
                         ", expected an IOSurfaceRef");
        return nullptr;
    }
    auto* made = make_object<surface_wrapper_object>();
    made->surface = static_cast<surface_object*>(retain_object(typed, "objectWithIOSurface:"));
    return autorelease_object(made, "+[_ANEIOSurfaceObject objectWithIOSurface:]");
}

// An NSArray of `element_class` objects; "" or what is wrong.
template <class Element>
std::string check_array(id value, const char* name) {
    auto* array = as<array_object>(value);
    if (array == nullptr) return std::string(name) + " is " + describe(value) + ", expected an NSArray";
    for (std::size_t i = 0; i < array->elements.size(); ++i) {
        auto* element = as<Element>(array->elements[i]);
        if (element == nullptr)
            return std::string(name) + "[" + std::to_string(i) + "] is " + describe(array->elements[i]) +
                   ", expected an " + Element::class_name;
        if constexpr (std::is_same_v<Element, number_object>)
            if (element->is_float) return std::string(name) + "[" + std::to_string(i) + "] is not an integer";
    }
    return "";
}

// +[_ANERequest requestWithInputs:inputIndices:outputs:outputIndices:weightsBuffer:perfStats:procedureIndex:]
id request_create(id, sel, id inputs, id input_indices, id outputs, id output_indices, id weights_buffer,
                  id perf_stats, id procedure_index) {
    lock_guard lock(sim().mutex);
    std::string problem = check_array<surface_wrapper_object>(inputs, "inputs");
    if (problem.empty()) problem = check_array<number_object>(input_indices, "inputIndices");
    if (problem.empty()) problem = check_array<surface_wrapper_object>(outputs, "outputs");
    if (problem.empty()) problem = check_array<number_object>(output_indices, "outputIndices");
    if (problem.empty() &&
        as<array_object>(inputs)->elements.size() != as<array_object>(input_indices)->elements.size())
        problem = "inputs and inputIndices differ in length";
    if (problem.empty() &&
        as<array_object>(outputs)->elements.size() != as<array_object>(output_indices)->elements.size())
        problem = "outputs and outputIndices differ in length";
    if (problem.empty() && weights_buffer != nullptr && as<surface_wrapper_object>(weights_buffer) == nullptr)
        problem =
            "weightsBuffer is " + describe(weights_buffer) + ", expected nil (or an _ANEIOSurfaceObject)";
    if (problem.empty() && perf_stats != nullptr)
        problem = "perfStats is " + describe(perf_stats) + ", expected nil";
    auto* procedure = as<number_object>(procedure_index);
    if (problem.empty() && (procedure == nullptr || procedure->is_float || procedure->integer_value < 0 ||
                            procedure->integer_value > 15))
        problem =
            "procedureIndex is " + describe(procedure_index) + ", expected an NSNumber 0 (RUNTIME.md §2)";
    if (!problem.empty()) {
        record_violation(
            "+[_ANERequest requestWithInputs:inputIndices:outputs:outputIndices:weightsBuffer:"
            "perfStats:procedureIndex:]: " +
            problem + cite(rule::request_selector));
        return nullptr;
    }
    auto* made = make_object<request_object>();
    const char* who = "+[_ANERequest requestWithInputs:...]";
    made->inputs = static_cast<array_object*>(retain_object(inputs, who));
    made->input_indices = static_cast<array_object*>(retain_object(input_indices, who));
    made->outputs = static_cast<array_object*>(retain_object(outputs, who));
    made->output_indices = static_cast<array_object*>(retain_object(output_indices, who));
    made->procedure_index = retain_object(procedure_index, who);
    made->weights_buffer = retain_object(weights_buffer, who);
    return autorelease_object(made, who);
}

id device_architecture_type(id, sel) {
    lock_guard lock(sim().mutex);
    return autorelease_object(make_string(sim().options.architecture),
                              "+[_ANEDeviceInfo aneArchitectureType]");
}
bool device_has_ane(id, sel) {
    return true;
}
unsigned int device_core_count(id, sel) {
    return 16;
}

}  // namespace

void define_ane_classes() {
    class_record* descriptor = define_class(descriptor_object::class_name, 1, &destroy_as<descriptor_object>);
    add_class_method(descriptor, "modelWithMILText:weights:optionsPlist:", as_imp(&descriptor_create));

    class_record* model =
        define_class(in_memory_model_object::class_name, 1, &destroy_as<in_memory_model_object>);
    add_class_method(model, "inMemoryModelWithDescriptor:", as_imp(&model_create));
    add_method(model, "hexStringIdentifier", as_imp(&model_hex_string_identifier));
    add_method(model, "setModelURL:", as_imp(&model_set_model_url));
    add_method(model, "compiledModelExists", as_imp(&model_compiled_model_exists));
    add_method(model, "compileWithQoS:options:error:", as_imp(&model_compile));
    add_method(model, "loadWithQoS:options:error:", as_imp(&model_load));
    add_method(model, "evaluateWithQoS:options:request:error:", as_imp(&model_evaluate));
    add_method(model, "unloadWithQoS:error:", as_imp(&model_unload));
    add_method(model, "model", as_imp(&model_model));

    class_record* ane_model = define_class(model_object::class_name, 1, &destroy_as<model_object>);
    add_method(ane_model, "modelAttributes", as_imp(&model_attributes));

    class_record* wrapper =
        define_class(surface_wrapper_object::class_name, 1, &destroy_as<surface_wrapper_object>);
    add_class_method(wrapper, "objectWithIOSurface:", as_imp(&surface_wrapper_create));

    class_record* request = define_class(request_object::class_name, 1, &destroy_as<request_object>);
    add_class_method(
        request,
        "requestWithInputs:inputIndices:outputs:outputIndices:weightsBuffer:perfStats:procedureIndex:",
        as_imp(&request_create));

    class_record* device = define_class("_ANEDeviceInfo", 1, nullptr);
    add_class_method(device, "aneArchitectureType", as_imp(&device_architecture_type));
    add_class_method(device, "hasANE", as_imp(&device_has_ane));
    add_class_method(device, "numANECores", as_imp(&device_core_count));
}

}  // namespace anvil_sim
