#!/usr/bin/python3
"""GGUF decoder fixtures: random-weight Llama and Qwen2 models written as llama.cpp's converter writes them, with
the PyTorch logits of the weights each file holds.

Each model is decoder_lms.py's plain-PyTorch LlamaForCausalLM (the port of modeling_llama.py / modeling_qwen2.py
the safetensors fixtures use), with its seeded random weights (decoder_lms.randomize). The files follow
convert_hf_to_gguf.py (LlamaModel / Qwen2Model) and the GGUF spec (ggml/docs/gguf.md), written here without
llama.cpp or gguf-py:
  - tensor names token_embd, blk.N.attn_norm / attn_q / attn_k / attn_v / attn_output / ffn_norm / ffn_gate /
    ffn_up / ffn_down (.weight, .bias for Qwen2's q/k/v), output_norm, output (absent when tied);
  - ne the shape reversed (ne[0] the input dimension);
  - llama only: attn_q and attn_k rows permuted per head from rotate-half to interleaved pairs
    (w.reshape(n_head, 2, D / 2, in).swapaxes(1, 2)), with n_head_kv heads for attn_k;
  - matrices stored in the file's type (F32, F16, Q8_0, Q4_0, each quantised by gguf_fixtures.py's own
    quantisers), or in several types in turn as llama.cpp's mixes (Q4_K_M) are: LEGACY_MIX Q4_1, Q5_0, Q5_1
    and IQ4_NL, K_MIX (llama_k256, rows of 256) Q4_K, Q5_K and Q6_K; norms and biases F32, as llama.cpp does;
  - metadata {arch}.context_length, embedding_length, block_count, feed_forward_length, attention.head_count,
    attention.head_count_kv, attention.layer_norm_rms_epsilon, rope.freq_base, rope.dimension_count, and the
    tokenizer's bos/eos ids.
<name>_<type>_logits.npy: the model's logits [S, V] for prompt.json's ids, computed in float64 with the weights
the file decodes to (the quantisers' own decoding, the permutation undone). An F32 file's logits are the model's.
tokenizer.ggml.*: llama_gqa a SentencePiece ('llama') vocabulary of 256 byte tokens, 61 pieces learned from
decoder_lms.CORPUS and 3 specials, with scores; gpt2 ('gpt-2') and qwen2_tied ('qwen2') decoder_lms.py's byte-level BPE
(the safetensors fixtures' tokenizer.json) with its merges; qwen2_tied also decoder_lms.py's ChatML chat template.
tokenization.json: TEXTS and, per model, the ids its reference encoder gives them (PatternBpe: Hugging Face's BPE over
the pre-tokenizer's regex; spm_vocabulary's encode: llama.cpp's SentencePiece algorithm). llama.cpp itself agrees on
every one (tools/reference/llama_cpp_check.mjs).
refused/: small files anvil must refuse, one defect each; expected.tsv lines `file<TAB>kind<TAB>words`, kind
`unsupported` (anvil::unsupported_error) or `format` (anvil::format_error), the words what the message names.

  /usr/bin/python3 tools/reference/gguf_models.py tests/data
"""
import json
import os
import sys

import numpy as np
import regex
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe_training  # noqa: E402
import decoder_lms as lm  # noqa: E402
import gguf_fixtures as gf  # noqa: E402
import hf_format  # noqa: E402
import tokenizer_goldens as tg  # noqa: E402

LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


GPT2_LAYER_NAMES = {"ln_1": "attn_norm", "attn.c_attn": "attn_qkv", "attn.c_proj": "attn_output", "ln_2": "ffn_norm",
                    "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down"}
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def gguf_name(name):
    if name in ("wte.weight", "wpe.weight"):
        return {"wte.weight": "token_embd.weight", "wpe.weight": "position_embd.weight"}[name]
    if name.startswith("ln_f."):
        return "output_norm." + name.split(".")[1]
    if name.startswith("h."):  # GPT-2: h.N.<module>.<weight|bias>
        parts = name.split(".")
        return f"blk.{parts[1]}.{GPT2_LAYER_NAMES['.'.join(parts[2:-1])]}.{parts[-1]}"
    if name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if name == "model.norm.weight":
        return "output_norm.weight"
    if name == "lm_head.weight":
        return "output.weight"
    parts = name.split(".")
    assert parts[:2] == ["model", "layers"], name
    return f"blk.{parts[2]}." + LAYER_NAMES[".".join(parts[3:])]


