#!/usr/bin/env bash
# Decode and prefill tokens/s of anvil's CPU backend against llama.cpp on the same GGUF files, in the same run,
# batch 1: random weights shaped like a ~100M Llama and GPT-2 124M, each in F16, Q8_0, Q4_0 and Q4_K
# (tools/reference/gguf_bench_models.py writes them into DIR unless they are there). For each file and each
# thread count (1 and 2), llama.cpp (node-llama-cpp 3.21.1's prebuilt build, tools/reference/llama_cpp_bench.mjs)
# and `anvil generate --backend cpu` time a 512-token prefill and NEW greedy tokens after a 32-token prompt;
# the table gives each engine at its best thread count and the ratio anvil / llama.cpp (above 1: anvil faster):
# anvil as generate runs a GGUF file (--products int8, llama.cpp's rounding of the activations) and, for the
# quantised files, with exact products ("exact").
# Runs alternate engine by engine, file by file, so that both see the same machine.
#
#   npm install --prefix build/llama_cpp node-llama-cpp@3.21.1 --ignore-scripts --no-audit --no-fund
#   bench/decode_vs_llama_cpp.sh PATH/TO/anvil build/llama_cpp DIR [NEW]
set -euo pipefail
anvil=${1:?usage: decode_vs_llama_cpp.sh PATH/TO/anvil NODE_MODULES_PREFIX DIR [NEW]}
modules=${2:?usage: decode_vs_llama_cpp.sh PATH/TO/anvil NODE_MODULES_PREFIX DIR [NEW]}
dir=${3:?usage: decode_vs_llama_cpp.sh PATH/TO/anvil NODE_MODULES_PREFIX DIR [NEW]}
new=${4:-64}
root=$(cd "$(dirname "$0")/.." && pwd)
if [[ ! -f $dir/prompt.json ]]; then
    /usr/bin/python3 "$root/tools/reference/gguf_bench_models.py" "$dir"
fi
results=$(mktemp)
trap 'rm -f "$results"' EXIT
ids() { python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))[sys.argv[2]])))" "$dir/prompt.json" "$1"; }
prompt=$(ids prompt)
prefill=$(ids prefill)
for file in "$dir"/llama100m_*.gguf "$dir"/gpt2_124m_*.gguf; do
    for threads in 1 2; do
        node "$root/tools/reference/llama_cpp_bench.mjs" "$modules" "$dir/prompt.json" "$new" "$threads" "$file" \
            >>"$results"
        # anvil as `generate` runs a GGUF file (--products int8: activations rounded to 8 bits, as llama.cpp
        # does), and with exact products (the dequantised weights' in f32) for the quantised files.
        for products in int8 exact; do
            [[ $products == exact && $file == *_f16.gguf ]] && continue
            decode=$(ANVIL_NUM_THREADS=$threads "$anvil" generate --model "$file" --backend cpu --ids "$prompt" \
                --max-new-tokens "$new" --products "$products" --json)
            filled=$(ANVIL_NUM_THREADS=$threads "$anvil" generate --model "$file" --backend cpu --ids "$prefill" \
                --max-new-tokens 1 --products "$products" --json)
            python3 -c '
import json, sys
decode, filled = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(json.dumps({"engine": "anvil" if sys.argv[5] == "int8" else "anvil exact", "file": sys.argv[3],
                  "threads": int(sys.argv[4]),
                  "prefill_tokens_per_s": filled["stats"]["prefill_tokens_per_s"],
                  "decode_tokens_per_s": decode["stats"]["decode_tokens_per_s"],
                  "generated": len(decode["tokens"]), "tokens": decode["tokens"]}))' \
                "$decode" "$filled" "$(basename "$file")" "$threads" "$products" >>"$results"
        done
    done
done
python3 - "$results" <<'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
files = sorted({r["file"] for r in rows}, key=lambda f: (not f.startswith("llama"), f))
print(f"{'file':24} {'decode tok/s anvil':>19} {'llama.cpp':>10} {'ratio':>6} {'exact':>6}   "
      f"{'prefill 512 anvil':>17} {'llama.cpp':>10} {'ratio':>6} {'exact':>6}  greedy tokens agree")
for f in files:
    best = {}
    for engine in ("anvil", "anvil exact", "llama.cpp"):
        mine = [r for r in rows if r["file"] == f and r["engine"] == engine]
        if mine:
            best[engine] = {k: max(mine, key=lambda r: r[k]) for k in ("decode_tokens_per_s", "prefill_tokens_per_s")}
    def ratio(engine, key):
        if engine not in best:
            return "    -"
        return f"{best[engine][key][key] / best['llama.cpp'][key][key]:5.2f}x"
    d = {e: best[e]["decode_tokens_per_s"] for e in best}
    p = {e: best[e]["prefill_tokens_per_s"] for e in best}
    a, b = d["anvil"]["tokens"], d["llama.cpp"]["tokens"]
    agree = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    print(f"{f:24} {d['anvil']['decode_tokens_per_s']:12.1f} ({d['anvil']['threads']}t) "
          f"{d['llama.cpp']['decode_tokens_per_s']:6.1f} ({d['llama.cpp']['threads']}t) "
          f"{ratio('anvil', 'decode_tokens_per_s')} {ratio('anvil exact', 'decode_tokens_per_s')}   "
          f"{p['anvil']['prefill_tokens_per_s']:10.1f} ({p['anvil']['threads']}t) "
          f"{p['llama.cpp']['prefill_tokens_per_s']:6.1f} ({p['llama.cpp']['threads']}t) "
          f"{ratio('anvil', 'prefill_tokens_per_s')} {ratio('anvil exact', 'prefill_tokens_per_s')}  "
          f"first {agree} of {len(a)}")
EOF
