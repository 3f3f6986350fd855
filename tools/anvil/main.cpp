// The `anvil` command-line tool (DESIGN.md, "The anvil command-line tool"): a stable contract that tests,
// benchmarks and users drive. Errors are one line `anvil: error: ...` on stderr with exit status 1; usage
// errors exit 2.
#include "arguments.hpp"
#include "bench.hpp"
#include "cache.hpp"
#include "classify.hpp"
#include "export.hpp"
#include "info.hpp"
#include "lm_commands.hpp"
#include "onnx_commands.hpp"
#include "selftest.hpp"
#include "speech_commands.hpp"
#include "text_commands.hpp"
#include "train_command.hpp"

#include <anvil/anvil.hpp>

#include <cstdio>
#include <exception>
#include <new>
#include <string_view>
#include <vector>

namespace {

constexpr const char* usage_text =
    "usage: anvil COMMAND [ARGS]\n"
    "\n"
    "commands:\n"
    "  info PATH [--json]   tensors, dtypes, shapes and totals of a .safetensors file or a model folder\n"
    "                       (config.json and one or several safetensors files, sharded or not), or of\n"
    "                       a .gguf file with its metadata, or an .onnx model's inputs, outputs and ops\n"
    "  run --model FILE.onnx --input NAME=F.npy... --out-dir DIR\n"
    "                       an ONNX model's outputs, each written as DIR/<output name>.npy\n"
    "  embed --model DIR    sentence embeddings (BERT, RoBERTa, XLM-R, MPNet, DistilBERT encoders), or\n"
    "                       CLIP text and image embeddings\n"
    "  rerank --model DIR   cross-encoder scores of (query, passage) pairs\n"
    "  classify --model DIR the top classes of images (ResNet, ViT, DeiT)\n"
    "  train --model DIR --data TRAIN.jsonl --out OUTDIR\n"
    "                       fine-tunes a sequence or image classifier (full, or LoRA as PEFT)\n"
    "  zero-shot --model DIR --labels LABEL...\n"
    "                       CLIP: an image's labels ranked by probability\n"
    "  transcribe --model DIR AUDIO.wav...\n"
    "                       Whisper speech-to-text (16 kHz WAVE, or log-mel features)\n"
    "  tokenize --model DIR token ids as Hugging Face's tokenizer gives them\n"
    "  logits --model DIR   a decoder LM's logits [S, V] for --ids LIST (GPT-2, Llama, Qwen2/3, Mistral)\n"
    "  generate --model DIR text from a decoder LM, streamed (--prompt TEXT | --ids LIST, sampling options)\n"
    "  bench --model DIR    load, compile, first-result and steady-state times, tokens/s, memory\n"
    "  bench --plan --model DIR|FILE.gguf\n"
    "                       a decoder LM's Neural Engine plan from its config alone: chunks of layers,\n"
    "                       weights and KV cache per chunk, programs against the compile budget\n"
    "  export --model DIR --out X.mlpackage\n"
    "                       a Core ML package an iOS or macOS app adds in Xcode (sentence encoders,\n"
    "                       cross-encoders, image classifiers, decoder LMs, CLIP, Whisper), no Python or\n"
    "                       coremltools\n"
    "  selftest [--report F] every lowering variant and op on the Neural Engine (or its simulator) against\n"
    "                       the CPU; writes the capability record later programs lower by\n"
    "  cache [list|size|prune|clear]\n"
    "                       the cache of compiled programs: its entries, its size, pruning it (--max-bytes "
    "N,\n"
    "                       --older-than DAYS, --stale) or clearing it; 'anvil cache --help' gives the "
    "--json\n"
    "                       formats\n"
    "\n"
    "model commands take --backend cpu|ane|coreml|auto (default auto: the Neural Engine where present),\n"
    "--strict-device (a segment the Neural Engine refuses is an error, not a CPU fallback), --compress\n"
    "int8|lut4|lut4g32|lut6 (each linear's and convolution's weights compressed at load, as export stores\n"
    "them: int8 per output channel, or a k-means palette of 16 or 64 values per tensor, or per 32 output\n"
    "channels for lut4g32; the default keeps the checkpoint's weights exactly), --out F.npy and --json\n"
    "(logits and generate also take --products exact|int8: int8 rounds the activations to 8 bits for\n"
    "integer products with quantised weights, as llama.cpp does; generate's default for a .gguf file)\n"
    "(with a \"placement\" field: where each segment ran); 'anvil COMMAND --help' says more\n"
    "\n"
    "options:\n"
    "  --help               this text\n"
    "  --version            anvil's version\n";

int dispatch(const std::vector<std::string_view>& args, const char* argv0) {
    if (args.empty()) throw anvil::cli::usage_error("no command given (try 'anvil --help')");
    const std::string_view command = args.front();
    const std::vector<std::string_view> rest(args.begin() + 1, args.end());
    if (command == "--help" || command == "-h" || command == "help") {
        std::fputs(usage_text, stdout);
        return 0;
    }
    if (command == "--version") {
        std::printf("anvil %s\n", anvil::version_string);
        return 0;
    }
    if (command == "info") return anvil::cli::run_info(rest);
    if (command == "selftest") return anvil::cli::run_selftest(rest, argv0);
    if (command == "cache") return anvil::cli::run_cache(rest, argv0);
    if (command == "embed") return anvil::cli::run_embed(rest, argv0);
    if (command == "rerank") return anvil::cli::run_rerank(rest, argv0);
    if (command == "classify") return anvil::cli::run_classify(rest, argv0);
    if (command == "train") return anvil::cli::run_train(rest, argv0);
    if (command == "zero-shot") return anvil::cli::run_zero_shot(rest, argv0);
    if (command == "transcribe") return anvil::cli::run_transcribe(rest, argv0);
    if (command == "tokenize") return anvil::cli::run_tokenize(rest);
    if (command == "logits") return anvil::cli::run_logits(rest, argv0);
    if (command == "generate") return anvil::cli::run_generate(rest, argv0);
    if (command == "bench") return anvil::cli::run_bench(rest, argv0);
    if (command == "export") return anvil::cli::run_export(rest);
    if (command == "run") return anvil::cli::run_onnx(rest, argv0);
    throw anvil::cli::usage_error(
        anvil::detail::message("unknown command '", command, "' (try 'anvil --help')"));
}

}  // namespace

int main(int argc, char** argv) {
    const std::vector<std::string_view> args(argv + 1, argv + argc);
    try {
        return dispatch(args, argc > 0 ? argv[0] : "anvil");
    } catch (const anvil::cli::usage_error& e) {
        std::fprintf(stderr, "anvil: usage: %s\n", e.what());
        return 2;
    } catch (const anvil::error& e) {
        std::fprintf(stderr, "anvil: error: %s\n", e.what());
        return 1;
    } catch (const std::bad_alloc&) {
        std::fputs("anvil: error: out of memory\n", stderr);
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "anvil: error: %s\n", e.what());
        return 1;
    }
}
