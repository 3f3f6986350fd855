#!/usr/bin/env python3
"""Golden token ids for tests/test_tokenizer.cpp, from an implementation independent of anvil's C++.

Writes
  tests/data/tokenizers/goldens.json            ids for BERT (bert-base-uncased vocab.txt), GPT-2 (vocab.json +
                                                merges.txt) and the tiny tokenizer.json fixtures below
  tests/data/tokenizer_json/wordpiece_tiny.json a small WordPiece tokenizer.json (BertNormalizer,
                                                BertPreTokenizer, TemplateProcessing, WordPiece decoder, added
                                                tokens special and not)
  tests/data/tokenizer_json/roberta_tiny.json   a small byte-level BPE tokenizer.json (RobertaProcessing, ByteLevel
                                                decoder), its merges learned here from a fixed corpus
  tests/data/tokenizers/roberta_tiny/           the same BPE as vocab.json + merges.txt (the folder fallback)

The BERT side is a port of transformers' tokenization_bert.py (BasicTokenizer + WordpieceTokenizer, using
unicodedata) with two changes that follow the Rust `tokenizers` library, which tokenizer.json users get and anvil
follows: lower-casing is per character (Python's str.lower() would turn a final capital sigma into 'ς'), and
CJK Extension E starts at U+2B920 (bert.rs) instead of U+2B820. Pair truncation ports tokenizers' utils/
truncation.rs (longest_first), not transformers' one-token-at-a-time loop. The GPT-2 side is a port of openai's
gpt-2 src/encoder.py, with the `regex` module (Debian python3-regex) for \\p{L} and \\p{N}; it is imported on first
use, so the BERT side (which text_encoders.py imports) needs the standard library alone.

Deterministic; rerun with `/usr/bin/python3 tools/reference/tokenizer_goldens.py` after changing the sentences.
"""
import functools
import json
import pathlib
import unicodedata

import bpe_training  # beside this file, as for every script here

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
DATA = ROOT / "tests" / "data" / "tokenizers"
SEEDS = ROOT / "tests" / "data" / "tokenizer_json"


# ---- BERT: transformers' BasicTokenizer and WordpieceTokenizer ---------------------------------------------

def load_vocab(path):
    vocab = {}
    with open(path, "r", encoding="utf-8") as reader:
        for index, token in enumerate(reader.readlines()):
            vocab[token.rstrip("\n")] = index
    return vocab


def whitespace_tokenize(text):
    text = text.strip()
    return text.split() if text else []


def _is_whitespace(char):
    if char in (" ", "\t", "\n", "\r"):
        return True
    return unicodedata.category(char) == "Zs"


def _is_control(char):
    if char in ("\t", "\n", "\r"):
        return False
    return unicodedata.category(char).startswith("C")


def _is_punctuation(char):
    cp = ord(char)
    if (33 <= cp <= 47) or (58 <= cp <= 64) or (91 <= cp <= 96) or (123 <= cp <= 126):
        return True
    return unicodedata.category(char).startswith("P")


class BasicTokenizer:
    def __init__(self, do_lower_case=True, never_split=None, tokenize_chinese_chars=True, strip_accents=None):
        self.do_lower_case = do_lower_case
        self.never_split = set(never_split or [])
        self.tokenize_chinese_chars = tokenize_chinese_chars
        self.strip_accents = strip_accents

    def tokenize(self, text):
        text = self._clean_text(text)
        if self.tokenize_chinese_chars:
            text = self._tokenize_chinese_chars(text)
        text = unicodedata.normalize("NFC", text)
        split_tokens = []
        for token in whitespace_tokenize(text):
            if token not in self.never_split:
                if self.do_lower_case:
                    token = "".join(c.lower() for c in token)  # per character, as tokenizers does
                    if self.strip_accents is not False:
                        token = self._run_strip_accents(token)
                elif self.strip_accents:
                    token = self._run_strip_accents(token)
            split_tokens.extend(self._run_split_on_punc(token))
        return whitespace_tokenize(" ".join(split_tokens))

    @staticmethod
    def _run_strip_accents(text):
        return "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")

    def _run_split_on_punc(self, text):
        if text in self.never_split:
            return [text]
        output, start_new_word = [], True
        for char in text:
            if _is_punctuation(char):
                output.append([char])
                start_new_word = True
            else:
                if start_new_word:
                    output.append([])
                start_new_word = False
                output[-1].append(char)
        return ["".join(x) for x in output]

    def _tokenize_chinese_chars(self, text):
        return "".join(f" {c} " if self._is_chinese_char(ord(c)) else c for c in text)

    @staticmethod
    def _is_chinese_char(cp):
        return ((0x4E00 <= cp <= 0x9FFF) or (0x3400 <= cp <= 0x4DBF) or (0x20000 <= cp <= 0x2A6DF)
                or (0x2A700 <= cp <= 0x2B73F) or (0x2B740 <= cp <= 0x2B81F) or (0x2B920 <= cp <= 0x2CEAF)
                or (0xF900 <= cp <= 0xFAFF) or (0x2F800 <= cp <= 0x2FA1F))

    @staticmethod
    def _clean_text(text):
        output = []
        for char in text:
            cp = ord(char)
            if cp == 0 or cp == 0xFFFD or _is_control(char):
                continue
            output.append(" " if _is_whitespace(char) else char)
        return "".join(output)


