#!/usr/bin/python3
"""Fixtures for Whisper: a tiny Whisper tokenizer with golden ids, and two tiny WhisperForConditionalGeneration
checkpoints in Hugging Face's format with the log-mel input of tests/data/audio/jfk.wav and the outputs an
independent PyTorch implementation computes for them (encoder states, prompt logits, greedy generation with HF
generate()'s logits processors, timestamps, a two-window long-form transcription).

Tokenizer. A byte-level BPE in the layout of the Hub's Whisper folders: the 256 bytes_to_unicode characters (ids
0..255 in GPT-2's dict order, so "Ġ" is 220 as in Whisper), then merges learned here by plain BPE training on CORPUS
(17 English sentences, the jfk and fox sentences among them; GPT-2's regex pre-tokenization): 200 for the
multilingual fixture, 160 for the English-only one, so their special ids differ. Then the added tokens, in Whisper's
order: <|endoftext|>, <|startoftranscript|>, <|en|> <|zh|> <|de|> <|es|> <|fr|> (the first five of Whisper's
LANGUAGES; the .en tokenizer keeps them too, as the Hub's .en tokenizers keep all 99), <|translate|>,
<|transcribe|>, <|startoflm|>, <|startofprev|>, <|nospeech|>, <|notimestamps|>, and the 1501 timestamps <|0.00|> ..
<|30.00|> ("<|%.2f|>" % (i * 0.02)). Every added token has special true and normalized false. tokenizer.json: no
normalizer, ByteLevel pre-tokenizer (add_prefix_space false, use_regex true), BPE model (its vocab also holds
<|endoftext|>, as GPT-2's vocab.json does), ByteLevel decoder, TemplateProcessing post-processor
"<|startoftranscript|> <|notimestamps|> $A <|endoftext|>". Also vocab.json, merges.txt, added_tokens.json,
special_tokens_map.json and tokenizer_config.json (WhisperTokenizer, clean_up_tokenization_spaces false; no
added_tokens_decoder). The golden ids come from two encoders that must agree: Tokenizer below (tokenizers'
pipeline) and tokenizer_goldens.Gpt2Encoder (openai's GPT-2 encoder.py); decode is tokenizers' ByteLevel decoder
with the special added tokens skipped.

  ids           whisper (multilingual)        whisper_en (English-only)
  <|endoftext|>   456 (eos, pad, bos)            416
  <|startoftranscript|> 457 (decoder_start)      417
  languages     458 en, 459 zh, 460 de, 461 es, 462 fr      418..422
  <|translate|> 463, <|transcribe|> 464          423, 424
  <|startoflm|> 465, <|startofprev|> 466, <|nospeech|> 467  425, 426, 427
  <|notimestamps|> 468                           428
  <|0.00|> (timestamp_begin) 469 .. <|30.00|> 1969  429 .. 1929
  vocab_size    1970                             1930

Model. A plain-PyTorch port of transformers' modeling_whisper.py (WhisperForConditionalGeneration: model.encoder,
model.decoder, proj_out tied to model.decoder.embed_tokens) with HF's module names, so state_dict() gives the
checkpoint's tensor names. Encoder: conv1 (n_mels -> d, k3 p1) + exact-erf GELU, conv2 (k3, stride 2, p1) + GELU,
+ embed_positions.weight (the sinusoids: log_timescale_increment = log(10000) / (d/2 - 1), sin then cos; stored in
the checkpoint as HF does), pre-LN layers x + self_attn(self_attn_layer_norm(x)), x + fc2(gelu(fc1(
final_layer_norm(x)))), then layer_norm; the input must be 3000 frames. Attention: q/v/out_proj with bias,
k_proj without, q scaled by head_dim^-0.5. Decoder: embed_tokens + embed_positions (learned) at positions
past..past+n, layers with causal self_attn, encoder_attn (q from the decoder, k/v from the encoder output) and the
MLP, each pre-LN, then layer_norm; logits = hidden @ embed_tokens.weight.T. model.safetensors holds no
proj_out.weight (save_pretrained leaves tied weights out): a loader must take the head from
model.decoder.embed_tokens.weight and accept a proj_out.weight when one is there. LayerNorm eps 1e-5.

Weights: hf_format.randomize (seeded) plus the adjustments build_model() describes (sinusoidal encoder positions,
random signs on the final decoder norm, timestamp rows scaled and given a shared direction, cross-attention
sharpened and amplified), each value rounded to the stored dtype; every reference is computed in float64 on exactly
the stored weights and the stored f32 inputs, then saved as f32.

Generation (HF generate(), read from generation_whisper.py and logits_process.py of transformers at
000dccdb/00857b6c): the prompt is _retrieve_init_tokens' [decoder_start, language, task, <|notimestamps|>] (a
language or task given to generate() replaces the generation config's forced_decoder_ids; a language without a task
gets <|transcribe|>; return_timestamps drops <|notimestamps|>; .en: [decoder_start, <|notimestamps|>]). The
processors run in the order _retrieve_logit_processors builds (each is prepended): SuppressTokensAtBegin
(begin_suppress_tokens [220, eos], only while len(ids) == begin_index = len(prompt)), SuppressTokens (every step),
WhisperTimeStampLogitsProcessor (return_timestamps only): <|notimestamps|> suppressed; after a timestamp whose
predecessor (counting from begin_index) is a timestamp or absent, no timestamp; after a timestamp that follows text,
no id below eos; no timestamp below the last one (equal allowed right after a single one, else last + 1); at the
first step only timestamps <= timestamp_begin + max_initial_timestamp_index (50); then, if logsumexp of the
log-softmax over the timestamps beats the best non-timestamp log-prob, every id below timestamp_begin is masked.
Greedy argmax (lowest id on ties), stop after eos or max_new_tokens (20 / 16). Without return_timestamps nothing
stops a timestamp token (HF does not suppress them).

Long-form (whisper only): HF computes the log-mel of the whole audio (padding="longest", truncation=False) and
slices 3000-frame windows from it; see LONG_NOTES. The audio is 45 s: jfk.wav at 0 s, fox_16k.wav at 30 s.

Writes
  tests/data/whisper/tokenizer_goldens.json  per fixture: encode (12 texts, add_special_tokens=False) and decode
                                             (6 id lists with specials and timestamps, skip_special_tokens=True)
  tests/data/whisper/<name>/ for name in
    whisper     multilingual; 80 mel bins, d_model 32, 2 + 2 layers, 4 heads (head_dim 8), ffn 48,
                max_target_positions 64, f16 weights, seed 55
    whisper_en  English-only; 128 mel bins (large-v3 style), d_model 24, 1 + 1 layers, 2 heads, ffn 40,
                max_target_positions 48, bf16 weights, seed 15
  each with
    config.json, generation_config.json   WhisperConfig / the Hub's generation config layout (suppress_tokens: '"',
                          '#', the first two text tokens the model picks when they are not suppressed, then
                          <|startoftranscript|> <|translate|> <|transcribe|> <|startoflm|> <|startofprev|>
                          <|nospeech|>; begin_suppress_tokens [220, eos]; max_initial_timestamp_index 50;
                          return_timestamps false; no alignment_heads)
    model.safetensors     the weights (no proj_out.weight)
    tokenizer.json, vocab.json, merges.txt, added_tokens.json, special_tokens_map.json, tokenizer_config.json
    preprocessor_config.json  WhisperFeatureExtractor (feature_size = num_mel_bins, 16 kHz, hop 160, n_fft 400,
                          chunk 30 s, no mel_filters)
    (not written) the input features: jfk.wav padded to 30 s, make_log_mel_fixtures.log_mel; the tests compute
                          them with anvil's log-mel from tests/data/audio/jfk.wav (which test_audio.cpp checks
                          against make_log_mel_fixtures.py's jfk arrays), to keep 2.5 MB of arrays out of the
                          repository
    encoder_hidden.npy    f32 [1500, d_model]: the encoder's last hidden state (after model.encoder.layer_norm)
    prompt_logits.npy     f32 [P, vocab]: the decoder's logits for the first case's prompt (P = 4 / 2)
    generation.json       special ids, the cases ({name, language, task, timestamps, max_new_tokens, prompt,
                          generated, text, sequence_returned, min_top2_gap, steps_changed_by_processors; with
                          timestamps also min_timestamp_mass_gap, steps_forced_to_timestamp}), and (multilingual)
                          language_detection; see GENERATION_NOTES
    (whisper only, not written) the long-form features [1, 80, 4500]: the log-mel of the 45 s audio (jfk.wav
                          at 0 s, fox_16k.wav at 30 s, zeros elsewhere), which the tests compute likewise
    (whisper only) long_generation.json  per window: seek, frames, zero_padding_frames, prompt, generated, kept,
                          min_top2_gap, encoder_hidden_mean [d_model]; then sequences and text
  Cases: whisper  en_transcribe, de_transcribe, de_translate (no timestamps, 20 tokens) and
                  en_transcribe_timestamps (prompt [457, 458, 464]: 478 = <|0.18|>, five text tokens, 1555 =
                  <|21.72|> forced by the probability-mass rule, 1863 = <|27.88|>, then text);
         whisper_en  transcribe (16 tokens) and transcribe_timestamps (prompt [417]: 455 = <|0.52|>, three text
                  tokens, 1033 = <|12.08|> twice (the equal pair), then text).

Self-checks (asserted): the safetensors re-read with a reader of its own equal the model's tensors; a float32 run on
the same stored values is within 1e-4 of the float64 encoder states and prompt logits and picks the same greedy
tokens; the cached decoder (prompt in one call, then one token per call; cross K/V computed once) and a
one-token-at-a-time prefill equal the full-sequence decoder's logits to 1e-10 along every greedy path; every path's
top-2 gap is >= 0.02; the timestamp case has >= 2 timestamps, >= 3 text tokens and a step the mass rule changed;
silence instead of jfk changes the first case's path within three tokens; a float16 emulation (every op's output
rounded to f16) picks the same tokens; the long-form windows have no timestamp pair. --verify-determinism writes
everything a second time into a temporary folder and compares bytes. --search N tries seeds.

Rerun (deterministic, seeded; ~5 s):  /usr/bin/python3 tools/reference/whisper_fixtures.py  (needs python3-regex)
"""

