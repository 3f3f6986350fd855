#!/usr/bin/python3
"""GGUF files for the decode benchmark against llama.cpp (bench/decode_vs_llama_cpp.sh): random weights shaped
like a ~100M Llama (hidden 768, 12 layers, 12 heads of which 4 key/value, SwiGLU 2048, vocabulary 32000,
untied) and GPT-2 124M (hidden 768, 12 layers, 12 heads, MLP 3072, vocabulary 50257, 1024 positions, tied
head written out as llama.cpp's converter writes it), each in F16, Q8_0, Q4_0 and Q4_K (norms and biases F32), with
a placeholder vocabulary of the right size (a SentencePiece one for Llama, a byte-level BPE one without merges
for GPT-2) so that llama.cpp loads the files. The numbers do not matter here, only their shapes and types:
the quantisers are gguf_fixtures.py's Q8_0, Q4_0 and Q4_K, vectorised (the fixtures' per-block loops would take
minutes over 130M values). Also writes prompt.json: 32 prompt ids and 512 prefill ids (seeded).

  /usr/bin/python3 tools/reference/gguf_bench_models.py OUT_DIR [--only llama|gpt2] [--types F16,Q8_0,Q4_0,Q4_K]
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_fixtures as gf  # noqa: E402


def q8_0(x):
    b = x.reshape(-1, 32)
    d = (np.abs(b).max(axis=1) / 127.0).astype(np.float16)
    scale = d.astype(np.float32)[:, None]
    q = np.clip(np.round(np.divide(b, scale, out=np.zeros_like(b), where=scale != 0)), -127, 127).astype(np.int8)
    out = np.empty((b.shape[0], 34), np.uint8)
    out[:, :2] = d.view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes()


def q4_0(x):
    b = x.reshape(-1, 32)
    extreme = b[np.arange(b.shape[0]), np.argmax(np.abs(b), axis=1)]
    d = (extreme / -8.0).astype(np.float16)
    scale = d.astype(np.float32)[:, None]
    q = np.clip(np.round(np.divide(b, scale, out=np.zeros_like(b), where=scale != 0)) + 8, 0, 15).astype(np.uint8)
    out = np.empty((b.shape[0], 18), np.uint8)
    out[:, :2] = d.view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q[:, :16] | (q[:, 16:] << 4)
    return out.tobytes()


def q4_k(x):
    """gguf_fixtures.quant_k(x, five=False) over every block at once: per 256 values, 8 groups of 32, each
    x = d * scale * q - dmin * min with 6-bit scales and mins and 4-bit q."""
    g = x.reshape(-1, 8, 32)
    lows = np.minimum(g.min(axis=2), 0)
    spans = g.max(axis=2) - lows
    d = np.maximum(spans.max(axis=1) / 15 / 63.0, 1e-8).astype(np.float16)
    dmin = np.maximum(-lows.min(axis=1) / 63.0, 1e-8).astype(np.float16)
    scales = np.clip(np.round(spans / 15 / d.astype(np.float32)[:, None]), 1, 63).astype(np.int32)
    mins = np.clip(np.round(-lows / dmin.astype(np.float32)[:, None]), 0, 63).astype(np.int32)
    step = d.astype(np.float32)[:, None] * scales.astype(np.float32)
    offset = dmin.astype(np.float32)[:, None] * mins.astype(np.float32)
    q = np.clip(np.round((g + offset[:, :, None]) / step[:, :, None]), 0, 15).astype(np.uint8)
    out = np.empty((g.shape[0], 144), np.uint8)
    out[:, 0:2] = d.view(np.uint8).reshape(-1, 2)
    out[:, 2:4] = dmin.view(np.uint8).reshape(-1, 2)
    for j in range(4):  # gguf_fixtures.pack_k_scales
        out[:, 4 + j] = (scales[:, j] & 63) | ((scales[:, j + 4] >> 4) << 6)
        out[:, 8 + j] = (mins[:, j] & 63) | ((mins[:, j + 4] >> 4) << 6)
        out[:, 12 + j] = (scales[:, j + 4] & 15) | ((mins[:, j + 4] & 15) << 4)
    for i in range(4):
        out[:, 16 + 32 * i:48 + 32 * i] = q[:, 2 * i] | (q[:, 2 * i + 1] << 4)
    return out.tobytes()


ENCODE = {"F16": lambda x: x.astype("<f2").tobytes(), "Q8_0": q8_0, "Q4_0": q4_0, "Q4_K": q4_k}


def llama_tensors(rng):
    hidden, layers, heads, kv_heads, ffn, vocab = 768, 12, 12, 4, 2048, 32000
    head_dim = hidden // heads
    shapes = [("token_embd.weight", (vocab, hidden)), ("output_norm.weight", (hidden,)), ("output.weight", (vocab, hidden))]
    for i in range(layers):
        shapes += [(f"blk.{i}.attn_norm.weight", (hidden,)), (f"blk.{i}.attn_q.weight", (hidden, hidden)),
                   (f"blk.{i}.attn_k.weight", (kv_heads * head_dim, hidden)),
                   (f"blk.{i}.attn_v.weight", (kv_heads * head_dim, hidden)),
                   (f"blk.{i}.attn_output.weight", (hidden, hidden)), (f"blk.{i}.ffn_norm.weight", (hidden,)),
                   (f"blk.{i}.ffn_gate.weight", (ffn, hidden)), (f"blk.{i}.ffn_up.weight", (ffn, hidden)),
                   (f"blk.{i}.ffn_down.weight", (hidden, ffn))]
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tokens += [f"\u2581w{i}" for i in range(vocab - len(tokens))]
    types = [2, 3, 3] + [6] * 256 + [1] * (vocab - 259)
    metadata = [
        ("general.architecture", gf.STRING, "llama"), ("general.name", gf.STRING, "anvil bench llama ~100M"),
        ("llama.context_length", gf.U32, 2048), ("llama.embedding_length", gf.U32, hidden),
        ("llama.block_count", gf.U32, layers), ("llama.feed_forward_length", gf.U32, ffn),
        ("llama.attention.head_count", gf.U32, heads), ("llama.attention.head_count_kv", gf.U32, kv_heads),
        ("llama.attention.layer_norm_rms_epsilon", gf.F32V, 1e-5), ("llama.rope.freq_base", gf.F32V, 10000.0),
        ("llama.rope.dimension_count", gf.U32, head_dim),
        ("tokenizer.ggml.model", gf.STRING, "llama"), ("tokenizer.ggml.tokens", gf.ARRAY, (gf.STRING, tokens)),
        ("tokenizer.ggml.scores", gf.ARRAY, (gf.F32V, [-float(i) for i in range(vocab)])),
        ("tokenizer.ggml.token_type", gf.ARRAY, (gf.I32, types)),
        ("tokenizer.ggml.bos_token_id", gf.U32, 1), ("tokenizer.ggml.eos_token_id", gf.U32, 2),
    ]
    return metadata, shapes, None


def gpt2_tensors(rng):
    hidden, layers, heads, ffn, vocab, positions = 768, 12, 12, 3072, 50257, 1024
    shapes = [("token_embd.weight", (vocab, hidden)), ("position_embd.weight", (positions, hidden)),
              ("output_norm.weight", (hidden,)), ("output_norm.bias", (hidden,))]
    for i in range(layers):
        shapes += [(f"blk.{i}.attn_norm.weight", (hidden,)), (f"blk.{i}.attn_norm.bias", (hidden,)),
                   (f"blk.{i}.attn_qkv.weight", (3 * hidden, hidden)), (f"blk.{i}.attn_qkv.bias", (3 * hidden,)),
                   (f"blk.{i}.attn_output.weight", (hidden, hidden)), (f"blk.{i}.attn_output.bias", (hidden,)),
                   (f"blk.{i}.ffn_norm.weight", (hidden,)), (f"blk.{i}.ffn_norm.bias", (hidden,)),
                   (f"blk.{i}.ffn_up.weight", (ffn, hidden)), (f"blk.{i}.ffn_up.bias", (ffn,)),
                   (f"blk.{i}.ffn_down.weight", (hidden, ffn)), (f"blk.{i}.ffn_down.bias", (hidden,))]
    byte_chars = [chr(c) for c in range(ord("!"), ord("~") + 1)] + [chr(c) for c in range(ord("\u00a1"), ord("\u00ac") + 1)]
    byte_chars += [chr(c) for c in range(ord("\u00ae"), ord("\u00ff") + 1)]
    byte_chars += [chr(256 + n) for n in range(256 - len(byte_chars))]
    tokens = byte_chars + [f"w{i}" for i in range(vocab - 257)] + ["<|endoftext|>"]
    types = [1] * (vocab - 1) + [3]
    metadata = [
        ("general.architecture", gf.STRING, "gpt2"), ("general.name", gf.STRING, "anvil bench gpt2 124M"),
        ("gpt2.context_length", gf.U32, positions), ("gpt2.embedding_length", gf.U32, hidden),
        ("gpt2.block_count", gf.U32, layers), ("gpt2.feed_forward_length", gf.U32, ffn),
        ("gpt2.attention.head_count", gf.U32, heads), ("gpt2.attention.layer_norm_epsilon", gf.F32V, 1e-5),
        ("tokenizer.ggml.model", gf.STRING, "gpt2"), ("tokenizer.ggml.pre", gf.STRING, "gpt-2"),
        ("tokenizer.ggml.tokens", gf.ARRAY, (gf.STRING, tokens)),
        ("tokenizer.ggml.token_type", gf.ARRAY, (gf.I32, types)),
        ("tokenizer.ggml.merges", gf.ARRAY, (gf.STRING, [])),
        ("tokenizer.ggml.bos_token_id", gf.U32, vocab - 1), ("tokenizer.ggml.eos_token_id", gf.U32, vocab - 1),
    ]
    return metadata, shapes, "token_embd.weight"  # the tied head, written out again as output.weight


def write(name, make, kinds, out):
    rng = np.random.default_rng(11)
    metadata, shapes, tied = make(rng)
    values = {}
    for tensor, shape in shapes:
        if len(shape) == 1:
            values[tensor] = (1.0 + 0.02 * rng.standard_normal(shape)).astype(np.float32) if tensor.endswith(
                "norm.weight") else (0.02 * rng.standard_normal(shape)).astype(np.float32)
        else:
            values[tensor] = (rng.standard_normal(shape, dtype=np.float32) * np.float32(0.5 / np.sqrt(shape[1])))
    for kind in kinds:
        tensors = []
        for tensor, shape in shapes:
            v = values[tensor]
            matrix = v.ndim == 2
            kind_here = kind if matrix else "F32"
            payload = ENCODE[kind_here](v.reshape(-1)) if matrix else v.astype("<f4").tobytes()
            tensors.append((tensor, gf.TYPES[kind_here], list(reversed(shape)), payload))
            if tensor == tied:
                tensors.append(("output.weight", gf.TYPES[kind_here], list(reversed(shape)), payload))
        path = os.path.join(out, f"{name}_{kind.lower()}.gguf")
        with open(path, "wb") as f:
            f.write(gf.write_gguf(metadata, tensors, alignment=32))
        print(path, f"{os.path.getsize(path) / 2**20:.0f} MiB")


def main():
    ENCODE["F32"] = lambda x: x.astype("<f4").tobytes()
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--only", choices=("llama", "gpt2"))
    parser.add_argument("--types", default="F16,Q8_0,Q4_0,Q4_K")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    kinds = args.types.split(",")
    for name, make in (("llama100m", llama_tensors), ("gpt2_124m", gpt2_tensors)):
        if args.only is None or name.startswith(args.only):
            write(name, make, kinds, args.out)
    rng = np.random.default_rng(5)
    with open(os.path.join(args.out, "prompt.json"), "w") as f:
        json.dump({"prompt": rng.integers(300, 30000, 32).tolist(), "prefill": rng.integers(300, 30000, 512).tolist()}, f)


if __name__ == "__main__":
    main()
