// bench_decode: greedy decoding tokens/s of a GPT-2-sized language model (124M parameters, random weights) on
// anvil's CPU backend against PyTorch 1.13 on the same machine, in the same run. bench/decode_vs_pytorch.sh
// drives it: tools/reference/decoder_bench.py writes the model folder, a 32-token prompt, PyTorch's greedy
// tokens and PyTorch's best times (prefill and decode apart, batch 1, KV cache); this program generates the
// same number of tokens from the same prompt with anvil::models::causal_lm, and prints both decode rates,
// their ratio, both decodes' CPU time per token (which a busy machine inflates less than wall time), the time
// to first token and how many greedy tokens agree with PyTorch's (the exit status is 1 unless all do).
//
//   bench_decode DIR [--threads N] [--runs R] [--ladder A,B,...]
#include <anvil/anvil.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <string_view>
#include <vector>

namespace {

std::vector<std::int32_t> read_ids(const anvil::json::value& list) {
    std::vector<std::int32_t> ids;
    for (const auto& id : list.as_array())
        ids.push_back(static_cast<std::int32_t>(id.as_int()));
    return ids;
}

std::vector<std::int64_t> parse_ladder(const std::string& text) {
    std::vector<std::int64_t> rungs;
    for (std::size_t begin = 0; begin < text.size();) {
        const std::size_t end = std::min(text.find(',', begin), text.size());
        rungs.push_back(std::stoll(text.substr(begin, end - begin)));
        begin = end + 1;
    }
    return rungs;
}

std::string ladder_text(const std::vector<std::int64_t>& rungs) {
    std::string text;
    for (const std::int64_t r : rungs)
        text += (text.empty() ? "" : ",") + std::to_string(r);
    return text;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: bench_decode DIR [--threads N] [--runs R] [--ladder A,B,...]\n");
        return 2;
    }
    const std::string folder = argv[1];
    std::size_t threads = 1;
    int runs = 3;
    std::vector<std::int64_t> ladder;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (std::strcmp(argv[i], "--threads") == 0)
            threads = static_cast<std::size_t>(std::atoi(argv[i + 1]));
        if (std::strcmp(argv[i], "--runs") == 0) runs = std::max(1, std::atoi(argv[i + 1]));
        if (std::strcmp(argv[i], "--ladder") == 0) ladder = parse_ladder(argv[i + 1]);
    }
    try {
        const auto prompt = read_ids(*anvil::json::parse_file(folder + "/prompt.json").find("ids"));
        const auto pytorch = anvil::json::parse_file(folder + "/pytorch_timing.json");
        const double pytorch_rate = pytorch.find("decode_tokens_per_second")->as_double();
        const double pytorch_prefill_s = pytorch.find("prefill_seconds")->as_double();
        const double pytorch_cpu_s = pytorch.find("decode_cpu_seconds_per_token")->as_double();
        const auto expected = read_ids(*pytorch.find("tokens"));

        anvil::models::causal_lm_options options;
        options.load.compile.target = anvil::device::cpu;
        options.load.compile.threads = threads;
        options.context_ladder = ladder;
        const auto load_start = std::chrono::steady_clock::now();
        auto lm = anvil::models::causal_lm::load(folder + "/model", options);
        const double load_s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();

        anvil::models::generation_options generation;
        generation.max_new_tokens = static_cast<std::int64_t>(expected.size());
        generation.stop_at_eos = false;  // as PyTorch's loop: always max_new_tokens

        // Decode is timed from the first new token (the end of the prefill) to the last, as PyTorch's is: the
        // callback stamps both, in wall time and in this process's CPU time (which other processes on a busy
        // machine inflate less: they still share the memory bandwidth).
        struct stamp {
            double wall = 0, cpu = 0;
        };
        const auto now = [] {
            timespec cpu{};
            clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
            return stamp{
                std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(),
                static_cast<double>(cpu.tv_sec) + 1e-9 * static_cast<double>(cpu.tv_nsec)};
        };
        stamp first_token, last_token;
        std::size_t seen = 0;
        const anvil::models::token_callback on_token = [&](std::size_t, std::int32_t, std::string_view) {
            (++seen == 1 ? first_token : last_token) = now();
            return true;
        };
        const auto run_once = [&] {
            seen = 0;
            return lm.generate(prompt, generation, on_token);
        };

        // The first run compiles the prefill and decode programs; it is reported apart.
        const stamp first_start = now();
        auto result = run_once();
        const double first_s = now().wall - first_start.wall;
        double best_rate = 0.0, best_cpu = 1e300, best_ttft = 1e300, best_total = 1e300, runner_rate = 0.0;
        for (int r = 0; r < runs; ++r) {
            const stamp start = now();
            result = run_once();
            const double tokens = static_cast<double>(result.tokens.size() - 1);
            best_rate = std::max(best_rate, tokens / (last_token.wall - first_token.wall));
            best_cpu = std::min(best_cpu, (last_token.cpu - first_token.cpu) / tokens);
            best_ttft = std::min(best_ttft, first_token.wall - start.wall);
            best_total = std::min(best_total, last_token.wall - start.wall);
            runner_rate = std::max(runner_rate, result.stats.decode_tokens_per_s);
        }
        std::size_t agree = 0;  // the common prefix: after a first difference the contexts differ
        while (agree < std::min(expected.size(), result.tokens.size()) &&
               expected[agree] == result.tokens[agree])
            ++agree;
        std::size_t same = 0;
        for (std::size_t i = 0; i < std::min(expected.size(), result.tokens.size()); ++i)
            same += expected[i] == result.tokens[i] ? 1 : 0;
        std::printf(
            "{\"threads\": %zu, \"prompt_tokens\": %zu, \"new_tokens\": %zu, "
            "\"anvil_decode_tokens_per_second\": "
            "%.2f, \"pytorch_decode_tokens_per_second\": %.2f, \"anvil_over_pytorch\": %.3f, "
            "\"anvil_cpu_ms_per_token\": %.2f, \"pytorch_cpu_ms_per_token\": %.2f, "
            "\"anvil_runner_decode_tokens_per_second\": %.2f, \"anvil_time_to_first_token_s\": %.4f, "
            "\"pytorch_prefill_s\": %.4f, \"anvil_generate_s\": %.3f, \"first_run_s\": %.3f, \"load_s\": "
            "%.3f, "
            "\"programs\": %zu, \"context_ladder\": \"%s\", \"greedy_prefix_agreeing\": %zu, "
            "\"greedy_equal\": %zu, \"stop_reason\": \"%s\"}\n",
            threads, prompt.size(), result.tokens.size(), best_rate, pytorch_rate, best_rate / pytorch_rate,
            1e3 * best_cpu, 1e3 * pytorch_cpu_s, runner_rate, best_ttft, pytorch_prefill_s, best_total,
            first_s, load_s, lm.compiled_programs(), ladder_text(lm.context_ladder()).c_str(), agree, same,
            result.stop_reason.c_str());
        return same == expected.size() ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_decode: %s\n", e.what());
        return 1;
    }
}
