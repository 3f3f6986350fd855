#!/usr/bin/python3
"""Fixtures for CLIP: a tiny CLIP tokenizer with golden ids, and two tiny CLIPModel checkpoints in Hugging Face's
format with the texts, pixels and outputs an independent PyTorch implementation computes for them.

Tokenizer. A byte-level BPE in the layout transformers' CLIPConverter (convert_slow_tokenizer.py) writes to
tokenizer.json: NFC + Replace(\\s+ -> " ") + Lowercase; Split on CLIP's regex (behavior Removed, invert: the
matches are kept, the text between them dropped) then ByteLevel; a BPE model whose last symbol of each word carries
"</w>"; RobertaProcessing ([BOS] ids [EOS]); a ByteLevel decoder; the two specials as added tokens with
normalized true. The vocabulary is built as CLIP's slow tokenizer builds it: the 256 bytes_to_unicode characters
(in that dict's order), the same 256 with "</w>", one entry per merge, then <|startoftext|> and <|endoftext|>
(so EOS is the largest id). The merges are learned here, by plain BPE training on CORPUS.

The golden ids come from two encoders, neither of them anvil's:
  - HfClipTokenizer: Hugging Face `tokenizers` for exactly this tokenizer.json, written from its Rust sources
    (tokenizer/added_vocabulary.rs: tokens with normalized=true are matched in the *normalized* text, so
    "<|ENDOFTEXT|>" is the special token too; normalizers/{unicode,replace,utils}.rs: NFC, regex Replace, per-char
    Lowercase; pre_tokenizers/{split,byte_level}.rs; models/bpe/{model,word}.rs: end_of_word_suffix on the last
    char, lowest-rank merge first, leftmost among equals; processors/roberta.rs; utils/truncation.rs: the content
    is cut to max_length - 2, then BOS/EOS are added, as tokenizer(text, truncation=True, max_length=16) does);
  - openai_encode: openai CLIP's simple_tokenizer.py (whitespace_clean, text.lower(), its regex with IGNORECASE,
    bpe over tuple(token[:-1]) + (token[-1] + '</w>',)) and clip.tokenize's truncation. ftfy.fix_text is not
    available here and is left out (html.unescape is kept). Both must agree on every golden text except those
    listed in OPENAI_DIFFERS.

Models. A plain-PyTorch port of transformers' modeling_clip.py (CLIPModel, CLIPTextTransformer,
CLIPVisionTransformer, CLIPEncoderLayer, CLIPAttention, CLIPMLP, CLIPTextEmbeddings, CLIPVisionEmbeddings) with HF's
module names, so state_dict() gives the checkpoint's tensor names (the position_ids buffers are not stored). Pre-LN
layers, x + attn(layer_norm1(x)) then x + mlp(layer_norm2(x)); attention scale head_dim^-0.5; q/k/v/out_proj with
bias; quick_gelu = x * sigmoid(1.702 x), gelu = exact erf. Text: token + position embeddings, a causal mask and no
padding mask, final_layer_norm, pooled = the row of the first position where ids == text_config.eos_token_id, or,
when that id is 2 (configs from before the fix), the row at argmax(ids). Vision: a Conv2d patch embedding (no bias,
kernel = stride = patch_size), class_embedding prepended, position embeddings, pre_layrnorm (sic), the encoder;
pooled = post_layernorm(last_hidden_state[:, 0]). features = projection(pooled) (no bias), embeds = features /
||features||_2, logits_per_image = exp(logit_scale) * image_embeds @ text_embeds.T.

The text inputs are padded with the EOS id after the EOS (what CLIPProcessor(padding="max_length") gives, the pad
token being <|endoftext|>) and run with no attention mask, as HF runs them then; causal attention makes every row up
to the EOS, and so the pooled output, independent of that padding (checked here against each text run alone).

Writes
  tests/data/clip/tokenizer_goldens.json  {"max_length": 16, "cases": [{"text", "ids" (add_special_tokens, no
                                          truncation), "truncated" (truncation=True, max_length=16)}, ...]}
  tests/data/clip/<name>/ for name in
    clip         f32 weights. text: vocab 814, hidden 36, 3 heads, intermediate 52, 2 layers, 16 positions,
                 quick_gelu, eps 1e-5, bos/eos = the tokenizer's ids (812/813); vision: image 32, patch 8, hidden
                 40, 4 heads, intermediate 60, 2 layers, quick_gelu, eps 1e-5; projection_dim 24
    clip_legacy  bf16 weights. text_config eos_token_id 2 (legacy argmax pooling: the real EOS is the largest id),
                 gelu in both towers; text hidden 32, 2 heads, intermediate 40, 1 layer; vision image 28, patch 7,
                 hidden 24, 2 heads, intermediate 36, 1 layer, eps 1e-6; projection_dim 16; the sub-configs carry
                 no projection_dim of their own (CLIPModel reads the top-level one)
  each with
    config.json              CLIPConfig layout (text_config / vision_config nested)
    model.safetensors        the weights (logit_scale a 0-d tensor = 2.6592 + a small seeded perturbation)
    tokenizer.json, tokenizer_config.json, preprocessor_config.json (CLIPImageProcessor, size = image_size)
    texts.json               the 4 texts
    input_ids.npy            int32 [4, 16]: the golden ids, padded with EOS to 16 (truncated at 16)
    pixels.npy               f32 [2, 3, S, S], N(0, 1)
    text_features.npy        f32 [4, P]  get_text_features (unnormalised)
    image_features.npy       f32 [2, P]  get_image_features
    text_embeds.npy, image_embeds.npy    L2-normalised features
    logits_per_image.npy     f32 [2, 4]
    text_hidden.npy          f32 [4, 16, hidden]: the text tower's last hidden state after final_layer_norm, the
                             rows after the EOS included (what HF gives with no attention mask)
    image_hidden.npy         f32 [2, patches + 1, hidden]: the vision tower's last hidden state (before
                             post_layernorm)
All outputs are computed in float64 on exactly the stored (dtype-rounded) weights and the stored pixels, then
saved as f32. Self-checks: every safetensors file is read back with a reader of its own and compared with the
model's tensors; a float32 forward must agree with the float64 one to 1e-4; each text run alone (unpadded) must
give the padded batch's pooled features and hidden rows to 1e-10.

Weights (hf_format.randomize): Linear and Conv2d N(0, 1/fan_in), biases N(0, 0.05^2), LayerNorm weight
1 + N(0, 0.1^2) and bias N(0, 0.1^2), token and position embeddings N(0, 1), class_embedding N(0, 1); nothing zero.

Rerun (deterministic, seeded; ~5 s):  /usr/bin/python3 tools/reference/clip_fixtures.py  (needs python3-regex)
"""

