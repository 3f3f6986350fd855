// `anvil bench`: what a model costs on this machine and backend — load, compile and first result, steady
// state, tokens/s for decoder LMs, and memory (the checkpoint's bytes, what loading and the first result
// added to the resident set, the peak). Inputs are synthetic and fixed, so two runs measure the same work.
#pragma once

#include "arguments.hpp"
#include "clip_commands.hpp"
#include "lm_commands.hpp"
#include "model_commands.hpp"
#include "plan.hpp"

#include <anvil/backend/resident_weights.hpp>
#include <anvil/io/image_transforms.hpp>
#include <anvil/models/llm/causal_lm.hpp>
#include <anvil/models/speech/whisper.hpp>
#include <anvil/models/text/cross_encoder.hpp>
#include <anvil/models/text/sentence_encoder.hpp>
#include <anvil/models/vision/image_classifier.hpp>

#include <sys/resource.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace anvil::cli {

inline constexpr const char* bench_usage =
    "usage: anvil bench --model DIR|FILE.gguf [--task "
    "embed|embed-image|rerank|classify|generate|transcribe]\n"
    "                   [--batch N] [--runs N] [--prompt-tokens N] [--new-tokens N] [--context N]\n"
    "                   [--backend cpu|ane|coreml|auto] [--strict-device] [--compress KIND]\n"
    "                   [--products exact|int8] [--max-program-weights SIZE] [--json]\n"
    "       anvil bench --plan --model DIR|FILE.gguf [--context N] [--compress KIND]\n"
    "                   [--max-program-weights SIZE] [--json]\n"
    "\n"
    "Times a model folder on one backend: load (reading and checking the weights), first result (compiling\n"
    "the programs its input shapes need, then running), steady state (the median of --runs further runs, 5 "
    "by\n"
    "default), and for decoder LMs prefill and decode tokens/s and the time to the first token. Memory: the\n"
    "checkpoint's bytes, the weights the programs hold on each device (CPU: f32 copies, packed panels and\n"
    "weights read as stored; Neural Engine: the blobs its programs hold), the growth of the resident set\n"
    "over load and first result, and the peak resident set.\n"
    "The task comes from config.json (architectures, modules.json) unless --task names it; a .gguf file is\n"
    "a decoder LM (generate), with --products int8 by default as in anvil generate. Inputs are\n"
    "synthetic: --batch texts, pairs or images (8), a prompt of --prompt-tokens ids (32) and --new-tokens "
    "(64).\n"
    "A CLIP folder benchmarks its image tower (embed-image, the default) or its text tower (embed); a "
    "Whisper\n"
    "folder (transcribe) its encoder per 30 s window and its decoder's tokens/s over --new-tokens tokens.\n"
    "--context N sets a decoder LM's largest context (its default: the model's, at most 8192).\n"
    "--max-program-weights SIZE (bytes, or with K, M or G: 256M is the default) is the most weights one\n"
    "Neural Engine program holds: a model past it runs in chunks of whole layers, each its own program.\n"
    "\n"
    "--plan prints, without loading any weight, how a decoder LM (a folder's config.json, or a GGUF file's\n"
    "metadata) runs on the Neural Engine: the chunks of layers its weights split into, each chunk's fp16\n"
    "weights (and, with --compress, what a Core ML program stores), KV cache bytes at --context, the\n"
    "programs prefill and decode compile, and whether they fit the compile budget (~119 per process) and\n"
    "the programs the device keeps loaded at once (~15). --json prints it as an object.\n";

namespace detail_bench {

using clock = std::chrono::steady_clock;

inline double seconds_since(clock::time_point start) {
    return std::chrono::duration<double>(clock::now() - start).count();
}

// The resident set now (Linux /proc/self/statm), in bytes; 0 where the system does not say.
inline std::int64_t resident_bytes() {
    std::ifstream statm("/proc/self/statm");
    std::int64_t size = 0, resident = 0;
    if (!(statm >> size >> resident)) return 0;
    return resident * static_cast<std::int64_t>(sysconf(_SC_PAGESIZE));
}

// The peak resident set so far, in bytes (getrusage: kilobytes on Linux, bytes on macOS).
inline std::int64_t peak_resident_bytes() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
#if defined(__APPLE__)
    return static_cast<std::int64_t>(usage.ru_maxrss);
#else
    return static_cast<std::int64_t>(usage.ru_maxrss) * 1024;
#endif
}