def permute(w, heads):
    """convert_hf_to_gguf.py's LlamaModel.permute: rotate-half pairs (i, i + D/2) to interleaved (2i, 2i + 1)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute(w, heads):
    return w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# ---- tokenizers (tokenizer.ggml.*), as convert_hf_to_gguf.py writes them, with their own reference encoders ----

TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_BYTE = 1, 2, 3, 6
QWEN2_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
                 r"""\s*[\r\n]+|\s+(?!\S)|\s+""")
# Texts each file's tokenizer is checked on: spaces and tabs, newlines, digits (GPT-2 keeps runs, Qwen2 splits
# them), contractions, characters the tiny vocabularies lack (byte fallback for SentencePiece), special tokens.
TEXTS = [
    "The river runs past the old mill.",
    "the children run along the river to the bridge, where the water is deep",
    "In 2024 the baker's 12345 loaves; caf\u00e9 \u00fcml\u00e4ut!",
    "line one\n\nline two  \t end",
    "<|im_start|>user\nWhere is the mill?<|im_end|>\n",
    "  leading spaces and trailing  ",
    # The conversation the command-line test renders with the Qwen2 file's ChatML template.
    "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nWhere is the mill?<|im_end|>\n"
    "<|im_start|>assistant\n",
]


class PatternBpe(tg.Gpt2Encoder):
    """Byte-level BPE over the words of a given pre-tokenizer regex (Hugging Face's Split + ByteLevel)."""

    def __init__(self, encoder, merges, specials, pattern):
        super().__init__(encoder, merges, specials=specials)
        self.pattern = regex.compile(pattern)

    def ids(self, text):
        out = []
        for is_special, piece in tg.split_on_tokens(text, self.specials):
            if is_special:
                out.append(self.encoder[piece])
                continue
            for token in self.pattern.findall(piece):
                token = "".join(self.byte_encoder[b] for b in token.encode("utf-8"))
                out.extend(self.encoder[t] for t in self.bpe(token).split(" "))
        return out


def bpe_vocabulary(pre):
    """decoder_lms.py's byte-level BPE (the safetensors fixtures' tokenizer.json) as gpt2 GGUF metadata."""
    doc, _ = lm.build_tokenizer()
    vocab = doc["model"]["vocab"]
    tokens = sorted(vocab, key=vocab.get)
    assert [vocab[t] for t in tokens] == list(range(len(tokens)))
    types = [TOKEN_CONTROL if t in lm.SPECIALS else TOKEN_NORMAL for t in tokens]
    merges = doc["model"]["merges"]
    pattern = tg.gpt2_pattern().pattern if pre == "gpt-2" else QWEN2_PATTERN
    encoder = PatternBpe(vocab, [tuple(m.split(" ")) for m in merges], lm.SPECIALS, pattern)
    metadata = [("tokenizer.ggml.model", gf.STRING, "gpt2"), ("tokenizer.ggml.pre", gf.STRING, pre),
                ("tokenizer.ggml.tokens", gf.ARRAY, (gf.STRING, tokens)),
                ("tokenizer.ggml.token_type", gf.ARRAY, (gf.I32, types)),
                ("tokenizer.ggml.merges", gf.ARRAY, (gf.STRING, merges))]
    return metadata, encoder.ids


SPM_SPECIALS = {317: ("<|endoftext|>", TOKEN_CONTROL), 318: ("<unk>", TOKEN_UNKNOWN), 319: ("<|im_end|>", TOKEN_CONTROL)}


def spm_pieces():
    """A SentencePiece-style BPE vocabulary of 61 pieces learned from decoder_lms.CORPUS: the commonest characters
    (spaces as U+2581, one before each word) and merges within words, each merge scored above the last, and every
    character below every merge. Rarer characters have no piece, so they fall back to <0xXX> byte tokens."""
    words = {}
    for line in lm.CORPUS:
        for w in line.split(" "):
            words[tuple("\u2581" + w)] = words.get(tuple("\u2581" + w), 0) + 1
    counts = {}
    for word, n in words.items():
        for ch in word:
            counts[ch] = counts.get(ch, 0) + n
    chars = sorted((c for c in counts if counts[c] >= 3), key=lambda c: (-counts[c], c))
    pieces = {c: -100.0 - i for i, c in enumerate(chars)}
    words = {tuple(ch if ch in pieces else None for ch in w): n for w, n in words.items()}
    merge = 0
    while len(pieces) < 61:
        pairs = {}
        for word, n in words.items():
            for a, b in zip(word, word[1:]):
                if a is not None and b is not None:
                    pairs[(a, b)] = pairs.get((a, b), 0) + n
        a, b = min(pairs, key=lambda p: (-pairs[p], p))
        pieces[a + b] = -float(merge)
        merge += 1
        words = bpe_training.merge_pair(words, (a, b))
    return pieces


def spm_vocabulary(bos_id):
    """Byte tokens 0-255, the 61 pieces, then the specials, as convert_hf_to_gguf.py's llama vocabulary."""
    pieces = spm_pieces()
    tokens = [f"<0x{b:02X}>" for b in range(256)] + list(pieces)
    scores = [0.0] * 256 + list(pieces.values())
    types = [TOKEN_BYTE] * 256 + [TOKEN_NORMAL] * len(pieces)
    for i in sorted(SPM_SPECIALS):
        assert len(tokens) == i
        tokens.append(SPM_SPECIALS[i][0])
        scores.append(0.0)
        types.append(SPM_SPECIALS[i][1])
    ids = {t: i for i, t in enumerate(tokens)}
    specials = [SPM_SPECIALS[i][0] for i in (317, 319)]

    def encode(text):
        """llama.cpp's llm_tokenizer_spm: a space before each run of text, spaces as U+2581, then repeatedly the
        adjacent pair whose concatenation is a piece of the highest score (the leftmost of equals) merged; what
        has no piece becomes its UTF-8 bytes. The file's BOS first (tokenizer.ggml.add_bos_token's default)."""
        out = [bos_id]
        for is_special, segment in tg.split_on_tokens(text, specials):
            if is_special:
                out.append(ids[segment])
                continue
            symbols = list(("\u2581" + segment).replace(" ", "\u2581"))
            while True:
                best = None
                for i in range(len(symbols) - 1):
                    score = pieces.get(symbols[i] + symbols[i + 1])
                    if score is not None and (best is None or score > best[0]):
                        best = (score, i)
                if best is None:
                    break
                i = best[1]
                symbols[i:i + 2] = [symbols[i] + symbols[i + 1]]
            for sym in symbols:
                if sym in pieces:
                    out.append(ids[sym])
                else:
                    out.extend(ids[f"<0x{b:02X}>"] for b in sym.encode("utf-8"))
        return out

    metadata = [("tokenizer.ggml.model", gf.STRING, "llama"),
                ("tokenizer.ggml.tokens", gf.ARRAY, (gf.STRING, tokens)),
                ("tokenizer.ggml.scores", gf.ARRAY, (gf.F32V, scores)),
                ("tokenizer.ggml.token_type", gf.ARRAY, (gf.I32, types)),
                ("tokenizer.ggml.unknown_token_id", gf.U32, 318)]
    return metadata, encode


def vocabulary(model_spec):
    """The tokenizer metadata of a model's files, and its reference encoder."""
    arch = model_spec["config"]["model_type"]
    if arch == "llama":
        return spm_vocabulary(model_spec["config"]["bos_token_id"])
    metadata, encode = bpe_vocabulary("gpt-2" if arch == "gpt2" else "qwen2")
    if arch == "qwen2":
        metadata.append(("tokenizer.chat_template", gf.STRING, lm.CHATML_TEMPLATE))
    return metadata, encode


def spec(name, config, seed):
    arch = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "gpt2": "GPT2LMHeadModel"}[config["model_type"]]
    config["architectures"] = [arch]
    config["torch_dtype"] = "float32"
    return {"name": name, "config": config, "dtype": torch.float32, "seed": seed, "eos": [config["eos_token_id"]],
            "qk_scale": 1.5, "out_scale": 0.2, "beta": 2.5, "kappa": 4.0, "gamma": 1.5}


