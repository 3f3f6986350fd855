#!/usr/bin/python3
"""PyTorch reference for anvil's decoder-only language models: GPT-2, Llama (rope_scaling llama3, linear,
dynamic), Qwen2, Qwen3 and Mistral, with seeded random weights in Hugging Face naming.

The models are plain-PyTorch ports written from Hugging Face's modeling_gpt2.py (GPT2LMHeadModel: Conv1D weights
[in, out], fused c_attn, learned wpe, gelu_new, lm_head tied to wte), modeling_llama.py (RMSNorm, rotate_half RoPE,
GQA via repeat_kv, SwiGLU), modeling_qwen2.py (q/k/v biases), modeling_qwen3.py (head_dim from the config, q_norm /
k_norm RMSNorm over head_dim before RoPE), modeling_mistral.py (sliding window: key k is visible from query q iff
0 <= q - k < sliding_window) and modeling_rope_utils.py (rope_scaling linear, dynamic, llama3). Each model has a
full-sequence forward (no cache) and an incremental decoder with a KV cache (post-RoPE keys; with a sliding window
the cache keeps only the last window - 1 entries, so the window is enforced a second, independent way); the
generator asserts that both agree, in every model, for the prompt, for a prompt split in two chunks, and along the
whole greedy path. Everything is computed in float64 on the stored (rounded) weights.

Writes tests/data/decoder_lms/<name>/ (or under --out DIR) for name in gpt2, llama, llama_linear, llama_dynamic,
qwen2, qwen3, mistral:

  config.json, generation_config.json   HF configs (model_type, architectures, bos/eos ids, torch_dtype)
  model.safetensors                     weights in HF naming and the stored dtype (tied lm_head not stored)
  tokenizer.json, tokenizer_config.json one byte-level BPE shared by every model: 256 byte tokens, 61 merges learned
                                        here from CORPUS, specials <|endoftext|> 317, <|im_start|> 318,
                                        <|im_end|> 319 (vocab 320); a ChatML chat_template
  logits.npy                            float32 [S, V]: every position's logits for prompts[logits_prompt], from ONE
                                        forward of the whole prompt
  expected.json                         prompts (8, lengths 3..21, ids < 317), logits_prompt, greedy (12 new tokens
                                        each, from the incremental decoder: the prompt in one call, then one token
                                        per call), min_margin (smallest top1 - top2 logit gap along each greedy
                                        path), min_margin_relative (the same over the logit row's max - min),
                                        max_abs_activation, chat (a ChatML conversation rendered and tokenized
                                        here, with its greedy continuation), notes; llama also prompts_long (13
                                        tokens + 24 greedy tokens: a context ladder {16, 32, 64} is crossed twice)

Seeds were chosen (with --search) so that every greedy path is robust: relative margin > 1e-2, no special token
(>= 317) is ever picked, activations stay below 1e4, and a float16 emulation (every op's output rounded to f16)
picks the same tokens. The normal run asserts all of it.

Rerun (deterministic, seeded): /usr/bin/python3 tools/reference/decoder_lms.py
Standard library + numpy + torch + regex (Debian's python3-regex, via tokenizer_goldens.py).
"""

import argparse
import copy
import math
import os
import sys

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_format  # noqa: E402
import tokenizer_goldens as tg  # noqa: E402

VOCAB = 320
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
FIRST_SPECIAL = 317

# A paragraph the tokenizer's merges are learned from.
CORPUS = [
    "The river runs past the old mill and the mill wheel turns all day.",
    "In the morning the baker sells bread to the people of the town, and in the evening",
    "the children run along the river to the bridge, where the water is deep and cold.",
    "There is a story in the town that the mill was built by a man who never slept;",
    "he worked the wheel at night and talked to the river, and the river talked back.",
]

CHATML_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                   "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
                   "{% endif %}")
CHAT_MESSAGES = [{"role": "system", "content": "You are terse."},
                 {"role": "user", "content": "Where is the mill?"}]

PROMPT_LENGTHS = [21, 3, 8, 13, 5, 17, 10, 19]
NEW_TOKENS = 12
LONG_PROMPT, LONG_NEW = 13, 24

# Per-op rounding hook: identity normally; x.half().double() for the float16 emulation.
ROUND = [lambda x: x]


def r(x):
    return ROUND[0](x)


class Stats:
    max_abs = 0.0


def track(x):
    Stats.max_abs = max(Stats.max_abs, float(x.abs().max()))
    return x


# ---------------------------------------------------------------------------------------------------------------
# Tokenizer

