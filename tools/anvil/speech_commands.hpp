// `anvil transcribe`: Whisper speech-to-text of WAVE files (16 kHz) or of log-mel features (.npy).
#pragma once

#include "arguments.hpp"
#include "model_commands.hpp"
#include "text_commands.hpp"

#include <anvil/anvil.hpp>

#include <cstdio>
#include <string>
#include <vector>

namespace anvil::cli {

inline constexpr const char* transcribe_usage =
    "usage: anvil transcribe --model DIR (AUDIO.wav... | --features F.npy) [--max-new-tokens N]\n"
    "                        [--language L] [--task transcribe|translate] [--timestamps]\n"
    "                        [--mel-out F.npy] [--encoder-out F.npy] [--backend cpu|ane|coreml|auto]\n"
    "                        [--strict-device] [--compress KIND] [--json]\n"
    "\n"
    "Whisper speech-to-text, greedy, as Hugging Face's generate: the prompt is <|startoftranscript|>, the\n"
    "language (detected when --language is not given; multilingual models), the task and <|notimestamps|>\n"
    "(unless --timestamps). Audio must be 16 kHz WAVE; past 30 s it is decoded in consecutive 30 s\n"
    "windows. --features takes log-mel features [n_mels, frames] (or [1, n_mels, frames]). --json prints\n"
    "{\"text\", \"ids\"} (ids: the generated tokens after the prompt); --mel-out writes the first window's\n"
    "log-mel [n_mels, 3000], --encoder-out the encoder's output for it [1500, d_model].\n";

namespace detail_speech {

// "[0.00 -> 2.40] text" per timestamp pair, as Whisper's segments (only with --timestamps).
inline std::string timestamped_text(const models::whisper& model, const std::vector<std::int32_t>& ids) {
    const auto begin = model.config().timestamp_begin();
    if (!begin || !model.has_tokenizer()) return {};
    std::string out;
    std::vector<std::int32_t> text;
    std::optional<double> start;
    for (const std::int32_t id : ids) {
        if (id < *begin) {
            text.push_back(id);
            continue;
        }
        const double seconds = 0.02 * static_cast<double>(id - *begin);
        if (!start) {
            start = seconds;
            continue;
        }
        char line[64];
        std::snprintf(line, sizeof line, "[%.2f -> %.2f]", *start, seconds);
        out += line + model.text(text) + "\n";
        text.clear();
        start.reset();
    }
    if (!text.empty()) out += model.text(text) + "\n";
    return out;
}

inline json::object result_json(const std::string& input, const models::transcription& result) {
    json::object entry;
    entry["input"] = input;
    entry["text"] = result.text;
    entry["ids"] = detail_text::json_ints(result.ids);
    entry["language"] = result.language;
    json::array windows;
    for (const auto& window : result.windows) {
        json::object w;
        w["prompt"] = detail_text::json_ints(window.prompt);
        w["ids"] = detail_text::json_ints(window.generated);
        w["stop_reason"] = window.stop_reason;
        windows.emplace_back(std::move(w));
    }
    entry["windows"] = json::value(std::move(windows));
    return entry;
}

}  // namespace detail_speech

inline int run_transcribe(const std::vector<std::string_view>& argv, const char* argv0) {
    const arguments args("transcribe", argv,
                         {{"model", true},
                          {"features", true},
                          {"max-new-tokens", true},
                          {"language", true},
                          {"task", true},
                          {"timestamps", false},
                          {"mel-out", true},
                          {"encoder-out", true},
                          {"backend", true},
                          {"compress", true},
                          {"strict-device", false},
                          {"out", true},
                          {"json", false},
                          {"help", false}});
    if (args.flag("help")) {
        std::fputs(transcribe_usage, stdout);
        return 0;
    }
    const std::string folder = model_folder(args, "transcribe");
    const auto features_file = args.value("features");
    const auto& files = args.positional();
    if (features_file.has_value() == !files.empty())
        throw usage_error("transcribe: give either AUDIO.wav... or --features F.npy (one of them, not both)");
    models::transcribe_options options;
    options.language = args.value("language").value_or("");
    options.task = args.value("task").value_or("transcribe");
    if (options.task != "transcribe" && options.task != "translate")
        throw usage_error(
            detail::message("transcribe: --task must be transcribe or translate, got '", options.task, "'"));
    options.timestamps = args.flag("timestamps");
    if (const auto n = args.value("max-new-tokens")) {
        char* end = nullptr;
        const long long value = std::strtoll(n->c_str(), &end, 10);
        if (n->empty() || end != n->c_str() + n->size() || value < 1 || value > 100000)
            throw usage_error(
                detail::message("transcribe: --max-new-tokens must be a positive integer, got '", *n, "'"));
        options.max_new_tokens = value;
    }
    if ((args.value("mel-out") || args.value("encoder-out")) && files.size() > 1)
        throw usage_error("transcribe: --mel-out and --encoder-out take one input");
    if (args.value("out"))
        throw usage_error(
            "transcribe: --out is not an output of transcribe (use --mel-out or --encoder-out)");

    const progress shown;
    shown.say("loading " + folder);
    auto model = models::whisper::load(folder, backend_options(args, "transcribe", argv0));
    std::vector<std::string> inputs;
    std::vector<models::transcription> results;
    const auto run = [&](const std::string& name, const host_tensor& features) {
        if (args.value("mel-out") || args.value("encoder-out")) {
            // The first window, padded with zeros as transcription pads it.
            const host_tensor first = model.window(features, 0);
            if (const auto out = args.value("mel-out")) write_npy(*out, first);
            if (const auto out = args.value("encoder-out")) {
                shown.say("encoding");
                write_npy(*out, model.encode(first));
            }
        }
        shown.say("transcribing " + name);
        std::size_t generated = 0;
        models::transcribe_options with_progress = options;
        with_progress.on_token = [&](std::int32_t) {
            shown.say(detail::message("transcribing ", name, ": ", ++generated, " tokens"));
        };
        inputs.push_back(name);
        results.push_back(model.transcribe_features(features, with_progress));
    };
    if (features_file) {
        const auto array = npy::read(*features_file);
        dims shape(array.shape);
        if (shape.rank() == 3 && shape[0] == 1) shape = dims{shape[1], shape[2]};
        if (shape.rank() != 2 || shape[0] != model.config().mel_bins) {
            throw shape_error(detail::message(*features_file, ": expected log-mel features [",
                                              model.config().mel_bins, ", frames] (num_mel_bins), got ",
                                              dims(array.shape)));
        }
        run(*features_file, host_tensor::from(array.to_f32(), shape));
    } else {
        for (const auto& path : files) {
            shown.say("reading " + path);
            const audio speech = read_wav(path);
            if (speech.sample_rate != 16000) {
                throw error(detail::message(
                    path, ": the audio is at ", speech.sample_rate,
                    " Hz; Whisper takes 16000 Hz (resample it first, e.g. sox IN -r 16000 OUT.wav)"));
            }
            run(path, model.features(speech.samples));
        }
    }
    if (args.flag("json")) {
        json::object report;
        report["model"] = folder;
        report["placement"] = placement_json();
        if (results.size() == 1) {
            for (auto& [key, item] : detail_speech::result_json(inputs[0], results[0]))
                report[key] = std::move(item);
        } else {
            json::array list;
            for (std::size_t i = 0; i < results.size(); ++i)
                list.emplace_back(detail_speech::result_json(inputs[i], results[i]));
            report["results"] = json::value(std::move(list));
        }
        std::printf("%s\n", json::dump(json::value(std::move(report))).c_str());
        return 0;
    }
    for (std::size_t i = 0; i < results.size(); ++i) {
        if (results.size() > 1) std::printf("%s\n", inputs[i].c_str());
        if (options.timestamps) {
            std::printf("%s", detail_speech::timestamped_text(model, results[i].ids).c_str());
        } else {
            std::printf("%s\n", results[i].text.c_str());
        }
    }
    return 0;
}

}  // namespace anvil::cli
