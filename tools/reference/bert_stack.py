#!/usr/bin/python3
"""PyTorch reference for anvil's BERT-stack benchmark and parity test.

Builds a BERT encoder stack (no embeddings, no pooler) in plain PyTorch, written from Hugging Face's
modeling_bert.py (BertSelfAttention, BertSelfOutput, BertIntermediate, BertOutput, BertLayer) with the module
names HF uses, so state_dict() yields HF tensor names. Writes, under --out DIR:

  model.safetensors   weights in HF naming (encoder.layer.{i}. ...), dtype --dtype, written by hand
  config.json         HF-style config (num_hidden_layers, hidden_size, ...)
  input.npy           f32 [B, S, H] hidden states fed to the stack
  mask.npy            f32 [B, S] attention mask, 1.0 = token, 0.0 = padding
  output.npy          f32 [B, S, H] output of the stack computed in float64 (the parity ground truth)
  pytorch_timing.json the timing line also printed on stdout (when --time-runs > 0)
  model.onnx          float32 stack for an ONNX Runtime baseline (with --onnx)

Weights are drawn once in float32, rounded to --dtype (what the file stores), then upcast exactly, so the float64
reference and the float32 timed model compute on precisely the stored values.

Run with Debian's interpreter (it has numpy and torch): /usr/bin/python3 tools/reference/bert_stack.py --help
Standard library + numpy + torch only.
"""

import argparse
import copy
import json
import math
import os
import statistics
import struct
import sys
import time

# Run the baseline at its best (DESIGN.md "Performance"): before torch (and its BLAS) loads, drop the build
# machines' OpenBLAS overrides and pin both thread pools to --threads when it is given (threads_first.py).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import threads_first  # noqa: E402

threads_first.pin()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

# HF's extended attention mask: (1 - mask) * finfo(dtype).min added to the scores. The float32 minimum is used
# in both precisions so the float64 reference applies the same additive value.
MASK_MIN = float(torch.finfo(torch.float32).min)

STORED_DTYPES = {"f32": (torch.float32, "F32"), "f16": (torch.float16, "F16"), "bf16": (torch.bfloat16, "BF16")}


# ---------------------------------------------------------------------------------------------------------------
# The model, following modeling_bert.py (dropout omitted: inference only).

class BertSelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        if hidden % heads != 0:
            raise ValueError(f"hidden size {hidden} is not a multiple of the number of heads {heads}")
        self.num_attention_heads = heads
        self.attention_head_size = hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)

    def transpose_for_scores(self, x):  # [B, S, H] -> [B, A, S, H/A]
        return x.view(x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)).permute(0, 2, 1, 3)

    def forward(self, hidden_states, extended_mask):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        scores = torch.matmul(query_layer, key_layer.transpose(-1, -2)) / math.sqrt(self.attention_head_size)
        scores = scores + extended_mask
        probs = torch.softmax(scores, dim=-1)
        context = torch.matmul(probs, value_layer).permute(0, 2, 1, 3).contiguous()
        return context.view(context.size()[:-2] + (self.num_attention_heads * self.attention_head_size,))


class BertSelfOutput(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, hidden_states, input_tensor):
        return self.LayerNorm(self.dense(hidden_states) + input_tensor)


class BertAttention(nn.Module):
    def __init__(self, hidden, heads, eps):
        super().__init__()
        self.self = BertSelfAttention(hidden, heads)
        self.output = BertSelfOutput(hidden, eps)

    def forward(self, hidden_states, extended_mask):
        return self.output(self.self(hidden_states, extended_mask), hidden_states)


class BertIntermediate(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.dense = nn.Linear(hidden, intermediate)

    def forward(self, hidden_states):
        return nn.functional.gelu(self.dense(hidden_states))  # HF "gelu": the exact erf form


class BertOutput(nn.Module):
    def __init__(self, hidden, intermediate, eps):
        super().__init__()
        self.dense = nn.Linear(intermediate, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, hidden_states, input_tensor):
        return self.LayerNorm(self.dense(hidden_states) + input_tensor)


class BertLayer(nn.Module):
    def __init__(self, hidden, heads, intermediate, eps):
        super().__init__()
        self.attention = BertAttention(hidden, heads, eps)
        self.intermediate = BertIntermediate(hidden, intermediate)
        self.output = BertOutput(hidden, intermediate, eps)

    def forward(self, hidden_states, extended_mask):
        attention_output = self.attention(hidden_states, extended_mask)
        return self.output(self.intermediate(attention_output), attention_output)


class BertEncoder(nn.Module):
    def __init__(self, layers, hidden, heads, intermediate, eps):
        super().__init__()
        self.layer = nn.ModuleList([BertLayer(hidden, heads, intermediate, eps) for _ in range(layers)])

    def forward(self, hidden_states, extended_mask):
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states, extended_mask)
        return hidden_states