def build_tokenizer():
    """256 byte tokens (in bytes_to_unicode order), merges learned from CORPUS until 317 entries, 3 specials."""
    byte_encoder = tg.bytes_to_unicode()
    vocab = {}
    for b in range(256):
        vocab[byte_encoder[b]] = len(vocab)
    merges = []
    for a, b in tg.learn_merges(CORPUS, 200):
        if len(vocab) == FIRST_SPECIAL:
            break
        if a + b in vocab:
            continue
        vocab[a + b] = len(vocab)
        merges.append((a, b))
    assert len(vocab) == FIRST_SPECIAL, len(vocab)
    for token in SPECIALS:
        vocab[token] = len(vocab)
    document = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": vocab[t], "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for t in SPECIALS],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [f"{a} {b}" for a, b in merges]},
    }
    return document, tg.Gpt2Encoder(vocab, merges, specials=SPECIALS)


def render_chatml(messages, add_generation_prompt=True):
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")


# ---------------------------------------------------------------------------------------------------------------
# RoPE (modeling_rope_utils.py), in float64

def rope_inv_freq(c, seq_len=None):
    """inv_freq for the config's rope_scaling; `seq_len` is the dynamic variant's current length."""
    dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    base = float(c.get("rope_theta", 10000.0))
    scaling = c.get("rope_scaling") or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    exponents = torch.arange(0, dim, 2, dtype=torch.float64) / dim
    if kind == "dynamic":
        max_pos = c["max_position_embeddings"]
        factor = scaling["factor"]
        seq_len = seq_len if seq_len is not None and seq_len > max_pos else max_pos
        base = base * ((factor * seq_len / max_pos) - (factor - 1)) ** (dim / (dim - 2))
    inv_freq = 1.0 / (base ** exponents)
    if kind == "linear":
        inv_freq = inv_freq / scaling["factor"]
    elif kind == "llama3":
        factor = scaling["factor"]
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old / low, old / high
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
        inv_freq = torch.where(medium, smoothed, scaled)
    elif kind not in ("default", "dynamic"):
        raise ValueError(kind)
    return inv_freq


def rope_tables(c, positions, seq_lens):
    """cos, sin [S, D] for each position, position i rotated with inv_freq(seq_lens[i])."""
    rows = []
    for p, n in zip(positions, seq_lens):
        freqs = p * rope_inv_freq(c, n)
        rows.append(torch.cat((freqs, freqs)))
    emb = torch.stack(rows)
    return emb.cos(), emb.sin()


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x, cos, sin):
    return r(x * cos + rotate_half(x) * sin)


# ---------------------------------------------------------------------------------------------------------------
# Attention shared by both families: q [1, H, S, D], keys/values [1, Hkv, T, D], query/key absolute positions.

def attend(q, k, v, q_pos, k_pos, window=None):
    groups = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(groups, dim=1)
    v = v.repeat_interleave(groups, dim=1)
    scores = r(torch.matmul(q, k.transpose(2, 3)) / math.sqrt(q.shape[-1]))
    distance = torch.tensor(q_pos)[:, None] - torch.tensor(k_pos)[None, :]
    visible = distance >= 0
    if window:
        visible &= distance < window
    scores = track(scores).masked_fill(~visible, float("-inf"))
    out = r(torch.matmul(r(torch.softmax(scores, dim=-1)), v))
    return out.transpose(1, 2).reshape(1, q.shape[2], -1)


class Cache:
    """Per layer: post-RoPE keys, values and their positions."""

    def __init__(self, layers, window=None):
        self.k, self.v, self.pos = [None] * layers, [None] * layers, [[] for _ in range(layers)]
        self.window = window

    def extend(self, i, k, v, positions):
        if self.k[i] is not None and self.window:  # a query never sees further back than window - 1 keys
            keep = self.window - 1
            self.k[i], self.v[i], self.pos[i] = self.k[i][:, :, -keep:], self.v[i][:, :, -keep:], self.pos[i][-keep:]
        if self.k[i] is None:
            self.k[i], self.v[i], self.pos[i] = k, v, list(positions)
        else:
            self.k[i] = torch.cat((self.k[i], k), dim=2)
            self.v[i] = torch.cat((self.v[i], v), dim=2)
            self.pos[i] = self.pos[i] + list(positions)
        return self.k[i], self.v[i], self.pos[i]


# ---------------------------------------------------------------------------------------------------------------
# Llama, Qwen2, Qwen3, Mistral (modeling_llama.py and its relatives)

class RMSNorm(nn.Module):
    def __init__(self, size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        return r(self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)))


class LlamaAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads, self.kv_heads = c["num_attention_heads"], c["num_key_value_heads"]
        self.head_dim = c.get("head_dim") or c["hidden_size"] // self.heads
        bias = c.get("attention_bias", False)
        hidden = c["hidden_size"]
        self.q_proj = nn.Linear(hidden, self.heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.heads * self.head_dim, hidden, bias=False)
        if c["model_type"] == "qwen3":
            self.q_norm = RMSNorm(self.head_dim, c["rms_norm_eps"])
            self.k_norm = RMSNorm(self.head_dim, c["rms_norm_eps"])

    def forward(self, x, cos, sin, positions, cache, layer, window):
        s = x.shape[1]
        q = r(self.q_proj(x)).view(1, s, self.heads, self.head_dim)
        k = r(self.k_proj(x)).view(1, s, self.kv_heads, self.head_dim)
        v = r(self.v_proj(x)).view(1, s, self.kv_heads, self.head_dim).transpose(1, 2)
        if hasattr(self, "q_norm"):
            q, k = self.q_norm(q), self.k_norm(k)
        q = apply_rope(q.transpose(1, 2), cos, sin)
        k = apply_rope(k.transpose(1, 2), cos, sin)
        k_pos = positions
        if cache is not None:
            k, v, k_pos = cache.extend(layer, k, v, positions)
        return r(self.o_proj(attend(q, k, v, positions, k_pos, window)))


class LlamaMLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c["hidden_size"], c["intermediate_size"], bias=False)
        self.up_proj = nn.Linear(c["hidden_size"], c["intermediate_size"], bias=False)
        self.down_proj = nn.Linear(c["intermediate_size"], c["hidden_size"], bias=False)

    def forward(self, x):
        gate = r(self.gate_proj(x))
        inner = track(r(r(gate * torch.sigmoid(gate)) * r(self.up_proj(x))))
        return r(self.down_proj(inner))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = LlamaAttention(c)
        self.mlp = LlamaMLP(c)
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])

    def forward(self, x, cos, sin, positions, cache, layer, window):
        x = track(r(x + self.self_attn(self.input_layernorm(x), cos, sin, positions, cache, layer, window)))
        return track(r(x + self.mlp(self.post_attention_layernorm(x))))


class LlamaModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([LlamaDecoderLayer(c) for _ in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class LlamaForCausalLM(nn.Module):
    """Also Qwen2ForCausalLM, Qwen3ForCausalLM and MistralForCausalLM: the differences are config switches."""

    def __init__(self, c):
        super().__init__()
        self.c = c
        self.model = LlamaModel(c)
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        window = c.get("sliding_window") if c["model_type"] == "mistral" else None
        self.window = window if window else None

    def tied(self):
        return self.c.get("tie_word_embeddings", False)

    def forward(self, ids, positions, seq_lens, cache=None):
        """ids: list of new tokens at `positions`; seq_lens: per position, the dynamic rope's length."""
        cos, sin = rope_tables(self.c, positions, seq_lens)
        x = self.model.embed_tokens(torch.tensor([ids]))
        for i, layer in enumerate(self.model.layers):
            x = layer(x, cos, sin, positions, cache, i, self.window)
        x = self.model.norm(x)
        weight = self.model.embed_tokens.weight if self.tied() else self.lm_head.weight
        return track(r(x @ weight.T))[0]


# ---------------------------------------------------------------------------------------------------------------
# GPT-2 (modeling_gpt2.py)

class Conv1D(nn.Module):
    """y = x @ weight + bias with weight [in, out]."""

    def __init__(self, n_out, n_in):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return r(x @ self.weight + self.bias)


def gelu_new(x):
    return r(0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0)))))


class GPT2Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads, self.embed = c["n_head"], c["n_embd"]
        self.c_attn = Conv1D(3 * self.embed, self.embed)
        self.c_proj = Conv1D(self.embed, self.embed)

    def forward(self, x, positions, cache, layer):
        s, d = x.shape[1], self.embed // self.heads
        q, k, v = (t.view(1, s, self.heads, d).transpose(1, 2) for t in self.c_attn(x).split(self.embed, dim=2))
        k_pos = positions
        if cache is not None:
            k, v, k_pos = cache.extend(layer, k, v, positions)
        return self.c_proj(attend(q, k, v, positions, k_pos))


class GPT2MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        inner = c.get("n_inner") or 4 * c["n_embd"]
        self.c_fc = Conv1D(inner, c["n_embd"])
        self.c_proj = Conv1D(c["n_embd"], inner)

    def forward(self, x):
        return self.c_proj(track(gelu_new(self.c_fc(x))))


class GPT2Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        eps = c["layer_norm_epsilon"]
        self.ln_1 = nn.LayerNorm(c["n_embd"], eps=eps)
        self.attn = GPT2Attention(c)
        self.ln_2 = nn.LayerNorm(c["n_embd"], eps=eps)
        self.mlp = GPT2MLP(c)

    def forward(self, x, positions, cache, layer):
        x = track(r(x + self.attn(r(self.ln_1(x)), positions, cache, layer)))
        return track(r(x + self.mlp(r(self.ln_2(x)))))