class WordpieceTokenizer:
    def __init__(self, vocab, unk_token, max_input_chars_per_word=100):
        self.vocab, self.unk_token, self.max_input_chars_per_word = vocab, unk_token, max_input_chars_per_word

    def tokenize(self, text):
        output_tokens = []
        for token in whitespace_tokenize(text):
            chars = list(token)
            if len(chars) > self.max_input_chars_per_word:
                output_tokens.append(self.unk_token)
                continue
            is_bad, start, sub_tokens = False, 0, []
            while start < len(chars):
                end, cur_substr = len(chars), None
                while start < end:
                    substr = "".join(chars[start:end])
                    if start > 0:
                        substr = "##" + substr
                    if substr in self.vocab:
                        cur_substr = substr
                        break
                    end -= 1
                if cur_substr is None:
                    is_bad = True
                    break
                sub_tokens.append(cur_substr)
                start = end
            output_tokens.extend([self.unk_token] if is_bad else sub_tokens)
        return output_tokens


def split_on_tokens(text, specials, lstrip=()):
    """Leftmost-longest split of text on the special tokens (transformers' Trie.split); a token in lstrip takes
    the whitespace before it."""
    pieces, i, pending = [], 0, 0
    while i < len(text):
        best = max((s for s in specials if text.startswith(s, i)), key=len, default=None)
        if best is None:
            i += 1
            continue
        before = text[pending:i]
        if best in lstrip:
            before = before.rstrip()
        if before:
            pieces.append((False, before))
        pieces.append((True, best))
        i += len(best)
        pending = i
    if pending < len(text):
        pieces.append((False, text[pending:]))
    return pieces


def truncate_longest_first(a, b, max_length):
    """tokenizers' utils/truncation.rs, LongestFirst, direction right."""
    if b is None:
        return a[:max_length], None
    n1, n2 = len(a), len(b)
    if n1 + n2 <= max_length:
        return a, b
    swap = n1 > n2
    if swap:
        n1, n2 = n2, n1
    n2 = n1 if n1 > max_length else max(n1, max_length - n1)
    if n1 + n2 > max_length:
        n1 = max_length // 2
        n2 = n1 + max_length % 2
    if swap:
        n1, n2 = n2, n1
    return a[:n1], b[:n2]


