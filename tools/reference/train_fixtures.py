#!/usr/bin/python3
"""Fixtures for `anvil train` against its float64 reference (train_reference.py): small random-weight Hugging Face
folders of every family the issue lists, their TRAIN.jsonl, and for each case of the issue's "Must show" the exact
command-line options and the reference's outputs.

Writes under --out (default tests/data/train/cases/):

  models/<name>/               config.json + model.safetensors (float32; the ResNet's num_batches_tracked I64),
                               seeded random weights (hf_format.randomize), dropout probabilities 0 except in the
                               *_dropout folders (the same architectures with dropout in config.json):
    bert                       BertForSequenceClassification: 2 layers, hidden 32, 4 heads, intermediate 37,
                               vocab 100, 16 positions, 2 token types, 3 labels
    distilbert                 DistilBertForSequenceClassification: same sizes, 3 labels
    roberta_regression         RobertaForSequenceClassification, pad 1 (positions from 2, 18 positions = 16 tokens),
                               num_labels 1: regression (MSE)
    mpnet                      MPNetForSequenceClassification, relative buckets 32, 3 labels
    vit                        ViTForImageClassification: image 8, patch 4, hidden 32, 2 layers, 3 labels
    resnet                     Hugging Face ResNetForImageClassification: BasicBlocks, embedding 8, stages [8, 16],
                               depths [1, 1], ReLU, 3 labels; running statistics random, num_batches_tracked 5
    bert_multilabel            BertForSequenceClassification with problem_type multi_label_classification: 1 layer,
                               hidden 16, 2 heads, intermediate 20, vocab 100, 16 positions, 4 labels
  data/<name>.jsonl            10 to 12 examples: {"ids", "type_ids" (on some lines only), "label"} for text
                               (lengths 3 to 16, some exactly the positions' limit; bert_multilabel's labels lists
                               of 4, 0/1 but one soft line), {"pixels": "pixels/....npy", "label"} for images
                               (float32 [3, H, W], N(0, 1))
  data/bad/                    inputs the command must refuse (see "bad" in cases.json)
  adapters/bert_lora/          a PEFT LoRA adapter for models/bert to resume from (r 4, alpha 8, targets query,
                               value, pooler.dense; lora_A and lora_B random, the head random)
  expected/<case>/             the reference's outputs for the case: steps.jsonl (the --json lines),
                               reference_weights_f64.safetensors (the final float64 value of every trained tensor,
                               and of updated BatchNorm statistics, under the output file's names) and, for LoRA,
                               adapter_config.json
  cases.json                   per case: name, what it shows, args (paths relative to this folder, {out} for the
                               output folder); and the bad inputs with the words their one-line error must contain

Rerun (deterministic, byte-identical): /usr/bin/python3 tools/reference/train_fixtures.py
Standard library + numpy + torch.
"""

import argparse
import contextlib
import io
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hf_format  # noqa: E402
import resnet_fixtures  # noqa: E402
import text_encoders  # noqa: E402
import train_reference  # noqa: E402
import vit_fixtures  # noqa: E402

LABELS = {"0": "negative", "1": "neutral", "2": "positive"}
NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


def labelled(config, labels=LABELS):
    config = dict(config)
    config.pop("num_labels", None)
    config["id2label"] = dict(labels)
    config["label2id"] = {v: int(k) for k, v in labels.items()}
    return config