import argparse
import copy
import filecmp
import json
import math
import os
import re
import struct
import sys
import tempfile

import numpy as np
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "fixtures"))
from hf_format import make_output_dir, randomize, save_npy, seeded_generator, state_dict_as, write_json, \
    read_safetensors, write_safetensors  # noqa: E402
import make_log_mel_fixtures as log_mel_fixtures  # noqa: E402
import bpe_training  # noqa: E402
import tokenizer_goldens as tg  # noqa: E402  (openai's GPT-2 encoder.py port: the second encoder of the goldens)

ROOT = os.path.normpath(os.path.join(HERE, "..", "..", "tests", "data", "whisper"))

# ---------------------------------------------------------------------------------------------------------------
# Tokenizer

EOT, SOT = "<|endoftext|>", "<|startoftranscript|>"
LANGUAGES = ["en", "zh", "de", "es", "fr"]  # the first five of Whisper's LANGUAGES, in its order
TASKS = ["translate", "transcribe"]
TIME_PRECISION = 0.02
TIMESTAMPS = ["<|%.2f|>" % (i * TIME_PRECISION) for i in range(1501)]  # <|0.00|> .. <|30.00|>, as HF formats them


def special_tokens():
    """The added tokens after the BPE vocabulary, in Whisper's order."""
    return ([EOT, SOT] + [f"<|{code}|>" for code in LANGUAGES] + [f"<|{task}|>" for task in TASKS]
            + ["<|startoflm|>", "<|startofprev|>", "<|nospeech|>", "<|notimestamps|>"] + TIMESTAMPS)


CORPUS = [
    "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country.",
    "The quick brown fox jumps over the lazy dog.",
    "My fellow citizens of the world, ask not what America will do for you, but what together we can do for the "
    "freedom of man.",
    "We observe today not a victory of party, but a celebration of freedom.",
    "The world is very different now.",
    "Let every nation know, whether it wishes us well or ill, that we shall pay any price.",
    "In the long history of the world, only a few generations have been granted the role of defending freedom.",
    "The energy, the faith, the devotion which we bring to this endeavor will light our country and all who serve "
    "it.",
    "A quick brown dog jumps over the lazy fox!",
    "Can you hear me? Yes, I can hear you.",
    "It's 10:30 on January 20, 1961, and the sky is clear.",
    "She said: \"Do it now, or don't do it at all.\"",
    "They'll ask what we've done; we'll tell them what we're doing.",
    "Speech recognition turns sound into text, one token at a time.",
    "Twelve, thirty, 2024 and 3.14 are numbers.",
    "The jury found the fox not guilty of jumping.",
    "Ask, and it shall be given you; seek, and ye shall find.",
]

BYTE_TO_CHAR = tg.bytes_to_unicode()          # GPT-2's table, in its dict order (the vocabulary's first 256 ids)
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}


def byte_level(piece):
    return "".join(BYTE_TO_CHAR[b] for b in piece.encode("utf-8"))


def learn_merges(count):
    """bpe_training's plain BPE over CORPUS, pre-tokenized as the tokenizer does (GPT-2's regex, then bytes)."""
    words = {}
    for line in CORPUS:
        for piece in tg.gpt2_pattern().findall(line):
            word = tuple(byte_level(piece))
            words[word] = words.get(word, 0) + 1
    return bpe_training.learn_merges(words, count, BYTE_TO_CHAR.values())


class Tokenizer:
    """Hugging Face `tokenizers` semantics for the tokenizer.json documents written here (no normalizer): added
    tokens matched in the raw text, leftmost-longest (added_vocabulary.rs; all have normalized false); the rest
    through the ByteLevel pre-tokenizer (GPT-2's regex, add_prefix_space false; pre_tokenizers/byte_level.rs) and
    the BPE model (models/bpe/word.rs: the lowest-rank merge first, leftmost among equals); decode: the ByteLevel
    decoder (the tokens' characters back to bytes, then lossy UTF-8), special added tokens dropped with
    skip_special_tokens (what WhisperTokenizer.decode then gives too: its _strip_prompt only acts on
    <|startofprev|>, absent here, and _filter_timestamp_ids finds nothing left to remove)."""

    def __init__(self, document):
        model = document["model"]
        self.vocab = model["vocab"]
        self.ranks = {tuple(merge.split(" ")): rank for rank, merge in enumerate(model["merges"])}
        self.added = {token["content"]: token["id"] for token in document["added_tokens"]}
        self.special_ids = {token["id"] for token in document["added_tokens"] if token["special"]}
        self.id_to_token = {i: t for t, i in self.vocab.items()}
        self.id_to_token.update({i: t for t, i in self.added.items()})

    def bpe(self, word):
        symbols = list(word)
        while len(symbols) > 1:
            best = None
            for i in range(len(symbols) - 1):
                rank = self.ranks.get((symbols[i], symbols[i + 1]))
                if rank is not None and (best is None or rank < best[0]):
                    best = (rank, i)
            if best is None:
                break
            i = best[1]
            symbols[i:i + 2] = [symbols[i] + symbols[i + 1]]
        return [self.vocab[s] for s in symbols]

    def encode(self, text):
        """tokenizer(text, add_special_tokens=False).input_ids"""
        ids = []
        for is_added, piece in tg.split_on_tokens(text, list(self.added)):
            if is_added:
                ids.append(self.added[piece])
                continue
            for word in tg.gpt2_pattern().findall(piece):
                ids.extend(self.bpe(byte_level(word)))
        return ids

    def decode(self, ids, skip_special_tokens=True):
        tokens = [self.id_to_token[i] for i in ids if not (skip_special_tokens and i in self.special_ids)]
        data = bytes(CHAR_TO_BYTE[c] for c in "".join(tokens))
        return data.decode("utf-8", errors="replace")


