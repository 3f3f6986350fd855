// `anvil info PATH`: what a checkpoint holds — tensors with dtypes and shapes, parameter and byte totals, and
// a summary of config.json — read from the safetensors headers only, so it answers in milliseconds on any
// size.
#pragma once

#include "arguments.hpp"

#include <anvil/anvil.hpp>

#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace anvil::cli {

namespace detail_info {

// 109482240 -> "109,482,240"
inline std::string grouped(std::uint64_t n) {
    std::string digits = std::to_string(n);
    std::string out;
    for (std::size_t i = 0; i < digits.size(); ++i) {
        if (i != 0 && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return out;
}

// 2147483648 -> "2.00 GiB"
inline std::string human_bytes(std::uint64_t bytes) {
    static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double value = static_cast<double>(bytes);
    std::size_t unit = 0;
    while (value >= 1024.0 && unit + 1 < std::size(units)) {
        value /= 1024.0;
        ++unit;
    }
    char text[32];
    std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.2f %s", value, units[unit]);
    return text;
}

// The config.json fields worth a glance, under the names different families give them.
inline constexpr std::string_view summary_keys[] = {
    "model_type",
    "architectures",
    "hidden_size",
    "d_model",
    "n_embd",
    "num_hidden_layers",
    "n_layer",
    "num_attention_heads",
    "n_head",
    "num_key_value_heads",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
    "n_positions",
    "hidden_act",
    "rope_theta",
    "sliding_window",
    "tie_word_embeddings",
    "torch_dtype",
    "num_labels",
};

inline json::object config_summary(const json::value& config) {
    json::object summary;
    for (const auto key : summary_keys) {
        if (const auto* v = config.find(key); v != nullptr && !v->is_object()) summary[std::string(key)] = *v;
    }
    if (const auto* labels = config.find("id2label");
        labels != nullptr && labels->is_object() && summary.find("num_labels") == nullptr) {
        summary["num_labels"] = json::value(static_cast<std::int64_t>(labels->as_object().size()));
    }
    return summary;
}

struct tensor_row {
    const tensor_view* tensor;
    std::string file;
};

}  // namespace detail_info

inline constexpr const char* info_usage =
    "usage: anvil info PATH [--json]\n"
    "\n"
    "PATH is a .safetensors file, a model.safetensors.index.json, a model folder (config.json with one or\n"
    "several safetensors files, sharded or not), a .gguf file, an .onnx model or a .npy array. Prints every\n"
    "tensor's dtype (a GGUF file's ggml type) and shape, the parameter and byte totals, and a summary of\n"
    "config.json (a GGUF file's metadata); reads only the headers, so it answers at once on any size. For "
    "an\n"
    "ONNX model: its inputs and outputs (symbolic dims by name), opsets, op counts and initializer bytes, "
    "its\n"
    "external data files opened and bounds-checked.\n"
    "\n"
    "  --json   print the same as one JSON object\n";

// A .npy file (the command line's input and output format): its dtype and shape.
inline int describe_npy(const std::filesystem::path& path, bool as_json) {
    const npy::array array = npy::read(path);
    if (as_json) {
        json::object out;
        out["path"] = json::value(path.string());
        out["dtype"] = json::value(std::string(dtype_name(array.type)));
        json::array shape;
        for (const auto extent : array.shape)
            shape.emplace_back(extent);
        out["shape"] = json::value(std::move(shape));
        out["element_count"] = json::value(static_cast<std::int64_t>(array.element_count()));
        std::printf("%s\n", json::dump(json::value(std::move(out)), 2).c_str());
    } else {
        std::printf("%s: npy array, %s %s, %s elements\n", path.string().c_str(),
                    std::string(dtype_name(array.type)).c_str(),
                    anvil::detail::extents_to_string(array.shape, false).c_str(),
                    detail_info::grouped(array.element_count()).c_str());
    }
    return 0;
}

// A GGUF file (llama.cpp's format): its version, metadata (long arrays summarised) and every tensor's ggml
// type and shape, from the header alone.
inline int describe_gguf(const std::filesystem::path& path, bool as_json) {
    using namespace detail_info;
    const gguf_file file = gguf_file::open(path);
    std::uint64_t parameters = 0, bytes = 0;
    std::map<std::string, std::pair<std::size_t, std::uint64_t>> by_type;
    for (const gguf_tensor& t : file.tensors()) {
        parameters += t.element_count;
        bytes += t.bytes.size();
        auto& entry = by_type[std::string(t.layout().name)];
        ++entry.first;
        entry.second += t.element_count;
    }
    const auto value_json = [](const gguf_value& v) {
        if (const auto* s = v.string()) return json::value(*s);
        if (const auto b = v.boolean()) return json::value(*b);
        if (const auto n = v.integer()) return json::value(*n);
        if (const auto f = v.number()) return json::value(*f);
        if (v.is_array() && v.size() <= 16) {
            json::array items;
            for (std::size_t i = 0; i < v.size(); ++i) {
                if (!v.strings().empty()) {
                    items.emplace_back(std::string(v.strings()[i]));
                } else if (const auto n = v.integer_at(i)) {
                    items.emplace_back(*n);
                } else if (const auto f = v.number_at(i)) {
                    items.emplace_back(*f);
                }
            }
            return json::value(std::move(items));
        }
        return json::value(v.describe());
    };
    // The tokenizer as anvil reads it (io/gguf_tokenizer.hpp), or why it cannot: info still describes the
    // file.
    json::object tokenizer_summary;
    std::string tokenizer_line;
    try {
        if (const std::optional<gguf_vocabulary> v = read_gguf_vocabulary(file)) {
            tokenizer_summary["model"] = json::value(v->model);
            if (!v->pre.empty()) tokenizer_summary["pre"] = json::value(v->pre);
            tokenizer_summary["tokens"] = json::value(static_cast<std::int64_t>(v->tokens));
            tokenizer_line = anvil::detail::message(
                v->model == "llama" ? "SentencePiece BPE ('llama')" : "byte-level BPE ('gpt2')",
                v->pre.empty() ? std::string() : anvil::detail::message(", pre-tokenizer '", v->pre, "'"),
                ", ", grouped(v->tokens), " tokens");
            if (!v->chat_template.empty()) {
                std::string family;
                try {
                    family =
                        std::string(models::to_string(models::recognise_chat_template(v->chat_template)));
                } catch (const anvil::error&) {
                    family = "not one anvil renders";
                }
                tokenizer_summary["chat_template"] = json::value(family);
                tokenizer_line += "; chat template: " + family;
            }
        } else {
            tokenizer_line = "none";
        }
    } catch (const anvil::error& e) {
        tokenizer_summary["error"] = json::value(std::string(e.what()));
        tokenizer_line = anvil::detail::message("not readable: ", e.what());
    }
    if (as_json) {
        json::object out;
        out["path"] = json::value(path.string());
        out["format"] = json::value("gguf");
        out["tokenizer"] = json::value(std::move(tokenizer_summary));
        out["version"] = json::value(static_cast<std::int64_t>(file.version()));
        out["alignment"] = json::value(static_cast<std::int64_t>(file.alignment()));
        json::object metadata;
        for (const auto& [key, value] : file.metadata())
            metadata[key] = value_json(value);
        out["metadata"] = json::value(std::move(metadata));
        out["tensor_count"] = json::value(static_cast<std::int64_t>(file.tensors().size()));
        out["parameter_count"] = json::value(static_cast<std::int64_t>(parameters));
        out["byte_size"] = json::value(static_cast<std::int64_t>(bytes));
        json::array tensors;
        for (const gguf_tensor& t : file.tensors()) {
            json::object entry;
            entry["name"] = json::value(t.name);
            entry["type"] = json::value(std::string(t.layout().name));
            json::array shape;
            for (const auto extent : t.shape())
                shape.emplace_back(extent);
            entry["shape"] = json::value(std::move(shape));
            entry["bytes"] = json::value(static_cast<std::int64_t>(t.bytes.size()));
            tensors.emplace_back(std::move(entry));
        }
        out["tensors"] = json::value(std::move(tensors));
        std::printf("%s\n", json::dump(json::value(std::move(out)), 2).c_str());
        return 0;
    }
    std::printf("%s: GGUF v%u, %s, alignment %llu\n", path.string().c_str(), file.version(),
                human_bytes(std::filesystem::file_size(path)).c_str(),
                static_cast<unsigned long long>(file.alignment()));
    for (const auto& [key, value] : file.metadata())
        std::printf("  %s: %s\n", key.c_str(), value.describe().c_str());
    std::printf("tokenizer: %s\n", tokenizer_line.c_str());
    std::printf("tensors: %s, parameters: %s, bytes: %s\n", grouped(file.tensors().size()).c_str(),
                grouped(parameters).c_str(), human_bytes(bytes).c_str());
    std::string type_line;
    for (const auto& [name, counts] : by_type) {
        if (!type_line.empty()) type_line += ", ";
        type_line += name + " " + grouped(counts.first) + (counts.first == 1 ? " tensor (" : " tensors (") +
                     grouped(counts.second) + " parameters)";
    }
    if (!type_line.empty()) std::printf("types: %s\n", type_line.c_str());
    std::size_t name_width = 4, shape_width = 5;
    for (const gguf_tensor& t : file.tensors()) {
        name_width = std::max(name_width, t.name.size());
        shape_width = std::max(shape_width, anvil::detail::extents_to_string(t.shape(), false).size());
    }
    std::printf("\n%-*s  %-6s  %-*s\n", static_cast<int>(name_width), "name", "type",
                static_cast<int>(shape_width), "shape");
    for (const gguf_tensor& t : file.tensors())
        std::printf("%-*s  %-6s  %-*s\n", static_cast<int>(name_width), t.name.c_str(),
                    std::string(t.layout().name).c_str(), static_cast<int>(shape_width),
                    anvil::detail::extents_to_string(t.shape(), false).c_str());
    return 0;
}

// An ONNX model: inputs and outputs with their element types and shapes (symbolic dims by name), the opsets
// it imports, how many nodes of each op it holds (subgraphs included), and its initializers' bytes. Parsing
// opens and bounds-checks external data, so a bad file fails here as it would when run.
inline int describe_onnx(const std::filesystem::path& path, bool as_json) {
    using namespace detail_info;
    const onnx_model model = onnx_model::open(path);
    std::map<std::string, std::int64_t> op_counts;
    std::int64_t node_count = 0;
    std::vector<const onnx_graph*> pending{&model.graph()};
    while (!pending.empty()) {
        const onnx_graph* g = pending.back();
        pending.pop_back();
        for (const onnx_node& n : g->nodes) {
            ++node_count;
            ++op_counts[n.domain.empty() || n.domain == "ai.onnx" ? n.op_type : n.domain + "." + n.op_type];
            for (const onnx_attribute& a : n.attributes)
                for (const auto& sub : a.graphs)
                    pending.push_back(sub.get());
        }
    }
    // Graph inputs that are initializers too (IR < 4 lists them both ways) are weights, not inputs.
    std::set<std::string, std::less<>> initializer_names;
    for (const onnx_tensor& t : model.graph().initializers)
        initializer_names.insert(t.name);
    const auto shape_text = [](const onnx_value_info& v) {
        if (v.kind != "tensor") return v.kind;
        std::string text = onnx_type_name(v.elem_type);
        if (!v.has_shape) return text + " (shape unknown)";
        text += " [";
        for (std::size_t i = 0; i < v.shape.size(); ++i) {
            if (i) text += ", ";
            text += v.shape[i].value ? std::to_string(*v.shape[i].value)
                                     : (v.shape[i].param.empty() ? std::string("?") : v.shape[i].param);
        }
        return text + "]";
    };
    const auto values_json = [&](const std::vector<onnx_value_info>& values) {
        json::array list;
        for (const onnx_value_info& v : values) {
            if (initializer_names.contains(v.name)) continue;
            json::object entry;
            entry["name"] = json::value(v.name);
            entry["kind"] = json::value(v.kind);
            entry["type"] = json::value(onnx_type_name(v.elem_type));
            if (v.has_shape) {
                json::array shape;
                for (const onnx_dim& d : v.shape)
                    shape.push_back(d.value ? json::value(*d.value) : json::value(d.param));
                entry["shape"] = json::value(std::move(shape));
            }
            list.emplace_back(std::move(entry));
        }
        return json::value(std::move(list));
    };
    std::set<std::string, std::less<>> external_files;
    for (const onnx_tensor& t : model.graph().initializers)
        if (!t.external_location.empty()) external_files.insert(t.external_location);
    if (as_json) {
        json::object out;
        out["path"] = json::value(path.string());
        out["format"] = json::value("onnx");
        out["ir_version"] = json::value(model.ir_version());
        out["producer"] = json::value(model.producer());
        json::object opsets;
        for (const onnx_opset& o : model.opsets())
            opsets[o.domain.empty() ? "ai.onnx" : o.domain] = json::value(o.version);
        out["opsets"] = json::value(std::move(opsets));
        out["inputs"] = values_json(model.graph().inputs);
        out["outputs"] = values_json(model.graph().outputs);
        json::object ops;
        for (const auto& [name, count] : op_counts)
            ops[name] = json::value(count);
        out["op_counts"] = json::value(std::move(ops));
        out["node_count"] = json::value(node_count);
        out["initializer_count"] = json::value(static_cast<std::int64_t>(model.graph().initializers.size()));
        out["initializer_bytes"] = json::value(static_cast<std::int64_t>(model.initializer_bytes()));
        json::array files;
        for (const std::string& f : external_files)
            files.emplace_back(f);
        out["external_data"] = json::value(std::move(files));
        std::printf("%s\n", json::dump(json::value(std::move(out)), 2).c_str());
        return 0;
    }
    std::string opset_line;
    for (const onnx_opset& o : model.opsets())
        opset_line += (opset_line.empty() ? "" : ", ") +
                      (o.domain.empty() ? std::string("ai.onnx") : o.domain) + " " +
                      std::to_string(o.version);
    std::printf("%s: ONNX model, IR version %lld, %s%s\n", path.string().c_str(),
                static_cast<long long>(model.ir_version()),
                human_bytes(std::filesystem::file_size(path)).c_str(),
                model.producer().empty() ? "" : (", from " + model.producer()).c_str());
    std::printf("opsets: %s\n", opset_line.empty() ? "none (ai.onnx 1)" : opset_line.c_str());
    for (const auto* list : {&model.graph().inputs, &model.graph().outputs}) {
        std::printf("%s:\n", list == &model.graph().inputs ? "inputs" : "outputs");
        for (const onnx_value_info& v : *list)
            if (!initializer_names.contains(v.name))
                std::printf("  %s: %s\n", v.name.c_str(), shape_text(v).c_str());
    }
    std::string ops_line;
    for (const auto& [name, count] : op_counts)
        ops_line += (ops_line.empty() ? "" : ", ") + name + " " + grouped(static_cast<std::uint64_t>(count));
    std::printf("nodes: %s (%s)\n", grouped(static_cast<std::uint64_t>(node_count)).c_str(),
                ops_line.c_str());
    std::printf("initializers: %s, %s", grouped(model.graph().initializers.size()).c_str(),
                human_bytes(model.initializer_bytes()).c_str());
    if (!external_files.empty()) {
        std::string files;
        for (const std::string& f : external_files)
            files += (files.empty() ? "" : ", ") + f;
        std::printf(" (external data: %s)", files.c_str());
    }
    std::printf("\n");
    return 0;
}

inline int run_info(const std::vector<std::string_view>& argv) {
    using namespace detail_info;
    const arguments args("info", argv, {{"json", false}, {"help", false}});
    if (args.flag("help")) {
        std::fputs(info_usage, stdout);
        return 0;
    }
    if (args.positional().size() != 1)
        throw usage_error(
            "info: expected one PATH (a .safetensors file, a model folder, a .gguf, .onnx or .npy file)");
    const std::filesystem::path path = args.positional()[0];
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
        throw io_error(anvil::detail::message(path.string(), ": no such file or folder"));
    }

    if (path.extension() == ".npy" && !std::filesystem::is_directory(path)) {
        return describe_npy(path, args.flag("json"));
    }
    if (path.extension() == ".onnx" && !std::filesystem::is_directory(path)) {
        return describe_onnx(path, args.flag("json"));
    }
    if (path.extension() == ".gguf" && !std::filesystem::is_directory(path)) {
        return describe_gguf(path, args.flag("json"));
    }

    std::optional<json::value> config;
    if (std::filesystem::is_directory(path)) {
        const auto config_path = path / "config.json";
        if (std::filesystem::exists(config_path)) {
            config = json::parse_file(config_path);
            if (!config->is_object()) {
                throw format_error(anvil::detail::message(config_path.string(), ": not a JSON object"));
            }
        }
    }
    const checkpoint weights = checkpoint::open(path);

    std::vector<tensor_row> rows;
    std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> by_dtype;  // name -> (tensors, parameters)
    for (const auto& file : weights.files()) {
        for (const auto& tensor : file.tensors()) {
            rows.push_back({&tensor, std::filesystem::path(file.path()).filename().string()});
        }
    }
    std::sort(rows.begin(), rows.end(),
              [](const tensor_row& a, const tensor_row& b) { return a.tensor->name() < b.tensor->name(); });
    for (const auto& row : rows) {
        auto& entry = by_dtype[std::string(dtype_name(row.tensor->type()))];
        entry.first += 1;
        entry.second += row.tensor->element_count();
    }
    std::uint64_t file_bytes = 0;
    for (const auto& file : weights.files())
        file_bytes += file.file_size();

    if (args.flag("json")) {
        json::object out;
        out["path"] = json::value(path.string());
        json::array files;
        for (const auto& file : weights.files()) {
            json::object f;
            f["path"] = json::value(file.path().string());
            f["file_size"] = json::value(static_cast<std::int64_t>(file.file_size()));
            f["header_size"] = json::value(static_cast<std::int64_t>(file.header_size()));
            f["tensor_count"] = json::value(static_cast<std::int64_t>(file.tensors().size()));
            json::object metadata;
            for (const auto& [key, value] : file.metadata())
                metadata[key] = json::value(value);
            f["metadata"] = json::value(std::move(metadata));
            files.emplace_back(std::move(f));
        }
        out["files"] = json::value(std::move(files));
        if (config) out["config"] = json::value(config_summary(*config));
        out["tensor_count"] = json::value(static_cast<std::int64_t>(rows.size()));
        out["parameter_count"] = json::value(static_cast<std::int64_t>(weights.parameter_count()));
        out["byte_size"] = json::value(static_cast<std::int64_t>(weights.byte_size()));
        json::object dtypes;
        for (const auto& [name, counts] : by_dtype) {
            json::object d;
            d["tensors"] = json::value(static_cast<std::int64_t>(counts.first));
            d["parameters"] = json::value(static_cast<std::int64_t>(counts.second));
            dtypes[name] = json::value(std::move(d));
        }
        out["dtypes"] = json::value(std::move(dtypes));
        json::array tensors;
        for (const auto& row : rows) {
            json::object t;
            t["name"] = json::value(row.tensor->name());
            t["dtype"] = json::value(std::string(dtype_name(row.tensor->type())));
            json::array shape;
            for (const auto extent : row.tensor->shape())
                shape.emplace_back(static_cast<std::int64_t>(extent));
            t["shape"] = json::value(std::move(shape));
            t["file"] = json::value(row.file);
            t["bytes"] = json::value(static_cast<std::int64_t>(row.tensor->bytes().size()));
            tensors.emplace_back(std::move(t));
        }
        out["tensors"] = json::value(std::move(tensors));
        std::printf("%s\n", json::dump(json::value(std::move(out)), 2).c_str());
        return 0;
    }

    std::printf("%s: %zu safetensors file%s, %s\n", path.string().c_str(), weights.files().size(),
                weights.files().size() == 1 ? "" : "s", human_bytes(file_bytes).c_str());
    if (config) {
        std::string line;
        for (const auto& [key, value] : config_summary(*config)) {
            if (!line.empty()) line += ", ";
            line += key + "=" + (value.is_string() ? value.as_string() : json::dump(value));
        }
        std::printf("config: %s\n", line.empty() ? "(no recognised fields)" : line.c_str());
    }
    std::printf("tensors: %s, parameters: %s, bytes: %s\n", grouped(rows.size()).c_str(),
                grouped(weights.parameter_count()).c_str(), human_bytes(weights.byte_size()).c_str());
    std::string dtype_line;
    for (const auto& [name, counts] : by_dtype) {
        if (!dtype_line.empty()) dtype_line += ", ";
        dtype_line += name + " " + grouped(counts.first) + (counts.first == 1 ? " tensor (" : " tensors (") +
                      grouped(counts.second) + " parameters)";
    }
    if (!dtype_line.empty()) std::printf("dtypes: %s\n", dtype_line.c_str());

    std::size_t name_width = 4, dtype_width = 5, shape_width = 5;
    std::vector<std::string> shapes;
    shapes.reserve(rows.size());
    for (const auto& row : rows) {
        shapes.push_back(anvil::detail::extents_to_string(row.tensor->shape(), false));
        name_width = std::max(name_width, row.tensor->name().size());
        dtype_width = std::max(dtype_width, dtype_name(row.tensor->type()).size());
        shape_width = std::max(shape_width, shapes.back().size());
    }
    const bool sharded = weights.files().size() > 1;
    std::printf("\n%-*s  %-*s  %-*s%s\n", static_cast<int>(name_width), "name", static_cast<int>(dtype_width),
                "dtype", static_cast<int>(shape_width), "shape", sharded ? "  file" : "");
    for (std::size_t i = 0; i < rows.size(); ++i) {
        std::printf("%-*s  %-*s  %-*s%s%s\n", static_cast<int>(name_width), rows[i].tensor->name().c_str(),
                    static_cast<int>(dtype_width), std::string(dtype_name(rows[i].tensor->type())).c_str(),
                    static_cast<int>(shape_width), shapes[i].c_str(), sharded ? "  " : "",
                    sharded ? rows[i].file.c_str() : "");
    }
    return 0;
}

}  // namespace anvil::cli
