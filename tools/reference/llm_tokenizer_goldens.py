#!/usr/bin/env python3
"""Golden token ids for tests/test_llm_tokenizers.cpp (Llama-3, Qwen3 and Mistral tokenizer.json files), from a
Python implementation of Hugging Face `tokenizers` written from its Rust sources, independent of anvil's C++:
  - added tokens split out of the raw text first, leftmost-longest (tokenizer/added_vocabulary.rs; these files
    use no lstrip/rstrip/single_word and only normalized=false tokens);
  - normalizers NFC (unicodedata), Prepend, Replace (String), Sequence (normalizers/{unicode,prepend,replace}.rs);
  - pre-tokenizers Split (behavior Isolated) with the regex itself run by the `regex` module (Debian
    python3-regex: \\p{L}, \\p{N}, lookahead, (?i:...)), ByteLevel (use_regex false), Metaspace, Sequence;
  - the BPE model: characters to ids, byte_fallback <0xAB> tokens, unk and fuse_unk, ignore_merges, merges by
    rank, lowest rank first and leftmost among equals (models/bpe/{model,word}.rs);
  - TemplateProcessing's single template, and the decoders ByteLevel, Replace, ByteFallback, Fuse, Strip,
    Metaspace, Sequence (decoders/*.rs), with special tokens skipped.

Writes
  tests/data/llm_tokenizers/goldens.json        per tokenizer: for each text its ids (add_special_tokens=True)
                                                and decode(ids, skip_special_tokens=True)
  tests/data/llm_tokenizers/qwen3.tar.xz        qwen3/tokenizer.json + tokenizer_config.json (Apache-2.0)
  tests/data/llm_tokenizers/mistral.tar.xz      mistral/tokenizer.json + tokenizer_config.json (Apache-2.0)
Llama-3's files (Llama 3 Community License) are read but never written to the repository; only the golden ids.

Rerun: /usr/bin/python3 tools/reference/llm_tokenizer_goldens.py [ASSETS_DIR]
(default ASSETS_DIR /work/shared/assets/tokenizers, holding llama3/, qwen3/, mistral/). Deterministic: the
archives have fixed times, owners and order.
"""
import io
import json
import lzma
import pathlib
import sys
import tarfile
import unicodedata

import regex

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
OUT = ROOT / "tests" / "data" / "llm_tokenizers"
NAMES = ["llama3", "qwen3", "mistral"]
COMMITTED = ["qwen3", "mistral"]

TEXTS = [
    "Hello world",
    "Hello, world! How are you today?",
    "The quick brown fox jumps over the lazy dog.",
    " leading space",
    "trailing space ",
    "multiple   spaces    between words",
    "tabs\tand\ttabs\t\tdouble",
    "line one\nline two\n\nline four\r\nwindows",
    "\n\n\nstarts with newlines",
    "ends with spaces and newline   \n",
    "DON'T SHOUT, it's fine, we'll see, they're here, I've, I'm, he'd",
    "it'S a CAT'LL be O'Neil's",
    "Numbers: 1234567 and 3.14159 and 1,000,000 and 42",
    "x = 12345678901234567890",
    "def foo(bar):\n    return bar * 2  # double\n",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "    indented code\n\tand a tab",
    "你好，世界！今天天气很好。",
    "日本語のテキストとカタカナ、ひらがな。",
    "안녕하세요 세계",
    "\u1100\u1161\u11a8 jamo composes to a syllable under NFC",
    "مرحبا بالعالم",
    "Привет, мир! Ёлка",
    "Emoji: 👍🏽 🎉 👨‍👩‍👧 ❤️ 🦀",
    "caf\u00e9 vs cafe\u0301 and na\u0308ive",
    "e\u0301\u0323 stacked marks o\u0323\u0302",
    "Ǆemal ǅ ǆ title case",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<s> text between </s> specials",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>",
    "a<s>b</s>c",
    "<|endoftext|>",
    "",
    " ",
    "   ",
    "\u00a0non-breaking\u00a0spaces\u3000ideographic",
    "punctuation!!! ??? ... --- ;;; ''' \"quoted\"",
    "URL: https://example.com/path?query=1&x=y#frag",
    "mixed123abc456def 7890",
    "ſ long s: it'ſ here",
    "Ünïcödé ẞ straße ΣΊΣΥΦΟΣ",
    "rare bytes: \u0007 bell and \u001b escape",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 math letters and 𠀀 ext-B",
]


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE_TO_CHAR = bytes_to_unicode()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}