def build_tokenizer(merge_count):
    """(tokenizer.json document, {file name: contents} of the slow tokenizer's files, ids of the specials)."""
    merges = learn_merges(merge_count)
    tokens = list(BYTE_TO_CHAR.values()) + [a + b for a, b in merges]
    vocab = {token: i for i, token in enumerate(tokens)}
    assert len(vocab) == len(tokens)
    specials = special_tokens()
    added_ids = {token: len(tokens) + i for i, token in enumerate(specials)}
    vocab_json = dict(vocab, **{EOT: added_ids[EOT]})  # GPT-2's vocab.json carries <|endoftext|> too

    def added(content):
        return {"id": added_ids[content], "content": content, "single_word": False, "lstrip": False,
                "rstrip": False, "normalized": False, "special": True}

    def special(content):
        return {"SpecialToken": {"id": content, "type_id": 0}}

    document = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [added(t) for t in specials],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [special(SOT), special("<|notimestamps|>"), {"Sequence": {"id": "A", "type_id": 0}},
                       special(EOT)],
            "pair": [special(SOT), special("<|notimestamps|>"), {"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}}, special(EOT)],
            "special_tokens": {t: {"id": t, "ids": [added_ids[t]], "tokens": [t]}
                               for t in (SOT, "<|notimestamps|>", EOT)}},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab_json, "merges": [f"{a} {b}" for a, b in merges]},
    }
    additional = specials[1:specials.index("<|notimestamps|>") + 1]
    files = {
        "vocab.json": vocab_json,
        "merges.txt": "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges),
        "added_tokens.json": {t: added_ids[t] for t in specials},
        "special_tokens_map.json": {"additional_special_tokens": additional, "bos_token": EOT, "eos_token": EOT,
                                    "pad_token": EOT, "unk_token": EOT},
        "tokenizer_config.json": {"add_bos_token": False, "add_prefix_space": False,
                                  "additional_special_tokens": additional, "bos_token": EOT,
                                  "clean_up_tokenization_spaces": False, "eos_token": EOT, "errors": "replace",
                                  "model_max_length": 1024, "pad_token": EOT, "processor_class": "WhisperProcessor",
                                  "return_attention_mask": False, "tokenizer_class": "WhisperTokenizer",
                                  "unk_token": EOT},
    }
    ids = {"eot": added_ids[EOT], "sot": added_ids[SOT], "translate": added_ids["<|translate|>"],
           "transcribe": added_ids["<|transcribe|>"], "startoflm": added_ids["<|startoflm|>"],
           "startofprev": added_ids["<|startofprev|>"], "nospeech": added_ids["<|nospeech|>"],
           "notimestamps": added_ids["<|notimestamps|>"], "timestamp_begin": added_ids[TIMESTAMPS[0]],
           "space": vocab[BYTE_TO_CHAR[ord(" ")]],
           "languages": {f"<|{code}|>": added_ids[f"<|{code}|>"] for code in LANGUAGES},
           "vocab_size": len(tokens) + len(specials)}
    return document, files, ids


def json_lines(value, indent=0):
    """JSON with one line per entry of the big containers and short containers of scalars on one line."""
    pad, inner = "  " * indent, "  " * (indent + 1)
    scalar = (str, int, float, bool, type(None))
    if isinstance(value, (dict, list)) and value:
        items = value.items() if isinstance(value, dict) else [(None, v) for v in value]
        if all(isinstance(v, scalar) for _, v in items) and len(value) <= 12:
            return json.dumps(value, ensure_ascii=False)
        parts = [(json.dumps(k, ensure_ascii=False) + ": " if k is not None else "") + json_lines(v, indent + 1)
                 for k, v in items]
        brackets = "{}" if isinstance(value, dict) else "[]"
        return brackets[0] + "\n" + ",\n".join(inner + p for p in parts) + "\n" + pad + brackets[1]
    return json.dumps(value, ensure_ascii=False)


def write_compact_json(path, value):
    with open(path, "w", encoding="utf-8") as file:
        file.write(json_lines(value) + "\n")


GOLDEN_TEXTS = [
    " And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country.",
    "And so my fellow Americans",
    "The quick brown fox jumps over the lazy dog.",
    "  two leading spaces, and trailing  ",
    "Hello, world! How's it going? I'll say they've gone; we're here.",
    "Numbers: 0 12 345 6789, 3.14159 and 1961.",
    "naïve café — 日本語 🙂",
    "tabs\tand\nnew lines\n\n end",
    "<|startoftranscript|><|en|><|transcribe|> hi<|endoftext|>",
    "<|0.00|> time<|1.50|><|1.50|> again",
    "",
    "   ",
]


def golden_decode_cases(tok, ids):
    ts = ids["timestamp_begin"]

    def stamp(seconds):
        return ts + round(seconds / TIME_PRECISION)

    en, de = ids["languages"]["<|en|>"], ids["languages"]["<|de|>"]
    emoji = tok.encode(" 🙂")
    return [
        [ids["sot"], en, ids["transcribe"], ids["notimestamps"]] + tok.encode(GOLDEN_TEXTS[0]) + [ids["eot"]],
        [ids["sot"], en, ids["transcribe"], stamp(0.0)] + tok.encode(" Hello") + [stamp(1.0), stamp(1.0)]
        + tok.encode(" world.") + [stamp(2.4), ids["eot"]],
        [ids["sot"], de, ids["translate"], ids["notimestamps"]] + tok.encode(" Guten") + [de]
        + tok.encode(" Tag") + [ids["nospeech"], ids["startoflm"], ids["eot"]],
        [ids["sot"]] + tok.encode(" naïve café") + emoji + [ids["eot"]],
        tok.encode(" broken") + emoji[:-2] + tok.encode(" emoji"),  # an incomplete UTF-8 sequence: one U+FFFD
        [ids["notimestamps"], stamp(29.98), stamp(30.0), ids["eot"]],
    ]


def write_goldens(path, tokenizers):
    """tokenizer_goldens.json: per fixture, encode (add_special_tokens=False) and decode (skip_special_tokens)."""
    result = {"notes": "encode: tokenizer(text, add_special_tokens=False).input_ids; decode: "
                       "tokenizer.decode(ids, skip_special_tokens=True) (clean_up_tokenization_spaces false); the "
                       "timestamp tokens are special added tokens here, so they are skipped too. The incomplete "
                       "UTF-8 sequence decodes to one U+FFFD (Rust's from_utf8_lossy, Python's errors='replace')."}
    for name, (tok, document, ids) in tokenizers.items():
        gpt2 = tg.Gpt2Encoder({**document["model"]["vocab"], **tok.added},
                              [tuple(m.split(" ")) for m in document["model"]["merges"]], specials=list(tok.added))
        encode = []
        for text in GOLDEN_TEXTS:
            got = tok.encode(text)
            assert got == gpt2.ids(text), (name, text, got, gpt2.ids(text))  # two implementations agree
            assert tok.decode(got, skip_special_tokens=False) == text, text   # byte-level BPE is lossless
            encode.append({"text": text, "ids": got})
        decode = [{"ids": case, "text": tok.decode(case)} for case in golden_decode_cases(tok, ids)]
        result[name] = {"eot": ids["eot"], "sot": ids["sot"], "notimestamps": ids["notimestamps"],
                        "timestamp_begin": ids["timestamp_begin"], "encode": encode, "decode": decode}
    with open(path, "w", encoding="utf-8") as file:
        file.write('{\n  "notes": %s,\n' % json.dumps(result["notes"]))
        parts = []
        for name in tokenizers:
            entry = result[name]
            head = ", ".join(f'"{k}": {entry[k]}' for k in ("eot", "sot", "notimestamps", "timestamp_begin"))
            body = ",\n".join("      " + json.dumps(c, ensure_ascii=False) for c in entry["encode"])
            body2 = ",\n".join("      " + json.dumps(c, ensure_ascii=False) for c in entry["decode"])
            parts.append(f'  "{name}": {{\n    {head},\n    "encode": [\n{body}\n    ],\n'
                         f'    "decode": [\n{body2}\n    ]\n  }}')
        file.write(",\n".join(parts) + "\n}\n")
    return result


# ---------------------------------------------------------------------------------------------------------------
# The model, following modeling_whisper.py (dropout, layerdrop and SpecAugment omitted: inference only)

# Per-op rounding hook: identity normally; x.half().double() for the float16 emulation check.
ROUND = [lambda x: x]


def r(x):
    return ROUND[0](x)


def gelu(x):  # activation_function "gelu": the exact erf form
    return nn.functional.gelu(x)


