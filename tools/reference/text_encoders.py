#!/usr/bin/python3
"""PyTorch reference for anvil's text encoders: BERT, RoBERTa, XLM-R, MPNet and DistilBERT, the
sentence-transformers pooling and normalisation, and the cross-encoder classification heads.

The models are plain-PyTorch ports written from Hugging Face's modeling_bert.py, modeling_roberta.py
(XLM-R is RoBERTa's architecture with model_type "xlm-roberta"), modeling_mpnet.py and modeling_distilbert.py,
with HF's module names so that state_dict() gives HF's tensor names; pooling follows sentence-transformers'
models/Pooling.py (mean: sum of the masked tokens / max(count, 1e-9); cls: token 0; max: padding set to -1e9)
and models/Normalize.py (F.normalize, p=2). Weights are seeded and random (hf_format.randomize), rounded to the
stored dtype, and the expected outputs are computed in float64 on exactly the stored values, each text alone
(no padding): a padded batch in anvil must give the same result.

Writes tests/data/text_encoders/<name>/ (or under --out DIR) for each fixture:

  config.json, model.safetensors       the model folder (HF names, with the prefix HF's class uses)
  modules.json, 1_Pooling/config.json  sentence encoders: the sentence-transformers modules
  vocab.txt, tokenizer.json,           bert_sentence and bert_cross: a tiny WordPiece vocabulary; texts.json,
    tokenizer_config.json                texts (bert_cross: [first, second] pairs); text_ids.npy,
                                         text_type_ids.npy, text_lengths.npy their ids (BertTokenizer's basic
                                         and WordPiece steps, tokenizer_goldens.py's port, padded with 0);
                                         text_embeddings.npy (bert_sentence) or text_logits.npy (bert_cross)
  ids.npy, type_ids.npy                int32 [N, L]: the token ids of N texts, right-padded with the pad id
  lengths.npy                          int32 [N]: each text's length
  hidden.npy                           f32 [sum(lengths), D] sentence encoders: the last hidden states of the
                                       texts one after another (text i's rows follow text i - 1's)
  mean.npy, cls.npy, max.npy           f32 [N, D] sentence encoders: each pooling, not normalised
  embeddings.npy                       f32 [N, D] sentence encoders: what encode() gives by default (the
                                       folder's pooling, normalised when modules.json has Normalize)
  logits.npy                           f32 [N, C] cross-encoders: the classification head's logits

Rerun (deterministic, seeded): /usr/bin/python3 tools/reference/text_encoders.py
Standard library + numpy + torch only.
"""

import argparse
import math
import os
import sys

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_format  # noqa: E402
import tokenizer_goldens  # noqa: E402

MASK_MIN = float(torch.finfo(torch.float32).min)


def probability(c, key, default):
    """A dropout probability from the config, the class default when absent or null."""
    value = c.get(key)
    return default if value is None else float(value)


def hidden_dropout(c):
    return probability(c, "hidden_dropout_prob", 0.1)


def activation(name):
    if name == "gelu":
        return lambda x: nn.functional.gelu(x)
    if name == "gelu_new":
        return lambda x: 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
    if name == "relu":
        return nn.functional.relu
    raise ValueError(name)


# ---------------------------------------------------------------------------------------------------------------
# BERT and RoBERTa (modeling_bert.py, modeling_roberta.py); MPNet's layer differs only in its names.

class SelfAttention(nn.Module):
    """BertSelfAttention (query/key/value) or MPNetSelfAttention (q/k/v/o): scores / sqrt(d) + bias + mask, softmax,
    dropout (attention_probs_dropout_prob)."""

    def __init__(self, hidden, heads, names, dropout=0.0):
        super().__init__()
        self.heads, self.head_size, self.names = heads, hidden // heads, names
        for name in names:
            setattr(self, name, nn.Linear(hidden, hidden))
        self.dropout = hf_format.Dropout(dropout)

    def split(self, x):
        return x.view(x.shape[0], x.shape[1], self.heads, self.head_size).permute(0, 2, 1, 3)

    def forward(self, x, mask, bias=None):
        q, k, v = (self.split(getattr(self, n)(x)) for n in self.names[:3])
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_size)
        if bias is not None:
            scores = scores + bias
        scores = scores + mask
        context = torch.matmul(self.dropout(torch.softmax(scores, dim=-1)), v).permute(0, 2, 1, 3).contiguous()
        context = context.view(x.shape[0], x.shape[1], -1)
        return getattr(self, self.names[3])(context) if len(self.names) == 4 else context


