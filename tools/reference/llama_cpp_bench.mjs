// llama.cpp's CPU speed on GGUF files, for bench/decode_vs_llama_cpp.sh: through node-llama-cpp 3.21.1 (its
// prebuilt build), batch 1, for each file and thread count: a 512-token prefill (tokens/s), then greedy
// decoding of NEW tokens after a 32-token prompt (tokens/s over the tokens after the first, as anvil's
// decode_tokens_per_s counts them). Prints one JSON line per file and thread count. Reference tooling only.
//
//   node tools/reference/llama_cpp_bench.mjs NODE_MODULES_PREFIX PROMPT_JSON NEW THREADS FILE.gguf...
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { performance } from "node:perf_hooks";

const [modules, promptFile, newText, threadsText, ...files] = process.argv.slice(2);
if (!modules || !files.length) {
    console.error("usage: node llama_cpp_bench.mjs NODE_MODULES_PREFIX PROMPT_JSON NEW THREADS FILE.gguf...");
    process.exit(2);
}
const entry = path.join(modules, "node_modules", "node-llama-cpp", "dist", "index.js");
const { getLlama, LlamaLogLevel } = await import(pathToFileURL(entry).href);
const { prompt, prefill } = JSON.parse(fs.readFileSync(promptFile, "utf8"));
const newTokens = Number(newText), threads = Number(threadsText);
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error, maxThreads: threads });
for (const file of files) {
    const model = await llama.loadModel({ modelPath: file, gpuLayers: 0 });
    const context = await model.createContext({ contextSize: 1024, batchSize: 512, threads, sequences: 1 });
    const sequence = context.getSequence();
    let start = performance.now();
    await sequence.evaluateWithoutGeneratingNewTokens(prefill);
    const prefillSeconds = (performance.now() - start) / 1000;
    await sequence.clearHistory();
    const generated = [];
    let first = 0;
    start = performance.now();
    for await (const token of sequence.evaluate(prompt, { temperature: 0 })) {
        if (generated.length === 0) first = performance.now();
        generated.push(token);
        if (generated.length >= newTokens) break;
    }
    const decodeSeconds = (performance.now() - first) / 1000;
    console.log(JSON.stringify({
        engine: "llama.cpp", file: path.basename(file), threads,
        prefill_tokens_per_s: prefill.length / prefillSeconds,
        decode_tokens_per_s: (generated.length - 1) / decodeSeconds,
        time_to_first_token_s: (first - start) / 1000, generated: generated.length,
        tokens: generated,
    }));
    await context.dispose();
    await model.dispose();
}