class GPT2Model(nn.Module):
    """GPT2Model's names (wte, wpe, h.{i}, ln_f): what openai-community/gpt2's model.safetensors holds."""

    def __init__(self, c):
        super().__init__()
        self.c = c
        self.wte = nn.Embedding(c["vocab_size"], c["n_embd"])
        self.wpe = nn.Embedding(c["n_positions"], c["n_embd"])
        self.h = nn.ModuleList([GPT2Block(c) for _ in range(c["n_layer"])])
        self.ln_f = nn.LayerNorm(c["n_embd"], eps=c["layer_norm_epsilon"])
        self.window = None

    def tied(self):
        return True

    def forward(self, ids, positions, seq_lens, cache=None):
        x = r(self.wte(torch.tensor([ids])) + self.wpe(torch.tensor([positions])))
        for i, block in enumerate(self.h):
            x = block(x, positions, cache, i)
        return track(r(r(self.ln_f(x)) @ self.wte.weight.T))[0]


# ---------------------------------------------------------------------------------------------------------------
# Weights

def randomize(model, generator, dtype, spec):
    """Linear / Conv1D weights N(0, 1/fan_in) (q and k projections x spec['qk_scale'] so attention is peaked
    enough for positions and windows to matter; o_proj / down_proj / c_proj x spec['out_scale']), biases
    N(0, 0.1^2), norm weights 1 + N(0, 0.1^2) and LayerNorm biases N(0, 0.1^2), token embeddings N(0, 1), GPT-2's
    wpe N(0, 0.5^2); then structure() (the token map). Each value is rounded to `dtype`."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            shape = p.shape
            if "norm" in name or "ln_" in name:
                values = torch.randn(shape, generator=generator) * 0.1 + (1.0 if leaf == "weight" else 0.0)
            elif name.endswith("wpe.weight"):
                values = torch.randn(shape, generator=generator) * 0.5
            elif name.endswith("wte.weight") or name.endswith("embed_tokens.weight"):
                values = torch.randn(shape, generator=generator)
            elif leaf == "bias":
                values = torch.randn(shape, generator=generator) * 0.1
            else:
                fan_in = shape[0] if isinstance(model, GPT2Model) else shape[1]  # Conv1D stores [in, out]
                values = torch.randn(shape, generator=generator) / math.sqrt(fan_in)
                if any(t in name for t in ("q_proj", "k_proj")):
                    values *= spec["qk_scale"]
                if any(t in name for t in ("o_proj", "down_proj", "c_proj")):
                    values *= spec["out_scale"]
            p.copy_(values)
        if isinstance(model, GPT2Model):
            attn_scale = torch.ones(3 * model.c["n_embd"])
            attn_scale[:2 * model.c["n_embd"]] = spec["qk_scale"]
            for block in model.h:
                block.attn.c_attn.weight.mul_(attn_scale)
        structure(model, generator, spec)
        for p in model.parameters():
            p.copy_(p.to(dtype).to(torch.float64))


SLOT_CONSTANT = 3.0  # embedding coordinate 0: the same for every token (a bias the MLP can use)


def slots(hidden):
    n = (hidden - 1) // 2
    return slice(1, 1 + n), slice(1 + n, 1 + 2 * n), n


def structure(model, generator, spec):
    """Random Gaussian logits have top-2 gaps of ~1% of their range too often for a robust greedy path, so the
    weights carry a token-to-token map: a random permutation pi of the 317 ordinary tokens (specials map among
    themselves). Embedding row t = [C, a_t, a_pi(t), noise] with a_t ~ N(0, 1). Untied: lm_head row u reads the
    second slot, [0, 0, beta a_u, 0] + N(0, 0.02^2) (logit of pi(t) ~ beta |a|^2 above the rest). Tied: the last
    layer's MLP is made (nearly) linear, x + M x_normed moving a_pi(t) into the first slot and cancelling the second
    (GPT-2: a large c_fc bias puts gelu in its linear range; SwiGLU: gate and up read the constant coordinate, and
    down_proj annihilates the constant part). Attention and the other layers stay random: they perturb the logits
    with the context."""
    c = model.c
    vocab, hidden = c["vocab_size"], c.get("hidden_size", c.get("n_embd"))
    slot_a, slot_b, n = slots(hidden)
    perm = torch.cat((torch.randperm(FIRST_SPECIAL, generator=generator),
                      FIRST_SPECIAL + torch.randperm(vocab - FIRST_SPECIAL, generator=generator)))
    a = torch.randn(vocab, n, generator=generator, dtype=torch.float64)
    gpt2 = isinstance(model, GPT2Model)
    embed = model.wte.weight if gpt2 else model.model.embed_tokens.weight
    embed[:, 0] = SLOT_CONSTANT
    embed[:, slot_a] = a
    embed[:, slot_b] = a[perm]
    embed[:, 1 + 2 * n:] *= 0.3
    if not model.tied():
        head = model.lm_head.weight
        head.copy_(torch.randn(head.shape, generator=generator, dtype=torch.float64) * 0.02)
        head[:, slot_b] += spec["beta"] * a
        return
    # The map on the normalized input x: first slot <- kappa * second - gamma * first (rank n). An MLP computes it
    # exactly from pairs of inner units with opposite inputs, act(z) - act(-z) = z for silu and gelu.
    p = torch.zeros(n, hidden, dtype=torch.float64)
    p[:, slot_a] = -spec["gamma"] * torch.eye(n, dtype=torch.float64)
    p[:, slot_b] = spec["kappa"] * torch.eye(n, dtype=torch.float64)
    inner = c.get("n_inner") or c.get("intermediate_size")
    pairs = inner // 2
    q = torch.randn(pairs, n, generator=generator, dtype=torch.float64) / math.sqrt(n)
    g_half = q @ p
    place = torch.zeros(hidden, n, dtype=torch.float64)
    place[slot_a, :] = torch.eye(n, dtype=torch.float64)
    if gpt2:
        mlp = model.h[-1].mlp
        d_half = place @ torch.linalg.pinv(q) * residual_rms(model, model.h[-1].ln_2)  # LN divides by it
        w1 = torch.zeros(hidden, inner, dtype=torch.float64)
        w1[:, :pairs], w1[:, pairs:2 * pairs] = g_half.T, -g_half.T
        b = mlp.c_fc.bias.clone()
        b[pairs:2 * pairs] = -b[:pairs]
        w2 = torch.zeros(inner, hidden, dtype=torch.float64)
        w2[:pairs], w2[pairs:2 * pairs] = d_half.T, -d_half.T
        mlp.c_fc.weight.copy_(w1)
        mlp.c_fc.bias.copy_(b)
        mlp.c_proj.weight.copy_(w2)
        return
    layer = model.model.layers[-1]
    # The MLP sees x / rms(x) and its constant coordinate C w0 / rms(x): output (C w0 / rms^2) d u0 q p x.
    x0 = SLOT_CONSTANT * float(layer.post_attention_layernorm.weight[0]) / residual_rms(
        model, layer.post_attention_layernorm) ** 2
    u0 = torch.rand(pairs, generator=generator, dtype=torch.float64) + 0.5
    gate = torch.zeros(inner, hidden, dtype=torch.float64)
    up = torch.zeros(inner, hidden, dtype=torch.float64)
    gate[:pairs], gate[pairs:2 * pairs] = g_half, -g_half
    up[:pairs, 0], up[pairs:2 * pairs, 0] = u0, -u0
    d_half = place @ torch.linalg.pinv(u0[:, None] * q) / x0
    down = torch.zeros(hidden, inner, dtype=torch.float64)
    down[:, :pairs], down[:, pairs:2 * pairs] = d_half, d_half
    layer.mlp.gate_proj.weight.copy_(gate)
    layer.mlp.up_proj.weight.copy_(up)
    layer.mlp.down_proj.weight.copy_(down)


def residual_rms(model, norm):
    """The typical size of the residual stream entering `norm` (measured on a prompt; only scales the map)."""
    seen = []
    handle = norm.register_forward_hook(lambda module, inputs, output: seen.append(inputs[0]))
    prompt = make_prompts()[0][0]
    with torch.no_grad():
        model(prompt, list(range(len(prompt))), [len(prompt)] * len(prompt))
    handle.remove()
    return float(seen[0].pow(2).mean().sqrt())


def stored_tensors(model, dtype):
    tensors = {}
    for name, p in model.state_dict().items():
        if name == "lm_head.weight" and model.tied():
            continue  # HF does not save a tied lm_head
        tensors[name] = p.to(dtype)
    return tensors


# ---------------------------------------------------------------------------------------------------------------
# Decoding

def dynamic(c):
    s = c.get("rope_scaling") or {}
    return s.get("rope_type", s.get("type")) == "dynamic"


def full_logits(model, ids, prompt_len=None):
    """One forward over ids (positions 0..n-1). Dynamic rope: every position uses seq_len = n, unless prompt_len
    is given: then position i uses max(prompt_len, i + 1), what incremental decoding gives (the cached keys keep
    the rotation of the call that computed them)."""
    n = len(ids)
    seq_lens = [n] * n if prompt_len is None else [max(prompt_len, i + 1) for i in range(n)]
    with torch.no_grad():
        return model(ids, list(range(n)), seq_lens)


def greedy(model, prompt, new_tokens, chunks=None):
    """Incremental decoding: the prompt in one call (or in `chunks`), then one token per call; in each call every
    position uses seq_len = largest position + 1 (the dynamic rope). Returns tokens and each step's logits."""
    cache = Cache(len(model.h) if isinstance(model, GPT2Model) else len(model.model.layers), model.window)
    bounds = chunks or [len(prompt)]
    start, rows = 0, None
    with torch.no_grad():
        for end in bounds:
            positions = list(range(start, end))
            rows = model(prompt[start:end], positions, [end] * len(positions), cache)
            start = end
        tokens, steps = [], [rows[-1]]
        for _ in range(new_tokens):
            token = int(torch.argmax(steps[-1]))
            tokens.append(token)
            if len(tokens) == new_tokens:
                break
            position = len(prompt) + len(tokens) - 1
            steps.append(model([token], [position], [position + 1], cache)[-1])
    return tokens, steps, rows


