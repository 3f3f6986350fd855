// `anvil logits` and `anvil generate`: decoder language models (GPT-2, Llama, Qwen2/3, Mistral) from a
// Hugging Face folder. generate streams the text to stdout as it is produced; on a terminal a progress line
// (prefill) and a closing line of statistics (tokens/s) go to stderr.
#pragma once

#include "arguments.hpp"
#include "model_commands.hpp"
#include "text_commands.hpp"

#include <anvil/anvil.hpp>
#include <anvil/models/llm/causal_lm.hpp>

#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace anvil::cli {

// What logits and generate say about --rescale-fp16, after their own usage.
inline constexpr const char* rescale_usage =
    "--rescale-fp16 calibrates at load on --calibrate-ids LIST or --calibrate-text TEXT (default: the\n"
    "command's own ids or prompt) and folds a power of two per layer and pair of projections (v_proj ->\n"
    "o_proj, up_proj -> down_proj) into the weights, so fp16 activations (the Neural Engine's) stay under\n"
    "2^14; fp32 results do not change. The scales and the fp16 overflow before and after (on the\n"
    "calibration ids, every op rounded to fp16) go to stderr, or under \"fp16_rescale\" with --json.\n";

inline constexpr const char* logits_usage =
    "usage: anvil logits --model DIR --ids LIST [--backend cpu|ane|coreml|auto] [--strict-device]\n"
    "                    [--compress KIND] [--products exact|int8] [--ane-numerics]\n"
    "                    [--rescale-fp16 [--calibrate-ids LIST | --calibrate-text TEXT]] [--out F.npy] "
    "[--json]\n"
    "\n"
    "The logits [S, V] of a decoder language model (GPT-2, Llama, Qwen2/3, Mistral) at every position of "
    "the\n"
    "token ids LIST (comma-separated). --out writes them as float32 .npy, --json prints them; otherwise "
    "each\n"
    "position's five best tokens are listed. The products are exact (the dequantised weights' up to f32\n"
    "rounding) unless --products int8 (see anvil generate --help).\n"
    "--ane-numerics computes on the CPU with every op's output rounded to fp16, as the Neural Engine stores\n"
    "values (a value past 65504 becomes inf).\n";

inline constexpr const char* generate_usage =
    "usage: anvil generate --model DIR (--prompt TEXT | --ids LIST) [--chat [--system TEXT]]\n"
    "                      [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P]\n"
    "                      [--repetition-penalty R] [--seed S] [--backend cpu|ane|coreml|auto]\n"
    "                      [--strict-device] [--compress KIND] [--products exact|int8]\n"
    "                      [--rescale-fp16 [--calibrate-ids LIST | --calibrate-text TEXT]] [--json]\n"
    "\n"
    "Continues the prompt with a decoder language model, streaming the text to stdout as it is generated.\n"
    "Greedy unless --temperature T > 0 (then top-k, top-p and the seed apply); --repetition-penalty as\n"
    "Hugging Face's. Stops at the model's eos tokens or after N new tokens (default 128).\n"
    "--chat renders --prompt as a user message (after --system, if given) with the folder's chat template.\n"
    "--json prints {\"tokens\", \"text\", \"stop_reason\", \"stats\", \"products\",\n"
    "\"resident_weight_bytes\"} at the end instead of streaming.\n"
    "--products int8 (the default for a .gguf file on the CPU): products with Q8_0, Q4_0, Q4_K, Q6_K and\n"
    "int8 weights round the activations to 8 bits, 32 values to a scale, and multiply in integers, as\n"
    "llama.cpp does: faster, off from the exact product by llama.cpp's rounding. --products exact: every\n"
    "product is the dequantised weights' (the default otherwise, and anvil logits' unless asked).\n";

