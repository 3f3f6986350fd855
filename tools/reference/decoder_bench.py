#!/usr/bin/python3
"""PyTorch baseline for anvil's decode benchmark (bench/decode_vs_pytorch.sh).

A GPT-2-sized language model (openai-community/gpt2's shape: 12 layers, n_embd 768, 12 heads, vocabulary 50257,
1024 positions; 124M parameters) with seeded random weights, built from decoder_lms.py's plain-PyTorch port of
modeling_gpt2.py and randomized as decoder_lms.py does (its token-to-token map keeps the greedy path from
collapsing into a repeated token and gives it wide top-1/top-2 margins, so two float32 implementations agree on
it). Greedy decoding with a KV cache as GPT2LMHeadModel.generate does it: the prompt in one call, then one token
per call, keys and values concatenated to the cache (HF's legacy past_key_values), batch 1, float32, under
torch.inference_mode with torch.set_num_threads(--threads). Only the last position's logits go through the head
(what anvil computes). Prefill and decode are timed apart, best of --runs after a warm-up run, in two modes: "hf"
(every product as modeling_gpt2.py computes it: torch.addmm, F.linear) and "gemv" (one-row products as
torch.addmv / torch.mv, which PyTorch runs several times faster); the faster mode is the baseline. Writes, under
--out DIR:

  model/config.json, model/generation_config.json, model/model.safetensors
                       the folder anvil loads (GPT2LMHeadModel's state_dict names, "transformer." prefix, f32;
                       the lm_head is tied to wte and not stored, as save_pretrained does)
  prompt.json          {"ids": [32 ids]}
  pytorch_timing.json  {"decode_tokens_per_second", "prefill_seconds", "decode_seconds",
                       "decode_cpu_seconds_per_token" (the faster mode's; CPU time of this process),
                       "best_mode", "hf": {...}, "gemv": {...} (each mode's four figures), "tokens" (the greedy
                       ids of the hf mode, --new-tokens of them), "gemv_tokens_equal_hf", "min_margin" (smallest
                       top-1/top-2 logit gap on the path), "threads", "torch", "prompt_tokens", "new_tokens"}
                       (also printed without the tokens)

decode_tokens_per_second counts the tokens after the first (the first comes from the prefill): (new - 1) / decode
seconds, as anvil's generation_stats does.

Run with Debian's interpreter: /usr/bin/python3 tools/reference/decoder_bench.py --out /tmp/d --threads 2
"""

import argparse
import json
import math
import os
import sys
import time

# As sentence_bench.py: run the baseline at its best (DESIGN.md "Performance") — before torch loads, drop the
# build machines' OpenBLAS overrides and pin both thread pools to --threads, default 1 (threads_first.py).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import threads_first  # noqa: E402

threads_first.pin(default="1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import decoder_lms  # noqa: E402
import hf_format  # noqa: E402

CONFIG = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 50257, "n_embd": 768,
          "n_layer": 12, "n_head": 12, "n_inner": None, "n_positions": 1024, "n_ctx": 1024,
          "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "resid_pdrop": 0.1, "embd_pdrop": 0.1,
          "attn_pdrop": 0.1, "initializer_range": 0.02, "scale_attn_weights": True,
          "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False, "tie_word_embeddings": True,
          "bos_token_id": 50256, "eos_token_id": 50256, "torch_dtype": "float32"}
# decoder_lms.py's GPT-2 fixture settings (its map: kappa, gamma, beta; q/k and output scales).
SPEC = {"qk_scale": 1.5, "out_scale": 0.15, "beta": 2.5, "kappa": 6.0, "gamma": 1.5}


# The reference's hooks, made free for timing: no activation statistics (a reduction per call), and the
# attention and Conv1D of modeling_gpt2.py as it computes them for speed (torch.addmm; the causal mask only
# when a call has more than one query — one new token sees the whole cache).
def _no_track(x):
    return x


# "hf": every product as modeling_gpt2.py / nn.Linear compute it (torch.addmm, F.linear). "gemv": a one-row
# product as a matrix-vector product (torch.addmv, torch.mv), which PyTorch 1.13 runs 3-5x faster than its
# one-row addmm here; the decode steps are all one-row products.
MODE = ["hf"]


def _conv1d_forward(self, x):
    size_out = x.size()[:-1] + (self.weight.size(-1),)
    rows = x.reshape(-1, x.size(-1))
    if MODE[0] == "gemv" and rows.shape[0] == 1:
        return torch.addmv(self.bias, self.weight.t(), rows[0]).view(size_out)
    return torch.addmm(self.bias, rows, self.weight).view(size_out)