def model_specs():
    """name -> (config.json, the port, kind)."""
    specs = {}
    bert = labelled(text_encoders.bert_like_config(
        "bert", 32, 4, vocab_size=100, intermediate_size=37, max_position_embeddings=16,
        architectures=["BertForSequenceClassification"], **NO_DROPOUT))
    specs["bert"] = (bert, text_encoders.BertForSequenceClassification, "text")
    distil = labelled(text_encoders.distil_config(
        dim=32, n_heads=4, hidden_dim=37, vocab_size=100, max_position_embeddings=16, dropout=0.0,
        attention_dropout=0.0, seq_classif_dropout=0.0, architectures=["DistilBertForSequenceClassification"]))
    specs["distilbert"] = (distil, text_encoders.DistilBertForSequenceClassification, "text")
    roberta = labelled(text_encoders.bert_like_config(
        "roberta", 32, 4, vocab_size=100, intermediate_size=37, max_position_embeddings=18, pad_token_id=1,
        bos_token_id=0, eos_token_id=2, type_vocab_size=1, layer_norm_eps=1e-5,
        architectures=["RobertaForSequenceClassification"], **NO_DROPOUT), {"0": "LABEL_0"})
    specs["roberta_regression"] = (roberta, text_encoders.RobertaForSequenceClassification, "text")
    mpnet = labelled(text_encoders.bert_like_config(
        "mpnet", 32, 4, vocab_size=100, intermediate_size=37, max_position_embeddings=18, pad_token_id=1,
        relative_attention_num_buckets=32, layer_norm_eps=1e-5, architectures=["MPNetForSequenceClassification"],
        **NO_DROPOUT))
    del mpnet["type_vocab_size"]
    specs["mpnet"] = (mpnet, text_encoders.MPNetForSequenceClassification, "text")
    vit = labelled(vit_fixtures.config_for("vit", "ViTForImageClassification", hidden_size=32,
                                           num_attention_heads=4, intermediate_size=37, image_size=8, patch_size=4,
                                           encoder_stride=4))
    specs["vit"] = (vit, vit_fixtures.ViTForImageClassification, "image")
    resnet = labelled({"architectures": ["ResNetForImageClassification"], "model_type": "resnet",
                       "num_channels": 3, "embedding_size": 8, "hidden_sizes": [8, 16], "depths": [1, 1],
                       "layer_type": "basic", "hidden_act": "relu", "downsample_in_first_stage": False,
                       "downsample_in_bottleneck": False})
    specs["resnet"] = (resnet, resnet_fixtures.ResNetForImageClassification, "image")
    multilabel = labelled(text_encoders.bert_like_config(
        "bert", 16, 2, vocab_size=100, intermediate_size=20, max_position_embeddings=16, num_hidden_layers=1,
        problem_type="multi_label_classification", architectures=["BertForSequenceClassification"], **NO_DROPOUT),
        {"0": "sports", "1": "politics", "2": "science", "3": "arts"})
    specs["bert_multilabel"] = (multilabel, text_encoders.BertForSequenceClassification, "text")
    # Dropout as config.json gives it, at every site the Hugging Face classes have (after the embeddings, on the
    # attention probabilities, the attention output and the MLP output, in the heads), each probability distinct.
    specs["bert_dropout"] = (dict(bert, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.2,
                                  classifier_dropout=0.3), text_encoders.BertForSequenceClassification, "text")
    specs["distilbert_dropout"] = (dict(distil, dropout=0.1, attention_dropout=0.2, seq_classif_dropout=0.3),
                                   text_encoders.DistilBertForSequenceClassification, "text")
    specs["mpnet_dropout"] = (dict(mpnet, hidden_dropout_prob=0.15, attention_probs_dropout_prob=0.25),
                              text_encoders.MPNetForSequenceClassification, "text")
    specs["vit_dropout"] = (dict(vit, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.2),
                            vit_fixtures.ViTForImageClassification, "image")
    return specs


def write_model(out, name, config, port, seed):
    folder = hf_format.make_output_dir(os.path.join(out, "models", name))
    model = port(dict(config, num_labels=len(config["id2label"])))
    hf_format.randomize(model, hf_format.seeded_generator(seed), torch.float32)
    tensors = hf_format.state_dict_as(model, torch.float32)
    for key in tensors:
        if key.endswith("num_batches_tracked"):
            tensors[key] = torch.tensor(5, dtype=torch.int64)
    hf_format.write_safetensors(os.path.join(folder, "model.safetensors"), tensors)
    hf_format.write_json(os.path.join(folder, "config.json"), config)
    return tensors


def write_jsonl(path, records):
    with open(path, "w", encoding="utf-8") as file:
        for record in records:
            file.write(json.dumps(record) + "\n")


def text_records(rng, count, max_tokens, regression=False, with_types=False, multi_label=0):
    """`multi_label`: the number of classes of a multi-hot label (0: one class index)."""
    lengths = [max_tokens, 3] + [int(v) for v in rng.integers(3, max_tokens + 1, count - 2)]
    records = []
    for i, length in enumerate(lengths):
        ids = [2] + [int(v) for v in rng.integers(4, 100, length - 2)] + [3]
        record = {"ids": ids}
        if with_types and i % 3 != 2:  # some lines leave type_ids out (zeros)
            half = length // 2
            record["type_ids"] = [0] * half + [1] * (length - half)
        if multi_label:
            record["label"] = [int(v) for v in rng.integers(0, 2, multi_label)]
        else:
            record["label"] = round(float(rng.standard_normal()), 3) if regression else int(rng.integers(0, 3))
        records.append(record)
    if multi_label:
        records[1]["label"] = [0.25, 1.0, 0.0, 0.75]  # a soft label: Hugging Face takes float labels
    return records