class DenseNorm(nn.Module):  # BertSelfOutput / BertOutput: LayerNorm(dropout(dense(x)) + residual)
    def __init__(self, inner, hidden, eps, dropout=0.0):
        super().__init__()
        self.dense = nn.Linear(inner, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=eps)
        self.dropout = hf_format.Dropout(dropout)

    def forward(self, x, residual):
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class BertAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self = SelfAttention(c["hidden_size"], c["num_attention_heads"], ("query", "key", "value"),
                                  probability(c, "attention_probs_dropout_prob", 0.1))
        self.output = DenseNorm(c["hidden_size"], c["hidden_size"], c["layer_norm_eps"], hidden_dropout(c))

    def forward(self, x, mask, bias=None):
        return self.output(self.self(x, mask), x)


class MPNetAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attn = SelfAttention(c["hidden_size"], c["num_attention_heads"], ("q", "k", "v", "o"),
                                  probability(c, "attention_probs_dropout_prob", 0.1))
        self.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])
        self.dropout = hf_format.Dropout(hidden_dropout(c))

    def forward(self, x, mask, bias=None):
        return self.LayerNorm(self.dropout(self.attn(x, mask, bias)) + x)


class Intermediate(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c["hidden_size"], c["intermediate_size"])
        self.act = activation(c["hidden_act"])

    def forward(self, x):
        return self.act(self.dense(x))


class Layer(nn.Module):
    def __init__(self, c, attention):
        super().__init__()
        self.attention = attention(c)
        self.intermediate = Intermediate(c)
        self.output = DenseNorm(c["intermediate_size"], c["hidden_size"], c["layer_norm_eps"], hidden_dropout(c))

    def forward(self, x, mask, bias=None):
        a = self.attention(x, mask, bias)
        return self.output(self.intermediate(a), a)


class Embeddings(nn.Module):
    def __init__(self, c, token_types):
        super().__init__()
        self.word_embeddings = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.position_embeddings = nn.Embedding(c["max_position_embeddings"], c["hidden_size"])
        if token_types:
            self.token_type_embeddings = nn.Embedding(c["type_vocab_size"], c["hidden_size"])
        self.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])
        self.dropout = hf_format.Dropout(hidden_dropout(c))

    def forward(self, ids, types, positions):
        e = self.word_embeddings(ids) + self.position_embeddings(positions)
        if hasattr(self, "token_type_embeddings"):
            e = e + self.token_type_embeddings(types)
        return self.dropout(self.LayerNorm(e))


class Pooler(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)

    def forward(self, h):
        return torch.tanh(self.dense(h[:, 0]))


