#!/usr/bin/python3
"""Fixtures for anvil's ResNet recipe (tests/test_resnet.cpp), computed with torchvision's own ResNet classes and
with a plain-PyTorch port of Hugging Face's modeling_resnet.py.

Full-size ResNet-18/50 weights are too large to commit, so their weights come from a deterministic generator that
tests/test_resnet.cpp implements bit for bit (deterministic_values below): the test regenerates the checkpoint
in torchvision's naming, and only the inputs and expected logits are committed. For tensor `name` with n
elements: seed = FNV-1a 64 of the name's UTF-8 bytes; element i draws x = splitmix64(seed + i) and
u = (x >> 40) * 2^-24 (24 bits, exact in float32); s = 2u - 1; then by tensor kind, with every product of two
exact values rounded once to float32 and offsets added in float32:
  rank >= 2 (conv, linear weights)   float32(s * float32(sqrt(3 / fan_in)))      fan_in = prod(shape[1:])
  *running_mean                      float32(s * float32(0.1))
  *running_var                       1 + float32(u * float32(0.25))
  rank 1 *.weight (norm scales)      1 + float32(s * float32(0.1))
  rank 1 otherwise (biases)          float32(s * float32(0.1))
and the checkpoint stores each value rounded to its dtype (f16 for the torchvision models); the references
compute in float64 on exactly the stored values.

Writes under tests/data/resnet/ (or --out DIR):
  inputs_a.npy, inputs_b.npy     f32 pixels [2, 3, 40, 36] and [1, 3, 48, 40], N(0, 1), seeded
  resnet18_a.npy, resnet18_b.npy torchvision.models.resnet18() logits [N, 1000] on them, float64 -> f32
  resnet50_b.npy                 torchvision.models.resnet50() logits [1, 1000] on inputs_b
  probe.npy                      f32 [4, 8]: the first 8 stored values of conv1.weight, bn1.weight,
                                 layer1.0.bn1.running_var, fc.bias (f16-rounded) - the generators' handshake
  hf_bottleneck/, hf_basic/      small Hugging Face ResNetForImageClassification folders (config.json with
                                 id2label, model.safetensors: bf16 resp. f32) and logits_a.npy, logits_b.npy

Rerun (deterministic; rewrites the same bytes): /usr/bin/python3 tools/reference/resnet_fixtures.py
Standard library + numpy + torch + torchvision (Debian's python3-torchvision 0.14).
"""

import argparse
import math
import os
import sys

import numpy as np
import torch
from torch import nn
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_format import make_output_dir, save_npy, write_json, write_safetensors  # noqa: E402

MASK64 = (1 << 64) - 1


def fnv1a64(name):
    h = 0xCBF29CE484222325
    for byte in name.encode("utf-8"):
        h ^= byte
        h = (h * 0x100000001B3) & MASK64
    return h


def uniform24(name, count):
    """u in [0, 1) with 24 random bits per element (splitmix64 of seed + i), as float64 (exact)."""
    z = np.uint64(fnv1a64(name)) + np.arange(count, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(40)).astype(np.float64) * 2.0**-24


def deterministic_values(name, shape):
    """float32 values of the tensor `name` (see the module docstring)."""
    count = math.prod(shape)
    u = uniform24(name, count)
    s = 2.0 * u - 1.0
    f32 = np.float32
    if len(shape) >= 2:
        scale = float(f32(math.sqrt(3.0 / math.prod(shape[1:]))))
        values = (s * scale).astype(f32)
    elif name.endswith("running_mean"):
        values = (s * float(f32(0.1))).astype(f32)
    elif name.endswith("running_var"):
        values = f32(1.0) + (u * float(f32(0.25))).astype(f32)
    elif name.endswith(".weight"):
        values = f32(1.0) + (s * float(f32(0.1))).astype(f32)
    else:
        values = (s * float(f32(0.1))).astype(f32)
    return values.astype(f32).reshape(shape)


def fill(model, stored_dtype):
    """Every floating tensor of the state_dict from the generator, rounded to `stored_dtype`; returns the
    checkpoint's tensors (num_batches_tracked left out)."""
    stored = {}
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if not tensor.dtype.is_floating_point:
                continue
            values = torch.from_numpy(deterministic_values(name, tuple(tensor.shape))).to(stored_dtype)
            stored[name] = values
            tensor.copy_(values.to(tensor.dtype))
    return stored