def image_records(out, rng, name, count, size):
    pixels_dir = hf_format.make_output_dir(os.path.join(out, "data", "pixels"))
    records = []
    for i in range(count):
        relative = f"pixels/{name}_{i:02d}.npy"
        np.save(os.path.join(pixels_dir, f"{name}_{i:02d}.npy"),
                rng.standard_normal((3, size, size)).astype(np.float32))
        records.append({"pixels": relative, "label": int(rng.integers(0, 3))})
    return records


def write_adapter(out, bert_tensors):
    """A PEFT adapter for models/bert: what PeftModelForSequenceClassification.save_pretrained writes."""
    folder = hf_format.make_output_dir(os.path.join(out, "adapters", "bert_lora"))
    generator = hf_format.seeded_generator(77)
    r, tensors = 4, {}
    modules = ["bert.pooler.dense"] + [f"bert.encoder.layer.{i}.attention.self.{p}" for i in range(2)
                                       for p in ("query", "value")]
    for module in sorted(modules):
        out_features, in_features = bert_tensors[module + ".weight"].shape
        tensors[f"base_model.model.{module}.lora_A.weight"] = (
            torch.rand((r, in_features), generator=generator) * 2 - 1) / in_features ** 0.5
        tensors[f"base_model.model.{module}.lora_B.weight"] = torch.randn((out_features, r), generator=generator) * 0.05
    for name in ("classifier.weight", "classifier.bias"):
        tensors["base_model.model." + name] = torch.randn(bert_tensors[name].shape, generator=generator) * 0.2
    hf_format.write_safetensors(os.path.join(folder, "adapter_model.safetensors"), tensors)
    config = {"alpha_pattern": {}, "auto_mapping": None, "base_model_name_or_path": "models/bert", "bias": "none",
              "fan_in_fan_out": False, "inference_mode": True, "init_lora_weights": True, "layers_pattern": None,
              "layers_to_transform": None, "lora_alpha": 8, "lora_dropout": 0.0,
              "modules_to_save": ["classifier", "score"], "peft_type": "LORA", "r": r, "rank_pattern": {},
              "revision": None, "target_modules": ["pooler.dense", "query", "value"], "task_type": "SEQ_CLS",
              "use_dora": False, "use_rslora": False}
    with open(os.path.join(folder, "adapter_config.json"), "w", encoding="utf-8") as file:
        file.write(json.dumps(config, indent=2, sort_keys=True))


def lr1(name, batch=4):
    return {"name": f"{name}_sgd_lr1", "shows": "one SGD step at lr 1 on the first batch (padded): the weight "
            "delta equals -grad for every parameter" + (" (and BatchNorm statistics update)" if name == "resnet"
                                                        else ""),
            "args": ["--model", f"models/{name}", "--data", f"data/{name}.jsonl", "--out", "{out}",
                     "--optimizer", "sgd", "--lr", "1", "--steps", "1", "--batch-size", str(batch),
                     "--no-shuffle", "--schedule", "constant", "--json"]}


