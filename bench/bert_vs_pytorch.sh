#!/usr/bin/env bash
# anvil's BERT-base stack against PyTorch 1.13 on this machine, at 1 and 2 threads: for each thread count,
# tools/reference/bert_stack.py writes random weights and times PyTorch, then bench_bert times anvil on the
# same folder and prints the ratio. Needs Debian's python3-torch and libopenblas0-pthread, and a build with
# -DANVIL_BUILD_BENCH=ON:
#   bench/bert_vs_pytorch.sh build/bench/bench/bench_bert [LAYERS] [SEQ]
set -euo pipefail
bench=${1:?usage: bert_vs_pytorch.sh PATH/TO/bench_bert [LAYERS] [SEQ]}
layers=${2:-12}
seq=${3:-128}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for threads in 1 2; do
    /usr/bin/python3 "$root/tools/reference/bert_stack.py" --layers "$layers" --hidden 768 --heads 12 \
        --intermediate 3072 --seq "$seq" --batch 1 --threads "$threads" --time-runs 20 --out "$work/t$threads" >/dev/null
    "$bench" "$work/t$threads" --threads "$threads" --runs 20
done
