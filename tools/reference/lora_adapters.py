#!/usr/bin/python3
"""Fixtures for loading a base model folder plus a PEFT LoRA adapter (`anvil embed/rerank/classify --adapter`,
load_options::adapter): seeded random adapters in PEFT's on-disk format for the committed tiny model folders,
and the outputs an independent float64 PyTorch computation gives for them.

The base models are the plain-PyTorch ports of text_encoders.py and vit_fixtures.py, loaded from the committed
folders (tests/data/text_encoders/<name>, tests/data/vit/<name>) in float64 on exactly the stored values. The
adapter is applied as PEFT's LoRA layer computes it in eval mode, unmerged: each adapted nn.Linear becomes
y = base(x) + lora_B(lora_A(x)) * lora_alpha / r, and each modules_to_save module takes the adapter's saved
tensors. Which modules are adapted and saved follows PEFT (peft/tuners/tuners_utils.py,
check_target_module_exists and _set_trainable), written here from its rules: a list entry matches a module
named so or ending in "." + entry, a string target_modules is a re.fullmatch pattern; modules inside a
modules_to_save module are not adapted; a module whose name ends with a modules_to_save entry is saved (so
DistilBERT's pre_classifier is saved with "classifier", as PEFT saves it); PeftModelForSequenceClassification
adds "classifier" and "score" to modules_to_save.

Writes tests/data/adapters/<case>/:
  adapter_config.json, adapter_model.safetensors   as PEFT's save_pretrained writes them: lora_A [r, in] and
                                                   lora_B [out, r] in f32, the saved modules' tensors in the
                                                   base's dtype, every name under base_model.model.
  expected.npy                                     f32: the embeddings [N, D] (sentence encoders: the folder's
                                                   pooling and normalisation), the logits [N, labels]
                                                   (cross-encoders, image classifiers)
and tests/data/adapters/cases.json, which says which base folder, inputs and command each case uses.

Rerun (deterministic, seeded): /usr/bin/python3 tools/reference/lora_adapters.py
Standard library + numpy + torch only.
"""

import json
import os
import re
import sys

import numpy as np
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hf_format  # noqa: E402
import text_encoders  # noqa: E402
import vit_fixtures  # noqa: E402

DATA = os.path.normpath(os.path.join(HERE, "..", "..", "tests", "data"))
OUT = os.path.join(DATA, "adapters")
PREFIX = "base_model.model."


class LoraLinear(nn.Module):
    """PEFT's lora.Linear in eval mode, not merged: base(x) + lora_B(lora_A(x)) * scaling."""

    def __init__(self, base, a, b, scaling):
        super().__init__()
        self.base = base
        self.lora_A = nn.Linear(a.shape[1], a.shape[0], bias=False)
        self.lora_B = nn.Linear(b.shape[1], b.shape[0], bias=False)
        self.double()
        with torch.no_grad():
            self.lora_A.weight.copy_(a)
            self.lora_B.weight.copy_(b)
        self.scaling = scaling

    def forward(self, x):
        return self.base(x) + self.lora_B(self.lora_A(x)) * self.scaling


def peft_modules(model, config):
    """(adapted, saved): the module names PEFT adapts and saves for `config`."""
    saved_entries = list(config.get("modules_to_save") or [])
    if config.get("task_type") == "SEQ_CLS":
        saved_entries += [m for m in ("classifier", "score") if m not in saved_entries]
    names = [name for name, _ in model.named_modules() if name]
    saved = []
    for name in names:
        if any(name.endswith(entry) for entry in saved_entries) and \
                not any(name.startswith(s + ".") for s in saved):
            saved.append(name)
    targets = config["target_modules"]
    adapted = []
    for name in names:
        if any(name == s or name.startswith(s + ".") for s in saved):
            continue
        if isinstance(targets, str):
            hit = re.fullmatch(targets, name) is not None
        else:
            hit = any(name == t or name.endswith("." + t) for t in targets)
        if hit:
            assert isinstance(model.get_submodule(name), nn.Linear), name
            adapted.append(name)
    return adapted, saved


