// anvil example: speech to text with Whisper, streaming the words as they are decoded.
//
//   transcribe MODEL_DIR AUDIO.wav [--language en] [--translate] [--backend cpu|ane|coreml|auto]
//
// MODEL_DIR is a Whisper folder (openai/whisper-tiny ... large-v3, or an .en model): config.json,
// generation_config.json, model.safetensors, the tokenizer files. AUDIO.wav must be 16 kHz (any WAVE
// encoding, mono or several channels); longer than 30 s, it is decoded in 30 s windows.
#include <anvil/models/speech.hpp>

#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace {

int usage() {
    std::fputs(
        "usage: transcribe MODEL_DIR AUDIO.wav [--language L] [--translate] [--backend "
        "cpu|ane|coreml|auto]\n",
        stderr);
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> positional;
    anvil::models::load_options options;
    anvil::models::transcribe_options transcribe;
    for (int i = 1; i < argc; ++i) {
        const std::string_view argument = argv[i];
        if (argument == "--backend" && i + 1 < argc) {
            const std::string_view backend = argv[++i];
            if (backend == "cpu")
                options.compile.target = anvil::device::cpu;
            else if (backend == "ane")
                options.compile.target = anvil::device::ane;
            else if (backend == "coreml")
                options.compile.target = anvil::device::coreml;
            else if (backend == "auto")
                options.compile.target = anvil::device::automatic;
            else
                return usage();
        } else if (argument == "--language" && i + 1 < argc) {
            transcribe.language = argv[++i];
        } else if (argument == "--translate") {
            transcribe.task = "translate";
        } else if (argument == "--max-new-tokens" && i + 1 < argc) {
            transcribe.max_new_tokens = std::stoll(argv[++i]);
        } else {
            positional.emplace_back(argument);
        }
    }
    if (positional.size() != 2) return usage();
    try {
        auto model = anvil::models::whisper::load(positional[0], options);
        const anvil::audio speech = anvil::read_wav(positional[1]);
        // Each token's text as it comes: the stream joins pieces of multi-byte characters.
        anvil::token_stream text(model.tokens());
        transcribe.on_token = [&](std::int32_t token) {
            std::fputs(text.push(token).c_str(), stdout);
            std::fflush(stdout);
        };
        static_cast<void>(model.transcribe(speech, transcribe));
        std::fputs((text.finish() + "\n").c_str(), stdout);
    } catch (const anvil::error& e) {
        std::fprintf(stderr, "transcribe: %s\n", e.what());
        return 1;
    }
    return 0;
}
