#!/usr/bin/env bash
# Sentences embedded per second by a MiniLM-L6-sized sentence encoder (random weights, batches of 32, mixed
# lengths) on anvil's CPU backend against PyTorch 1.13 on this machine, at 1 and 2 threads: for each thread
# count, tools/reference/sentence_bench.py writes the model and the token ids and times PyTorch, then
# bench_sentence times anvil on the same folder, checks its embeddings against PyTorch's and prints the ratio.
# Needs Debian's python3-torch and libopenblas0-pthread, and a build with -DANVIL_BUILD_BENCH=ON:
#   bench/sentence_vs_pytorch.sh build/bench/bench/bench_sentence [SENTENCES]
set -euo pipefail
bench=${1:?usage: sentence_vs_pytorch.sh PATH/TO/bench_sentence [SENTENCES]}
sentences=${2:-256}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
vocab=()
if [[ -f $root/tests/data/tokenizers/bert-base-uncased/vocab.txt ]]; then
    vocab=(--vocab "$root/tests/data/tokenizers/bert-base-uncased/vocab.txt")
fi
for threads in 1 2; do
    /usr/bin/python3 "$root/tools/reference/sentence_bench.py" --out "$work/t$threads" --threads "$threads" \
        --sentences "$sentences" "${vocab[@]}" >/dev/null
    "$bench" "$work/t$threads" --threads "$threads" --runs 3
done