def load_base(model, folder):
    """The folder's stored tensors into the port, in float64; returns their stored dtypes by name."""
    stored = hf_format.read_safetensors(os.path.join(folder, "model.safetensors"))
    model.load_state_dict({k: v.to(torch.float64) if v.dtype.is_floating_point else v for k, v in stored.items()},
                          strict=True)
    model.double().eval()
    return {k: v.dtype for k, v in stored.items()}


def make_adapter(case, model, stored_types, config, seed):
    """A random adapter for `model`, written as PEFT saves it, and applied to the model in place."""
    generator = hf_format.seeded_generator(seed)
    adapted, saved = peft_modules(model, config)
    rank, scaling = config["r"], config["lora_alpha"] / config["r"]
    tensors = {}
    for name in adapted:
        linear = model.get_submodule(name)
        out_features, in_features = linear.weight.shape
        bound = 1.0 / in_features ** 0.5
        a = (torch.rand(rank, in_features, generator=generator) * 2 - 1) * bound
        b = torch.randn(out_features, rank, generator=generator) * 0.3
        a, b = a.to(torch.float32), b.to(torch.float32)
        tensors[PREFIX + name + ".lora_A.weight"] = a
        tensors[PREFIX + name + ".lora_B.weight"] = b
        parent, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, leaf,
                LoraLinear(linear, a.double(), b.double(), scaling))
    with torch.no_grad():
        for module in saved:
            for leaf, parameter in model.get_submodule(module).named_parameters():
                full = module + "." + leaf
                values = (torch.randn(parameter.shape, generator=generator) * 0.2).to(stored_types[full])
                tensors[PREFIX + full] = values
                parameter.copy_(values.double())
    folder = hf_format.make_output_dir(os.path.join(OUT, case))
    hf_format.write_safetensors(os.path.join(folder, "adapter_model.safetensors"), tensors)
    full_config = {
        "alpha_pattern": {}, "auto_mapping": None, "base_model_name_or_path": None, "bias": "none",
        "fan_in_fan_out": False, "inference_mode": True, "init_lora_weights": True, "layers_pattern": None,
        "layers_to_transform": None, "lora_dropout": 0.0, "modules_to_save": None, "peft_type": "LORA",
        "rank_pattern": {}, "revision": None, "task_type": None, "use_dora": False, "use_rslora": False}
    full_config.update(config)
    hf_format.write_json(os.path.join(folder, "adapter_config.json"), full_config)
    print(case, "adapted", len(adapted), "saved", saved)
    return folder


def text_case(case, base, model, config, seed, kind):
    """A text encoder: each of the base folder's ids.npy texts alone (unpadded), as text_encoders.py runs them."""
    base_folder = os.path.join(DATA, "text_encoders", base)
    types = load_base(model, base_folder)
    folder = make_adapter(case, model, types, config, seed)
    ids = np.load(os.path.join(base_folder, "ids.npy")).astype(np.int64)
    type_ids = np.load(os.path.join(base_folder, "type_ids.npy")).astype(np.int64)
    lengths = [int(n) for n in np.load(os.path.join(base_folder, "lengths.npy"))]
    outputs = text_encoders.run_alone(model, ids, type_ids, lengths)
    if kind == "embed":
        modules = json.load(open(os.path.join(base_folder, "modules.json")))
        pooling = json.load(open(os.path.join(base_folder, "1_Pooling", "config.json")))
        mode = "cls" if pooling["pooling_mode_cls_token"] else "max" if pooling["pooling_mode_max_tokens"] else "mean"
        pooled = torch.stack([text_encoders.pool(h[None], torch.ones(1, h.shape[0]), mode)[0] for h in outputs])
        normalized = any(m["type"].endswith("Normalize") for m in modules)
        expected = text_encoders.normalize(pooled) if normalized else pooled
    else:
        expected = torch.stack(outputs)
    hf_format.save_npy(os.path.join(folder, "expected.npy"), expected.numpy())
    return {"name": case, "command": kind, "model": "text_encoders/" + base, "inputs": "ids.npy",
            "base_expected": "embeddings.npy" if kind == "embed" else "logits.npy"}