namespace detail_lm {

inline long long parse_integer(const arguments& args, std::string_view name, long long fallback,
                               long long minimum, std::string_view command) {
    const auto text = args.value(name);
    if (!text) return fallback;
    char* end = nullptr;
    errno = 0;
    const long long value = std::strtoll(text->c_str(), &end, 10);
    if (text->empty() || end != text->c_str() + text->size() || errno != 0 || value < minimum)
        throw usage_error(detail::message(command, ": --", name, " must be an integer >= ", minimum,
                                          ", got '", *text, "'"));
    return value;
}

inline double parse_number(const arguments& args, std::string_view name, double fallback,
                           std::string_view command) {
    const auto text = args.value(name);
    if (!text) return fallback;
    char* end = nullptr;
    errno = 0;
    const double value = std::strtod(text->c_str(), &end);
    if (text->empty() || end != text->c_str() + text->size() || errno != 0)
        throw usage_error(detail::message(command, ": --", name, " must be a number, got '", *text, "'"));
    return value;
}

inline std::uint64_t parse_seed(const arguments& args) {
    const auto text = args.value("seed");
    if (!text) return 0;
    char* end = nullptr;
    errno = 0;
    const unsigned long long value = std::strtoull(text->c_str(), &end, 10);
    if (text->empty() || (*text)[0] == '-' || end != text->c_str() + text->size() || errno != 0)
        throw usage_error(
            detail::message("generate: --seed must be an integer in [0, 2^64), got '", *text, "'"));
    return static_cast<std::uint64_t>(value);
}

// --products exact|int8 (compile_options::int8_activations), `int8_by_default` when not given.
inline bool int8_products(const arguments& args, std::string_view command, bool int8_by_default) {
    const auto text = args.value("products");
    if (!text) return int8_by_default;
    if (*text != "exact" && *text != "int8")
        throw usage_error(detail::message(command, ": --products must be exact or int8, got '", *text, "'"));
    return *text == "int8";
}

// The options --rescale-fp16, --calibrate-ids and --calibrate-text add to every LM command: `own_ids` or
// `own_text` (the command's input) is the calibration unless one of the last two names another.
inline void add_rescale_options(std::vector<option_spec>& spec) {
    spec.push_back({"rescale-fp16", false});
    spec.push_back({"calibrate-ids", true});
    spec.push_back({"calibrate-text", true});
}

inline std::optional<models::fp16_calibration> calibration(const arguments& args, std::string_view command,
                                                           const std::vector<std::int32_t>& own_ids,
                                                           const std::optional<std::string>& own_text) {
    const auto text = args.value("calibrate-text");
    const auto lists = parse_id_lists(args, "calibrate-ids");
    if (!args.flag("rescale-fp16")) {
        if (text || !lists.empty())
            throw usage_error(detail::message(command, ": --calibrate-", text ? "text" : "ids",
                                              " goes with --rescale-fp16"));
        return std::nullopt;
    }
    if (text && !lists.empty())
        throw usage_error(detail::message(command, ": give --calibrate-ids or --calibrate-text, not both"));
    if (lists.size() > 1)
        throw usage_error(detail::message(command, ": one --calibrate-ids LIST (", lists.size(), " given)"));
    models::fp16_calibration c;
    if (text) {
        c.text = *text;
    } else if (!lists.empty()) {
        c.ids = lists.front();
    } else if (own_text) {
        c.text = *own_text;
    } else {
        c.ids = own_ids;
    }
    return c;
}

inline models::causal_lm load_lm(const arguments& args, std::string_view command, const char* argv0,
                                 bool int8_products,
                                 std::optional<models::fp16_calibration> rescale = std::nullopt) {
    models::causal_lm_options options;
    options.load = backend_options(args, command, argv0);
    options.load.compile.int8_activations = int8_products;
    if (args.flag("ane-numerics")) {
        const auto backend = args.value("backend");
        if (backend && *backend != "cpu")
            throw usage_error(
                detail::message(command,
                                ": --ane-numerics rounds the CPU's values to fp16; it goes with "
                                "--backend cpu, not ",
                                *backend));
        options.load.compile.target = device::cpu;
        options.load.compile.ane_numerics = true;
    }
    options.fp16_rescale = std::move(rescale);
    return models::causal_lm::load(model_folder(args, command), options);
}

inline json::value json_overflows(const numerics_report& report) {
    json::array ops;
    for (const fp16_overflow& o : report.overflows) {
        json::object op;
        op["node"] = json::value(static_cast<std::int64_t>(o.node));
        op["op"] = json::value(std::string(op_name(o.kind)));
        if (!o.label.empty()) op["label"] = json::value(o.label);
        json::array shape;
        for (const std::int64_t extent : o.shape)
            shape.emplace_back(extent);
        op["shape"] = json::value(std::move(shape));
        op["overflowed"] = json::value(static_cast<std::int64_t>(o.overflowed));
        op["elements"] = json::value(static_cast<std::int64_t>(o.elements));
        op["max_abs"] = json_number(o.max_abs);
        ops.emplace_back(std::move(op));
    }
    return json::value(std::move(ops));
}

// For --json: {"calibration_tokens", "limit", "pairs": [{"layer", "pair", "producer", "consumer", "peak",
// "output_peak", "shift", "note"?}], "overflow_before", "overflow_after": [{"node", "op", "shape", ...}]}.
inline json::value json_rescale(const models::fp16_rescale_report& report) {
    json::object out;
    out["calibration_tokens"] = json::value(report.calibration_tokens);
    out["limit"] = json::value(report.limit);
    json::array pairs;
    for (const models::fp16_pair_scale& p : report.pairs) {
        json::object pair;
        pair["layer"] = json::value(p.layer);
        pair["pair"] = json::value(std::string(models::projection_pair_name(p.pair)));
        pair["producer"] = json::value(p.producer);
        pair["consumer"] = json::value(p.consumer);
        pair["peak"] = json::value(p.peak);
        pair["output_peak"] = json::value(p.output_peak);
        pair["shift"] = json::value(static_cast<std::int64_t>(p.shift));
        if (!p.note.empty()) pair["note"] = json::value(p.note);
        pairs.emplace_back(std::move(pair));
    }
    out["pairs"] = json::value(std::move(pairs));
    if (report.before) out["overflow_before"] = json_overflows(*report.before);
    if (report.after) out["overflow_after"] = json_overflows(*report.after);
    return json::value(std::move(out));
}

inline std::vector<std::int32_t> single_id_list(const arguments& args, std::string_view command) {
    const auto lists = parse_id_lists(args, "ids");
    if (lists.size() > 1)
        throw usage_error(detail::message(command, ": one --ids LIST (", lists.size(), " given)"));
    return lists.empty() ? std::vector<std::int32_t>{} : lists.front();
}

}  // namespace detail_lm

