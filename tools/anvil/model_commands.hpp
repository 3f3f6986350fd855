// What the model commands (embed, rerank, classify, tokenize) share: the --backend choice, token-id lists,
// writing results as .npy, JSON output, and progress shown only on a terminal.
#pragma once

#include "arguments.hpp"

#include <anvil/anvil.hpp>

#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace anvil::cli {

// Where the Neural Engine comes from when it is asked for: the framework on a Mac; elsewhere the simulator in
// $ANVIL_ANE_SIM, or the libanvil-ane-sim.so built beside this program (which this then points
// $ANVIL_ANE_SIM at). Returns a description, or "" when there is none.
inline std::string locate_neural_engine(const char* argv0) {
    if (const char* sim = std::getenv("ANVIL_ANE_SIM"); sim != nullptr && *sim != '\0')
        return detail::message("the ANE simulator ", sim);
#if defined(__APPLE__)
    (void)argv0;
    return "the Neural Engine";
#else
    std::error_code ignored;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ignored);
    const std::filesystem::path beside =
        (self.empty() ? std::filesystem::path(argv0) : self).parent_path() / "libanvil-ane-sim.so";
    if (!std::filesystem::exists(beside)) return {};
    setenv("ANVIL_ANE_SIM", beside.c_str(), 1);
    return detail::message("the ANE simulator ", beside.string());
#endif
}

// Every program this command compiles reports where it placed its work here (one command per process).
inline const std::shared_ptr<placement_journal>& placement_log() {
    static const auto journal = std::make_shared<placement_journal>();
    return journal;
}

// The placement of every program compiled so far, for --json: {"backend", "refused", "programs": [...]}.
inline json::value placement_json() {
    json::array programs;
    std::string backend = "cpu";
    std::int64_t refused = 0;
    for (const placement_report& report : placement_log()->reports()) {
        if (report.backend == "ane" || report.backend == "coreml") backend = report.backend;
        refused += static_cast<std::int64_t>(report.refused());
        json::object program;
        program["backend"] = json::value(report.backend);
        if (!report.device.empty()) program["device"] = json::value(report.device);
        if (!report.lowering.empty()) program["lowering"] = json::value(report.lowering);
        json::array segments;
        for (const placement_segment& segment : report.segments) {
            json::object s;
            s["device"] = json::value(segment.device);
            s["ops"] = json::value(segment.ops);
            s["op_count"] = json::value(static_cast<std::int64_t>(segment.op_count));
            if (!segment.reason.empty()) s["reason"] = json::value(segment.reason);
            if (!segment.refused_at.empty()) {
                s["refused_at"] = json::value(segment.refused_at);
                s["framework_error"] = json::value(segment.framework_error);
            }
            if (segment.cached) s["cached"] = json::value(true);
            if (report.chunks > 1) s["chunk"] = static_cast<std::int64_t>(segment.chunk);
            if (!segment.stages.empty()) s["stages"] = json::value(segment.stages);
            if (segment.weight_bytes > 0) s["weight_bytes"] = static_cast<std::int64_t>(segment.weight_bytes);
            segments.emplace_back(std::move(s));
        }
        program["segments"] = json::value(std::move(segments));
        if (report.chunks > 1) program["chunks"] = static_cast<std::int64_t>(report.chunks);
        json::array host;
        for (const std::string& node : report.host_nodes)
            host.emplace_back(node);
        if (!host.empty()) program["host_nodes"] = json::value(std::move(host));
        programs.emplace_back(std::move(program));
    }
    json::object placement;
    placement["backend"] = json::value(backend);
    placement["refused"] = json::value(refused);
    placement["programs"] = json::value(std::move(programs));
    return json::value(std::move(placement));
}