def roberta_positions(ids, padding_idx):
    """create_position_ids_from_input_ids: non-padding tokens count from padding_idx + 1."""
    mask = ids.ne(padding_idx).int()
    return (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + padding_idx


def relative_position_bucket(relative_position, num_buckets=32, max_distance=128):
    """MPNetEncoder.relative_position_bucket, verbatim."""
    ret = 0
    n = -relative_position
    num_buckets //= 2
    ret += (n < 0).to(torch.long) * num_buckets
    n = torch.abs(n)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    val_if_large = max_exact + (
        torch.log(n.float() / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    ).to(torch.long)
    val_if_large = torch.min(val_if_large, torch.full_like(val_if_large, num_buckets - 1))
    ret += torch.where(is_small, n, val_if_large)
    return ret


class Encoder(nn.Module):
    def __init__(self, c, attention, relative_buckets=0):
        super().__init__()
        self.layer = nn.ModuleList([Layer(c, attention) for _ in range(c["num_hidden_layers"])])
        if relative_buckets:
            self.relative_attention_bias = nn.Embedding(relative_buckets, c["num_attention_heads"])

    def forward(self, x, mask):
        bias = None
        if hasattr(self, "relative_attention_bias"):  # MPNetEncoder.compute_position_bias (num_buckets=32)
            s = x.shape[1]
            position = torch.arange(s, dtype=torch.long)
            bucket = relative_position_bucket(position[None, :] - position[:, None], num_buckets=32)
            bias = self.relative_attention_bias(bucket).permute([2, 0, 1]).unsqueeze(0)
        for layer in self.layer:
            x = layer(x, mask, bias)
        return x


class TextModel(nn.Module):
    """BertModel, RobertaModel / XLMRobertaModel or MPNetModel."""

    def __init__(self, c, family, pooler=True):
        super().__init__()
        self.family, self.c = family, c
        self.embeddings = Embeddings(c, token_types=family != "mpnet")
        if family == "mpnet":
            self.encoder = Encoder(c, MPNetAttention, c["relative_attention_num_buckets"])
        else:
            self.encoder = Encoder(c, BertAttention)
        if pooler:
            self.pooler = Pooler(c["hidden_size"])

    def forward(self, ids, types, mask):
        if self.family == "bert":
            positions = torch.arange(ids.shape[1])[None, :].expand_as(ids)
        else:  # RoBERTa's padding_idx is pad_token_id; MPNet's is always 1
            positions = roberta_positions(ids, 1 if self.family == "mpnet" else self.c["pad_token_id"])
        extended = (1.0 - mask[:, None, None, :].to(torch.float64)) * MASK_MIN
        return self.encoder(self.embeddings(ids, types, positions), extended)


# ---------------------------------------------------------------------------------------------------------------
# DistilBERT (modeling_distilbert.py): its own names, no token types, LayerNorm eps 1e-12.

class DistilAttention(nn.Module):  # MultiHeadSelfAttention: dropout on the probabilities, none after out_lin
    def __init__(self, dim, heads, dropout=0.0):
        super().__init__()
        self.heads = heads
        self.q_lin, self.k_lin, self.v_lin, self.out_lin = (nn.Linear(dim, dim) for _ in range(4))
        self.dropout = hf_format.Dropout(dropout)

    def forward(self, x, mask):
        bs, s, dim = x.shape
        d = dim // self.heads

        def shape(t):
            return t.view(bs, -1, self.heads, d).transpose(1, 2)

        q = shape(self.q_lin(x)) / math.sqrt(d)
        scores = torch.matmul(q, shape(self.k_lin(x)).transpose(2, 3))
        scores = scores.masked_fill((mask == 0).view(bs, 1, 1, s).expand_as(scores), torch.finfo(scores.dtype).min)
        context = torch.matmul(self.dropout(torch.softmax(scores, dim=-1)), shape(self.v_lin(x)))
        return self.out_lin(context.transpose(1, 2).contiguous().view(bs, -1, dim))


class FFN(nn.Module):
    def __init__(self, dim, hidden, act, dropout=0.0):
        super().__init__()
        self.lin1, self.lin2, self.act = nn.Linear(dim, hidden), nn.Linear(hidden, dim), activation(act)
        self.dropout = hf_format.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.lin2(self.act(self.lin1(x))))


class TransformerBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attention = DistilAttention(c["dim"], c["n_heads"], probability(c, "attention_dropout", 0.1))
        self.sa_layer_norm = nn.LayerNorm(c["dim"], eps=1e-12)
        self.ffn = FFN(c["dim"], c["hidden_dim"], c["activation"], probability(c, "dropout", 0.1))
        self.output_layer_norm = nn.LayerNorm(c["dim"], eps=1e-12)

    def forward(self, x, mask):
        a = self.sa_layer_norm(self.attention(x, mask) + x)
        return self.output_layer_norm(self.ffn(a) + a)


class DistilEmbeddings(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.word_embeddings = nn.Embedding(c["vocab_size"], c["dim"])
        self.position_embeddings = nn.Embedding(c["max_position_embeddings"], c["dim"])
        self.LayerNorm = nn.LayerNorm(c["dim"], eps=1e-12)
        self.dropout = hf_format.Dropout(probability(c, "dropout", 0.1))

    def forward(self, ids):
        positions = torch.arange(ids.shape[1])[None, :]
        return self.dropout(self.LayerNorm(self.word_embeddings(ids) + self.position_embeddings(positions)))


class Transformer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.layer = nn.ModuleList([TransformerBlock(c) for _ in range(c["n_layers"])])


class DistilBertModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embeddings = DistilEmbeddings(c)
        self.transformer = Transformer(c)

    def forward(self, ids, types, mask):
        x = self.embeddings(ids)
        for layer in self.transformer.layer:
            x = layer(x, mask)
        return x


# ---------------------------------------------------------------------------------------------------------------
# Sequence-classification heads, under the attribute names HF's *ForSequenceClassification classes use.

class BertForSequenceClassification(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.bert = TextModel(c, "bert", pooler=True)
        self.dropout = hf_format.Dropout(probability(c, "classifier_dropout", hidden_dropout(c)))
        self.classifier = nn.Linear(c["hidden_size"], c["num_labels"])

    def forward(self, ids, types, mask):
        return self.classifier(self.dropout(self.bert.pooler(self.bert(ids, types, mask))))


class ClassificationHead(nn.Module):  # RobertaClassificationHead, MPNetClassificationHead
    def __init__(self, hidden, labels, dropout=0.0):
        super().__init__()
        self.dense, self.out_proj = nn.Linear(hidden, hidden), nn.Linear(hidden, labels)
        self.dropout = hf_format.Dropout(dropout)

    def forward(self, h):
        return self.out_proj(self.dropout(torch.tanh(self.dense(self.dropout(h[:, 0, :])))))


class RobertaForSequenceClassification(nn.Module):  # also XLMRobertaForSequenceClassification
    def __init__(self, c):
        super().__init__()
        self.roberta = TextModel(c, "roberta", pooler=False)
        self.classifier = ClassificationHead(c["hidden_size"], c["num_labels"],
                                             probability(c, "classifier_dropout", hidden_dropout(c)))

    def forward(self, ids, types, mask):
        return self.classifier(self.roberta(ids, types, mask))


class MPNetForSequenceClassification(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.mpnet = TextModel(c, "mpnet", pooler=False)
        self.classifier = ClassificationHead(c["hidden_size"], c["num_labels"], hidden_dropout(c))

    def forward(self, ids, types, mask):
        return self.classifier(self.mpnet(ids, types, mask))


class DistilBertForSequenceClassification(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.distilbert = DistilBertModel(c)
        self.pre_classifier = nn.Linear(c["dim"], c["dim"])
        self.dropout = hf_format.Dropout(probability(c, "seq_classif_dropout", 0.2))
        self.classifier = nn.Linear(c["dim"], c["num_labels"])

    def forward(self, ids, types, mask):
        h = self.distilbert(ids, types, mask)[:, 0]
        return self.classifier(self.dropout(torch.relu(self.pre_classifier(h))))


# ---------------------------------------------------------------------------------------------------------------
# sentence-transformers' Pooling and Normalize.

def pool(h, mask, mode):
    m = mask[:, :, None].to(h.dtype)
    if mode == "cls":
        return h[:, 0]
    if mode == "max":
        return torch.where(m == 0, torch.full_like(h, -1e9), h).max(dim=1).values
    return (h * m).sum(1) / torch.clamp(m.sum(1), min=1e-9)


def normalize(x):
    return nn.functional.normalize(x, p=2, dim=1)


# ---------------------------------------------------------------------------------------------------------------
# A tiny WordPiece vocabulary, tokenized by tokenizer_goldens.py's port of BertTokenizer.

VOCAB = ["[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "!", "?", "'", "a", "the", "cat",
         "dog", "sat", "on", "mat", "is", "an", "in", "of", "and", "to", "it", "play", "##ing", "##s", "##ed",
         "run", "##ner", "good", "bad", "day", "night", "hello", "world", "fast", "slow", "very", "this", "that",
         "##ly", "sun", "moon", "star", "##light", "blue", "red", "green", "house", "tree", "big", "small",
         "b", "c", "d", "e", "##a", "##b", "##c", "##e", "##d", "##r"]


def write_texts(folder, vocab, texts, pairs=False):
    """The tokenizer files, the texts and their ids (padded with 0, and their lengths)."""
    with open(os.path.join(folder, "vocab.txt"), "w", encoding="utf-8") as file:
        file.write("\n".join(VOCAB) + "\n")
    hf_format.write_json(os.path.join(folder, "tokenizer.json"), tokenizer_json(vocab))
    hf_format.write_json(os.path.join(folder, "tokenizer_config.json"), {
        "tokenizer_class": "BertTokenizer", "do_lower_case": True, "model_max_length": 38, "unk_token": "[UNK]",
        "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]", "mask_token": "[MASK]"})
    tokenizer = tokenizer_goldens.BertTokenizer(vocab)
    encoded = [tokenizer.encode(a, b)[:2] for a, b in (texts if pairs else [(t, None) for t in texts])]
    lengths = [len(ids) for ids, _ in encoded]
    ids = np.zeros((len(texts), max(lengths)), dtype=np.int64)
    types = np.zeros_like(ids)
    for i, (row, row_types) in enumerate(encoded):
        ids[i, :len(row)], types[i, :len(row)] = row, row_types
    hf_format.write_json(os.path.join(folder, "texts.json"), texts)
    hf_format.save_npy(os.path.join(folder, "text_ids.npy"), ids)
    hf_format.save_npy(os.path.join(folder, "text_type_ids.npy"), types)
    hf_format.save_npy(os.path.join(folder, "text_lengths.npy"), np.array(lengths))
    return ids, types, lengths


def tokenizer_json(vocab):
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": vocab[t], "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True}
                         for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")],
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


TEXTS = ["The cat sat on the mat.", "hello world", "A very big dog is running fast, and the sun is red!",
         "tree", "This blue starlight house?"]
PAIRS = [("the cat", "sat on the mat"), ("hello", "world"), ("a big dog", "is running very fast in the night")]


# ---------------------------------------------------------------------------------------------------------------
# The fixtures.

def bert_like_config(model_type, hidden, heads, **extra):
    c = {"model_type": model_type, "vocab_size": 64, "hidden_size": hidden, "num_hidden_layers": 2,
         "num_attention_heads": heads, "intermediate_size": 52, "hidden_act": "gelu",
         "max_position_embeddings": 40, "type_vocab_size": 2, "layer_norm_eps": 1e-12, "pad_token_id": 0,
         "position_embedding_type": "absolute"}
    c.update(extra)
    return c


def distil_config(**extra):
    c = {"model_type": "distilbert", "vocab_size": 64, "dim": 44, "n_layers": 2, "n_heads": 4, "hidden_dim": 56,
         "activation": "gelu", "max_position_embeddings": 40, "pad_token_id": 0, "sinusoidal_pos_embds": False}
    c.update(extra)
    return c


def random_batch(generator, lengths, vocab, pad, first, last, type_vocab=1, pairs=False):
    """Texts of the given lengths: first token `first`, last `last`, random ids from 5.. in between (never the
    pad id); with `pairs`, type 1 on the second half (BERT's segment B)."""
    n, width = len(lengths), max(lengths)
    ids = np.full((n, width), pad, dtype=np.int64)
    types = np.zeros((n, width), dtype=np.int64)
    for i, length in enumerate(lengths):
        body = torch.randint(5, vocab, (length,), generator=generator).numpy()
        body[0], body[-1] = first, last
        ids[i, :length] = body
        if pairs and type_vocab > 1:
            types[i, length // 2:length] = 1
    return ids, types


def write_inputs(folder, ids, types, lengths):
    hf_format.save_npy(os.path.join(folder, "ids.npy"), ids)
    hf_format.save_npy(os.path.join(folder, "type_ids.npy"), types)
    hf_format.save_npy(os.path.join(folder, "lengths.npy"), np.array(lengths))


def run_alone(model, ids, types, lengths):
    """Each text alone, unpadded (mask all ones), in float64: [N, L, D] hidden states or [N, C] logits."""
    results = []
    with torch.no_grad():
        for i, length in enumerate(lengths):
            x = torch.from_numpy(ids[i:i + 1, :length])
            t = torch.from_numpy(types[i:i + 1, :length])
            results.append(model(x, t, torch.ones(1, length, dtype=torch.float64))[0])
    return results


def build(model, generator, dtype):
    hf_format.randomize(model, generator, dtype)
    tensors = hf_format.state_dict_as(model, dtype)
    model.double()
    return tensors


def sentence_fixture(out, name, model, config, dtype, seed, lengths, pad, first, last, pool_mode, normalized,
                     type_vocab=1):
    folder = hf_format.make_output_dir(os.path.join(out, name))
    generator = hf_format.seeded_generator(seed)
    hf_format.write_safetensors(os.path.join(folder, "model.safetensors"), build(model, generator, dtype))
    hf_format.write_json(os.path.join(folder, "config.json"), config)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if normalized:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize",
                        "type": "sentence_transformers.models.Normalize"})
    hf_format.write_json(os.path.join(folder, "modules.json"), modules)
    hidden = config.get("hidden_size", config.get("dim"))
    hf_format.make_output_dir(os.path.join(folder, "1_Pooling"))
    hf_format.write_json(os.path.join(folder, "1_Pooling", "config.json"), {
        "word_embedding_dimension": hidden, "pooling_mode_cls_token": pool_mode == "cls",
        "pooling_mode_mean_tokens": pool_mode == "mean", "pooling_mode_max_tokens": pool_mode == "max",
        "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": False, "include_prompt": True})
    ids, types = random_batch(generator, lengths, config["vocab_size"], pad, first, last, type_vocab,
                              pairs=type_vocab > 1)
    write_inputs(folder, ids, types, lengths)
    write_sentence_outputs(folder, run_alone(model, ids, types, lengths), lengths, pool_mode, normalized)
    return model, folder


def write_sentence_outputs(folder, hidden_states, lengths, pool_mode, normalized):
    hidden = torch.cat(hidden_states).numpy()
    pooled = {m: [] for m in ("mean", "cls", "max")}
    for i, h in enumerate(hidden_states):
        for mode in pooled:
            pooled[mode].append(pool(h[None], torch.ones(1, lengths[i]), mode)[0])
    hf_format.save_npy(os.path.join(folder, "hidden.npy"), hidden)
    for mode, values in pooled.items():
        hf_format.save_npy(os.path.join(folder, mode + ".npy"), torch.stack(values).numpy())
    default = torch.stack(pooled[pool_mode])
    hf_format.save_npy(os.path.join(folder, "embeddings.npy"),
                       (normalize(default) if normalized else default).numpy())


def cross_fixture(out, name, model, config, dtype, seed, lengths, pad, first, last, type_vocab=1, pairs=None):
    folder = hf_format.make_output_dir(os.path.join(out, name))
    generator = hf_format.seeded_generator(seed)
    hf_format.write_safetensors(os.path.join(folder, "model.safetensors"), build(model, generator, dtype))
    hf_format.write_json(os.path.join(folder, "config.json"), config)
    ids, types = random_batch(generator, lengths, config["vocab_size"], pad, first, last, type_vocab, pairs=True)
    write_inputs(folder, ids, types, lengths)
    logits = torch.stack(run_alone(model, ids, types, lengths))
    hf_format.save_npy(os.path.join(folder, "logits.npy"), logits.numpy())
    if pairs:
        ids, types, lengths = write_texts(folder, {token: i for i, token in enumerate(VOCAB)}, pairs, pairs=True)
        logits = torch.stack(run_alone(model, ids, types, lengths))
        hf_format.save_npy(os.path.join(folder, "text_logits.npy"), logits.numpy())


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--out", default=os.path.join(here, "..", "..", "tests", "data", "text_encoders"))
    out = os.path.normpath(parser.parse_args().out)
    torch.manual_seed(0)

    # BERT sentence encoder (f32, no prefix: what sentence-transformers saves), mean pooling + Normalize, with a
    # WordPiece vocabulary for the text path. Lengths up to 38 = every position of max_position_embeddings 38.
    vocab = {token: i for i, token in enumerate(VOCAB)}
    config = bert_like_config("bert", 36, 3, vocab_size=len(VOCAB), max_position_embeddings=38,
                              architectures=["BertModel"])
    model, folder = sentence_fixture(out, "bert_sentence", TextModel(config, "bert"), config, torch.float32, 1,
                                     [7, 20, 1 + 1, 13, 38], 0, vocab["[CLS]"], vocab["[SEP]"], "mean", True,
                                     type_vocab=2)
    padded, types, text_lengths = write_texts(folder, vocab, TEXTS)
    hidden = run_alone(model, padded, types, text_lengths)
    pooled = torch.stack([pool(h[None], torch.ones(1, h.shape[0]), "mean")[0] for h in hidden])
    hf_format.save_npy(os.path.join(folder, "text_embeddings.npy"), normalize(pooled).numpy())

    # RoBERTa (bf16, gelu_new, pad 1: positions from 2), cls pooling, no Normalize.
    config = bert_like_config("roberta", 44, 4, hidden_act="gelu_new", pad_token_id=1, type_vocab_size=1,
                              bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5, architectures=["RobertaModel"])
    sentence_fixture(out, "roberta_sentence", TextModel(config, "roberta"), config, torch.bfloat16, 2,
                     [5, 17, 38, 9], 1, 0, 2, "cls", False)

    # MPNet (f32, heads 4 of 9, relative buckets 32): lengths past 8 reach the logarithmic buckets.
    config = bert_like_config("mpnet", 36, 4, pad_token_id=1, relative_attention_num_buckets=32,
                              layer_norm_eps=1e-5, architectures=["MPNetModel"])
    del config["type_vocab_size"]
    sentence_fixture(out, "mpnet_sentence", TextModel(config, "mpnet"), config, torch.float32, 3,
                     [30, 4, 12, 38, 19], 1, 0, 2, "mean", True)

    # DistilBERT (f16), max pooling + Normalize.
    config = distil_config(architectures=["DistilBertModel"])
    sentence_fixture(out, "distilbert_sentence", DistilBertModel(config), config, torch.float16, 4,
                     [6, 25, 11, 40], 0, 3, 4, "max", True)

    # Cross-encoders: the head under HF's prefix (bert., roberta., distilbert., mpnet.).
    config = bert_like_config("bert", 36, 3, num_labels=1, vocab_size=len(VOCAB), architectures=["BertForSequenceClassification"])
    cross_fixture(out, "bert_cross", BertForSequenceClassification(config), config, torch.float16, 5,
                  [12, 7, 21, 16], 0, 3, 4, type_vocab=2, pairs=PAIRS)
    config = bert_like_config("xlm-roberta", 44, 4, num_labels=1, pad_token_id=1, type_vocab_size=1,
                              layer_norm_eps=1e-5, architectures=["XLMRobertaForSequenceClassification"])
    cross_fixture(out, "xlmr_cross", RobertaForSequenceClassification(config), config, torch.float16, 6,
                  [9, 30, 14], 1, 0, 2)
    config = distil_config(dim=36, n_heads=3, num_labels=3, id2label={"0": "neg", "1": "neutral", "2": "pos"},
                           label2id={"neg": 0, "neutral": 1, "pos": 2},
                           architectures=["DistilBertForSequenceClassification"])
    config["vocab_size"] = 60
    cross_fixture(out, "distilbert_cross", DistilBertForSequenceClassification(config), config, torch.bfloat16, 7,
                  [8, 19, 3], 0, 3, 4)
    config = bert_like_config("mpnet", 36, 4, num_labels=1, pad_token_id=1, relative_attention_num_buckets=32,
                              layer_norm_eps=1e-5, architectures=["MPNetForSequenceClassification"])
    del config["type_vocab_size"]
    cross_fixture(out, "mpnet_cross", MPNetForSequenceClassification(config), config, torch.bfloat16, 8,
                  [22, 10, 35], 1, 0, 2)


if __name__ == "__main__":
    main()