CASES = [
    {"name": "bert_adamw_warmup_clip",
     "shows": "AdamW with linear warmup and decay, clipping, weight-decay groups, shuffled epochs (seed 7), "
              "a short last batch (10 examples, batch 4: 2 epochs = 6 steps), --eval after each epoch",
     "args": ["--model", "models/bert", "--data", "data/bert.jsonl", "--out", "{out}", "--epochs", "2",
              "--batch-size", "4", "--lr", "0.002", "--optimizer", "adamw", "--betas", "0.9,0.98", "--eps", "1e-7",
              "--weight-decay", "0.01", "--schedule", "linear", "--warmup-steps", "2", "--max-grad-norm", "0.5",
              "--seed", "7", "--eval", "data/bert.jsonl", "--json"]},
    {"name": "distilbert_sgd_nesterov_freeze",
     "shows": "SGD with Nesterov momentum, L2 weight decay, cosine schedule with warmup, two --freeze regexes "
              "(embeddings and layer 0's attention written back byte for byte), --no-shuffle with --steps "
              "spanning epochs (12 examples, batch 5: 5, 5, 2, 5, 5)",
     "args": ["--model", "models/distilbert", "--data", "data/distilbert.jsonl", "--out", "{out}", "--steps", "5",
              "--batch-size", "5", "--no-shuffle", "--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9",
              "--nesterov", "--weight-decay", "0.01", "--schedule", "cosine", "--warmup-steps", "1",
              "--freeze", r"^distilbert\.embeddings\.", "--freeze", r"layer\.0\.attention\.", "--json"]},
    {"name": "bert_lora_resume",
     "shows": "LoRA resumed from a PEFT adapter (adapters/bert_lora: r 4, alpha 8, query, value, pooler.dense, "
              "its head): adapter_config.json and adapter_model.safetensors as PEFT saves them",
     "args": ["--model", "models/bert", "--data", "data/bert.jsonl", "--out", "{out}",
              "--init-adapter", "adapters/bert_lora", "--steps", "4", "--batch-size", "3", "--lr", "0.01",
              "--optimizer", "adamw", "--weight-decay", "0.05", "--schedule", "constant", "--warmup-steps", "1",
              "--max-grad-norm", "1.0", "--seed", "11", "--json"]},
    {"name": "bert_lora_fresh",
     "shows": "a fresh LoRA adapter: lora_A from numpy default_rng(--seed) in sorted module order, lora_B 0; "
              "targets by suffix (output.dense: attention.output.dense and output.dense), the head trained "
              "except a frozen classifier.bias (written back as it was)",
     "args": ["--model", "models/bert", "--data", "data/bert.jsonl", "--out", "{out}", "--lora", "2",
              "--lora-alpha", "4", "--lora-targets", "key,output.dense", "--steps", "2", "--batch-size", "4",
              "--lr", "0.005", "--schedule", "constant", "--seed", "3", "--freeze", r"^classifier\.bias$",
              "--json"]},
    {"name": "roberta_regression",
     "shows": "num_labels 1: MSE on float labels; RoBERTa positions from pad + 1; a last batch of one example "
              "(10 examples, batch 3: 8 steps = 2 epochs), shuffled (seed 5), --eval's MSE after each epoch",
     "args": ["--model", "models/roberta_regression", "--data", "data/roberta_regression.jsonl", "--out", "{out}",
              "--steps", "8", "--batch-size", "3", "--lr", "0.001", "--optimizer", "adamw", "--weight-decay",
              "0.01", "--schedule", "linear", "--seed", "5", "--eval", "data/roberta_regression.jsonl", "--json"]},
    {"name": "resnet_batchnorm",
     "shows": "BatchNorm in train mode: batch statistics in the forward, running_mean / running_var (unbiased, "
              "momentum 0.1) and num_batches_tracked (5 + 4) written back; BatchNorm weights decay; SGD momentum; "
              "--eval after epoch 1 (step 3) with BatchNorm in eval mode on the running statistics of that moment",
     "args": ["--model", "models/resnet", "--data", "data/resnet.jsonl", "--out", "{out}", "--steps", "4",
              "--batch-size", "4", "--no-shuffle", "--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9",
              "--weight-decay", "0.05", "--schedule", "constant", "--eval", "data/resnet.jsonl", "--json"]},
    {"name": "bert_multilabel",
     "shows": "problem_type multi_label_classification: BCEWithLogitsLoss on multi-hot labels (one soft line), "
              "SGD with momentum, shuffled epochs (seed 4), --eval's loss and exact-match accuracy (logit > 0 where "
              "the label is > 0.5) after each epoch (no logit near 0, so that fp16 compute keeps every decision)",
     "args": ["--model", "models/bert_multilabel", "--data", "data/bert_multilabel.jsonl", "--out", "{out}",
              "--epochs", "2", "--batch-size", "4", "--optimizer", "sgd", "--momentum", "0.9", "--lr", "0.3",
              "--weight-decay", "0.01", "--seed", "4",
              "--eval", "data/bert_multilabel.jsonl", "--json"]},
] + [lr1(name) for name in ("bert", "distilbert", "roberta_regression", "mpnet", "vit", "resnet")] + [
    {"name": "bert_dropout",
     "shows": "dropout at config.json's probabilities (hidden 0.1, attention 0.2, classifier 0.3), the masks of step "
              "s drawn from numpy default_rng([seed, s]) site after site in forward order; --eval without dropout",
     "args": ["--model", "models/bert_dropout", "--data", "data/bert_dropout.jsonl", "--out", "{out}", "--epochs",
              "1", "--batch-size", "4", "--lr", "0.002", "--weight-decay", "0.01", "--schedule", "linear",
              "--seed", "13", "--eval", "data/bert_dropout.jsonl", "--json"]},
    {"name": "distilbert_dropout_sgd",
     "shows": "DistilBERT's dropout (embeddings and FFN 0.1, attention probabilities 0.2, none after out_lin, "
              "seq_classif_dropout 0.3 in the head); SGD, --no-shuffle",
     "args": ["--model", "models/distilbert_dropout", "--data", "data/distilbert_dropout.jsonl", "--out", "{out}",
              "--steps", "3", "--batch-size", "5", "--no-shuffle", "--optimizer", "sgd", "--lr", "0.1",
              "--momentum", "0.9", "--schedule", "constant", "--seed", "21", "--json"]},
    {"name": "mpnet_dropout",
     "shows": "MPNet's dropout (hidden 0.15 after the embeddings, the attention's o and the MLP, and twice in its "
              "classification head; attention 0.25)",
     "args": ["--model", "models/mpnet_dropout", "--data", "data/mpnet_dropout.jsonl", "--out", "{out}", "--steps",
              "3", "--batch-size", "4", "--lr", "0.002", "--schedule", "constant", "--seed", "4", "--json"]},
    {"name": "vit_dropout",
     "shows": "ViT's dropout (hidden 0.1 after the embeddings, on the attention output and the MLP output; "
              "attention 0.2), LoRA on query and value",
     "args": ["--model", "models/vit_dropout", "--data", "data/vit_dropout.jsonl", "--out", "{out}", "--steps",
              "3", "--batch-size", "4", "--lr", "0.01", "--lora", "4", "--lora-targets", "query,value",
              "--schedule", "constant", "--seed", "8", "--json"]},
]

