// bench_train_step: fine-tuning steps of a Hugging Face sequence classifier through the library's own
// anvil::train::fine_tuning (what `anvil train` runs), on the CPU backend, timed.
// bench/train_step_vs_torch.py drives it: it writes a BERT-base-shaped BertForSequenceClassification folder
// and a TRAIN.jsonl, runs this program and PyTorch 1.13 on them at the same thread count, and prints the
// ratio.
//
// AdamW (lr 2e-5 unless --lr, no weight decay), constant schedule, no warmup, no clipping, the lines in file
// order (--no-shuffle), batch 8 unless --batch. Times loading (model, data, options), the first step (which
// compiles the step's program) and every later step on its own, and prints one JSON object on stdout:
//
//   {"load_s": ..., "first_step_s": ..., "step_s": [...], "peak_rss_mb": ..., "losses": [...], ...}
//
// peak_rss_mb is the process's resident high-water mark, the mapped checkpoint included: VmHWM from
// /proc/self/status. Not getrusage's ru_maxrss, which Linux carries across exec: a process started by a
// large parent (the Python driver) reports the parent's size at fork when its own is smaller
// (peak_rss_mb_getrusage shows it).
//
//   bench_train_step MODEL_DIR TRAIN.jsonl [--threads N] [--steps S] [--batch B] [--lr LR]
//                    [--freeze REGEX]...
//
// Built with -DANVIL_BUILD_BENCH=ON, or header-only in one command (a few minutes):
//   g++ -std=c++20 -O2 -DNDEBUG -Iinclude bench/bench_train_step.cpp -o bench_train_step -lpthread -ldl
#include <anvil/anvil.hpp>

#include <sys/resource.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <string>
#include <vector>

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string json_list(const std::vector<double>& values, const char* format) {
    std::string out = "[";
    char buffer[64];
    for (std::size_t i = 0; i < values.size(); ++i) {
        std::snprintf(buffer, sizeof buffer, format, values[i]);
        out += (i == 0 ? "" : ", ") + std::string(buffer);
    }
    return out + "]";
}

std::string json_string(const std::string& text) {
    std::string out = "\"";
    for (const char c : text) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
    }
    return out + "\"";
}

// VmHWM in MiB, or a negative value where /proc/self/status does not say.
double vm_hwm_mb() {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
        if (line.rfind("VmHWM:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr) / 1024.0;  // kB
    }
    return -1.0;
}

int usage() {
    std::fprintf(stderr,
                 "usage: bench_train_step MODEL_DIR TRAIN.jsonl [--threads N] [--steps S] [--batch B] "
                 "[--lr LR] [--freeze REGEX]...\n");
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) return usage();
    anvil::train::fine_tune_options options;
    options.model = argv[1];
    options.data = argv[2];
    options.steps = 4;
    options.lr = 2e-5;
    options.optimizer = "adamw";
    options.weight_decay = 0.0;
    options.schedule = anvil::train::schedule_kind::constant;
    options.shuffle = false;
    options.compile.target = anvil::device::cpu;
    long threads = 1;
    for (int i = 3; i < argc; ++i) {
        const std::string argument = argv[i];
        if (i + 1 >= argc) return usage();
        const char* value = argv[++i];
        if (argument == "--threads") {
            threads = std::strtol(value, nullptr, 10);
        } else if (argument == "--steps") {
            options.steps = std::strtoll(value, nullptr, 10);
        } else if (argument == "--batch") {
            options.batch_size = std::strtoll(value, nullptr, 10);
        } else if (argument == "--lr") {
            options.lr = std::strtod(value, nullptr);
        } else if (argument == "--freeze") {
            options.freeze.emplace_back(value);
        } else {
            return usage();
        }
    }
    if (threads < 1 || *options.steps < 1 || options.batch_size < 1) {
        std::fprintf(stderr, "bench_train_step: --threads, --steps and --batch need a count of at least 1\n");
        return 2;
    }
    // The step's program runs on its own pool of this size; the process-wide pool (anything else that runs
    // in parallel) gets the same count, so the whole run uses N threads.
    options.compile.threads = static_cast<std::size_t>(threads);
    setenv("ANVIL_NUM_THREADS", std::to_string(threads).c_str(), 1);

    try {
        const auto load_start = std::chrono::steady_clock::now();
        anvil::train::fine_tuning run = anvil::train::fine_tuning::load(options);
        const double load_s = seconds_since(load_start);

        double first_step_s = 0.0;
        std::vector<double> step_s, losses;
        while (run.steps_done() < run.total_steps()) {
            const auto start = std::chrono::steady_clock::now();
            const anvil::train::step_result result = run.step();
            const double elapsed = seconds_since(start);
            if (run.steps_done() == 1) {
                first_step_s = elapsed;
            } else {
                step_s.push_back(elapsed);
            }
            losses.push_back(result.loss);
            std::fprintf(stderr, "bench_train_step: step %lld/%lld %.3f s, loss %.6f\n",
                         static_cast<long long>(run.steps_done()), static_cast<long long>(run.total_steps()),
                         elapsed, result.loss);
        }

        std::size_t trained_elements = 0;
        for (const anvil::train::parameter& p : run.trained())
            trained_elements += static_cast<std::size_t>(p.value.shape().element_count());
        rusage usage_now{};
        getrusage(RUSAGE_SELF, &usage_now);
        const double getrusage_mb = static_cast<double>(usage_now.ru_maxrss) / 1024.0;  // Linux: KiB
        const double hwm_mb = vm_hwm_mb();
        const double peak_rss_mb = hwm_mb >= 0.0 ? hwm_mb : getrusage_mb;

        std::string freeze = "[";
        for (std::size_t i = 0; i < options.freeze.size(); ++i)
            freeze += (i == 0 ? "" : ", ") + json_string(options.freeze[i]);
        freeze += "]";
        std::printf(
            "{\"engine\": \"anvil\", \"threads\": %ld, \"batch\": %lld, \"freeze\": %s, "
            "\"trained_tensors\": %zu, \"trained_elements\": %zu, \"load_s\": %.4f, \"first_step_s\": %.4f, "
            "\"step_s\": %s, "
            "\"peak_rss_mb\": %.1f, \"peak_rss_mb_getrusage\": %.1f, \"losses\": %s}\n",
            threads, static_cast<long long>(options.batch_size), freeze.c_str(), run.trained().size(),
            trained_elements, load_s, first_step_s, json_list(step_s, "%.4f").c_str(), peak_rss_mb,
            getrusage_mb, json_list(losses, "%.6f").c_str());
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_train_step: error: %s\n", e.what());
        return 1;
    }
}