import copy
import html
import json
import math
import os
import struct
import sys
import unicodedata

import numpy as np
import regex
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_format import make_output_dir, randomize, save_npy, seeded_generator, state_dict_as, write_json, \
    read_safetensors, write_safetensors  # noqa: E402
from llm_tokenizer_goldens import bytes_to_unicode  # noqa: E402
import bpe_training  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data", "clip")

# ---------------------------------------------------------------------------------------------------------------
# Tokenizer

BOS, EOS = "<|startoftext|>", "<|endoftext|>"
MAX_LENGTH = 16
MERGES = 300

CLIP_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"
OPENAI_PATTERN = r"<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"
GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"  # byte_level.rs

# CLIPConverter writes pre_tokenizers.ByteLevel(add_prefix_space=False), whose use_regex defaults to true: each
# Split piece is split again with GPT-2's regex. That never splits a piece CLIP's regex made (letter runs, single
# digits, contractions and runs of other non-space characters are each one GPT-2 match), which main() asserts by
# encoding every golden text both ways.
BYTE_LEVEL_USE_REGEX = True

NORMALIZER = {"type": "Sequence", "normalizers": [
    {"type": "NFC"},
    {"type": "Replace", "pattern": {"Regex": r"\s+"}, "content": " "},
    {"type": "Lowercase"}]}
PRE_TOKENIZER = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": CLIP_SPLIT}, "behavior": "Removed", "invert": True},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": BYTE_LEVEL_USE_REGEX}]}

