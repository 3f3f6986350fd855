#!/usr/bin/python3
"""Independent float64 PyTorch reference for `anvil train` (issue 42): the same fine-tuning of a Hugging Face
sequence or image classifier, with the same command line, so that a test runs both on one folder and compares.

  train_reference.py --model DIR --data TRAIN.jsonl --out OUTDIR [--steps N | --epochs E] [--batch-size B]
      [--lr LR] [--optimizer adamw|sgd] [--momentum M] [--nesterov] [--weight-decay WD] [--betas B1,B2] [--eps E]
      [--schedule constant|linear|cosine] [--warmup-steps K] [--max-grad-norm X] [--no-shuffle] [--seed S]
      [--freeze REGEX]... [--lora R --lora-alpha A --lora-targets NAME,...] [--init-adapter DIR] [--truncate]
      [--json]
  train_reference.py --self-check

Defaults are the Trainer's: --epochs 3, --batch-size 8, --lr 5e-5, --optimizer adamw, --betas 0.9,0.999,
--eps 1e-8, --weight-decay 0, --momentum 0, --schedule linear, --warmup-steps 0, --seed 42, no clipping,
shuffled; LoRA: --lora-alpha 8, --lora-targets PEFT's default for bert/roberta/xlm-roberta (query,value), else
required. --eval EVAL.jsonl adds after each epoch's last step a line {"epoch", "step", "eval_loss", "eval_accuracy"} (or
"eval_mse" for regression): the mean loss and the share of examples whose top logit is the label (multi-label: whose
every class is predicted right, logit > 0 exactly where the label is > 0.5), the model in eval mode (model.eval():
a ResNet's BatchNorms normalise with their running statistics as the epoch's steps left them, float64), in batches
of --batch-size in file order. --save-every, --resume and --backend are accepted and ignored (a note on stderr).

What it computes, step by step (every rule the C++ side must reproduce):

Model. DIR holds config.json and model.safetensors of BERT, RoBERTa / XLM-R, MPNet or DistilBERT
...ForSequenceClassification (text_encoders.py's ports), ViT / DeiT image classifiers (vit_fixtures.py), Hugging
Face's ResNetForImageClassification (resnet_fixtures.py) or a timm folder ({"architecture": "resnet18", ...},
torchvision's ResNet classes). The stored weights are converted to float64 and training runs in float64.
Dropout follows config.json, at the sites and with the probabilities (and class defaults) of the Hugging Face classes
(hidden_dropout_prob after the embeddings and on each attention output and MLP output, attention_probs_dropout_prob
on the attention probabilities, the heads' classifier_dropout / seq_classif_dropout; DistilBERT's dropout /
attention_dropout; ViT's, whose defaults are 0), with anvil's masks: step s (from 1) draws from
numpy.random.default_rng([seed, s]) one array random(shape) per site with a probability above 0, in the order the
forward reaches the sites, and keeps the elements >= p, scaled by 1 / (1 - p) (hf_format.Dropout). Evaluation runs
without dropout. BatchNorm runs in train
mode (nn.BatchNorm2d.train(): batch statistics with the biased variance in the forward; running_mean / running_var
updated with momentum 0.1 from the unbiased variance; num_batches_tracked incremented per step).

Data. TRAIN.jsonl, one example a line: {"ids": [...], "type_ids": [...] (optional, zeros), "label": k} for text,
{"pixels": "rel/path.npy", "label": k} for images (float32 [C, H, W], the path relative to the jsonl). The text
form {"text": ...} and the image-file form {"image": ...} are not implemented here. With num_labels 1 the label
is a float; with problem_type "multi_label_classification" a list of num_labels numbers in [0, 1] (multi-hot; soft
values allowed, as Hugging Face takes float labels). A text batch is padded to its longest example: ids with
config's pad_token_id (default 0), type ids with 0, attention mask 1 on real tokens, 0 on padding (Hugging Face's
DataCollatorWithPadding). An example longer
than the model's positions is an error unless --truncate (then its first L ids are kept), where L is
max_position_embeddings (BERT, DistilBERT) or max_position_embeddings - padding_idx - 1 (RoBERTa / XLM-R:
padding_idx = pad_token_id; MPNet: padding_idx = 1), as their position ids need.

Order. Epoch e (from 0) visits the examples in the order
    list(range(n))                                        with --no-shuffle
    numpy.random.default_rng(seed + e).permutation(n)     otherwise
and cuts it into consecutive batches of --batch-size; the last batch of an epoch may be short; the next epoch
starts a new order; --steps N may end inside an epoch or span several. default_rng(s).permutation(n) is numpy's
PCG64 seeded by SeedSequence(s) and a Fisher-Yates shuffle of arange(n) drawing j = random_interval(i) for i = n-1
down to 1 (masked rejection on 32-bit draws, the low half of each 64-bit output first); NumpyRng below spells
it out and --self-check proves it equal to numpy's. Total steps: N, or E * ceil(n / B).

Loss. Hugging Face's problem_type rules: num_labels 1 (or problem_type "regression") ->
MSELoss(logits.squeeze(), labels.squeeze()) with float labels; problem_type "multi_label_classification" ->
BCEWithLogitsLoss()(logits, labels) over every element, labels float [N, num_labels]; otherwise mean
CrossEntropyLoss over the batch.
The loss of step s is the batch mean with the weights before step s's update.

Trainable tensors. Full fine-tune: every parameter whose name no --freeze REGEX finds (re.search). LoRA: the lora_A
/ lora_B matrices and the classification head (modules_to_save), less the --freeze matches; the base is frozen.
Frozen tensors are not in the optimizer, not decayed, not in the gradient norm and are written back byte for
byte; a buffer that a --freeze regex finds (e.g. a BatchNorm running_mean) is not updated either. A regex set
that leaves nothing to train is an error. A trainable tensor that gets no gradient gets a zero one (every
trainable tensor is updated every step, as the issue asks).

Weight decay. transformers' Trainer.get_decay_parameter_names: a parameter decays unless it is inside an
nn.LayerNorm or its lower-cased name matches one of r"bias", r"layernorm", r"rmsnorm", r"(?:^|\\.)norm(?:$|\\.)",
r"_norm(?:$|\\.)" (re.search). So biases (and MPNet's relative_attention_bias) and LayerNorm weights do not decay;
BatchNorm weights, embeddings, ViT's cls_token / position_embeddings and LoRA matrices do. Two parameter groups,
{decaying, weight_decay WD} and {the rest, 0}.

Optimizer. torch.optim.AdamW(lr, betas, eps, weight_decay, amsgrad False) or torch.optim.SGD(lr, momentum,
dampening 0, weight_decay (L2, added to the gradient), nesterov), foreach=False, on the float64 parameters.
Schedule: LambdaLR over transformers' get_constant_schedule_with_warmup / get_linear_schedule_with_warmup /
get_cosine_schedule_with_warmup (num_cycles 0.5) lambdas (train_optimizers.py), num_training_steps = total steps;
the lr of step s (from 1) is base_lr * lambda(s - 1): step 1 of a warmup has lr 0 and still counts.
Each step: forward and loss, backward, grad_norm = global 2-norm of the trainable gradients (before clipping;
torch.nn.utils.clip_grad_norm_'s total when --max-grad-norm X is given, which then scales every gradient by
min(1, X / (grad_norm + 1e-6))), optimizer step, scheduler step.

LoRA (PEFT's LoraLayer). On each nn.Linear whose module name is a target or ends with "." + target (a target
given as one string in an adapter_config.json is a re.fullmatch pattern), except modules inside modules_to_save
(PEFT: re.match(rf"(^|.*\\.){m}($|\\..*)", name)): y = base(x) + lora_B(lora_A(x)) * alpha / r, lora_A [r, in],
lora_B [out, r], no bias, no dropout. A target that matches no module, or a module that is not a Linear, is an
error. modules_to_save: ["classifier", "score"] for sequence classifiers (PeftModelForSequenceClassification),
["classifier"] for ViT / DeiT / HF ResNet, ["fc"] for timm ResNets; a module is in it when its name ends with an
entry (plain str.endswith, PEFT's _set_trainable: DistilBERT's pre_classifier is in it too); those modules'
parameters are trained fully. A fresh adapter: lora_B zeros; lora_A drawn as
    rng = numpy.random.default_rng(seed)
    for module in sorted(target module names):             # Python string order, e.g. "layer.10" < "layer.2"
        bound = 1 / sqrt(in_features)                       # = kaiming_uniform_(a=sqrt(5))'s bound (self-checked)
        A = float32(rng.uniform(-bound, bound, size=(r, in_features)))   # row-major; -bound + 2*bound*u,
                                                            # u = (next_uint64 >> 11) * 2^-53
and training starts from those float32 values. --init-adapter DIR reads DIR/adapter_config.json (peft_type LORA;
r, lora_alpha, target_modules, modules_to_save taken from it; use_rslora, use_dora, bias other than "none",
fan_in_fan_out, rank/alpha patterns, layers_to_transform are errors) and DIR/adapter_model.safetensors (PEFT's
names: base_model.model.<module>.lora_A.weight / lora_B.weight, the head as base_model.model.<head param>);
--lora / --lora-alpha / --lora-targets, when given too, must agree with it.

Outputs (OUTDIR). Full fine-tune: config.json and the tokenizer / preprocessor files copied; model.safetensors
with exactly the input's tensor names, shapes and dtypes: trained tensors and updated BatchNorm statistics
rounded float64 -> float32 -> stored dtype, num_batches_tracked + steps, every other tensor (frozen, buffers such
as position_ids, tensors the port does not use) as it was. LoRA: adapter_config.json (PEFT's keys, sorted,
indent 2) and adapter_model.safetensors (lora matrices float32, head tensors in their source dtype) as PEFT's
save_pretrained writes them, plus the tokenizer / preprocessor files. Both: reference_weights_f64.safetensors, the
final float64 value of every trained tensor (and of the updated BatchNorm statistics) under the names of the
output file. --json prints one line per step: {"step": s, "loss": L, "lr": lr, "grad_norm": g}.

Bad input: one line "train_reference.py: error: ..." on stderr, exit status 1.

Standard library + numpy + torch (+ torchvision for timm ResNets), Debian's /usr/bin/python3.
"""

