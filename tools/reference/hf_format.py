"""Hugging Face file formats for the fixture generators: safetensors and .npy writers, config.json, and the seeded
random weights every reference model uses. Standard library + numpy + torch only (Debian's /usr/bin/python3).

Weights are drawn in float32, rounded to the dtype the file stores, and copied back into the model, so the
reference computes on exactly the stored values."""

import json
import math
import os
import struct

import numpy as np
import torch

SAFETENSORS_DTYPES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
}


def tensor_bytes(tensor):
    """Little-endian raw bytes (x86); bfloat16 has no numpy dtype, so go through its int16 bit pattern."""
    if tensor.dtype == torch.bfloat16:
        return tensor.contiguous().view(torch.int16).numpy().tobytes()
    return tensor.contiguous().numpy().tobytes()


def write_safetensors(path, tensors, metadata=None):
    """safetensors by hand: u64 LE header length, JSON header padded with spaces to a multiple of 8, then the
    tensors' data in name order. Each tensor keeps its own dtype."""
    header = {"__metadata__": metadata or {"format": "pt"}}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        tensor = tensors[name].detach().cpu()
        blob = tensor_bytes(tensor)
        header[name] = {"dtype": SAFETENSORS_DTYPES[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    header_bytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    header_bytes += b" " * (-len(header_bytes) % 8)
    with open(path, "wb") as file:
        file.write(struct.pack("<Q", len(header_bytes)))
        file.write(header_bytes)
        for blob in blobs:
            file.write(blob)


def read_safetensors(path):
    """The tensors of a safetensors file as torch tensors (F64, F32, F16, BF16, I64, I32), read back by a minimal
    reader of its own:
    u64 header length, JSON header, raw little-endian data."""
    with open(path, "rb") as file:
        data = file.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length].decode("utf-8"))
    base = 8 + length
    result = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        raw = data[base + begin:base + end]
        if entry["dtype"] == "BF16":
            tensor = torch.from_numpy(np.frombuffer(raw, dtype="<i2").copy()).view(torch.bfloat16)
        else:
            numpy_dtype = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4"}.get(entry["dtype"])
            if numpy_dtype is None:
                raise ValueError(f"{path}: tensor {name}: dtype {entry['dtype']} is not read here")
            tensor = torch.from_numpy(np.frombuffer(raw, dtype=numpy_dtype).copy())
        result[name] = tensor.reshape(entry["shape"])
    return result


def write_json(path, value):
    with open(path, "w", encoding="utf-8") as file:
        json.dump(value, file, indent=2, ensure_ascii=False)
        file.write("\n")


def save_npy(path, array):
    """float arrays as float32, integer arrays as int32 (what anvil's inputs are)."""
    array = np.asarray(array)
    if array.dtype.kind == "f":
        array = array.astype(np.float32)
    elif array.dtype.kind in "iu":
        array = array.astype(np.int32)
    np.save(path, np.ascontiguousarray(array))


def seeded_generator(seed):
    generator = torch.Generator()
    generator.manual_seed(seed)
    return generator


def randomize(model, generator, stored_dtype=torch.float32, norm_names=("LayerNorm", "layer_norm", "layernorm",
                                                                         "norm", "ln_", "bn", "normalization")):
    """Random weights that keep activations O(1) and make every parameter matter (every bias nonzero).

    Weights of rank >= 2 ~ N(0, 1/fan_in) (fan_in = the product of all axes but the first; embeddings
    ~ N(0, 1)), biases ~ N(0, 0.05^2), norm weights 1 + N(0, 0.1^2) and biases N(0, 0.1^2); BatchNorm running
    means N(0, 0.1^2) and variances 1 + U(0, 0.5). Each value is rounded to `stored_dtype` and copied back."""
    with torch.no_grad():
        for name, parameter in list(model.named_parameters()) + list(model.named_buffers()):
            if not parameter.dtype.is_floating_point:
                continue
            leaf = name.rsplit(".", 1)[-1]
            is_norm = any(part in name for part in norm_names)
            if leaf == "running_mean":
                values = torch.randn(parameter.shape, generator=generator) * 0.1
            elif leaf == "running_var":
                values = 1.0 + torch.rand(parameter.shape, generator=generator) * 0.5
            elif is_norm and parameter.dim() == 1:
                values = torch.randn(parameter.shape, generator=generator) * 0.1
                if leaf == "weight":
                    values += 1.0
            elif parameter.dim() >= 2 and "embed" in name and "patch" not in name:
                values = torch.randn(parameter.shape, generator=generator)
            elif parameter.dim() >= 2:
                fan_in = math.prod(parameter.shape[1:])
                values = torch.randn(parameter.shape, generator=generator) / math.sqrt(fan_in)
            else:
                values = torch.randn(parameter.shape, generator=generator) * 0.05
            parameter.copy_(values.to(stored_dtype).to(parameter.dtype))


def state_dict_as(model, stored_dtype, skip=()):
    """The model's tensors as the checkpoint stores them (floating tensors in `stored_dtype`)."""
    result = {}
    for name, tensor in model.state_dict().items():
        if any(name.endswith(suffix) for suffix in skip):
            continue
        result[name] = tensor.to(stored_dtype) if tensor.dtype.is_floating_point else tensor
    return result


def make_output_dir(path):
    os.makedirs(path, exist_ok=True)
    return path


class Dropout(torch.nn.Module):
    """nn.Dropout(p) where the Hugging Face classes have one, for the reference ports. It is the identity (eval mode,
    inference) unless Dropout.draws holds a numpy Generator: then x * (draws.random(x.shape) >= p) / (1 - p), the
    sites drawing one after another in the order the forward reaches them (anvil's rule: the masks of training step
    s are numpy.random.default_rng([seed, s]), site after site). A site whose p is 0 draws nothing."""

    draws = None

    def __init__(self, p):
        super().__init__()
        self.p = float(p)

    def forward(self, x):
        if Dropout.draws is None or self.p == 0.0:
            return x
        keep = Dropout.draws.random(tuple(x.shape)) >= self.p
        return x * torch.from_numpy(keep).to(x.dtype) / (1.0 - self.p)