MODELS = [
    # Grouped-query attention (2 key/value heads for 4), untied: both permutations and output.weight.
    (spec("llama_gqa", lm.llama_config("llama", hidden_size=64, intermediate_size=96, num_attention_heads=4,
                                       num_key_value_heads=2, rope_theta=10000.0, rope_scaling=None), 2),
     ("F32", "F16", "Q8_0", "Q4_0", "LEGACY_MIX")),
    # Qwen2: biases on q/k/v, one key/value head, tied embeddings, no permutation.
    (spec("qwen2_tied", lm.llama_config("qwen2", hidden_size=64, intermediate_size=96, num_key_value_heads=1,
                                        attention_bias=True, tie_word_embeddings=True, rope_theta=1000000.0,
                                        bos_token_id=317, eos_token_id=319), 4),
     ("Q8_0",)),
    # Rows of 256 for the K-quants' blocks: one layer, its matrices Q4_K, Q5_K and Q6_K in turn (K_MIX).
    (spec("llama_k256", lm.llama_config("llama", hidden_size=256, intermediate_size=256, num_hidden_layers=1,
                                        num_attention_heads=4, num_key_value_heads=2, rope_theta=10000.0,
                                        rope_scaling=None), 6),
     ("K_MIX",)),
    # GPT-2: learned positions, LayerNorm biases, the fused Conv1D attention stored as a linear weight [out, in].
    (spec("gpt2", {"model_type": "gpt2", "vocab_size": lm.VOCAB, "n_embd": 64, "n_layer": 2, "n_head": 4,
                   "n_inner": 96, "n_positions": 64, "n_ctx": 64, "activation_function": "gelu_new",
                   "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True, "bos_token_id": 317,
                   "eos_token_id": 317}, 5),
     ("F16", "Q8_0")),
]