import argparse
import io
import json
import math
import os
import re
import shutil
import sys
import tempfile

import numpy as np
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hf_format  # noqa: E402
import resnet_fixtures  # noqa: E402
import text_encoders  # noqa: E402
import train_optimizers  # noqa: E402
import vit_fixtures  # noqa: E402

PROG = "train_reference.py"
AUX_FILES = ("preprocessor_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
             "added_tokens.json", "vocab.txt", "vocab.json", "merges.txt", "sentencepiece.bpe.model",
             "spiece.model", "tokenizer.model")
DECAY_EXCLUDED = [re.compile(p) for p in (r"bias", r"layernorm", r"rmsnorm", r"(?:^|\.)norm(?:$|\.)",
                                          r"_norm(?:$|\.)")]
SEQ_CLS_HEADS = ["classifier", "score"]
PEFT_DEFAULT_TARGETS = {"bert": ["query", "value"], "roberta": ["query", "value"], "xlm-roberta": ["query", "value"]}
TIMM_RESNETS = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "resnext50_32x4d",
                "resnext101_32x8d", "wide_resnet50_2", "wide_resnet101_2")


class InputError(Exception):
    """Bad input: reported as one line, exit status 1."""


# ---------------------------------------------------------------------------------------------------------------
# numpy's default_rng(seed), spelled out for the C++ side: SeedSequence(seed) -> PCG64 (XSL-RR 128/64).
# Only its uses here: permutation(n) (the shuffle) and uniform(low, high, size) (the lora_A init).

M32, M64, M128 = (1 << 32) - 1, (1 << 64) - 1, (1 << 128) - 1
PCG_MULTIPLIER = (2549297995355413924 << 64) + 4865540595714422341


def seed_sequence_words(seed, count):
    """SeedSequence(seed).generate_state(count, uint64): the entropy's 32-bit words (low first) mixed into a pool of
    4 words by hashmix / mix, then `count` 64-bit words, each two 32-bit outputs, the low one first."""
    entropy = []
    while True:
        entropy.append(seed & M32)
        seed >>= 32
        if not seed:
            break
    hash_const = 0x43B0D7E5

    def hashmix(value):
        nonlocal hash_const
        value = (value ^ hash_const) & M32
        hash_const = (hash_const * 0x931E8875) & M32
        value = (value * hash_const) & M32
        return value ^ (value >> 16)

    def mix(x, y):
        result = (0xCA01F9DD * x - 0x4973F715 * y) & M32
        return result ^ (result >> 16)

    pool = [hashmix(entropy[i] if i < len(entropy) else 0) for i in range(4)]
    for source in range(4):
        for target in range(4):
            if source != target:
                pool[target] = mix(pool[target], hashmix(pool[source]))
    for source in range(4, len(entropy)):
        for target in range(4):
            pool[target] = mix(pool[target], hashmix(entropy[source]))
    hash_const = 0x8B51F9DD
    words = []
    for i in range(2 * count):
        value = (pool[i % 4] ^ hash_const) & M32
        hash_const = (hash_const * 0x58F38DED) & M32
        value = (value * hash_const) & M32
        words.append(value ^ (value >> 16))
    return [words[2 * i] | (words[2 * i + 1] << 32) for i in range(count)]


class NumpyRng:
    """numpy.random.default_rng(seed) for the draws used here, in plain integers."""

    def __init__(self, seed):
        w = seed_sequence_words(seed, 4)
        initstate, initseq = (w[0] << 64) | w[1], (w[2] << 64) | w[3]
        self.inc = ((initseq << 1) | 1) & M128
        self.state = self.inc  # state 0, one step
        self.state = (self.state + initstate) & M128
        self.state = (self.state * PCG_MULTIPLIER + self.inc) & M128
        self.half = None  # the buffered upper 32 bits of the last 64-bit output

    def next_uint64(self):
        self.state = (self.state * PCG_MULTIPLIER + self.inc) & M128
        x = ((self.state >> 64) ^ self.state) & M64
        rotation = self.state >> 122
        return ((x >> rotation) | (x << ((64 - rotation) & 63))) & M64

    def next_uint32(self):
        if self.half is not None:
            value, self.half = self.half, None
            return value
        value = self.next_uint64()
        self.half = value >> 32
        return value & M32

    def next_double(self):
        return (self.next_uint64() >> 11) * (1.0 / 9007199254740992.0)

    def interval(self, maximum):
        """random_interval: a value in [0, maximum] by rejection under the smallest all-ones mask >= maximum."""
        if maximum == 0:
            return 0
        mask = maximum
        for shift in (1, 2, 4, 8, 16, 32):
            mask |= mask >> shift
        while True:
            value = (self.next_uint32() if maximum <= M32 else self.next_uint64()) & mask
            if value <= maximum:
                return value

    def permutation(self, n):
        order = list(range(n))
        for i in range(n - 1, 0, -1):
            j = self.interval(i)
            order[i], order[j] = order[j], order[i]
        return order

    def uniform(self, low, high, count):
        return [low + (high - low) * self.next_double() for _ in range(count)]


def epoch_order(n, seed, epoch, shuffle):
    if not shuffle:
        return list(range(n))
    return [int(i) for i in np.random.default_rng(seed + epoch).permutation(n)]


def lora_a_values(rng, r, fan_in):
    bound = 1.0 / math.sqrt(fan_in)
    return rng.uniform(-bound, bound, size=(r, fan_in)).astype(np.float32)


# ---------------------------------------------------------------------------------------------------------------
# Models.

class Loaded:
    """A model folder: the float64 port, what the checkpoint stores and how examples reach the model."""


def read_json(path, what):
    try:
        with open(path, encoding="utf-8") as file:
            return json.load(file)
    except FileNotFoundError:
        raise InputError(f"{what}: {path} does not exist")
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise InputError(f"{what}: {path} is not JSON ({error})")


def number_of_labels(config):
    if "num_labels" in config:
        return int(config["num_labels"])
    if "id2label" in config:
        return len(config["id2label"])
    if "num_classes" in config:
        return int(config["num_classes"])
    return 2  # PretrainedConfig's default