def margins(steps):
    absolute, relative = math.inf, math.inf
    for row in steps:
        top = torch.topk(row, 2).values
        gap = float(top[0] - top[1])
        absolute = min(absolute, gap)
        relative = min(relative, gap / float(row.max() - row.min()))
    return absolute, relative


def check_reference(model, prompt, tokens, steps, prefill_rows, name):
    """The incremental decoder against the full forward (and a two-chunk prefill); raises on disagreement."""
    full = full_logits(model, prompt + tokens[:-1], len(prompt) if dynamic(model.c) else None)
    inc = torch.stack(steps)
    err = float((full[len(prompt) - 1:] - inc).abs().max())
    assert err < 1e-9, f"{name}: cached decoding differs from the full forward by {err}"
    err = float((full_logits(model, prompt) - prefill_rows).abs().max())
    assert err < 1e-9, f"{name}: prefill differs from the full forward by {err}"
    if len(prompt) > 2 and not dynamic(model.c):
        split = len(prompt) * 2 // 3
        t2, s2, _ = greedy(model, prompt, len(tokens), chunks=[split, len(prompt)])
        err = float((torch.stack(s2) - inc).abs().max())
        assert t2 == tokens and err < 1e-9, f"{name}: chunked prefill differs by {err}"


def evaluate(model, prompts, new_counts, name):
    """Greedy paths, margins, checks; returns (results, ok, why)."""
    results = []
    Stats.max_abs = 0.0
    for prompt, count in zip(prompts, new_counts):
        tokens, steps, rows = greedy(model, prompt, count)
        check_reference(model, prompt, tokens, steps, rows, name)
        absolute, relative = margins(steps)
        results.append({"tokens": tokens, "margin": absolute, "relative": relative})
    max_abs = Stats.max_abs
    # float16 emulation: the same greedy tokens with every op's output rounded to f16.
    half = copy.deepcopy(model)
    with torch.no_grad():
        for p in half.parameters():
            p.copy_(p.half().double())
    ROUND[0] = lambda x: x.half().double()
    try:
        fp16 = [greedy(half, p, n)[0] for p, n in zip(prompts, new_counts)]
    finally:
        ROUND[0] = lambda x: x
    why = []
    for i, res in enumerate(results):
        if res["relative"] <= 1e-2:
            why.append(f"prompt {i}: relative margin {res['relative']:.4f}")
        if any(t >= FIRST_SPECIAL for t in res["tokens"]):
            why.append(f"prompt {i}: picks a special token")
        if fp16[i] != res["tokens"]:
            why.append(f"prompt {i}: float16 emulation differs")
        if len(set(res["tokens"])) < 3:
            why.append(f"prompt {i}: degenerate continuation {res['tokens']}")
    if max_abs >= 1e4:
        why.append(f"activation {max_abs}")
    return results, max_abs, why