CORPUS = [
    "a photo of a cat", "a photo of a dog", "a photo of two cats", "a photo of three dogs",
    "a close-up photo of a small cat", "a blurry photo of a large dog", "a black and white photo of a bird",
    "a painting of a horse in a field", "a drawing of a house on a hill", "a diagram of the parts of a flower",
    "a cropped photo of a red car", "a bright photo of the city at night", "a dark photo of the sea",
    "a photo of my dog playing in the garden", "the cat is sleeping on the sofa", "the dog is running on the beach",
    "there are two birds sitting on a tree", "a man riding a bicycle down the street",
    "a woman holding an umbrella in the rain", "children playing football in the park",
    "a plate of food with rice and vegetables", "a cup of coffee on a wooden table",
    "a train arriving at the station", "an airplane flying over the mountains", "a boat floating on the river",
    "It's a sunny day, isn't it?", "They're looking at the stars.", "We'll see the photos tomorrow!",
    "I've never seen such a beautiful sunset", "she'd like a picture of her cat", "the year 2024 was a good one",
    "photo number 7 of 10", "a photo of a cat and a dog together", "a low resolution photo of a truck",
    "a sketch of a person reading a book", "a good photo of the moon", "a photo of the small green frog",
    "a picture of a brown horse eating grass", "a photo of a yellow flower next to a stone wall",
    "an origami model of a bird", "a jpeg corrupted photo of a kitchen", "a tattoo of a snake on an arm",
    "a sculpture of a lion in front of a museum", "the ball is next to the brown dog in the grass",
    "a very small dog sitting on a chair", "a photo of a family having dinner together",
    "a rendering of a spaceship", "the clouds over the mountains look beautiful this morning",
]

TEXTS = [
    "a photo of a cat",
    "a photo of a dog.",
    "A PHOTO of   two\tDogs!!",
    "it's 2024, isn't it?",
    "they'll say we're fine",
    "naïve café",
    "nai\u0308ve cafe\u0301",            # decomposed: NFC composes it to the line above
    "ÉCOLE Ωmega",
    "emoji 🙂 and 日本語",
    "<|startoftext|>hello<|endoftext|>",
    "",
    "   ",
    "a photo of a very small brown dog sitting on the green grass next to a red ball in the park",
    "A <|ENDOFTEXT|> b",                  # the specials are normalized=true: matched after lower-casing
    "a photo of a cat<|endoftext|><|endoftext|>",
    "<|startoftext|>",
    "ΣΟΦΟΣ",                              # per-char lower-casing gives a non-final sigma at the end
    "fish &amp; chips",
    "pi is 3.14159, not 22/7",
    "\n line one\nline two \r\n",
    "WE'LL SEE: I'M SURE YOU'VE, HE'D",
    "the the the cat's cats'",
    "''quoted'' --- ... ?!",
]

# Texts on which openai's simple_tokenizer legitimately differs from the tokenizer.json pipeline:
OPENAI_DIFFERS = {
    "nai\u0308ve cafe\u0301": "no NFC without ftfy: the combining marks stay separate non-letter pieces",
    "ΣΟΦΟΣ": "str.lower() on the whole text gives a final sigma (ς); Rust lower-cases char by char (σ)",
    "fish &amp; chips": "basic_clean html-unescapes &amp; to &",
}


