// `anvil train`: fine-tunes a Hugging Face sequence or image classifier on a jsonl file (train/fine_tune.hpp)
// and writes a Hub folder, or a PEFT LoRA adapter, that transformers and PEFT load as they are.
#pragma once

#include "arguments.hpp"
#include "model_commands.hpp"

#include <anvil/anvil.hpp>
#include <anvil/train/fine_tune.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace anvil::cli {

inline constexpr const char* train_usage =
    "usage: anvil train --model DIR --data TRAIN.jsonl --out OUTDIR\n"
    "                   [--steps N | --epochs E] [--batch-size B] [--lr LR]\n"
    "                   [--optimizer adamw|sgd] [--momentum M] [--nesterov] [--weight-decay WD]\n"
    "                   [--betas B1,B2] [--eps E] [--schedule constant|linear|cosine] [--warmup-steps K]\n"
    "                   [--max-grad-norm X] [--no-shuffle] [--seed S] [--freeze REGEX]...\n"
    "                   [--lora R --lora-alpha A --lora-targets NAME,NAME,...] [--init-adapter ADAPTER_DIR]\n"
    "                   [--eval EVAL.jsonl] [--save-every N] [--resume OUTDIR|CHECKPOINT]\n"
    "                   [--truncate] [--backend cpu|ane|auto] [--json]\n"
    "\n"
    "Fine-tunes a sequence classifier (BERT, RoBERTa, XLM-R, MPNet, DistilBERT "
    "...ForSequenceClassification)\n"
    "or an image classifier (ViT, DeiT; ResNet, Hugging Face's or timm's, with BatchNorm in train mode) on\n"
    "TRAIN.jsonl, one example a line: {\"ids\": [...], \"type_ids\":\n"
    "[...], \"label\": k}, {\"text\": ..., \"text_pair\": ..., \"label\": k}, {\"pixels\": \"x.npy\", "
    "\"label\": k}\n"
    "or {\"image\": \"x.png\", \"label\": k}; for problem_type multi_label_classification\n"
    "\"label\": [1, 0, ...], num_labels numbers in [0, 1]. Defaults as Hugging Face's Trainer: 3 epochs,\n"
    "batch 8, lr 5e-5, "
    "AdamW (0.9, 0.999, 1e-8), no weight decay, linear schedule, shuffled with seed 42, no\n"
    "clipping. "
    "OUTDIR gets config.json, model.safetensors (the input's tensor names, shapes and dtypes)\n"
    "and the tokenizer files; with --lora, adapter_config.json and adapter_model.safetensors as PEFT\n"
    "saves them.\n"
    "--json prints one line per step: {\"step\", \"loss\", \"lr\", \"grad_norm\"}, and with --eval one per "
    "epoch:\n"
    "{\"epoch\", \"step\", \"eval_loss\", \"eval_accuracy\" or \"eval_mse\"} (multi-label accuracy: the\n"
    "share of examples whose every class is right, logit > 0 exactly where the label is > 0.5).\n"
    "--save-every N writes OUTDIR/checkpoint-N\n"
    "(the model, fp32 master weights, optimizer state, where the run stands); --resume continues the latest\n"
    "checkpoint of OUTDIR (or the one named) bit for bit, given the same options.\n";

