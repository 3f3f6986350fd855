#!/usr/bin/env python3
"""What weight compression costs in accuracy: a decoder LM's logits with `anvil logits --compress KIND` against
the same model's uncompressed fp32 logits, both on the CPU backend in this run.

usage: compression_accuracy.py PATH_TO_ANVIL [MODEL_DIR ...]
The models default to the random-weight decoder fixtures in tests/data/decoder_lms (llama, qwen2, gpt2), each
read at every prompt of its expected.json. Prints one Markdown row per model and kind (then a second table: the
GGUF fixtures of tests/data/gguf/models with `--products exact` and `--products int8`, the activations rounded
to 8 bits as llama.cpp rounds them, against the float64 logits of the weights each file holds):
  - logits error: max |compressed - fp32| over every position and token, divided by max |fp32|;
  - top-1 log-prob error: max over positions of |log p(t)| moved, t the fp32 logits' most likely token;
  - top-1: the share of positions whose most likely next token is the same.
Random weights are the hard case for a palette (no clusters to find); real checkpoints have been reported to
keep more (Apple's coremltools documentation), which this script cannot show here.
"""
import json
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
KINDS = ("int8", "lut6", "lut4", "lut4g32")


def logits(anvil: str, model: pathlib.Path, ids: list[int], out: pathlib.Path, *extra: str) -> np.ndarray:
    command = [anvil, "logits", "--model", str(model), "--ids", ",".join(map(str, ids)), "--backend", "cpu",
               "--out", str(out), *extra]
    subprocess.run(command, check=True, capture_output=True, text=True)
    return np.load(out).astype(np.float64)


def log_softmax(x: np.ndarray) -> np.ndarray:
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def main() -> int:
    anvil = sys.argv[1]
    models = [pathlib.Path(m) for m in sys.argv[2:]] or [ROOT / "tests" / "data" / "decoder_lms" / name
                                                         for name in ("llama", "qwen2", "gpt2")]
    print("| model | weights | logits error | top-1 log-prob error | top-1 |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "logits.npy"
        for model in models:
            prompts = json.loads((model / "expected.json").read_text())["prompts"]
            config = json.loads((model / "config.json").read_text())
            hidden = config.get("hidden_size", config.get("n_embd"))
            layers = config.get("num_hidden_layers", config.get("n_layer"))
            reference = [logits(anvil, model, ids, out) for ids in prompts]
            for kind in KINDS:
                got = [logits(anvil, model, ids, out, "--compress", kind) for ids in prompts]
                scale = max(np.abs(r).max() for r in reference)
                error = max(np.abs(g - r).max() for g, r in zip(got, reference)) / scale
                logprob = 0.0
                for g, r in zip(got, reference):
                    best = r.argmax(-1)
                    rows = np.arange(len(r))
                    logprob = max(logprob, np.abs(log_softmax(g)[rows, best] - log_softmax(r)[rows, best]).max())
                same = sum(int((g.argmax(-1) == r.argmax(-1)).sum()) for g, r in zip(got, reference))
                positions = sum(len(r) for r in reference)
                print(f"| {model.name} ({layers} layers, hidden {hidden}) | {kind} | {error:.4f} | {logprob:.4f} "
                      f"| {same}/{positions} ({100.0 * same / positions:.1f}%) |", flush=True)
    print()
    print("| GGUF file | products | logits error | top-1 log-prob error | top-1 |")
    print("|---|---|---|---|---|")
    gguf = ROOT / "tests" / "data" / "gguf" / "models"
    ids = json.loads((gguf / "prompt.json").read_text())["ids"]
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "logits.npy"
        for name in ("llama_gqa_q8_0", "llama_gqa_q4_0", "llama_gqa_legacy_mix", "llama_k256_k_mix",
                     "qwen2_tied_q8_0", "gpt2_q8_0"):
            reference = np.load(gguf / f"{name}_logits.npy").astype(np.float64)
            for products in ("exact", "int8"):
                got = logits(anvil, gguf / f"{name}.gguf", ids, out, "--products", products)
                error = np.abs(got - reference).max() / np.abs(reference).max()
                best = reference.argmax(-1)
                rows = np.arange(len(reference))
                logprob = np.abs(log_softmax(got)[rows, best] - log_softmax(reference)[rows, best]).max()
                same = int((got.argmax(-1) == best).sum())
                print(f"| {name} | {products} | {error:.5f} | {logprob:.4f} | {same}/{len(reference)} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