def build_model(folder):
    config = read_json(os.path.join(folder, "config.json"), "--model")
    c = dict(config)
    m = Loaded()
    m.config, m.num_labels = config, number_of_labels(config)
    c["num_labels"] = m.num_labels
    model_type = config.get("model_type")
    architectures = config.get("architectures") or []
    if model_type in ("bert", "roberta", "xlm-roberta", "camembert", "mpnet", "distilbert"):
        if architectures and not any(a.endswith("ForSequenceClassification") for a in architectures):
            raise InputError(f"--model: {folder} is a {architectures[0]}, not a ...ForSequenceClassification")
        m.kind, m.heads = "text", list(SEQ_CLS_HEADS)
        m.pad_id = int(config.get("pad_token_id", 0) if config.get("pad_token_id") is not None else 0)
        if model_type == "distilbert":
            c.setdefault("activation", "gelu")
            if c.get("sinusoidal_pos_embds"):
                raise InputError("--model: DistilBERT with sinusoidal_pos_embds is not supported")
            m.family, m.model = "distilbert", text_encoders.DistilBertForSequenceClassification(c)
            m.vocab, m.type_vocab, m.max_length = c["vocab_size"], None, c["max_position_embeddings"]
        else:
            for key, value in (("hidden_act", "gelu"), ("layer_norm_eps", 1e-12), ("type_vocab_size", 2),
                               ("pad_token_id", 0 if model_type == "bert" else 1),
                               ("position_embedding_type", "absolute")):
                if c.get(key) is None:
                    c[key] = value
            if c["position_embedding_type"] != "absolute":
                raise InputError(f"--model: position_embedding_type {c['position_embedding_type']} is not supported")
            if c["hidden_act"] not in ("gelu", "gelu_new", "relu"):
                raise InputError(f"--model: hidden_act {c['hidden_act']} is not supported")
            if model_type == "bert":
                m.family, m.model = "bert", text_encoders.BertForSequenceClassification(c)
                m.max_length = c["max_position_embeddings"]
            elif model_type == "mpnet":
                c.setdefault("relative_attention_num_buckets", 32)
                m.family, m.model = "mpnet", text_encoders.MPNetForSequenceClassification(c)
                m.max_length = c["max_position_embeddings"] - 2  # padding_idx 1
            else:
                m.family, m.model = "roberta", text_encoders.RobertaForSequenceClassification(c)
                m.max_length = c["max_position_embeddings"] - c["pad_token_id"] - 1
            m.vocab = c["vocab_size"]
            m.type_vocab = None if model_type == "mpnet" else c["type_vocab_size"]
    elif model_type in ("vit", "deit"):
        if architectures and not any(a.endswith("ForImageClassification") or a.endswith("WithTeacher")
                                     for a in architectures):
            raise InputError(f"--model: {folder} is a {architectures[0]}, not an image classifier")
        for key, value in (("qkv_bias", True), ("layer_norm_eps", 1e-12), ("hidden_act", "gelu"),
                           ("num_channels", 3)):
            if c.get(key) is None:
                c[key] = value
        m.kind, m.family, m.heads = "image", model_type, ["classifier"]
        if model_type == "vit":
            m.model = vit_fixtures.ViTForImageClassification(c)
        elif "DeiTForImageClassificationWithTeacher" in architectures:
            m.model = vit_fixtures.DeiTForImageClassificationWithTeacher(c)
        else:
            m.model = vit_fixtures.DeiTForImageClassification(c)
        m.image_shape = (c["num_channels"], c["image_size"], c["image_size"])
    elif model_type == "resnet":
        for key, value in (("num_channels", 3), ("hidden_act", "relu"), ("layer_type", "bottleneck"),
                           ("downsample_in_first_stage", False), ("downsample_in_bottleneck", False)):
            if c.get(key) is None:
                c[key] = value
        m.kind, m.family, m.heads = "image", "resnet", ["classifier"]
        m.model = resnet_fixtures.ResNetForImageClassification(c)
        m.image_shape = (c["num_channels"], None, None)
    elif model_type is None and "architecture" in config:
        if config["architecture"] not in TIMM_RESNETS:
            raise InputError(f"--model: timm architecture {config['architecture']} is not supported "
                             f"(torchvision's {', '.join(TIMM_RESNETS)})")
        import torchvision
        m.kind, m.family, m.heads = "image", "timm-resnet", ["fc"]
        m.model = getattr(torchvision.models, config["architecture"])(num_classes=m.num_labels)
        m.image_shape = (3, None, None)
    else:
        raise InputError(f"--model: config.json model_type {model_type!r} is not a supported classifier")
    problem = config.get("problem_type")
    if problem is None:
        problem = "regression" if m.num_labels == 1 else "single_label_classification"
    if problem not in ("regression", "single_label_classification", "multi_label_classification") or (
            problem == "regression" and m.num_labels != 1):
        raise InputError(f"--model: problem_type {problem} with num_labels {m.num_labels} is not supported")
    m.problem = problem
    m.folder = folder
    load_weights(m)
    return m