BAD = [
    {"name": "label_out_of_range", "error": "label 3 out of range",
     "args": ["--model", "models/bert", "--data", "data/bad/label_out_of_range.jsonl", "--out", "{out}"]},
    {"name": "too_long", "error": "longer than the model's 16 positions",
     "args": ["--model", "models/bert", "--data", "data/bad/too_long.jsonl", "--out", "{out}"]},
    {"name": "missing_pixels", "error": "is missing",
     "args": ["--model", "models/vit", "--data", "data/bad/missing_pixels.jsonl", "--out", "{out}"]},
    {"name": "unknown_lora_target", "error": "unknown LoRA target module 'nosuch'",
     "args": ["--model", "models/bert", "--data", "data/bert.jsonl", "--out", "{out}", "--lora", "2",
              "--lora-targets", "query,nosuch"]},
    {"name": "freeze_everything", "error": "freezes every trainable tensor",
     "args": ["--model", "models/bert", "--data", "data/bert.jsonl", "--out", "{out}", "--freeze", "^bert\\.",
              "--freeze", "classifier"]},
    {"name": "multilabel_scalar_label", "error": "line 2: label 1 is not a list of 4 numbers",
     "args": ["--model", "models/bert_multilabel", "--data", "data/bad/multilabel_scalar_label.jsonl", "--out",
              "{out}"]},
    {"name": "multilabel_short_label", "error": "line 1: label [1,0,1] is not a list of 4 numbers",
     "args": ["--model", "models/bert_multilabel", "--data", "data/bad/multilabel_short_label.jsonl", "--out",
              "{out}"]},
]