class HfClipTokenizer:
    """Hugging Face `tokenizers` semantics for the tokenizer.json documents this script writes."""

    def __init__(self, document):
        self.doc = document
        model = document["model"]
        assert model["type"] == "BPE" and model["dropout"] is None and not model["byte_fallback"]
        assert not model["fuse_unk"] and not model["ignore_merges"]
        self.vocab = model["vocab"]
        self.unk = model["unk_token"]
        self.prefix = model["continuing_subword_prefix"] or ""
        self.suffix = model["end_of_word_suffix"] or ""
        self.ranks = {}
        for rank, merge in enumerate(model["merges"]):
            a, b = merge.split(" ")
            merged = a + b[len(self.prefix):]
            assert a in self.vocab and b in self.vocab and merged in self.vocab, merge
            self.ranks[(a, b)] = rank
        self.raw_added, self.normalized_added = [], []
        for token in document["added_tokens"]:
            assert not token["lstrip"] and not token["rstrip"] and not token["single_word"]
            if token["normalized"]:  # matched as the normalizer turns its content (added_vocabulary.rs)
                self.normalized_added.append((self.normalize(document["normalizer"], token["content"]),
                                              token["id"]))
            else:
                self.raw_added.append((token["content"], token["id"]))

    @staticmethod
    def split_added(pieces, added):
        """Leftmost-longest matches of the added tokens in the str pieces; ints (token ids) pass through."""
        out = []
        for piece in pieces:
            if isinstance(piece, int):
                out.append(piece)
                continue
            pending, at = 0, 0
            while at < len(piece):
                best = None
                for content, token_id in added:
                    if content and piece.startswith(content, at) and (best is None or len(content) > len(best[0])):
                        best = (content, token_id)
                if best is None:
                    at += 1
                    continue
                if at > pending:
                    out.append(piece[pending:at])
                out.append(best[1])
                at += len(best[0])
                pending = at
            if pending < len(piece):
                out.append(piece[pending:])
        return out

    @classmethod
    def normalize(cls, n, text):
        if n is None:
            return text
        kind = n["type"]
        if kind == "Sequence":
            for stage in n["normalizers"]:
                text = cls.normalize(stage, text)
            return text
        if kind == "NFC":
            return unicodedata.normalize("NFC", text)
        if kind == "Replace":
            if "Regex" in n["pattern"]:
                return regex.sub(n["pattern"]["Regex"], lambda _: n["content"], text)
            return text.replace(n["pattern"]["String"], n["content"])
        if kind == "Lowercase":  # NormalizedString::lowercase: char::to_lowercase of each char
            return "".join(c.lower() for c in text)
        raise ValueError(kind)

    @staticmethod
    def split_by(pattern, text, behavior, invert):
        """pre_tokenizers/split.rs: the matches and the gaps between them, flagged; invert flips the flags."""
        segments, last = [], 0
        for m in regex.finditer(pattern, text):
            if m.start() > last:
                segments.append((text[last:m.start()], invert))
            if m.end() > m.start():
                segments.append((m.group(), not invert))
            last = m.end()
        if last < len(text):
            segments.append((text[last:], invert))
        if behavior == "Removed":
            return [s for s, is_match in segments if not is_match]
        if behavior == "Isolated":
            return [s for s, _ in segments]
        raise ValueError(behavior)

    @classmethod
    def pre_tokenize(cls, p, words):
        if p is None:
            return words
        kind = p["type"]
        if kind == "Sequence":
            for stage in p["pretokenizers"]:
                words = cls.pre_tokenize(stage, words)
            return words
        out = []
        for word in words:
            if kind == "Split":
                out.extend(cls.split_by(p["pattern"]["Regex"], word, p["behavior"], p["invert"]))
            elif kind == "ByteLevel":
                assert not p["add_prefix_space"]
                parts = cls.split_by(GPT2_SPLIT, word, "Isolated", False) if p["use_regex"] else [word]
                out.extend("".join(BYTE_TO_CHAR[b] for b in part.encode("utf-8")) for part in parts)
            else:
                raise ValueError(kind)
        return [w for w in out if w]

    def word_symbols(self, word):
        """The initial symbols of models/bpe/model.rs merge_word: chars, prefix on all but the first, suffix on
        the last."""
        chars = list(word)
        return [(self.prefix if i > 0 else "") + c + (self.suffix if i == len(chars) - 1 else "")
                for i, c in enumerate(chars)]

    def bpe(self, word):
        symbols = self.word_symbols(word)
        while True:
            best = None
            for i in range(len(symbols) - 1):
                rank = self.ranks.get((symbols[i], symbols[i + 1]))
                if rank is not None and (best is None or rank < best[0]):
                    best = (rank, i)
            if best is None:
                break
            i = best[1]
            symbols[i:i + 2] = [symbols[i] + symbols[i + 1][len(self.prefix):]]
        unk = self.vocab[self.unk] if self.unk is not None else None
        ids = [self.vocab.get(s, unk) for s in symbols]
        assert None not in ids
        return ids

    def encode(self, text, add_special_tokens=True, max_length=None):
        pieces = self.split_added([text], self.raw_added)
        pieces = [p if isinstance(p, int) else self.normalize(self.doc["normalizer"], p) for p in pieces]
        pieces = self.split_added(pieces, self.normalized_added)
        ids = []
        for piece in pieces:
            if isinstance(piece, int):
                ids.append(piece)
                continue
            for word in self.pre_tokenize(self.doc["pre_tokenizer"], [piece]):
                ids.extend(self.bpe(word))
        post = self.doc["post_processor"]
        assert post["type"] == "RobertaProcessing"
        if max_length is not None:
            ids = ids[:max_length - (2 if add_special_tokens else 0)]
        if add_special_tokens:
            ids = [post["cls"][1]] + ids + [post["sep"][1]]
        return ids


BYTE_TO_CHAR = bytes_to_unicode()


def openai_bpe(token, ranks, cache):
    """simple_tokenizer.py's SimpleTokenizer.bpe."""
    if token in cache:
        return cache[token]
    word = tuple(token[:-1]) + (token[-1] + "</w>",)
    pairs = set(zip(word, word[1:]))
    if not pairs:
        return token + "</w>"
    while True:
        bigram = min(pairs, key=lambda pair: ranks.get(pair, float("inf")))
        if bigram not in ranks:
            break
        first, second = bigram
        new_word = []
        i = 0
        while i < len(word):
            try:
                j = word.index(first, i)
                new_word.extend(word[i:j])
                i = j
            except ValueError:
                new_word.extend(word[i:])
                break
            if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                new_word.append(first + second)
                i += 2
            else:
                new_word.append(word[i])
                i += 1
        word = tuple(new_word)
        if len(word) == 1:
            break
        pairs = set(zip(word, word[1:]))
    word = " ".join(word)
    cache[token] = word
    return word