def load_weights(m):
    path = os.path.join(m.folder, "model.safetensors")
    if not os.path.exists(path):
        raise InputError(f"--model: {path} does not exist")
    try:
        m.stored = hf_format.read_safetensors(path)
    except (ValueError, KeyError, json.JSONDecodeError) as error:
        raise InputError(f"--model: {path}: {error}")
    state = m.model.state_dict()
    for name, tensor in state.items():
        if name not in m.stored:
            if name.endswith("num_batches_tracked"):
                continue
            raise InputError(f"--model: {path} has no tensor {name}")
        if tuple(m.stored[name].shape) != tuple(tensor.shape):
            raise InputError(f"--model: {path}: {name} has shape {list(m.stored[name].shape)}, the config needs "
                             f"{list(tensor.shape)}")
    m.model.double()
    with torch.no_grad():
        for name, tensor in m.model.state_dict().items():
            if name in m.stored:
                tensor.copy_(m.stored[name].to(tensor.dtype))
    extra = sorted(set(m.stored) - set(state))
    if extra:
        print(f"{PROG}: note: {len(extra)} tensor(s) the model does not use are kept as they are: "
              f"{', '.join(extra[:4])}{' ...' if len(extra) > 4 else ''}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------------------------
# Data.

def read_examples(path, m, truncate):
    if not os.path.exists(path):
        raise InputError(f"--data: {path} does not exist")
    base = os.path.dirname(os.path.abspath(path))
    examples = []
    with open(path, encoding="utf-8") as file:
        for number, line in enumerate(file, 1):
            if not line.strip():
                continue
            where = f"{path} line {number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise InputError(f"{where}: not JSON ({error})")
            if not isinstance(record, dict) or "label" not in record:
                raise InputError(f"{where}: no label")
            label = record["label"]
            if m.problem == "regression":
                if isinstance(label, bool) or not isinstance(label, (int, float)):
                    raise InputError(f"{where}: label {label!r} is not a number (num_labels 1: regression)")
                label = float(label)
            elif m.problem == "multi_label_classification":
                label = multi_hot(label, where, m)
            elif isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < m.num_labels:
                raise InputError(f"{where}: label {label!r} out of range [0, {m.num_labels})")
            if m.kind == "text":
                examples.append(text_example(record, label, where, m, truncate))
            else:
                examples.append(image_example(record, label, where, m, base))
    if not examples:
        raise InputError(f"--data: {path} has no examples")
    if m.kind == "image" and len({e[0].shape for e in examples}) > 1:
        raise InputError(f"--data: {path}: the images differ in shape")
    return examples


def multi_hot(label, where, m):
    """A multi-label example's label: num_labels numbers in [0, 1]."""
    def number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    text = json.dumps(label, separators=(",", ":"))  # as anvil's message writes it
    if not isinstance(label, list) or len(label) != m.num_labels or not all(number(v) for v in label):
        raise InputError(f"{where}: label {text} is not a list of {m.num_labels} numbers (problem_type "
                         "multi_label_classification)")
    if not all(0 <= v <= 1 for v in label):
        raise InputError(f"{where}: label {text} has a value outside [0, 1] (problem_type multi_label_classification)")
    return [float(v) for v in label]


def text_example(record, label, where, m, truncate):
    if "ids" not in record:
        raise InputError(f"{where}: no \"ids\" (the \"text\" form is not implemented by the reference)")
    ids = record["ids"]
    types = record.get("type_ids", [0] * len(ids) if isinstance(ids, list) else None)
    if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise InputError(f"{where}: ids must be a non-empty list of integers")
    if not isinstance(types, list) or len(types) != len(ids) or not all(isinstance(t, int) for t in types):
        raise InputError(f"{where}: type_ids must be a list of integers as long as ids")
    if len(ids) > m.max_length:
        if not truncate:
            raise InputError(f"{where}: example of {len(ids)} tokens is longer than the model's {m.max_length} "
                             "positions (--truncate)")
        ids, types = ids[:m.max_length], types[:m.max_length]
    bad = [i for i in ids if not 0 <= i < m.vocab]
    if bad:
        raise InputError(f"{where}: id {bad[0]} out of the vocabulary [0, {m.vocab})")
    if m.type_vocab is not None:
        bad = [t for t in types if not 0 <= t < m.type_vocab]
        if bad:
            raise InputError(f"{where}: type id {bad[0]} out of range [0, {m.type_vocab})")
    else:
        types = [0] * len(ids)
    return ids, types, label


def image_example(record, label, where, m, base):
    if "pixels" not in record:
        raise InputError(f"{where}: no \"pixels\" (the \"image\" form is not implemented by the reference)")
    path = os.path.join(base, record["pixels"])
    if not os.path.exists(path):
        raise InputError(f"{where}: pixels file {path} is missing")
    try:
        pixels = np.load(path, allow_pickle=False)
    except (ValueError, OSError) as error:
        raise InputError(f"{where}: pixels file {path}: {error}")
    channels, height, width = m.image_shape
    if pixels.dtype != np.float32 or pixels.ndim != 3 or pixels.shape[0] != channels:
        raise InputError(f"{where}: pixels {path} are {pixels.dtype} {list(pixels.shape)}, not float32 "
                         f"[{channels}, H, W]")
    if height is not None and pixels.shape[1:] != (height, width):
        raise InputError(f"{where}: pixels {path} are {pixels.shape[1]}x{pixels.shape[2]}, the model takes "
                         f"{height}x{width}")
    return pixels, label


def collate(examples, m):
    if m.problem in ("regression", "multi_label_classification"):
        labels = torch.tensor([e[-1] for e in examples], dtype=torch.float64)
    else:
        labels = torch.tensor([e[-1] for e in examples], dtype=torch.long)
    if m.kind == "image":
        pixels = torch.from_numpy(np.stack([e[0] for e in examples])).double()
        return {"pixels": pixels, "labels": labels}
    width = max(len(e[0]) for e in examples)
    ids = torch.full((len(examples), width), m.pad_id, dtype=torch.long)
    types = torch.zeros((len(examples), width), dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.float64)
    for row, (example_ids, example_types, _) in enumerate(examples):
        ids[row, :len(example_ids)] = torch.tensor(example_ids)
        types[row, :len(example_ids)] = torch.tensor(example_types)
        mask[row, :len(example_ids)] = 1.0
    return {"ids": ids, "types": types, "mask": mask, "labels": labels}


def batches(examples, batch_size, shuffle, seed):
    """Batches forever: epoch after epoch, each in epoch_order."""
    epoch = 0
    while True:
        order = epoch_order(len(examples), seed, epoch, shuffle)
        for start in range(0, len(order), batch_size):
            yield [examples[i] for i in order[start:start + batch_size]]
        epoch += 1


def logits_of(m, batch):
    if m.kind == "image":
        return m.model(batch["pixels"])
    return m.model(batch["ids"], batch["types"], batch["mask"])


def loss_of(m, logits, labels):
    if m.problem == "regression":
        return nn.MSELoss()(logits.squeeze(), labels.squeeze())
    if m.problem == "multi_label_classification":
        return nn.BCEWithLogitsLoss()(logits, labels)
    return nn.CrossEntropyLoss()(logits.view(-1, m.num_labels), labels.view(-1))


# ---------------------------------------------------------------------------------------------------------------
# The rules: decay, schedules, the training loop.

def decays(model, name):
    """transformers' get_decay_parameter_names for one parameter name."""
    parts = name.split(".")
    for i in range(1, len(parts)):
        if isinstance(model.get_submodule(".".join(parts[:i])), nn.LayerNorm):
            return False
    return not any(pattern.search(name.lower()) for pattern in DECAY_EXCLUDED)


def make_optimizer(options, named_params, decay_names):
    decay = [p for n, p in named_params if n in decay_names]
    rest = [p for n, p in named_params if n not in decay_names]
    groups = [g for g in ({"params": decay, "weight_decay": options.weight_decay},
                          {"params": rest, "weight_decay": 0.0}) if g["params"]]
    if options.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=options.lr, momentum=options.momentum, dampening=0.0,
                               nesterov=options.nesterov, foreach=False)
    return torch.optim.AdamW(groups, lr=options.lr, betas=options.betas, eps=options.eps, amsgrad=False,
                             foreach=False)


def train_loop(options, named_params, decay_names, step_loss, total_steps, after_step=None, after_record=None):
    """The optimisation loop; step_loss(step) computes one batch's mean loss. Returns the per-step records (and
    after each the records after_record(step) returns, the evaluations)."""
    params = [p for _, p in named_params]
    optimizer = make_optimizer(options, named_params, decay_names)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, train_optimizers.schedule_lambda(options.schedule, options.warmup_steps, total_steps))
    records = []
    for step in range(total_steps):
        optimizer.zero_grad(set_to_none=True)
        loss = step_loss(step)
        loss.backward()
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        if options.max_grad_norm is not None:
            norm = float(torch.nn.utils.clip_grad_norm_(params, options.max_grad_norm))
        else:
            norm = float(torch.norm(torch.stack([torch.norm(p.grad.detach(), 2.0) for p in params]), 2.0))
        lr = optimizer.param_groups[0]["lr"]
        optimizer.step()
        scheduler.step()
        if after_step is not None:
            after_step()
        records.append({"step": step + 1, "loss": float(loss.detach()), "lr": float(lr), "grad_norm": norm})
        if after_record is not None:
            records.extend(after_record(step + 1))
    return records


# ---------------------------------------------------------------------------------------------------------------
# LoRA.

class LoraLinear(nn.Module):
    """PEFT's lora.Linear with one adapter, no dropout, no bias: base(x) + lora_B(lora_A(x)) * alpha / r."""

    def __init__(self, base_layer, r, alpha):
        super().__init__()
        self.base_layer = base_layer
        self.lora_A = nn.Linear(base_layer.in_features, r, bias=False, dtype=torch.float64)
        self.lora_B = nn.Linear(r, base_layer.out_features, bias=False, dtype=torch.float64)
        self.scaling = alpha / r

    def forward(self, x):
        return self.base_layer(x) + self.lora_B(self.lora_A(x)) * self.scaling


def head_modules(model, modules_to_save):
    """PEFT's _set_trainable: modules whose name ends with an entry (str.endswith); not those inside one."""
    chosen = []
    for name, _ in model.named_modules():
        if name and any(name.endswith(t) for t in modules_to_save):
            if not any(name.startswith(c + ".") for c in chosen):
                chosen.append(name)
    return chosen


def lora_targets(model, targets, modules_to_save):
    """Module names PEFT's check_target_module_exists selects; errors for unknown or non-Linear targets."""
    found, used, in_head = [], set(), set()
    for name, module in model.named_modules():
        if not name:
            continue
        if any(re.match(rf"(^|.*\.){m}($|\..*)", name) for m in modules_to_save):
            if isinstance(targets, list):
                in_head.update(t for t in targets if name == t or name.endswith("." + t))
            continue
        if isinstance(targets, str):
            hit = re.fullmatch(targets, name) is not None
            if hit:
                used.add(targets)
        else:
            hits = [t for t in targets if name == t or name.endswith("." + t)]
            used.update(hits)
            hit = bool(hits)
        if hit:
            if not isinstance(module, nn.Linear):
                raise InputError(f"LoRA target module {name} is a {type(module).__name__}, not a Linear")
            found.append(name)
    unknown = [t for t in ([targets] if isinstance(targets, str) else targets) if t not in used]
    if unknown and unknown[0] in in_head:
        raise InputError(f"LoRA target module {unknown[0]!r} is in modules_to_save {modules_to_save} (the head is "
                         "trained fully)")
    if unknown:
        raise InputError(f"unknown LoRA target module {unknown[0]!r} (no module of the model is named so)")
    return sorted(found)


