"""Fixtures for tests/test_vit.cpp and tests/test_image_classifier.cpp: tiny ViT and DeiT image classifiers with
seeded random weights in Hugging Face's format, the pixels they are run on and the logits an independent
PyTorch implementation computes for them.

The models below are a plain-PyTorch port of transformers' modeling_vit.py (ViTForImageClassification) and
modeling_deit.py (DeiTForImageClassification, DeiTForImageClassificationWithTeacher), with the same module
names, so state_dict() gives the checkpoint's tensor names. Pre-norm layers (layernorm_before/after), exact
erf GELU unless the config says otherwise, patch embedding by a Conv2d with kernel = stride = patch_size, CLS
(and DeiT's distillation) token prepended, learned position embeddings, a final layernorm and a linear head on
token 0 (DeiT with teacher: the mean of cls_classifier(token 0) and distillation_classifier(token 1)).

Writes tests/data/vit/<name>/ for name in
  vit           ViTForImageClassification: image 20, patch 4 (25 patches), hidden 36, 3 heads, intermediate 52,
                2 layers, 7 labels; f32 weights; ViTImageProcessor config (mean = std = 0.5, 20 x 20); N = 2
  deit_teacher  DeiTForImageClassificationWithTeacher: image 20, patch 5 (16 patches), hidden 36, 4 heads
                (head_dim 9), 3 layers, 7 labels; bf16 weights; DeiTImageProcessor config (resize 23, crop
                20, ImageNet mean/std); N = 3
  deit          DeiTForImageClassification: image 24, patch 6, hidden 36, 3 heads, 2 layers, qkv_bias false,
                gelu_new, layer_norm_eps 1e-6; f16 weights; no preprocessor_config.json; N = 2
each with config.json, model.safetensors, pixels.npy [N, 3, H, W] (f32) and logits.npy [N, 7] (computed in
float64 on exactly the stored weights and pixels, saved as f32).

Rerun (deterministic, seeded):  /usr/bin/python3 tools/reference/vit_fixtures.py  (from the repository root)
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_format import Dropout, make_output_dir, randomize, save_npy, seeded_generator, state_dict_as, write_json, \
    write_safetensors  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data", "vit")


def activation(name):
    if name == "gelu":
        return lambda x: nn.functional.gelu(x)
    if name == "gelu_new":  # transformers' NewGELUActivation: the tanh approximation
        return lambda x: 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
    raise ValueError(name)


class PatchEmbeddings(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.projection = nn.Conv2d(c["num_channels"], c["hidden_size"], kernel_size=c["patch_size"],
                                    stride=c["patch_size"])

    def forward(self, pixels):
        return self.projection(pixels).flatten(2).transpose(1, 2)


class Embeddings(nn.Module):
    def __init__(self, c, distilled):
        super().__init__()
        hidden = c["hidden_size"]
        patches = (c["image_size"] // c["patch_size"]) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, hidden))
        if distilled:
            self.distillation_token = nn.Parameter(torch.zeros(1, 1, hidden))
        self.distilled = distilled
        self.patch_embeddings = PatchEmbeddings(c)
        self.position_embeddings = nn.Parameter(torch.zeros(1, patches + (2 if distilled else 1), hidden))
        self.dropout = Dropout(c.get("hidden_dropout_prob") or 0.0)

    def forward(self, pixels):
        embeddings = self.patch_embeddings(pixels)
        batch = embeddings.shape[0]
        tokens = [self.cls_token.expand(batch, -1, -1)]
        if self.distilled:
            tokens.append(self.distillation_token.expand(batch, -1, -1))
        return self.dropout(torch.cat(tokens + [embeddings], dim=1) + self.position_embeddings)


class SelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        hidden = c["hidden_size"]
        self.heads = c["num_attention_heads"]
        self.head_dim = hidden // self.heads
        self.query = nn.Linear(hidden, hidden, bias=c["qkv_bias"])
        self.key = nn.Linear(hidden, hidden, bias=c["qkv_bias"])
        self.value = nn.Linear(hidden, hidden, bias=c["qkv_bias"])
        self.dropout = Dropout(c.get("attention_probs_dropout_prob") or 0.0)

    def forward(self, x):
        b, s, _ = x.shape

        def split(t):
            return t.view(b, s, self.heads, self.head_dim).transpose(1, 2)

        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.head_dim ** -0.5
        context = torch.matmul(self.dropout(torch.softmax(scores, dim=-1)), v)
        return context.transpose(1, 2).reshape(b, s, self.heads * self.head_dim)


class SelfOutput(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c["hidden_size"], c["hidden_size"])
        self.dropout = Dropout(c.get("hidden_dropout_prob") or 0.0)

    def forward(self, x):
        return self.dropout(self.dense(x))


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attention = SelfAttention(c)
        self.output = SelfOutput(c)

    def forward(self, x):
        return self.output(self.attention(x))


class Intermediate(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c["hidden_size"], c["intermediate_size"])
        self.act = activation(c["hidden_act"])

    def forward(self, x):
        return self.act(self.dense(x))


class Output(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c["intermediate_size"], c["hidden_size"])
        self.dropout = Dropout(c.get("hidden_dropout_prob") or 0.0)

    def forward(self, x, residual):
        return self.dropout(self.dense(x)) + residual


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attention = Attention(c)
        self.intermediate = Intermediate(c)
        self.output = Output(c)
        self.layernorm_before = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])
        self.layernorm_after = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])

    def forward(self, x):
        h = self.attention(self.layernorm_before(x)) + x
        return self.output(self.intermediate(self.layernorm_after(h)), h)


class Encoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.layer = nn.ModuleList([Layer(c) for _ in range(c["num_hidden_layers"])])

    def forward(self, x):
        for layer in self.layer:
            x = layer(x)
        return x


class Backbone(nn.Module):
    """ViTModel / DeiTModel without the pooler (add_pooling_layer=False, as the classifiers build it)."""

    def __init__(self, c, distilled):
        super().__init__()
        self.embeddings = Embeddings(c, distilled)
        self.encoder = Encoder(c)
        self.layernorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])

    def forward(self, pixels):
        return self.layernorm(self.encoder(self.embeddings(pixels)))


class ViTForImageClassification(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.vit = Backbone(c, distilled=False)
        self.classifier = nn.Linear(c["hidden_size"], c["num_labels"])

    def forward(self, pixels):
        return self.classifier(self.vit(pixels)[:, 0, :])


class DeiTForImageClassification(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.deit = Backbone(c, distilled=True)
        self.classifier = nn.Linear(c["hidden_size"], c["num_labels"])

    def forward(self, pixels):
        return self.classifier(self.deit(pixels)[:, 0, :])


class DeiTForImageClassificationWithTeacher(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.deit = Backbone(c, distilled=True)
        self.cls_classifier = nn.Linear(c["hidden_size"], c["num_labels"])
        self.distillation_classifier = nn.Linear(c["hidden_size"], c["num_labels"])

    def forward(self, pixels):
        sequence = self.deit(pixels)
        return (self.cls_classifier(sequence[:, 0, :]) + self.distillation_classifier(sequence[:, 1, :])) / 2


LABELS = ["tench", "goldfish", "great white shark", "tiger shark", "hammerhead", "electric ray", "stingray"]


def config_for(model_type, architecture, **overrides):
    c = {
        "architectures": [architecture],
        "model_type": model_type,
        "hidden_size": 36,
        "num_hidden_layers": 2,
        "num_attention_heads": 3,
        "intermediate_size": 52,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
        "initializer_range": 0.02,
        "layer_norm_eps": 1e-12,
        "image_size": 20,
        "patch_size": 4,
        "num_channels": 3,
        "qkv_bias": True,
        "encoder_stride": 4,
        "id2label": {str(i): name for i, name in enumerate(LABELS)},
        "label2id": {name: i for i, name in enumerate(LABELS)},
        "torch_dtype": "float32",
    }
    c.update(overrides)
    c["num_labels"] = len(LABELS)
    return c


def write_fixture(name, model_class, config, stored_dtype, batch, seed, preprocessor=None):
    out = make_output_dir(os.path.join(ROOT, name))
    model = model_class(config).double().eval()
    randomize(model, seeded_generator(seed), stored_dtype)
    pixels = torch.randn(batch, config["num_channels"], config["image_size"], config["image_size"],
                         generator=seeded_generator(seed + 1))
    with torch.no_grad():
        logits = model(pixels.double())
    stored = state_dict_as(model, stored_dtype)
    serialized = dict(config)
    serialized.pop("num_labels")  # transformers derives it from id2label
    write_json(os.path.join(out, "config.json"), serialized)
    write_safetensors(os.path.join(out, "model.safetensors"), stored)
    if preprocessor is not None:
        write_json(os.path.join(out, "preprocessor_config.json"), preprocessor)
    save_npy(os.path.join(out, "pixels.npy"), pixels.numpy())
    save_npy(os.path.join(out, "logits.npy"), logits.numpy())
    print(name, "logits", logits.shape, "max |logit|", float(logits.abs().max()))


def main():
    write_fixture(
        "vit", ViTForImageClassification,
        config_for("vit", "ViTForImageClassification"),
        torch.float32, batch=2, seed=1100,
        preprocessor={
            "do_normalize": True, "do_rescale": True, "do_resize": True,
            "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
            "image_processor_type": "ViTImageProcessor", "resample": 2,
            "rescale_factor": 0.00392156862745098, "size": {"height": 20, "width": 20},
        })
    write_fixture(
        "deit_teacher", DeiTForImageClassificationWithTeacher,
        config_for("deit", "DeiTForImageClassificationWithTeacher", patch_size=5, num_attention_heads=4,
                   num_hidden_layers=3, encoder_stride=5),
        torch.bfloat16, batch=3, seed=1200,
        preprocessor={
            "crop_size": {"height": 20, "width": 20}, "do_center_crop": True, "do_normalize": True,
            "do_rescale": True, "do_resize": True,
            "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225],
            "image_processor_type": "DeiTImageProcessor", "resample": 3,
            "rescale_factor": 0.00392156862745098, "size": {"height": 23, "width": 23},
        })
    write_fixture(
        "deit", DeiTForImageClassification,
        config_for("deit", "DeiTForImageClassification", image_size=24, patch_size=6, qkv_bias=False,
                   hidden_act="gelu_new", layer_norm_eps=1e-6, encoder_stride=6),
        torch.float16, batch=2, seed=1300)


if __name__ == "__main__":
    main()
