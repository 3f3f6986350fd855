// llama.cpp itself on anvil's GGUF fixtures: each file loaded by llama.cpp (through the npm package
// node-llama-cpp, pinned at 3.21.1, which ships prebuilt CPU builds), its tokenizer run on tokenization.json's
// texts and its next-token logits over prompt.json's ids compared with the float64 reference logits
// (<name>_logits.npy, computed from the weights each file decodes to). Reference tooling only: anvil never
// depends on it, and CI does not run it.
//
//   npm install --prefix build/llama_cpp node-llama-cpp@3.21.1 --ignore-scripts --no-audit --no-fund
//   node tools/reference/llama_cpp_check.mjs build/llama_cpp tests/data/gguf/models
//
// Prints, per file: whether its token ids equal the reference encoder's (the ones anvil's test checks), the
// largest difference of its logits from the reference's over every position and token (each position's logits
// taken relative to its top token, since llama.cpp gives probabilities), and the top-1 agreement. llama.cpp
// rounds each matrix product's activations to 8 bits for quantised weights (Q8_0, Q4_0 ...), so those files
// differ from the exact reference by more than float rounding; F32 and F16 ones should not. Exits 1 when a
// tokenization differs.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [modules, folder] = process.argv.slice(2);
if (!modules || !folder) {
    console.error("usage: node llama_cpp_check.mjs NODE_MODULES_PREFIX FIXTURE_FOLDER");
    process.exit(2);
}
const entry = path.join(modules, "node_modules", "node-llama-cpp", "dist", "index.js");
const { getLlama, LlamaLogLevel } = await import(pathToFileURL(entry).href);

// A little-endian float32 .npy [rows, columns], as hf_format.save_npy writes it.
function readNpy(file) {
    const bytes = fs.readFileSync(file);
    const headerLength = bytes.readUInt16LE(8);
    const header = bytes.subarray(10, 10 + headerLength).toString("latin1");
    if (!header.includes("'<f4'")) throw new Error(`${file}: expected float32, got ${header}`);
    const shape = header.match(/\((\d+), (\d+)\)/).slice(1).map(Number);
    const data = new Float32Array(bytes.buffer.slice(bytes.byteOffset + 10 + headerLength,
                                                      bytes.byteOffset + bytes.length));
    return { rows: shape[0], columns: shape[1], data };
}

const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const prompt = JSON.parse(fs.readFileSync(path.join(folder, "prompt.json"), "utf8")).ids;
const tokenization = JSON.parse(fs.readFileSync(path.join(folder, "tokenization.json"), "utf8"));
let failed = false;
for (const file of fs.readdirSync(folder).filter((f) => f.endsWith(".gguf")).sort()) {
    const name = file.replace(/_(f32|f16|q8_0|q4_0|q4_k|legacy_mix|k_mix)\.gguf$/, "");
    const model = await llama.loadModel({ modelPath: path.join(folder, file), gpuLayers: 0 });
    const expectedIds = tokenization.ids[name];
    let tokensAgree = true;
    tokenization.texts.forEach((text, i) => {
        const ids = [...model.tokenize(text, true)];
        // llama.cpp's tokenize leaves the BOS to the caller; the reference encoders add it where the file asks.
        const expected = expectedIds[i];
        const withBos = model.tokens.bos != null && model.tokens.shouldPrependBosToken ? [model.tokens.bos, ...ids] : ids;
        if (JSON.stringify(withBos) !== JSON.stringify(expected)) {
            tokensAgree = false;
            console.log(`  ${file}: text ${i} ${JSON.stringify(text)}\n    llama.cpp ${JSON.stringify(withBos)}\n    reference ${JSON.stringify(expected)}`);
        }
    });
    failed ||= !tokensAgree;

    const reference = readNpy(path.join(folder, file.replace(/\.gguf$/, "_logits.npy")));
    const context = await model.createContext({ contextSize: 64, batchSize: 64, threads: 1 });
    const sequence = context.getSequence();
    // Probabilities at temperature T are softmax(logits / T): T * log p recovers the logits up to a constant per
    // position, compared here as differences from the top token's. T = 10 keeps these small random models'
    // wide logit ranges (up to ~200) inside float32's probabilities.
    const T = 10;
    const input = prompt.map((id) => [id, { generateNext: { probabilities: true, options: { temperature: T, topK: 0, topP: 1, minP: 0 } } }]);
    const results = await sequence.controlledEvaluate(input);
    let worst = 0, range = 0, agree = 0, entries = Infinity;
    results.forEach((result, position) => {
        const probabilities = result.next.probabilities;
        entries = Math.min(entries, probabilities.size);
        const logits = reference.data.subarray(position * reference.columns, (position + 1) * reference.columns);
        let best = 0, low = Infinity;
        for (let t = 0; t < reference.columns; ++t) {
            if (logits[t] > logits[best]) best = t;
            low = Math.min(low, logits[t]);
        }
        range = Math.max(range, logits[best] - low);
        const [top, pTop] = probabilities.entries().next().value;
        if (top === best) agree += 1;
        for (let t = 0; t < reference.columns; ++t) {
            const p = probabilities.get(t) ?? 0;
            if (p < 1e-30) continue;
            const ours = T * (Math.log(p) - Math.log(pTop)), theirs = logits[t] - logits[top];
            worst = Math.max(worst, Math.abs(ours - theirs));
        }
    });
    console.log(`${file}: tokens ${tokensAgree ? "equal" : "DIFFER"}; logits within ${worst.toFixed(4)} of the reference ` +
                `(${(100 * worst / range).toFixed(3)}% of the largest logit range, ${range.toFixed(1)}; ${entries} of ` +
                `${reference.columns} probabilities returned); top-1 ${agree}/${results.length}`);
    await context.dispose();
    await model.dispose();
}
process.exit(failed ? 1 : 0);
