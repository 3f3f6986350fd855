#!/usr/bin/env bash
# Whisper base-sized (random weights: d_model 512, 6 + 6 layers, 8 heads, ffn 2048, 80 mel bins, vocab 51865) on
# anvil's CPU backend against PyTorch 1.13 on this machine, in one run: tools/reference/whisper_bench.py writes
# the model folder and times PyTorch (the encoder on one 30 s window; decoder tokens/s over 32 greedy steps
# with a KV cache), then `anvil bench --task transcribe` times anvil on the same folder; prints both and the
# ratios. PyTorch gets THREADS threads (default: nproc), as anvil uses every core.
# Needs Debian's python3-torch, python3-regex and libopenblas0-pthread, and a built `anvil` tool:
#   bench/whisper_vs_pytorch.sh build/gcc/tools/anvil [RUNS]
set -euo pipefail
anvil=${1:?usage: whisper_vs_pytorch.sh PATH/TO/anvil [RUNS]}
runs=${2:-3}
threads=${THREADS:-$(nproc)}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
torch_line=$(/usr/bin/python3 "$root/tools/reference/whisper_bench.py" --out "$work/whisper_base" \
    --threads "$threads" --runs "$runs")
anvil_line=$("$anvil" bench --model "$work/whisper_base" --task transcribe --new-tokens 32 --runs "$runs" \
    --backend cpu --json)
python3 - "$torch_line" "$anvil_line" <<'PY'
import json
import sys
torch, anvil = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"PyTorch {torch['torch']} ({torch['threads']} threads): encoder {torch['encoder_ms_median']:.0f} ms per "
      f"30 s window, decoder {torch['decode_tokens_per_second_median']:.1f} tokens/s (medians)")
print(f"anvil CPU: encoder {1000 * anvil['encoder_s']:.0f} ms, decoder {anvil['decode_tokens_per_s']:.1f} tokens/s "
      f"(medians of {anvil['runs']} runs; first result {anvil['first_result_s']:.2f} s)")
print(f"anvil / PyTorch: encoder speed {torch['encoder_ms_median'] / (1000 * anvil['encoder_s']):.2f}x, "
      f"decoder {anvil['decode_tokens_per_s'] / torch['decode_tokens_per_second_median']:.2f}x")
PY