namespace detail_train {

inline double number(const arguments& args, std::string_view name, double fallback) {
    const auto text = args.value(name);
    if (!text) return fallback;
    char* end = nullptr;
    const double value = std::strtod(text->c_str(), &end);
    if (text->empty() || end != text->c_str() + text->size() || !std::isfinite(value))
        throw usage_error(detail::message("train: --", name, " must be a number, got '", *text, "'"));
    return value;
}

inline std::optional<std::int64_t> integer(const arguments& args, std::string_view name) {
    const auto text = args.value(name);
    if (!text) return std::nullopt;
    char* end = nullptr;
    const long long value = std::strtoll(text->c_str(), &end, 10);
    if (text->empty() || end != text->c_str() + text->size())
        throw usage_error(detail::message("train: --", name, " must be an integer, got '", *text, "'"));
    return static_cast<std::int64_t>(value);
}

inline std::vector<std::string> split(const std::string& text) {
    std::vector<std::string> parts;
    std::size_t start = 0;
    while (true) {
        const std::size_t comma = text.find(',', start);
        parts.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return parts;
}

// --resume's folder: a checkpoint (it holds trainer_state.json), or an output folder whose checkpoint-N with
// the largest N is taken.
inline std::filesystem::path checkpoint_folder(const std::filesystem::path& given) {
    if (std::filesystem::exists(given / "trainer_state.json")) return given;
    if (!std::filesystem::is_directory(given))
        throw io_error(detail::message("--resume: ", given.string(), " is not a folder"));
    std::filesystem::path latest;
    long long best = -1;
    for (const auto& entry : std::filesystem::directory_iterator(given)) {
        const std::string name = entry.path().filename().string();
        if (name.rfind("checkpoint-", 0) != 0 ||
            !std::filesystem::exists(entry.path() / "trainer_state.json"))
            continue;
        char* end = nullptr;
        const long long n = std::strtoll(name.c_str() + 11, &end, 10);
        if (*end == '\0' && n > best) {
            best = n;
            latest = entry.path();
        }
    }
    if (best < 0)
        throw io_error(
            detail::message("--resume: ", given.string(),
                            " holds no checkpoint (checkpoint-N/trainer_state.json, from --save-every)"));
    return latest;
}

}  // namespace detail_train

inline int run_train(const std::vector<std::string_view>& argv, const char* argv0) {
    using detail_train::integer;
    using detail_train::number;
    const arguments args("train", argv,
                         {{"model", true},
                          {"data", true},
                          {"out", true},
                          {"steps", true},
                          {"epochs", true},
                          {"batch-size", true},
                          {"lr", true},
                          {"optimizer", true},
                          {"momentum", true},
                          {"nesterov", false},
                          {"weight-decay", true},
                          {"betas", true},
                          {"eps", true},
                          {"schedule", true},
                          {"warmup-steps", true},
                          {"max-grad-norm", true},
                          {"no-shuffle", false},
                          {"seed", true},
                          {"freeze", true},
                          {"lora", true},
                          {"lora-alpha", true},
                          {"lora-targets", true},
                          {"init-adapter", true},
                          {"truncate", false},
                          {"eval", true},
                          {"save-every", true},
                          {"resume", true},
                          {"backend", true},
                          {"strict-device", false},
                          {"json", false},
                          {"help", false}});
    if (args.flag("help")) {
        std::fputs(train_usage, stdout);
        return 0;
    }
    if (!args.positional().empty())
        throw usage_error(detail::message("train: unexpected argument '", args.positional().front(), "'"));
    train::fine_tune_options o;
    o.model = model_folder(args, "train");
    const auto data = args.value("data");
    const auto out = args.value("out");
    if (!data) throw usage_error("train: --data TRAIN.jsonl is required");
    if (!out) throw usage_error("train: --out OUTDIR is required");
    o.data = *data;
    o.steps = integer(args, "steps");
    o.epochs = integer(args, "epochs");
    if (const auto b = integer(args, "batch-size")) o.batch_size = *b;
    o.lr = number(args, "lr", o.lr);
    o.optimizer = args.value("optimizer").value_or("adamw");
    o.momentum = number(args, "momentum", 0.0);
    o.nesterov = args.flag("nesterov");
    o.weight_decay = number(args, "weight-decay", 0.0);
    if (const auto betas = args.value("betas")) {
        const auto parts = detail_train::split(*betas);
        char* end1 = nullptr;
        char* end2 = nullptr;
        if (parts.size() != 2) throw usage_error("train: --betas takes B1,B2");
        o.beta1 = std::strtod(parts[0].c_str(), &end1);
        o.beta2 = std::strtod(parts[1].c_str(), &end2);
        if (parts[0].empty() || parts[1].empty() || *end1 != '\0' || *end2 != '\0')
            throw usage_error(detail::message("train: --betas takes two numbers B1,B2, got '", *betas, "'"));
    }
    o.eps = number(args, "eps", o.eps);
    if (const auto s = args.value("schedule")) o.schedule = train::parse_schedule_kind(*s);
    if (const auto w = integer(args, "warmup-steps")) o.warmup_steps = *w;
    if (args.value("max-grad-norm")) o.max_grad_norm = number(args, "max-grad-norm", 0.0);
    o.shuffle = !args.flag("no-shuffle");
    if (const auto seed = integer(args, "seed")) {
        if (*seed < 0) throw usage_error("train: --seed must not be negative");
        o.seed = static_cast<std::uint64_t>(*seed);
    }
    o.freeze = args.values("freeze");
    o.lora_rank = integer(args, "lora");
    if (args.value("lora-alpha")) o.lora_alpha = number(args, "lora-alpha", 8.0);
    if (const auto t = args.value("lora-targets")) o.lora_targets = detail_train::split(*t);
    if (const auto a = args.value("init-adapter")) o.init_adapter = *a;
    o.truncate = args.flag("truncate");
    o.compile = backend_options(args, "train", argv0).compile;
    if (args.value("backend").value_or("auto") == "coreml")
        throw usage_error("train: --backend must be cpu, ane or auto (Core ML programs do not train)");

    const auto eval = args.value("eval");
    const std::optional<std::int64_t> save_every = integer(args, "save-every");
    if (save_every && *save_every <= 0)
        throw usage_error("train: --save-every must be a positive number of steps");

    const bool as_json = args.flag("json");
    const progress shown;
    shown.say("loading " + o.model.string());
    train::fine_tuning run = train::fine_tuning::load(o);
    if (const auto resume = args.value("resume")) {
        const std::filesystem::path from = detail_train::checkpoint_folder(*resume);
        shown.say("resuming from " + from.string());
        run.resume(from);
    }
    const auto started = std::chrono::steady_clock::now();
    const std::int64_t first = run.steps_done();
    while (run.steps_done() < run.total_steps()) {
        const train::step_result r = run.step();
        if (as_json) {
            json::object line;
            line["step"] = r.step;
            line["loss"] = std::isfinite(r.loss) ? json::value(r.loss) : json::value(nullptr);
            line["lr"] = r.lr;
            line["grad_norm"] = std::isfinite(r.grad_norm) ? json::value(r.grad_norm) : json::value(nullptr);
            if (r.skipped) line["skipped"] = true;
            std::printf("%s\n", json::dump(json::value(std::move(line))).c_str());
            std::fflush(stdout);
        } else {
            const double seconds =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
            shown.say(detail::message(
                "step ", r.step, "/", run.total_steps(), "  loss ", r.loss, "  lr ", r.lr, "  ",
                seconds > 0 ? static_cast<double>(r.step - first) / seconds : 0.0, " steps/s"));
        }
        if (save_every && run.steps_done() % *save_every == 0)
            run.save_checkpoint(std::filesystem::path(*out) /
                                detail::message("checkpoint-", run.steps_done()));
        if (eval && run.at_epoch_end()) {
            const train::evaluation e = run.evaluate(*eval);
            if (as_json) {
                json::object line;
                line["epoch"] = run.epochs_done();
                line["step"] = run.steps_done();
                line["eval_loss"] = e.loss;
                if (e.accuracy) line["eval_accuracy"] = *e.accuracy;
                if (e.mean_squared_error) line["eval_mse"] = *e.mean_squared_error;
                std::printf("%s\n", json::dump(json::value(std::move(line))).c_str());
                std::fflush(stdout);
            } else {
                std::fprintf(stderr, "\r\033[Kepoch %lld: eval loss %.6g, %s %.6g\n",
                             static_cast<long long>(run.epochs_done()), e.loss,
                             e.accuracy ? "accuracy" : "mse",
                             e.accuracy ? *e.accuracy : e.mean_squared_error.value_or(0.0));
            }
        }
    }
    run.save(*out);
    if (!as_json) {
        std::printf("trained %lld steps on %zu examples (%zu tensors, %zu programs compiled) -> %s\n",
                    static_cast<long long>(run.total_steps()), run.examples(), run.trained().size(),
                    run.programs_compiled(), out->c_str());
    }
    return 0;
}

}  // namespace anvil::cli