class BertTokenizer:
    def __init__(self, vocab, do_lower_case=True, specials=("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"),
                 extra_added=()):
        self.vocab = vocab
        self.inv = {i: t for t, i in vocab.items()}
        self.specials = [s for s in specials if s in vocab]
        self.extra_added = dict(extra_added)  # normalized (lower-cased) added tokens: content -> id
        self.basic = BasicTokenizer(do_lower_case=do_lower_case, never_split=self.specials)
        self.wordpiece = WordpieceTokenizer(vocab, "[UNK]")

    def ids(self, text):
        out = []
        for is_special, piece in split_on_tokens(text, self.specials):
            if is_special:
                out.append(self.vocab[piece])
                continue
            for is_added, part in split_on_tokens(self._normalize(piece), list(self.extra_added)):
                if is_added:
                    out.append(self.extra_added[part])
                    continue
                for token in self.basic.tokenize(part):
                    out.extend(self.vocab[t] for t in self.wordpiece.tokenize(token))
        return out

    def _normalize(self, text):
        """tokenizers' BertNormalizer on the whole text, to find normalized added tokens in."""
        text = self.basic._tokenize_chinese_chars(self.basic._clean_text(text))
        text = "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")
        return "".join(c.lower() for c in text)

    def encode(self, first, second=None, max_length=0, add_special_tokens=True):
        a = self.ids(first)
        b = self.ids(second) if second is not None else None
        added = (3 if b is not None else 2) if add_special_tokens else 0
        if max_length:
            a, b = truncate_longest_first(a, b, max_length - added)
        cls, sep = self.vocab["[CLS]"], self.vocab["[SEP]"]
        if not add_special_tokens:
            ids = a + (b or [])
            return ids, [0] * len(a) + [1] * len(b or []), [0] * len(ids)
        ids = [cls] + a + [sep]
        types = [0] * len(ids)
        mask = [1] + [0] * len(a) + [1]
        if b is not None:
            ids += b + [sep]
            types += [1] * (len(b) + 1)
            mask += [0] * len(b) + [1]
        return ids, types, mask

    def decode(self, ids, skip_special=True):
        """tokenizers' WordPiece decoder (cleanup per token)."""
        tokens = [self.inv[i] for i in ids if not (skip_special and self.inv[i] in self.specials)]
        out = []
        for i, token in enumerate(tokens):
            if i != 0:
                token = token[2:] if token.startswith("##") else " " + token
            for a, b in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                         (" 'm", "'m"), (" do not", " don't"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):
                token = token.replace(a, b)
            out.append(token)
        return "".join(out)


# ---- GPT-2: openai's encoder.py ------------------------------------------------------------------------

def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(2 ** 8):
        if b not in bs:
            bs.append(b)
            cs.append(2 ** 8 + n)
            n += 1
    return dict(zip(bs, [chr(n) for n in cs]))


def get_pairs(word):
    return {(word[i], word[i + 1]) for i in range(len(word) - 1)}


@functools.cache
def gpt2_pattern():
    """openai's pre-tokenizer pattern, compiled on first use (it needs the `regex` module)."""
    import regex
    return regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


class Gpt2Encoder:
    def __init__(self, encoder, bpe_merges, specials=(), add_prefix_space=False, lstrip=()):
        self.encoder = encoder
        self.decoder = {v: k for k, v in encoder.items()}
        self.byte_encoder = bytes_to_unicode()
        self.byte_decoder = {v: k for k, v in self.byte_encoder.items()}
        self.bpe_ranks = dict(zip(bpe_merges, range(len(bpe_merges))))
        self.specials = [s for s in specials if s in encoder]
        self.add_prefix_space = add_prefix_space
        self.lstrip = lstrip

    def bpe(self, token):
        word = tuple(token)
        pairs = get_pairs(word)
        if not pairs:
            return token
        while True:
            bigram = min(pairs, key=lambda pair: self.bpe_ranks.get(pair, float("inf")))
            if bigram not in self.bpe_ranks:
                break
            first, second = bigram
            new_word, i = [], 0
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
            pairs = get_pairs(word)
        return " ".join(word)

    def ids(self, text):
        out = []
        for is_special, piece in split_on_tokens(text, self.specials, self.lstrip):
            if is_special:
                out.append(self.encoder[piece])
                continue
            if self.add_prefix_space and not piece.startswith(" "):
                piece = " " + piece
            for token in gpt2_pattern().findall(piece):
                token = "".join(self.byte_encoder[b] for b in token.encode("utf-8"))
                out.extend(self.encoder[t] for t in self.bpe(token).split(" "))
        return out

    def decode(self, ids):
        text = "".join(self.decoder[i] for i in ids)
        return bytearray([self.byte_decoder[c] for c in text]).decode("utf-8", errors="replace")