class BertStack(nn.Module):
    """The encoder alone; the extra level gives state_dict() names the "encoder." prefix HF checkpoints use."""

    def __init__(self, layers, hidden, heads, intermediate, eps):
        super().__init__()
        self.encoder = BertEncoder(layers, hidden, heads, intermediate, eps)

    def forward(self, hidden_states, attention_mask):
        # [B, S] -> [B, 1, 1, S], broadcast over heads and query positions, as BertModel.get_extended_attention_mask
        extended_mask = (1.0 - attention_mask[:, None, None, :].to(hidden_states.dtype)) * MASK_MIN
        return self.encoder(hidden_states, extended_mask)


# ---------------------------------------------------------------------------------------------------------------
# Weights, inputs and files.

def init_weights(model, stored_dtype, generator):
    """Random weights that keep activations O(1) and make every parameter matter (all biases nonzero).

    Linear weights ~ N(0, 1/fan_in) (for BERT-base's 768 that is std 0.036, near HF's 0.02, but it also keeps
    small test configs' attention scores O(1) so the softmax is far from uniform), biases ~ N(0, 0.05^2),
    LayerNorm weight 1 + N(0, 0.1^2), bias N(0, 0.1^2). Each value is rounded to the stored dtype."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "LayerNorm" in name:
                values = torch.randn(parameter.shape, generator=generator) * 0.1
                if name.endswith(".weight"):
                    values += 1.0
            elif name.endswith(".weight"):
                values = torch.randn(parameter.shape, generator=generator) / math.sqrt(parameter.shape[1])
            else:
                values = torch.randn(parameter.shape, generator=generator) * 0.05
            parameter.copy_(values.to(stored_dtype).to(torch.float32))


def make_mask(batch, seq, pad):
    lengths = [seq] * batch
    if pad:
        lengths = [int(v) for v in pad.split(",")]
        if len(lengths) == 1:
            lengths = lengths * batch
        if len(lengths) != batch or any(not 1 <= n <= seq for n in lengths):
            sys.exit(f"--pad {pad}: expected one length per batch row ({batch}) or a single length, "
                     f"each in [1, {seq}]")
    mask = np.zeros((batch, seq), dtype=np.float32)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1.0
    return mask, lengths


def tensor_bytes(tensor):
    """Little-endian raw bytes (x86); bfloat16 has no numpy dtype, so go through its int16 bit pattern."""
    if tensor.dtype == torch.bfloat16:
        return tensor.contiguous().view(torch.int16).numpy().tobytes()
    return tensor.contiguous().numpy().tobytes()


def write_safetensors(path, tensors, dtype_name, metadata):
    """safetensors by hand: u64 LE header length, JSON header padded with spaces to a multiple of 8, data.

    Tensors are laid out by name, as HF's writer orders tensors of one dtype."""
    header = {"__metadata__": metadata}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        blob = tensor_bytes(tensors[name])
        header[name] = {"dtype": dtype_name, "shape": list(tensors[name].shape),
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


# ---------------------------------------------------------------------------------------------------------------
# Independent check (--verify): re-read the files with a separate reader and recompute in numpy float64.

def read_safetensors(path):
    decoders = {"F32": np.float32, "F16": np.float16}
    with open(path, "rb") as file:
        data = file.read()
    (header_length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_length].decode("utf-8"))
    base = 8 + header_length
    tensors = {}
    end_of_data = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = data[base + begin:base + end]
        if info["dtype"] == "BF16":  # bfloat16 is the top half of a float32
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            values = bits.view(np.float32)
        else:
            values = np.frombuffer(raw, dtype=np.dtype(decoders[info["dtype"]]).newbyteorder("<"))
        if values.size != math.prod(info["shape"]):
            raise ValueError(f"{name}: {values.size} values for shape {info['shape']}")
        tensors[name] = values.astype(np.float64).reshape(info["shape"])
        end_of_data = max(end_of_data, end)
    if base + end_of_data != len(data):
        raise ValueError(f"data section ends at {base + end_of_data}, file has {len(data)} bytes")
    return header, tensors