// --backend cpu|ane|coreml|auto (ane: the private framework; coreml: the public Core ML route; auto: the
// Neural Engine where present, else the CPU; on Linux "present" means $ANVIL_ANE_SIM is set, and the
// simulator stands in for Core ML too), --strict-device (a segment the Neural Engine refuses is an error,
// not a CPU fallback), --compress (compile_options::weight_compression) and, for the commands that take it,
// --adapter DIR (a PEFT LoRA adapter applied to the folder's weights: load_options::adapter).
inline models::load_options backend_options(const arguments& args, std::string_view command,
                                            const char* argv0) {
    models::load_options options;
    options.compile.placement_log = placement_log();
    options.compile.strict_device = args.flag("strict-device");
    const std::string backend = args.value("backend").value_or("auto");
    if (backend == "cpu") {
        options.compile.target = device::cpu;
    } else if (backend == "ane") {
        if (locate_neural_engine(argv0).empty()) {
            throw error(
                detail::message(command,
                                ": --backend ane: no Neural Engine on this machine and no simulator (set "
                                "ANVIL_ANE_SIM=/path/to/libanvil-ane-sim.so, built from tools/ane-sim)"));
        }
        options.compile.target = device::ane;
    } else if (backend == "coreml") {
        if (locate_neural_engine(argv0).empty()) {
            throw error(
                detail::message(command,
                                ": --backend coreml: Core ML needs macOS or iOS, and no simulator was "
                                "found (set ANVIL_ANE_SIM=/path/to/libanvil-ane-sim.so, built from "
                                "tools/ane-sim)"));
        }
        options.compile.target = device::coreml;
    } else if (backend == "auto") {
        options.compile.target = device::automatic;
    } else {
        throw usage_error(
            detail::message(command, ": --backend must be cpu, ane, coreml or auto, got '", backend, "'"));
    }
    if (const auto text = args.value("compress")) {
        const auto parsed = parse_weight_compression(*text);
        if (!parsed || *parsed == weight_compression::none) {
            throw usage_error(detail::message(
                command, ": --compress must be int8, lut4, lut4g32 or lut6, got '", *text, "'"));
        }
        options.compile.weight_compression = *parsed;
    }
    if (const auto adapter = args.value("adapter")) options.adapter = *adapter;
    return options;
}

// "101,1045,102" -> {101, 1045, 102}.
inline std::vector<std::int32_t> parse_id_list(std::string_view text, std::string_view option) {
    std::vector<std::int32_t> ids;
    std::size_t start = 0;
    while (start <= text.size()) {
        const std::size_t comma = std::min(text.find(',', start), text.size());
        const std::string item(text.substr(start, comma - start));
        char* end = nullptr;
        errno = 0;
        const long long value = std::strtoll(item.c_str(), &end, 10);
        if (item.empty() || end != item.c_str() + item.size() || errno != 0 || value < 0 ||
            value > INT32_MAX) {
            throw usage_error(detail::message(option, ": '", text,
                                              "' is not a comma-separated list of token ids (non-negative "
                                              "integers), at '",
                                              item, "'"));
        }
        ids.push_back(static_cast<std::int32_t>(value));
        start = comma + 1;
    }
    return ids;
}

inline std::vector<std::vector<std::int32_t>> parse_id_lists(const arguments& args, std::string_view option) {
    std::vector<std::vector<std::int32_t>> lists;
    for (const auto& text : args.values(option))
        lists.push_back(parse_id_list(text, detail::message("--", option)));
    return lists;
}

// Preprocessed pixels from .npy: float32 [N, 3, H, W], or one image [3, H, W] (read as [1, 3, H, W]).
inline host_tensor read_pixels(const std::string& path) {
    const auto array = npy::read(path);
    if (array.shape.size() != 3 && array.shape.size() != 4) {
        throw shape_error(
            detail::message(path, ": expected pixels [N, 3, H, W] or [3, H, W], got ", dims(array.shape)));
    }
    dims shape(array.shape);
    if (array.shape.size() == 3) shape = dims{1, array.shape[0], array.shape[1], array.shape[2]};
    return host_tensor::from(array.to_f32(), shape);
}

inline void write_npy(const std::string& path, const host_tensor& tensor) {
    const auto values = tensor.to_f32();
    const dims& shape = tensor.shape();
    std::vector<std::int64_t> extents(shape.begin(), shape.end());
    npy::write(path, dtype::f32, extents, values.data());
}

// A float for JSON: shortest round-trip text, and null for what JSON cannot hold.
inline json::value json_number(float v) {
    if (!std::isfinite(v)) return json::value(nullptr);
    return json::value(static_cast<double>(v));
}

// Progress goes to stderr, and only when both streams are a terminal.
class progress {
public:
    progress() : shown_(isatty(STDOUT_FILENO) != 0 && isatty(STDERR_FILENO) != 0) {}
    void say(std::string_view what) const {
        if (!shown_) return;
        std::fprintf(stderr, "\r\033[K%.*s", static_cast<int>(what.size()), what.data());
        std::fflush(stderr);
    }
    ~progress() {
        if (shown_) std::fputs("\r\033[K", stderr);
    }
    progress(const progress&) = delete;
    progress& operator=(const progress&) = delete;

private:
    bool shown_;
};

inline std::string model_folder(const arguments& args, std::string_view command) {
    const auto folder = args.value("model");
    if (!folder) throw usage_error(detail::message(command, ": --model DIR is required"));
    return *folder;
}

}  // namespace anvil::cli