def roberta_encode(enc, first, second=None):
    """RobertaProcessing: <s> A </s> and <s> A </s></s> B </s>, every type id 0."""
    cls, sep = enc.encoder["<s>"], enc.encoder["</s>"]
    a = enc.ids(first)
    if second is None:
        ids = [cls] + a + [sep]
        return ids, [0] * len(ids), [1] + [0] * len(a) + [1]
    b = enc.ids(second)
    ids = [cls] + a + [sep, sep] + b + [sep]
    return ids, [0] * len(ids), [1] + [0] * len(a) + [1, 1] + [0] * len(b) + [1]


# ---- the sentences -------------------------------------------------------------------------------------------

BERT_SENTENCES = [
    "i like strawberries",
    "Hello, World!",
    "The quick brown fox jumps over the lazy dog.",
    "café naïve Ångström résumé",
    "cafe\u0301 decomposed",
    "ÀÉÎÕÜ àéîõü ñ ç ß ẞ",
    "北京欢迎你",
    "東京タワーと한국어",
    "emoji 😀 test 🚀!",
    "control\u0000chars\u0007 and\ttabs\nnewlines\r\n",
    "punctuation!!! ... ??? --- (parentheses) [brackets] {braces}",
    "$100.00 & 50% off #hashtag @user ^caret ~tilde `backtick`",
    "a" * 101,
    "b" * 100,
    "MiXeD CaSe WoRdS",
    "Don't stop believin'",
    "e-mail: john.doe@example.com, url: https://example.org/path?q=1",
    "   leading and trailing spaces   ",
    "",
    "Γειά σου Κόσμε, ΟΔΟΣ",
    "Привет, мир!",
    "مرحبا بالعالم",
    "नमस्ते दुनिया",
    "unaffable antidisestablishmentarianism",
    "1234567890 3.14159 1,000,000",
    "[CLS] special tokens [SEP] in text [MASK]",
    "zero\u200bwidth\u200djoiner\ufeffbom",
    "non\u00a0breaking\u2003em\u3000ideographic spaces",
    "ｆｕｌｌｗｉｄｔｈ ＡＢＣ",
    "İstanbul ǅ ﬁ ligature",
    "\ufffdreplacement\ufffd",
    "«quotes» „german“ ‘single’ — dash … ellipsis",
    "É" * 60 + "x" * 41,
    "can't won't I'm",
    "line\u2028separator\u2029paragraph\u0085nel",
]

BERT_PAIRS = [
    ("What is the capital of France?", "Paris is the capital of France."),
    ("short", "a much longer second sentence with many more tokens than the first"),
    ("", "only the second"),
]

BERT_TRUNCATION = [  # (first, second, max_length)
    ("The quick brown fox jumps over the lazy dog.", None, 8),
    ("The quick brown fox jumps over the lazy dog.", None, 2),
    ("What is the capital of France?", "Paris is the capital of France.", 10),
    ("short", "a much longer second sentence with many more tokens than the first", 9),
    ("one two three four five six seven", "eight nine", 7),
    ("What is the capital of France?", "Paris is the capital of France.", 100),
]

GPT2_SENTENCES = [
    "Hello world",
    "a  b   c    d",
    "end   ",
    "line1\n\nline2\n",
    "\tindented\ttext\t\t",
    "I'm he's they're we've you'll I'd",
    "'s's 'S 'LL ''s",
    "cafe\u0301 naïve",
    "北京欢迎你 東京タワー 한국어",
    "👨‍👩‍👧‍👦 family 🇯🇵 flag",
    "\u00a0nbsp\u00a0 and\u3000ideographic",
    "１２３ full-width digits ٣٤٥ Arabic-Indic",
    "Ⅻ roman numeral x²³ superscripts ½",
    "∑∫√∞ ≠ ≤ ≥",
    "<|endoftext|>special in text<|endoftext|>",
    "abc123def 42abc",
    "$$$ ... !!! ???",
    "   leading spaces",
    "\u0001\u007fcontrols\u0000",
    "\u2028line separator\u2029",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 math letters",
    "각 hangul jamo",
    " ",
    "\n",
    "x" * 300,
]