// The checkpoint's bytes: a folder's .safetensors files, or the file itself (a .gguf file).
inline std::int64_t checkpoint_bytes(const std::filesystem::path& folder) {
    if (std::filesystem::is_regular_file(folder))
        return static_cast<std::int64_t>(std::filesystem::file_size(folder));
    std::int64_t total = 0;
    for (const auto& entry : std::filesystem::directory_iterator(folder)) {
        if (entry.is_regular_file() && entry.path().extension() == ".safetensors")
            total += static_cast<std::int64_t>(entry.file_size());
    }
    return total;
}

// The task a folder's config.json describes: its architectures, or sentence-transformers' modules.json.
inline std::string detect_task(const std::filesystem::path& folder) {
    if (std::filesystem::exists(folder / "modules.json")) return "embed";
    const auto config_path = folder / "config.json";
    if (!std::filesystem::exists(config_path)) {
        throw error(detail::message("bench: ", folder.string(),
                                    " has no config.json to tell the task from; give --task"));
    }
    const json::value config = json::parse_file(config_path.string());
    std::vector<std::string> names;
    if (const json::value* architectures = config.find("architectures");
        architectures && architectures->is_array()) {
        for (const json::value& name : architectures->as_array())
            if (name.is_string()) names.push_back(name.as_string());
    }
    if (const json::value* architecture = config.find("architecture");
        architecture && architecture->is_string())
        names.push_back(architecture->as_string());  // timm-style folders
    for (const std::string& name : names) {
        if (name == "CLIPModel") return "embed-image";
        if (name == "WhisperForConditionalGeneration") return "transcribe";
        if (name.ends_with("ForCausalLM") || name.ends_with("LMHeadModel")) return "generate";
        if (name.ends_with("ForSequenceClassification")) return "rerank";
        if (name.ends_with("ForImageClassification") || name.ends_with("ForImageClassificationWithTeacher") ||
            name.starts_with("resnet"))
            return "classify";
        if (name.ends_with("Model")) return "embed";
    }
    throw error(
        detail::message("bench: ", config_path.string(),
                        " does not say which task the model does (architectures: none anvil knows); give "
                        "--task embed|rerank|classify|generate"));
}

// Fixed texts of a few dozen tokens each, different per item so no batch is one text repeated.
inline std::vector<std::string> synthetic_texts(std::size_t count) {
    static const char* words[] = {"the",   "quick", "brown", "fox",   "jumps", "over", "a",     "lazy",
                                  "dog",   "while", "rain",  "falls", "on",    "old",  "roofs", "and",
                                  "quiet", "river", "banks", "shine", "under", "grey", "skies", "today"};
    std::vector<std::string> texts;
    for (std::size_t i = 0; i < count; ++i) {
        std::string text;
        for (std::size_t w = 0; w < 24 + i % 8; ++w) {
            if (!text.empty()) text += ' ';
            text += words[(w * 7 + i * 3) % std::size(words)];
        }
        texts.push_back(std::move(text));
    }
    return texts;
}

// Whether the folder has a tokenizer the text recipes read; without one, the text tasks run on token ids.
inline bool has_tokenizer(const std::filesystem::path& folder) {
    return std::filesystem::exists(folder / "tokenizer.json") ||
           std::filesystem::exists(folder / "vocab.txt") ||
           (std::filesystem::exists(folder / "vocab.json") && std::filesystem::exists(folder / "merges.txt"));
}