# Kinds that mix types, as llama.cpp's Q4_K_M files do: the matrices take these types in turn, in the order
# the model lists them.
MIXES = {"LEGACY_MIX": ("Q4_1", "Q5_0", "Q5_1", "IQ4_NL"), "K_MIX": ("Q4_K", "Q5_K", "Q6_K")}


def write_model(model_spec, kind, prompt, out):
    c = model_spec["config"]
    arch = c["model_type"]
    model = lm.build_model(model_spec, model_spec["seed"])
    gpt2 = arch == "gpt2"
    if gpt2:
        heads = kv_heads = c["n_head"]
        metadata = [
            ("general.architecture", gf.STRING, arch),
            ("general.name", gf.STRING, f"anvil {model_spec['name']} {kind}"),
            (f"{arch}.context_length", gf.U32, c["n_positions"]),
            (f"{arch}.embedding_length", gf.U32, c["n_embd"]),
            (f"{arch}.block_count", gf.U32, c["n_layer"]),
            (f"{arch}.feed_forward_length", gf.U32, c["n_inner"]),
            (f"{arch}.attention.head_count", gf.U32, heads),
            (f"{arch}.attention.layer_norm_epsilon", gf.F32V, c["layer_norm_epsilon"]),
            ("tokenizer.ggml.bos_token_id", gf.U32, c["bos_token_id"]),
            ("tokenizer.ggml.eos_token_id", gf.U32, c["eos_token_id"]),
        ]
    else:
        heads, kv_heads = c["num_attention_heads"], c["num_key_value_heads"]
    metadata = metadata if gpt2 else [
        ("general.architecture", gf.STRING, arch),
        ("general.name", gf.STRING, f"anvil {model_spec['name']} {kind}"),
        ("general.alignment", gf.U32, 32),
        (f"{arch}.context_length", gf.U32, c["max_position_embeddings"]),
        (f"{arch}.embedding_length", gf.U32, c["hidden_size"]),
        (f"{arch}.block_count", gf.U32, c["num_hidden_layers"]),
        (f"{arch}.feed_forward_length", gf.U32, c["intermediate_size"]),
        (f"{arch}.attention.head_count", gf.U32, heads),
        (f"{arch}.attention.head_count_kv", gf.U32, kv_heads),
        (f"{arch}.attention.layer_norm_rms_epsilon", gf.F32V, c["rms_norm_eps"]),
        (f"{arch}.rope.freq_base", gf.F32V, c["rope_theta"]),
        (f"{arch}.rope.dimension_count", gf.U32, c["hidden_size"] // heads),
        ("tokenizer.ggml.bos_token_id", gf.U32, c["bos_token_id"]),
        ("tokenizer.ggml.eos_token_id", gf.U32, c["eos_token_id"]),
    ]
    metadata += vocabulary(model_spec)[0]
    tensors, decoded_weights = [], {}
    matrices = 0
    for name, p in model.state_dict().items():
        if name == "lm_head.weight" and model.tied():
            continue
        w = p.to(torch.float32).numpy()
        split = None
        if arch == "llama" and name.endswith("q_proj.weight"):
            split = heads
        elif arch == "llama" and name.endswith("k_proj.weight"):
            split = kv_heads
        transposed = gpt2 and name.endswith(CONV1D)  # convert_hf_to_gguf.py's GPT2Model: data_torch.T
        stored = permute(w, split) if split else (w.T.copy() if transposed else w)
        matrix = stored.ndim == 2
        type_name = (MIXES[kind][matrices % len(MIXES[kind])] if kind in MIXES else kind) if matrix else "F32"
        matrices += 1 if matrix else 0
        payload, decoded = gf.QUANTISERS[type_name](stored.reshape(-1).astype(np.float32))
        decoded = decoded.reshape(stored.shape).astype(np.float64)
        decoded_weights[name] = unpermute(decoded, split) if split else (decoded.T if transposed else decoded)
        tensors.append((gguf_name(name), gf.TYPES[type_name], list(reversed(stored.shape)), payload))
        if gpt2 and name == "wte.weight":  # the converter also writes the tied head, a copy
            tensors.append(("output.weight", gf.TYPES[type_name], list(reversed(stored.shape)), payload))
    with open(os.path.join(out, f"{model_spec['name']}_{kind.lower()}.gguf"), "wb") as f:
        f.write(gf.write_gguf(metadata, tensors, alignment=32))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name in decoded_weights:
                p.copy_(torch.from_numpy(decoded_weights[name]))
    logits = lm.full_logits(model, prompt).numpy().astype(np.float32)
    hf_format.save_npy(os.path.join(out, f"{model_spec['name']}_{kind.lower()}_logits.npy"), logits)
    return float(np.abs(logits).max())


def tiny_file(arch="llama", extra_metadata=(), drop_metadata=(), extra_tensors=(), drop_tensors=(), kv_heads=2):
    """A one-layer model (vocab 32, hidden 32, 4 heads) with seeded values, matrices in Q4_0: the base of the
    files anvil must refuse, each with one thing changed."""
    rng = np.random.default_rng(7)
    hidden, heads, vocab, ffn = 32, 4, 32, 32
    head_dim = hidden // heads
    metadata = [(k, kind, v) for k, kind, v in [
        ("general.architecture", gf.STRING, arch),
        (f"{arch}.context_length", gf.U32, 64), (f"{arch}.embedding_length", gf.U32, hidden),
        (f"{arch}.block_count", gf.U32, 1), (f"{arch}.feed_forward_length", gf.U32, ffn),
        (f"{arch}.attention.head_count", gf.U32, heads), (f"{arch}.attention.head_count_kv", gf.U32, kv_heads),
        (f"{arch}.attention.layer_norm_rms_epsilon", gf.F32V, 1e-6), (f"{arch}.rope.freq_base", gf.F32V, 10000.0),
    ] if k.split(".", 1)[-1] not in drop_metadata] + list(extra_metadata)
    shapes = {"token_embd.weight": (vocab, hidden), "output_norm.weight": (hidden,), "output.weight": (vocab, hidden),
              "blk.0.attn_norm.weight": (hidden,), "blk.0.attn_q.weight": (hidden, hidden),
              "blk.0.attn_k.weight": (2 * head_dim, hidden), "blk.0.attn_v.weight": (2 * head_dim, hidden),
              "blk.0.attn_output.weight": (hidden, hidden), "blk.0.ffn_norm.weight": (hidden,),
              "blk.0.ffn_gate.weight": (ffn, hidden), "blk.0.ffn_up.weight": (ffn, hidden),
              "blk.0.ffn_down.weight": (hidden, ffn)}
    shapes.update(dict(extra_tensors))
    tensors = []
    for name, shape in shapes.items():
        if name in drop_tensors:
            continue
        values = rng.standard_normal(int(np.prod(shape))).astype(np.float32)
        kind = "Q4_0" if len(shape) == 2 else "F32"
        payload, _ = gf.QUANTISERS[kind](values)
        tensors.append((name, gf.TYPES[kind], list(reversed(shape)), payload))
    return gf.write_gguf(metadata, tensors, alignment=32)


def tiny_vocabulary(model="gpt2", pre="gpt-2", tokens=None, merges=("t 0",), scores=True, types=None, extra=()):
    """tokenizer.ggml.* keys for tiny_file's 32 ids: tokens 't', '0', 't0', 't1' ... (merges 't 0'), one defect
    given by the arguments."""
    tokens = tokens or ["t", "0", "t0"] + [f"t{i}" for i in range(1, 30)]
    metadata = [("tokenizer.ggml.model", gf.STRING, model), ("tokenizer.ggml.tokens", gf.ARRAY, (gf.STRING, tokens))]
    if model == "gpt2":
        metadata += [("tokenizer.ggml.pre", gf.STRING, pre), ("tokenizer.ggml.merges", gf.ARRAY, (gf.STRING, list(merges)))]
    elif scores:
        metadata.append(("tokenizer.ggml.scores", gf.ARRAY, (gf.F32V, [-float(i) for i in range(len(tokens))])))
    if types is not None:
        metadata.append(("tokenizer.ggml.token_type", gf.ARRAY, (gf.I32, types)))
    return metadata + list(extra)


# What anvil must refuse: (file, the error's kind, words its message must contain).
REFUSED = [
    ("arch_falcon.gguf", lambda: tiny_file(arch="falcon"), "unsupported", "'falcon'"),
    ("rope_freqs.gguf", lambda: tiny_file(extra_tensors=[("rope_freqs.weight", (4,))]), "unsupported",
     "rope_freqs.weight"),
    ("yarn.gguf", lambda: tiny_file(extra_metadata=[("llama.rope.scaling.type", gf.STRING, "yarn"),
                                                    ("llama.rope.scaling.factor", gf.F32V, 4.0)]), "unsupported",
     "'yarn'"),
    ("partial_rotary.gguf", lambda: tiny_file(extra_metadata=[("llama.rope.dimension_count", gf.U32, 4)]),
     "unsupported", "rope.dimension_count"),
    ("unknown_tensor.gguf", lambda: tiny_file(extra_tensors=[("blk.0.attn_qkv.weight", (96, 32))]), "unsupported",
     "blk.0.attn_qkv.weight"),
    ("missing_heads.gguf", lambda: tiny_file(drop_metadata=("attention.head_count",)), "format",
     "llama.attention.head_count"),
    ("kv_heads_do_not_divide.gguf", lambda: tiny_file(kv_heads=3), "format", "not 3 heads"),
    ("missing_norm.gguf", lambda: tiny_file(drop_tensors=("output_norm.weight",)), "format", "output_norm.weight"),
    # The tokenizer (tokenizer.ggml.*): models and pre-tokenizers anvil does not have, and malformed vocabularies.
    ("tokenizer_bert.gguf", lambda: tiny_file(extra_metadata=tiny_vocabulary(model="bert")), "unsupported",
     "tokenizer.ggml.model 'bert'"),
    ("tokenizer_pre_default.gguf", lambda: tiny_file(extra_metadata=tiny_vocabulary(pre="default")), "unsupported",
     "tokenizer.ggml.pre 'default'"),
    ("tokenizer_no_scores.gguf", lambda: tiny_file(extra_metadata=tiny_vocabulary(model="llama", scores=False)),
     "format", "tokenizer.ggml.scores"),
    ("tokenizer_duplicate.gguf", lambda: tiny_file(extra_metadata=tiny_vocabulary(tokens=["t", "0", "t0", "t"] + [
        f"t{i}" for i in range(1, 29)])), "format", "'t' twice (ids 0 and 3)"),
    ("tokenizer_short_types.gguf", lambda: tiny_file(extra_metadata=tiny_vocabulary(types=[1] * 31)), "format",
     "tokenizer.ggml.token_type"),
    ("tokenizer_bad_merge.gguf", lambda: tiny_file(extra_metadata=tiny_vocabulary(merges=("t0t1",))), "format",
     "tokenizer.ggml.merges[0] 't0t1'"),
    ("tokenizer_bos_out_of_range.gguf", lambda: tiny_file(extra_metadata=tiny_vocabulary(extra=[
        ("tokenizer.ggml.bos_token_id", gf.U32, 99)])), "format", "tokenizer.ggml.bos_token_id"),
]


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "tests/data"
    out = os.path.join(root, "gguf", "models")
    os.makedirs(out, exist_ok=True)
    prompts, _ = lm.make_prompts()
    prompt = prompts[0]
    hf_format.write_json(os.path.join(out, "prompt.json"), {"ids": prompt})
    refused = os.path.join(out, "refused")
    os.makedirs(refused, exist_ok=True)
    with open(os.path.join(refused, "expected.tsv"), "w") as manifest:
        for name, make, kind, words in REFUSED:
            with open(os.path.join(refused, name), "wb") as f:
                f.write(make())
            manifest.write(f"{name}\t{kind}\t{words}\n")
    tokenization = {"texts": TEXTS, "ids": {}}
    for model_spec, kinds in MODELS:
        encode = vocabulary(model_spec)[1]
        tokenization["ids"][model_spec["name"]] = [encode(t) for t in TEXTS]
        for kind in kinds:
            largest = write_model(model_spec, kind, prompt, out)
            print(f"{model_spec['name']} {kind}: largest |logit| {largest:.2f}")
    hf_format.write_json(os.path.join(out, "tokenization.json"), tokenization)


if __name__ == "__main__":
    main()