# Decoding single bytes that do not form UTF-8: U+FFFD per maximal invalid subpart, as Python's "replace".
GPT2_BYTE_DECODES = [
    [0xE4, 0xBD],              # truncated 3-byte sequence
    [0xF0, 0x9F, 0x98],        # truncated 4-byte sequence
    [0x80, 0x41],              # lone continuation byte
    [0xC0, 0xAF, 0x41],        # overlong
    [0xED, 0xA0, 0x80],        # surrogate
    [0xF4, 0x90, 0x80, 0x80],  # beyond U+10FFFF
    [0xFF, 0xE2, 0x82, 0xAC],  # invalid byte then a euro sign
]

TINY_CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "hello world, hello there, hello again",
    "tokenizers turn text into tokens and tokens into text",
    "The cat sat on the mat. The dog sat on the log.",
    "she sells sea shells by the sea shore",
]

TINY_SENTENCES = [
    "hello world",
    "The quick brown fox.",
    "tokens and text!",
    "Hello <mask> world",
    "a<mask>b",
    "unseen Zebra 😀",
    "<s>inside</s>",
    "  two  spaces",
]


# ---- the tiny fixtures ---------------------------------------------------------------------------------------

def learn_merges(corpus, count):
    """Plain BPE training over byte-level words; deterministic (ties by the pair itself)."""
    byte_encoder = bytes_to_unicode()
    words = {}
    for line in corpus:
        for token in gpt2_pattern().findall(line):
            word = tuple(byte_encoder[b] for b in token.encode("utf-8"))
            words[word] = words.get(word, 0) + 1
    merges = []
    for _ in range(count):
        counts = {}
        for word, n in words.items():
            for pair in zip(word, word[1:]):
                counts[pair] = counts.get(pair, 0) + n
        if not counts:
            break
        best = min(counts, key=lambda p: (-counts[p], p))
        merges.append(best)
        words = bpe_training.merge_pair(words, best)
    return merges


def tiny_roberta():
    merges = learn_merges(TINY_CORPUS, 60)
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for b in range(256):
        vocab[bytes_to_unicode()[b]] = len(vocab)
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    vocab["<mask>"] = len(vocab)
    added = [{"id": vocab[t], "content": t, "single_word": False, "lstrip": t == "<mask>", "rstrip": False,
              "normalized": False, "special": True} for t in ("<s>", "<pad>", "</s>", "<unk>", "<mask>")]
    document = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0], "trim_offsets": True,
                           "add_prefix_space": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                  "merges": [f"{a} {b}" for a, b in merges]},
    }
    return document, vocab, merges


TINY_WORDPIECE_TOKENS = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list("abcdefghijklmnopqrstuvwxyz.,!?'")
                         + ["##" + c for c in "abcdefghijklmnopqrstuvwxyz"]
                         + ["the", "quick", "brown", "fox", "jump", "##s", "##ed", "##ing", "un", "##aff", "##able",
                            "hello", "world", "cafe", "token", "##izer", "##s", "new", "##tok", "newtok"])


def tiny_wordpiece():
    vocab = {}
    for t in TINY_WORDPIECE_TOKENS:
        vocab.setdefault(t, len(vocab))
    added = [{"id": vocab[t], "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")]
    # A non-special added token matched after normalization: "NEWTOK" in the text lower-cases to it.
    added.append({"id": vocab["newtok"], "content": "newtok", "single_word": False, "lstrip": False,
                  "rstrip": False, "normalized": True, "special": False})
    document = {
        "version": "1.0",
        "truncation": None,
        "padding": {"strategy": "BatchLongest", "direction": "Right", "pad_to_multiple_of": None, "pad_id": 0,
                    "pad_type_id": 0, "pad_token": "[PAD]"},
        "added_tokens": added,
        "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                       "strip_accents": None, "lowercase": True},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
            "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [vocab["[CLS]"]], "tokens": ["[CLS]"]},
                               "[SEP]": {"id": "[SEP]", "ids": [vocab["[SEP]"]], "tokens": ["[SEP]"]}}},
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": vocab},
    }
    return document, vocab


TINY_WORDPIECE_SENTENCES = [
    "The quick brown fox jumped!",
    "Unaffable tokenizers",
    "Café, hello world?",
    "NEWTOK and newtoks",
    "[CLS] zebra [MASK]",
    "xyz 123",
    "jumping",
]