# ---------------------------------------------------------------------------------------------------------------
# The fixtures

def llama_config(model_type, **extra):
    c = {"model_type": model_type, "vocab_size": VOCAB, "hidden_size": 48, "intermediate_size": 88,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_act": "silu",
         "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "rope_scaling": None,
         "attention_bias": False, "attention_dropout": 0.0, "tie_word_embeddings": False,
         "bos_token_id": 317, "eos_token_id": 317, "use_cache": True, "initializer_range": 0.02}
    c.update(extra)
    return c


def specs():
    arch = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
            "mistral": "MistralForCausalLM"}
    result = []

    def add(name, config, dtype, seed, eos_list, qk_scale=1.5, out_scale=0.2, beta=2.5, kappa=4.0, gamma=1.5):
        if config["model_type"] != "gpt2":
            config["architectures"] = [arch[config["model_type"]]]
        config["torch_dtype"] = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}[dtype]
        result.append({"name": name, "config": config, "dtype": dtype, "seed": seed, "eos": eos_list,
                       "qk_scale": qk_scale, "out_scale": out_scale, "beta": beta, "kappa": kappa, "gamma": gamma})

    add("gpt2", {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": VOCAB, "n_embd": 48,
                 "n_layer": 2, "n_head": 4, "n_inner": 88, "n_positions": 64, "n_ctx": 64,
                 "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "resid_pdrop": 0.0,
                 "embd_pdrop": 0.0, "attn_pdrop": 0.0, "scale_attn_weights": True,
                 "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
                 "tie_word_embeddings": True, "bos_token_id": 317, "eos_token_id": 317},
        torch.float32, SEEDS["gpt2"], [317], kappa=6.0, out_scale=0.15)
    add("llama", llama_config("llama", rope_theta=10000.0, rope_scaling={
        "rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 32}), torch.float32, SEEDS["llama"], [317, 319])
    add("llama_linear", llama_config("llama", num_key_value_heads=4, tie_word_embeddings=True,
                                     rope_scaling={"type": "linear", "factor": 2.0}),
        torch.float32, SEEDS["llama_linear"], [317])
    add("llama_dynamic", llama_config("llama", max_position_embeddings=16,
                                      rope_scaling={"rope_type": "dynamic", "factor": 2.0}),
        torch.bfloat16, SEEDS["llama_dynamic"], [317])
    add("qwen2", llama_config("qwen2", num_key_value_heads=1, attention_bias=True, tie_word_embeddings=True,
                              rope_theta=1000000.0, use_sliding_window=False, sliding_window=None,
                              max_window_layers=2, bos_token_id=317, eos_token_id=319),
        torch.float32, SEEDS["qwen2"], [319, 317])
    add("qwen3", llama_config("qwen3", hidden_size=40, head_dim=16, num_hidden_layers=3, tie_word_embeddings=True,
                              rope_theta=1000000.0, use_sliding_window=False, sliding_window=None,
                              max_window_layers=3, bos_token_id=317, eos_token_id=319),
        torch.float16, SEEDS["qwen3"], [319, 317])
    add("mistral", llama_config("mistral", num_attention_heads=6, sliding_window=6, rope_theta=10000.0),
        torch.float32, SEEDS["mistral"], [317])
    return result


# Found with --search 12 (gpt2: 20); the first passing seed of each.
SEEDS = {"gpt2": 5, "llama": 2, "llama_linear": 6, "llama_dynamic": 3, "qwen2": 4, "qwen3": 4, "mistral": 1}


def make_prompts():
    generator = hf_format.seeded_generator(6006)
    prompts = [torch.randint(0, FIRST_SPECIAL, (n,), generator=generator).tolist() for n in PROMPT_LENGTHS]
    long_prompt = torch.randint(0, FIRST_SPECIAL, (LONG_PROMPT,), generator=generator).tolist()
    return prompts, long_prompt


def build_model(spec, seed):
    torch.manual_seed(0)
    c = spec["config"]
    model = (GPT2Model(c) if c["model_type"] == "gpt2" else LlamaForCausalLM(c)).double()
    randomize(model, hf_format.seeded_generator(seed), spec["dtype"], spec)
    return model


def sequences(spec, encoder):
    prompts, long_prompt = make_prompts()
    chat_ids = encoder.ids(render_chatml(CHAT_MESSAGES))
    seqs = prompts + [chat_ids]
    counts = [NEW_TOKENS] * len(seqs)
    if spec["name"] == "llama":
        seqs.append(long_prompt)
        counts.append(LONG_NEW)
    return prompts, chat_ids, long_prompt, seqs, counts


def notes(spec):
    c = spec["config"]
    text = ["Reference: tools/reference/decoder_lms.py, plain PyTorch ported from the Hugging Face sources, float64 "
            "on the stored weights. Greedy = incremental decoding with a KV cache: the whole prompt in one call, "
            "then one token per call; positions start at 0; ties never occur (min_margin > 0).",
            "All 8 prompts and the chat ids never lead greedy decoding to a special token (ids >= 317)."]
    if c["model_type"] == "gpt2":
        text.append("Tensor names are GPT2Model's (wte, wpe, h.N..., ln_f) without the 'transformer.' prefix, as in "
                    "openai-community/gpt2; lm_head is tied to wte and not stored.")
    if c.get("tie_word_embeddings") and c["model_type"] != "gpt2":
        text.append("tie_word_embeddings: lm_head.weight is not stored; logits use model.embed_tokens.weight.")
    if c["model_type"] == "mistral":
        text.append("sliding_window 6: key k is visible from query q iff 0 <= q - k < 6.")
    if dynamic(c):
        text.append("rope_scaling dynamic (factor 2, max_position_embeddings 16): logits.npy is ONE forward of the "
                    "21-token prompt, every position rotated with seq_len = 21. Greedy follows HF's "
                    "_dynamic_frequency_update on a fresh model: the prompt call uses seq_len = len(prompt) for all "
                    "its positions; each later one-token call at position p uses seq_len = p + 1 for its query and "
                    "its new key; cached keys keep the rotation of the call that computed them (never re-rotated). "
                    "seq_len <= 16 means the unscaled base.")
    return text


def fixture(spec, out, tokenizer_doc, encoder, write=True):
    c = spec["config"]
    model = build_model(spec, spec["seed"])
    prompts, chat_ids, long_prompt, seqs, counts = sequences(spec, encoder)
    results, max_abs, why = evaluate(model, seqs, counts, spec["name"])
    if not write:
        return results, max_abs, why
    assert not why, f"{spec['name']} (seed {spec['seed']}): " + "; ".join(why)
    folder = hf_format.make_output_dir(os.path.join(out, spec["name"]))
    hf_format.write_json(os.path.join(folder, "config.json"), c)
    generation = {"bos_token_id": c["bos_token_id"],
                  "eos_token_id": spec["eos"] if len(spec["eos"]) > 1 else spec["eos"][0], "do_sample": False}
    hf_format.write_json(os.path.join(folder, "generation_config.json"), generation)
    hf_format.write_safetensors(os.path.join(folder, "model.safetensors"), stored_tensors(model, spec["dtype"]))
    hf_format.write_json(os.path.join(folder, "tokenizer.json"), tokenizer_doc)
    eos_token = "<|im_end|>" if c["eos_token_id"] == 319 else "<|endoftext|>"
    hf_format.write_json(os.path.join(folder, "tokenizer_config.json"), {
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|endoftext|>", "eos_token": eos_token,
        "pad_token": "<|endoftext|>", "unk_token": None, "add_bos_token": False, "add_prefix_space": False,
        "model_max_length": c.get("max_position_embeddings", c.get("n_positions")), "chat_template": CHATML_TEMPLATE,
        "clean_up_tokenization_spaces": False})
    logits = full_logits(model, prompts[0])
    hf_format.save_npy(os.path.join(folder, "logits.npy"), logits.numpy())
    n = len(prompts)
    expected = {"prompts": prompts, "logits_prompt": 0, "greedy": [res["tokens"] for res in results[:n]],
                "min_margin": [round(res["margin"], 6) for res in results[:n]],
                "min_margin_relative": [round(res["relative"], 6) for res in results[:n]],
                "max_abs_activation": round(max_abs, 3),
                "chat": {"messages": CHAT_MESSAGES, "add_generation_prompt": True,
                         "text": render_chatml(CHAT_MESSAGES), "ids": chat_ids, "greedy": results[n]["tokens"],
                         "min_margin": round(results[n]["margin"], 6),
                         "min_margin_relative": round(results[n]["relative"], 6)},
                "notes": notes(spec)}
    if spec["name"] == "llama":
        expected["prompts_long"] = {"prompt": long_prompt, "greedy": results[n + 1]["tokens"],
                                    "min_margin": round(results[n + 1]["margin"], 6),
                                    "min_margin_relative": round(results[n + 1]["relative"], 6)}
    hf_format.write_json(os.path.join(folder, "expected.json"), expected)
    return results, max_abs, why


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--out", default=os.path.join(here, "..", "..", "tests", "data", "decoder_lms"))
    parser.add_argument("--search", type=int, default=0, help="try seeds 1..N per model and print the passing ones")
    parser.add_argument("--only", default="", help="comma-separated model names")
    parser.add_argument("--tune", default="", help="override spec values, e.g. kappa=4,out_scale=0.2")
    args = parser.parse_args()
    out = os.path.normpath(args.out)
    tokenizer_doc, encoder = build_tokenizer()
    only = set(filter(None, args.only.split(",")))
    for spec in specs():
        if only and spec["name"] not in only:
            continue
        for item in filter(None, args.tune.split(",")):
            key, value = item.split("=")
            spec[key] = float(value)
        if args.search:
            good = []
            for seed in range(1, args.search + 1):
                spec["seed"] = seed
                results, max_abs, why = fixture(spec, out, tokenizer_doc, encoder, write=False)
                worst = min(res["relative"] for res in results)
                print(f"{spec['name']} seed {seed}: worst relative {worst:.4f} max_abs {max_abs:.1f} "
                      f"{'OK' if not why else why[:2]}", flush=True)
                if not why:
                    good.append(seed)
            print(spec["name"], "passing seeds:", good, flush=True)
            continue
        results, max_abs, _ = fixture(spec, out, tokenizer_doc, encoder)
        print(f"{spec['name']}: seed {spec['seed']}, min relative margin "
              f"{min(res['relative'] for res in results):.4f}, min margin {min(res['margin'] for res in results):.4f},"
              f" max |activation| {max_abs:.1f}")


if __name__ == "__main__":
    main()
