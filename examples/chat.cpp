// anvil example: chat with a decoder LLM (Qwen2/2.5/3, Llama, Mistral, GPT-2), its KV cache resident between
// turns' calls, the reply streamed as it is decoded.
//
//   chat MODEL_DIR [--prompt TEXT] [--system TEXT] [--max-new-tokens N] [--temperature T] [--seed S]
//        [--backend cpu|ane|auto]
//
// MODEL_DIR is a `*ForCausalLM` folder (Qwen/Qwen2.5-0.5B-Instruct, ...): config.json, model.safetensors
// (sharded or not), tokenizer.json, tokenizer_config.json with its chat_template, generation_config.json.
// With --prompt, answers it and exits; without, reads one user turn per line from standard input until it
// ends, keeping the conversation.
#include <anvil/models/llm.hpp>

#include <cstdio>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

namespace {

int usage() {
    std::fputs(
        "usage: chat MODEL_DIR [--prompt TEXT] [--system TEXT] [--max-new-tokens N] [--temperature T] "
        "[--seed S] [--backend cpu|ane|auto]\n",
        stderr);
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    std::string folder, prompt, system;
    anvil::models::causal_lm_options options;
    anvil::models::generation_options generation;
    generation.max_new_tokens = 256;
    for (int i = 1; i < argc; ++i) {
        const std::string_view argument = argv[i];
        const bool has_value = i + 1 < argc;
        if (argument == "--backend" && has_value) {
            const std::string_view backend = argv[++i];
            if (backend == "cpu")
                options.load.compile.target = anvil::device::cpu;
            else if (backend == "ane")
                options.load.compile.target = anvil::device::ane;
            else if (backend == "auto")
                options.load.compile.target = anvil::device::automatic;
            else
                return usage();
        } else if (argument == "--prompt" && has_value) {
            prompt = argv[++i];
        } else if (argument == "--system" && has_value) {
            system = argv[++i];
        } else if (argument == "--max-new-tokens" && has_value) {
            generation.max_new_tokens = std::stoll(argv[++i]);
        } else if (argument == "--temperature" && has_value) {
            generation.sampling.temperature = std::stod(argv[++i]);
        } else if (argument == "--seed" && has_value) {
            generation.sampling.seed = std::stoull(argv[++i]);
        } else if (folder.empty() && !argument.starts_with("--")) {
            folder = argument;
        } else {
            return usage();
        }
    }
    if (folder.empty()) return usage();
    try {
        auto lm = anvil::models::causal_lm::load(folder, options);
        std::vector<anvil::models::chat_message> conversation;
        if (!system.empty()) conversation.push_back({"system", system});
        const auto answer = [&](const std::string& turn) {
            conversation.push_back({"user", turn});
            const auto reply = lm.generate(lm.chat(conversation), generation,
                                           [](std::size_t, std::int32_t, std::string_view piece) {
                                               std::fwrite(piece.data(), 1, piece.size(), stdout);
                                               std::fflush(stdout);
                                               return true;
                                           });
            conversation.push_back({"assistant", reply.text});
            std::printf("\n");
            std::fprintf(stderr, "[%zu tokens, %.1f tokens/s]\n", reply.tokens.size(),
                         reply.stats.decode_tokens_per_s);
        };
        if (!prompt.empty()) {
            answer(prompt);
            return 0;
        }
        std::string line;
        while (std::fputs("> ", stderr), std::getline(std::cin, line)) {
            if (!line.empty()) answer(line);
        }
    } catch (const anvil::error& e) {
        std::fprintf(stderr, "chat: %s\n", e.what());
        return 1;
    }
    return 0;
}
