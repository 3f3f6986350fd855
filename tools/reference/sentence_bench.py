#!/usr/bin/python3
"""PyTorch baseline for anvil's sentence-embedding benchmark (bench/sentence_vs_pytorch.sh).

A MiniLM-L6-sized BERT sentence encoder (all-MiniLM-L6-v2's shape: 6 layers, hidden 384, 12 heads,
intermediate 1536, vocabulary 30522; mean pooling and L2 normalisation) with seeded random weights, built from
text_encoders.py's plain-PyTorch port of modeling_bert.py. Embeds --sentences token-id lists of mixed lengths
(uniform in [--min-length, --max-length], [CLS] ... [SEP]) as sentence-transformers' encode() does: sorted by
length, batches of --batch, each padded to its longest text, float32 under torch.inference_mode; times the whole
set (best of --runs after a warm-up pass). Writes, under --out DIR:

  model/                 the model folder anvil loads (config.json, model.safetensors, modules.json,
                         1_Pooling/config.json, vocab.txt when --vocab is given)
  ids.json               {"ids": [[101, ..., 102], ...]} in the original (unsorted) order
  expected.npy           f32 [N, 384]: PyTorch's embeddings in the same order
  pytorch_timing.json    {"sentences_per_second", "seconds_best", "threads", "torch", "batch"} (also printed)

Run with Debian's interpreter: /usr/bin/python3 tools/reference/sentence_bench.py --out /tmp/s --threads 2
"""

import argparse
import json
import os
import shutil
import sys
import time

# Run the baseline at its best (DESIGN.md "Performance"): before torch loads, drop the build machines' OpenBLAS
# overrides and pin both thread pools to --threads (default 1); libgomp's spinning workers otherwise starve
# OpenBLAS (threads_first.py).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import threads_first  # noqa: E402

threads_first.pin(default="1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import hf_format  # noqa: E402
import text_encoders  # noqa: E402

CONFIG = {"model_type": "bert", "architectures": ["BertModel"], "vocab_size": 30522, "hidden_size": 384,
          "num_hidden_layers": 6, "num_attention_heads": 12, "intermediate_size": 1536, "hidden_act": "gelu",
          "max_position_embeddings": 512, "type_vocab_size": 2, "layer_norm_eps": 1e-12, "pad_token_id": 0,
          "position_embedding_type": "absolute"}


def embed(model, batch_ids):
    """sentence-transformers' Transformer + Pooling(mean) + Normalize on one padded batch, float32."""
    width = max(len(ids) for ids in batch_ids)
    ids = torch.zeros((len(batch_ids), width), dtype=torch.long)
    mask = torch.zeros((len(batch_ids), width), dtype=torch.float32)
    for row, one in enumerate(batch_ids):
        ids[row, :len(one)] = torch.tensor(one)
        mask[row, :len(one)] = 1.0
    positions = torch.arange(width)[None, :].expand_as(ids)
    extended = (1.0 - mask[:, None, None, :]) * torch.finfo(torch.float32).min
    hidden = model.encoder(model.embeddings(ids, torch.zeros_like(ids), positions), extended)
    return text_encoders.normalize(text_encoders.pool(hidden, mask, "mean"))


def encode_all(model, sentences, batch):
    order = sorted(range(len(sentences)), key=lambda i: -len(sentences[i]))
    result = [None] * len(sentences)
    for start in range(0, len(order), batch):
        chosen = order[start:start + batch]
        for i, vector in zip(chosen, embed(model, [sentences[i] for i in chosen])):
            result[i] = vector
    return torch.stack(result)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--sentences", type=int, default=256)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--min-length", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=96)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vocab", help="a vocab.txt to put in the model folder (the tokenizer anvil loads)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    folder = hf_format.make_output_dir(os.path.join(args.out, "model"))
    generator = hf_format.seeded_generator(args.seed)
    model = text_encoders.TextModel(CONFIG, "bert", pooler=False)
    hf_format.randomize(model, generator, torch.float32)
    model.eval()
    hf_format.write_safetensors(os.path.join(folder, "model.safetensors"),
                                hf_format.state_dict_as(model, torch.float32))
    hf_format.write_json(os.path.join(folder, "config.json"), CONFIG)
    hf_format.write_json(os.path.join(folder, "modules.json"), [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}])
    hf_format.make_output_dir(os.path.join(folder, "1_Pooling"))
    hf_format.write_json(os.path.join(folder, "1_Pooling", "config.json"), {
        "word_embedding_dimension": CONFIG["hidden_size"], "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False})
    if args.vocab:
        shutil.copy(args.vocab, os.path.join(folder, "vocab.txt"))

    sentences = []
    for _ in range(args.sentences):
        length = int(torch.randint(args.min_length, args.max_length + 1, (1,), generator=generator))
        body = torch.randint(1000, CONFIG["vocab_size"], (length - 2,), generator=generator).tolist()
        sentences.append([101] + body + [102])
    with open(os.path.join(args.out, "ids.json"), "w", encoding="utf-8") as file:
        json.dump({"ids": sentences}, file)

    with torch.inference_mode():
        expected = encode_all(model, sentences, args.batch)  # also the warm-up pass
        best = float("inf")
        for _ in range(args.runs):
            start = time.perf_counter()
            encode_all(model, sentences, args.batch)
            best = min(best, time.perf_counter() - start)
    hf_format.save_npy(os.path.join(args.out, "expected.npy"), expected.numpy())
    timing = {"sentences_per_second": len(sentences) / best, "seconds_best": best, "threads": args.threads,
              "torch": torch.__version__, "batch": args.batch, "sentences": len(sentences)}
    hf_format.write_json(os.path.join(args.out, "pytorch_timing.json"), timing)
    print(json.dumps(timing))


if __name__ == "__main__":
    main()