def vit_case(case, base, model_class, config, seed):
    base_folder = os.path.join(DATA, "vit", base)
    base_config = json.load(open(os.path.join(base_folder, "config.json")))
    base_config["num_labels"] = len(base_config["id2label"])
    model = model_class(base_config)
    types = load_base(model, base_folder)
    folder = make_adapter(case, model, types, config, seed)
    pixels = torch.from_numpy(np.load(os.path.join(base_folder, "pixels.npy"))).double()
    with torch.no_grad():
        hf_format.save_npy(os.path.join(folder, "expected.npy"), model(pixels).numpy())
    return {"name": case, "command": "classify", "model": "vit/" + base, "inputs": "pixels.npy",
            "base_expected": "logits.npy"}


def text_config(base):
    return json.load(open(os.path.join(DATA, "text_encoders", base, "config.json")))


def main():
    torch.manual_seed(0)
    cases = []
    # BERT sentence encoder (f32, mean pooling, Normalize): a list with a dotted suffix ("intermediate.dense").
    cases.append(text_case(
        "bert_sentence", "bert_sentence", text_encoders.TextModel(text_config("bert_sentence"), "bert"),
        {"r": 4, "lora_alpha": 8, "target_modules": ["query", "value", "intermediate.dense"],
         "task_type": "FEATURE_EXTRACTION"}, 2101, "embed"))
    # MPNet sentence encoder (relative attention buckets): its attention's q, v, o.
    cases.append(text_case(
        "mpnet_sentence", "mpnet_sentence", text_encoders.TextModel(text_config("mpnet_sentence"), "mpnet"),
        {"r": 3, "lora_alpha": 6, "target_modules": ["q", "v", "o"], "task_type": "FEATURE_EXTRACTION"},
        2102, "embed"))
    # BERT cross-encoder (f16 weights): target_modules as one re.fullmatch pattern, alpha / r = 2.5, the head
    # saved (in f16, as the base stores it).
    cases.append(text_case(
        "bert_cross", "bert_cross", text_encoders.BertForSequenceClassification(text_config("bert_cross")),
        {"r": 2, "lora_alpha": 5,
         "target_modules": r"bert\.(encoder\.layer\.\d+\.(attention\.self\.key|output\.dense)|pooler\.dense)",
         "modules_to_save": ["classifier"], "task_type": "SEQ_CLS"}, 2103, "rerank"))
    # XLM-R cross-encoder (f16): modules_to_save null, the head (classifier.dense, classifier.out_proj) saved
    # because the task is SEQ_CLS.
    cases.append(text_case(
        "xlmr_cross", "xlmr_cross", text_encoders.RobertaForSequenceClassification(text_config("xlmr_cross")),
        {"r": 2, "lora_alpha": 16, "target_modules": ["query", "value"], "task_type": "SEQ_CLS"}, 2104, "rerank"))
    # DistilBERT cross-encoder (bf16, 3 labels): "classifier" saves pre_classifier too (PEFT's suffix rule).
    cases.append(text_case(
        "distilbert_cross", "distilbert_cross",
        text_encoders.DistilBertForSequenceClassification(text_config("distilbert_cross")),
        {"r": 4, "lora_alpha": 4, "target_modules": ["q_lin", "v_lin", "lin1"], "modules_to_save": ["classifier"],
         "task_type": "SEQ_CLS"}, 2105, "rerank"))
    # ViT image classifier (f32): query, value and the MLP's first layer, the classifier saved.
    cases.append(vit_case(
        "vit", "vit", vit_fixtures.ViTForImageClassification,
        {"r": 4, "lora_alpha": 8, "target_modules": ["query", "value", "intermediate.dense"],
         "modules_to_save": ["classifier"]}, 2106))
    hf_format.write_json(os.path.join(OUT, "cases.json"), {
        "notes": "Each case: the base folder tests/data/<model>, the adapter adapters/<name>, the inputs "
                 "<model>/<inputs> (token ids one text a row, right-padded, with type_ids.npy and lengths.npy; "
                 "or pixels), and expected.npy computed by tools/reference/lora_adapters.py in float64 with the "
                 "adapter applied unmerged, as PEFT's LoRA layers compute it. <model>/<base_expected> is the base "
                 "model's own output, which the adapter must change. torch 1.13.0.",
        "cases": cases})


if __name__ == "__main__":
    main()