class Tokenizer:
    def __init__(self, document):
        self.doc = document
        model = document["model"]
        assert model["type"] == "BPE"
        self.vocab = model["vocab"]
        self.id_to_token = {i: t for t, i in self.vocab.items()}
        self.byte_fallback = bool(model.get("byte_fallback"))
        self.fuse_unk = bool(model.get("fuse_unk"))
        self.ignore_merges = bool(model.get("ignore_merges"))
        self.unk = model.get("unk_token")
        self.prefix = model.get("continuing_subword_prefix") or ""
        self.suffix = model.get("end_of_word_suffix") or ""
        assert not self.prefix and not self.suffix
        self.merges = {}
        for rank, merge in enumerate(model["merges"]):
            a, b = merge.split(" ") if isinstance(merge, str) else merge
            self.merges[(self.vocab[a], self.vocab[b])] = (rank, self.vocab[a + b])
        self.added = []
        self.special = set()
        for token in document["added_tokens"]:
            assert not token["lstrip"] and not token["rstrip"] and not token["single_word"]
            assert not token["normalized"]
            self.added.append((token["content"], token["id"]))
            self.id_to_token[token["id"]] = token["content"]
            if token["special"]:
                self.special.add(token["id"])

    # ---- added tokens: leftmost, then longest --------------------------------------------------------------
    def split_added(self, text):
        pieces, pending, at = [], 0, 0
        while at < len(text):
            best = None
            for content, token_id in self.added:
                if text.startswith(content, at) and (best is None or len(content) > len(best[0])):
                    best = (content, token_id)
            if best is None:
                at += 1
                continue
            if at > pending:
                pieces.append(text[pending:at])
            pieces.append(best[1])
            at += len(best[0])
            pending = at
        if pending < len(text):
            pieces.append(text[pending:])
        return pieces

    # ---- normalizers ---------------------------------------------------------------------------------------
    def normalize(self, n, text):
        if n is None:
            return text
        kind = n["type"]
        if kind == "NFC":
            return unicodedata.normalize("NFC", text)
        if kind == "Prepend":
            return n["prepend"] + text if text else text
        if kind == "Replace":
            return text.replace(n["pattern"]["String"], n["content"])
        if kind == "Sequence":
            for stage in n["normalizers"]:
                text = self.normalize(stage, text)
            return text
        raise ValueError(kind)

    # ---- pre-tokenizers (at_start: HF's offsets_original().0 == 0) -----------------------------------------
    def pre_tokenize(self, p, words):
        if p is None:
            return words
        kind = p["type"]
        if kind == "Sequence":
            for stage in p["pretokenizers"]:
                words = self.pre_tokenize(stage, words)
            return words
        out = []
        for word, at_start in words:
            if kind == "Split":
                assert p["behavior"] == "Isolated" and not p["invert"]
                pattern = regex.compile(p["pattern"]["Regex"])
                last = 0
                for i, m in enumerate(pattern.finditer(word)):
                    if m.start() > last:
                        out.append((word[last:m.start()], at_start and last == 0))
                    if m.end() > m.start():
                        out.append((m.group(), at_start and m.start() == 0))
                    last = m.end()
                if last < len(word):
                    out.append((word[last:], at_start and last == 0))
            elif kind == "ByteLevel":
                assert not p["use_regex"] and not p["add_prefix_space"]
                out.append(("".join(BYTE_TO_CHAR[b] for b in word.encode("utf-8")), at_start))
            elif kind == "Metaspace":
                rep = p.get("replacement", "\u2581")
                word = word.replace(" ", rep)
                scheme = p.get("prepend_scheme", "always")
                if (scheme == "always" or (scheme == "first" and at_start)) and not word.startswith(rep):
                    word = rep + word
                if not p.get("split", True):
                    out.append((word, at_start))
                    continue
                begin = 0
                for i, c in enumerate(word):
                    if c == rep and i > begin:
                        out.append((word[begin:i], at_start and begin == 0))
                        begin = i
                out.append((word[begin:], at_start and begin == 0))
            else:
                raise ValueError(kind)
        return [(w, s) for w, s in out if w]

    # ---- BPE ----------------------------------------------------------------------------------------------
    def bpe(self, word):
        if self.ignore_merges and word in self.vocab:
            return [self.vocab[word]]
        symbols, unk = [], None  # unk: the pending unknown run, as merge_word keeps it
        for ch in word:
            if ch in self.vocab:
                if unk is not None:
                    symbols.append(unk)
                    unk = None
                symbols.append(self.vocab[ch])
                continue
            if self.byte_fallback:
                names = ["<0x%02X>" % b for b in ch.encode("utf-8")]
                if all(name in self.vocab for name in names):
                    symbols.extend(self.vocab[name] for name in names)
                    continue
            if self.unk is not None:
                if unk is not None and not self.fuse_unk:
                    symbols.append(unk)
                unk = self.vocab[self.unk]
        if unk is not None:
            symbols.append(unk)
        while True:
            best = None
            for i in range(len(symbols) - 1):
                found = self.merges.get((symbols[i], symbols[i + 1]))
                if found is not None and (best is None or found[0] < best[0]):
                    best = (found[0], i, found[1])
            if best is None:
                return symbols
            _, i, merged = best
            symbols[i:i + 2] = [merged]

    def encode(self, text):
        ids = []
        for piece in self.split_added(text):
            if isinstance(piece, int):
                ids.append(piece)
                continue
            normalized = self.normalize(self.doc.get("normalizer"), piece)
            at_start = text.startswith(piece)  # the segment begins the input
            for word, _ in self.pre_tokenize(self.doc.get("pre_tokenizer"), [(normalized, at_start)]):
                ids.extend(self.bpe(word))
        post = self.doc.get("post_processor")
        if post and post["type"] == "TemplateProcessing":
            result = []
            for item in post["single"]:
                if "Sequence" in item:
                    result.extend(ids)
                else:
                    result.extend(post["special_tokens"][item["SpecialToken"]["id"]]["ids"])
            ids = result
        else:
            assert post is None or post["type"] == "ByteLevel"
        return ids

    # ---- decoders -----------------------------------------------------------------------------------------
    def run_decoder(self, d, tokens):
        kind = d["type"]
        if kind == "Sequence":
            for stage in d["decoders"]:
                tokens = self.run_decoder(stage, tokens)
            return tokens
        if kind == "ByteLevel":
            data = bytearray()
            for token in tokens:
                if all(c in CHAR_TO_BYTE for c in token):
                    data.extend(CHAR_TO_BYTE[c] for c in token)
                else:
                    data.extend(token.encode("utf-8"))
            return [data.decode("utf-8", errors="replace")]
        if kind == "Replace":
            return [t.replace(d["pattern"]["String"], d["content"]) for t in tokens]
        if kind == "ByteFallback":
            out, pending = [], []

            def flush():
                if pending:
                    try:
                        out.append(bytes(pending).decode("utf-8"))
                    except UnicodeDecodeError:
                        out.extend(["\ufffd"] * len(pending))
                    pending.clear()
            for t in tokens:
                m = regex.fullmatch(r"<0x([0-9A-Fa-f]{2})>", t)
                if m:
                    pending.append(int(m.group(1), 16))
                else:
                    flush()
                    out.append(t)
            flush()
            return out
        if kind == "Fuse":
            return ["".join(tokens)]
        if kind == "Strip":
            out = []
            for t in tokens:
                begin, end = 0, len(t)
                for i in range(min(d["start"], len(t))):
                    if t[i] != d["content"]:
                        break
                    begin = i + 1
                for i in range(min(d["stop"], len(t) - begin)):
                    if t[len(t) - i - 1] != d["content"]:
                        break
                    end = len(t) - i - 1
                out.append(t[begin:end])
            return out
        if kind == "Metaspace":
            rep = d.get("replacement", "\u2581")
            keep = d.get("prepend_scheme", "always") == "never"
            return [t.replace(rep, " " if i > 0 or keep else "") for i, t in enumerate(tokens)]
        raise ValueError(kind)

    def decode(self, ids):
        tokens = [self.id_to_token[i] for i in ids if i not in self.special]
        d = self.doc.get("decoder")
        return "".join(self.run_decoder(d, tokens) if d else tokens)