def run_reference(args, out_dir):
    stdout, stderr = io.StringIO(), io.StringIO()
    argv = [a.replace("{out}", out_dir) for a in args]
    with contextlib.redirect_stderr(stderr):
        code = train_reference.main(argv, stdout)
    return code, stdout.getvalue(), stderr.getvalue()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.path.join(HERE, "..", "..", "tests", "data", "train", "cases"))
    out = os.path.abspath(parser.parse_args().out)
    for sub in ("models", "data", "adapters", "expected"):
        shutil.rmtree(os.path.join(out, sub), ignore_errors=True)
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    torch.set_num_threads(1)

    rng = np.random.default_rng(42)
    data_dir = hf_format.make_output_dir(os.path.join(out, "data"))
    stored = {}
    for seed, (name, (config, port, kind)) in enumerate(model_specs().items(), 100):
        stored[name] = write_model(out, name, config, port, seed)
        if kind == "text":
            records = text_records(rng, 12 if name.startswith("distilbert") else 10, 16,
                                   regression=name.endswith("regression"), with_types=name in ("bert", "bert_dropout"),
                                   multi_label=len(config["id2label"]) if name.endswith("multilabel") else 0)
        else:
            records = image_records(out, rng, name, 10, 8 if name.startswith("vit") else 16)
        write_jsonl(os.path.join(data_dir, name + ".jsonl"), records)
    write_adapter(out, stored["bert"])

    bad = hf_format.make_output_dir(os.path.join(data_dir, "bad"))
    write_jsonl(os.path.join(bad, "label_out_of_range.jsonl"), [{"ids": [2, 5, 3], "label": 1},
                                                               {"ids": [2, 6, 7, 3], "label": 3}])
    write_jsonl(os.path.join(bad, "too_long.jsonl"), [{"ids": [2] + [9] * 15 + [3], "label": 0}])
    write_jsonl(os.path.join(bad, "multilabel_scalar_label.jsonl"), [{"ids": [2, 5, 3], "label": [1, 0, 0, 1]},
                                                                    {"ids": [2, 6, 7, 3], "label": 1}])
    write_jsonl(os.path.join(bad, "multilabel_short_label.jsonl"), [{"ids": [2, 5, 3], "label": [1, 0, 1]}])
    write_jsonl(os.path.join(bad, "missing_pixels.jsonl"), [{"pixels": "../pixels/vit_00.npy", "label": 0},
                                                           {"pixels": "../pixels/none.npy", "label": 1}])

    previous = os.getcwd()
    os.chdir(out)  # the cases' paths are relative to the fixture folder
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for case in CASES:
                run_dir = os.path.join(tmp, case["name"])
                code, lines, errors = run_reference(case["args"], run_dir)
                if code != 0:
                    raise SystemExit(f"{case['name']}: the reference failed: {errors}")
                expected = hf_format.make_output_dir(os.path.join(out, "expected", case["name"]))
                with open(os.path.join(expected, "steps.jsonl"), "w") as file:
                    file.write(lines)
                for name in ("reference_weights_f64.safetensors", "adapter_config.json"):
                    if os.path.exists(os.path.join(run_dir, name)):
                        shutil.copyfile(os.path.join(run_dir, name), os.path.join(expected, name))
                records = [r for r in map(json.loads, lines.splitlines()) if "loss" in r]
                print(f"{case['name']}: {len(records)} steps, loss {records[0]['loss']:.4f} -> "
                      f"{records[-1]['loss']:.4f}, grad_norm {records[0]['grad_norm']:.3f}")
            for case in BAD:
                code, lines, errors = run_reference(case["args"], os.path.join(tmp, "bad_" + case["name"]))
                message = errors.strip().splitlines()[-1] if errors.strip() else ""
                if code != 1 or case["error"] not in message:
                    raise SystemExit(f"bad input {case['name']}: exit {code}, {message!r}")
    finally:
        os.chdir(previous)

    notes = ("Run each case as `anvil train <args>` from this folder with {out} an empty folder; compare the json "
             "lines with expected/<case>/steps.jsonl and the trained tensors with expected/<case>/"
             "reference_weights_f64.safetensors (float64, computed by tools/reference/train_reference.py in "
             "float64 from the stored float32 weights). Frozen and untouched tensors must equal models/ byte for "
             "byte. Shuffling: epoch e visits numpy.random.default_rng(seed + e).permutation(n); a fresh lora_A: "
             "default_rng(seed).uniform(-1/sqrt(in), 1/sqrt(in), (r, in)) per target module in sorted name order, "
             "rounded to float32. Attention key biases (BERT/RoBERTa/MPNet/ViT key.bias, DistilBERT k_lin.bias) "
             "have a gradient that is exactly zero in exact arithmetic (softmax ignores a shift common to all keys): "
             "the reference's float64 gradient is rounding noise (~1e-17) and leaves them unchanged; a float32 "
             "implementation's noise (~1e-8) moves them by up to ~lr * noise / (noise + eps) per AdamW step, so "
             "compare them with an absolute tolerance of that size. torch " + torch.__version__.split("a")[0]
             + ", numpy " + np.__version__ + ".")
    hf_format.write_json(os.path.join(out, "cases.json"), {"notes": notes, "cases": CASES, "bad": BAD})
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(out) for f in fs)
    print(f"{out}: {total / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