def lora_settings(options, m):
    """(r, alpha, targets, modules_to_save, adapter tensors or None) from the command line and --init-adapter."""
    default_heads = list(m.heads)
    if options.init_adapter:
        folder = options.init_adapter
        config = read_json(os.path.join(folder, "adapter_config.json"), "--init-adapter")
        if config.get("peft_type") != "LORA":
            raise InputError(f"--init-adapter: {folder} is not a LoRA adapter (peft_type {config.get('peft_type')})")
        for key, fine in (("use_rslora", False), ("use_dora", False), ("bias", "none"), ("fan_in_fan_out", False),
                          ("rank_pattern", {}), ("alpha_pattern", {}), ("layers_to_transform", None),
                          ("exclude_modules", None)):
            if config.get(key, fine) not in (fine, None) and config.get(key) != fine:
                raise InputError(f"--init-adapter: adapter_config.json {key} = {config[key]!r} is not supported")
        r, alpha, targets = int(config["r"]), float(config["lora_alpha"]), config["target_modules"]
        if isinstance(targets, list):
            targets = sorted(targets)
        heads = list(config.get("modules_to_save") or [])
        if m.kind == "text" or not heads:
            heads += [h for h in default_heads if h not in heads]
        heads = list(dict.fromkeys(heads))
        if options.lora is not None and options.lora != r:
            raise InputError(f"--lora {options.lora} disagrees with the adapter's r {r}")
        if options.lora_alpha is not None and options.lora_alpha != alpha:
            raise InputError(f"--lora-alpha {options.lora_alpha} disagrees with the adapter's lora_alpha {alpha}")
        if options.lora_targets is not None and (not isinstance(targets, list)
                                                 or sorted(options.lora_targets) != targets):
            raise InputError(f"--lora-targets disagrees with the adapter's target_modules {targets}")
        path = os.path.join(folder, "adapter_model.safetensors")
        if not os.path.exists(path):
            raise InputError(f"--init-adapter: {path} does not exist")
        return r, alpha, targets, heads, hf_format.read_safetensors(path), config.get("task_type")
    r = options.lora
    alpha = options.lora_alpha if options.lora_alpha is not None else 8.0
    targets = options.lora_targets
    if targets is None:
        if m.config.get("model_type") not in PEFT_DEFAULT_TARGETS:
            raise InputError(f"--lora-targets is needed for model_type {m.config.get('model_type')}")
        targets = PEFT_DEFAULT_TARGETS[m.config["model_type"]]
    if r <= 0:
        raise InputError("--lora must be positive")
    return r, alpha, sorted(set(targets)), default_heads, None, ("SEQ_CLS" if m.kind == "text" else None)


def apply_lora(m, options):
    """Wraps the targets; returns (trainable name -> (param, saved name, source dtype, source tensor), info)."""
    r, alpha, targets, heads, adapter, task_type = lora_settings(options, m)
    model = m.model
    names = lora_targets(model, targets, heads)
    head_names = head_modules(model, heads)
    rng = np.random.default_rng(options.seed)
    tensors = {}  # model param name -> (saved name, dtype, the stored tensor it starts from)
    for name in names:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        base = getattr(parent, child)
        layer = LoraLinear(base, r, alpha)
        setattr(parent, child, layer)
        a = torch.from_numpy(lora_a_values(rng, r, base.in_features))
        b = torch.zeros((base.out_features, r), dtype=torch.float32)
        for kind, start in (("lora_A", a), ("lora_B", b)):
            tensors[f"{name}.{kind}.weight"] = (f"base_model.model.{name}.{kind}.weight", start)
    for head in head_names:
        for pname, p in model.get_submodule(head).named_parameters():
            full = f"{head}.{pname}"
            tensors[full] = (f"base_model.model.{full}", m.stored[full])
    if adapter is not None:
        saved_to_model = {saved: name for name, (saved, _) in tensors.items()}
        for key, value in adapter.items():
            if key not in saved_to_model:
                raise InputError(f"--init-adapter: adapter tensor {key} belongs to no LoRA module or head of the "
                                 "model")
            name = saved_to_model[key]
            if tuple(value.shape) != tuple(tensors[name][1].shape):
                raise InputError(f"--init-adapter: {key} has shape {list(value.shape)}, expected "
                                 f"{list(tensors[name][1].shape)}")
            tensors[name] = (key, value)
        missing = [saved for name, (saved, _) in tensors.items() if ".lora_" in name and saved not in adapter]
        if missing:
            raise InputError(f"--init-adapter: adapter_model.safetensors has no {missing[0]}")
    for p in model.parameters():
        p.requires_grad_(False)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, (_, start) in tensors.items():
            params[name].copy_(start.to(torch.float64))
            params[name].requires_grad_(True)
    info = {"r": r, "alpha": alpha, "targets": targets, "heads": heads, "task_type": task_type,
            "modules": names, "head_modules": head_names}
    return tensors, info


# ---------------------------------------------------------------------------------------------------------------
# Outputs.

def stored_round(value, dtype):
    """float64 -> float32 -> the stored dtype (anvil keeps float32 master weights)."""
    if not dtype.is_floating_point:
        return value.to(dtype)
    return value.detach().to(torch.float32).to(dtype).contiguous()


def copy_aux(model_dir, out, with_config):
    for name in (("config.json",) if with_config else ()) + AUX_FILES:
        source = os.path.join(model_dir, name)
        if os.path.isfile(source):
            shutil.copyfile(source, os.path.join(out, name))


def adapter_config(info, options):
    alpha = info["alpha"]
    return {
        "alpha_pattern": {}, "auto_mapping": None, "base_model_name_or_path": options.model, "bias": "none",
        "fan_in_fan_out": False, "inference_mode": True, "init_lora_weights": True, "layers_pattern": None,
        "layers_to_transform": None, "lora_alpha": int(alpha) if float(alpha).is_integer() else alpha,
        "lora_dropout": 0.0, "modules_to_save": info["heads"], "peft_type": "LORA", "r": info["r"],
        "rank_pattern": {}, "revision": None, "target_modules": info["targets"], "task_type": info["task_type"],
        "use_dora": False, "use_rslora": False,
    }


# ---------------------------------------------------------------------------------------------------------------
# The command.

class Parser(argparse.ArgumentParser):
    def error(self, message):  # a usage error is bad input too: one line, exit status 1
        print(f"{PROG}: error: {message}", file=sys.stderr)
        sys.exit(1)


def parse_args(argv):
    parser = Parser(prog=PROG, description=__doc__.split("\n")[0])
    parser.add_argument("--model")
    parser.add_argument("--data")
    parser.add_argument("--out")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--steps", type=int)
    group.add_argument("--epochs", type=int)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--optimizer", choices=("adamw", "sgd"), default="adamw")
    parser.add_argument("--momentum", type=float, default=0.0)
    parser.add_argument("--nesterov", action="store_true")
    parser.add_argument("--weight-decay", type=float, default=0.0)
    parser.add_argument("--betas", default="0.9,0.999")
    parser.add_argument("--eps", type=float, default=1e-8)
    parser.add_argument("--schedule", choices=("constant", "linear", "cosine"), default="linear")
    parser.add_argument("--warmup-steps", type=int, default=0)
    parser.add_argument("--max-grad-norm", type=float)
    parser.add_argument("--no-shuffle", action="store_true")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--freeze", action="append", default=[])
    parser.add_argument("--lora", type=int)
    parser.add_argument("--lora-alpha", type=float)
    parser.add_argument("--lora-targets")
    parser.add_argument("--init-adapter")
    parser.add_argument("--truncate", action="store_true")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--eval")
    for ignored in ("--save-every", "--resume", "--backend"):
        parser.add_argument(ignored)
    parser.add_argument("--self-check", action="store_true")
    options = parser.parse_args(argv)
    if options.self_check:
        return options
    for required in ("model", "data", "out"):
        if getattr(options, required) is None:
            parser.error(f"--{required} is required")
    try:
        options.betas = tuple(float(b) for b in options.betas.split(","))
        if len(options.betas) != 2:
            raise ValueError
    except ValueError:
        parser.error("--betas takes B1,B2")
    if options.lora_targets is not None:
        options.lora_targets = [t for t in options.lora_targets.split(",") if t]
    return options


