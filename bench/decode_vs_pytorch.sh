#!/usr/bin/env bash
# Greedy decoding tokens/s of a GPT-2-sized language model (124M parameters, random weights, 32-token prompt,
# 128 new tokens, batch 1) on anvil's CPU backend against PyTorch 1.13 on this machine, at 1 and 2 threads: for
# each thread count, tools/reference/decoder_bench.py writes the model folder and the prompt and times PyTorch
# (its faster of the modeling_gpt2.py products and one-row matrix-vector products), then bench_decode times
# anvil::models::causal_lm on the same folder, checks its greedy tokens against PyTorch's and prints the ratio.
# With LADDER (e.g. 256,1024) anvil also runs with that context ladder (causal_lm_options::context_ladder), a
# second line per thread count.
# Needs Debian's python3-torch and libopenblas0-pthread, and a build with -DANVIL_BUILD_BENCH=ON:
#   bench/decode_vs_pytorch.sh build/bench/bench/bench_decode [LADDER]
set -euo pipefail
bench=${1:?usage: decode_vs_pytorch.sh PATH/TO/bench_decode [LADDER]}
ladder=${2:-}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for threads in 1 2; do
    /usr/bin/python3 "$root/tools/reference/decoder_bench.py" --out "$work/t$threads" --threads "$threads" \
        >/dev/null
    "$bench" "$work/t$threads" --threads "$threads" --runs 3
    if [[ -n $ladder ]]; then
        "$bench" "$work/t$threads" --threads "$threads" --runs 3 --ladder "$ladder"
    fi
done