inline int run_logits(const std::vector<std::string_view>& argv, const char* argv0) {
    std::vector<option_spec> spec{{"model", true},         {"ids", true},      {"backend", true},
                                  {"compress", true},      {"products", true}, {"strict-device", false},
                                  {"ane-numerics", false}, {"out", true},      {"json", false},
                                  {"help", false}};
    detail_lm::add_rescale_options(spec);
    const arguments args("logits", argv, spec);
    if (args.flag("help")) {
        std::fputs(logits_usage, stdout);
        std::fputs(rescale_usage, stdout);
        return 0;
    }
    const std::string folder = model_folder(args, "logits");
    if (!args.positional().empty())
        throw usage_error(detail::message("logits: unexpected argument '", args.positional().front(),
                                          "' (the input is --ids LIST)"));
    const auto ids = detail_lm::single_id_list(args, "logits");
    if (ids.empty()) throw usage_error("logits: --ids LIST is required");
    const bool int8 = detail_lm::int8_products(args, "logits", false);
    const auto rescale = detail_lm::calibration(args, "logits", ids, std::nullopt);

    host_tensor result;
    std::optional<models::fp16_rescale_report> rescaled;
    {
        const progress shown;
        shown.say("loading " + folder);
        auto lm = detail_lm::load_lm(args, "logits", argv0, int8, rescale);
        rescaled = lm.fp16_rescale();
        shown.say(detail::message("computing the logits of ", ids.size(), " tokens"));
        result = lm.logits(ids);
    }
    if (rescaled && !args.flag("json")) std::fputs(rescaled->to_string().c_str(), stderr);
    if (const auto out = args.value("out")) write_npy(*out, result);
    if (args.flag("json")) {
        json::object report;
        report["model"] = folder;
        report["placement"] = placement_json();
        report["shape"] = detail_text::json_ints(
            {static_cast<std::int32_t>(result.shape()[0]), static_cast<std::int32_t>(result.shape()[1])});
        report["logits"] = detail_text::json_rows(result);
        if (rescaled) report["fp16_rescale"] = detail_lm::json_rescale(*rescaled);
        std::printf("%s\n", json::dump(json::value(std::move(report))).c_str());
        return 0;
    }
    if (args.value("out")) return 0;
    const auto values = result.to_f32();
    const auto vocab = static_cast<std::size_t>(result.shape()[1]);
    for (std::size_t s = 0; s < ids.size(); ++s) {
        std::vector<std::size_t> best;
        for (std::size_t v = 0; v < vocab; ++v) {
            const float x = values[s * vocab + v];
            auto at = best.begin();
            while (at != best.end() && values[s * vocab + *at] >= x)
                ++at;
            if (at - best.begin() < 5) best.insert(at, v);
            if (best.size() > 5) best.pop_back();
        }
        std::printf("%zu (id %d):", s, ids[s]);
        for (const std::size_t v : best)
            std::printf(" %zu:%.4f", v, static_cast<double>(values[s * vocab + v]));
        std::printf("\n");
    }
    return 0;
}