def openai_encode(text, encoder, merges, max_length=None):
    """clip.tokenize([text], context_length, truncate=True) without the zero padding: [sot] + encode + [eot]."""
    ranks = {tuple(m): i for i, m in enumerate(merges)}
    cache = {BOS: BOS, EOS: EOS}
    text = html.unescape(html.unescape(text)).strip()  # basic_clean without ftfy.fix_text
    text = regex.sub(r"\s+", " ", text).strip().lower()  # whitespace_clean, then .lower()
    ids = []
    for token in regex.findall(regex.compile(OPENAI_PATTERN, regex.IGNORECASE), text):
        token = "".join(BYTE_TO_CHAR[b] for b in token.encode("utf-8"))
        ids.extend(encoder[t] for t in openai_bpe(token, ranks, cache).split(" "))
    ids = [encoder[BOS]] + ids + [encoder[EOS]]
    if max_length is not None and len(ids) > max_length:
        ids = ids[:max_length]
        ids[-1] = encoder[EOS]
    return ids


def training_words():
    """The corpus through the tokenizer's own normalizer and pre-tokenizer, as symbol tuples with counts."""
    words = {}
    for line in CORPUS:
        normalized = HfClipTokenizer.normalize(NORMALIZER, line)
        for word in HfClipTokenizer.pre_tokenize(PRE_TOKENIZER, [normalized]):
            symbols = tuple(word[:-1]) + (word[-1] + "</w>",)
            words[symbols] = words.get(symbols, 0) + 1
    return words


def learn_merges(count, taken):
    """bpe_training's plain BPE over the corpus as CLIP's normalizer and pre-tokenizer give it."""
    return bpe_training.learn_merges(training_words(), count, taken)


def build_tokenizer():
    """tokenizer.json and tokenizer_config.json documents, with the vocabulary and merges."""
    byte_chars = list(bytes_to_unicode().values())
    tokens = byte_chars + [c + "</w>" for c in byte_chars]
    merges = learn_merges(MERGES, tokens)
    tokens += [a + b for a, b in merges] + [BOS, EOS]
    vocab = {token: i for i, token in enumerate(tokens)}
    assert len(vocab) == len(tokens)
    bos_id, eos_id = vocab[BOS], vocab[EOS]

    def added(content):
        return {"id": vocab[content], "content": content, "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": True, "special": True}

    document = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [added(BOS), added(EOS)],
        "normalizer": NORMALIZER,
        "pre_tokenizer": PRE_TOKENIZER,
        "post_processor": {"type": "RobertaProcessing", "sep": [EOS, eos_id], "cls": [BOS, bos_id],
                           "trim_offsets": False, "add_prefix_space": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": EOS, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "</w>", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [f"{a} {b}" for a, b in merges]},
    }
    config = {"model_max_length": MAX_LENGTH, "bos_token": BOS, "eos_token": EOS, "unk_token": EOS,
              "pad_token": EOS, "do_lower_case": True, "tokenizer_class": "CLIPTokenizer"}
    return document, config, merges