def _attend(q, k, v, q_pos, k_pos, window=None):
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    s, t = q.shape[2], k.shape[2]
    if s > 1:
        causal = torch.ones((s, t), dtype=torch.bool).tril(t - s)
        scores = scores.masked_fill(~causal, torch.finfo(scores.dtype).min)
    out = torch.matmul(torch.softmax(scores, dim=-1), v)
    return out.transpose(1, 2).reshape(1, s, -1)


def step(model, ids, start, cache):
    """One call of GPT2LMHeadModel with past_key_values: logits of the last position only."""
    positions = list(range(start, start + len(ids)))
    x = model.wte(torch.tensor([ids])) + model.wpe(torch.tensor([positions]))
    for i, block in enumerate(model.h):
        x = block(x, positions, cache, i)
    last = model.ln_f(x[:, -1])
    if MODE[0] == "gemv":
        return torch.mv(model.wte.weight, last[0])
    return F.linear(last, model.wte.weight)[0]


def generate(model, prompt, new_tokens):
    """Greedy decoding; returns the tokens, each step's logits rows, prefill seconds, decode seconds and the
    decode's CPU seconds (this process's, which other processes on a busy machine inflate less)."""
    cache = decoder_lms.Cache(len(model.h))
    start = time.perf_counter()
    row = step(model, prompt, 0, cache)
    tokens, rows = [int(torch.argmax(row))], [row]
    prefill = time.perf_counter() - start
    start, cpu = time.perf_counter(), time.process_time()
    while len(tokens) < new_tokens:
        row = step(model, [tokens[-1]], len(prompt) + len(tokens) - 1, cache)
        tokens.append(int(torch.argmax(row)))
        rows.append(row)
    return tokens, rows, prefill, time.perf_counter() - start, time.process_time() - cpu


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    decoder_lms.track = _no_track
    decoder_lms.attend = _attend
    decoder_lms.Conv1D.forward = _conv1d_forward

    # structure() reads n_inner, which the HF config leaves null.
    spec = dict(SPEC, dtype=torch.float32, config=dict(CONFIG, n_inner=4 * CONFIG["n_embd"]))
    model = decoder_lms.build_model(spec, args.seed).float().eval()
    folder = hf_format.make_output_dir(os.path.join(args.out, "model"))
    hf_format.write_json(os.path.join(folder, "config.json"), CONFIG)
    hf_format.write_json(os.path.join(folder, "generation_config.json"),
                         {"bos_token_id": 50256, "eos_token_id": 50256, "do_sample": False})
    tensors = {"transformer." + name: t for name, t in decoder_lms.stored_tensors(model, torch.float32).items()}
    hf_format.write_safetensors(os.path.join(folder, "model.safetensors"), tensors)
    del tensors

    generator = hf_format.seeded_generator(args.seed + 1000)
    prompt = torch.randint(0, CONFIG["vocab_size"] - 1, (args.prompt_tokens,), generator=generator).tolist()
    hf_format.write_json(os.path.join(args.out, "prompt.json"), {"ids": prompt})

    timing = {"threads": args.threads, "torch": torch.__version__, "prompt_tokens": len(prompt),
              "new_tokens": args.new_tokens}
    with torch.inference_mode():
        for mode in ("hf", "gemv"):
            MODE[0] = mode
            tokens, rows, _, _, _ = generate(model, prompt, args.new_tokens)  # also the warm-up run
            best_prefill = best_decode = best_cpu = float("inf")
            for _ in range(args.runs):
                again, _, prefill, decode, cpu = generate(model, prompt, args.new_tokens)
                assert again == tokens, "greedy decoding is not deterministic"
                best_prefill, best_decode = min(best_prefill, prefill), min(best_decode, decode)
                best_cpu = min(best_cpu, cpu)
            timing[mode] = {"decode_tokens_per_second": (args.new_tokens - 1) / best_decode,
                            "prefill_seconds": best_prefill, "decode_seconds": best_decode,
                            "decode_cpu_seconds_per_token": best_cpu / (args.new_tokens - 1)}
            if mode == "hf":
                hf_tokens = tokens
                timing["min_margin"], timing["min_margin_relative"] = decoder_lms.margins(rows)
    timing["gemv_tokens_equal_hf"] = sum(a == b for a, b in zip(tokens, hf_tokens))
    timing["distinct_tokens"] = len(set(hf_tokens))
    best = max(("hf", "gemv"), key=lambda m: timing[m]["decode_tokens_per_second"])
    timing.update(timing[best], best_mode=best)
    print(json.dumps(timing))
    timing["tokens"] = hf_tokens
    hf_format.write_json(os.path.join(args.out, "pytorch_timing.json"), timing)


if __name__ == "__main__":
    main()