def sinusoids(length, channels, max_timescale=10000.0):
    """modeling_whisper.sinusoids: log_timescale_increment = log(max_timescale) / (channels / 2 - 1); the first
    half of the channels sin(t * inv_timescale), the second half cos (float64 here)."""
    assert channels % 2 == 0
    increment = math.log(max_timescale) / (channels // 2 - 1)
    inv_timescales = torch.exp(-increment * torch.arange(channels // 2, dtype=torch.float64))
    scaled = torch.arange(length, dtype=torch.float64)[:, None] * inv_timescales[None, :]
    return torch.cat([scaled.sin(), scaled.cos()], dim=1)


class WhisperAttention(nn.Module):
    """q/v/out_proj with bias, k_proj without; q scaled by head_dim^-0.5."""

    def __init__(self, embed_dim, num_heads):
        super().__init__()
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        assert self.head_dim * num_heads == embed_dim
        self.scaling = self.head_dim ** -0.5
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def heads(self, x):
        b, s, _ = x.shape
        return x.view(b, s, self.num_heads, self.head_dim).transpose(1, 2)

    def key_values(self, states):
        return self.heads(r(self.k_proj(states))), self.heads(r(self.v_proj(states)))

    def forward(self, x, keys, values, mask=None):
        q = self.heads(r(self.q_proj(x) * self.scaling))
        scores = r(torch.matmul(q, keys.transpose(-1, -2)))
        if mask is not None:
            scores = scores + mask
        context = r(torch.matmul(r(torch.softmax(scores, dim=-1)), values))
        b, _, s, _ = context.shape
        return r(self.out_proj(context.transpose(1, 2).reshape(b, s, self.embed_dim)))


class WhisperEncoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["d_model"]
        self.self_attn = WhisperAttention(d, c["encoder_attention_heads"])
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, c["encoder_ffn_dim"])
        self.fc2 = nn.Linear(c["encoder_ffn_dim"], d)
        self.final_layer_norm = nn.LayerNorm(d)

    def forward(self, x):
        h = r(self.self_attn_layer_norm(x))
        x = r(x + self.self_attn(h, *self.self_attn.key_values(h)))
        h = r(self.final_layer_norm(x))
        return r(x + r(self.fc2(r(gelu(r(self.fc1(h)))))))


class WhisperEncoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["d_model"]
        self.conv1 = nn.Conv1d(c["num_mel_bins"], d, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(d, d, kernel_size=3, stride=2, padding=1)
        self.embed_positions = nn.Embedding(c["max_source_positions"], d)
        self.layers = nn.ModuleList([WhisperEncoderLayer(c) for _ in range(c["encoder_layers"])])
        self.layer_norm = nn.LayerNorm(d)
        self.frames = 2 * c["max_source_positions"]

    def forward(self, features):
        """features [B, n_mels, 3000] -> last_hidden_state [B, 1500, d_model] (after layer_norm)."""
        assert features.shape[-1] == self.frames, "WhisperEncoder expects exactly 3000 frames"
        x = r(gelu(r(self.conv1(features))))
        x = r(gelu(r(self.conv2(x)))).permute(0, 2, 1)
        x = r(x + self.embed_positions.weight)
        for layer in self.layers:
            x = layer(x)
        return r(self.layer_norm(x))


class WhisperDecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["d_model"]
        self.self_attn = WhisperAttention(d, c["decoder_attention_heads"])
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.encoder_attn = WhisperAttention(d, c["decoder_attention_heads"])
        self.encoder_attn_layer_norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, c["decoder_ffn_dim"])
        self.fc2 = nn.Linear(c["decoder_ffn_dim"], d)
        self.final_layer_norm = nn.LayerNorm(d)

    def forward(self, x, cross, mask, cache=None):
        """cross: this layer's encoder_attn (keys, values) of the encoder output; cache: None (the whole sequence
        is in x) or a [keys, values] list this call appends to."""
        h = r(self.self_attn_layer_norm(x))
        keys, values = self.self_attn.key_values(h)
        if cache is not None:
            if cache[0] is not None:
                keys, values = torch.cat([cache[0], keys], dim=2), torch.cat([cache[1], values], dim=2)
            cache[0], cache[1] = keys, values
        x = r(x + self.self_attn(h, keys, values, mask))
        h = r(self.encoder_attn_layer_norm(x))
        x = r(x + self.encoder_attn(h, *cross))
        h = r(self.final_layer_norm(x))
        return r(x + r(self.fc2(r(gelu(r(self.fc1(h)))))))


class DecoderCache:
    """Self-attention keys/values per layer (grown one call at a time) and the cross-attention keys/values,
    computed once from the encoder output."""

    def __init__(self, decoder, encoder_hidden):
        self.cross = decoder.cross_key_values(encoder_hidden)
        self.layers = [[None, None] for _ in decoder.layers]
        self.length = 0


class WhisperDecoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["d_model"]
        self.embed_tokens = nn.Embedding(c["vocab_size"], d)
        self.embed_positions = nn.Embedding(c["max_target_positions"], d)  # WhisperPositionalEmbedding
        self.layers = nn.ModuleList([WhisperDecoderLayer(c) for _ in range(c["decoder_layers"])])
        self.layer_norm = nn.LayerNorm(d)

    def cross_key_values(self, encoder_hidden):
        return [layer.encoder_attn.key_values(encoder_hidden) for layer in self.layers]

    def forward(self, ids, encoder_hidden=None, cache=None):
        """Logits [B, n, vocab] of ids [B, n] (proj_out tied to embed_tokens). Without a cache: the whole sequence,
        positions 0..n-1, causal; with one: the ids follow the cache's tokens."""
        past = cache.length if cache is not None else 0
        n = ids.shape[1]
        assert past + n <= self.embed_positions.num_embeddings
        x = r(self.embed_tokens(ids) + self.embed_positions.weight[past:past + n])
        query = torch.arange(past, past + n)[:, None]
        key = torch.arange(past + n)[None, :]
        mask = torch.zeros(n, past + n, dtype=x.dtype).masked_fill(key > query, torch.finfo(x.dtype).min)
        cross = cache.cross if cache is not None else self.cross_key_values(encoder_hidden)
        for i, layer in enumerate(self.layers):
            x = layer(x, cross[i], mask, cache.layers[i] if cache is not None else None)
        if cache is not None:
            cache.length += n
        x = r(self.layer_norm(x))
        return r(torch.matmul(x, self.embed_tokens.weight.t()))


class WhisperModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.encoder = WhisperEncoder(c)
        self.decoder = WhisperDecoder(c)


class WhisperForConditionalGeneration(nn.Module):
    """model.encoder, model.decoder; proj_out is model.decoder.embed_tokens (tie_word_embeddings), so it is not a
    module of its own and the state dict has no proj_out.weight (save_pretrained leaves the tied copy out too)."""

    def __init__(self, c):
        super().__init__()
        self.model = WhisperModel(c)


# ---------------------------------------------------------------------------------------------------------------
# generate(): HF's Whisper logits processors and greedy search

NEG_INF = -float("inf")


class Rules:
    """What generation_whisper.py's _retrieve_logit_processors builds, in its order: it prepends each processor
    to the list, so the list runs SuppressTokensAtBeginLogitsProcessor, SuppressTokensLogitsProcessor, then
    WhisperTimeStampLogitsProcessor (return_timestamps only); begin_index = len(prompt). The two suppressions
    commute; the timestamp rules see both applied."""

    def __init__(self, generation, timestamps):
        self.suppress = list(generation["suppress_tokens"])
        self.begin_suppress = list(generation["begin_suppress_tokens"])
        self.eos = generation["eos_token_id"]
        self.no_timestamps = generation["no_timestamps_token_id"]
        self.timestamp_begin = self.no_timestamps + 1
        self.max_initial = generation["max_initial_timestamp_index"]
        self.timestamps = timestamps

    def __call__(self, ids, begin_index, logits, fired):
        scores = logits.clone()
        if len(ids) == begin_index:                          # SuppressTokensAtBeginLogitsProcessor
            scores[self.begin_suppress] = NEG_INF
        scores[self.suppress] = NEG_INF                      # SuppressTokensLogitsProcessor
        if self.timestamps:
            scores = self.timestamp_rules(ids, begin_index, scores, fired)
        return scores

    def timestamp_rules(self, ids, begin_index, scores, fired):
        """logits_process.py WhisperTimeStampLogitsProcessor.__call__ for one row."""
        ts = self.timestamp_begin
        scores = scores.clone()
        scores[self.no_timestamps] = NEG_INF                 # handled by the prompt (<|notimestamps|>)
        sampled = ids[begin_index:]
        last_was_timestamp = len(sampled) >= 1 and sampled[-1] >= ts
        penultimate_was_timestamp = len(sampled) < 2 or sampled[-2] >= ts
        if last_was_timestamp:
            if penultimate_was_timestamp:                    # a pair (or the first token) was closed: text next
                scores[ts:] = NEG_INF
                fired.add("pair_closed")
            else:                                            # a segment's end timestamp: no text (ids < eos)
                scores[:self.eos] = NEG_INF
                fired.add("no_text_after_single")
        stamps = [t for t in sampled if t >= ts]
        if stamps:                                           # monotonic: the pair's second may repeat the first
            floor = stamps[-1] if last_was_timestamp and not penultimate_was_timestamp else stamps[-1] + 1
            scores[ts:floor] = NEG_INF
        if len(ids) == begin_index:                          # the first token: a timestamp <= max_initial
            scores[:ts] = NEG_INF
            if self.max_initial is not None:
                scores[ts + self.max_initial + 1:] = NEG_INF
            fired.add("initial")
        logprobs = torch.log_softmax(scores, dim=-1)
        timestamp_mass = torch.logsumexp(logprobs[ts:], dim=-1)
        best_text = logprobs[:ts].max()
        gap = float(timestamp_mass - best_text)
        if math.isfinite(gap):
            fired.add(("mass_gap", gap))
        if timestamp_mass > best_text:                       # the timestamps' total beats every text token
            if float(scores[:ts].max()) > NEG_INF and int(torch.argmax(scores)) < ts:
                fired.add("forced_timestamp")                # ...and it changes the pick
            scores[:ts] = NEG_INF
        return scores


def top2_gap(scores):
    top = torch.topk(scores, 2).values
    return float(top[0] - top[1]) if math.isfinite(float(top[1])) else math.inf


def greedy(model, encoder_hidden, prompt, max_new_tokens, rules):
    """GenerationMixin greedy search as Whisper's generate() runs it: the prompt in one decoder call, then one
    token per call (self-attention KV cache, cross-attention K/V computed once); the processors on the last
    row's logits; argmax (the lowest id on ties); stop after eos or max_new_tokens. Returns the new tokens and
    per-step records (raw logits, processed scores, which rules acted)."""
    cache = DecoderCache(model.model.decoder, encoder_hidden)
    with torch.no_grad():
        logits = model.model.decoder(torch.tensor([prompt]), cache=cache)[0, -1]
        tokens, steps = [], []
        while len(tokens) < max_new_tokens:
            fired = set()
            scores = rules(prompt + tokens, len(prompt), logits, fired)
            token = int(torch.argmax(scores))
            steps.append({"logits": logits, "scores": scores, "fired": fired, "raw_argmax": int(torch.argmax(logits)),
                          "gap": top2_gap(scores)})
            tokens.append(token)
            if token == rules.eos:
                break
            logits = model.model.decoder(torch.tensor([[token]]), cache=cache)[0, -1]
    return tokens, steps


def hf_returned(prompt, generated, eos, timestamp_begin, is_final=True, short_form=True):
    """What recent generate() (generation_whisper.py: generate_with_fallback + _retrieve_segment, the unified
    short/long-form loop) makes of one window's greedy output: a trailing eos is cut from a window that is not the
    last; then, pad_token_id being eos, a sequence ending in eos loses that many tokens ('remove all padding
    tokens'); a short-form sequence keeps the prompt; with consecutive timestamp pairs, the tokens after the last
    pair are dropped unless the sequence ends in a single timestamp. Returns (tokens, segment_offset or None)."""
    seq = (prompt if short_form else []) + list(generated)
    if not is_final and seq and seq[-1] == eos:
        seq = seq[:-1]
    if seq and seq[-1] == eos:
        seq = seq[:-seq.count(eos)]
    flags = [t >= timestamp_begin for t in seq]
    pairs = [i + 1 for i in range(len(seq) - 1) if flags[i] and flags[i + 1]]
    if not pairs:
        return seq, None
    single_ending = flags[-2:] == [False, True]
    end = len(seq) if single_ending else pairs[-1] + 1
    offset = None if single_ending else (seq[end - 1] - timestamp_begin) * 2
    return seq[:end], offset


# ---------------------------------------------------------------------------------------------------------------
# Fixtures

def whisper_config(ids, generation, n_mels, d_model, encoder_layers, decoder_layers, heads, ffn, max_target,
                   torch_dtype):
    return {
        "activation_dropout": 0.0, "activation_function": "gelu", "apply_spec_augment": False,
        "architectures": ["WhisperForConditionalGeneration"], "attention_dropout": 0.0,
        "begin_suppress_tokens": generation["begin_suppress_tokens"], "bos_token_id": ids["eot"],
        "classifier_proj_size": 256, "d_model": d_model, "decoder_attention_heads": heads,
        "decoder_ffn_dim": ffn, "decoder_layerdrop": 0.0, "decoder_layers": decoder_layers,
        "decoder_start_token_id": ids["sot"], "dropout": 0.0, "encoder_attention_heads": heads,
        "encoder_ffn_dim": ffn, "encoder_layerdrop": 0.0, "encoder_layers": encoder_layers,
        "eos_token_id": ids["eot"], "forced_decoder_ids": generation["forced_decoder_ids"], "init_std": 0.02,
        "is_encoder_decoder": True, "max_length": max_target, "max_source_positions": 1500,
        "max_target_positions": max_target, "median_filter_width": 7, "model_type": "whisper",
        "num_hidden_layers": encoder_layers, "num_mel_bins": n_mels, "pad_token_id": ids["eot"],
        "scale_embedding": False, "suppress_tokens": generation["suppress_tokens"], "tie_word_embeddings": True,
        "torch_dtype": torch_dtype, "use_cache": True, "use_weighted_layer_sum": False,
        "vocab_size": ids["vocab_size"]}


def generation_config(ids, is_multilingual, max_target, ordinary_suppress):
    """generation_config.json as the Hub's Whisper folders have it (alignment_heads left out)."""
    specials = [ids["sot"], ids["translate"], ids["transcribe"], ids["startoflm"], ids["startofprev"],
                ids["nospeech"]]  # sorted: suppress_tokens[-2] is <|startofprev|>, as generate() assumes
    config = {"begin_suppress_tokens": [ids["space"], ids["eot"]], "bos_token_id": ids["eot"],
              "decoder_start_token_id": ids["sot"], "eos_token_id": ids["eot"]}
    if is_multilingual:
        config["forced_decoder_ids"] = [[1, ids["languages"]["<|en|>"]], [2, ids["transcribe"]],
                                        [3, ids["notimestamps"]]]
    else:
        config["forced_decoder_ids"] = [[1, ids["notimestamps"]]]
    config.update({"is_multilingual": is_multilingual})
    if is_multilingual:
        config["lang_to_id"] = dict(ids["languages"])
    config.update({"max_initial_timestamp_index": 50, "max_length": max_target,
                   "no_timestamps_token_id": ids["notimestamps"], "pad_token_id": ids["eot"],
                   "prev_sot_token_id": ids["startofprev"], "return_timestamps": False,
                   "suppress_tokens": sorted(ordinary_suppress) + specials})
    if is_multilingual:
        config["task_to_id"] = {"transcribe": ids["transcribe"], "translate": ids["translate"]}
    return config


def preprocessor_config(n_mels):
    return {"chunk_length": 30, "feature_extractor_type": "WhisperFeatureExtractor", "feature_size": n_mels,
            "hop_length": 160, "n_fft": 400, "n_samples": 480000, "nb_max_frames": 3000, "padding_side": "right",
            "padding_value": 0.0, "processor_class": "WhisperProcessor", "return_attention_mask": False,
            "sampling_rate": 16000}


def build_model(c, stored_dtype, seed, timestamp_scale, timestamp_shared):
    """Seeded weights (hf_format.randomize: Linear/Conv1d N(0, 1/fan_in), biases N(0, 0.05^2), LayerNorm 1 +
    N(0, 0.1^2) / N(0, 0.1^2), both embeddings N(0, 1)), then, from a second generator (seed + 1):
      - model.encoder.embed_positions = the sinusoids HF's _init_weights writes there;
      - model.decoder.layer_norm.weight gets random signs: with the head tied to embed_tokens, a near-1 final
        norm makes every token's own embedding its best logit and greedy search repeats one token forever;
        with signs the self-match averages out;
      - the timestamp rows of embed_tokens become timestamp_scale * row + timestamp_shared * u (one shared
        random direction u): the timestamps' total probability then swings from step to step, so the "sum of
        timestamp probabilities beats every text token" rule both fires and does not, and without timestamps
        the text tokens win the argmax;
      - every decoder layer's encoder_attn.q_proj (weight and bias) x CROSS_SHARPEN and encoder_attn.out_proj.weight
        x CROSS_GAIN: with the plain scales the cross-attention is nearly uniform over the 1500 positions and
        small, and jfk, fox and silence gave the same first ten greedy tokens; now the audio steers the path
        from the first token on (evaluate() asserts that silence diverges within three tokens).
    Every value is rounded to the stored dtype."""
    model = WhisperForConditionalGeneration(c).double().eval()
    randomize(model, seeded_generator(seed), stored_dtype)
    extra = seeded_generator(seed + 1)
    with torch.no_grad():
        encoder, decoder = model.model.encoder, model.model.decoder
        encoder.embed_positions.weight.copy_(
            sinusoids(c["max_source_positions"], c["d_model"]).to(stored_dtype).double())
        norm = decoder.layer_norm.weight
        signs = torch.where(torch.rand(norm.shape, generator=extra) < 0.5, -1.0, 1.0).double()
        norm.copy_((norm * signs).to(stored_dtype).double())
        first = c["_timestamp_begin"]
        shared = torch.randn(c["d_model"], generator=extra).double()
        rows = decoder.embed_tokens.weight[first:]
        decoder.embed_tokens.weight[first:] = (rows * timestamp_scale + timestamp_shared * shared) \
            .to(stored_dtype).double()
        for layer in decoder.layers:
            for tensor, factor in ((layer.encoder_attn.q_proj.weight, CROSS_SHARPEN),
                                   (layer.encoder_attn.q_proj.bias, CROSS_SHARPEN),
                                   (layer.encoder_attn.out_proj.weight, CROSS_GAIN)):
                tensor.copy_((tensor * factor).to(stored_dtype).double())
    return model


CROSS_SHARPEN, CROSS_GAIN = 3.0, 4.0


def load_features(n_mels):
    """[1, n_mels, 3000] float32: jfk.wav padded to 30 s, log-mel as make_log_mel_fixtures.py computes it."""
    samples = log_mel_fixtures.read_wav("jfk.wav")
    return torch.from_numpy(log_mel_fixtures.log_mel(samples, n_mels).astype(np.float32))[None]


def long_audio():
    """45 s: jfk.wav at 0 s, fox_16k.wav at 30 s, zeros elsewhere."""
    jfk, fox = log_mel_fixtures.read_wav("jfk.wav"), log_mel_fixtures.read_wav("fox_16k.wav")
    audio = np.zeros(45 * 16000)
    audio[:len(jfk)] = jfk
    audio[30 * 16000:30 * 16000 + len(fox)] = fox
    return audio


def run_cases(model, features, cases, generation):
    encoder_hidden = model.model.encoder(features)
    results = []
    for case in cases:
        rules = Rules(generation, case["timestamps"])
        tokens, steps = greedy(model, encoder_hidden, case["prompt"], case["max_new_tokens"], rules)
        results.append({"generated": tokens, "steps": steps})
    return encoder_hidden, results


def make_prompt(ids, language, task, timestamps, is_multilingual):
    """_retrieve_init_tokens for the language/task given to generate() (None: the generation config's
    forced_decoder_ids): [sot, language, task] then <|notimestamps|> unless return_timestamps."""
    prompt = [ids["sot"]]
    if is_multilingual:
        prompt += [ids["languages"][f"<|{language or 'en'}|>"], ids[task or "transcribe"]]
    if not timestamps:
        prompt.append(ids["notimestamps"])
    return prompt


def check_incremental(model, encoder_hidden, prompt, tokens, steps):
    """The cached decoder (prompt in one call, then one token per call) against one full-sequence forward, and a
    one-token-at-a-time prefill: worst |difference| of the logits."""
    with torch.no_grad():
        full = model.model.decoder(torch.tensor([prompt + tokens[:-1]]), encoder_hidden)[0]
        cached = torch.stack([s["logits"] for s in steps])
        worst = float((full[len(prompt) - 1:] - cached).abs().max())
        cache = DecoderCache(model.model.decoder, encoder_hidden)
        rows = [model.model.decoder(torch.tensor([[t]]), cache=cache)[0, -1] for t in prompt + tokens[:-1]]
        worst = max(worst, float((torch.stack(rows) - full).abs().max()))
    return worst


def emulated(model, features, cases, generation, dtype):
    """Every op's output rounded to dtype (weights are already): do the greedy paths survive?"""
    ROUND[0] = lambda x: x.to(dtype).double()
    try:
        with torch.no_grad():
            _, results = run_cases(model, features.double(), cases, generation)
    finally:
        ROUND[0] = lambda x: x
    return [res["generated"] for res in results]


def evaluate(spec, ids, generation, tokenizer):
    """Build the model, run every case; returns everything the files need plus the list of failed criteria."""
    c = spec["config"]
    model = build_model(c, spec["dtype"], spec["seed"], spec["timestamp_scale"], spec["timestamp_shared"])
    features = load_features(c["num_mel_bins"])
    cases = spec["cases"]
    with torch.no_grad():
        encoder_hidden, results = run_cases(model, features.double(), cases, generation)
        prompt = cases[0]["prompt"]
        prompt_logits = model.model.decoder(torch.tensor([prompt]), encoder_hidden)[0]
    why = []
    ts = ids["timestamp_begin"]
    for case, res in zip(cases, results):
        gen, steps = res["generated"], res["steps"]
        res["min_gap"] = min(s["gap"] for s in steps)
        if res["min_gap"] < spec["min_gap"]:
            why.append(f"{case['name']}: top-2 gap {res['min_gap']:.4f}")
        gaps = [abs(g) for s in steps for g in [f[1] for f in s["fired"] if isinstance(f, tuple)]]
        res["min_mass_gap"] = min(gaps) if gaps else None
        if gaps and min(gaps) < spec["min_gap"]:
            why.append(f"{case['name']}: timestamp-mass gap {min(gaps):.4f}")
        if case["timestamps"]:
            stamps = sum(t >= ts for t in gen)
            text = sum(t < ids["eot"] for t in gen)
            forced = sum("forced_timestamp" in s["fired"] for s in steps)
            if stamps < 2 or text < 3 or forced < 1:
                why.append(f"{case['name']}: {stamps} timestamps, {text} text tokens, {forced} forced")
        if any(t in generation["suppress_tokens"] for t in gen):
            why.append(f"{case['name']}: a suppressed token was generated")
    evaluated = {"model": model, "features": features, "encoder_hidden": encoder_hidden, "results": results,
                 "prompt_logits": prompt_logits}
    # the audio matters: 30 s of silence (log-mel -1.5 everywhere) must leave the first case's path early
    silence = torch.full_like(features, -1.5).double()
    with torch.no_grad():
        _, quiet = run_cases(model, silence, cases[:1], generation)
    a, b = results[0]["generated"], quiet[0]["generated"]
    evaluated["silence_diverges_at"] = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    if evaluated["silence_diverges_at"] > 2:
        why.append(f"silence follows the speech path for {evaluated['silence_diverges_at']} tokens")
    if spec["long_form"]:
        evaluated["long_features"], evaluated["long_form"] = long_form(model, generation, ids, tokenizer,
                                                                       spec["long_form"])
        for window in evaluated["long_form"]["windows"]:
            if window["min_top2_gap"] < spec["min_gap"]:
                why.append(f"long-form window {window['seek']}: top-2 gap {window['min_top2_gap']:.4f}")
            flags = [t >= ts for t in window["generated"]]
            if any(a and b for a, b in zip(flags, flags[1:])):  # a pair would move seek (_retrieve_segment)
                why.append(f"long-form window {window['seek']}: a timestamp pair")
    evaluated["f16_same"] = emulated(model, features, cases, generation, torch.float16) == \
        [res["generated"] for res in results]
    if not evaluated["f16_same"]:
        why.append("the float16 emulation picks other tokens")
    return evaluated, why


def long_form(model, generation, ids, tokenizer, max_new_tokens):
    """The sequential long-form loop of generate() (see the module docstring) with the <|notimestamps|> prompt."""
    audio = long_audio()
    features = torch.from_numpy(log_mel_fixtures.log_mel(audio, 80, seconds=None).astype(np.float32))[None]
    max_frames, seek, windows = features.shape[-1], 0, []
    prompt = make_prompt(ids, "en", "transcribe", False, True)
    rules = Rules(generation, False)
    while seek < max_frames:
        count = min(max_frames - seek, 3000)
        segment = torch.zeros(1, 80, 3000)
        segment[..., :count] = features[..., seek:seek + count]
        with torch.no_grad():
            hidden = model.model.encoder(segment.double())
        tokens, steps = greedy(model, hidden, prompt, max_new_tokens, rules)
        kept, _ = hf_returned(prompt, tokens, ids["eot"], ids["timestamp_begin"],
                              is_final=seek + 3000 >= max_frames, short_form=False)
        windows.append({"seek": seek, "frames": [seek, seek + count], "zero_padding_frames": 3000 - count,
                        "prompt": prompt, "generated": tokens, "kept": kept,
                        "min_top2_gap": round(min(s["gap"] for s in steps), 6),
                        "encoder_hidden_mean": [round(float(v), 7) for v in hidden[0].mean(dim=0)]})
        seek += count
    sequences = [t for w in windows for t in w["kept"]]
    return features, {
        "notes": LONG_NOTES, "audio": "jfk.wav at 0 s, fox_16k.wav at 30 s, zeros elsewhere: 720000 samples (45 s)",
        "features": "[80, 4500] (not written: the tests compute it from the audio): the log-mel of the whole 45 s (padding='longest', "
                    "truncation=False: no padding, one max - 8 floor over all 4500 frames)",
        "return_timestamps": False, "condition_on_prev_tokens": False, "max_new_tokens": max_new_tokens,
        "windows": windows, "sequences": sequences, "text": tokenizer.decode(sequences)}


LONG_NOTES = ("Sequential long-form as generation_whisper.py's generate() loop runs it, with the <|notimestamps|> "
              "prompt: seek = 0; while seek < 4500: the window is frames [seek, seek + min(3000, 4500 - seek)) "
              "zero-padded (value 0.0) to 3000, encoded, and greedily decoded from the prompt (condition_on_prev_"
              "tokens false: the same prompt every window); with no timestamp tokens in the output the whole "
              "window is consumed (seek += its frame count). 'kept': a trailing eos is cut from a window that is "
              "not the last (is_not_final), and from any window whose last token is pad_token_id (= eos). "
              "'sequences' concatenates the windows' kept tokens (no prompts). Note: the transformers versions "
              "read refuse long-form input with return_timestamps=False (_set_return_timestamps raises); this is "
              "the loop they run with return_timestamps=True minus the timestamp processor, i.e. what openai-"
              "whisper's transcribe(without_timestamps=True, condition_on_previous_text=False) does.")


def specs():
    base_cases = [
        {"name": "en_transcribe", "language": "en", "task": "transcribe", "timestamps": False},
        {"name": "de_transcribe", "language": "de", "task": "transcribe", "timestamps": False},
        {"name": "de_translate", "language": "de", "task": "translate", "timestamps": False},
        {"name": "en_transcribe_timestamps", "language": "en", "task": "transcribe", "timestamps": True},
    ]
    return [
        {"name": "whisper", "multilingual": True, "merges": 200, "dtype": torch.float16, "torch_dtype": "float16",
         "seed": SEEDS["whisper"], "timestamp_scale": 0.6, "timestamp_shared": 0.4, "min_gap": 0.02,
         "max_new_tokens": 20,
         "shape": dict(n_mels=80, d_model=32, encoder_layers=2, decoder_layers=2, heads=4, ffn=48, max_target=64),
         "cases": base_cases, "long_form": 12},
        {"name": "whisper_en", "multilingual": False, "merges": 160, "dtype": torch.bfloat16,
         "torch_dtype": "bfloat16", "seed": SEEDS["whisper_en"], "timestamp_scale": 0.6, "timestamp_shared": 0.3,
         "min_gap": 0.02,
         "max_new_tokens": 16,
         "shape": dict(n_mels=128, d_model=24, encoder_layers=1, decoder_layers=1, heads=2, ffn=40, max_target=48),
         "cases": [{"name": "transcribe", "language": None, "task": None, "timestamps": False},
                   {"name": "transcribe_timestamps", "language": None, "task": None, "timestamps": True}],
         "long_form": 0},
    ]


SEEDS = {"whisper": 55, "whisper_en": 15}
ORDINARY_SUPPRESS = 2  # how many ordinary tokens the suppress list takes from the first unsuppressed greedy path


def prepare(spec):
    """Tokenizer, ids, the generation config (its ordinary suppressed tokens: '"' and '#' as the Hub's lists
    start, plus the first ORDINARY_SUPPRESS text tokens the model generates for the first case when only the
    specials are suppressed, so that SuppressTokensLogitsProcessor changes the greedy path) and the config."""
    document, files, ids = build_tokenizer(spec["merges"])
    tokenizer = Tokenizer(document)
    shape = spec["shape"]
    for case in spec["cases"]:
        case["prompt"] = make_prompt(ids, case["language"], case["task"], case["timestamps"], spec["multilingual"])
        case["max_new_tokens"] = spec["max_new_tokens"]
    quote, hash_ = tokenizer.vocab['"'], tokenizer.vocab["#"]
    generation = generation_config(ids, spec["multilingual"], shape["max_target"], [quote, hash_])
    config = whisper_config(ids, generation, torch_dtype=spec["torch_dtype"], **shape)
    config["_timestamp_begin"] = ids["timestamp_begin"]
    model = build_model(config, spec["dtype"], spec["seed"], spec["timestamp_scale"], spec["timestamp_shared"])
    with torch.no_grad():
        _, results = run_cases(model, load_features(shape["n_mels"]).double(), spec["cases"][:1], generation)
    extra = []
    for token in results[0]["generated"]:
        if token < ids["eot"] and token not in extra and token not in (quote, hash_):
            extra.append(token)
    generation = generation_config(ids, spec["multilingual"], shape["max_target"],
                                   [quote, hash_] + extra[:ORDINARY_SUPPRESS])
    config = whisper_config(ids, generation, torch_dtype=spec["torch_dtype"], **shape)
    config["_timestamp_begin"] = ids["timestamp_begin"]
    spec["config"] = config
    return document, files, ids, tokenizer, generation


def write_fixture(spec, out_root, document, files, ids, tokenizer, generation):
    evaluated, why = evaluate(spec, ids, generation, tokenizer)
    assert not why, f"{spec['name']} (seed {spec['seed']}): " + "; ".join(why)
    model, features = evaluated["model"], evaluated["features"]
    encoder_hidden, results = evaluated["encoder_hidden"], evaluated["results"]
    cases = spec["cases"]
    report = {}

    # (a) the incremental decoder equals the full-sequence one, along every greedy path
    worst_cache = max(check_incremental(model, encoder_hidden, case["prompt"], res["generated"], res["steps"])
                      for case, res in zip(cases, results))
    assert worst_cache < 1e-10, (spec["name"], worst_cache)
    report["cache vs full"] = worst_cache

    # (b) float32 on the same stored values: encoder states and prompt logits, and the same greedy paths
    single = copy.deepcopy(model).float()
    with torch.no_grad():
        hidden32, results32 = run_cases(single, features, cases, generation)
        logits32 = single.model.decoder(torch.tensor([cases[0]["prompt"]]), hidden32)[0]
    worst_f32 = max(float((hidden32.double() - encoder_hidden).abs().max()),
                    float((logits32.double() - evaluated["prompt_logits"]).abs().max()))
    assert worst_f32 < 1e-4, (spec["name"], worst_f32)
    assert [r32["generated"] for r32 in results32] == [res["generated"] for res in results], spec["name"]
    report["f32 vs f64"] = worst_f32

    # (c) the processors matter: without the suppress lists (or the timestamp rules) the paths differ
    for case, res in zip(cases, results):
        raw = [s["raw_argmax"] for s in res["steps"]]
        res["suppressed_changed_pick"] = sum(a != t for a, t in zip(raw, res["generated"]))

    # (d) float16 emulation (every op's output rounded to f16) picks the same tokens (asserted by evaluate)
    report["f16 emulation same tokens"] = evaluated["f16_same"]

    folder = make_output_dir(os.path.join(out_root, spec["name"]))
    stored = state_dict_as(model, spec["dtype"])
    assert not any(k.startswith("proj_out") for k in stored)
    write_safetensors(os.path.join(folder, "model.safetensors"), stored)
    back = read_safetensors(os.path.join(folder, "model.safetensors"))
    assert sorted(back) == sorted(stored)
    params = dict(model.state_dict())
    for key, tensor in back.items():
        assert tensor.dtype == stored[key].dtype and torch.equal(tensor, stored[key]), key
        assert torch.equal(tensor.double(), params[key]), key  # the reference computed on exactly these values
    config = {k: v for k, v in spec["config"].items() if not k.startswith("_")}
    write_json(os.path.join(folder, "config.json"), config)
    write_json(os.path.join(folder, "generation_config.json"), generation)
    write_json(os.path.join(folder, "preprocessor_config.json"), preprocessor_config(config["num_mel_bins"]))
    write_compact_json(os.path.join(folder, "tokenizer.json"), document)
    for name, contents in files.items():
        if isinstance(contents, str):
            with open(os.path.join(folder, name), "w", encoding="utf-8") as file:
                file.write(contents)
        else:
            write_compact_json(os.path.join(folder, name), contents)
    # The features are not written: the tests compute them from the committed audio (see the docstring).
    save_npy(os.path.join(folder, "encoder_hidden.npy"), encoder_hidden[0].numpy())
    save_npy(os.path.join(folder, "prompt_logits.npy"), evaluated["prompt_logits"].numpy())

    entries = []
    for case, res in zip(cases, results):
        gen = res["generated"]
        returned, _ = hf_returned(case["prompt"], gen, ids["eot"], ids["timestamp_begin"])
        entry = {"name": case["name"], "language": case["language"], "task": case["task"],
                 "timestamps": case["timestamps"], "max_new_tokens": case["max_new_tokens"],
                 "prompt": case["prompt"], "generated": gen,
                 "text": tokenizer.decode(case["prompt"] + gen),
                 "sequence_returned": returned,
                 "min_top2_gap": round(res["min_gap"], 6),
                 "steps_changed_by_processors": res["suppressed_changed_pick"]}
        if case["timestamps"]:
            entry["min_timestamp_mass_gap"] = round(res["min_mass_gap"], 6)
            entry["steps_forced_to_timestamp"] = [i for i, s in enumerate(res["steps"])
                                                  if "forced_timestamp" in s["fired"]]
        entries.append(entry)
    with torch.no_grad():
        first = model.model.decoder(torch.tensor([[ids["sot"]]]), encoder_hidden)[0, -1]
    languages = {token: float(first[i]) for token, i in ids["languages"].items()}
    detected = max(languages, key=lambda t: (languages[t], -ids["languages"][t]))
    document_out = {
        "notes": GENERATION_NOTES,
        "special_ids": {"eos": ids["eot"], "decoder_start": ids["sot"], "languages": ids["languages"],
                        "translate": ids["translate"], "transcribe": ids["transcribe"],
                        "startoflm": ids["startoflm"], "startofprev": ids["startofprev"],
                        "nospeech": ids["nospeech"], "notimestamps": ids["notimestamps"],
                        "timestamp_begin": ids["timestamp_begin"]},
        "prompt_logits_prompt": cases[0]["prompt"],
        "cases": entries,
    }
    if spec["multilingual"]:
        document_out["language_detection"] = {
            "prompt": [ids["sot"]], "language_logits": {k: round(v, 6) for k, v in languages.items()},
            "detected": detected, "notes": "detect_language(): the logits after <|startoftranscript|> with every "
                                           "non-language token masked, argmax (what generate() does when no "
                                           "language is given and the prompt has none)"}
    with open(os.path.join(folder, "generation.json"), "w", encoding="utf-8") as file:
        file.write(compact_id_lists(json.dumps(document_out, indent=2, ensure_ascii=False)) + "\n")

    if spec["long_form"]:
        long_features, long_doc = evaluated["long_features"], evaluated["long_form"]
        del long_features  # computed by the tests from the committed audio, like the window's features
        with open(os.path.join(folder, "long_generation.json"), "w", encoding="utf-8") as file:
            file.write(compact_id_lists(json.dumps(long_doc, indent=2, ensure_ascii=False)) + "\n")
        report["long-form windows"] = [w["generated"] for w in long_doc["windows"]]

    size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
    print(f"{spec['name']}: seed {spec['seed']}, vocab {ids['vocab_size']}, {len(stored)} tensors, {size} bytes; "
          + "; ".join(f"{k} {v:.2e}" if isinstance(v, float) else f"{k} {v}" for k, v in report.items()))
    for entry in entries:
        print(f"  {entry['name']}: prompt {entry['prompt']} -> {entry['generated']} gap {entry['min_top2_gap']}")
    return entries


def compact_id_lists(text):
    """json.dumps(indent=2) puts each id of a list on its own line; put lists of numbers on one line."""
    return re.sub(r"\[\s*((?:-?[\d.e+-]+\s*,\s*)*-?[\d.e+-]+)\s*\]",
                  lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text)


GENERATION_NOTES = (
    "Greedy generate() with the generation config: prompt = [decoder_start, language, task, <|notimestamps|>] "
    "(_retrieve_init_tokens; .en: [decoder_start, <|notimestamps|>]; return_timestamps drops <|notimestamps|>); "
    "the prompt in one decoder call, then one token per call; per step the processors "
    "SuppressTokensAtBegin (begin_suppress_tokens, first generated step only), SuppressTokens (suppress_tokens) "
    "and, with timestamps, WhisperTimeStampLogitsProcessor (begin_index = len(prompt)); argmax, lowest id on ties; "
    "stop after eos or max_new_tokens. 'generated' = the new tokens (eos included if emitted); 'text' = "
    "decode(prompt + generated, skip_special_tokens=True); 'sequence_returned' = what recent generate() returns "
    "for it (prompt kept; a final eos cut because pad_token_id == eos; with timestamp pairs, tokens after the last "
    "pair dropped unless it ends on a single timestamp: generation_whisper.py generate_with_fallback and "
    "_retrieve_segment); 'min_top2_gap' = the smallest top-1 minus top-2 processed score along the path; "
    "'steps_changed_by_processors' = steps whose pick differs from the raw argmax.")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=ROOT)
    parser.add_argument("--search", type=int, default=0, help="try seeds 1..N and print the passing ones")
    parser.add_argument("--only", default="", help="with --search: one fixture's name")
    parser.add_argument("--first", type=int, default=1, help="with --search: the first seed tried")
    parser.add_argument("--verify-determinism", action="store_true",
                        help="also write everything a second time into a temporary folder and compare bytes")
    args = parser.parse_args()
    torch.set_num_threads(1)
    out = os.path.normpath(args.out)
    if args.search:
        for spec in specs():
            if args.only and spec["name"] != args.only:
                continue
            good = []
            for seed in range(args.first, args.first + args.search):
                spec["seed"] = seed
                _, _, ids, tokenizer, generation = prepare(spec)
                evaluated, why = evaluate(spec, ids, generation, tokenizer)
                gens = [res["generated"] for res in evaluated["results"]]
                print(f"{spec['name']} seed {seed}: {'OK' if not why else why}", gens[-1], flush=True)
                if not why:
                    good.append(seed)
            print(spec["name"], "passing seeds:", good, flush=True)
        return
    generate_all(out)
    if args.verify_determinism:
        with tempfile.TemporaryDirectory() as other:
            generate_all(other)
            mismatches = []
            for folder, _, names in os.walk(out):
                for name in names:
                    mine = os.path.join(folder, name)
                    theirs = os.path.join(other, os.path.relpath(mine, out))
                    if not filecmp.cmp(mine, theirs, shallow=False):
                        mismatches.append(os.path.relpath(mine, out))
            assert not mismatches, mismatches
            print("deterministic: a second run wrote byte-identical files")


def generate_all(out):
    make_output_dir(out)
    tokenizers = {}
    for spec in specs():
        document, files, ids, tokenizer, generation = prepare(spec)
        tokenizers[spec["name"]] = (tokenizer, document, ids)
        write_fixture(spec, out, document, files, ids, tokenizer, generation)
    write_goldens(os.path.join(out, "tokenizer_goldens.json"), tokenizers)


if __name__ == "__main__":
    main()