def logits64(model, pixels):
    model = model.double().eval()
    with torch.no_grad():
        return model(torch.from_numpy(pixels).double()).numpy()


# --- Hugging Face's ResNetForImageClassification in plain PyTorch (modeling_resnet.py), same module names ---

ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU}  # ACT2FN: "gelu" is the exact erf GELU


class ResNetConvLayer(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size=3, stride=1, activation="relu"):
        super().__init__()
        self.convolution = nn.Conv2d(in_channels, out_channels, kernel_size=kernel_size, stride=stride,
                                     padding=kernel_size // 2, bias=False)
        self.normalization = nn.BatchNorm2d(out_channels)
        self.activation = ACTIVATIONS[activation]() if activation is not None else nn.Identity()

    def forward(self, x):
        return self.activation(self.normalization(self.convolution(x)))


class ResNetEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embedder = ResNetConvLayer(config["num_channels"], config["embedding_size"], kernel_size=7, stride=2,
                                        activation=config["hidden_act"])
        self.pooler = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)

    def forward(self, x):
        return self.pooler(self.embedder(x))


class ResNetShortCut(nn.Module):
    def __init__(self, in_channels, out_channels, stride=2):
        super().__init__()
        self.convolution = nn.Conv2d(in_channels, out_channels, kernel_size=1, stride=stride, bias=False)
        self.normalization = nn.BatchNorm2d(out_channels)

    def forward(self, x):
        return self.normalization(self.convolution(x))


class ResNetBasicLayer(nn.Module):
    def __init__(self, in_channels, out_channels, stride=1, activation="relu"):
        super().__init__()
        apply_shortcut = in_channels != out_channels or stride != 1
        self.shortcut = ResNetShortCut(in_channels, out_channels, stride) if apply_shortcut else nn.Identity()
        self.layer = nn.Sequential(ResNetConvLayer(in_channels, out_channels, stride=stride),
                                   ResNetConvLayer(out_channels, out_channels, activation=None))
        self.activation = ACTIVATIONS[activation]()

    def forward(self, x):
        return self.activation(self.layer(x) + self.shortcut(x))


class ResNetBottleNeckLayer(nn.Module):
    def __init__(self, in_channels, out_channels, stride=1, activation="relu", reduction=4,
                 downsample_in_bottleneck=False):
        super().__init__()
        apply_shortcut = in_channels != out_channels or stride != 1
        reduced = out_channels // reduction
        self.shortcut = ResNetShortCut(in_channels, out_channels, stride) if apply_shortcut else nn.Identity()
        self.layer = nn.Sequential(
            ResNetConvLayer(in_channels, reduced, kernel_size=1, stride=stride if downsample_in_bottleneck else 1),
            ResNetConvLayer(reduced, reduced, stride=stride if not downsample_in_bottleneck else 1),
            ResNetConvLayer(reduced, out_channels, kernel_size=1, activation=None))
        self.activation = ACTIVATIONS[activation]()

    def forward(self, x):
        return self.activation(self.layer(x) + self.shortcut(x))


class ResNetStage(nn.Module):
    def __init__(self, config, in_channels, out_channels, stride=2, depth=2):
        super().__init__()
        act = config["hidden_act"]
        if config["layer_type"] == "bottleneck":
            first = ResNetBottleNeckLayer(in_channels, out_channels, stride=stride, activation=act,
                                          downsample_in_bottleneck=config["downsample_in_bottleneck"])
            rest = [ResNetBottleNeckLayer(out_channels, out_channels, activation=act) for _ in range(depth - 1)]
        else:
            first = ResNetBasicLayer(in_channels, out_channels, stride=stride, activation=act)
            rest = [ResNetBasicLayer(out_channels, out_channels, activation=act) for _ in range(depth - 1)]
        self.layers = nn.Sequential(first, *rest)

    def forward(self, x):
        return self.layers(x)


class ResNetEncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        sizes, depths = config["hidden_sizes"], config["depths"]
        self.stages = nn.ModuleList([ResNetStage(config, config["embedding_size"], sizes[0],
                                                 stride=2 if config["downsample_in_first_stage"] else 1,
                                                 depth=depths[0])])
        for (in_channels, out_channels), depth in zip(zip(sizes, sizes[1:]), depths[1:]):
            self.stages.append(ResNetStage(config, in_channels, out_channels, depth=depth))

    def forward(self, x):
        for stage in self.stages:
            x = stage(x)
        return x


class ResNetModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embedder = ResNetEmbeddings(config)
        self.encoder = ResNetEncoder(config)
        self.pooler = nn.AdaptiveAvgPool2d((1, 1))

    def forward(self, x):
        return self.pooler(self.encoder(self.embedder(x)))


class ResNetForImageClassification(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.resnet = ResNetModel(config)
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(config["hidden_sizes"][-1], config["num_labels"]))

    def forward(self, x):
        return self.classifier(self.resnet(x))


HF_MODELS = {
    # V1 bottleneck (stride on the first 1x1), no shortcut in the first block (embedding 12 = hidden 12).
    "hf_bottleneck": ({"embedding_size": 12, "hidden_sizes": [12, 20, 28, 36], "depths": [1, 2, 1, 1],
                       "layer_type": "bottleneck", "hidden_act": "relu", "downsample_in_first_stage": False,
                       "downsample_in_bottleneck": True, "labels": ["cat", "dog", "owl", "fox", "emu"]},
                      torch.bfloat16),
    # Basic blocks with a strided shortcut in the first stage and HF's exact GELU.
    "hf_basic": ({"embedding_size": 12, "hidden_sizes": [12, 20, 28, 36], "depths": [1, 2, 1, 1],
                  "layer_type": "basic", "hidden_act": "gelu", "downsample_in_first_stage": True,
                  "downsample_in_bottleneck": False,
                  "labels": ["red", "orange", "yellow", "green", "blue", "indigo", "violet"]},
                 torch.float32),
}


def write_hf(out, name, spec, stored_dtype, inputs):
    spec = dict(spec)
    labels = spec.pop("labels")
    config = {"architectures": ["ResNetForImageClassification"], "model_type": "resnet", "num_channels": 3,
              **spec, "id2label": {str(i): label for i, label in enumerate(labels)},
              "label2id": {label: i for i, label in enumerate(labels)}}
    model = ResNetForImageClassification({**config, "num_labels": len(labels)})
    stored = fill(model, stored_dtype)
    folder = make_output_dir(os.path.join(out, name))
    write_safetensors(os.path.join(folder, "model.safetensors"), stored)
    write_json(os.path.join(folder, "config.json"), config)
    for key, pixels in inputs.items():
        save_npy(os.path.join(folder, f"logits_{key}.npy"), logits64(model, pixels))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default_out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data", "resnet")
    parser.add_argument("--out", default=default_out)
    args = parser.parse_args()
    out = make_output_dir(os.path.normpath(args.out))
    torch.manual_seed(0)

    generator = torch.Generator().manual_seed(2024)
    inputs = {"a": torch.randn((2, 3, 40, 36), generator=generator).numpy(),
              "b": torch.randn((1, 3, 48, 40), generator=generator).numpy()}
    for key, pixels in inputs.items():
        save_npy(os.path.join(out, f"inputs_{key}.npy"), pixels)

    resnet18 = torchvision.models.resnet18()
    stored18 = fill(resnet18, torch.float16)
    for key, pixels in inputs.items():
        save_npy(os.path.join(out, f"resnet18_{key}.npy"), logits64(resnet18, pixels))
    probe = [stored18[name][:].flatten()[:8].float().numpy()
             for name in ("conv1.weight", "bn1.weight", "layer1.0.bn1.running_var", "fc.bias")]
    save_npy(os.path.join(out, "probe.npy"), np.stack(probe))

    resnet50 = torchvision.models.resnet50()
    fill(resnet50, torch.float16)
    save_npy(os.path.join(out, "resnet50_b.npy"), logits64(resnet50, inputs["b"]))

    for name, (spec, stored_dtype) in HF_MODELS.items():
        write_hf(out, name, spec, stored_dtype, inputs)

    for name in sorted(os.listdir(out)):
        if name.endswith(".npy") and name.startswith("resnet"):
            values = np.load(os.path.join(out, name))
            print(f"{name}: shape {values.shape}, |max| {np.abs(values).max():.3f}, std {values.std():.3f}")


if __name__ == "__main__":
    main()