def write_goldens(path, tokenizer, vocab, merges):
    other_way = copy.deepcopy(tokenizer.doc)
    other_way["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = not BYTE_LEVEL_USE_REGEX
    other = HfClipTokenizer(other_way)
    cases = []
    for text in TEXTS:
        ids = tokenizer.encode(text)
        truncated = tokenizer.encode(text, max_length=MAX_LENGTH)
        assert other.encode(text) == ids and other.encode(text, max_length=MAX_LENGTH) == truncated, text
        agree = openai_encode(text, vocab, merges) == ids and \
            openai_encode(text, vocab, merges, MAX_LENGTH) == truncated
        assert agree == (text not in OPENAI_DIFFERS), (text, ids, openai_encode(text, vocab, merges))
        cases.append({"text": text, "ids": ids, "truncated": truncated})
    with open(path, "w", encoding="utf-8") as file:
        file.write('{\n  "max_length": %d,\n  "cases": [\n' % MAX_LENGTH)
        file.write(",\n".join("    " + json.dumps(case, ensure_ascii=False) for case in cases))
        file.write("\n  ]\n}\n")
    return cases


# ---------------------------------------------------------------------------------------------------------------
# The model, following modeling_clip.py (dropout omitted: inference only)

def activation(name):
    if name == "quick_gelu":
        return lambda x: x * torch.sigmoid(1.702 * x)
    if name == "gelu":
        return lambda x: nn.functional.gelu(x)
    raise ValueError(name)


class CLIPAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_dim = c["hidden_size"]
        self.num_heads = c["num_attention_heads"]
        self.head_dim = self.embed_dim // self.num_heads
        assert self.head_dim * self.num_heads == self.embed_dim
        self.scale = self.head_dim ** -0.5
        self.k_proj = nn.Linear(self.embed_dim, self.embed_dim)
        self.v_proj = nn.Linear(self.embed_dim, self.embed_dim)
        self.q_proj = nn.Linear(self.embed_dim, self.embed_dim)
        self.out_proj = nn.Linear(self.embed_dim, self.embed_dim)

    def forward(self, x, mask=None):
        b, s, _ = x.shape

        def split(t):
            return t.view(b, s, self.num_heads, self.head_dim).transpose(1, 2)

        q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.scale
        if mask is not None:
            scores = scores + mask
        context = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.out_proj(context.transpose(1, 2).reshape(b, s, self.embed_dim))


class CLIPMLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.activation_fn = activation(c["hidden_act"])
        self.fc1 = nn.Linear(c["hidden_size"], c["intermediate_size"])
        self.fc2 = nn.Linear(c["intermediate_size"], c["hidden_size"])

    def forward(self, x):
        return self.fc2(self.activation_fn(self.fc1(x)))


class CLIPEncoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = CLIPAttention(c)
        self.layer_norm1 = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])
        self.mlp = CLIPMLP(c)
        self.layer_norm2 = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])

    def forward(self, x, mask=None):
        x = x + self.self_attn(self.layer_norm1(x), mask)
        return x + self.mlp(self.layer_norm2(x))


class CLIPEncoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.layers = nn.ModuleList([CLIPEncoderLayer(c) for _ in range(c["num_hidden_layers"])])

    def forward(self, x, mask=None):
        for layer in self.layers:
            x = layer(x, mask)
        return x


class CLIPTextEmbeddings(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.token_embedding = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.position_embedding = nn.Embedding(c["max_position_embeddings"], c["hidden_size"])

    def forward(self, ids):
        return self.token_embedding(ids) + self.position_embedding(torch.arange(ids.shape[1]))[None]


class CLIPTextTransformer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embeddings = CLIPTextEmbeddings(c)
        self.encoder = CLIPEncoder(c)
        self.final_layer_norm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])
        self.eos_token_id = c["eos_token_id"]

    def forward(self, ids):
        """(last_hidden_state, pooled_output) for ids [B, S], no attention mask (HF with attention_mask=None)."""
        x = self.embeddings(ids)
        s = ids.shape[1]
        # _create_4d_causal_attention_mask: finfo(dtype).min above the diagonal
        causal = torch.triu(torch.full((s, s), torch.finfo(x.dtype).min, dtype=x.dtype), diagonal=1)
        last = self.final_layer_norm(self.encoder(x, causal[None, None]))
        if self.eos_token_id == 2:  # legacy configs: the EOS is the largest id
            at = ids.to(torch.int).argmax(dim=-1)
        else:
            at = (ids.to(torch.int) == self.eos_token_id).int().argmax(dim=-1)
        return last, last[torch.arange(ids.shape[0]), at]


class CLIPVisionEmbeddings(nn.Module):
    def __init__(self, c):
        super().__init__()
        hidden = c["hidden_size"]
        self.class_embedding = nn.Parameter(torch.zeros(hidden))
        self.patch_embedding = nn.Conv2d(c["num_channels"], hidden, kernel_size=c["patch_size"],
                                         stride=c["patch_size"], bias=False)
        self.num_positions = (c["image_size"] // c["patch_size"]) ** 2 + 1
        self.position_embedding = nn.Embedding(self.num_positions, hidden)

    def forward(self, pixels):
        patches = self.patch_embedding(pixels).flatten(2).transpose(1, 2)
        cls = self.class_embedding.expand(pixels.shape[0], 1, -1)
        return torch.cat([cls, patches], dim=1) + self.position_embedding(torch.arange(self.num_positions))[None]


class CLIPVisionTransformer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embeddings = CLIPVisionEmbeddings(c)
        self.pre_layrnorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])
        self.encoder = CLIPEncoder(c)
        self.post_layernorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])

    def forward(self, pixels):
        last = self.encoder(self.pre_layrnorm(self.embeddings(pixels)))
        return last, self.post_layernorm(last[:, 0, :])


class CLIPModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        t, v = config["text_config"], config["vision_config"]
        self.text_model = CLIPTextTransformer(t)
        self.vision_model = CLIPVisionTransformer(v)
        self.visual_projection = nn.Linear(v["hidden_size"], config["projection_dim"], bias=False)
        self.text_projection = nn.Linear(t["hidden_size"], config["projection_dim"], bias=False)
        self.logit_scale = nn.Parameter(torch.tensor(config["logit_scale_init_value"]))

    def get_text_features(self, ids):
        return self.text_projection(self.text_model(ids)[1])

    def get_image_features(self, pixels):
        return self.visual_projection(self.vision_model(pixels)[1])

    def forward(self, ids, pixels):
        text_hidden, text_pooled = self.text_model(ids)
        image_hidden, image_pooled = self.vision_model(pixels)
        text_features = self.text_projection(text_pooled)
        image_features = self.visual_projection(image_pooled)
        text_embeds = text_features / text_features.norm(p=2, dim=-1, keepdim=True)
        image_embeds = image_features / image_features.norm(p=2, dim=-1, keepdim=True)
        logits_per_text = torch.matmul(text_embeds, image_embeds.t()) * self.logit_scale.exp()
        return {"text_features": text_features, "image_features": image_features, "text_embeds": text_embeds,
                "image_embeds": image_embeds, "logits_per_image": logits_per_text.t(), "text_hidden": text_hidden,
                "image_hidden": image_hidden}


# ---------------------------------------------------------------------------------------------------------------
# Files

def clip_config(text, vision, projection_dim, torch_dtype, sub_projection_dim=True):
    text = dict({"model_type": "clip_text_model", "attention_dropout": 0.0, "dropout": 0.0,
                 "initializer_factor": 1.0, "initializer_range": 0.02, "pad_token_id": 1}, **text)
    vision = dict({"model_type": "clip_vision_model", "attention_dropout": 0.0, "dropout": 0.0,
                   "initializer_factor": 1.0, "initializer_range": 0.02, "num_channels": 3}, **vision)
    if sub_projection_dim:
        text["projection_dim"] = vision["projection_dim"] = projection_dim
    return {"architectures": ["CLIPModel"], "model_type": "clip", "initializer_factor": 1.0,
            "logit_scale_init_value": 2.6592, "projection_dim": projection_dim, "text_config": text,
            "vision_config": vision, "torch_dtype": torch_dtype}


def preprocessor_config(size):
    return {"image_processor_type": "CLIPImageProcessor", "do_resize": True, "size": {"shortest_edge": size},
            "resample": 3, "do_center_crop": True, "crop_size": {"height": size, "width": size}, "do_rescale": True,
            "rescale_factor": 0.00392156862745098, "do_normalize": True,
            "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
            "do_convert_rgb": True}


def pad_ids(ids, eos_id):
    ids = ids[:MAX_LENGTH]
    return ids + [eos_id] * (MAX_LENGTH - len(ids))