def tar_xz(name, folder):
    """qwen3/tokenizer.json and qwen3/tokenizer_config.json, xz -9e, reproducible."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for file in ["tokenizer.json", "tokenizer_config.json"]:
            data = (folder / file).read_bytes()
            info = tarfile.TarInfo(f"{name}/{file}")
            info.size, info.mtime, info.mode, info.uid, info.gid = len(data), 0, 0o644, 0, 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    return lzma.compress(raw.getvalue(), format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64,
                         preset=9 | lzma.PRESET_EXTREME)


def main():
    assets = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "/work/shared/assets/tokenizers")
    OUT.mkdir(parents=True, exist_ok=True)
    goldens = {"texts": TEXTS, "tokenizers": {}}
    for name in NAMES:
        document = json.loads((assets / name / "tokenizer.json").read_text(encoding="utf-8"))
        tok = Tokenizer(document)
        entries = []
        for text in TEXTS:
            ids = tok.encode(text)
            entries.append({"ids": ids, "decoded": tok.decode(ids)})
        goldens["tokenizers"][name] = entries
    with open(OUT / "goldens.json", "w", encoding="utf-8") as f:
        json.dump(goldens, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")
    for name in COMMITTED:
        (OUT / f"{name}.tar.xz").write_bytes(tar_xz(name, assets / name))


if __name__ == "__main__":
    main()
