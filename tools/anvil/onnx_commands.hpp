// anvil run: an ONNX model's outputs for the given inputs (models/import/onnx_import.hpp), each written as
// DIR/<output name>.npy.
#pragma once

#include "arguments.hpp"
#include "model_commands.hpp"

#include <anvil/anvil.hpp>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace anvil::cli {

inline constexpr const char* run_usage =
    "usage: anvil run --model FILE.onnx [--input NAME=F.npy]... --out-dir DIR [--backend "
    "cpu|ane|coreml|auto]\n"
    "                 [--strict-device] [--json]\n"
    "\n"
    "Runs an ONNX model: each --input gives a graph input its values (and so its shape, resolving the\n"
    "model's symbolic dims); every graph output is written as DIR/<output name>.npy (float32, or the\n"
    "output's own dtype). .npy has no bfloat16: a bfloat16 input takes a float32 array, rounded to\n"
    "bfloat16 (to nearest, ties to even) as the model would, and a bfloat16 output is written as float32\n"
    "(exactly: every bfloat16 is a float32). An op anvil does not import yet is an error naming the op, the\n"
    "node and the opset.\n";

inline int run_onnx(const std::vector<std::string_view>& argv, const char* argv0) {
    const arguments args("run", argv,
                         {{"model", true},
                          {"input", true},
                          {"out-dir", true},
                          {"backend", true},
                          {"strict-device", false},
                          {"json", false},
                          {"help", false}});
    if (args.flag("help")) {
        std::fputs(run_usage, stdout);
        return 0;
    }
    const auto model_path = args.value("model");
    if (!model_path) throw usage_error("run: --model FILE.onnx is required");
    const auto out_dir = args.value("out-dir");
    if (!out_dir) throw usage_error("run: --out-dir DIR is required");
    if (!args.positional().empty())
        throw usage_error(detail::message("run: unexpected argument '", args.positional()[0], "'"));
    const onnx_model model = onnx_model::open(*model_path);
    // The graph inputs that are bfloat16, which .npy cannot hold.
    std::set<std::string, std::less<>> bf16_inputs;
    for (const onnx_value_info& v : model.graph().inputs)
        if (onnx_dtype(v.elem_type) == dtype::bf16) bf16_inputs.insert(v.name);
    std::map<std::string, host_tensor> inputs;
    std::map<std::string, dims, std::less<>> shapes;
    for (const std::string& given : args.values("input")) {
        const auto equals = given.find('=');
        if (equals == std::string::npos || equals == 0 || equals + 1 == given.size())
            throw usage_error(detail::message("run: --input takes NAME=F.npy, got '", given, "'"));
        const std::string name = given.substr(0, equals), path = given.substr(equals + 1);
        const npy::array array = npy::read(path);
        host_tensor tensor(array.type, dims(array.shape));
        if (!array.data.empty()) std::memcpy(tensor.raw(), array.data.data(), array.data.size());
        if (bf16_inputs.contains(name)) {
            if (array.type != dtype::f32)
                throw usage_error(detail::message("run: input '", name,
                                                  "' is bfloat16: give it a float32 .npy (", path, " holds ",
                                                  dtype_name(array.type), ")"));
            host_tensor rounded(dtype::bf16, tensor.shape());
            convert_f32_to_bf16(tensor.values<float>().data(), tensor.element_count(),
                                static_cast<bfloat16*>(rounded.raw()));
            tensor = std::move(rounded);
        }
        if (!inputs.emplace(name, std::move(tensor)).second)
            throw usage_error(detail::message("run: --input ", name, " is given twice"));
        shapes.emplace(name, dims(array.shape));
    }
    // The values go in too: an input that decides a shape (a Reshape's target given as an input) is settled
    // from its value, and this one run's program is specialised to it.
    std::map<std::string, host_tensor, std::less<>> values(inputs.begin(), inputs.end());
    const models::onnx_import imported = models::import_onnx(model, shapes, values);
    for (const std::string& name : imported.input_names) {
        if (!inputs.contains(name))
            throw usage_error(
                detail::message("run: the model's input '", name, "' has no --input ", name, "=F.npy"));
    }
    const models::load_options options =
        models::with_model_source(backend_options(args, "run", argv0), *model_path);
    auto program = compile(imported.outputs, options.compile);
    std::vector<named_tensor> feeds;
    for (const std::string& name : imported.input_names)
        feeds.push_back({name, inputs.at(name)});
    const std::vector<host_tensor> outputs = program.run(feeds);
    std::filesystem::create_directories(*out_dir);
    json::array written;
    for (std::size_t i = 0; i < outputs.size(); ++i) {
        std::string file = imported.output_names[i];
        for (char& c : file)
            if (c == '/' || c == '\\' || c == ':') c = '_';
        const std::string path = (std::filesystem::path(*out_dir) / (file + ".npy")).string();
        const bool widened = outputs[i].type() == dtype::bf16;  // .npy has no bfloat16: written as float32
        const host_tensor out =
            widened ? host_tensor::from(outputs[i].to_f32(), outputs[i].shape()) : outputs[i];
        const std::vector<std::int64_t> extents(out.shape().begin(), out.shape().end());
        npy::write(path, out.type(), extents, out.raw());
        json::object entry;
        entry["name"] = json::value(imported.output_names[i]);
        entry["path"] = json::value(path);
        if (widened) entry["written_as"] = json::value("float32 (the output is bfloat16)");
        written.emplace_back(std::move(entry));
        if (!args.flag("json"))
            std::printf("%s -> %s%s\n", imported.output_names[i].c_str(), path.c_str(),
                        widened ? " (bfloat16, written as float32)" : "");
    }
    if (args.flag("json")) {
        json::object report;
        report["outputs"] = json::value(std::move(written));
        report["placement"] = placement_json();
        std::printf("%s\n", json::dump(json::value(std::move(report)), 2).c_str());
    }
    return 0;
}

}  // namespace anvil::cli