// Token ids of the lengths synthetic_texts() has, spread over the vocabulary (the first id is kept clear of
// 0, which many vocabularies use for padding).
inline std::vector<std::vector<std::int32_t>> synthetic_ids(std::size_t count, std::int64_t vocab) {
    std::vector<std::vector<std::int32_t>> ids(count);
    for (std::size_t i = 0; i < count; ++i) {
        for (std::size_t t = 0; t < 32 + i % 8; ++t)
            ids[i].push_back(
                static_cast<std::int32_t>(1 + static_cast<std::int64_t>(t * 37 + i * 11) % (vocab - 1)));
    }
    return ids;
}

struct timings {
    double load_s = 0, first_s = 0, steady_s = 0;
    std::int64_t rss_before = 0, rss_after = 0;
    resident_weights weights;  // the programs' weights once the first result is in
};

// Times load(), one first call and `runs` more; returns the median of the later ones as steady state.
inline timings measure(const std::function<void()>& load, const std::function<void()>& once,
                       std::int64_t runs) {
    timings t;
    t.rss_before = resident_bytes();
    auto start = clock::now();
    load();
    t.load_s = seconds_since(start);
    start = clock::now();
    once();
    t.first_s = seconds_since(start);
    t.rss_after = resident_bytes();
    t.weights = resident_weight_bytes();
    std::vector<double> steady;
    for (std::int64_t r = 0; r < runs; ++r) {
        start = clock::now();
        once();
        steady.push_back(seconds_since(start));
    }
    std::sort(steady.begin(), steady.end());
    t.steady_s = steady.empty() ? 0.0 : steady[steady.size() / 2];
    return t;
}

}  // namespace detail_bench