def validate(options):
    if options.batch_size <= 0:
        raise InputError("--batch-size must be positive")
    if options.steps is not None and options.steps <= 0 or options.epochs is not None and options.epochs <= 0:
        raise InputError("--steps / --epochs must be positive")
    if options.warmup_steps < 0:
        raise InputError("--warmup-steps must not be negative")
    if options.nesterov and (options.optimizer != "sgd" or options.momentum <= 0):
        raise InputError("--nesterov needs --optimizer sgd and a positive --momentum")
    if (options.lora_alpha is not None or options.lora_targets is not None) and options.lora is None \
            and options.init_adapter is None:
        raise InputError("--lora-alpha / --lora-targets need --lora R")
    for ignored in ("save_every", "resume", "backend"):
        if getattr(options, ignored) is not None:
            print(f"{PROG}: note: --{ignored.replace('_', '-')} is ignored by the reference", file=sys.stderr)
    try:
        return [re.compile(r) for r in options.freeze]
    except re.error as error:
        raise InputError(f"--freeze: bad regex ({error})")


def run(options, stdout):
    freeze = validate(options)
    torch.set_num_threads(1)
    m = build_model(options.model)
    examples = read_examples(options.data, m, options.truncate)
    lora = options.lora is not None or options.init_adapter is not None
    if lora:
        lora_tensors, info = apply_lora(m, options)
        candidates = list(lora_tensors)
    else:
        candidates = [name for name, _ in m.model.named_parameters()]
    params = dict(m.model.named_parameters())
    trainable = [name for name in candidates if not any(r.search(name) for r in freeze)]
    if not trainable:
        raise InputError("--freeze " + " --freeze ".join(options.freeze) + " freezes every trainable tensor")
    for name, p in params.items():
        p.requires_grad_(name in trainable)
    named = [(name, params[name]) for name in trainable]
    decay_names = {name for name in trainable if decays(m.model, name)}

    # Buffers that a --freeze regex finds keep their values (restored after each forward).
    frozen_buffers = {name: b.detach().clone() for name, b in m.model.named_buffers()
                      if any(r.search(name) for r in freeze)}
    buffers = dict(m.model.named_buffers())
    steps_per_epoch = math.ceil(len(examples) / options.batch_size)
    total = options.steps if options.steps is not None else (options.epochs or 3) * steps_per_epoch
    stream = batches(examples, options.batch_size, not options.no_shuffle, options.seed)
    m.model.train()  # BatchNorm in train mode

    def step_loss(step):
        batch = collate(next(stream), m)
        hf_format.Dropout.draws = np.random.default_rng([options.seed, step + 1])
        try:
            loss = loss_of(m, logits_of(m, batch), batch["labels"])
        finally:
            hf_format.Dropout.draws = None
        with torch.no_grad():
            for name, value in frozen_buffers.items():
                buffers[name].copy_(value)
        return loss

    def report(record):
        if options.json:
            print(json.dumps(record), file=stdout, flush=True)
        else:
            print(f"step {record['step']}/{total}  loss {record['loss']:.6f}  lr {record['lr']:.6g}  "
                  f"grad_norm {record['grad_norm']:.6f}", file=stdout, flush=True)

    eval_examples = read_examples(options.eval, m, options.truncate) if options.eval else None

    def evaluation(step):
        """After each epoch's last step: mean loss and accuracy (or MSE) on --eval, in eval mode, batches in
        file order."""
        if eval_examples is None or step % steps_per_epoch != 0:
            return []
        m.model.eval()
        total_loss, hits, squared = 0.0, 0, 0.0
        with torch.no_grad():
            for start in range(0, len(eval_examples), options.batch_size):
                batch = collate(eval_examples[start:start + options.batch_size], m)
                logits = logits_of(m, batch)
                total_loss += float(loss_of(m, logits, batch["labels"])) * len(batch["labels"])
                if m.problem == "regression":
                    squared += float(((logits.view(-1) - batch["labels"]) ** 2).sum())
                elif m.problem == "multi_label_classification":
                    hits += int(((logits > 0) == (batch["labels"] > 0.5)).all(dim=1).sum())
                else:
                    hits += int((logits.argmax(dim=1) == batch["labels"]).sum())
        m.model.train()
        n = len(eval_examples)
        record = {"epoch": step // steps_per_epoch, "step": step, "eval_loss": total_loss / n}
        record["eval_mse" if m.problem == "regression" else "eval_accuracy"] = (
            squared / n if m.problem == "regression" else hits / n)
        return [record]

    records = train_loop(options, named, decay_names, step_loss, total, after_record=evaluation)
    for record in records:
        if "eval_loss" in record:
            if options.json:
                print(json.dumps(record), file=stdout, flush=True)
            continue
        report(record)
    records = [r for r in records if "eval_loss" not in r]

    os.makedirs(options.out, exist_ok=True)
    state = m.model.state_dict()
    updated_buffers = [name for name in buffers if name not in frozen_buffers
                       and name.endswith(("running_mean", "running_var", "num_batches_tracked"))]
    reference = {}
    if lora:
        adapter = {}
        for name, (saved, start) in lora_tensors.items():
            if name in trainable:
                adapter[saved] = stored_round(params[name], start.dtype)
                reference[saved] = params[name].detach().clone()
            else:
                adapter[saved] = start
        copy_aux(options.model, options.out, with_config=False)
        hf_format.write_safetensors(os.path.join(options.out, "adapter_model.safetensors"), adapter)
        with open(os.path.join(options.out, "adapter_config.json"), "w", encoding="utf-8") as file:
            file.write(json.dumps(adapter_config(info, options), indent=2, sort_keys=True))
    else:
        out = {}
        for name, tensor in m.stored.items():
            if name in trainable or name in updated_buffers:
                out[name] = stored_round(state[name], tensor.dtype)
                if state[name].dtype.is_floating_point:
                    reference[name] = state[name].detach().clone()
            else:
                out[name] = tensor
        copy_aux(options.model, options.out, with_config=True)
        hf_format.write_safetensors(os.path.join(options.out, "model.safetensors"), out)
    hf_format.write_safetensors(os.path.join(options.out, "reference_weights_f64.safetensors"),
                                {k: v.to(torch.float64).contiguous() for k, v in reference.items()})
    return records


def main(argv=None, stdout=None):
    options = parse_args(argv)
    if options.self_check:
        return self_check()
    try:
        run(options, stdout or sys.stdout)
    except InputError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 1
    return 0


# ---------------------------------------------------------------------------------------------------------------
# Self-checks.

def check(condition, what):
    print(("ok    " if condition else "FAIL  ") + what)
    if not condition:
        check.failed = True


def self_check():
    check.failed = False
    torch.set_num_threads(1)
    check_rng()
    check_decay_rule()
    check_optimizers()
    check_schedules()
    check_lora()
    check_batchnorm()
    check_determinism()
    print("self-check:", "FAILED" if check.failed else "all passed")
    return 1 if check.failed else 0


def check_rng():
    same_perm = all(NumpyRng(s).permutation(n) == epoch_order(n, s, 0, True)
                    for s in list(range(40)) + [2**32 + 7, 2**64 + 1] for n in (1, 2, 5, 12, 37))
    check(same_perm, "NumpyRng.permutation == numpy default_rng(seed).permutation (42 seeds x 5 sizes)")
    same_uniform = True
    for seed in (0, 1, 42, 2**40):
        rng, port = np.random.default_rng(seed), NumpyRng(seed)
        for r, fan_in in ((4, 32), (2, 7)):
            bound = 1.0 / math.sqrt(fan_in)
            values = np.array(port.uniform(-bound, bound, r * fan_in)).astype(np.float32).reshape(r, fan_in)
            same_uniform &= np.array_equal(values, lora_a_values(rng, r, fan_in))
    check(same_uniform, "NumpyRng.uniform == numpy default_rng(seed).uniform (the lora_A draw)")
    # kaiming_uniform_(a=sqrt(5)) on [r, in]: bound = sqrt(3) * gain / sqrt(fan_in), gain = sqrt(2 / (1 + 5))
    worst = 0.0
    for fan_in in (1, 7, 32, 768, 4096):
        w = torch.empty(4, fan_in, dtype=torch.float64)
        gain = nn.init.calculate_gain("leaky_relu", math.sqrt(5))
        torch_bound = math.sqrt(3.0) * gain / math.sqrt(nn.init._calculate_correct_fan(w, "fan_in"))
        worst = max(worst, abs(torch_bound * math.sqrt(fan_in) - 1.0))
        nn.init.kaiming_uniform_(w, a=math.sqrt(5))
        worst = max(worst, float(w.abs().max()) * math.sqrt(fan_in) - 1.0)
    check(worst < 1e-14, f"kaiming_uniform_(a=sqrt(5)) bound == 1/sqrt(in) (|rel diff| {worst:.1e})")


def hf_decay_names(model):
    """transformers' get_parameter_names(model, [nn.LayerNorm], patterns), recursively as trainer_pt_utils has it."""
    def names(module):
        result = []
        for child_name, child in module.named_children():
            result += [f"{child_name}.{n}" for n in names(child)
                       if not isinstance(child, nn.LayerNorm)
                       and not any(p.search(f"{child_name}.{n}".lower()) for p in DECAY_EXCLUDED)]
        result += [k for k in module._parameters if not any(p.search(k.lower()) for p in DECAY_EXCLUDED)]
        return result
    return set(names(model))


def check_decay_rule():
    c = text_encoders.bert_like_config("bert", 16, 2, num_labels=3)
    models = {"bert": text_encoders.BertForSequenceClassification(c),
              "mpnet": text_encoders.MPNetForSequenceClassification(dict(c, relative_attention_num_buckets=32)),
              "distilbert": text_encoders.DistilBertForSequenceClassification(text_encoders.distil_config(
                  dim=16, n_heads=2, hidden_dim=20, num_labels=3)),
              "vit": vit_fixtures.ViTForImageClassification(vit_fixtures.config_for("vit", "x", hidden_size=16,
                                                                                     num_attention_heads=2)),
              "resnet": resnet_fixtures.ResNetForImageClassification(
                  {"num_channels": 3, "embedding_size": 4, "hidden_sizes": [4, 8], "depths": [1, 1],
                   "layer_type": "basic", "hidden_act": "relu", "downsample_in_first_stage": False,
                   "downsample_in_bottleneck": False, "num_labels": 3})}
    same = all({n for n, _ in m.named_parameters() if decays(m, n)} == hf_decay_names(m) for m in models.values())
    check(same, "decay rule == transformers' recursive get_parameter_names on BERT, MPNet, DistilBERT, ViT, ResNet")
    resnet = models["resnet"]
    check(decays(resnet, "resnet.embedder.embedder.normalization.weight")
          and not decays(models["mpnet"], "mpnet.encoder.relative_attention_bias.weight")
          and decays(models["vit"], "vit.embeddings.cls_token"),
          "BatchNorm weights and cls_token decay; relative_attention_bias does not")


class Options:
    def __init__(self, **kw):
        self.__dict__.update(dict(optimizer="adamw", lr=0.1, momentum=0.0, nesterov=False, weight_decay=0.0,
                                  betas=(0.9, 0.999), eps=1e-8, schedule="constant", warmup_steps=0,
                                  max_grad_norm=None), **kw)


def hand_training(options, w, b, x, y, steps, lrs_lambda):
    """A 1-layer softmax regression trained by formulas written out (numpy float64)."""
    w, b = w.copy(), b.copy()
    state = {"m": [np.zeros_like(w), np.zeros_like(b)], "v": [np.zeros_like(w), np.zeros_like(b)],
             "buf": [None, None]}
    b1, b2 = options.betas
    records = []
    for t in range(1, steps + 1):
        logits = x @ w.T + b
        z = logits - logits.max(1, keepdims=True)
        p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
        loss = -np.mean(np.log(p[np.arange(len(y)), y]))
        d = p.copy()
        d[np.arange(len(y)), y] -= 1
        d /= len(y)
        grads = [d.T @ x, d.sum(0)]
        norm = math.sqrt(sum(float((g * g).sum()) for g in grads))
        if options.max_grad_norm is not None:
            coef = min(1.0, options.max_grad_norm / (norm + 1e-6))
            grads = [g * coef for g in grads]
        lr = options.lr * lrs_lambda(t - 1)
        params = [w, b]
        wds = [options.weight_decay, 0.0]  # the bias does not decay
        for i, (param, g) in enumerate(zip(params, grads)):
            if options.optimizer == "adamw":
                param *= 1 - lr * wds[i]
                state["m"][i] = b1 * state["m"][i] + (1 - b1) * g
                state["v"][i] = b2 * state["v"][i] + (1 - b2) * g * g
                m_hat = state["m"][i] / (1 - b1 ** t)
                v_hat = state["v"][i] / (1 - b2 ** t)
                param -= lr * m_hat / (np.sqrt(v_hat) + options.eps)
            else:
                g = g + wds[i] * param
                if options.momentum:
                    buf = g.copy() if state["buf"][i] is None else options.momentum * state["buf"][i] + g
                    state["buf"][i] = buf
                    g = g + options.momentum * buf if options.nesterov else buf
                param -= lr * g
        records.append((loss, lr, norm))
    return w, b, records


def check_optimizers():
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal((6, 5)), rng.integers(0, 3, 6)
    w0, b0 = rng.standard_normal((3, 5)), rng.standard_normal(3) * 0.1
    cases = [Options(optimizer="adamw", lr=0.05, weight_decay=0.1, betas=(0.8, 0.95), eps=1e-6, schedule="linear",
                     warmup_steps=2, max_grad_norm=0.3),
             Options(optimizer="sgd", lr=0.2, momentum=0.9, nesterov=True, weight_decay=0.05, schedule="cosine",
                     warmup_steps=1, max_grad_norm=0.5),
             Options(optimizer="sgd", lr=0.3, momentum=0.7, weight_decay=0.0, schedule="constant", warmup_steps=3),
             Options(optimizer="sgd", lr=1.0)]
    for options in cases:
        steps = 5
        layer = nn.Linear(5, 3).double()
        with torch.no_grad():
            layer.weight.copy_(torch.from_numpy(w0))
            layer.bias.copy_(torch.from_numpy(b0))
        named = list(layer.named_parameters())
        decay_names = {n for n, _ in named if decays(layer, n)}
        xt, yt = torch.from_numpy(x), torch.from_numpy(y)
        records = train_loop(options, named, decay_names, lambda s: nn.CrossEntropyLoss()(layer(xt), yt), steps)
        lam = train_optimizers.schedule_lambda(options.schedule, options.warmup_steps, steps)
        w, b, hand = hand_training(options, w0, b0, x, y, steps, lam)
        diff = max(np.abs(layer.weight.detach().numpy() - w).max(), np.abs(layer.bias.detach().numpy() - b).max())
        rec = max(max(abs(r["loss"] - h[0]), abs(r["lr"] - h[1]), abs(r["grad_norm"] - h[2]))
                  for r, h in zip(records, hand))
        check(diff < 1e-12 and rec < 1e-12 and decay_names == {"weight"},
              f"{options.optimizer}{' nesterov' if options.nesterov else ''} {options.schedule} warmup "
              f"{options.warmup_steps} clip {options.max_grad_norm}: torch.optim == formulas "
              f"(weights {diff:.1e}, loss/lr/norm {rec:.1e})")


def check_schedules():
    # transformers' formulas at the warmup boundaries, written independently of train_optimizers' lambdas.
    ok = True
    for kind in ("constant", "linear", "cosine"):
        for warmup, total in ((0, 6), (3, 8), (1, 1), (4, 4), (2, 9)):
            lam = train_optimizers.schedule_lambda(kind, warmup, total)
            layer = nn.Linear(1, 1)
            options = Options(optimizer="sgd", lr=0.5, schedule=kind, warmup_steps=warmup)
            lrs = [r["lr"] for r in train_loop(options, list(layer.named_parameters()), set(),
                                               lambda s: layer(torch.ones(1, 1)).sum(), total)]
            for s in range(total):
                if s < warmup:
                    expected = s / warmup
                elif kind == "constant":
                    expected = 1.0
                else:
                    progress = (s - warmup) / max(1, total - warmup)
                    expected = 1 - progress if kind == "linear" else 0.5 * (1 + math.cos(math.pi * progress))
                ok &= abs(lrs[s] - 0.5 * expected) < 1e-15 and abs(lam(s) - expected) < 1e-15
            ok &= lrs[0] == (0.0 if warmup else 0.5)
    check(ok, "schedules: the reported lr of each step == base_lr * transformers' formula (step 1 of a warmup: 0)")


def tiny_bert(seed=3, labels=3):
    c = text_encoders.bert_like_config("bert", 16, 2, num_labels=labels, vocab_size=30, max_position_embeddings=12)
    model = text_encoders.BertForSequenceClassification(c)
    hf_format.randomize(model, hf_format.seeded_generator(seed))
    return model.double().eval(), c


def check_lora():
    model, c = tiny_bert()
    base = text_encoders.BertForSequenceClassification(c).double()
    base.load_state_dict(model.state_dict())
    names = lora_targets(model, ["query", "value", "pooler.dense"], SEQ_CLS_HEADS)
    generator = hf_format.seeded_generator(9)
    r, alpha = 3, 5.0
    for name in names:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        layer = LoraLinear(getattr(parent, child), r, alpha)
        with torch.no_grad():
            layer.lora_A.weight.copy_(torch.randn(layer.lora_A.weight.shape, generator=generator))
            layer.lora_B.weight.copy_(torch.randn(layer.lora_B.weight.shape, generator=generator))
        setattr(parent, child, layer)
        merged = base.get_submodule(name)
        with torch.no_grad():
            merged.weight += alpha / r * layer.lora_B.weight @ layer.lora_A.weight
    ids = torch.randint(0, 30, (2, 7), generator=generator)
    types = torch.zeros_like(ids)
    mask = torch.ones(2, 7, dtype=torch.float64)
    mask[1, 5:] = 0
    with torch.no_grad():
        diff = float((model(ids, types, mask) - base(ids, types, mask)).abs().max())
    check(len(names) == 5 and diff < 1e-12,
          f"LoRA forward == base with W + (alpha/r) B A on {len(names)} modules (max |diff| {diff:.1e})")
    distil = text_encoders.DistilBertForSequenceClassification(text_encoders.distil_config(
        dim=16, n_heads=2, hidden_dim=20, num_labels=3))
    check(head_modules(distil, SEQ_CLS_HEADS) == ["pre_classifier", "classifier"]
          and lora_targets(base, ["dense"], SEQ_CLS_HEADS)[-1] == "bert.pooler.dense",
          "modules_to_save by str.endswith (DistilBERT: pre_classifier, classifier); targets by '.' suffix")


def check_batchnorm():
    generator = hf_format.seeded_generator(11)
    x = torch.randn(4, 3, 5, 6, generator=generator, dtype=torch.float64) * 2 + 0.5
    bn = nn.BatchNorm2d(3).double()
    with torch.no_grad():
        bn.weight.copy_(torch.randn(3, generator=generator, dtype=torch.float64))
        bn.bias.copy_(torch.randn(3, generator=generator, dtype=torch.float64))
        bn.running_mean.copy_(torch.randn(3, generator=generator, dtype=torch.float64))
        bn.running_var.fill_(1.5)

    def by_hand(module, value):
        mean = value.mean(dim=(0, 2, 3))
        count = value.numel() / value.shape[1]
        biased = ((value - mean[None, :, None, None]) ** 2).mean(dim=(0, 2, 3))
        out = (value - mean[None, :, None, None]) / torch.sqrt(biased[None, :, None, None] + module.eps)
        out = out * module.weight[None, :, None, None] + module.bias[None, :, None, None]
        running_mean = 0.9 * module.running_mean + 0.1 * mean
        running_var = 0.9 * module.running_var + 0.1 * biased * count / (count - 1)
        return out, running_mean, running_var

    with torch.no_grad():
        expected = by_hand(bn, x)
        out = bn.train()(x)
    diff = max(float((a - b).abs().max()) for a, b in zip(expected, (out, bn.running_mean, bn.running_var)))
    check(diff < 1e-13 and int(bn.num_batches_tracked) == 1,
          f"BatchNorm by hand == nn.BatchNorm2d.train(): output, running stats, num_batches_tracked ({diff:.1e})")
    # The ResNet port in train mode: every BatchNorm's output and updated statistics follow the same formulas.
    config = {"num_channels": 3, "embedding_size": 4, "hidden_sizes": [4, 8], "depths": [1, 1],
              "layer_type": "basic", "hidden_act": "relu", "downsample_in_first_stage": False,
              "downsample_in_bottleneck": False, "num_labels": 3}
    model = resnet_fixtures.ResNetForImageClassification(config)
    hf_format.randomize(model, generator)
    model.double().train()
    seen = []

    def hook(module, inputs, output):
        seen.append((module, inputs[0].detach(), output.detach(), module.running_mean.clone(),
                     module.running_var.clone()))

    before = {}
    for name, module in model.named_modules():
        if isinstance(module, nn.BatchNorm2d):
            before[module] = (module.running_mean.clone(), module.running_var.clone())
            module.register_forward_hook(hook)
    with torch.no_grad():
        model(torch.randn(3, 3, 16, 16, generator=generator, dtype=torch.float64))
    worst = 0.0
    for module, value, output, running_mean, running_var in seen:
        probe = nn.BatchNorm2d(module.num_features).double()
        with torch.no_grad():
            probe.weight.copy_(module.weight)
            probe.bias.copy_(module.bias)
            probe.running_mean.copy_(before[module][0])
            probe.running_var.copy_(before[module][1])
            expected = by_hand(probe, value)
        for a, b in zip(expected, (output, running_mean, running_var)):
            worst = max(worst, float((a - b).abs().max()))
    check(len(seen) == len(before) == 6 and worst < 1e-12
          and all(int(m.num_batches_tracked) == 1 for m in before),
          f"ResNet port in train mode: its {len(seen)} BatchNorms == nn.BatchNorm2d.train() formulas ({worst:.1e})")


def check_determinism():
    with tempfile.TemporaryDirectory() as tmp:
        model, c = tiny_bert(seed=4)
        folder = os.path.join(tmp, "model")
        os.makedirs(folder)
        hf_format.write_safetensors(os.path.join(folder, "model.safetensors"), hf_format.state_dict_as(
            model, torch.float32))
        hf_format.write_json(os.path.join(folder, "config.json"), c)
        rng = np.random.default_rng(1)
        with open(os.path.join(tmp, "train.jsonl"), "w") as file:
            for i in range(7):
                n = int(rng.integers(2, 10))
                file.write(json.dumps({"ids": [int(v) for v in rng.integers(1, 30, n)], "label": i % 3}) + "\n")
        outputs = []
        for run_index, extra in enumerate(([], [], ["--lora", "2", "--lora-targets", "query,key", "--lr", "0"])):
            out = os.path.join(tmp, f"out{run_index}")
            lines = io.StringIO()
            code = main(["--model", folder, "--data", os.path.join(tmp, "train.jsonl"), "--out", out, "--steps", "3",
                         "--batch-size", "3", "--lr", "0.01", "--json", "--seed", "5"] + extra, lines)
            files = {name: open(os.path.join(out, name), "rb").read() for name in sorted(os.listdir(out))}
            outputs.append((code, lines.getvalue(), files))
        check(outputs[0] == outputs[1] and outputs[0][0] == 0 and len(outputs[0][1].splitlines()) == 3,
              "determinism: two runs give identical json lines and files")
        # A fresh adapter at lr 0 keeps its init: lora_A from default_rng(seed) in sorted module order, lora_B 0.
        adapter = hf_format.read_safetensors(os.path.join(tmp, "out2", "adapter_model.safetensors"))
        rng = np.random.default_rng(5)
        prefix = "base_model.model.bert.encoder.layer."
        first, second = lora_a_values(rng, 2, 16), lora_a_values(rng, 2, 16)
        check(outputs[2][0] == 0 and len(adapter) == 8 + 2
              and np.array_equal(adapter[prefix + "0.attention.self.key.lora_A.weight"].numpy(), first)
              and np.array_equal(adapter[prefix + "0.attention.self.query.lora_A.weight"].numpy(), second)
              and not adapter[prefix + "1.attention.self.query.lora_B.weight"].any()
              and "base_model.model.classifier.weight" in adapter,
              "fresh LoRA: PEFT's names, lora_A = the documented default_rng(seed) draw, lora_B = 0, head saved")


if __name__ == "__main__":
    sys.exit(main())
