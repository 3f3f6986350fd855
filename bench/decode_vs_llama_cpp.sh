#!/usr/bin/env bash
# Decode and prefill tokens/s of anvil's CPU backend against llama.cpp on the same GGUF files, in the same run,
# batch 1: random weights shaped like a ~100M Llama and GPT-2 124M, each in F16, Q8_0, Q4_0 and Q4_K
# (tools/reference/gguf_bench_models.py writes them into DIR unless they are there). For each file and each
# thread count (1 and 2), llama.cpp (node-llama-cpp 3.21.1's prebuilt build, tools/reference/llama_cpp_bench.mjs)
# and `anvil generate --backend cpu` time a 512-token prefill and NEW greedy tokens after a 32-token prompt;
# the table gives each engine at its best thread count and the ratio anvil / llama.cpp (above 1: anvil faster):
# anvil as generate runs a GGUF file (--products int8, llama.cpp's rounding of the activations) and, for the
# quantised files, with exact products ("exact").
# Each measurement is repeated REPEATS times (default 3), engines alternating within every repetition, so that
# both see the same machine; single samples here move by up to 2.6x between runs. The table gives each
# engine's best (of the repetitions, at its best thread count) with the spread of that thread count's samples
# (min-max), the ratio of the bests, and the range of the ratios repetition by repetition.
#
#   npm install --prefix build/llama_cpp node-llama-cpp@3.21.1 --ignore-scripts --no-audit --no-fund
#   REPEATS=3 bench/decode_vs_llama_cpp.sh PATH/TO/anvil build/llama_cpp DIR [NEW [FILE_GLOB]]
set -euo pipefail
anvil=${1:?usage: decode_vs_llama_cpp.sh PATH/TO/anvil NODE_MODULES_PREFIX DIR [NEW]}
modules=${2:?usage: decode_vs_llama_cpp.sh PATH/TO/anvil NODE_MODULES_PREFIX DIR [NEW]}
dir=${3:?usage: decode_vs_llama_cpp.sh PATH/TO/anvil NODE_MODULES_PREFIX DIR [NEW]}
new=${4:-64}
only=${5:-*}
repeats=${REPEATS:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
if [[ ! -f $dir/prompt.json ]]; then
    /usr/bin/python3 "$root/tools/reference/gguf_bench_models.py" "$dir"
fi
results=$(mktemp)
trap 'rm -f "$results"' EXIT
ids() { python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))[sys.argv[2]])))" "$dir/prompt.json" "$1"; }
prompt=$(ids prompt)
prefill=$(ids prefill)
for repeat in $(seq 1 "$repeats"); do
    for file in "$dir"/llama100m_*.gguf "$dir"/gpt2_124m_*.gguf; do
        [[ $(basename "$file") == $only ]] || continue
        for threads in 1 2; do
            node "$root/tools/reference/llama_cpp_bench.mjs" "$modules" "$dir/prompt.json" "$new" "$threads" "$file" |
                python3 "$root/bench/decode_table.py" tag "$repeat" >>"$results"
            # anvil as `generate` runs a GGUF file (--products int8: activations rounded to 8 bits, as llama.cpp
            # does), and with exact products (the dequantised weights' in f32) for the quantised files.
            for products in int8 exact; do
                [[ $products == exact && $file == *_f16.gguf ]] && continue
                decode=$(ANVIL_NUM_THREADS=$threads "$anvil" generate --model "$file" --backend cpu --ids "$prompt" \
                    --max-new-tokens "$new" --products "$products" --json)
                filled=$(ANVIL_NUM_THREADS=$threads "$anvil" generate --model "$file" --backend cpu --ids "$prefill" \
                    --max-new-tokens 1 --products "$products" --json)
                python3 "$root/bench/decode_table.py" anvil-row "$decode" "$filled" "$(basename "$file")" "$threads" \
                    "$products" "$repeat" >>"$results"
            done
        done
    done
done
python3 "$root/bench/decode_table.py" table "$results"