def numpy_stack(weights, config, hidden_states, mask):
    """The BERT stack in numpy float64, written from the math rather than from the torch module above."""
    erf = np.vectorize(math.erf)
    eps = config["layer_norm_eps"]
    heads = config["num_attention_heads"]
    batch, seq, hidden = hidden_states.shape
    head_size = hidden // heads

    def linear(x, prefix):
        return x @ weights[prefix + ".weight"].T + weights[prefix + ".bias"]

    def layer_norm(x, prefix):
        mean = x.mean(axis=-1, keepdims=True)
        variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
        return (x - mean) / np.sqrt(variance + eps) * weights[prefix + ".weight"] + weights[prefix + ".bias"]

    x = hidden_states.astype(np.float64)
    additive = np.where(mask > 0.5, 0.0, MASK_MIN)  # [B, S] over key positions
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        q, k, v = (linear(x, p + "attention.self." + n).reshape(batch, seq, heads, head_size)
                   for n in ("query", "key", "value"))
        context = np.empty((batch, seq, heads, head_size))
        for b in range(batch):
            for h in range(heads):
                scores = q[b, :, h, :] @ k[b, :, h, :].T / math.sqrt(head_size) + additive[b][None, :]
                scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
                context[b, :, h, :] = (scores / scores.sum(axis=-1, keepdims=True)) @ v[b, :, h, :]
        attention = layer_norm(linear(context.reshape(batch, seq, hidden), p + "attention.output.dense") + x,
                               p + "attention.output.LayerNorm")
        inner = linear(attention, p + "intermediate.dense")
        inner = 0.5 * inner * (1.0 + erf(inner / math.sqrt(2.0)))
        x = layer_norm(linear(inner, p + "output.dense") + attention, p + "output.LayerNorm")
    return x


def verify(out_dir, model_f32, stored_dtype):
    with open(os.path.join(out_dir, "config.json")) as file:
        config = json.load(file)
    header, weights = read_safetensors(os.path.join(out_dir, "model.safetensors"))
    hidden_states = np.load(os.path.join(out_dir, "input.npy"))
    mask = np.load(os.path.join(out_dir, "mask.npy"))
    reference = np.load(os.path.join(out_dir, "output.npy")).astype(np.float64)

    expected_names = set(model_f32.state_dict())
    stored_names = set(weights)
    if stored_names != expected_names:
        raise SystemExit(f"verify: names differ: {sorted(stored_names ^ expected_names)}")
    for name, tensor in model_f32.state_dict().items():
        if header[name]["dtype"] != STORED_DTYPES[stored_dtype][1]:
            raise SystemExit(f"verify: {name} stored as {header[name]['dtype']}")
        if not np.array_equal(weights[name], tensor.double().numpy()):
            raise SystemExit(f"verify: {name} read back differs from the model's weight")

    numpy_out = numpy_stack(weights, config, hidden_states, mask)
    with torch.inference_mode():
        torch_f32 = model_f32(torch.from_numpy(hidden_states), torch.from_numpy(mask)).double().numpy()
    result = {
        "numpy_f64_vs_output_max_abs": float(np.abs(numpy_out - reference).max()),
        "torch_f32_vs_output_max_abs": float(np.abs(torch_f32 - reference).max()),
        "output_rms": float(np.sqrt((reference ** 2).mean())),
        "output_max_abs": float(np.abs(reference).max()),
        "tensors": len(stored_names),
    }
    print("verify: " + json.dumps(result), file=sys.stderr)
    # output.npy is the float64 result rounded to f32 (relative error 6e-8); the f32 torch run drifts ~1e-6.
    if result["numpy_f64_vs_output_max_abs"] > 1e-6 or result["torch_f32_vs_output_max_abs"] > 1e-4:
        raise SystemExit("verify: FAILED")
    print("verify: ok", file=sys.stderr)


# ---------------------------------------------------------------------------------------------------------------

def blas_summary():
    """Which BLAS / oneDNN this torch build computes with, from torch.__config__.show()."""
    shown = torch.__config__.show()
    blas = capability = onednn = ""
    for line in shown.splitlines():
        if "BLAS_INFO=" in line:
            blas = line.split("BLAS_INFO=")[1].split(",")[0]
        if "CPU capability usage:" in line:
            capability = line.split("CPU capability usage:")[1].strip()
        if "MKL-DNN" in line:
            onednn = line.strip(" -")
    # BLAS_INFO=generic means the system libblas.so.3, which Debian's alternatives usually point at OpenBLAS.
    return {
        "blas": blas,
        "libblas": os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3"),
        "onednn": onednn,
        "mkl": torch.backends.mkl.is_available(),
        "mkldnn": torch.backends.mkldnn.is_available(),
        "openmp": torch.backends.openmp.is_available(),
        "cpu_capability": capability,
    }