inline int run_bench(const std::vector<std::string_view>& argv, const char* argv0) {
    const arguments args("bench", argv,
                         {{"model", true},
                          {"task", true},
                          {"batch", true},
                          {"runs", true},
                          {"prompt-tokens", true},
                          {"new-tokens", true},
                          {"backend", true},
                          {"compress", true},
                          {"products", true},
                          {"strict-device", false},
                          {"json", false},
                          {"plan", false},
                          {"context", true},
                          {"max-program-weights", true},
                          {"help", false}});
    if (args.flag("help")) {
        std::fputs(bench_usage, stdout);
        return 0;
    }
    if (args.flag("plan")) return run_plan(args);
    const std::string folder = model_folder(args, "bench");
    if (!args.positional().empty())
        throw usage_error(detail::message("bench: unexpected argument '", args.positional().front(), "'"));
    // A .gguf file holds a decoder LM; a folder says what it holds in its config.json.
    const auto named_task = args.value("task");
    const std::string task = named_task                  ? *named_task
                             : folder.ends_with(".gguf") ? std::string("generate")
                                                         : detail_bench::detect_task(folder);
    const auto batch = static_cast<std::size_t>(detail_lm::parse_integer(args, "batch", 8, 1, "bench"));
    const auto runs = detail_lm::parse_integer(args, "runs", 5, 1, "bench");
    const auto prompt_tokens = detail_lm::parse_integer(args, "prompt-tokens", 32, 1, "bench");
    const auto new_tokens = detail_lm::parse_integer(args, "new-tokens", 64, 1, "bench");
    models::load_options load = backend_options(args, "bench", argv0);
    // As anvil generate: int8 products by default for a .gguf file.
    load.compile.int8_activations = detail_lm::int8_products(args, "bench", folder.ends_with(".gguf"));
    if (const auto size = args.value("max-program-weights"))
        load.compile.ane_max_program_weight_bytes =
            detail_plan::parse_size(*size, "max-program-weights", "bench");
    const auto context = detail_lm::parse_integer(args, "context", 0, 1, "bench");
    if (context > 0 && task != "generate")
        throw usage_error(
            detail::message("bench: --context is for decoder LMs (--task generate), not ", task));

    json::object extra;
    detail_bench::timings t;
    const progress shown;
    shown.say("benchmarking " + folder + " (" + task + ")");
    const bool clip = detail_clip::is_clip_folder(folder);
    if (task == "embed-image" && !clip)
        throw usage_error(
            detail::message("bench: --task embed-image is for CLIP folders; ", folder, " is not one"));
    if (clip && (task == "embed" || task == "embed-image")) {
        // CLIP's towers: texts (tokenised) or images (synthetic pixels at the model's size) per second.
        std::optional<models::clip> model;
        const auto texts = detail_bench::synthetic_texts(batch);
        host_tensor pixels;
        t = detail_bench::measure(
            [&] {
                model.emplace(models::clip::load(folder, load));
                const models::clip_vision_config& v = model->config().vision;
                std::vector<float> values(batch * static_cast<std::size_t>(3 * v.image_size * v.image_size));
                for (std::size_t i = 0; i < values.size(); ++i)
                    values[i] = static_cast<float>((i * 2654435761u) % 1000) / 500.0f - 1.0f;
                pixels = host_tensor::from(
                    values, dims{static_cast<std::int64_t>(batch), 3, v.image_size, v.image_size});
            },
            [&] {
                if (task == "embed")
                    (void)model->text_embeddings(std::span<const std::string>(texts));
                else
                    (void)model->image_embeddings(pixels);
            },
            runs);
        extra["input"] = task == "embed" ? "text" : "pixels";
        extra["items_per_s"] = json::value(static_cast<double>(batch) / t.steady_s);
    } else if (task == "embed") {
        std::optional<models::sentence_encoder> encoder;
        const auto texts = detail_bench::synthetic_texts(batch);
        std::vector<std::vector<std::int32_t>> ids;  // when the folder has no tokenizer
        t = detail_bench::measure(
            [&] {
                encoder.emplace(models::sentence_encoder::load(folder, load));
                if (!detail_bench::has_tokenizer(folder))
                    ids = detail_bench::synthetic_ids(batch, encoder->config().vocab_size);
            },
            [&] {
                if (ids.empty())
                    (void)encoder->encode(std::span<const std::string>(texts));
                else
                    (void)encoder->encode_ids(ids);
            },
            runs);
        extra["input"] = ids.empty() ? "text" : "token ids (the folder has no tokenizer)";
        extra["items_per_s"] = json::value(static_cast<double>(batch) / t.steady_s);
    } else if (task == "rerank") {
        std::optional<models::cross_encoder> model;
        const auto texts = detail_bench::synthetic_texts(batch + 1);
        std::vector<std::pair<std::string, std::string>> pairs;
        for (std::size_t i = 0; i < batch; ++i)
            pairs.emplace_back(texts[batch].substr(0, 40), texts[i]);
        std::vector<std::vector<std::int32_t>> ids, type_ids;  // when the folder has no tokenizer
        t = detail_bench::measure(
            [&] {
                model.emplace(models::cross_encoder::load(folder, load));
                if (detail_bench::has_tokenizer(folder)) return;
                ids = detail_bench::synthetic_ids(batch, model->config().vocab_size);
                if (model->config().type_vocab_size > 1) {
                    for (const auto& pair : ids) {  // the first half the query, the rest the passage
                        type_ids.emplace_back(pair.size(), 0);
                        std::fill(type_ids.back().begin() + static_cast<std::ptrdiff_t>(pair.size() / 2),
                                  type_ids.back().end(), 1);
                    }
                }
            },
            [&] {
                if (ids.empty())
                    (void)model->predict(pairs);
                else
                    (void)model->predict_ids(ids, type_ids);
            },
            runs);
        extra["input"] = ids.empty() ? "text" : "token ids (the folder has no tokenizer)";
        extra["items_per_s"] = json::value(static_cast<double>(batch) / t.steady_s);
    } else if (task == "classify") {
        std::optional<models::image_classifier> classifier;
        host_tensor pixels;
        t = detail_bench::measure(
            [&] {
                classifier.emplace(models::image_classifier::load(folder, load));
                // What preprocessing() makes: the model's own size (ViT, DeiT), else the crop (224 by
                // default).
                const image_preprocessing p = classifier->preprocessing();
                const image_size fixed = classifier->input_size();
                const std::int64_t h =
                    fixed.height > 0 ? fixed.height : (p.crop_height > 0 ? p.crop_height : 224);
                const std::int64_t w =
                    fixed.width > 0 ? fixed.width : (p.crop_width > 0 ? p.crop_width : 224);
                std::vector<float> values(static_cast<std::size_t>(batch) * 3 *
                                          static_cast<std::size_t>(h * w));
                for (std::size_t i = 0; i < values.size(); ++i)
                    values[i] = static_cast<float>((i * 2654435761u) % 1000) / 500.0f - 1.0f;
                pixels = host_tensor::from(values, dims{static_cast<std::int64_t>(batch), 3, h, w});
            },
            [&] { (void)classifier->logits(pixels); }, runs);
        extra["items_per_s"] = json::value(static_cast<double>(batch) / t.steady_s);
    } else if (task == "transcribe") {
        // Whisper: one 30 s window of a synthetic signal; each run encodes it, then decodes --new-tokens
        // tokens after the prompt. The encoder is timed alone, and the decode rate is the run's time less an
        // encoder run over the tokens stepped (the prompt's included).
        std::optional<models::whisper> model;
        host_tensor features;
        models::transcribe_options how;
        how.max_new_tokens = new_tokens;
        std::vector<double> encoder_s, decode_rate;
        std::int64_t stepped = 0;
        t = detail_bench::measure(
            [&] {
                model.emplace(models::whisper::load(folder, load));
                std::vector<float> samples(30 * 16000);
                for (std::size_t i = 0; i < samples.size(); ++i) {
                    const double x = static_cast<double>(i);
                    samples[i] =
                        static_cast<float>(0.3 * std::sin(0.05 * x + 2e-6 * x * x) * std::sin(3e-4 * x));
                }
                features = model->features(samples);
                if (model->config().multilingual) how.language = model->config().language_ids.begin()->first;
            },
            [&] {
                auto start = detail_bench::clock::now();
                (void)model->encode(features);
                const double encoded = detail_bench::seconds_since(start);
                start = detail_bench::clock::now();
                const auto result = model->transcribe_features(features, how);
                const double all = detail_bench::seconds_since(start);
                stepped = static_cast<std::int64_t>(result.windows.front().prompt.size() + result.ids.size());
                encoder_s.push_back(encoded);
                decode_rate.push_back(static_cast<double>(stepped) / std::max(all - encoded, 1e-9));
            },
            runs);
        // The first run compiled; the medians are over the others.
        const auto median = [](std::vector<double> v) {
            v.erase(v.begin());
            std::sort(v.begin(), v.end());
            return v.empty() ? 0.0 : v[v.size() / 2];
        };
        extra["input"] = "one 30 s window of a synthetic signal";
        extra["encoder_s"] = json::value(median(encoder_s));
        extra["decode_tokens_per_s"] = json::value(median(decode_rate));
        extra["decoded_tokens"] = stepped;
    } else if (task == "generate") {
        models::causal_lm_options options;
        options.load = load;
        options.max_context = context;
        std::optional<models::causal_lm> lm;
        std::vector<std::int32_t> prompt(static_cast<std::size_t>(prompt_tokens));
        models::generation_options generation;
        generation.max_new_tokens = new_tokens;
        generation.stop_at_eos = false;  // always the same number of tokens
        models::generation_stats stats;
        t = detail_bench::measure(
            [&] {
                lm.emplace(models::causal_lm::load(folder, options));
                const std::int64_t vocab = lm->config().vocab_size;  // ids spread over the vocabulary
                for (std::size_t i = 0; i < prompt.size(); ++i)
                    prompt[i] = static_cast<std::int32_t>((1 + static_cast<std::int64_t>(i) * 37) % vocab);
            },
            [&] { stats = lm->generate(std::span<const std::int32_t>(prompt), generation).stats; }, runs);
        extra["prompt_tokens"] = stats.prompt_tokens;
        extra["generated_tokens"] = stats.generated_tokens;
        extra["time_to_first_token_s"] = json::value(stats.time_to_first_token_s);
        extra["prefill_tokens_per_s"] = json::value(stats.prefill_tokens_per_s);
        extra["decode_tokens_per_s"] = json::value(stats.decode_tokens_per_s);
    } else {
        throw usage_error(detail::message(
            "bench: --task must be embed, embed-image, rerank, classify, generate or transcribe, got '", task,
            "'"));
    }

    const std::int64_t checkpoint = detail_bench::checkpoint_bytes(folder);
    const std::int64_t growth = t.rss_before > 0 ? t.rss_after - t.rss_before : 0;
    const std::int64_t peak = detail_bench::peak_resident_bytes();
    if (args.flag("json")) {
        json::object report;
        report["model"] = folder;
        report["task"] = task;
        report["batch"] = static_cast<std::int64_t>(batch);
        report["runs"] = static_cast<std::int64_t>(runs);
        report["load_s"] = json::value(t.load_s);
        report["first_result_s"] = json::value(t.first_s);
        report["compile_s"] = json::value(std::max(0.0, t.first_s - t.steady_s));
        report["steady_s"] = json::value(t.steady_s);
        for (const auto& [key, item] : extra)
            report[key] = item;
        report["checkpoint_bytes"] = checkpoint;
        report["resident_weight_bytes"] =
            static_cast<std::int64_t>(t.weights.cpu_bytes + t.weights.ane_bytes);
        report["weights_cpu_bytes"] = static_cast<std::int64_t>(t.weights.cpu_bytes);
        report["weights_ane_bytes"] = static_cast<std::int64_t>(t.weights.ane_bytes);
        report["resident_growth_bytes"] = growth;
        report["peak_resident_bytes"] = peak;
        report["placement"] = placement_json();
        std::printf("%s\n", json::dump(json::value(std::move(report))).c_str());
        return 0;
    }
    if (task == "generate") {
        std::printf("%s (generate, %lld prompt tokens, %lld new)\n", folder.c_str(),
                    static_cast<long long>(prompt_tokens), static_cast<long long>(new_tokens));
    } else {
        std::printf("%s (%s, batch %zu)\n", folder.c_str(), task.c_str(), batch);
    }
    std::printf("  load            %9.4f s\n", t.load_s);
    std::printf("  first result    %9.4f s  (compile and first-touch: %.4f s over steady state)\n", t.first_s,
                std::max(0.0, t.first_s - t.steady_s));
    std::printf("  steady state    %9.4f s  (median of %lld runs)\n", t.steady_s,
                static_cast<long long>(runs));
    if (task == "transcribe") {
        std::printf("  encoder         %9.4f s per 30 s window; decoder %.1f tokens/s\n",
                    extra["encoder_s"].as_double(), extra["decode_tokens_per_s"].as_double());
    } else if (task == "generate") {
        std::printf("  time to first token %.4f s, prefill %.1f tokens/s, decode %.1f tokens/s\n",
                    extra["time_to_first_token_s"].as_double(), extra["prefill_tokens_per_s"].as_double(),
                    extra["decode_tokens_per_s"].as_double());
    } else {
        std::printf("  throughput      %9.1f items/s\n", extra["items_per_s"].as_double());
    }
    std::printf("  checkpoint %.1f MB; weights resident: CPU %.1f MB, Neural Engine %.1f MB\n",
                static_cast<double>(checkpoint) / 1e6, static_cast<double>(t.weights.cpu_bytes) / 1e6,
                static_cast<double>(t.weights.ane_bytes) / 1e6);
    std::printf("  resident set: growth %.1f MB, peak %.1f MB\n", static_cast<double>(growth) / 1e6,
                static_cast<double>(peak) / 1e6);
    return 0;
}

}  // namespace anvil::cli