inline int run_generate(const std::vector<std::string_view>& argv, const char* argv0) {
    std::vector<option_spec> spec{{"model", true},
                                  {"prompt", true},
                                  {"ids", true},
                                  {"chat", false},
                                  {"system", true},
                                  {"max-new-tokens", true},
                                  {"temperature", true},
                                  {"top-k", true},
                                  {"top-p", true},
                                  {"repetition-penalty", true},
                                  {"seed", true},
                                  {"backend", true},
                                  {"compress", true},
                                  {"products", true},
                                  {"strict-device", false},
                                  {"json", false},
                                  {"help", false}};
    detail_lm::add_rescale_options(spec);
    const arguments args("generate", argv, spec);
    if (args.flag("help")) {
        std::fputs(generate_usage, stdout);
        std::fputs(rescale_usage, stdout);
        return 0;
    }
    const std::string folder = model_folder(args, "generate");
    if (!args.positional().empty())
        throw usage_error(detail::message("generate: unexpected argument '", args.positional().front(),
                                          "' (the prompt is --prompt TEXT or --ids LIST)"));
    const auto prompt = args.value("prompt");
    const auto ids = detail_lm::single_id_list(args, "generate");
    if (prompt.has_value() == !ids.empty())
        throw usage_error("generate: give either --prompt TEXT or --ids LIST (one of them)");
    const bool chat = args.flag("chat");
    if (chat && !prompt) throw usage_error("generate: --chat renders --prompt TEXT; it does not take --ids");
    if (args.value("system") && !chat) throw usage_error("generate: --system goes with --chat");
    // A GGUF file's quantised weights are llama.cpp's, and so by default are its products.
    const bool int8 = detail_lm::int8_products(args, "generate", folder.ends_with(".gguf"));

    models::generation_options options;
    options.max_new_tokens = detail_lm::parse_integer(args, "max-new-tokens", 128, 0, "generate");
    options.sampling.temperature = detail_lm::parse_number(args, "temperature", 0.0, "generate");
    options.sampling.top_k = detail_lm::parse_integer(args, "top-k", 0, 0, "generate");
    options.sampling.top_p = detail_lm::parse_number(args, "top-p", 1.0, "generate");
    options.sampling.repetition_penalty =
        detail_lm::parse_number(args, "repetition-penalty", 1.0, "generate");
    options.sampling.seed = detail_lm::parse_seed(args);
    try {
        models::recipe_detail::validate_sampling_options(options.sampling);
    } catch (const anvil::error& e) {
        throw usage_error(detail::message("generate: ", e.what()));
    }
    const bool as_json = args.flag("json");
    const bool terminal = isatty(STDOUT_FILENO) != 0 && isatty(STDERR_FILENO) != 0;
    const bool stats_line = isatty(STDERR_FILENO) != 0 && !as_json;

    const auto status = [&](const std::string& what) {
        if (!terminal) return;
        std::fprintf(stderr, "\r\033[K%s", what.c_str());
        std::fflush(stderr);
    };
    const auto rescale = detail_lm::calibration(args, "generate", ids, prompt);
    status("loading " + folder);
    auto lm = detail_lm::load_lm(args, "generate", argv0, int8, rescale);
    if (lm.fp16_rescale() && !as_json) {
        status("");
        std::fputs(lm.fp16_rescale()->to_string().c_str(), stderr);
    }

    std::vector<std::int32_t> prompt_ids = ids;
    if (prompt) {
        if (chat) {
            std::vector<models::chat_message> messages;
            if (const auto system = args.value("system")) messages.push_back({"system", *system});
            messages.push_back({"user", *prompt});
            // The template writes the special tokens itself (bos included), as apply_chat_template does.
            prompt_ids = lm.chat_ids(lm.chat(messages, true));
        } else {
            prompt_ids = lm.tokens().encode(*prompt).ids;
        }
    }
    status(detail::message("prefill: ", prompt_ids.size(), " tokens"));

    bool first = true;
    std::string streamed;
    const bool has_text = lm.has_tokenizer();
    const auto stream = [&](std::size_t, std::int32_t token, std::string_view text) {
        if (first) {
            status("");
            first = false;
        }
        if (as_json) return true;
        if (has_text) {
            std::fwrite(text.data(), 1, text.size(), stdout);
            streamed.append(text);
        } else {
            std::printf("%d ", token);
        }
        std::fflush(stdout);
        return true;
    };
    const models::generation_result result =
        lm.generate(std::span<const std::int32_t>(prompt_ids), options, stream);
    if (first) status("");
    const auto& s = result.stats;
    if (as_json) {
        json::object stats;
        stats["prompt_tokens"] = json::value(s.prompt_tokens);
        stats["generated_tokens"] = json::value(s.generated_tokens);
        stats["time_to_first_token_s"] = json::value(s.time_to_first_token_s);
        stats["prefill_tokens_per_s"] = json::value(s.prefill_tokens_per_s);
        stats["decode_tokens_per_s"] = json::value(s.decode_tokens_per_s);
        json::object report;
        report["tokens"] = detail_text::json_ints(result.tokens);
        report["text"] = json::value(result.text);
        report["stop_reason"] = json::value(result.stop_reason);
        report["products"] = json::value(int8 ? "int8" : "exact");
        // The weights the model's programs hold (a GGUF file's blocks as stored, packed panels, ANE blobs).
        const resident_weights held = resident_weight_bytes();
        report["resident_weight_bytes"] = static_cast<std::int64_t>(held.cpu_bytes + held.ane_bytes);
        report["stats"] = json::value(std::move(stats));
        report["placement"] = placement_json();
        if (lm.fp16_rescale()) report["fp16_rescale"] = detail_lm::json_rescale(*lm.fp16_rescale());
        std::printf("%s\n", json::dump(json::value(std::move(report))).c_str());
        return 0;
    }
    // What the stream held back to the end (an incomplete character, shown as U+FFFD by the full decode).
    if (has_text && result.text.size() > streamed.size() && result.text.starts_with(streamed))
        std::fputs(result.text.c_str() + streamed.size(), stdout);
    std::printf("\n");
    std::fflush(stdout);
    if (stats_line)
        std::fprintf(stderr,
                     "[%lld prompt tokens: prefill %.1f tokens/s, first token after %.3f s; %lld new tokens: "
                     "%.1f tokens/s; stop: %s]\n",
                     static_cast<long long>(s.prompt_tokens), s.prefill_tokens_per_s, s.time_to_first_token_s,
                     static_cast<long long>(s.generated_tokens), s.decode_tokens_per_s,
                     result.stop_reason.c_str());
    return 0;
}

}  // namespace anvil::cli