def write_fixture(name, config, stored_dtype, texts, tokenizer, tokenizer_files, seed):
    out = make_output_dir(os.path.join(ROOT, name))
    model = CLIPModel(config).double().eval()
    generator = seeded_generator(seed)
    randomize(model, generator, stored_dtype)
    with torch.no_grad():
        hidden = config["vision_config"]["hidden_size"]
        model.vision_model.embeddings.class_embedding.copy_(
            torch.randn(hidden, generator=generator).to(stored_dtype).double())
        model.logit_scale.copy_((2.6592 + 0.05 * torch.randn((), generator=generator)).to(stored_dtype).double())
    image = config["vision_config"]["image_size"]
    pixels = torch.randn(2, 3, image, image, generator=seeded_generator(seed + 1))
    eos_id = tokenizer.vocab[EOS]
    unpadded = [tokenizer.encode(text, max_length=MAX_LENGTH) for text in texts]
    ids = torch.tensor([pad_ids(one, eos_id) for one in unpadded], dtype=torch.long)
    with torch.no_grad():
        expected = model(ids, pixels.double())
        # (b) the float32 forward on the same stored values
        single = copy.deepcopy(model).float()(ids, pixels)
        worst_f32 = max(float((single[k].double() - expected[k]).abs().max()) for k in expected)
        assert worst_f32 < 1e-4, (name, worst_f32)
        # (c) each text alone, unpadded: the same pooled features and hidden rows
        worst_pad = 0.0
        for row, one in enumerate(unpadded):
            alone_hidden, alone_pooled = model.text_model(torch.tensor([one]))
            alone_features = model.text_projection(alone_pooled)[0]
            worst_pad = max(worst_pad, float((alone_features - expected["text_features"][row]).abs().max()),
                            float((alone_hidden[0] - expected["text_hidden"][row, :len(one)]).abs().max()))
        assert worst_pad < 1e-10, (name, worst_pad)

    stored = state_dict_as(model, stored_dtype)
    assert not any("position_ids" in k for k in stored)
    write_safetensors(os.path.join(out, "model.safetensors"), stored)
    # (a) read back with a reader of its own
    back = read_safetensors(os.path.join(out, "model.safetensors"))
    assert sorted(back) == sorted(stored)
    params = dict(model.state_dict())
    for key, tensor in back.items():
        assert tensor.dtype == stored[key].dtype and torch.equal(tensor, stored[key]), key
        assert torch.equal(tensor.double(), params[key]), key  # the reference computed on exactly these values

    write_json(os.path.join(out, "config.json"), config)
    write_json(os.path.join(out, "tokenizer.json"), tokenizer_files[0])
    write_json(os.path.join(out, "tokenizer_config.json"), tokenizer_files[1])
    write_json(os.path.join(out, "preprocessor_config.json"), preprocessor_config(image))
    write_json(os.path.join(out, "texts.json"), texts)
    save_npy(os.path.join(out, "input_ids.npy"), ids.numpy())
    save_npy(os.path.join(out, "pixels.npy"), pixels.numpy())
    for key, value in expected.items():
        save_npy(os.path.join(out, f"{key}.npy"), value.numpy())
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    print(f"{name}: {len(stored)} tensors, {size} bytes; f32 vs f64 {worst_f32:.2e}, padded vs alone "
          f"{worst_pad:.2e}; logits_per_image {expected['logits_per_image'].numpy().round(4).tolist()}")


FIXTURE_TEXTS = [
    "a photo of a cat",
    "a photo of a dog.",
    "a diagram of two birds on a tree",
    "a photo of a very small brown dog sitting on the green grass next to a red ball",  # truncated at 16
]


def main():
    make_output_dir(ROOT)
    document, tokenizer_config, merges = build_tokenizer()
    tokenizer = HfClipTokenizer(document)
    vocab = document["model"]["vocab"]
    cases = write_goldens(os.path.join(ROOT, "tokenizer_goldens.json"), tokenizer, vocab, merges)
    bos_id, eos_id = vocab[BOS], vocab[EOS]
    print(f"tokenizer: vocab {len(vocab)}, {len(merges)} merges, BOS {bos_id}, EOS {eos_id}; {len(cases)} goldens")
    for case in cases[:4]:
        print(f"  {case['text']!r}: {case['ids']}")
    files = (document, tokenizer_config)

    write_fixture("clip", clip_config(
        text={"vocab_size": len(vocab), "hidden_size": 36, "intermediate_size": 52, "num_hidden_layers": 2,
              "num_attention_heads": 3, "max_position_embeddings": MAX_LENGTH, "hidden_act": "quick_gelu",
              "layer_norm_eps": 1e-5, "bos_token_id": bos_id, "eos_token_id": eos_id},
        vision={"image_size": 32, "patch_size": 8, "hidden_size": 40, "intermediate_size": 60,
                "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_act": "quick_gelu", "layer_norm_eps": 1e-5},
        projection_dim=24, torch_dtype="float32"), torch.float32, FIXTURE_TEXTS, tokenizer, files, seed=2100)
    write_fixture("clip_legacy", clip_config(
        text={"vocab_size": len(vocab), "hidden_size": 32, "intermediate_size": 40, "num_hidden_layers": 1,
              "num_attention_heads": 2, "max_position_embeddings": MAX_LENGTH, "hidden_act": "gelu",
              "layer_norm_eps": 1e-5, "bos_token_id": 0, "eos_token_id": 2},
        vision={"image_size": 28, "patch_size": 7, "hidden_size": 24, "intermediate_size": 36,
                "num_hidden_layers": 1, "num_attention_heads": 2, "hidden_act": "gelu", "layer_norm_eps": 1e-6},
        projection_dim=16, torch_dtype="bfloat16", sub_projection_dim=False),
        torch.bfloat16, FIXTURE_TEXTS, tokenizer, files, seed=2200)


if __name__ == "__main__":
    main()
