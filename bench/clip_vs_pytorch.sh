#!/usr/bin/env bash
# CLIP image embeddings per second with a ViT-B/32-sized image tower (random weights, image 224, 12 layers,
# hidden 768, projection 512) on anvil's CPU backend against PyTorch 1.13 on this machine, in one run at the
# same thread count: tools/reference/clip_bench.py writes the CLIPModel folder and times PyTorch's
# get_image_features, then `anvil bench --task embed-image` times anvil on the same folder; prints both and
# their ratio. anvil runs one process with all cores; PyTorch gets --threads THREADS (default: nproc).
# Needs Debian's python3-torch, python3-regex and libopenblas0-pthread, and a built `anvil` tool:
#   bench/clip_vs_pytorch.sh build/gcc/tools/anvil [BATCH] [RUNS]
set -euo pipefail
anvil=${1:?usage: clip_vs_pytorch.sh PATH/TO/anvil [BATCH] [RUNS]}
batch=${2:-8}
runs=${3:-5}
threads=${THREADS:-$(nproc)}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
torch_line=$(/usr/bin/python3 "$root/tools/reference/clip_bench.py" --out "$work/clip_b32" --threads "$threads" \
    --batch "$batch" --runs "$runs")
anvil_line=$("$anvil" bench --model "$work/clip_b32" --task embed-image --batch "$batch" --runs "$runs" \
    --backend cpu --json)
python3 - "$torch_line" "$anvil_line" <<'PY'
import json
import sys
torch, anvil = json.loads(sys.argv[1]), json.loads(sys.argv[2])
ours = anvil["items_per_s"]
theirs = torch["images_per_second_median"]
print(f"PyTorch {torch['torch']} ({torch['threads']} threads): {theirs:.2f} images/s (median)")
print(f"anvil CPU: {ours:.2f} images/s (median of {anvil['runs']}), first result {anvil['first_result_s']:.2f} s")
print(f"anvil / PyTorch: {ours / theirs:.2f}x (batch {anvil['batch']})")
PY