def bert_case(tok, first, second=None, max_length=0):
    ids, types, mask = tok.encode(first, second, max_length)
    case = {"text": first, "ids": ids, "type_ids": types, "special_tokens_mask": mask}
    if second is not None:
        case["pair"] = second
    if max_length:
        case["max_length"] = max_length
    case["decoded"] = tok.decode(ids)
    return case


def main():
    bert = BertTokenizer(load_vocab(DATA / "bert-base-uncased" / "vocab.txt"))
    goldens = {"bert": [bert_case(bert, s) for s in BERT_SENTENCES]}
    assert goldens["bert"][0]["ids"] == [101, 1045, 2066, 13137, 20968, 102]
    goldens["bert_pairs"] = [bert_case(bert, a, b) for a, b in BERT_PAIRS]
    goldens["bert_truncation"] = [bert_case(bert, a, b, n) for a, b, n in BERT_TRUNCATION]
    goldens["bert_no_special"] = [{"text": s, "ids": bert.ids(s)} for s in BERT_SENTENCES[:4]]

    with open(DATA / "gpt2" / "vocab.json", encoding="utf-8") as f:
        encoder = json.load(f)
    with open(DATA / "gpt2" / "merges.txt", encoding="utf-8") as f:
        merges = [tuple(line.split()) for line in f.read().split("\n")[1:-1]]
    gpt2 = Gpt2Encoder(encoder, merges, specials=["<|endoftext|>"])
    goldens["gpt2"] = [{"text": s, "ids": gpt2.ids(s)} for s in GPT2_SENTENCES]
    prefixed = Gpt2Encoder(encoder, merges, specials=["<|endoftext|>"], add_prefix_space=True)
    goldens["gpt2_prefix_space"] = [{"text": s, "ids": prefixed.ids(s)} for s in GPT2_SENTENCES if s]
    byte_ids = {b: encoder[c] for b, c in bytes_to_unicode().items()}
    goldens["gpt2_byte_decodes"] = [{"ids": [byte_ids[b] for b in bs], "text": bytes(bs).decode("utf-8", "replace")}
                                    for bs in GPT2_BYTE_DECODES]

    document, vocab, tiny_merges = tiny_roberta()
    SEEDS.mkdir(parents=True, exist_ok=True)
    (SEEDS / "roberta_tiny.json").write_text(json.dumps(document, ensure_ascii=False, indent=1) + "\n",
                                             encoding="utf-8")
    folder = DATA / "roberta_tiny"
    folder.mkdir(exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False) + "\n", encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in tiny_merges),
                                       encoding="utf-8")
    tiny = Gpt2Encoder(vocab, tiny_merges, specials=["<s>", "<pad>", "</s>", "<unk>", "<mask>"], lstrip=["<mask>"])
    special_ids = {vocab[t] for t in ("<s>", "<pad>", "</s>", "<unk>", "<mask>")}
    cases = []
    for s in TINY_SENTENCES:
        ids, types, mask = roberta_encode(tiny, s)
        cases.append({"text": s, "ids": ids, "type_ids": types, "special_tokens_mask": mask,
                      "decoded": tiny.decode([i for i in ids if i not in special_ids])})
    ids, types, mask = roberta_encode(tiny, TINY_SENTENCES[0], TINY_SENTENCES[1])
    cases.append({"text": TINY_SENTENCES[0], "pair": TINY_SENTENCES[1], "ids": ids, "type_ids": types,
                  "special_tokens_mask": mask})
    goldens["roberta_tiny"] = cases

    document, vocab = tiny_wordpiece()
    (SEEDS / "wordpiece_tiny.json").write_text(json.dumps(document, ensure_ascii=False, indent=1) + "\n",
                                               encoding="utf-8")
    tiny_bert = BertTokenizer(vocab, extra_added={"newtok": vocab["newtok"]})
    goldens["wordpiece_tiny"] = [bert_case(tiny_bert, s) for s in TINY_WORDPIECE_SENTENCES]
    goldens["wordpiece_tiny"].append(bert_case(tiny_bert, TINY_WORDPIECE_SENTENCES[0], TINY_WORDPIECE_SENTENCES[1]))

    (DATA / "goldens.json").write_text(json.dumps(goldens, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