def time_forward(model, hidden_states, mask, runs, warmup):
    times = []
    with torch.inference_mode():
        for _ in range(warmup):
            model(hidden_states, mask)
        for _ in range(runs):
            start = time.perf_counter()
            model(hidden_states, mask)
            times.append((time.perf_counter() - start) * 1e3)
    return min(times), statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--intermediate", type=int, default=0, help="default 4 * hidden")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--out", required=True, help="output folder (created)")
    parser.add_argument("--time-runs", type=int, default=20, help="timed float32 forwards; 0 = no timing")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--pad", default="", help="per-row valid lengths, e.g. 128,100; later positions masked")
    parser.add_argument("--dtype", choices=sorted(STORED_DTYPES), default="f32", help="stored weight dtype")
    parser.add_argument("--onnx", action="store_true", help="also export the float32 stack to model.onnx")
    parser.add_argument("--verify", action="store_true",
                        help="re-read the written files and check them against a numpy float64 forward")
    parser.add_argument("--show-config", action="store_true", help="print torch.__config__.show() to stderr")
    args = parser.parse_args()
    intermediate = args.intermediate or 4 * args.hidden
    eps = 1e-12

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    os.makedirs(args.out, exist_ok=True)

    model = BertStack(args.layers, args.hidden, args.heads, intermediate, eps).eval()
    init_weights(model, STORED_DTYPES[args.dtype][0], generator)
    hidden_states = torch.randn((args.batch, args.seq, args.hidden), generator=generator)
    mask_np, lengths = make_mask(args.batch, args.seq, args.pad)
    mask = torch.from_numpy(mask_np)

    config = {"num_hidden_layers": args.layers, "hidden_size": args.hidden, "num_attention_heads": args.heads,
              "intermediate_size": intermediate, "layer_norm_eps": eps, "hidden_act": "gelu"}
    with open(os.path.join(args.out, "config.json"), "w") as file:
        json.dump(config, file, indent=2)
        file.write("\n")
    stored = {name: t.to(STORED_DTYPES[args.dtype][0]) for name, t in model.state_dict().items()}
    write_safetensors(os.path.join(args.out, "model.safetensors"), stored, STORED_DTYPES[args.dtype][1],
                      {"format": "pt", "seed": str(args.seed), "lengths": ",".join(map(str, lengths))})
    np.save(os.path.join(args.out, "input.npy"), hidden_states.numpy())
    np.save(os.path.join(args.out, "mask.npy"), mask_np)

    model_f64 = copy.deepcopy(model).double()
    with torch.inference_mode():
        reference = model_f64(hidden_states.double(), mask.double())
    np.save(os.path.join(args.out, "output.npy"), reference.float().numpy())

    if args.verify:
        verify(args.out, model, args.dtype)
    if args.show_config:
        print(torch.__config__.show(), file=sys.stderr)

    # Files a previous run left would no longer match these weights.
    for stale in ("model.onnx", "pytorch_timing.json", "ort_timing.json"):
        if os.path.exists(os.path.join(args.out, stale)):
            os.remove(os.path.join(args.out, stale))

    if args.onnx:
        torch.onnx.export(model, (hidden_states, mask), os.path.join(args.out, "model.onnx"),
                          input_names=["hidden_states", "attention_mask"], output_names=["last_hidden_state"],
                          dynamic_axes={"hidden_states": {0: "batch", 1: "seq"},
                                        "attention_mask": {0: "batch", 1: "seq"},
                                        "last_hidden_state": {0: "batch", 1: "seq"}},
                          opset_version=14, do_constant_folding=True)

    if args.time_runs > 0:
        best, median = time_forward(model, hidden_states, mask, args.time_runs, args.warmup)
        timing = {"pytorch_ms_best": round(best, 3), "pytorch_ms_median": round(median, 3),
                  "threads": torch.get_num_threads(), "torch": torch.__version__,
                  "layers": args.layers, "hidden": args.hidden, "heads": args.heads,
                  "intermediate": intermediate, "batch": args.batch, "seq": args.seq, "runs": args.time_runs,
                  "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS", ""),
                  "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "")}
        timing.update(blas_summary())
        line = json.dumps(timing)
        print(line)
        with open(os.path.join(args.out, "pytorch_timing.json"), "w") as file:
            file.write(line + "\n")


if __name__ == "__main__":
    main()
